//! `chaos`: runs the chaos table (every scenario on every forge, `--runs` times), prints one
//! JSON object per cell and the table, and with `--write FILE` puts the table between the
//! markers of FILE's `## Chaos table` section.
//!
//! The operator runs in its own processes (this executable re-run as `__operator`), killed
//! and partitioned like a real deployment's pods.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use forgerunner_sandbox::chaos::table::{Summary, replace_between_markers};
use forgerunner_sandbox::chaos::{ChaosOptions, Scenario, run_row};
use forgerunner_sandbox::world::block_on_main;
use forgerunner_sandbox::world::operator::{OperatorCommand, run_embedded_operator_if_asked};

/// Break things under a burst of jobs and count what was lost, run twice or left behind.
#[derive(Parser, Debug)]
#[command(name = "chaos", version)]
struct Args {
    /// Passes over the whole table.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Only these scenarios (comma-separated names; every scenario when omitted).
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<String>,
    /// Write the table into this Markdown file, between its chaos-table markers.
    #[arg(long)]
    write: Option<PathBuf>,
}

fn main() -> ExitCode {
    if let Some(code) = run_embedded_operator_if_asked() {
        return code;
    }
    block_on_main(run(Args::parse()))
}

async fn run(args: Args) -> ExitCode {
    let operator = match OperatorCommand::embedded() {
        Ok(op) => op,
        Err(e) => {
            eprintln!("error: cannot find this executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut scenarios = Vec::new();
    for name in &args.scenario {
        match Scenario::from_name(name) {
            Some(s) => scenarios.push(s),
            None => {
                let known: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
                eprintln!("error: unknown scenario {name:?}; known: {}", known.join(", "));
                return ExitCode::FAILURE;
            }
        }
    }
    if scenarios.is_empty() {
        scenarios = Scenario::ALL.to_vec();
    }
    let opts = ChaosOptions::new(operator);
    let mut summary = Summary::default();
    for run in 1..=args.runs.max(1) {
        for &scenario in &scenarios {
            for (forge, result) in run_row(scenario, &opts).await {
                match &result {
                    Ok(outcome) => {
                        let line = serde_json::to_string(outcome)
                            .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
                        println!("{{\"run\":{run},\"outcome\":{line}}}");
                        if !outcome.log_tail.is_empty() {
                            eprintln!(
                                "{} on {}: operator output:\n{}",
                                scenario.name(),
                                forge.name(),
                                outcome.log_tail
                            );
                        }
                    }
                    Err(e) => eprintln!("error: run {run}, {} on {}: {e}", scenario.name(), forge.name()),
                }
                summary.add(scenario, forge, &result);
            }
        }
    }
    let table = summary.markdown();
    println!("{table}");
    if let Some(path) = &args.write {
        let doc = match std::fs::read_to_string(path) {
            Ok(doc) => doc,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                eprintln!("error: cannot read {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        };
        let written = replace_between_markers(&doc, &table).map(|new| std::fs::write(path, new));
        match written {
            Ok(Ok(())) => eprintln!("wrote the table into {}", path.display()),
            Ok(Err(e)) => {
                eprintln!("error: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("error: {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
    }
    if summary.all_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
