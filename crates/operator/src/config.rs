//! Operator configuration: built-in defaults → YAML file → `FORGERUNNER_*` env → flags.
//!
//! Every layer feeds one figment and is read into a strict schema (unknown keys are errors),
//! then validated into [`Config`]. Errors name the offending key so a person can fix it.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use forgerunner_core::ForgeKind;
use forgerunner_core::forge_hosts::addresses::{AddressPolicy, REFUSE_PRIVATE_SETTING};
use forgerunner_core::forge_hosts::{FORGE_HOSTS_SETTING, ForgeHostAllowlist};
use forgerunner_core::reconcile::runner_rbac::RunnerHooks;
use forgerunner_http::{ListingLimits, ListingMemory};
use serde::{Deserialize, Serialize};

/// Prefix of every environment variable the configuration reads.
pub const ENV_PREFIX: &str = "FORGERUNNER_";

/// Environment variable naming the config file (read by the CLI, not by this loader).
pub const ENV_CONFIG_FILE: &str = "FORGERUNNER_CONFIG";

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Leader election settings, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// Whether to campaign for a Lease; when false the operator leads at once.
    pub enabled: bool,
    /// Name of the Lease.
    pub lease_name: String,
    /// Namespace of the Lease.
    pub lease_namespace: String,
    /// How long a lease stays valid after its last renewal.
    pub lease_duration: Duration,
    /// A leader steps down (and stops writing) when its last successful lease write was sent
    /// this long ago; less than `lease_duration`.
    pub renew_deadline: Duration,
    /// How often the leader renews and a standby retries; less than `renew_deadline`.
    pub retry_period: Duration,
}

/// The operator's validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Forges whose RunnerGroups this operator serves (never empty, no duplicates).
    pub forges: Vec<ForgeKind>,
    /// Namespaces to watch; empty means all.
    pub watch_namespaces: Vec<String>,
    /// Address of the HTTP server: webhooks and the probes, and `/metrics` too unless
    /// [`Config::metrics_addr`] is set.
    pub http_addr: SocketAddr,
    /// Address of a second listener for `/metrics` and the probes (`metricsAddr`); `None`
    /// (empty, the default) serves `/metrics` on [`Config::http_addr`] as before. On its own
    /// port, whoever may deliver webhooks (a forge, an Ingress, a LoadBalancer) cannot read
    /// metrics, which name every tenant's namespaces and groups.
    pub metrics_addr: Option<SocketAddr>,
    /// Log line format.
    pub log_format: LogFormat,
    /// Log filter directive (e.g. `info` or `forgerunner=debug,kube=info`).
    pub log_level: String,
    /// Leader election.
    pub leader_election: LeaderElectionConfig,
    /// Hosts a group's forge URL and proxy may point at (`forgeHosts.allowed`; empty: any),
    /// and whether private addresses are refused (`forgeHosts.refusePrivateAddresses`).
    pub forge_hosts: ForgeHostAllowlist,
    /// Job counters carry the job's repository and workflow (`metrics.jobLabels`).
    pub metrics_job_labels: bool,
    /// The ClusterRoles runner RBAC binds for the runner container hooks (`runnerHooks`);
    /// `None` when `runnerHooks.clusterRole` is empty: groups needing hooks are refused.
    pub runner_hooks: Option<RunnerHooks>,
    /// Entries (items and labels) every cached Gitea and Forgejo listing may hold together
    /// (`listingCacheEntries`); past it the least recently used listings are dropped.
    pub listing_cache_entries: usize,
}

/// Values given on the command line; `None` leaves the lower layers in charge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlagOverrides {
    /// `--forges github,gitea`.
    pub forges: Option<String>,
    /// `--watch-namespaces a,b`.
    pub watch_namespaces: Option<String>,
    /// `--http-addr`.
    pub http_addr: Option<String>,
    /// `--metrics-addr`.
    pub metrics_addr: Option<String>,
    /// `--log-format`.
    pub log_format: Option<String>,
    /// `--log-level`.
    pub log_level: Option<String>,
    /// `--listing-cache-entries`.
    pub listing_cache_entries: Option<String>,
}

/// A configuration error; always names the key (or file) at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("config file '{path}': {reason}")]
    File {
        /// The path given.
        path: PathBuf,
        /// Why it could not be read.
        reason: String,
    },
    /// A key is unknown, has a bad value, or names something not available.
    #[error("config key '{key}': {message}")]
    Key {
        /// Dotted camelCase key (or environment variable name for unknown variables).
        key: String,
        /// What is wrong, in words a person can act on.
        message: String,
    },
}

impl ConfigError {
    fn key(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Key {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// How an environment variable's text becomes a config value.
#[derive(Clone, Copy)]
enum EnvKind {
    /// Kept as text (names, lists split later by the schema).
    Text,
    /// Parsed as a boolean or number where it looks like one.
    Scalar,
}

/// Environment variables the configuration reads, with the key each one sets.
const ENV_KEYS: [(&str, &str, EnvKind); 20] = [
    ("FORGES", "forges", EnvKind::Text),
    ("WATCH_NAMESPACES", "watchNamespaces", EnvKind::Text),
    ("HTTP_ADDR", "httpAddr", EnvKind::Text),
    ("METRICS_ADDR", "metricsAddr", EnvKind::Text),
    ("LOG_FORMAT", "logFormat", EnvKind::Text),
    ("LOG_LEVEL", "logLevel", EnvKind::Text),
    (
        "LEADER_ELECTION_ENABLED",
        "leaderElection.enabled",
        EnvKind::Scalar,
    ),
    (
        "LEADER_ELECTION_LEASE_NAME",
        "leaderElection.leaseName",
        EnvKind::Text,
    ),
    (
        "LEADER_ELECTION_LEASE_NAMESPACE",
        "leaderElection.leaseNamespace",
        EnvKind::Text,
    ),
    (
        "LEADER_ELECTION_LEASE_DURATION_SECONDS",
        "leaderElection.leaseDurationSeconds",
        EnvKind::Scalar,
    ),
    ("FORGE_HOSTS_ALLOWED", FORGE_HOSTS_SETTING, EnvKind::Text),
    (
        "FORGE_HOSTS_REFUSE_PRIVATE_ADDRESSES",
        REFUSE_PRIVATE_SETTING,
        EnvKind::Scalar,
    ),
    (
        "LEADER_ELECTION_RENEW_DEADLINE_SECONDS",
        "leaderElection.renewDeadlineSeconds",
        EnvKind::Scalar,
    ),
    (
        "LEADER_ELECTION_RETRY_PERIOD_SECONDS",
        "leaderElection.retryPeriodSeconds",
        EnvKind::Scalar,
    ),
    ("METRICS_JOB_LABELS", "metrics.jobLabels", EnvKind::Scalar),
    ("LISTING_CACHE_ENTRIES", "listingCacheEntries", EnvKind::Scalar),
    (
        "RUNNER_HOOKS_CLUSTER_ROLE",
        "runnerHooks.clusterRole",
        EnvKind::Text,
    ),
    (
        "RUNNER_HOOKS_CLEANUP_CLUSTER_ROLE",
        "runnerHooks.cleanupClusterRole",
        EnvKind::Text,
    ),
    (
        "RUNNER_HOOKS_OPERATOR_SERVICE_ACCOUNT",
        "runnerHooks.operatorServiceAccount",
        EnvKind::Text,
    ),
    (
        "RUNNER_HOOKS_OPERATOR_NAMESPACE",
        "runnerHooks.operatorNamespace",
        EnvKind::Text,
    ),
];

/// A list given either as a YAML sequence or as one comma-separated string (env and flags).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum NameList {
    List(Vec<String>),
    Csv(String),
}

impl NameList {
    fn into_names(self) -> Vec<String> {
        let raw = match self {
            NameList::List(items) => items,
            NameList::Csv(text) => text.split(',').map(str::to_owned).collect(),
        };
        raw.into_iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    forges: NameList,
    watch_namespaces: NameList,
    http_addr: String,
    metrics_addr: String,
    log_format: LogFormat,
    log_level: String,
    leader_election: RawLeaderElection,
    forge_hosts: RawForgeHosts,
    metrics: RawMetrics,
    runner_hooks: RawRunnerHooks,
    listing_cache_entries: u64,
}

/// `runnerHooks`: what the chart ships for the runner container hooks (empty `clusterRole`:
/// nothing).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawRunnerHooks {
    cluster_role: String,
    cleanup_cluster_role: String,
    operator_service_account: String,
    operator_namespace: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawMetrics {
    job_labels: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawForgeHosts {
    allowed: NameList,
    refuse_private_addresses: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLeaderElection {
    enabled: bool,
    lease_name: String,
    lease_namespace: String,
    lease_duration_seconds: u32,
    /// Unset: two thirds of the duration (10 s for 15 s, as client-go).
    #[serde(default)]
    renew_deadline_seconds: Option<u32>,
    /// Unset: a fifth of the renew deadline (2 s for 10 s, as client-go).
    #[serde(default)]
    retry_period_seconds: Option<u32>,
}

/// Forges built into this binary (cargo features `github`, `gitea` and `forgejo`).
pub fn compiled_forges() -> Vec<ForgeKind> {
    let mut kinds = Vec::new();
    if cfg!(feature = "github") {
        kinds.push(ForgeKind::Github);
    }
    if cfg!(feature = "gitea") {
        kinds.push(ForgeKind::Gitea);
    }
    if cfg!(feature = "forgejo") {
        kinds.push(ForgeKind::Forgejo);
    }
    kinds
}

/// The process environment, for [`Config::load`].
pub fn process_env() -> BTreeMap<String, String> {
    std::env::vars().collect()
}

impl Config {
    /// Reads the layers in order (defaults, `file`, `env`, `flags`) and validates the result.
    /// `env` is passed in (not read here) so tests stay independent of the process.
    pub fn load(
        file: Option<&Path>,
        env: &BTreeMap<String, String>,
        flags: &FlagOverrides,
    ) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Layer::new("built-in defaults", defaults(env)));
        if let Some(path) = file {
            figment = figment.merge(Layer::new("the config file", file_layer(path)?));
        }
        figment = figment.merge(Layer::new("the environment", env_layer(env)?));
        figment = figment.merge(Layer::new("the command line", flag_layer(flags)));
        let raw: RawConfig = figment.extract().map_err(figment_error)?;
        validate(raw)
    }
}

/// One configuration layer with a name that error messages can show.
struct Layer {
    name: &'static str,
    data: Dict,
}

impl Layer {
    fn new(name: &'static str, data: Dict) -> Self {
        Layer { name, data }
    }
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut map = Map::new();
        map.insert(Profile::Default, self.data.clone());
        Ok(map)
    }
}

fn file_layer(path: &Path) -> Result<Dict, ConfigError> {
    let file_error = |reason: String| ConfigError::File {
        path: path.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_error(e.to_string()))?;
    if text.trim().is_empty() {
        return Ok(Dict::new());
    }
    match serde_yaml::from_str::<Value>(&text) {
        Ok(Value::Dict(_, dict)) => Ok(dict),
        Ok(_) => Err(file_error("the top level must be a mapping of keys".to_owned())),
        Err(e) => Err(file_error(format!("not valid YAML: {e}"))),
    }
}

fn defaults(env: &BTreeMap<String, String>) -> Dict {
    // The Lease lives next to the operator's pod unless told otherwise.
    let pod_namespace = env
        .get("POD_NAMESPACE")
        .filter(|ns| !ns.is_empty())
        .cloned()
        .unwrap_or_else(|| "default".to_owned());
    let lease_namespace = pod_namespace.clone();
    let mut leader = Dict::new();
    leader.insert("enabled".into(), Value::from(true));
    leader.insert("leaseName".into(), Value::from("forgerunner".to_owned()));
    leader.insert("leaseNamespace".into(), Value::from(lease_namespace));
    leader.insert("leaseDurationSeconds".into(), Value::from(15u32));
    let mut root = Dict::new();
    // Every forge built into the binary is enabled unless the configuration narrows it down.
    let forges: Vec<Value> = compiled_forges()
        .iter()
        .map(|k| Value::from(k.as_str().to_owned()))
        .collect();
    root.insert("forges".into(), Value::from(forges));
    root.insert("watchNamespaces".into(), Value::from(Vec::<Value>::new()));
    root.insert("httpAddr".into(), Value::from("0.0.0.0:8080".to_owned()));
    // Empty: `/metrics` stays on httpAddr, as before the key existed; the chart sets it.
    root.insert("metricsAddr".into(), Value::from(String::new()));
    root.insert("logFormat".into(), Value::from("text".to_owned()));
    root.insert("logLevel".into(), Value::from("info".to_owned()));
    root.insert("leaderElection".into(), Value::from(leader));
    let mut forge_hosts = Dict::new();
    forge_hosts.insert("allowed".into(), Value::from(Vec::<Value>::new()));
    // Off: many Gitea and Forgejo instances live inside the cluster, on private addresses.
    forge_hosts.insert("refusePrivateAddresses".into(), Value::from(false));
    root.insert("forgeHosts".into(), Value::from(forge_hosts));
    let mut metrics = Dict::new();
    metrics.insert("jobLabels".into(), Value::from(false));
    root.insert("metrics".into(), Value::from(metrics));
    // No hooks unless the chart ships their ClusterRoles. The operator's ServiceAccount lives in
    // its pod's namespace.
    let mut hooks = Dict::new();
    for key in ["clusterRole", "cleanupClusterRole", "operatorServiceAccount"] {
        hooks.insert(key.into(), Value::from(String::new()));
    }
    hooks.insert("operatorNamespace".into(), Value::from(pod_namespace));
    root.insert("runnerHooks".into(), Value::from(hooks));
    let listing_entries = u64::try_from(ListingMemory::DEFAULT_ENTRIES).unwrap_or(u64::MAX);
    root.insert("listingCacheEntries".into(), Value::from(listing_entries));
    root
}

fn env_layer(env: &BTreeMap<String, String>) -> Result<Dict, ConfigError> {
    let mut root = Dict::new();
    for (name, text) in env {
        let Some(suffix) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if name == ENV_CONFIG_FILE {
            continue;
        }
        let Some((_, key, kind)) = ENV_KEYS.iter().find(|(s, _, _)| *s == suffix) else {
            let known: Vec<String> = ENV_KEYS
                .iter()
                .map(|(s, _, _)| format!("{ENV_PREFIX}{s}"))
                .collect();
            return Err(ConfigError::key(
                name.clone(),
                format!(
                    "unknown environment variable (known: {ENV_CONFIG_FILE}, {})",
                    known.join(", ")
                ),
            ));
        };
        let value = match kind {
            EnvKind::Text => Value::from(text.clone()),
            EnvKind::Scalar => text.parse::<Value>().unwrap_or_else(|never| match never {}),
        };
        insert_dotted(&mut root, key, value);
    }
    Ok(root)
}

fn flag_layer(flags: &FlagOverrides) -> Dict {
    let mut root = Dict::new();
    let entries = [
        ("forges", &flags.forges),
        ("watchNamespaces", &flags.watch_namespaces),
        ("httpAddr", &flags.http_addr),
        ("metricsAddr", &flags.metrics_addr),
        ("logFormat", &flags.log_format),
        ("logLevel", &flags.log_level),
    ];
    for (key, value) in entries {
        if let Some(v) = value {
            root.insert(key.into(), Value::from(v.clone()));
        }
    }
    if let Some(v) = &flags.listing_cache_entries {
        // A number, as in the file; text that is none is refused by the schema, naming the key.
        let value = v.trim().parse::<Value>().unwrap_or_else(|never| match never {});
        root.insert("listingCacheEntries".into(), value);
    }
    root
}

fn insert_dotted(root: &mut Map<String, Value>, key: &str, value: Value) {
    match key.split_once('.') {
        None => {
            root.insert(key.to_owned(), value);
        }
        Some((head, rest)) => {
            let entry = root
                .entry(head.to_owned())
                .or_insert_with(|| Value::from(Dict::new()));
            if let Value::Dict(_, child) = entry {
                insert_dotted(child, rest, value);
            }
        }
    }
}

fn figment_error(err: figment::Error) -> ConfigError {
    let mut path = err.path.clone();
    let message = match &err.kind {
        figment::error::Kind::UnknownField(field, expected) => {
            // Figment usually puts the field in the path already; make sure it is there once.
            if path.last() != Some(field) {
                path.push(field.clone());
            }
            format!("unknown key (expected one of: {})", expected.join(", "))
        }
        figment::error::Kind::MissingField(field) => {
            if path.last().map(String::as_str) != Some(field.as_ref()) {
                path.push(field.to_string());
            }
            "missing".to_owned()
        }
        figment::error::Kind::UnknownVariant(found, expected) => {
            format!(
                "unknown value '{found}' (expected one of: {})",
                expected.join(", ")
            )
        }
        figment::error::Kind::Message(m) if m.contains("did not match any variant") => {
            "expected a list of names or one comma-separated string".to_owned()
        }
        other => other.to_string(),
    };
    let source = err
        .metadata
        .as_ref()
        .map(|m| format!(" (from {})", m.name))
        .unwrap_or_default();
    let key = if path.is_empty() {
        "<root>".to_owned()
    } else {
        path.join(".")
    };
    ConfigError::key(key, format!("{message}{source}"))
}

fn validate(raw: RawConfig) -> Result<Config, ConfigError> {
    let forges = validate_forges(raw.forges.into_names())?;
    let watch_namespaces = validate_namespaces(raw.watch_namespaces.into_names())?;
    let http_addr: SocketAddr = raw.http_addr.trim().parse().map_err(|e| {
        ConfigError::key(
            "httpAddr",
            format!("'{}' is not an address like 0.0.0.0:8080 ({e})", raw.http_addr),
        )
    })?;
    let metrics_addr = validate_metrics_addr(&raw.metrics_addr, http_addr)?;
    tracing_subscriber::EnvFilter::try_new(&raw.log_level).map_err(|e| {
        ConfigError::key(
            "logLevel",
            format!(
                "'{}' is not a log filter such as info or debug ({e})",
                raw.log_level
            ),
        )
    })?;
    let forge_hosts = validate_forge_hosts(raw.forge_hosts)?;
    let le = raw.leader_election;
    if !is_dns_subdomain(&le.lease_name) {
        return Err(ConfigError::key(
            "leaderElection.leaseName",
            format!("'{}' is not a valid Kubernetes object name", le.lease_name),
        ));
    }
    if !is_dns_label(&le.lease_namespace) {
        return Err(ConfigError::key(
            "leaderElection.leaseNamespace",
            format!("'{}' is not a valid namespace name", le.lease_namespace),
        ));
    }
    // Below 3 s the derived retry period would hammer the API server.
    if !(3..=3600).contains(&le.lease_duration_seconds) {
        return Err(ConfigError::key(
            "leaderElection.leaseDurationSeconds",
            format!("{} is out of range (3..=3600)", le.lease_duration_seconds),
        ));
    }
    let (renew_deadline, retry_period) = lease_timing(&le)?;
    let runner_hooks = validate_runner_hooks(raw.runner_hooks)?;
    let listing_cache_entries = validate_listing_cache_entries(raw.listing_cache_entries)?;
    Ok(Config {
        forges,
        watch_namespaces,
        http_addr,
        metrics_addr,
        log_format: raw.log_format,
        log_level: raw.log_level,
        leader_election: LeaderElectionConfig {
            enabled: le.enabled,
            lease_name: le.lease_name,
            lease_namespace: le.lease_namespace,
            lease_duration: Duration::from_secs(u64::from(le.lease_duration_seconds)),
            renew_deadline,
            retry_period,
        },
        forge_hosts,
        metrics_job_labels: raw.metrics.job_labels,
        runner_hooks,
        listing_cache_entries,
    })
}

/// `listingCacheEntries`: at least one listing at its own cap. Below that, each such listing
/// would drop every other cached listing, and every group would list its forge every pass.
fn validate_listing_cache_entries(entries: u64) -> Result<usize, ConfigError> {
    let min = ListingLimits::FORGE_DEFAULT.max_items;
    match usize::try_from(entries) {
        Ok(n) if n >= min => Ok(n),
        _ => Err(ConfigError::key(
            "listingCacheEntries",
            format!("{entries} is below {min}, what one listing may hold on its own"),
        )),
    }
}

/// `forgeHosts`: the allowlist under the address policy. An entry the policy refuses anyway
/// (`10.0.0.5` with `refusePrivateAddresses: true`) would allow a host no group could reach,
/// so the contradiction stops the operator rather than surprise a group.
fn validate_forge_hosts(raw: RawForgeHosts) -> Result<ForgeHostAllowlist, ConfigError> {
    let policy = AddressPolicy::from_refuse(raw.refuse_private_addresses);
    let hosts = ForgeHostAllowlist::parse(&raw.allowed.into_names())
        .map_err(|e| ConfigError::key(FORGE_HOSTS_SETTING, e.to_string()))?
        .with_addresses(policy);
    if let Some((entry, class)) = hosts.refused_entry() {
        return Err(ConfigError::key(
            FORGE_HOSTS_SETTING,
            format!(
                "'{entry}' is a {class} address, which {REFUSE_PRIVATE_SETTING}: true refuses; \
                 remove it or turn the refusal off"
            ),
        ));
    }
    Ok(hosts)
}

/// `metricsAddr`: empty for none (metrics on `httpAddr`), else an address whose port differs
/// from `httpAddr`'s, since both listeners could not be bound (port 0 asks the OS for a free
/// port each, so it never clashes).
fn validate_metrics_addr(text: &str, http_addr: SocketAddr) -> Result<Option<SocketAddr>, ConfigError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let addr: SocketAddr = text.parse().map_err(|e| {
        ConfigError::key(
            "metricsAddr",
            format!("'{text}' is not an address like 0.0.0.0:9090 ({e}); leave it empty to serve /metrics on httpAddr"),
        )
    })?;
    let overlaps =
        addr.ip() == http_addr.ip() || addr.ip().is_unspecified() || http_addr.ip().is_unspecified();
    if addr.port() != 0 && addr.port() == http_addr.port() && overlaps {
        return Err(ConfigError::key(
            "metricsAddr",
            format!(
                "{addr} takes the port of httpAddr ({http_addr}); use another port, or leave it empty to \
                 serve /metrics on httpAddr"
            ),
        ));
    }
    Ok(Some(addr))
}

/// `runnerHooks`, all set or off: the names end up in RoleBindings, whose `roleRef` cannot
/// change once made, so a typo must stop the operator rather than reach a group.
fn validate_runner_hooks(raw: RawRunnerHooks) -> Result<Option<RunnerHooks>, ConfigError> {
    let cluster_role = raw.cluster_role.trim().to_owned();
    if cluster_role.is_empty() {
        return Ok(None);
    }
    let role = |key: &str, name: String| -> Result<String, ConfigError> {
        let name = name.trim().to_owned();
        if is_rbac_name(&name) {
            Ok(name)
        } else {
            Err(ConfigError::key(
                key,
                format!("'{name}' is not a valid ClusterRole name (needed with runnerHooks.clusterRole)"),
            ))
        }
    };
    let cluster_role = role("runnerHooks.clusterRole", cluster_role)?;
    let cleanup_cluster_role = role("runnerHooks.cleanupClusterRole", raw.cleanup_cluster_role)?;
    let account = raw.operator_service_account.trim().to_owned();
    if !is_dns_subdomain(&account) {
        return Err(ConfigError::key(
            "runnerHooks.operatorServiceAccount",
            format!(
                "'{account}' is not a valid ServiceAccount name (the operator's own; needed with \
                 runnerHooks.clusterRole)"
            ),
        ));
    }
    let namespace = raw.operator_namespace.trim().to_owned();
    if !is_dns_label(&namespace) {
        return Err(ConfigError::key(
            "runnerHooks.operatorNamespace",
            format!("'{namespace}' is not a valid namespace name"),
        ));
    }
    Ok(Some(RunnerHooks {
        cluster_role,
        cleanup_cluster_role,
        operator_namespace: namespace,
        operator_service_account: account,
    }))
}

/// What the API server accepts as the name of an RBAC object (`ValidateRBACName`,
/// `pkg/apis/rbac/validation/validation.go`: `path.IsValidPathSegmentName`), kept to at most
/// 253 bytes like every object name.
fn is_rbac_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s != "." && s != ".." && !s.contains(['/', '%'])
}

/// The renew deadline and retry period, set or derived; a leader must stop before a standby may
/// take over, and must get more than one renewal attempt before it stops.
fn lease_timing(le: &RawLeaderElection) -> Result<(Duration, Duration), ConfigError> {
    let duration = Duration::from_secs(u64::from(le.lease_duration_seconds));
    let deadline = match le.renew_deadline_seconds {
        Some(s) if u64::from(s) >= duration.as_secs() || s == 0 => {
            return Err(ConfigError::key(
                "leaderElection.renewDeadlineSeconds",
                format!(
                    "{s} must be at least 1 and less than leaderElection.leaseDurationSeconds ({})",
                    le.lease_duration_seconds
                ),
            ));
        }
        Some(s) => Duration::from_secs(u64::from(s)),
        None => duration * 2 / 3,
    };
    let retry = match le.retry_period_seconds {
        Some(s) if s == 0 || Duration::from_secs(u64::from(s)) >= deadline => {
            return Err(ConfigError::key(
                "leaderElection.retryPeriodSeconds",
                format!(
                    "{s} must be at least 1 and less than the renew deadline ({} s)",
                    deadline.as_secs_f32()
                ),
            ));
        }
        Some(s) => Duration::from_secs(u64::from(s)),
        None => deadline / 5,
    };
    Ok((deadline, retry))
}

fn validate_forges(names: Vec<String>) -> Result<Vec<ForgeKind>, ConfigError> {
    let compiled = compiled_forges();
    let mut kinds = Vec::new();
    for name in names {
        let lower = name.to_ascii_lowercase();
        let Some(kind) = ForgeKind::parse(&lower) else {
            return Err(ConfigError::key(
                "forges",
                format!("unknown forge '{name}' (known: {})", join_kinds(&ForgeKind::ALL)),
            ));
        };
        if !compiled.contains(&kind) {
            return Err(ConfigError::key(
                "forges",
                format!(
                    "forge '{kind}' is not compiled into this build (compiled in: {})",
                    join_kinds(&compiled)
                ),
            ));
        }
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    if kinds.is_empty() {
        return Err(ConfigError::key(
            "forges",
            format!(
                "at least one forge must be enabled (compiled in: {})",
                join_kinds(&compiled)
            ),
        ));
    }
    Ok(kinds)
}

fn validate_namespaces(names: Vec<String>) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::new();
    for name in names {
        if !is_dns_label(&name) {
            return Err(ConfigError::key(
                "watchNamespaces",
                format!("'{name}' is not a valid namespace name"),
            ));
        }
        if !out.contains(&name) {
            out.push(name);
        }
    }
    Ok(out)
}

fn join_kinds(kinds: &[ForgeKind]) -> String {
    if kinds.is_empty() {
        return "none".to_owned();
    }
    kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
}

/// RFC 1123 label: what Kubernetes accepts as a namespace name.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: what Kubernetes accepts as most object names.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
