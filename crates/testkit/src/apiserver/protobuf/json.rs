//! Turns decoded prost messages into the JSON shape the Kubernetes API uses, so a protobuf body
//! continues on the same path as a JSON one.
//!
//! Each message type lists its fields once in [`json_struct!`]; the macro destructures the struct,
//! so a field added to `k8s-pb` fails the build here instead of being dropped silently.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1::{FieldsV1, MicroTime, Time};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value};

use super::ProtoError;

/// The JSON of one field: `None` when the field is unset and so omitted, as `omitempty` does.
pub type Converted = Result<Option<Value>, ProtoError>;

/// A message or scalar that has a Kubernetes JSON form.
pub trait ToJson {
    /// The JSON value, or `None` when the value is unset or empty.
    fn to_json(&self) -> Converted;
}

impl ToJson for String {
    fn to_json(&self) -> Converted {
        Ok(Some(Value::String(self.clone())))
    }
}

impl ToJson for bool {
    fn to_json(&self) -> Converted {
        Ok(Some(Value::Bool(*self)))
    }
}

impl ToJson for i32 {
    fn to_json(&self) -> Converted {
        Ok(Some(Value::from(*self)))
    }
}

impl ToJson for i64 {
    fn to_json(&self) -> Converted {
        Ok(Some(Value::from(*self)))
    }
}

impl<T: ToJson> ToJson for Option<T> {
    fn to_json(&self) -> Converted {
        match self {
            Some(v) => v.to_json(),
            None => Ok(None),
        }
    }
}

// Protobuf cannot tell an empty list from an absent one; Go decodes both as nil and omits them.
impl<T: ToJson> ToJson for Vec<T> {
    fn to_json(&self) -> Converted {
        if self.is_empty() {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(self.len());
        for item in self {
            out.push(item.to_json()?.unwrap_or(Value::Null));
        }
        Ok(Some(Value::Array(out)))
    }
}

impl<T: ToJson> ToJson for BTreeMap<String, T> {
    fn to_json(&self) -> Converted {
        if self.is_empty() {
            return Ok(None);
        }
        let mut out = Map::new();
        for (k, v) in self {
            out.insert(k.clone(), v.to_json()?.unwrap_or(Value::Null));
        }
        Ok(Some(Value::Object(out)))
    }
}

/// `metav1.Time` marshals as RFC 3339 with whole seconds in UTC.
impl ToJson for Time {
    fn to_json(&self) -> Converted {
        timestamp(self.seconds, self.nanos, false)
    }
}

/// `metav1.MicroTime` marshals as RFC 3339 with six fractional digits in UTC.
impl ToJson for MicroTime {
    fn to_json(&self) -> Converted {
        timestamp(self.seconds, self.nanos, true)
    }
}

fn timestamp(seconds: Option<i64>, nanos: Option<i32>, micro: bool) -> Converted {
    let secs = seconds.unwrap_or_default();
    let ts = jiff::Timestamp::from_second(secs).map_err(|e| ProtoError::Field {
        field: "time".into(),
        message: e.to_string(),
    })?;
    let base = ts.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let text = if micro {
        let micros = nanos.unwrap_or_default().clamp(0, 999_999_999) / 1000;
        format!("{base}.{micros:06}Z")
    } else {
        format!("{base}Z")
    };
    Ok(Some(Value::String(text)))
}

/// `intstr.IntOrString` is a bare number or a bare string in JSON, chosen by its `type`.
impl ToJson for IntOrString {
    fn to_json(&self) -> Converted {
        Ok(Some(match self.r#type {
            Some(1) => Value::String(self.str_val.clone().unwrap_or_default()),
            _ => Value::from(self.int_val.unwrap_or_default()),
        }))
    }
}

/// `resource.Quantity` is its canonical string in JSON.
impl ToJson for Quantity {
    fn to_json(&self) -> Converted {
        self.string.to_json()
    }
}

/// `FieldsV1` carries raw JSON, which is embedded as is.
impl ToJson for FieldsV1 {
    fn to_json(&self) -> Converted {
        let Some(raw) = &self.raw else {
            return Ok(None);
        };
        serde_json::from_slice(raw)
            .map(Some)
            .map_err(|e| ProtoError::Field {
                field: "managedFields.fieldsV1".into(),
                message: e.to_string(),
            })
    }
}

/// A `map[string][]byte` (Secret `data`, ConfigMap `binaryData`): base64 strings in JSON.
pub fn bytes_map(map: &BTreeMap<String, Vec<u8>>) -> Converted {
    if map.is_empty() {
        return Ok(None);
    }
    let engine = &base64::engine::general_purpose::STANDARD;
    let out: Map<String, Value> = map
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(engine.encode(v))))
        .collect();
    Ok(Some(Value::Object(out)))
}

/// Status of a request body: the server computes it, so a client's is dropped.
pub fn dropped<T>(_: &T) -> Converted {
    Ok(None)
}

/// Refuses a field this decoder does not convert, so it is not silently lost.
pub fn unsupported<T: PartialEq + Default>(field: &'static str) -> impl Fn(&T) -> Converted {
    move |v: &T| {
        if *v == T::default() {
            Ok(None)
        } else {
            Err(ProtoError::UnsupportedField { field })
        }
    }
}

/// The JSON name of a prost field: the override, else the snake-case name in lower camel case.
pub fn json_key(raw: &str, rename: Option<&'static str>) -> String {
    if let Some(name) = rename {
        return name.to_string();
    }
    let raw = raw.strip_prefix("r#").unwrap_or(raw);
    let mut out = String::with_capacity(raw.len());
    let mut upper = false;
    for c in raw.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Adds one field to an object; the empty key inlines an embedded struct's fields, as Go's
/// `json:",inline"` does.
pub fn put(out: &mut Map<String, Value>, key: String, value: Option<Value>) {
    match value {
        None => {}
        Some(Value::Object(inner)) if key.is_empty() => out.extend(inner),
        Some(v) => {
            out.insert(key, v);
        }
    }
}

/// Implements [`ToJson`] for prost message structs by listing every field.
///
/// `field` converts with [`ToJson`]; `field as "name"` renames (the empty name inlines);
/// `field with path` converts with a function `Fn(&T) -> Converted`.
macro_rules! json_struct {
    ($($ty:ty { $($field:ident $(as $name:literal)? $(with $conv:expr)?),* $(,)? })*) => {$(
        impl $crate::apiserver::protobuf::json::ToJson for $ty {
            fn to_json(&self) -> $crate::apiserver::protobuf::json::Converted {
                use $crate::apiserver::protobuf::json as j;
                let Self { $($field),* } = self;
                let mut out = serde_json::Map::new();
                $(
                    let key = j::json_key(stringify!($field), None::<&'static str>$(.or(Some($name)))?);
                    let value = json_struct!(@value $field $(, $conv)?)
                        .map_err(|e| e.within(&key))?;
                    j::put(&mut out, key, value);
                )*
                Ok(Some(serde_json::Value::Object(out)))
            }
        }
    )*};
    (@value $field:ident) => { j::ToJson::to_json($field) };
    (@value $field:ident, $conv:expr) => { ($conv)($field) };
}
pub(crate) use json_struct;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_lower_camel_case_without_raw_prefix() {
        assert_eq!(json_key("generate_name", None), "generateName");
        assert_eq!(json_key("r#type", None), "type");
        assert_eq!(json_key("host_pid", Some("hostPID")), "hostPID");
    }

    #[test]
    fn times_are_rfc3339_in_utc() {
        let t = Time {
            seconds: Some(1_700_000_000),
            nanos: Some(123_456_789),
        };
        assert_eq!(t.to_json().unwrap(), Some(json!("2023-11-14T22:13:20Z")));
        let m = MicroTime {
            seconds: Some(1_700_000_000),
            nanos: Some(123_456_789),
        };
        assert_eq!(m.to_json().unwrap(), Some(json!("2023-11-14T22:13:20.123456Z")));
    }

    #[test]
    fn int_or_string_picks_its_variant() {
        let n = IntOrString {
            r#type: Some(0),
            int_val: Some(8080),
            str_val: None,
        };
        let s = IntOrString {
            r#type: Some(1),
            int_val: None,
            str_val: Some("http".into()),
        };
        assert_eq!(n.to_json().unwrap(), Some(json!(8080)));
        assert_eq!(s.to_json().unwrap(), Some(json!("http")));
    }

    #[test]
    fn empty_lists_and_maps_are_omitted_and_bytes_are_base64() {
        assert_eq!(Vec::<String>::new().to_json().unwrap(), None);
        assert_eq!(BTreeMap::<String, String>::new().to_json().unwrap(), None);
        let data = BTreeMap::from([("k".to_string(), b"a\0b".to_vec())]);
        assert_eq!(bytes_map(&data).unwrap(), Some(json!({"k": "YQBi"})));
    }
}
