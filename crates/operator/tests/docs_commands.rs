//! Our docs run: every kubectl command in a shell code block of `README.md` and `docs/*.md`
//! (see `docs_commands/extract.rs` for what counts) runs with the real kubectl, in document
//! order, against a sandbox world (the fake cluster with the simulator, the forge fakes and the
//! real operator running, as `sandbox --keep` leaves it). Each document gets a fresh world.
//! Every command must exit 0, unless its block is marked `<!-- needs-real-cluster: reason -->`
//! (see docs/testing.md).
//!
//! The world, as the commands find it:
//! - namespace `sandbox` with the sandbox's groups `gh-linux`, `gitea-linux` and
//!   `forgejo-linux` (one warm runner each, so runner Pods and Jobs exist);
//! - the namespaces the docs use for examples, [`EXAMPLE_NAMESPACES`], unless the document
//!   creates them itself (`kubectl create namespace …`), as a reader who followed the quick start
//!   has them;
//! - the working directory holds `charts/` and `docs/` of the repository, each file a document
//!   defines as a YAML block starting `# NAME.yaml`, and [`FIXTURE_FILES`];
//! - `forgerunner` is on the PATH, `KUBECONFIG` points at the fake cluster.
//!
//! Placeholders are replaced by [`SUBSTITUTIONS`] (fixed text) or resolved from the world
//! (`<pod>`, `<runner>`); a placeholder in neither fails the test, so a new one gets a row.
//! A command with `-w`/`--watch` passes when it prints before [`WATCH_FOR`] ends it.
#![cfg(all(feature = "github", feature = "gitea", feature = "forgejo"))]

#[allow(dead_code)]
mod common;
#[path = "docs_commands/extract.rs"]
mod extract;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::e2e::start_operator_with;
use forgerunner_sandbox::world::groups::GroupSize;
use forgerunner_sandbox::world::operator::{OperatorProcess, OperatorSettings};
use forgerunner_sandbox::world::{GROUP_LABEL, World, WorldOptions, wait_until};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

/// The sandbox's namespace and the group placeholders name.
const NS: &str = "sandbox";
const GROUP: &str = "gitea-linux";

/// Fixed placeholder text: `(placeholder, replacement)`.
const SUBSTITUTIONS: &[(&str, &str)] = &[
    ("<ns>", NS),
    ("<name>", GROUP),
    ("<a RunnerGroup>", "gitea-org"),
    ("<your PAT>", "ghp_docs_test_not_a_token"),
    ("<API token>", "docs-test-not-a-token"),
];

/// Namespaces the docs' examples assume exist.
const EXAMPLE_NAMESPACES: &[&str] = &["ci", "ci-docker"];

/// Files commands read that a reader brings along: `(name, content)`.
const FIXTURE_FILES: &[(&str, &str)] = &[(
    "my-app.private-key.pem",
    "-----BEGIN RSA PRIVATE KEY-----\nnot a real key, a docs test fixture\n-----END RSA PRIVATE KEY-----\n",
)];

/// How long a watch command runs before it is stopped.
const WATCH_FOR: Duration = Duration::from_secs(5);
/// How long any other command may take: above the operator's 2-minute cleanup budget, which a
/// `kubectl delete rg` of an example group whose forge the sandbox cannot reach waits out.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(200);
/// How long setting up a world may take.
const SETUP: Duration = Duration::from_secs(120);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// README.md and docs/*.md, in name order.
fn documents() -> Vec<PathBuf> {
    let root = repo_root();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root.join("README.md"));
    docs
}

/// A sandbox world with the operator and one warm runner per group.
async fn sandbox(doc: &extract::Doc) -> (World, OperatorProcess) {
    let world = World::start(WorldOptions {
        work_time: Duration::from_millis(200),
        ..WorldOptions::default()
    })
    .await
    .expect("world starts");
    world.create_namespace(NS).await.expect("namespace");
    for ns in EXAMPLE_NAMESPACES {
        let created_by_doc = doc.commands.iter().any(|c| {
            c.text.contains(&format!("create namespace {ns}")) || c.text.contains(&format!("create ns {ns}"))
        });
        if !created_by_doc {
            world.create_namespace(ns).await.expect("example namespace");
        }
    }
    let operator = start_operator_with(&world, &OperatorSettings::default());
    let size = GroupSize {
        min: 1,
        ..GroupSize::up_to(2)
    };
    world
        .add_github_group(NS, "gh-linux", &size)
        .await
        .expect("github group");
    world
        .add_gitea_group(NS, GROUP, &["ubuntu-latest"], &size, 5, None)
        .await
        .expect("gitea group");
    world
        .add_forgejo_group(NS, "forgejo-linux", &["docker"], &size, 5)
        .await
        .expect("forgejo group");
    let running = wait_until(SETUP, "a running runner pod of the gitea group", || async {
        runner_pod(&world).await.is_some()
    })
    .await;
    if running.is_err() {
        common::e2e::fail_with_output(&operator, "no runner pod ran");
    }
    (world, operator)
}

/// A running runner Pod of [`GROUP`].
async fn runner_pod(world: &World) -> Option<String> {
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), NS);
    let list = pods
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={GROUP}")))
        .await
        .ok()?;
    list.items
        .into_iter()
        .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .and_then(|p| p.metadata.name)
}

/// A runner Job of [`GROUP`].
async fn runner_job(world: &World) -> Option<String> {
    let jobs: Api<Job> = Api::namespaced(world.client.clone(), NS);
    let list = jobs
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={GROUP}")))
        .await
        .ok()?;
    list.items.into_iter().find_map(|j| j.metadata.name)
}

/// The command with every placeholder replaced; Err names one left over.
async fn substitute(world: &World, text: &str) -> Result<String, String> {
    let mut out = text.to_owned();
    for (placeholder, value) in SUBSTITUTIONS {
        out = out.replace(placeholder, value);
    }
    if out.contains("<pod>") {
        let pod = runner_pod(world).await.ok_or("no runner pod for <pod>")?;
        out = out.replace("<pod>", &pod);
    }
    if out.contains("<runner>") {
        let job = runner_job(world).await.ok_or("no runner Job for <runner>")?;
        out = out.replace("<runner>", &job);
    }
    let left = leftover_placeholder(&out);
    match left {
        Some(p) => Err(format!("no substitution for {p}")),
        None => Ok(out),
    }
}

/// The first `<word …>` placeholder left in `text`.
fn leftover_placeholder(text: &str) -> Option<String> {
    let start = text.find('<')?;
    let rest = &text[start + 1..];
    let end = rest.find('>')?;
    let inner = &rest[..end];
    let looks_like = inner.chars().next().is_some_and(char::is_alphabetic)
        && inner.chars().all(|c| c.is_alphanumeric() || " _-".contains(c));
    looks_like.then(|| format!("<{inner}>"))
}

/// The work directory: repository folders the docs name, document files and fixtures.
fn work_dir(doc: &extract::Doc) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("work dir");
    let root = repo_root();
    for folder in ["charts", "docs"] {
        std::os::unix::fs::symlink(root.join(folder), dir.path().join(folder)).expect("link");
    }
    let files = doc.files.iter().map(|(n, c)| (n.as_str(), c.as_str()));
    for (name, content) in files.chain(FIXTURE_FILES.iter().copied()) {
        std::fs::write(dir.path().join(name), content).expect("write fixture");
    }
    dir
}

/// Runs one command with bash in `dir`; returns (passed, output).
async fn run(dir: &Path, kubeconfig: &Path, text: &str) -> (bool, String) {
    let watch = text.split_whitespace().any(|w| w == "-w" || w == "--watch");
    let limit = if watch { WATCH_FOR } else { COMMAND_TIMEOUT };
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_forgerunner"))
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = format!("set -eo pipefail\n{text}\n");
    let (dir, kubeconfig) = (dir.to_path_buf(), kubeconfig.to_path_buf());
    let secs = limit.as_secs().to_string();
    tokio::task::spawn_blocking(move || {
        let out = Command::new("timeout")
            .args([secs.as_str(), "bash", "-c", &script])
            .current_dir(&dir)
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", &dir)
            .env("PATH", path)
            .output()
            .expect("run bash");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let text = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
        // `timeout` exits 124 when it stopped the command.
        let passed = match out.status.code() {
            Some(0) => true,
            Some(124) => watch && !stdout.trim().is_empty(),
            _ => false,
        };
        (passed, text)
    })
    .await
    .expect("join command")
}

#[test]
fn extractor_finds_commands_in_every_document() {
    let total: usize = documents()
        .iter()
        .map(|d| {
            extract::parse(&std::fs::read_to_string(d).expect("read doc"))
                .commands
                .len()
        })
        .sum();
    assert!(total >= 20, "only {total} kubectl commands found in the docs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_command_in_the_docs_runs_against_the_sandbox() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for path in documents() {
        let doc = extract::parse(&std::fs::read_to_string(&path).expect("read doc"));
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if doc.commands.iter().all(|c| c.needs_real_cluster.is_some()) {
            continue;
        }
        let (world, operator) = sandbox(&doc).await;
        let dir = work_dir(&doc);
        for cmd in &doc.commands {
            if let Some(reason) = &cmd.needs_real_cluster {
                eprintln!(
                    "{name}:{} skipped (needs a real cluster: {reason}): {}",
                    cmd.line, cmd.text
                );
                continue;
            }
            let text = match substitute(&world, &cmd.text).await {
                Ok(t) => t,
                Err(e) => {
                    failures.push(format!("{name}:{}: {e}: {}", cmd.line, cmd.text));
                    continue;
                }
            };
            let started = std::time::Instant::now();
            let (passed, out) = run(dir.path(), world.kubeconfig(), &text).await;
            ran += 1;
            let verdict = if passed { "ok" } else { "FAILED" };
            eprintln!(
                "{name}:{} {verdict} in {:.1?}: {text}",
                cmd.line,
                started.elapsed()
            );
            if !passed {
                failures.push(format!("{name}:{}: {text}\n{out}", cmd.line));
            }
        }
        drop(operator);
    }
    assert!(ran >= 20, "only {ran} commands ran");
    assert!(
        failures.is_empty(),
        "{} doc commands failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
