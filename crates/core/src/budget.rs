//! The forge's API budget (rate limit) per credential: what the forge reports in its response
//! headers, the gauges that export it, and how runner creation slows down before it runs out.
//!
//! GitHub sends `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` (epoch
//! seconds). Gitea and Forgejo send none, so their groups are never throttled here (a 429 is
//! still handled as [`crate::forge::ForgeError::RateLimited`]).

use std::collections::HashMap;
use std::sync::Mutex;

use jiff::Timestamp;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Below this share of the limit left, creation per pass is scaled down.
pub const LOW_BUDGET_PERCENT: u64 = 10;
/// At or below this share of the limit left, no runner is created until the reset: what is
/// left is kept for observing and cleaning up.
pub const RESERVE_PERCENT: u64 = 1;

/// One reading of the API budget of a credential.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateBudget {
    /// Requests allowed per window (`X-RateLimit-Limit`).
    pub limit: u64,
    /// Requests left in the window (`X-RateLimit-Remaining`).
    pub remaining: u64,
    /// When the window resets (`X-RateLimit-Reset`), if told.
    pub reset: Option<Timestamp>,
}

impl RateBudget {
    /// Reads the `X-RateLimit-*` headers; `None` unless both limit and remaining are numbers.
    pub fn from_headers(headers: &http::HeaderMap) -> Option<RateBudget> {
        let num = |name: &str| -> Option<u64> { headers.get(name)?.to_str().ok()?.trim().parse().ok() };
        let limit = num("x-ratelimit-limit")?;
        let remaining = num("x-ratelimit-remaining")?;
        let reset = num("x-ratelimit-reset")
            .and_then(|s| i64::try_from(s).ok())
            .and_then(|s| Timestamp::from_second(s).ok());
        Some(RateBudget {
            limit,
            remaining,
            reset,
        })
    }

    /// Whether the window this reading belongs to is over (the budget is full again).
    pub fn expired(&self, now: Timestamp) -> bool {
        self.reset.is_some_and(|r| r <= now)
    }
}

/// How many of the planned runners a pass may create on this budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreationAllowance {
    /// Runners to create.
    pub create: u32,
    /// Fewer than planned because the budget is low.
    pub throttled: bool,
}

/// Slows creation down before the budget runs out, instead of after the forge's 403/429.
///
/// - No reading, a zero limit, or a window already reset: create as planned.
/// - `remaining` at or above [`LOW_BUDGET_PERCENT`] of `limit`: create as planned.
/// - Below that, the planned number is scaled by how much of the low band is left (at least
///   one per pass), so the last requests stretch over more passes.
/// - At or below [`RESERVE_PERCENT`] of `limit` (at least one request): create none; the rest is
///   left for observing and removing runners until the reset.
pub fn creation_allowance(planned: u32, budget: Option<&RateBudget>, now: Timestamp) -> CreationAllowance {
    let as_planned = CreationAllowance {
        create: planned,
        throttled: false,
    };
    let Some(b) = budget else {
        return as_planned;
    };
    if planned == 0 || b.limit == 0 || b.expired(now) {
        return as_planned;
    }
    let low_band = b.limit.saturating_mul(LOW_BUDGET_PERCENT) / 100;
    if b.remaining >= low_band.max(1) {
        return as_planned;
    }
    let reserve = (b.limit.saturating_mul(RESERVE_PERCENT) / 100).max(1);
    let create = if b.remaining <= reserve {
        0
    } else {
        let scaled = u64::from(planned).saturating_mul(b.remaining) / low_band.max(1);
        u32::try_from(scaled).unwrap_or(planned).clamp(1, planned)
    };
    CreationAllowance {
        create,
        throttled: create < planned,
    }
}

/// Labels of the budget gauges. `credential` is a stable, non-secret id of the credential
/// (a GitHub App's `app/<id>/installation/<id>`, or the credentials Secret's `namespace/name`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct BudgetLabels {
    /// The forge (`spec.forge`).
    pub forge: &'static str,
    /// Non-secret credential id.
    pub credential: String,
}

/// The budget gauges, kept apart from [`crate::metrics::Metrics`]'s other families.
#[derive(Debug, Default)]
pub struct BudgetMetrics {
    /// `forgerunner_forge_rate_limit_remaining`.
    pub remaining: Family<BudgetLabels, Gauge>,
    /// `forgerunner_forge_rate_limit_limit`.
    pub limit: Family<BudgetLabels, Gauge>,
    /// `forgerunner_forge_rate_limit_reset_timestamp_seconds`.
    pub reset: Family<BudgetLabels, Gauge>,
    /// How many live clients use each credential: its gauges go when the last one does, so a
    /// deleted group's credential stops being exported (groups may share a credential).
    users: Mutex<HashMap<BudgetLabels, usize>>,
}

impl BudgetMetrics {
    /// Registers the gauges in `registry` (already prefixed `forgerunner`).
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "forge_rate_limit_remaining",
            "Requests left in the forge's rate-limit window, per credential",
            self.remaining.clone(),
        );
        r.register(
            "forge_rate_limit_limit",
            "Requests allowed per rate-limit window by the forge, per credential",
            self.limit.clone(),
        );
        r.register(
            "forge_rate_limit_reset_timestamp_seconds",
            "When the forge's rate-limit window resets (Unix seconds), per credential",
            self.reset.clone(),
        );
    }

    /// Records one reading.
    pub fn set(&self, forge: &'static str, credential: &str, b: &RateBudget) {
        let labels = BudgetLabels {
            forge,
            credential: credential.to_owned(),
        };
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.remaining.get_or_create(&labels).set(clamp(b.remaining));
        self.limit.get_or_create(&labels).set(clamp(b.limit));
        if let Some(r) = b.reset {
            self.reset.get_or_create(&labels).set(r.as_second());
        }
    }

    /// A client starts using `credential`; pair with [`BudgetMetrics::release`].
    pub fn hold(&self, forge: &'static str, credential: &str) {
        let labels = BudgetLabels {
            forge,
            credential: credential.to_owned(),
        };
        *self.lock_users().entry(labels).or_default() += 1;
    }

    /// A client using `credential` is gone; the last one takes the credential's gauges along.
    pub fn release(&self, forge: &'static str, credential: &str) {
        let labels = BudgetLabels {
            forge,
            credential: credential.to_owned(),
        };
        let mut users = self.lock_users();
        let last = match users.get_mut(&labels) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => true,
            None => return,
        };
        if last {
            users.remove(&labels);
            self.remaining.remove(&labels);
            self.limit.remove(&labels);
            self.reset.remove(&labels);
        }
    }

    fn lock_users(&self) -> std::sync::MutexGuard<'_, HashMap<BudgetLabels, usize>> {
        self.users
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The latest budget reading of one client (one credential), shared by its requests.
#[derive(Debug, Default)]
pub struct BudgetCell(Mutex<Option<RateBudget>>);

impl BudgetCell {
    /// Keeps `b` as the latest reading.
    pub fn update(&self, b: RateBudget) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(b);
    }

    /// The latest reading, if any.
    pub fn get(&self) -> Option<RateBudget> {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(remaining: u64, limit: u64) -> RateBudget {
        RateBudget {
            limit,
            remaining,
            reset: Some(Timestamp::from_second(2_000_000_000).unwrap()),
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_900_000_000).unwrap()
    }

    #[test]
    fn plenty_of_budget_creates_as_planned() {
        for b in [None, Some(budget(5000, 5000)), Some(budget(500, 5000))] {
            let a = creation_allowance(40, b.as_ref(), now());
            assert_eq!(
                a,
                CreationAllowance {
                    create: 40,
                    throttled: false
                }
            );
        }
    }

    #[test]
    fn low_budget_scales_creation_down() {
        // 250 of a 500-request low band left: half the planned runners.
        let a = creation_allowance(40, Some(&budget(250, 5000)), now());
        assert_eq!(
            a,
            CreationAllowance {
                create: 20,
                throttled: true
            }
        );
        // Nearly out but above the reserve: still one per pass.
        let a = creation_allowance(5, Some(&budget(60, 5000)), now());
        assert_eq!(
            a,
            CreationAllowance {
                create: 1,
                throttled: true
            }
        );
        // One planned runner on a low budget is still created.
        let a = creation_allowance(1, Some(&budget(300, 5000)), now());
        assert_eq!(
            a,
            CreationAllowance {
                create: 1,
                throttled: false
            }
        );
    }

    #[test]
    fn reserve_stops_creation_until_the_reset() {
        let a = creation_allowance(40, Some(&budget(50, 5000)), now());
        assert_eq!(
            a,
            CreationAllowance {
                create: 0,
                throttled: true
            }
        );
        let a = creation_allowance(3, Some(&budget(0, 60)), now());
        assert_eq!(
            a,
            CreationAllowance {
                create: 0,
                throttled: true
            }
        );
        // After the reset time the old reading says nothing.
        let later = Timestamp::from_second(2_000_000_001).unwrap();
        let a = creation_allowance(3, Some(&budget(0, 60)), later);
        assert_eq!(
            a,
            CreationAllowance {
                create: 3,
                throttled: false
            }
        );
    }

    #[test]
    fn nothing_planned_or_no_limit_is_never_throttled() {
        assert!(!creation_allowance(0, Some(&budget(0, 5000)), now()).throttled);
        assert_eq!(creation_allowance(4, Some(&budget(0, 0)), now()).create, 4);
    }

    #[test]
    fn reads_github_headers() {
        let mut h = http::HeaderMap::new();
        h.insert("x-ratelimit-limit", "5000".parse().unwrap());
        h.insert("x-ratelimit-remaining", " 4999".parse().unwrap());
        h.insert("x-ratelimit-reset", "1900000100".parse().unwrap());
        let b = RateBudget::from_headers(&h).unwrap();
        assert_eq!((b.limit, b.remaining), (5000, 4999));
        assert_eq!(b.reset.map(|r| r.as_second()), Some(1_900_000_100));
        h.remove("x-ratelimit-limit");
        assert_eq!(RateBudget::from_headers(&h), None);
        h.insert("x-ratelimit-limit", "lots".parse().unwrap());
        assert_eq!(RateBudget::from_headers(&h), None);
    }

    #[test]
    fn gauges_follow_readings_and_go_with_the_credential() {
        let m = BudgetMetrics::default();
        m.set("github", "app/1/installation/2", &budget(42, 5000));
        let labels = BudgetLabels {
            forge: "github",
            credential: "app/1/installation/2".into(),
        };
        assert_eq!(m.remaining.get_or_create(&labels).get(), 42);
        assert_eq!(m.limit.get_or_create(&labels).get(), 5000);
        assert_eq!(m.reset.get_or_create(&labels).get(), 2_000_000_000);
        m.hold("github", "app/1/installation/2");
        m.hold("github", "app/1/installation/2");
        m.release("github", "app/1/installation/2");
        assert_eq!(m.remaining.get_or_create(&labels).get(), 42, "one user left");
        m.release("github", "app/1/installation/2");
        m.release("github", "app/1/installation/2");
        let mut reg = Registry::default();
        m.register(&mut reg);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        assert!(!out.contains("app/1"), "{out}");
    }
}
