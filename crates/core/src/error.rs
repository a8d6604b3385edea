//! Bounded error categories shared by metrics labels, Event reasons and condition reasons.

use std::fmt;

/// A closed set of failure kinds; its string form is safe as a metric label or Event reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorCategory {
    /// The spec breaks a rule the CRD schema states.
    InvalidSpec,
    /// The group's forge is not enabled in this operator.
    ForgeDisabled,
    /// The group's forge URL (or proxy) is not in the operator's host allowlist, or is an IP
    /// address `forgeHosts.refusePrivateAddresses` refuses.
    ForgeHostNotAllowed,
    /// The credentials Secret does not exist.
    SecretNotFound,
    /// The credentials Secret lacks keys or holds malformed values.
    InvalidCredentials,
    /// The forge rejected the credentials.
    Unauthorized,
    /// Something the spec names does not exist at the forge.
    ForgeNotFound,
    /// The forge cannot work with this configuration.
    ForgeConfig,
    /// The forge rate-limited us.
    RateLimited,
    /// The forge is unreachable or failing.
    ForgeUnavailable,
    /// The forge backend is still starting.
    ForgeNotReady,
    /// A forge call outlasted the operator's deadline (a forge that accepts connections and
    /// does not answer, or answers too slowly); the group's pass gave up its slot.
    ForgeTimeout,
    /// A Kubernetes API call failed.
    Kubernetes,
    /// An object the group's runners need (`<group>-runner` ServiceAccount or RoleBinding)
    /// exists and is not the group's own; it is never taken over.
    RunnerRbacConflict,
    /// The group's container mode needs runner container hooks, which this install does not
    /// grant (chart value `rbac.runnerContainerHooks`).
    RunnerHooksDisabled,
    /// An object the group's shared cache needs (`<group>-actions-cache`) exists and is not the
    /// group's own; it is never taken over.
    CacheConflict,
}

impl ErrorCategory {
    /// CamelCase name used as metric label, Event reason and condition reason.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCategory::InvalidSpec => "InvalidSpec",
            ErrorCategory::ForgeDisabled => "ForgeDisabled",
            ErrorCategory::ForgeHostNotAllowed => "ForgeHostNotAllowed",
            ErrorCategory::SecretNotFound => "SecretNotFound",
            ErrorCategory::InvalidCredentials => "InvalidCredentials",
            ErrorCategory::Unauthorized => "Unauthorized",
            ErrorCategory::ForgeNotFound => "ForgeNotFound",
            ErrorCategory::ForgeConfig => "ForgeConfig",
            ErrorCategory::RateLimited => "RateLimited",
            ErrorCategory::ForgeUnavailable => "ForgeUnavailable",
            ErrorCategory::ForgeNotReady => "ForgeNotReady",
            ErrorCategory::ForgeTimeout => "ForgeTimeout",
            ErrorCategory::Kubernetes => "KubernetesError",
            ErrorCategory::RunnerRbacConflict => "RunnerRbacConflict",
            ErrorCategory::RunnerHooksDisabled => "RunnerHooksDisabled",
            ErrorCategory::CacheConflict => "CacheConflict",
        }
    }

    /// Whether the user must change something before a retry can succeed.
    pub fn needs_user_action(self) -> bool {
        matches!(
            self,
            ErrorCategory::InvalidSpec
                | ErrorCategory::ForgeDisabled
                | ErrorCategory::ForgeHostNotAllowed
                | ErrorCategory::SecretNotFound
                | ErrorCategory::InvalidCredentials
                | ErrorCategory::Unauthorized
                | ErrorCategory::ForgeNotFound
                | ErrorCategory::ForgeConfig
                | ErrorCategory::RunnerRbacConflict
                | ErrorCategory::RunnerHooksDisabled
                | ErrorCategory::CacheConflict
        )
    }
}

impl fmt::Display for ErrorCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
