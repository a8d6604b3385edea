//! Command line of the `forgerunner` binary (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::FlagOverrides;

/// forgerunner: a Kubernetes operator that autoscales ephemeral CI runners for GitHub and Gitea.
#[derive(Debug, Parser)]
#[command(name = "forgerunner", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator.
    Run(RunArgs),
    /// Print the RunnerGroup CustomResourceDefinition as YAML.
    Crd,
    /// Print the version.
    Version,
}

/// Flags of `forgerunner run`; each one overrides the config file and the environment.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// YAML config file (keys: forges, watchNamespaces, httpAddr, metricsAddr, logFormat, logLevel,
    /// leaderElection, forgeHosts, metrics, runnerHooks, listingCacheEntries).
    #[arg(long, value_name = "PATH", env = crate::config::ENV_CONFIG_FILE)]
    pub config: Option<PathBuf>,
    /// Enabled forges, comma-separated (e.g. github,gitea,forgejo).
    #[arg(long, value_name = "LIST")]
    pub forges: Option<String>,
    /// Namespaces to watch, comma-separated; empty means all.
    #[arg(long, value_name = "LIST")]
    pub watch_namespaces: Option<String>,
    /// Address of the HTTP server (webhooks, probes, and metrics unless --metrics-addr is set).
    #[arg(long, value_name = "ADDR")]
    pub http_addr: Option<String>,
    /// Address of a separate listener for /metrics and the probes; empty serves /metrics on
    /// the HTTP address.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
    /// Log format: text or json.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// Log level or filter (RUST_LOG wins when set).
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Entries (items and labels) all cached Gitea and Forgejo listings may hold together.
    #[arg(long, value_name = "N")]
    pub listing_cache_entries: Option<String>,
}

impl RunArgs {
    /// The flags as the top configuration layer.
    pub fn overrides(&self) -> FlagOverrides {
        FlagOverrides {
            forges: self.forges.clone(),
            watch_namespaces: self.watch_namespaces.clone(),
            http_addr: self.http_addr.clone(),
            metrics_addr: self.metrics_addr.clone(),
            log_format: self.log_format.clone(),
            log_level: self.log_level.clone(),
            listing_cache_entries: self.listing_cache_entries.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_flags_become_overrides() {
        let cli = Cli::try_parse_from([
            "forgerunner",
            "run",
            "--forges",
            "github",
            "--http-addr",
            "127.0.0.1:1",
            "--metrics-addr",
            "127.0.0.1:2",
        ])
        .expect("parses");
        let Command::Run(args) = cli.command else {
            panic!("expected run");
        };
        let o = args.overrides();
        assert_eq!(o.forges.as_deref(), Some("github"));
        assert_eq!(o.http_addr.as_deref(), Some("127.0.0.1:1"));
        assert_eq!(o.metrics_addr.as_deref(), Some("127.0.0.1:2"));
        assert_eq!(o.log_level, None);
    }
}
