//! The operator as a child process: the real `forgerunner run`, configured only through a
//! kubeconfig, flags and environment, so what runs here is what runs in a cluster.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// Lines of operator output kept for failure reports.
const KEPT_LINES: usize = 4000;

/// Hidden first argument that turns a testkit executable (sandbox, bench) into the operator;
/// see [`run_embedded_operator_if_asked`] and [`OperatorCommand::embedded`].
pub const EMBEDDED_OPERATOR_SUBCOMMAND: &str = "__operator";

/// When this process was started as `<exe> __operator <args>…`, runs the operator's CLI on
/// `<args>` and returns its exit code; otherwise `None`, and the caller goes on as itself.
/// Call it first thing in `main` of an executable that embeds the operator.
pub fn run_embedded_operator_if_asked() -> Option<ExitCode> {
    let mut argv = std::env::args_os().skip(1);
    if argv.next()? != EMBEDDED_OPERATOR_SUBCOMMAND {
        return None;
    }
    // The operator's CLI expects a program name first: the one it is known by.
    let rest = std::iter::once(OsString::from("forgerunner")).chain(argv);
    Some(forgerunner::main_with_args(rest))
}

/// How to start the operator: a program and the arguments before `run`.
#[derive(Clone, Debug)]
pub struct OperatorCommand {
    program: PathBuf,
    prefix: Vec<OsString>,
}

impl OperatorCommand {
    /// The `forgerunner` binary at `path` (tests use `env!("CARGO_BIN_EXE_forgerunner")`).
    pub fn binary(path: impl Into<PathBuf>) -> OperatorCommand {
        OperatorCommand {
            program: path.into(),
            prefix: Vec::new(),
        }
    }

    /// This executable re-run with `subcommand`, which must hand the rest of its arguments to
    /// the operator's CLI (the sandbox and the benchmark embed the operator this way).
    pub fn self_exec(subcommand: &str) -> std::io::Result<OperatorCommand> {
        Ok(OperatorCommand {
            program: std::env::current_exe()?,
            prefix: vec![subcommand.into()],
        })
    }

    /// This executable re-run as the embedded operator ([`EMBEDDED_OPERATOR_SUBCOMMAND`]); its
    /// `main` must call [`run_embedded_operator_if_asked`].
    pub fn embedded() -> std::io::Result<OperatorCommand> {
        OperatorCommand::self_exec(EMBEDDED_OPERATOR_SUBCOMMAND)
    }
}

/// Settings of one operator process.
#[derive(Clone, Debug)]
pub struct OperatorSettings {
    /// Enabled forges, e.g. `["github", "gitea", "forgejo"]` (the default: every forge).
    pub forges: Vec<String>,
    /// `info`, `debug`, …
    pub log_level: String,
    /// Pod name reported (Events, lease holder).
    pub pod_name: String,
    /// Leader election on (needs a lease namespace; the world uses `default`).
    pub leader_election: bool,
    /// Extra environment, e.g. `FORGERUNNER_FORGE_HOSTS_ALLOWED` or `FORGERUNNER_LEADER_ELECTION_*` timings.
    pub env: Vec<(String, String)>,
}

impl Default for OperatorSettings {
    fn default() -> Self {
        OperatorSettings {
            forges: vec!["github".into(), "gitea".into(), "forgejo".into()],
            log_level: "info".into(),
            pod_name: "forgerunner-0".into(),
            leader_election: false,
            env: Vec::new(),
        }
    }
}

/// A running operator process; killed when dropped.
pub struct OperatorProcess {
    child: Child,
    listening: watch::Receiver<Listening>,
    lines: Arc<Mutex<VecDeque<String>>>,
}

/// Where the operator listens, as it reports once bound, and whether its output has ended.
///
/// The operator binds port 0 itself and names the port it got: a port picked here, closed and
/// handed over by number could be taken by another test's server in between.
#[derive(Clone, Debug, Default)]
struct Listening {
    http: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
    /// Both output pipes closed: the process has ended, nothing more will be reported.
    ended: bool,
}

impl Listening {
    /// Takes in the listener an operator log line names (its `listener` and `addr` fields).
    fn learn(&mut self, line: &str) {
        let Ok(serde_json::Value::Object(fields)) = serde_json::from_str(line) else {
            return;
        };
        let addr = fields
            .get("addr")
            .and_then(|a| a.as_str())
            .and_then(|a| a.parse::<SocketAddr>().ok());
        match (fields.get("listener").and_then(|l| l.as_str()), addr) {
            (Some("http"), Some(a)) => self.http = Some(a),
            (Some("metrics"), Some(a)) => self.metrics = Some(a),
            _ => {}
        }
    }
}

/// How long the operator may take to connect and bind its listeners.
const LISTEN_DEADLINE: Duration = Duration::from_secs(120);

/// The operator did not report a listener.
#[derive(Debug, thiserror::Error)]
#[error("the operator reported no {listener} listener ({why}); its last output:\n{tail}")]
pub struct NotListening {
    listener: &'static str,
    why: &'static str,
    tail: String,
}

/// The log filter the operator is given: `level`, with the line naming each bound listener
/// always let through (the harness learns the ports from it).
fn log_filter(level: &str) -> String {
    format!("{level},forgerunner::run=info")
}

impl OperatorProcess {
    /// Starts `forgerunner run` against the cluster of `kubeconfig`.
    pub fn spawn(
        command: &OperatorCommand,
        kubeconfig: &Path,
        settings: &OperatorSettings,
    ) -> std::io::Result<OperatorProcess> {
        let mut cmd = Command::new(&command.program);
        // The operator refuses unknown FORGERUNNER_* variables; pass only the ones set here.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("FORGERUNNER_") {
                cmd.env_remove(key);
            }
        }
        let mut child = cmd
            .args(&command.prefix)
            .arg("run")
            .args(["--http-addr", "127.0.0.1:0"])
            // Metrics on their own listener, as the chart runs the operator.
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(["--forges", &settings.forges.join(",")])
            .args([
                "--log-format",
                "json",
                "--log-level",
                &log_filter(&settings.log_level),
            ])
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", &settings.pod_name)
            .env("POD_NAMESPACE", "default")
            // The chart sets it from status.podIP; here every instance is on loopback.
            .env("POD_IP", "127.0.0.1")
            .env(
                "FORGERUNNER_LEADER_ELECTION_ENABLED",
                settings.leader_election.to_string(),
            )
            .envs(settings.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let lines = Arc::new(Mutex::new(VecDeque::new()));
        let (listening_tx, listening) = watch::channel(Listening::default());
        let listening_tx = Arc::new(listening_tx);
        let pipes: [Option<Box<dyn Read + Send>>; 2] = [
            child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
            child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
        ];
        let open_pipes = Arc::new(std::sync::atomic::AtomicUsize::new(
            pipes.iter().flatten().count(),
        ));
        for pipe in pipes.into_iter().flatten() {
            let sink = lines.clone();
            let (tx, open) = (listening_tx.clone(), open_pipes.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if line.contains("\"listener\"") {
                        tx.send_modify(|l| l.learn(&line));
                    }
                    if let Ok(mut kept) = sink.lock() {
                        if kept.len() == KEPT_LINES {
                            kept.pop_front();
                        }
                        kept.push_back(line);
                    }
                }
                if open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
                    tx.send_modify(|l| l.ended = true);
                }
            });
        }
        Ok(OperatorProcess {
            child,
            listening,
            lines,
        })
    }

    /// Waits until the operator reports the listener `pick` finds, for at most
    /// [`LISTEN_DEADLINE`].
    async fn listener(
        &self,
        name: &'static str,
        pick: fn(&Listening) -> Option<SocketAddr>,
    ) -> Result<SocketAddr, NotListening> {
        let mut rx = self.listening.clone();
        let waited =
            tokio::time::timeout(LISTEN_DEADLINE, rx.wait_for(|l| pick(l).is_some() || l.ended)).await;
        let why = match waited {
            Ok(Ok(l)) => match pick(&l) {
                Some(addr) => return Ok(addr),
                None => "it exited",
            },
            Ok(Err(_)) => "its output readers are gone",
            Err(_) => "not within the deadline",
        };
        Err(NotListening {
            listener: name,
            why,
            tail: self.output_tail(40),
        })
    }

    /// Process id (for `/proc` readings).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Address of the operator's HTTP server: webhooks and the probes (`/healthz`, `/readyz`),
    /// once the operator has bound it.
    pub async fn http_addr(&self) -> Result<SocketAddr, NotListening> {
        self.listener("http", |l| l.http).await
    }

    /// Address of the operator's metrics listener (`--metrics-addr`): `/metrics` and the probes,
    /// once the operator has bound it. `/metrics` is not served on [`OperatorProcess::http_addr`].
    pub async fn metrics_addr(&self) -> Result<SocketAddr, NotListening> {
        self.listener("metrics", |l| l.metrics).await
    }

    /// The last lines the operator printed.
    pub fn output(&self) -> Vec<String> {
        self.lines
            .lock()
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The last `count` lines the operator printed, oldest first, one per line (for failure
    /// messages).
    pub fn output_tail(&self, count: usize) -> String {
        let lines = self.output();
        let skip = lines.len().saturating_sub(count);
        lines.into_iter().skip(skip).collect::<Vec<_>>().join("\n")
    }

    /// Whether the process has exited (and with what status).
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Asks the operator to stop (SIGTERM) and waits up to `grace` before killing it.
    pub fn stop(&mut self, grace: std::time::Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.exit_status() {
                return Some(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }

    /// Kills the process at once (SIGKILL), as a crash or a node loss would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Peak resident memory (VmHWM) in MiB and CPU seconds (user + system) so far.
    pub fn resource_usage(&self) -> Option<(f64, f64)> {
        proc_usage(self.pid())
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads peak RSS (MiB) and CPU seconds of a process from `/proc` (Linux only).
pub fn proc_usage(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, i.e. 11 and 12 after the state field.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((hwm_kib / 1024.0, (utime + stime) / clock_ticks_per_second()))
}

/// `sysconf(_SC_CLK_TCK)` via `getconf` (no unsafe code); 100 on every Linux we run on.
fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listeners_come_from_their_structured_fields_only() {
        let mut l = Listening::default();
        l.learn(
            r#"{"level":"INFO","message":"serving webhooks","listener":"http","addr":"127.0.0.1:41001"}"#,
        );
        l.learn(
            r#"{"level":"INFO","message":"serving /metrics","listener":"metrics","addr":"127.0.0.1:41002"}"#,
        );
        // A line naming an address without saying which listener, and text, change nothing.
        l.learn(r#"{"level":"INFO","message":"listening","addr":"127.0.0.1:9"}"#);
        l.learn("listener http addr 127.0.0.1:9");
        l.learn(r#"{"listener":"http","addr":"not an address"}"#);
        assert_eq!(l.http, "127.0.0.1:41001".parse().ok());
        assert_eq!(l.metrics, "127.0.0.1:41002".parse().ok());
        assert!(!l.ended);
    }

    #[test]
    fn the_harness_always_sees_the_listener_lines() {
        let filter = log_filter("warn");
        assert_eq!(filter, "warn,forgerunner::run=info");
        // The operator refuses a log level its filter cannot parse.
        assert!(tracing_subscriber::EnvFilter::try_new(&filter).is_ok());
    }
}
