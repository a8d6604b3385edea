//! Wire types of the Actions service shared by several modules.

use serde::{Deserialize, Deserializer, Serialize};

/// Scale set statistics (`statistics` on sessions, messages and scale sets). Counts outside
/// `u32` (negative, huge) are clamped rather than rejected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Statistics {
    /// Queued for the scale set, not yet acquired.
    #[serde(deserialize_with = "count")]
    pub total_available_jobs: u32,
    /// Acquired by the scale set.
    #[serde(deserialize_with = "count")]
    pub total_acquired_jobs: u32,
    /// Assigned to the scale set (waiting for a runner plus running): the scaling signal.
    #[serde(deserialize_with = "count")]
    pub total_assigned_jobs: u32,
    /// Running.
    #[serde(deserialize_with = "count")]
    pub total_running_jobs: u32,
    /// Registered runners.
    #[serde(deserialize_with = "count")]
    pub total_registered_runners: u32,
    /// Busy runners.
    #[serde(deserialize_with = "count")]
    pub total_busy_runners: u32,
    /// Idle runners.
    #[serde(deserialize_with = "count")]
    pub total_idle_runners: u32,
}

fn count<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    let n = match v {
        Some(serde_json::Value::Number(n)) => n.as_i64().unwrap_or(if n.as_f64().is_some_and(|f| f > 0.0) {
            i64::MAX
        } else {
            0
        }),
        _ => 0,
    };
    Ok(u32::try_from(n.max(0)).unwrap_or(u32::MAX))
}

/// `{"count":N,"value":[…]}` lists of the Actions service.
#[derive(Debug, Deserialize)]
pub struct ListOf<T> {
    /// The items.
    #[serde(default = "Vec::new")]
    pub value: Vec<T>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_counts() {
        let s: Statistics = serde_json::from_str(
            r#"{"totalAssignedJobs": -1, "totalRunningJobs": 99999999999, "totalIdleRunners": null}"#,
        )
        .unwrap();
        assert_eq!(s.total_assigned_jobs, 0);
        assert_eq!(s.total_running_jobs, u32::MAX);
        assert_eq!(s.total_idle_runners, 0);
        let s: Statistics = serde_json::from_str(r#"{"totalAssignedJobs": 5, "unknown": true}"#).unwrap();
        assert_eq!(s.total_assigned_jobs, 5);
    }
}
