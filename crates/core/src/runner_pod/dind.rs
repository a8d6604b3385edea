//! `containerMode: dind`: a Docker daemon as a native sidecar of the runner.
//!
//! The daemon is an init container with `restartPolicy: Always` (Kubernetes ≥ 1.29), so the
//! runner starts only once `docker info` answers, and the Job completes when the runner exits.
//! It listens on a unix socket in a volume shared with the runner container, at a dedicated path
//! ([`DIND_SOCKET_DIR`]) rather than over the runner's `/var/run` (as ARC does): nothing of the
//! runner image is hidden, and the daemon's own `/run/docker` state stays its own. Job containers
//! the daemon starts bind-mount host paths, and "host" means the daemon's container, so the
//! runner's work directory (and GitHub's externals) are mounted there at the same paths.
//!
//! Only the sidecar is privileged (Docker needs it); the runner container stays hardened. Such
//! a pod does not pass the `restricted` profile: the namespace must allow `privileged`.

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, ExecAction, PodSpec, Probe, SecurityContext, Volume, VolumeMount,
};

use super::runner_container_mut;

/// Name of the daemon's init container (a native sidecar).
pub const DIND_CONTAINER: &str = "dind";
/// The daemon's image. Docker 28: act (Gitea's runner) broke with Docker 29's API changes, and
/// one pinned daemon for every forge keeps the behaviour the same.
pub const DIND_IMAGE: &str = "docker:28-dind";
/// Volume holding the daemon's socket, shared with the runner container.
pub const DIND_SOCKET_VOLUME: &str = "dind-sock";
/// Where [`DIND_SOCKET_VOLUME`] is mounted in both containers.
pub const DIND_SOCKET_DIR: &str = "/run/dind";
/// `DOCKER_HOST` of the runner container: the socket in [`DIND_SOCKET_DIR`].
pub const DIND_DOCKER_HOST: &str = "unix:///run/dind/docker.sock";
/// The daemon also listens on the default socket inside its own container, because runners
/// bind-mount `/var/run/docker.sock` into job containers by that fixed path (GitHub's container
/// jobs), and the daemon resolves it in its own filesystem.
pub const DIND_DEFAULT_SOCKET: &str = "unix:///var/run/docker.sock";
/// Volume of the daemon's images and containers (an emptyDir: an overlay filesystem cannot
/// hold another one, and the data goes with the pod). With `spec.dockerCache` a claim of the
/// group's pool takes the emptyDir's place ([`crate::docker_cache::mount_claim`]).
pub const DIND_STORAGE_VOLUME: &str = "dind-storage";
/// Name of the work volume when the runner has none at its work directory.
pub const WORK_VOLUME: &str = "work";
/// Volume of the runner image's externals copy.
pub const DIND_EXTERNALS_VOLUME: &str = "dind-externals";
/// Init container copying the externals into [`DIND_EXTERNALS_VOLUME`].
pub const DIND_EXTERNALS_INIT: &str = "init-dind-externals";
/// Where the externals init container mounts the copy's volume.
const EXTERNALS_COPY_DIR: &str = "/dind-externals";
/// The sidecar may take this long to answer `docker info` (5 s × 24 = 2 minutes, as ARC).
const STARTUP_PERIOD_SECONDS: i32 = 5;
/// See [`STARTUP_PERIOD_SECONDS`].
const STARTUP_FAILURE_THRESHOLD: i32 = 24;

/// What `dind` needs to know about a forge's runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DindProfile<'a> {
    /// The runner's work directory: the daemon mounts the same volume at the same path so that
    /// job containers' bind mounts resolve.
    pub work_dir: &'a str,
    /// A directory of the runner image that job containers bind-mount (GitHub's
    /// `/home/runner/externals`, with node for JavaScript actions): copied from the runner image
    /// into a volume the daemon mounts at the same path.
    pub externals_dir: Option<&'a str>,
    /// Extra environment of the runner container in this mode.
    pub runner_env: &'a [(&'a str, &'a str)],
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        ..VolumeMount::default()
    }
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

/// Adds the `dind` sidecar to `pod`. `docker_gid` owns the socket (the runner's group, so the
/// runner may use it without root). Env or mounts the runner container already has are kept.
pub fn add_dind(pod: &mut PodSpec, profile: &DindProfile<'_>, docker_gid: i64) {
    let volumes = pod.volumes.get_or_insert_with(Vec::new);
    volumes.push(empty_dir(DIND_SOCKET_VOLUME));
    volumes.push(empty_dir(DIND_STORAGE_VOLUME));

    let Some(runner) = runner_container_mut(pod) else {
        return;
    };
    let runner_image = runner.image.clone();
    // Share the runner's own volume at its work directory, or a new `work` emptyDir.
    let existing = runner
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == profile.work_dir)
        .map(|m| m.name.clone());
    let work_volume = existing.clone().unwrap_or_else(|| WORK_VOLUME.to_owned());
    let mounts = runner.volume_mounts.get_or_insert_with(Vec::new);
    if existing.is_none() {
        mounts.push(mount(WORK_VOLUME, profile.work_dir));
    }
    mounts.push(mount(DIND_SOCKET_VOLUME, DIND_SOCKET_DIR));
    let runner_env = runner.env.get_or_insert_with(Vec::new);
    let extra = [("DOCKER_HOST", DIND_DOCKER_HOST)];
    for (name, value) in extra.iter().chain(profile.runner_env) {
        if !runner_env.iter().any(|e| e.name == *name) {
            runner_env.push(env(name, value));
        }
    }

    let mut dind_mounts = vec![
        mount(DIND_SOCKET_VOLUME, DIND_SOCKET_DIR),
        mount(DIND_STORAGE_VOLUME, "/var/lib/docker"),
        mount(&work_volume, profile.work_dir),
    ];
    let mut init = Vec::new();
    if let Some(dir) = profile.externals_dir {
        dind_mounts.push(mount(DIND_EXTERNALS_VOLUME, dir));
        init.push(Container {
            name: DIND_EXTERNALS_INIT.to_owned(),
            image: runner_image,
            command: Some(vec![
                "cp".to_owned(),
                "-r".to_owned(),
                format!("{dir}/."),
                format!("{EXTERNALS_COPY_DIR}/"),
            ]),
            volume_mounts: Some(vec![mount(DIND_EXTERNALS_VOLUME, EXTERNALS_COPY_DIR)]),
            ..Container::default()
        });
    }
    init.push(dind_container(docker_gid, dind_mounts));
    let volumes = pod.volumes.get_or_insert_with(Vec::new);
    if existing.is_none() {
        volumes.push(empty_dir(WORK_VOLUME));
    }
    if profile.externals_dir.is_some() {
        volumes.push(empty_dir(DIND_EXTERNALS_VOLUME));
    }
    // Appended: init containers of the forge (setup that needs no Docker) go first.
    pod.init_containers.get_or_insert_with(Vec::new).extend(init);
}

fn dind_container(docker_gid: i64, volume_mounts: Vec<VolumeMount>) -> Container {
    Container {
        name: DIND_CONTAINER.to_owned(),
        image: Some(DIND_IMAGE.to_owned()),
        args: Some(vec![
            "dockerd".to_owned(),
            format!("--host={DIND_DOCKER_HOST}"),
            format!("--host={DIND_DEFAULT_SOCKET}"),
            format!("--group={docker_gid}"),
        ]),
        // A native sidecar: runs beside the runner and ends with the pod.
        restart_policy: Some("Always".to_owned()),
        startup_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(vec!["docker".to_owned(), "info".to_owned()]),
            }),
            period_seconds: Some(STARTUP_PERIOD_SECONDS),
            failure_threshold: Some(STARTUP_FAILURE_THRESHOLD),
            ..Probe::default()
        }),
        // Docker needs root and privilege; set explicitly because the pod's context says
        // non-root, and the hardening leaves privileged containers alone.
        security_context: Some(SecurityContext {
            privileged: Some(true),
            run_as_user: Some(0),
            run_as_group: Some(0),
            run_as_non_root: Some(false),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(volume_mounts),
        ..Container::default()
    }
}
