//! `bench`: measures forgerunner on the fake world and prints one JSON object per scenario.
//!
//! The operator runs in its own process (this executable re-run as `__operator`), so its
//! memory and CPU readings are its own.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use forgerunner_sandbox::bench::harness::BenchForge;
use forgerunner_sandbox::bench::report::Report;
use forgerunner_sandbox::bench::scenarios::{self, ScenarioOptions};
use forgerunner_sandbox::world::block_on_main;
use forgerunner_sandbox::world::operator::{OperatorCommand, run_embedded_operator_if_asked};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Single,
    Burst,
    Steady,
    ManyGroups,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ForgeArg {
    Github,
    Gitea,
    Forgejo,
}

/// Measure forgerunner: latency, throughput, API cost, memory and CPU.
#[derive(Parser, Debug)]
#[command(name = "bench", version)]
struct Args {
    /// Scenario to run.
    #[arg(long, value_enum, default_value = "all")]
    scenario: Scenario,
    /// Forge to drive (every forge when omitted).
    #[arg(long, value_enum)]
    forge: Option<ForgeArg>,
    /// Jobs to queue (scenario default when omitted: single 20, burst 1000, many-groups 2000).
    #[arg(long)]
    jobs: Option<usize>,
    /// Simulated job duration in milliseconds.
    #[arg(long, default_value_t = 100)]
    work_ms: u64,
    /// steady: arrivals per second.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// steady: seconds of arrivals.
    #[arg(long, default_value_t = 20)]
    duration_secs: u64,
    /// many-groups: number of RunnerGroups.
    #[arg(long, default_value_t = 100)]
    groups: usize,
    /// Gitea: `poll`, `webhook`, or both (single defaults to both, others to webhook).
    /// Forgejo always polls (it has no job-level webhook).
    #[arg(long)]
    gitea_mode: Option<String>,
    /// After the JSON lines, print the runs as a Markdown table (the one docs/performance.md uses).
    #[arg(long)]
    table: bool,
    /// Run this `forgerunner` binary as the operator (e.g. `target/release/forgerunner`)
    /// instead of the copy embedded in this executable. The bench executable also carries the
    /// fake cluster and forges, and its code pages count in the embedded operator's RSS.
    #[arg(long, value_name = "PATH")]
    operator: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    if let Some(code) = run_embedded_operator_if_asked() {
        return code;
    }
    block_on_main(run(Args::parse()))
}

fn forges(args: &Args, scenario: Scenario) -> Vec<BenchForge> {
    let gitea_modes: Vec<BenchForge> = match args.gitea_mode.as_deref() {
        Some("poll") => vec![BenchForge::GiteaPoll],
        Some("webhook") => vec![BenchForge::GiteaWebhook],
        Some(_) => vec![BenchForge::GiteaPoll, BenchForge::GiteaWebhook],
        None if scenario == Scenario::Single => vec![BenchForge::GiteaPoll, BenchForge::GiteaWebhook],
        None if scenario == Scenario::ManyGroups => vec![BenchForge::GiteaPoll],
        None => vec![BenchForge::GiteaWebhook],
    };
    match args.forge {
        Some(ForgeArg::Github) => vec![BenchForge::Github],
        Some(ForgeArg::Gitea) => gitea_modes,
        Some(ForgeArg::Forgejo) => vec![BenchForge::Forgejo],
        None => std::iter::once(BenchForge::Github)
            .chain(gitea_modes)
            .chain([BenchForge::Forgejo])
            .collect(),
    }
}

async fn run(args: Args) -> ExitCode {
    let operator = match args
        .operator
        .clone()
        .map_or_else(OperatorCommand::embedded, |path| {
            Ok(OperatorCommand::binary(path))
        }) {
        Ok(op) => op,
        Err(e) => {
            eprintln!("error: cannot find this executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let opts = ScenarioOptions {
        operator,
        jobs: args.jobs,
        work_time: Duration::from_millis(args.work_ms),
        rate: args.rate,
        duration: Duration::from_secs(args.duration_secs),
        groups: args.groups,
    };
    let scenarios = match args.scenario {
        Scenario::All => vec![
            Scenario::Single,
            Scenario::Burst,
            Scenario::Steady,
            Scenario::ManyGroups,
        ],
        one => vec![one],
    };
    let mut clean = true;
    let mut rows = Vec::new();
    for scenario in scenarios {
        for forge in forges(&args, scenario) {
            let result: Result<Report, _> = match scenario {
                Scenario::Single => scenarios::single(forge, &opts).await,
                Scenario::Burst => scenarios::burst(forge, &opts).await,
                Scenario::Steady => scenarios::steady(forge, &opts).await,
                Scenario::ManyGroups | Scenario::All => scenarios::many_groups(forge, &opts).await,
            };
            match result {
                Ok(report) => {
                    clean &= report.completed && report.duplicates == 0 && report.leaks == 0;
                    println!("{}", report.to_json_line());
                    rows.push(report.to_table_row());
                }
                Err(e) => {
                    clean = false;
                    eprintln!("error: scenario {scenario:?} on {forge:?}: {e}");
                }
            }
        }
    }
    if args.table && !rows.is_empty() {
        println!("\n{}\n{}", Report::table_header(), rows.join("\n"));
    }
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
