//! The operator as a child process: the real `forgerunner run`, configured only through a
//! kubeconfig, flags and environment, so what runs here is what runs in a cluster.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};

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
    http_addr: SocketAddr,
    metrics_addr: SocketAddr,
    lines: Arc<Mutex<VecDeque<String>>>,
}

/// A free loopback port, picked by the OS.
fn free_port() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.local_addr()
}

impl OperatorProcess {
    /// Starts `forgerunner run` against the cluster of `kubeconfig`.
    pub fn spawn(
        command: &OperatorCommand,
        kubeconfig: &Path,
        settings: &OperatorSettings,
    ) -> std::io::Result<OperatorProcess> {
        let http_addr = free_port()?;
        // Metrics on their own listener, as the chart runs the operator.
        let metrics_addr = free_port()?;
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
            .args(["--http-addr", &http_addr.to_string()])
            .args(["--metrics-addr", &metrics_addr.to_string()])
            .args(["--forges", &settings.forges.join(",")])
            .args(["--log-format", "json", "--log-level", &settings.log_level])
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
        let pipes: [Option<Box<dyn Read + Send>>; 2] = [
            child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
            child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
        ];
        for pipe in pipes.into_iter().flatten() {
            let sink = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if let Ok(mut kept) = sink.lock() {
                        if kept.len() == KEPT_LINES {
                            kept.pop_front();
                        }
                        kept.push_back(line);
                    }
                }
            });
        }
        Ok(OperatorProcess {
            child,
            http_addr,
            metrics_addr,
            lines,
        })
    }

    /// Process id (for `/proc` readings).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Address of the operator's HTTP server: webhooks and the probes (`/healthz`, `/readyz`).
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// Address of the operator's metrics listener (`--metrics-addr`): `/metrics` and the probes.
    /// `/metrics` is not served on [`OperatorProcess::http_addr`].
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
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
