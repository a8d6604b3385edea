//! `fake-cluster`: runs the testkit's fake Kubernetes API server until killed.
//!
//! Prints exactly one line, `ready <url>`, once it listens; writes a kubeconfig for kubectl and
//! kube clients when asked.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use forgerunner_testkit::apiserver::{FakeApiServer, ServerConfig};

/// Command-line options.
#[derive(Parser, Debug)]
#[command(
    name = "fake-cluster",
    about = "A fake Kubernetes API server on loopback (forgerunner testkit)"
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
    println!("ready {}", server.url());
    wait_for_signal().await?;
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
