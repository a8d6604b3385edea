//! forgejo-runner's start-up check of its Docker daemon, as the simulated runner plays it.
//!
//! Upstream (forgejo-runner 12.8.x, `code.forgejo.org/forgejo/runner`):
//! - `internal/app/cmd/job.go` `runJob` (the `one-job` command) loads its configuration and
//!   calls `configCheck` **before** `createRunner` (`Declare`) and the first poll; an error ends
//!   the process with exit code 1. `register` runs no such check.
//! - `internal/app/cmd/daemon.go` `configCheck`: when any label of a connection resolves to the
//!   docker scheme (`Labels.RequireDocker`, `internal/pkg/labels/labels.go`; a label without a
//!   scheme is docker), `getDockerSocketPath(cfg.Container.DockerHost)` runs with the default
//!   `docker_host` `-`: `DOCKER_HOST` from the environment if set (even empty), else the first of
//!   `commonSocketPaths` that exists, else the error [`SOCKET_NOT_FOUND`]. The address found is
//!   then pinged (`envcheck.CheckIfDockerRunning`); one that does not parse fails there.
//!
//! What the simulation sees of the pod: the runner container's environment and its Secret,
//! ConfigMap and `emptyDir` files. A socket file at a common path is found among those; a socket
//! mounted from the node (`hostPath`) is not visible to the simulation. A `DOCKER_HOST` that
//! parses is taken to answer the ping (`containerMode: dind` starts the runner only once its
//! sidecar answers `docker info`).

use std::collections::BTreeMap;

use super::labels::require_docker;
use crate::sim::behaviour::PodInfo;

/// forgejo-runner's error when a docker label finds no daemon (`getDockerSocketPath`).
pub const SOCKET_NOT_FOUND: &str = "daemon Docker Engine socket not found and docker_host config was invalid";

/// `commonSocketPaths` of `internal/app/cmd/daemon.go`, without the Windows named pipe.
const COMMON_SOCKET_PATHS: [&str; 6] = [
    "/var/run/docker.sock",
    "/run/podman/podman.sock",
    "$HOME/.colima/docker.sock",
    "$XDG_RUNTIME_DIR/docker.sock",
    "$XDG_RUNTIME_DIR/podman/podman.sock",
    "$HOME/.docker/run/docker.sock",
];

/// Go's `os.ExpandEnv` for the two variables the socket paths use (unset expands to "").
fn expand(path: &str, env: &BTreeMap<String, String>) -> String {
    ["HOME", "XDG_RUNTIME_DIR"].iter().fold(path.to_string(), |p, k| {
        p.replace(&format!("${k}"), env.get(*k).map_or("", String::as_str))
    })
}

/// `getDockerSocketPath("-")`: the Docker address the runner would use, or its error.
pub fn docker_socket_path(pod: &PodInfo) -> Result<String, String> {
    if let Some(host) = pod.env.get("DOCKER_HOST") {
        return Ok(host.clone());
    }
    COMMON_SOCKET_PATHS
        .iter()
        .map(|p| expand(p, &pod.env))
        .find(|p| pod.files.contains_key(p) || pod.read_scratch(p).is_some())
        .map(|p| format!("unix://{p}"))
        .ok_or_else(|| SOCKET_NOT_FOUND.to_string())
}

/// `configCheck` for a runner with `labels` (as given, `name[:scheme[:arg]]`): `Ok` when no label
/// is docker or a Docker address is found and parses; else forgejo-runner's error message.
pub fn config_check<S: AsRef<str>>(pod: &PodInfo, labels: &[S]) -> Result<(), String> {
    if !require_docker(labels) {
        return Ok(());
    }
    let host = docker_socket_path(pod)?;
    // The Docker client's `ParseHostURL`, reached through `CheckIfDockerRunning`.
    match host.split_once("://") {
        Some((_, addr)) if !addr.is_empty() => Ok(()),
        _ => Err(format!("unable to parse docker host `{host}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::behaviour::PodScratch;
    use tokio_util::sync::CancellationToken;

    fn pod(env: &[(&str, &str)]) -> PodInfo {
        PodInfo {
            namespace: "ns".into(),
            name: "g-abcde".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            image: "code.forgejo.org/forgejo/runner:12.8.2".into(),
            command: vec!["forgejo-runner".into()],
            args: vec!["one-job".into()],
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            files: BTreeMap::new(),
            cancel: CancellationToken::new(),
            container: "runner".into(),
            init: false,
            scratch: PodScratch::default(),
        }
    }

    /// `internal/app/cmd/daemon.go` `configCheck` / `getDockerSocketPath`: docker labels need
    /// `DOCKER_HOST` or a socket at a common path; other labels need nothing.
    #[test]
    fn docker_labels_need_a_daemon() {
        let bare = pod(&[]);
        assert_eq!(
            config_check(&bare, &["ubuntu-latest"]),
            Err(SOCKET_NOT_FOUND.into())
        );
        assert_eq!(
            config_check(&bare, &["a:host", "b:docker://node:22"]),
            Err(SOCKET_NOT_FOUND.into())
        );
        assert_eq!(config_check(&bare, &["a:host", "b:lxc"]), Ok(()));
        let dind = pod(&[("DOCKER_HOST", "unix:///run/dind/docker.sock")]);
        assert_eq!(config_check(&dind, &["ubuntu-latest"]), Ok(()));
        assert_eq!(
            docker_socket_path(&dind).as_deref(),
            Ok("unix:///run/dind/docker.sock")
        );
        let empty = pod(&[("DOCKER_HOST", "")]);
        assert_eq!(
            config_check(&empty, &["ubuntu-latest"]),
            Err("unable to parse docker host ``".into())
        );
        let mut socket = pod(&[("HOME", "/data")]);
        socket.scratch = PodScratch::default().with_mounts(vec![("/data".into(), "data".into())]);
        assert!(socket.write_scratch("/data/.docker/run/docker.sock", ""));
        assert_eq!(
            docker_socket_path(&socket).as_deref(),
            Ok("unix:///data/.docker/run/docker.sock")
        );
        assert_eq!(config_check(&socket, &["ubuntu-latest"]), Ok(()));
    }
}
