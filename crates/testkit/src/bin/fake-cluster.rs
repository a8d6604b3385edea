//! `fake-cluster`: runs the testkit's fake Kubernetes API server until killed, optionally with
//! the cluster simulator (`--simulate`) and forge fakes (`--forges`).
//!
//! The last line it prints is `ready <url>`, once everything listens; with `--forges`, one
//! `forge …` line per fake comes before it. Writes a kubeconfig for kubectl and kube clients
//! when asked.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use forgerunner_testkit::apiserver::{FakeApiServer, ServerConfig};
use forgerunner_testkit::standalone::{self, ForgeFake};

/// Command-line options.
#[derive(Parser, Debug)]
#[command(
    name = "fake-cluster",
    about = "A fake Kubernetes API server on loopback (forgerunner testkit)",
    after_help = "\
Use it with the real operator:
  fake-cluster --kubeconfig /tmp/fake.kubeconfig --simulate --forges gitea
  export KUBECONFIG=/tmp/fake.kubeconfig
  forgerunner crd | kubectl apply --server-side -f -
  forgerunner run --forges gitea      # reads KUBECONFIG; its Lease goes to namespace default

Without --simulate nothing runs Jobs: they never get Pods. With --simulate a Job controller and
a kubelet stand-in give every Job its Pods; a Pod whose image no behaviour plays stays Running
until deleted. With --forges the fakes' runner images are played (ghcr.io/actions/…,
gitea/act_runner and gitea/runner, code.forgejo.org/forgejo/runner): runner pods register at the
fake and take its jobs. Each `forge` line gives the URL for the RunnerGroup spec, the
credentials Secret key and the fake's well-known admin token, and the repository it holds."
)]
struct Args {
    /// Write a kubeconfig pointing at the server to this path.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Close every watch after this many seconds (exercises clients' re-watch paths).
    #[arg(long)]
    watch_max_seconds: Option<u64>,
    /// Run the cluster simulator beside the server, so Jobs get Pods that run.
    #[arg(long)]
    simulate: bool,
    /// Delay between a Pod's creation and its container running, in milliseconds.
    #[arg(long, default_value_t = 50, requires = "simulate")]
    pod_start_ms: u64,
    /// Forge fakes to start, comma-separated (github, gitea, forgejo); needs --simulate.
    #[arg(long, value_delimiter = ',', requires = "simulate")]
    forges: Vec<ForgeFake>,
    /// How long a simulated runner works on one job, in milliseconds.
    #[arg(long, default_value_t = 1000, requires = "forges")]
    work_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = ServerConfig {
        watch_max_duration: args.watch_max_seconds.map(Duration::from_secs),
        ..ServerConfig::default()
    };
    let server = FakeApiServer::bind(args.listen, config).await?;
    if let Some(path) = &args.kubeconfig {
        server.write_kubeconfig(path)?;
    }
    let sim = if args.simulate {
        Some(standalone::simulate(&server, Duration::from_millis(args.pod_start_ms)).await?)
    } else {
        None
    };
    let forges = match &sim {
        Some(sim) => {
            Some(standalone::start_forges(sim, &args.forges, Duration::from_millis(args.work_ms)).await?)
        }
        None => None,
    };
    for endpoint in forges.iter().flat_map(|f| &f.endpoints) {
        println!("{endpoint}");
    }
    println!("ready {}", server.url());
    wait_for_signal().await?;
    drop(forges);
    if let Some(sim) = sim {
        sim.shutdown().await;
    }
    server.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
