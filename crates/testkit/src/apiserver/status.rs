//! Kubernetes `Status` error bodies, shaped exactly as the real API server shapes them.

use serde_json::{Value, json};

/// The `reason` of a failed request, as Kubernetes spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// 404: the object or resource does not exist.
    NotFound,
    /// 409: an object of that name already exists.
    AlreadyExists,
    /// 409: the object was modified (stale resourceVersion) or an SSA field conflict.
    Conflict,
    /// 422: the object failed validation.
    Invalid,
    /// 410: the requested resourceVersion is older than the retained history.
    Gone,
    /// 410: a continue token is older than the retained history.
    Expired,
    /// 400: the request itself is malformed.
    BadRequest,
    /// 403: the request is refused (e.g. creating in a terminating namespace).
    Forbidden,
    /// 405: the verb is not supported on this resource.
    MethodNotAllowed,
    /// 415: the patch content type is not supported.
    UnsupportedMediaType,
    /// 500: injected or internal failure.
    InternalError,
    /// 503: injected unavailability.
    ServiceUnavailable,
    /// 429: injected throttling.
    TooManyRequests,
    /// 504: a server timeout.
    Timeout,
    /// 413: the request body is over the server's limit.
    RequestEntityTooLarge,
    /// 500 with no reason (`StatusReasonUnknown`): an error the server did not classify, such
    /// as etcd refusing an object over its request size limit.
    Unknown,
}

impl Reason {
    /// The `reason` string in the Status body.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotFound => "NotFound",
            Reason::AlreadyExists => "AlreadyExists",
            Reason::Conflict => "Conflict",
            Reason::Invalid => "Invalid",
            Reason::Gone => "Gone",
            Reason::Expired => "Expired",
            Reason::BadRequest => "BadRequest",
            Reason::Forbidden => "Forbidden",
            Reason::MethodNotAllowed => "MethodNotAllowed",
            Reason::UnsupportedMediaType => "UnsupportedMediaType",
            Reason::InternalError => "InternalError",
            Reason::ServiceUnavailable => "ServiceUnavailable",
            Reason::TooManyRequests => "TooManyRequests",
            Reason::Timeout => "Timeout",
            Reason::RequestEntityTooLarge => "RequestEntityTooLarge",
            Reason::Unknown => "",
        }
    }

    /// The HTTP status code that goes with the reason.
    pub fn code(self) -> u16 {
        match self {
            Reason::NotFound => 404,
            Reason::AlreadyExists | Reason::Conflict => 409,
            Reason::Invalid => 422,
            Reason::Gone | Reason::Expired => 410,
            Reason::BadRequest => 400,
            Reason::Forbidden => 403,
            Reason::MethodNotAllowed => 405,
            Reason::UnsupportedMediaType => 415,
            Reason::InternalError => 500,
            Reason::ServiceUnavailable => 503,
            Reason::TooManyRequests => 429,
            Reason::Timeout => 504,
            Reason::RequestEntityTooLarge => 413,
            Reason::Unknown => 500,
        }
    }

    /// Maps an HTTP code (for fault injection) to the reason the real server would use.
    pub fn from_code(code: u16) -> Reason {
        match code {
            404 => Reason::NotFound,
            409 => Reason::Conflict,
            422 => Reason::Invalid,
            410 => Reason::Gone,
            400 => Reason::BadRequest,
            403 => Reason::Forbidden,
            405 => Reason::MethodNotAllowed,
            415 => Reason::UnsupportedMediaType,
            503 => Reason::ServiceUnavailable,
            429 => Reason::TooManyRequests,
            504 => Reason::Timeout,
            413 => Reason::RequestEntityTooLarge,
            _ => Reason::InternalError,
        }
    }
}

/// A failed API request: the reason, a message and the object it concerns.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// Why the request failed.
    pub reason: Reason,
    /// Human-readable message, formatted as Kubernetes formats it.
    pub message: String,
    /// `details`: name, group, kind and causes.
    pub details: Option<Value>,
    /// The HTTP code; normally `reason.code()`, but faults may choose another.
    pub code: u16,
}

/// Result alias for store and handler operations.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// An error without details.
    pub fn new(reason: Reason, message: impl Into<String>) -> ApiError {
        ApiError {
            reason,
            message: message.into(),
            details: None,
            code: reason.code(),
        }
    }

    /// `<resource>.<group> "<name>" not found`.
    pub fn not_found(group: &str, plural: &str, name: &str) -> ApiError {
        ApiError {
            reason: Reason::NotFound,
            message: format!("{} \"{name}\" not found", qualified(group, plural)),
            details: Some(json!({"name": name, "group": group, "kind": plural})),
            code: 404,
        }
    }

    /// `<resource>.<group> "<name>" already exists`.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> ApiError {
        ApiError {
            reason: Reason::AlreadyExists,
            message: format!("{} \"{name}\" already exists", qualified(group, plural)),
            details: Some(json!({"name": name, "group": group, "kind": plural})),
            code: 409,
        }
    }

    /// The optimistic-concurrency failure of an update with a stale resourceVersion.
    pub fn conflict(group: &str, plural: &str, name: &str) -> ApiError {
        ApiError {
            reason: Reason::Conflict,
            message: format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                qualified(group, plural)
            ),
            details: Some(json!({"name": name, "group": group, "kind": plural})),
            code: 409,
        }
    }

    /// `<Kind>.<group> "<name>" is invalid: <causes>` with one cause per field error.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: &[(String, String)]) -> ApiError {
        let joined: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let list = if joined.len() == 1 {
            joined.join("")
        } else {
            format!("[{}]", joined.join(", "))
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|(f, m)| json!({"reason": cause_reason(m), "message": m, "field": f}))
            .collect();
        ApiError {
            reason: Reason::Invalid,
            message: format!("{} \"{name}\" is invalid: {list}", qualified(group, kind)),
            details: Some(json!({"name": name, "group": group, "kind": kind, "causes": causes})),
            code: 422,
        }
    }

    /// The same error with another message.
    pub fn with_message(mut self, message: String) -> ApiError {
        self.message = message;
        self
    }

    /// The same error with another HTTP code.
    pub fn with_code(mut self, code: u16) -> ApiError {
        self.code = code;
        self
    }

    /// 400 Bad Request with a message.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(Reason::BadRequest, message)
    }

    /// apimachinery `NewRequestEntityTooLargeError`: 413 `Request entity too large: <why>`.
    pub fn too_large(why: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            Reason::RequestEntityTooLarge,
            format!("Request entity too large: {why}"),
        )
    }

    /// 410 for a watch or list from a compacted resourceVersion.
    pub fn gone(rv: u64) -> ApiError {
        ApiError::new(Reason::Gone, format!("too old resource version: {rv}"))
    }

    /// The `Status` body the real server sends.
    pub fn to_status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason.as_str(),
            "code": self.code,
        });
        if let (Some(d), Some(obj)) = (&self.details, v.as_object_mut()) {
            obj.insert("details".into(), d.clone());
        }
        if self.reason == Reason::Unknown
            && let Some(obj) = v.as_object_mut()
        {
            // `reason` is omitempty: an unknown reason is no reason at all.
            obj.remove("reason");
        }
        v
    }
}

/// The cause `reason` of a field error, read from the error type its message starts with, as
/// the real server derives both from one `field.ErrorType`.
fn cause_reason(message: &str) -> &'static str {
    const TYPES: [(&str, &str); 6] = [
        ("Required value", "FieldValueRequired"),
        ("Forbidden", "FieldValueForbidden"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
    ];
    TYPES
        .iter()
        .find(|(prefix, _)| message.starts_with(prefix))
        .map_or("FieldValueInvalid", |(_, reason)| reason)
}

/// `plural.group`, or just `plural` for the core group.
fn qualified(group: &str, name: &str) -> String {
    if group.is_empty() {
        name.to_string()
    } else {
        format!("{name}.{group}")
    }
}

/// The `Status` body of a successful delete that removed the object at once.
pub fn success_status(group: &str, plural: &str, name: &str, uid: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": group, "kind": plural, "uid": uid},
    })
}
