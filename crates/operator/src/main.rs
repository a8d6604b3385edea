//! The `forgerunner` operator binary: subcommands `run`, `crd` and `version`.

mod cli;
mod config;
mod telemetry;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

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
        Command::Run(args) => {
            let env = config::process_env();
            match config::Config::load(args.config.as_deref(), &env, &args.overrides()) {
                Ok(cfg) => {
                    telemetry::init(cfg.log_format, &cfg.log_level);
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
