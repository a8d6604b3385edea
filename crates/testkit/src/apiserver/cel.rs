//! CRD `x-kubernetes-validations` (CEL) rules, run at admission as the real API server runs them:
//! each rule at the schema node that declares it, with `self` bound to that node's value; absent
//! and null nodes are skipped; a transition rule (one that names `oldSelf`) runs only on update
//! when the old object has the node, or also on create with `optionalOldSelf: true` (where
//! `oldSelf` is a CEL optional, empty on create: apiextensions-apiserver `types_jsonschema.go`
//! `ValidationRule.OptionalOldSelf`); a rule that does not name `oldSelf` is ratcheted (skipped)
//! on update when its node is unchanged, as `CRDValidationRatcheting` does. The rules of a CRD
//! are compiled when the CRD is registered (`check_crd`), so a broken rule refuses the CRD
//! rather than every later write.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, OnceLock};

use cel::objects::{Key, Map, OptionalValue};
use cel::{Context, Env, Program, Value as Cel};
use serde_json::Value;

use super::cel_path::{node_type, target_path};

/// Why a rule could not be compiled or evaluated.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RuleError {
    /// The expression does not parse.
    #[error("compilation failed: {0}")]
    Compile(String),
    /// The expression failed while running (no such key, no matching overload, ...).
    #[error("{0}")]
    Eval(String),
    /// The expression ran but did not give a bool.
    #[error("rule evaluated to {0}, not a bool")]
    NotBool(String),
}

/// Field-error reasons a rule may name (`reason`), as the real server allows them.
const REASONS: [&str; 4] = [
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// More distinct programs than any test suite declares; past it the cache starts over.
const CACHE_LIMIT: usize = 4096;

fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // Kubernetes' CEL environment has the strings and lists libraries; a failure to add
        // them only narrows what rules can call, so it is not fatal.
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(cel::extensions::lists);
        Arc::new(env)
    })
}

/// Compiles an expression once per process; every write of every object reuses the program.
fn compile(src: &str) -> Result<Arc<Program>, RuleError> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Program>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(p) = cache.lock().ok().and_then(|c| c.get(src).cloned()) {
        return Ok(p);
    }
    // The parser is third-party code fed with user input: a panic in it must cost one request,
    // never the server.
    let program = catch_unwind(AssertUnwindSafe(|| env().compile(src)))
        .map_err(|_| RuleError::Compile("the CEL parser panicked".into()))?
        .map_err(|e| RuleError::Compile(e.to_string().trim().to_string()))?;
    let program = Arc::new(program);
    if let Ok(mut c) = cache.lock() {
        if c.len() >= CACHE_LIMIT {
            c.clear();
        }
        c.insert(src.to_string(), program.clone());
    }
    Ok(program)
}

/// Runs a compiled program with `self` (and `oldSelf` when given) bound.
fn run(program: &Program, this: &Cel, old: Option<&Cel>) -> Result<Cel, RuleError> {
    let mut ctx = Context::with_env(env().clone());
    ctx.add_variable_from_value("self", this.clone());
    if let Some(o) = old {
        ctx.add_variable_from_value("oldSelf", o.clone());
    }
    catch_unwind(AssertUnwindSafe(|| program.execute(&ctx)))
        .map_err(|_| RuleError::Eval("the CEL interpreter panicked".into()))?
        .map_err(|e| RuleError::Eval(e.to_string()))
}

/// Evaluates a rule expression to a bool.
pub fn eval_bool(rule: &str, this: &Cel, old: Option<&Cel>) -> Result<bool, RuleError> {
    match run(&*compile(rule)?, this, old)? {
        Cel::Bool(b) => Ok(b),
        other => Err(RuleError::NotBool(format!("{other:?}"))),
    }
}

/// A JSON value as CEL sees it; the schema decides whether a whole number is an int or a double.
pub fn to_cel(schema: Option<&Value>, v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => {
            let is_number = schema.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("number");
            match (n.as_i64(), n.as_u64()) {
                (Some(i), _) if !is_number => Cel::Int(i),
                (None, Some(u)) if !is_number => Cel::UInt(u),
                _ => Cel::Float(n.as_f64().unwrap_or_default()),
            }
        }
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => {
            let item_schema = schema.and_then(|s| s.get("items"));
            Cel::List(Arc::new(items.iter().map(|x| to_cel(item_schema, x)).collect()))
        }
        Value::Object(m) => {
            let map: HashMap<Key, Cel> = m
                .iter()
                .map(|(k, x)| (Key::from(k.as_str()), to_cel(child_schema(schema, k), x)))
                .collect();
            Cel::Map(Map { map: Arc::new(map) })
        }
    }
}

/// The schema of an object's property `key` (a declared property or `additionalProperties`).
fn child_schema<'a>(schema: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    let s = schema?;
    s.get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
}

/// One `x-kubernetes-validations` entry.
struct Rule<'a> {
    rule: &'a str,
    message: &'a str,
    message_expression: Option<&'a str>,
    field_path: Option<&'a str>,
    reason: Option<&'a str>,
    /// `optionalOldSelf: true`: the rule also runs on create, `oldSelf` an optional.
    optional_old_self: bool,
}

impl<'a> Rule<'a> {
    fn parse(v: &'a Value) -> Rule<'a> {
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        Rule {
            rule: s("rule").unwrap_or_default(),
            message: s("message").unwrap_or_default(),
            message_expression: s("messageExpression").filter(|m| !m.trim().is_empty()),
            field_path: s("fieldPath").filter(|f| !f.is_empty()),
            reason: s("reason"),
            optional_old_self: v.get("optionalOldSelf").and_then(Value::as_bool) == Some(true),
        }
    }

    /// The rule's message, or the real server's default for a rule without one.
    fn message(&self) -> String {
        match self.message.trim() {
            "" => format!("failed rule: {}", self.rule.trim()),
            m => m.to_string(),
        }
    }

    /// What an evaluation error names the rule by: its message, or its expression.
    fn label(&self) -> &str {
        match self.message.trim() {
            "" => self.rule.trim(),
            m => m,
        }
    }

    fn uses_old_self(&self) -> bool {
        compile(self.rule).is_ok_and(|p| p.references().has_variable("oldSelf"))
    }
}

fn rules_of(schema: &Value) -> &[Value] {
    schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// How many rules a schema declares, at any depth.
pub fn rule_count(schema: &Value) -> u64 {
    let here = rules_of(schema).len() as u64;
    let props: u64 = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.values().map(rule_count).sum())
        .unwrap_or(0);
    let items = schema.get("items").map_or(0, rule_count);
    let add = schema
        .get("additionalProperties")
        .filter(|a| a.is_object())
        .map_or(0, rule_count);
    here + props + items + add
}

/// Runs every rule in `schema` against `obj` (with `old` on update) and returns the field
/// errors as (path, message), message already in the server's `<Type>: <detail>` form.
pub fn evaluate(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<(String, String)> {
    let mut errs = Vec::new();
    visit(schema, obj, old, "", &mut errs);
    errs
}

fn visit(schema: &Value, v: &Value, old: Option<&Value>, path: &str, errs: &mut Vec<(String, String)>) {
    // Only non-null values are validated; rules about presence live on the parent node.
    if v.is_null() {
        return;
    }
    let old = old.filter(|o| !o.is_null());
    let rules = rules_of(schema);
    if !rules.is_empty() {
        check_node(schema, rules, v, old, path, errs);
    }
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let Some(sub) = child_schema(Some(schema), k) else {
                    continue;
                };
                let declared = schema.get("properties").and_then(|p| p.get(k)).is_some();
                let child_path = match (path.is_empty(), declared) {
                    (true, _) => k.clone(),
                    (false, true) => format!("{path}.{k}"),
                    (false, false) => format!("{path}[{k}]"),
                };
                visit(sub, child, old.and_then(|o| o.get(k)), &child_path, errs);
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                // List items are not correlated with the old list, so no transition rules or
                // ratcheting below a list (the real server correlates only listType=map).
                for (i, it) in items.iter().enumerate() {
                    visit(sub, it, None, &format!("{path}[{i}]"), errs);
                }
            }
        }
        _ => {}
    }
}

fn check_node(
    schema: &Value,
    rules: &[Value],
    v: &Value,
    old: Option<&Value>,
    path: &str,
    errs: &mut Vec<(String, String)>,
) {
    let unchanged = old.is_some_and(|o| o == v);
    let due: Vec<(Rule<'_>, bool)> = rules
        .iter()
        .map(Rule::parse)
        .map(|r| {
            let transition = r.uses_old_self();
            (r, transition)
        })
        .filter(|(r, transition)| {
            if *transition {
                old.is_some() || r.optional_old_self
            } else {
                !unchanged
            }
        })
        .collect();
    // Most updates (status writes above all) leave a node alone: nothing to run, nothing to convert.
    if due.is_empty() {
        return;
    }
    let this = to_cel(Some(schema), v);
    let old_cel = old.map(|o| to_cel(Some(schema), o));
    let ty = node_type(schema);
    let node_field = if path.is_empty() { "<nil>" } else { path };
    for (rule, transition) in due {
        let optional_old;
        let old_arg = if transition && rule.optional_old_self {
            let inner = old_cel
                .clone()
                .map_or_else(OptionalValue::none, OptionalValue::of);
            optional_old = Cel::Opaque(Arc::new(inner));
            Some(&optional_old)
        } else if transition {
            old_cel.as_ref()
        } else {
            None
        };
        match eval_bool(rule.rule, &this, old_arg) {
            Ok(true) => {}
            Ok(false) => {
                let detail = rule
                    .message_expression
                    .and_then(|m| run(&*compile(m).ok()?, &this, old_arg).ok())
                    .and_then(|r| match r {
                        Cel::String(s) if !s.trim().is_empty() && !s.contains('\n') => {
                            Some(s.trim().to_string())
                        }
                        _ => None,
                    })
                    .unwrap_or_else(|| rule.message());
                let field = target_path(path, rule.field_path).unwrap_or_else(|| node_field.to_string());
                let body = match rule.reason {
                    Some("FieldValueForbidden") => format!("Forbidden: {detail}"),
                    Some("FieldValueRequired") => format!("Required value: {detail}"),
                    Some("FieldValueDuplicate") => format!("Duplicate value: \"{ty}\""),
                    _ => format!("Invalid value: \"{ty}\": {detail}"),
                };
                errs.push((field, body));
            }
            Err(e) => errs.push((
                node_field.to_string(),
                format!("Invalid value: \"{ty}\": {e} evaluating rule: {}", rule.label()),
            )),
        }
    }
}

/// Checks every rule of every version of a CRD: it compiles, its messageExpression compiles,
/// its fieldPath names a field of the node and its reason is one the server knows. Returns the
/// field errors that refuse the CRD.
pub fn check_crd(crd: &Value) -> Vec<(String, String)> {
    let mut errs = Vec::new();
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    for (i, v) in versions.into_iter().flatten().enumerate() {
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            check_schema(
                schema,
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                &mut errs,
            );
        }
    }
    errs
}

fn check_schema(schema: &Value, path: &str, errs: &mut Vec<(String, String)>) {
    for (j, raw) in rules_of(schema).iter().enumerate() {
        let at = format!("{path}.x-kubernetes-validations[{j}]");
        let rule = Rule::parse(raw);
        if rule.rule.trim().is_empty() {
            errs.push((format!("{at}.rule"), "Required value".into()));
        } else if let Err(e) = compile(rule.rule) {
            errs.push((
                format!("{at}.rule"),
                format!("Invalid value: {}: {e}", Value::from(rule.rule)),
            ));
        }
        if let Some(m) = rule.message_expression
            && let Err(e) = compile(m)
        {
            errs.push((
                format!("{at}.messageExpression"),
                format!("Invalid value: {}: messageExpression {e}", Value::from(m)),
            ));
        }
        if let Some(fp) = rule.field_path
            && let Err(why) = super::cel_path::check_field_path(schema, fp)
        {
            errs.push((
                format!("{at}.fieldPath"),
                format!("Invalid value: {}: {why}", Value::from(fp)),
            ));
        }
        if let Some(r) = rule.reason
            && !REASONS.contains(&r)
        {
            let allowed: Vec<String> = REASONS.iter().map(|r| format!("\"{r}\"")).collect();
            errs.push((
                format!("{at}.reason"),
                format!(
                    "Unsupported value: \"{r}\": supported values: {}",
                    allowed.join(", ")
                ),
            ));
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, sub) in props {
            check_schema(sub, &format!("{path}.properties[{k}]"), errs);
        }
    }
    if let Some(items) = schema.get("items") {
        check_schema(items, &format!("{path}.items"), errs);
    }
    if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        check_schema(add, &format!("{path}.additionalProperties"), errs);
    }
}
