//! The pod contract of the simulated forgejo-runner: which of the two pod shapes the operator
//! made, read from the played container's command, args, env and mounted files.
//!
//! - **one-job** (Forgejo 15): `command: ["forgejo-runner"]`, `args: ["one-job", "--wait",
//!   "--url", U, "--uuid", ID, "--token-url", "file:/var/run/forgejo-runner/token", "--handle",
//!   H, "--label", L, …]`; `--handle`, `--wait` and `--fetch-interval` are optional, `--flag=value`
//!   works too. `--url`, `--uuid`, `--token-url` must come together; `--token-url` accepts only
//!   `file:<path>` (`$CREDENTIALS_DIRECTORY` expanded from the env) and the file must be mounted.
//!   Without any of the three, `one-job` runs as the runner of the state file [`STATE_FILE`]
//!   (the legacy `.runner` in `/data`) a `register` container left on the shared emptyDir.
//! - **register** (Forgejo 11–14, an init container): `command: ["/bin/sh", "-c"]` (the script
//!   is not read), env `FORGEJO_INSTANCE_URL`, `FORGEJO_RUNNER_NAME` (default: the pod name),
//!   `FORGEJO_RUNNER_LABELS` (comma-separated labels), and the registration token mounted at
//!   `/var/run/forgejo-runner/registration-token`; it writes [`STATE_FILE`] and exits.
//!
//! Labels follow forgejo-runner's syntax (`name[:scheme[:arg]]`); only the names are declared,
//! the full labels decide whether `one-job` needs a Docker daemon ([`super::config_check`]).
//!
//! A config file (`one-job --config P`, `-c P`; for `register`, the env `CONFIG_FILE`, which
//! the operator's script turns into `--config "$CONFIG_FILE"`) must be a mounted file
//! (`internal/pkg/config/config.go` `FromFile`: "cannot open config file"). Of its settings the
//! sim reads `runner.labels` and `server.connections`: `runner.labels` replaces the labels of
//! `register` (`internal/app/cmd/register.go`: "Labels from command will be ignored") and those
//! of the state file (`FromRegistration` gives them `overrideIfPossible`), but not `--label`
//! flags (`config.New` applies the default labels to a connection only without labels); a
//! config with `server.connections` conflicts with the connection flags
//! (`internal/app/cmd/args.go` `connectionFromArguments`) and with the state file.

use std::time::Duration;

use super::labels::label_name;
use crate::sim::behaviour::PodInfo;

/// Where the one-job shape mounts the runner's own token.
pub const TOKEN_FILE: &str = "/var/run/forgejo-runner/token";
/// Where the register shape mounts the registration token.
pub const REGISTRATION_TOKEN_FILE: &str = "/var/run/forgejo-runner/registration-token";
/// The runner state file `register` writes and a flag-less `one-job` reads (working dir `/data`).
pub const STATE_FILE: &str = "/data/.runner";

/// The runner the pod asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodShape {
    /// `forgejo-runner one-job` with a runner created over REST (v15).
    OneJob {
        /// Instance URL.
        url: String,
        /// Runner UUID.
        uuid: String,
        /// Runner token (from the `--token-url` file).
        token: String,
        /// Job handle to bind to; any matching job if `None`.
        handle: Option<String>,
        /// Label names.
        labels: Vec<String>,
        /// The labels as given (`name:scheme://arg`): what `configCheck` reads.
        full_labels: Vec<String>,
        /// `--wait`: poll until a task arrives (else exit 2 on the first empty poll).
        wait: bool,
        /// `--fetch-interval`, if given.
        fetch_interval: Option<Duration>,
        /// `--config`, if given (the file was read; its labels are already applied).
        config: Option<String>,
    },
    /// `forgejo-runner register` with a registration token (v11–14), writing [`STATE_FILE`].
    Register {
        /// Instance URL.
        url: String,
        /// Runner name.
        name: String,
        /// Label names.
        labels: Vec<String>,
        /// The labels as given (`name:scheme://arg`), as the state file keeps them.
        full_labels: Vec<String>,
        /// Registration token.
        token: String,
        /// `CONFIG_FILE`, if set (the file was read; its labels are already applied).
        config: Option<String>,
    },
}

/// What the sim reads of a forgejo-runner config file.
#[derive(Default)]
struct RunnerConfig {
    /// `runner.labels`.
    labels: Vec<String>,
    /// `server.connections` holds at least one connection.
    has_connections: bool,
}

/// Reads the config file at `path` as `config.FromFile` does: it must exist (a mounted file)
/// and be YAML.
fn read_config(pod: &PodInfo, path: &str) -> Result<RunnerConfig, String> {
    let text = pod
        .files
        .get(path)
        .ok_or_else(|| format!("cannot open config file {path:?}: no such file"))?;
    let v: serde_yaml::Value =
        serde_yaml::from_str(text).map_err(|e| format!("cannot parse config file {path:?}: {e}"))?;
    let labels = v["runner"]["labels"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str().map(str::to_string))
        .collect();
    let has_connections = v["server"]["connections"]
        .as_mapping()
        .is_some_and(|m| !m.is_empty());
    Ok(RunnerConfig {
        labels,
        has_connections,
    })
}

fn names<'a>(labels: impl IntoIterator<Item = &'a str>) -> Result<Vec<String>, String> {
    labels
        .into_iter()
        .map(|l| label_name(l).map(str::to_string))
        .collect()
}

/// A Go duration of the simple kind (`2s`, `500ms`, `1m`, `1.5s`).
fn go_duration(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

fn file(pod: &PodInfo, path: &str) -> Result<String, String> {
    pod.files
        .get(path)
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("{path}: no such file"))
}

fn one_job(pod: &PodInfo, args: &[String]) -> Result<PodShape, String> {
    let (mut url, mut uuid, mut token_url, mut handle) = (None, None, None, None);
    let (mut labels, mut wait, mut fetch_interval) = (Vec::new(), false, None);
    let mut config_path: Option<String> = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        if matches!(flag, "--wait" | "-w") {
            wait = inline.as_deref().is_none_or(|v| v == "true");
            continue;
        }
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("flag needs an argument: {flag}"))
        };
        match flag {
            "--url" => url = Some(value()?),
            "--uuid" => uuid = Some(value()?),
            "--token-url" => token_url = Some(value()?),
            "--handle" => handle = Some(value()?),
            "--config" | "-c" => config_path = Some(value()?),
            "--label" => labels.push(value()?),
            "--fetch-interval" => {
                let v = value()?;
                fetch_interval = Some(go_duration(&v).ok_or_else(|| format!("invalid duration {v:?}"))?);
            }
            other => return Err(format!("unknown flag: {other}")),
        }
    }
    let config = match config_path.as_deref().filter(|p| !p.is_empty()) {
        Some(p) => read_config(pod, p)?,
        None => RunnerConfig::default(),
    };
    if url.is_none() && uuid.is_none() && token_url.is_none() {
        return from_state_file(pod, handle, labels, wait, fetch_interval, (config_path, config));
    }
    if config.has_connections {
        return Err(
            "server connection conflict between program arguments and config; only one source can provide server connections"
                .to_string(),
        );
    }
    let (Some(url), Some(uuid), Some(token_url)) = (url, uuid, token_url) else {
        return Err("--url, --uuid and --token-url must be given together".to_string());
    };
    // The config's labels apply only to a connection given none.
    if labels.is_empty() {
        labels = config.labels;
    }
    let path = token_url
        .strip_prefix("file:")
        .ok_or_else(|| format!("--token-url {token_url:?}: only file: is supported"))?;
    let creds = pod.env.get("CREDENTIALS_DIRECTORY").cloned().unwrap_or_default();
    let path = path
        .replace("${CREDENTIALS_DIRECTORY}", &creds)
        .replace("$CREDENTIALS_DIRECTORY", &creds);
    Ok(PodShape::OneJob {
        url,
        uuid,
        token: file(pod, &path)?,
        handle,
        labels: names(labels.iter().map(String::as_str))?,
        full_labels: labels,
        wait,
        fetch_interval,
        config: config_path,
    })
}

/// `one-job` as the runner `register` left in [`STATE_FILE`]; `--label` flags, else the
/// config's `runner.labels`, override its labels.
fn from_state_file(
    pod: &PodInfo,
    handle: Option<String>,
    labels: Vec<String>,
    wait: bool,
    fetch_interval: Option<Duration>,
    (config_path, config): (Option<String>, RunnerConfig),
) -> Result<PodShape, String> {
    if config.has_connections {
        return Err(format!(
            "server connection conflict between {STATE_FILE:?} and config; only one config file can provide server connections"
        ));
    }
    let text = pod
        .read_scratch(STATE_FILE)
        .ok_or_else(|| format!("{STATE_FILE}: no such file (register the runner first)"))?;
    let state: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{STATE_FILE}: not a runner file: {e}"))?;
    let field = |k: &str| state[k].as_str().unwrap_or_default().to_string();
    let stored: Vec<String> = state["labels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .map(str::to_string)
        .collect();
    let full_labels = match (labels.is_empty(), config.labels.is_empty()) {
        (false, _) => labels,
        (true, false) => config.labels,
        (true, true) => stored,
    };
    Ok(PodShape::OneJob {
        url: field("address"),
        uuid: field("uuid"),
        token: field("token"),
        handle,
        labels: names(full_labels.iter().map(String::as_str))?,
        full_labels,
        wait,
        fetch_interval,
        config: config_path,
    })
}

fn register(pod: &PodInfo) -> Result<PodShape, String> {
    let env = |k: &str| pod.env.get(k).cloned().unwrap_or_default();
    let url = env("FORGEJO_INSTANCE_URL");
    if url.is_empty() {
        return Err("FORGEJO_INSTANCE_URL is not set".to_string());
    }
    let name = Some(env("FORGEJO_RUNNER_NAME"))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| pod.name.clone());
    let raw = env("FORGEJO_RUNNER_LABELS");
    let mut full: Vec<String> = raw
        .split(',')
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let config = Some(env("CONFIG_FILE")).filter(|p| !p.is_empty());
    if let Some(path) = &config {
        let c = read_config(pod, path)?;
        if !c.labels.is_empty() {
            full = c.labels;
        }
    }
    let labels = names(full.iter().map(String::as_str))?;
    Ok(PodShape::Register {
        url,
        name,
        labels,
        full_labels: full,
        token: file(pod, REGISTRATION_TOKEN_FILE)?,
        config,
    })
}

/// Reads the pod's shape; the error is what forgejo-runner (or the shell) would complain about.
pub fn parse_pod(pod: &PodInfo) -> Result<PodShape, String> {
    let program = pod.command.first().map(String::as_str).unwrap_or_default();
    let is_runner = program.rsplit('/').next() == Some("forgejo-runner");
    match (is_runner, pod.command.get(1).or(pod.args.first())) {
        (true, Some(sub)) if sub == "one-job" => {
            let rest: Vec<String> = pod.command.iter().chain(&pod.args).skip(2).cloned().collect();
            one_job(pod, &rest)
        }
        (true, sub) => Err(format!("unsupported forgejo-runner command {sub:?}")),
        _ if pod.command.iter().map(String::as_str).eq(["/bin/sh", "-c"]) => register(pod),
        _ => Err(format!("unsupported command {:?}", pod.command)),
    }
}
