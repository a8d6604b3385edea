//! A group's extra CA bundle and proxy, carried into its runner pods.
//!
//! The operator trusts `caBundleConfigMap` and uses `proxyUrl` for its own calls; the runners
//! talk to the same forge, so they need the same two settings, each in the form its runtime
//! reads:
//!
//! - [`TrustStyle::Go`] (Gitea and Forgejo runners): the ConfigMap's `ca.crt` is mounted as one
//!   extra file in `/etc/ssl/certs`, which Go's loader reads whole. `SSL_CERT_DIR` is left alone
//!   on purpose: setting it would replace the system directories instead of adding to them.
//!   Proxy as `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY`.
//! - [`TrustStyle::Node`] (GitHub's .NET runner with its node actions and git): an init
//!   container of the runner's own image ([`CA_BUNDLE_INIT`]) writes the image's system bundle
//!   plus `ca.crt` into an emptyDir ([`CA_BUNDLE_FILE`]), and `ca.crt` alone next to it
//!   ([`EXTRA_CA_FILE`]). The runner container mounts that emptyDir read-only and gets
//!   `SSL_CERT_FILE` (OpenSSL, and .NET's root store on Linux), `GIT_SSL_CAINFO` (git, whose
//!   libcurl may use GnuTLS and ignore `SSL_CERT_FILE`), `CURL_CA_BUNDLE` and
//!   `REQUESTS_CA_BUNDLE` (curl and Python's requests in workflow steps) pointing at the bundle,
//!   and `NODE_EXTRA_CA_CERTS` at `ca.crt` (node adds it to its built-in roots). Proxy as the
//!   lowercase `https_proxy`/`http_proxy`/`no_proxy` the runner documents.
//!
//! Why not `RUNNER_UPDATE_CA_CERTS=1`, as ARC's `githubServerTLS` does: `actions/runner`
//! `src/Misc/layoutroot/run.sh` (`updateCerts`) then runs `sudo update-ca-certificates` for a
//! non-root runner and only prints a message when that fails. ARC's pod can, because the image
//! gives `runner` passwordless sudo (`images/Dockerfile`) and ARC sets no security context; the
//! hardened runner container here has `allowPrivilegeEscalation: false` (no_new_privs), under
//! which sudo refuses to run, so the system store would never learn the CA and the runner could
//! not reach GHES. The init container needs no privilege: it only reads and writes files.
//!
//! `no_proxy` keeps the pod's own loopback (a Docker daemon or cache server on localhost) and
//! cluster-local names (`.svc`, `.cluster.local`) off the proxy. Every variable here gives way to
//! one the group's `spec.template` sets on the same container (in any letter case), so users can
//! widen or narrow the list; the template merge would otherwise keep the default.
//!
//! The proxy URL is the spec's, not a Secret: it ends up in the pod spec and the runner's
//! environment like any other setting, so proxies should authenticate by other means than
//! credentials in the URL.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, KeyToPath, PodSpec, Volume, VolumeMount,
};

use crate::crd::RunnerGroupSpec;
use crate::forge::CA_BUNDLE_KEY;

/// Name of the pod volume that holds the CA bundle ConfigMap.
pub const CA_VOLUME: &str = "forgerunner-ca";
/// Where Go runners find the extra CA (one more file in the directory Go reads).
pub const GO_CA_FILE: &str = "/etc/ssl/certs/forgerunner-ca.crt";
/// Name of the init container writing the GitHub runner's bundle ([`TrustStyle::Node`]); a
/// `spec.template` init container of this name merges into it (resources, another image).
pub const CA_BUNDLE_INIT: &str = "forgerunner-ca-bundle";
/// Name of the emptyDir volume holding the written bundle.
pub const TRUST_VOLUME: &str = "forgerunner-trust";
/// Where [`CA_BUNDLE_INIT`] finds the ConfigMap (its key `ca.crt` in this directory).
pub const CA_SOURCE_DIR: &str = "/forgerunner/ca";
/// Where [`TRUST_VOLUME`] is mounted: writable in [`CA_BUNDLE_INIT`], read-only in the runner.
pub const TRUST_DIR: &str = "/forgerunner/trust";
/// The image's system roots followed by `ca.crt`: `SSL_CERT_FILE`, `GIT_SSL_CAINFO`,
/// `CURL_CA_BUNDLE` and `REQUESTS_CA_BUNDLE` of the GitHub runner.
pub const CA_BUNDLE_FILE: &str = "/forgerunner/trust/ca-certificates.crt";
/// `ca.crt` alone: `NODE_EXTRA_CA_CERTS` of the GitHub runner (node keeps its own roots).
pub const EXTRA_CA_FILE: &str = "/forgerunner/trust/forgerunner-ca.crt";
/// System bundles the init container looks for, first readable one wins: Go's list
/// (`crypto/x509` `root_linux.go` `certFiles`), Debian, Ubuntu and Alpine first.
pub const SYSTEM_CA_BUNDLES: [&str; 6] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];
/// Hosts that never go through the proxy: the pod itself and cluster-local names.
pub const DEFAULT_NO_PROXY: &str = "localhost,127.0.0.1,::1,.svc,.cluster.local";

/// How a runner's runtime picks up extra CA roots and a proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrustStyle {
    /// Go programs (gitea-runner, act_runner, forgejo-runner).
    Go,
    /// The GitHub Actions runner (.NET) and the node actions and git it runs.
    Node,
}

impl TrustStyle {
    fn proxy_names(self) -> [&'static str; 3] {
        match self {
            TrustStyle::Go => ["HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"],
            TrustStyle::Node => ["https_proxy", "http_proxy", "no_proxy"],
        }
    }
}

/// A group's CA bundle ConfigMap and proxy, as its runner pods need them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunnerTrust<'a> {
    /// Name of the ConfigMap whose key `ca.crt` holds extra PEM roots.
    pub ca_bundle_config_map: Option<&'a str>,
    /// Proxy URL for every request to the forge (and the internet).
    pub proxy_url: Option<&'a str>,
}

impl<'a> RunnerTrust<'a> {
    /// The settings of a forge block; blank values count as unset.
    pub fn new(ca_bundle_config_map: Option<&'a str>, proxy_url: Option<&'a str>) -> RunnerTrust<'a> {
        let set = |v: Option<&'a str>| v.map(str::trim).filter(|v| !v.is_empty());
        RunnerTrust {
            ca_bundle_config_map: set(ca_bundle_config_map),
            proxy_url: set(proxy_url),
        }
    }

    /// Whether there is anything to add.
    pub fn is_empty(&self) -> bool {
        self.ca_bundle_config_map.is_none() && self.proxy_url.is_none()
    }

    /// Adds the CA volume (once) and, to each container or init container of `pod` named in
    /// `containers`, the CA and the proxy environment. With [`TrustStyle::Node`] and a CA, also
    /// the emptyDir and, first of the init containers, [`CA_BUNDLE_INIT`] running the image of
    /// the first named container (the template's image for it, when the template sets one).
    /// `spec` is the group's, whose template may set the same variables itself.
    pub fn apply(&self, pod: &mut PodSpec, containers: &[&str], style: TrustStyle, spec: &RunnerGroupSpec) {
        if self.is_empty() {
            return;
        }
        if let Some(cm) = self.ca_bundle_config_map {
            let volumes = pod.volumes.get_or_insert_with(Vec::new);
            if !volumes.iter().any(|v| v.name == CA_VOLUME) {
                volumes.push(ca_volume(cm));
            }
            if style == TrustStyle::Node {
                add_bundle_init(pod, containers, spec);
            }
        }
        let all = pod
            .containers
            .iter_mut()
            .chain(pod.init_containers.iter_mut().flatten());
        for c in all.filter(|c| containers.contains(&c.name.as_str())) {
            let taken = template_env_names(spec, &c.name);
            self.apply_to_container(c, style, &taken);
        }
    }

    /// Adds the CA mount and the CA and proxy environment to one container, skipping variables
    /// whose upper-cased name is in `taken`. The volumes it mounts ([`CA_VOLUME`], and
    /// [`TRUST_VOLUME`] filled by [`CA_BUNDLE_INIT`] for [`TrustStyle::Node`]) are
    /// [`RunnerTrust::apply`]'s to add.
    pub fn apply_to_container(&self, c: &mut Container, style: TrustStyle, taken: &BTreeSet<String>) {
        let mut env: Vec<(&str, &str)> = Vec::new();
        if self.ca_bundle_config_map.is_some() {
            let mount = match style {
                TrustStyle::Go => VolumeMount {
                    name: CA_VOLUME.to_string(),
                    mount_path: GO_CA_FILE.to_string(),
                    // One file into a directory the image already fills: a subPath mount
                    // leaves the image's own certificates in place.
                    sub_path: Some(CA_BUNDLE_KEY.to_string()),
                    read_only: Some(true),
                    ..VolumeMount::default()
                },
                TrustStyle::Node => VolumeMount {
                    name: TRUST_VOLUME.to_string(),
                    mount_path: TRUST_DIR.to_string(),
                    read_only: Some(true),
                    ..VolumeMount::default()
                },
            };
            let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
            if !mounts.iter().any(|m| m.mount_path == mount.mount_path) {
                mounts.push(mount);
            }
            if style == TrustStyle::Node {
                env.extend([
                    ("SSL_CERT_FILE", CA_BUNDLE_FILE),
                    ("GIT_SSL_CAINFO", CA_BUNDLE_FILE),
                    ("CURL_CA_BUNDLE", CA_BUNDLE_FILE),
                    ("REQUESTS_CA_BUNDLE", CA_BUNDLE_FILE),
                    ("NODE_EXTRA_CA_CERTS", EXTRA_CA_FILE),
                ]);
            }
        }
        if let Some(proxy) = self.proxy_url {
            let [https, http, no] = style.proxy_names();
            env.extend([(https, proxy), (http, proxy), (no, DEFAULT_NO_PROXY)]);
        }
        let list = c.env.get_or_insert_with(Vec::new);
        for (name, value) in env {
            let upper = name.to_ascii_uppercase();
            if taken.contains(&upper) || list.iter().any(|e| e.name.eq_ignore_ascii_case(name)) {
                continue;
            }
            list.push(EnvVar {
                name: name.to_string(),
                value: Some(value.to_string()),
                value_from: None,
            });
        }
    }
}

/// Adds [`TRUST_VOLUME`] and [`CA_BUNDLE_INIT`] (once, as the first init container, so that
/// any later one may use the bundle too), unless none of `containers` is in the pod.
fn add_bundle_init(pod: &mut PodSpec, containers: &[&str], spec: &RunnerGroupSpec) {
    let Some(image) = bundle_image(pod, containers, spec) else {
        return;
    };
    let volumes = pod.volumes.get_or_insert_with(Vec::new);
    if !volumes.iter().any(|v| v.name == TRUST_VOLUME) {
        volumes.push(Volume {
            name: TRUST_VOLUME.to_string(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
    }
    let init = pod.init_containers.get_or_insert_with(Vec::new);
    if init.iter().any(|c| c.name == CA_BUNDLE_INIT) {
        return;
    }
    init.insert(0, bundle_init_container(image));
}

/// The image whose system bundle goes into the runner's: that of the first container named in
/// `containers`, as the template merge will leave it (a non-empty template image replaces it).
fn bundle_image(pod: &PodSpec, containers: &[&str], spec: &RunnerGroupSpec) -> Option<String> {
    let c = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .find(|c| containers.contains(&c.name.as_str()))?;
    template_image(spec, &c.name)
        .or_else(|| c.image.clone())
        .filter(|i| !i.trim().is_empty())
}

/// The init container writing [`CA_BUNDLE_FILE`] and [`EXTRA_CA_FILE`]. It runs unprivileged
/// (the pod's hardening gives it the runner's user and the restricted settings) and its command
/// holds only fixed paths.
fn bundle_init_container(image: String) -> Container {
    Container {
        name: CA_BUNDLE_INIT.to_string(),
        image: Some(image),
        command: Some(vec![
            "sh".to_string(),
            "-c".to_string(),
            ca_bundle_script(CA_SOURCE_DIR, TRUST_DIR, &SYSTEM_CA_BUNDLES),
        ]),
        volume_mounts: Some(vec![
            VolumeMount {
                name: CA_VOLUME.to_string(),
                mount_path: CA_SOURCE_DIR.to_string(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: TRUST_VOLUME.to_string(),
                mount_path: TRUST_DIR.to_string(),
                ..VolumeMount::default()
            },
        ]),
        // A failure's message (stderr) lands in the container's status, for `kubectl describe`.
        termination_message_policy: Some("FallbackToLogsOnError".to_string()),
        ..Container::default()
    }
}

/// Single-quotes `s` for `sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The POSIX `sh` script of [`CA_BUNDLE_INIT`]: checks that `<ca_dir>/ca.crt` is readable and
/// holds a PEM certificate (else exits 1 saying so), then writes `<out_dir>/ca-certificates.crt`
/// (the first readable of `system`, a newline, `ca.crt`) and `<out_dir>/forgerunner-ca.crt`
/// (`ca.crt` alone). An image without any of `system` gets a bundle of `ca.crt` alone and a
/// warning: OpenSSL still reads its default certificate directory, and such an image could not
/// verify public hosts before either. Only `sh` built-ins and `cat`, so Debian, Ubuntu and
/// Alpine (busybox) images all run it.
fn ca_bundle_script(ca_dir: &str, out_dir: &str, system: &[&str]) -> String {
    let ca = sh_quote(&format!("{ca_dir}/{CA_BUNDLE_KEY}"));
    let bundle = sh_quote(&format!("{out_dir}/ca-certificates.crt"));
    let extra = sh_quote(&format!("{out_dir}/forgerunner-ca.crt"));
    let system = system.iter().map(|f| sh_quote(f)).collect::<Vec<_>>().join(" ");
    format!(
        r#"set -eu
fail() {{ echo "forgerunner: $*" >&2; exit 1; }}
ca={ca}
bundle={bundle}
extra={extra}
[ -r "$ca" ] || fail "cannot read $ca (key {CA_BUNDLE_KEY} of the caBundleConfigMap)"
case "$(cat "$ca")" in
  *'-----BEGIN CERTIFICATE-----'*) ;;
  *) fail "$ca (key {CA_BUNDLE_KEY} of the caBundleConfigMap) holds no PEM certificate" ;;
esac
system=
for f in {system}; do
  if [ -r "$f" ]; then system=$f; break; fi
done
if [ -n "$system" ]; then
  {{ cat "$system" && echo && cat "$ca"; }} > "$bundle" || fail "cannot write $bundle"
else
  echo "forgerunner: warning: no system CA bundle in this image; $bundle holds only $ca" >&2
  cat "$ca" > "$bundle" || fail "cannot write $bundle"
fi
cat "$ca" > "$extra" || fail "cannot write $extra"
echo "forgerunner: wrote $bundle from ${{system:-no system bundle}} and $ca"
"#
    )
}

/// The ConfigMap volume with only the `ca.crt` key.
fn ca_volume(config_map: &str) -> Volume {
    Volume {
        name: CA_VOLUME.to_string(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map.to_string(),
            items: Some(vec![KeyToPath {
                key: CA_BUNDLE_KEY.to_string(),
                path: CA_BUNDLE_KEY.to_string(),
                ..KeyToPath::default()
            }]),
            // The operator reads the same ConfigMap and refuses to work without it, so a pod
            // never waits on a ConfigMap that the group does not also need.
            optional: Some(false),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The (init) containers named `container` of the group's template.
fn template_containers(spec: &RunnerGroupSpec, container: &str) -> Vec<Container> {
    // A template that does not decode is refused by validation before any pod is built.
    let Some(pod) = spec.pod_template().ok().flatten().and_then(|t| t.spec) else {
        return Vec::new();
    };
    pod.containers
        .into_iter()
        .chain(pod.init_containers.into_iter().flatten())
        .filter(|c| c.name == container)
        .collect()
}

/// Upper-cased names of the env variables the group's template sets on the (init) container
/// `container`.
pub fn template_env_names(spec: &RunnerGroupSpec, container: &str) -> BTreeSet<String> {
    template_containers(spec, container)
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .map(|e| e.name.to_ascii_uppercase())
        .collect()
}

/// The non-empty image the group's template sets on the (init) container `container`.
fn template_image(spec: &RunnerGroupSpec, container: &str) -> Option<String> {
    template_containers(spec, container)
        .into_iter()
        .find_map(|c| c.image.filter(|i| !i.trim().is_empty()))
}

#[cfg(test)]
mod tests;
