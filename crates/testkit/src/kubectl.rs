//! The real `kubectl` (from the PATH) pointed at a fake API server, as the tests run it.

use std::path::Path;
use std::process::Command;

/// What one kubectl run printed.
#[derive(Clone, Debug)]
pub struct KubectlRun {
    /// Whether kubectl exited 0.
    pub ok: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl KubectlRun {
    /// Standard output then standard error, as a person reads them in a terminal.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Whether kubectl is on the PATH; tests that need it say so and skip when it is not.
pub fn installed() -> bool {
    Command::new("kubectl")
        .args(["version", "--client=true"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs kubectl with `args` against `kubeconfig`. HOME is the kubeconfig's directory, so no
/// user's kubectl cache or config takes part.
pub fn run(kubeconfig: &Path, args: &[&str]) -> std::io::Result<KubectlRun> {
    let home = kubeconfig.parent().unwrap_or(Path::new("/tmp"));
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .output()?;
    Ok(KubectlRun {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// [`run`] on a blocking thread, so an async test's runtime keeps serving the fake server.
pub async fn run_async(kubeconfig: &Path, args: &[&str]) -> std::io::Result<KubectlRun> {
    let kubeconfig = kubeconfig.to_path_buf();
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&kubeconfig, &args)
    })
    .await
    .map_err(std::io::Error::other)?
}
