//! The forgerunner operator: configuration, wiring of the enabled forges, leader election,
//! the HTTP server and the `run`, `crd` and `version` subcommands.
//!
//! The `forgerunner` binary is a thin wrapper around [`main_with_args`]; the testkit's sandbox
//! and benchmark embed the same entry point to run the real operator in a child process.

#[cfg(test)]
mod cel_rules_tests;
mod cli;
mod cluster;
mod config;
mod controller;
mod fence_layer;
mod forges;
mod forward;
mod health;
mod http;
mod leader;
mod leader_route;
mod lease;
mod run;
mod server;
mod signals;
#[cfg(test)]
mod spec_bounds_tests;
mod telemetry;
mod webhook_route;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command, RunArgs};

/// Runs the operator CLI with `args` (the first item is the program name); returns the exit code.
///
/// Exit codes: 0 success (including a signalled shutdown), 1 runtime failure (cluster
/// unreachable, CRD missing, controller failure), 2 bad command line or configuration.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
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
    // One rustls provider for every TLS client, kube's included, before any is built.
    let _ = forgerunner_http::crypto_provider();
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
