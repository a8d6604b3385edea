//! Field errors, worded as apimachinery's `field.Error.ErrorBody` words them
//! (`pkg/util/validation/field/errors.go`, v0.34): `Invalid value: "<v>": <detail>`,
//! `Required value: <detail>`, `Forbidden: <detail>`, `Too long: may not be more than N bytes`.
//! A field error is a (path, body) pair, the form [`super::status::ApiError::invalid`] takes.

use serde_json::Value;

/// One field error: the field path and the message body.
pub type FieldError = (String, String);

/// A string value as Go's `%q` prints it (JSON string quoting; the two differ only for control
/// and non-printable characters).
pub fn quote(s: &str) -> String {
    Value::from(s).to_string()
}

/// `field.Invalid` with a string value.
pub fn invalid(path: &str, value: &str, detail: &str) -> FieldError {
    (
        path.to_string(),
        format!("Invalid value: {}: {detail}", quote(value)),
    )
}

/// `field.Invalid` with a non-string value, printed as JSON, as `ErrorBody` prints maps,
/// slices, structs and pointers.
pub fn invalid_json(path: &str, value: &Value, detail: &str) -> FieldError {
    (path.to_string(), format!("Invalid value: {value}: {detail}"))
}

/// `field.Required`.
pub fn required(path: &str, detail: &str) -> FieldError {
    let body = if detail.is_empty() {
        "Required value".to_string()
    } else {
        format!("Required value: {detail}")
    };
    (path.to_string(), body)
}

/// `field.Forbidden`.
pub fn forbidden(path: &str, detail: &str) -> FieldError {
    (path.to_string(), format!("Forbidden: {detail}"))
}

/// `field.TooLong` with a byte limit (the value is never printed).
pub fn too_long(path: &str, max_bytes: usize) -> FieldError {
    let unit = if max_bytes == 1 { "byte" } else { "bytes" };
    (
        path.to_string(),
        format!("Too long: may not be more than {max_bytes} {unit}"),
    )
}

/// `field.Error.Error()`: `<path>: <body>`.
pub fn render(e: &FieldError) -> String {
    format!("{}: {}", e.0, e.1)
}

/// `utilerrors.NewAggregate(...).Error()`: one message alone, several de-duplicated in brackets.
pub fn aggregate(errs: &[FieldError]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errs {
        let msg = render(e);
        if !seen.contains(&msg) {
            seen.push(msg);
        }
    }
    match seen.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// field/errors.go `ErrorBody`: strings quoted, JSON for other values, no value for TooLong.
    #[test]
    fn bodies_match_error_body() {
        assert_eq!(invalid("a", "x\"y", "bad").1, "Invalid value: \"x\\\"y\": bad");
        assert_eq!(
            invalid_json("a", &serde_json::json!(2), "bad").1,
            "Invalid value: 2: bad"
        );
        assert_eq!(required("a", "").1, "Required value");
        assert_eq!(
            too_long("a", 262144).1,
            "Too long: may not be more than 262144 bytes"
        );
        let e = invalid("a", "v", "d");
        assert_eq!(aggregate(&[e.clone(), e.clone()]), "a: Invalid value: \"v\": d");
        assert_eq!(
            aggregate(&[e, required("b", "")]),
            "[a: Invalid value: \"v\": d, b: Required value]"
        );
    }
}
