//! Tracing spans around reconciles and forge calls. They carry the group key and the forge so
//! every log line inside (ours and the forge backends') names its group, in text and JSON
//! logs alike; arguments are never recorded (they hold credentials).

use tracing::Span;

use crate::forge::GroupContext;

/// The span of one forge call (`observe`, `runner_credentials`, `remove_runner`, `shutdown`)
/// for `group`.
pub fn forge_call(operation: &'static str, group: &GroupContext) -> Span {
    tracing::info_span!(
        "forge_call",
        operation,
        group = %group.key,
        forge = group.group.spec.forge.as_str()
    )
}
