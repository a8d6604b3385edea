//! The `forgerunner` operator binary: subcommands `run`, `crd` and `version`.
//!
//! Exit codes: 0 success (including a signalled shutdown), 1 runtime failure (cluster
//! unreachable, CRD missing, controller failure), 2 bad command line or configuration.

mod cli;
mod cluster;
mod config;
mod controller;
mod forges;
mod health;
mod http;
mod leader;
mod lease;
mod run;
mod signals;
mod telemetry;
#[cfg(feature = "gitea")]
mod webhook;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command, RunArgs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => {
            print!("{}", forgerunner_core::crd::crd_yaml());
            ExitCode::SUCCESS
        }
        Command::Version => {
            println!("forgerunner {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::Run(args) => run_command(&args),
    }
}

fn run_command(args: &RunArgs) -> ExitCode {
    let env = config::process_env();
    let cfg = match config::Config::load(args.config.as_deref(), &env, &args.overrides()) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    telemetry::init(cfg.log_format, &cfg.log_level);
    // kube and reqwest link different rustls providers; without a process default the first
    // TLS client would panic. An Err only means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run::run(cfg));
    // Tasks still parked (watch streams) must not hold the exit up.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
