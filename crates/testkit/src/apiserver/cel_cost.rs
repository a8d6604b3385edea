//! The static cost limits a real server puts on a CRD's `x-kubernetes-validations` rules:
//! apiextensions-apiserver v0.34 `pkg/apis/apiextensions/validation/validation.go`
//! (`StaticEstimatedCostLimit` per rule, `StaticEstimatedCRDCostLimit` per schema,
//! `getExpressionCost`, `getCostErrorMessage`, `TotalCost.ObserveExpressionCost`) with the
//! cardinality of `cel_validation.go` (`CELSchemaContext`, `extractMaxElements`) and
//! `pkg/apiserver/schema/cel/compilation.go` (`maxCardinality`).
//!
//! The expression's own cost is an estimate written for this fake, not cel-go's estimator. It
//! walks the parsed rule as cel-go `checker/cost.go` does (1 per identifier and field
//! selection, 0 for literals and presence tests, comprehensions cost their range size times the
//! loop, list and map literals 10 and 30) and charges the functions CRD rules use as cel-go and
//! apiserver `pkg/cel/library/cost.go` do: `matches` is string traversal (0.1 per byte) times
//! regex length (0.25 per character), `contains`/`startsWith`/`endsWith`, comparisons and string
//! concatenation traverse their strings, `in` a list its size, `lowerAscii`/`upperAscii`/
//! `substring`/`trim`/`replace`/`split`/`indexOf`/`join` their strings. Sizes come from the
//! schema as apiserver `pkg/cel/common/schemas.go` `SchemaDeclType` derives them: `maxLength`
//! × 4 bytes, `maxItems`, `maxProperties`, or what fits in a 3 MiB request when unbounded.
//! Every other call costs 1, and a size it cannot tell counts as zero, so the estimate stays at
//! or below the real one: a CRD refused here is refused by a real server, while some costly
//! rules a real server refuses (and every `messageExpression`) pass unchecked.

use std::sync::OnceLock;

use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use serde_json::{Value, json};

use super::field::{self, FieldError};

/// `StaticEstimatedCostLimit`: the most one rule may cost.
pub const RULE_LIMIT: u64 = 10_000_000;
/// `StaticEstimatedCRDCostLimit`: the most all rules of one version's schema may cost.
pub const CRD_LIMIT: u64 = 100_000_000;
/// `celconfig.MaxRequestSizeBytes`: the size bound of anything unbounded.
const MAX_REQUEST: u64 = 3 * 1024 * 1024;
/// cel-go `common.StringTraversalCostFactor`.
const TRAVERSAL: f64 = 0.1;
/// cel-go `common.RegexStringLengthCostFactor`.
const REGEX: f64 = 0.25;

/// `multiplyByCostFactor`: rounded up.
fn factor(x: u64, f: f64) -> u64 {
    let v = (x as f64 * f).ceil();
    if v >= u64::MAX as f64 { u64::MAX } else { v as u64 }
}

/// What an expression is known to be, as far as sizes go.
#[derive(Clone, Debug)]
enum Ty<'a> {
    /// A value described by a schema node; `root` marks a resource root, whose `metadata`,
    /// `kind` and `apiVersion` CEL always sees (`WithTypeAndObjectMeta`).
    Node(&'a Value, bool),
    /// A string of at most this many bytes.
    Str(u64),
    /// A number, bool, or other fixed-size value.
    Scalar,
    /// A list built in the expression: element type and count.
    List(Box<Ty<'a>>, u64),
    /// Nothing known.
    Unknown,
}

/// The `metadata` CEL sees at a resource root: `name` and `generateName`, both unbounded.
fn root_metadata() -> &'static Value {
    static META: OnceLock<Value> = OnceLock::new();
    META.get_or_init(|| {
        json!({"type": "object", "properties": {
            "name": {"type": "string"}, "generateName": {"type": "string"}}})
    })
}

fn unbounded_string() -> &'static Value {
    static S: OnceLock<Value> = OnceLock::new();
    S.get_or_init(|| json!({"type": "string"}))
}

fn num(s: &Value, k: &str) -> Option<u64> {
    s.get(k).and_then(Value::as_i64).map(|v| v.max(0) as u64)
}

fn ty_of(s: &Value) -> &str {
    s.get("type").and_then(Value::as_str).unwrap_or_default()
}

fn int_or_string(s: &Value) -> bool {
    s.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true)
}

fn additional(s: &Value) -> Option<&Value> {
    s.get("additionalProperties").filter(|a| a.is_object())
}

/// `DeclType.MinSerializedSize` of a schema node.
fn min_size(s: &Value) -> u64 {
    if int_or_string(s) {
        return 1;
    }
    match ty_of(s) {
        "string" => match s.get("format").and_then(Value::as_str) {
            Some("duration") => 3,
            Some("date") => 12,
            Some("date-time") => 21,
            _ => 2,
        },
        "boolean" => 4,
        "number" | "integer" => 1,
        "object" if additional(s).is_none() => {
            let required: Vec<&str> = s
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let props = s.get("properties").and_then(Value::as_object);
            2 + required
                .iter()
                .filter_map(|k| props.and_then(|p| p.get(*k)).map(|p| (k, p)))
                .filter(|(_, p)| p.get("default").is_none())
                .map(|(k, p)| k.len() as u64 + min_size(p) + 4)
                .sum::<u64>()
        }
        _ => 2,
    }
}

/// `DeclType.MaxElements` of a schema node: the bytes of a string, the items of a list, the
/// entries of a map; `None` for objects and unknown types.
fn max_elements(s: &Value) -> Option<u64> {
    if int_or_string(s) {
        return Some(num(s, "maxLength").map_or(MAX_REQUEST - 2, |m| m * 4));
    }
    match ty_of(s) {
        "string" => Some(match s.get("format").and_then(Value::as_str) {
            Some("byte") => num(s, "maxLength").unwrap_or(MAX_REQUEST - 2),
            Some("duration" | "date-time") => 32,
            Some("date") => 12,
            _ => match (num(s, "maxLength"), s.get("enum").and_then(Value::as_array)) {
                // maxLength counts characters; a character may take 4 bytes.
                (Some(m), _) => m.saturating_mul(4),
                (None, Some(e)) if !e.is_empty() => e
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|v| v.len() as u64)
                    .max()
                    .unwrap_or(0),
                _ => MAX_REQUEST - 2,
            },
        }),
        "array" => Some(
            num(s, "maxItems")
                .unwrap_or_else(|| (MAX_REQUEST - 2) / (s.get("items").map_or(2, min_size) + 1)),
        ),
        "object" => {
            additional(s).map(|a| num(s, "maxProperties").unwrap_or((MAX_REQUEST - 2) / (min_size(a) + 6)))
        }
        "integer" | "number" | "boolean" => Some(1),
        _ => None,
    }
}

impl<'a> Ty<'a> {
    /// The largest size (`SizeEstimate.Max`) known; 0 when unknown (a lower bound).
    fn size(&self) -> u64 {
        match self {
            Ty::Node(s, _) => max_elements(s).unwrap_or(0),
            Ty::Str(n) | Ty::List(_, n) => *n,
            Ty::Scalar => 1,
            Ty::Unknown => 0,
        }
    }

    fn is_list(&self) -> bool {
        matches!(self, Ty::List(..)) || matches!(self, Ty::Node(s, _) if ty_of(s) == "array")
    }

    fn is_string(&self) -> bool {
        matches!(self, Ty::Str(_)) || matches!(self, Ty::Node(s, _) if ty_of(s) == "string")
    }

    /// The type of `.field` (or of `["field"]`).
    fn field(&self, name: &str) -> Ty<'a> {
        let Ty::Node(s, root) = self else {
            return Ty::Unknown;
        };
        if *root {
            match name {
                "metadata" => return Ty::Node(root_metadata(), false),
                "kind" | "apiVersion" => return Ty::Node(unbounded_string(), false),
                _ => {}
            }
        }
        let embedded =
            |p: &Value| p.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true);
        match s.get("properties").and_then(|p| p.get(name)) {
            Some(p) => Ty::Node(p, embedded(p)),
            None => additional(s).map_or(Ty::Unknown, |a| Ty::Node(a, embedded(a))),
        }
    }

    /// The type of an element: list items, map values; iterating a map gives its keys.
    fn element(&self, iterating: bool) -> Ty<'a> {
        match self {
            Ty::List(e, _) => (**e).clone(),
            Ty::Node(s, _) if ty_of(s) == "array" => {
                s.get("items").map_or(Ty::Unknown, |i| Ty::Node(i, false))
            }
            Ty::Node(s, _) if iterating && additional(s).is_some() => Ty::Unknown,
            Ty::Node(s, _) => additional(s).map_or(Ty::Unknown, |a| Ty::Node(a, false)),
            _ => Ty::Unknown,
        }
    }
}

/// An expression's estimated cost and what it evaluates to.
struct Est<'a> {
    cost: u64,
    ty: Ty<'a>,
}

/// The estimator: variables in scope, innermost last.
struct Coster<'a> {
    locals: Vec<(String, Ty<'a>)>,
}

impl<'a> Coster<'a> {
    fn expr(&mut self, e: &IdedExpr) -> Est<'a> {
        match &e.expr {
            Expr::Literal(l) => Est {
                cost: 0,
                ty: match l {
                    LiteralValue::String(s) => Ty::Str(s.inner().chars().count() as u64),
                    LiteralValue::Bytes(b) => Ty::Str(b.inner().len() as u64),
                    _ => Ty::Scalar,
                },
            },
            Expr::Ident(name) => Est {
                cost: 1,
                ty: self
                    .locals
                    .iter()
                    .rev()
                    .find(|(n, _)| n == name)
                    .map_or(Ty::Unknown, |(_, t)| t.clone()),
            },
            Expr::Select(sel) => {
                let op = self.expr(&sel.operand);
                if sel.test {
                    // Kubernetes sets `PresenceTestHasCost(false)`.
                    Est {
                        cost: op.cost,
                        ty: Ty::Scalar,
                    }
                } else {
                    Est {
                        cost: op.cost.saturating_add(1),
                        ty: op.ty.field(&sel.field),
                    }
                }
            }
            Expr::List(l) => {
                let mut cost = 10u64;
                let mut elem = Ty::Unknown;
                for x in &l.elements {
                    let est = self.expr(x);
                    cost = cost.saturating_add(est.cost);
                    elem = est.ty;
                }
                Est {
                    cost,
                    ty: Ty::List(Box::new(elem), l.elements.len() as u64),
                }
            }
            Expr::Map(m) => {
                let cost = m.entries.iter().fold(30u64, |acc, entry| match &entry.expr {
                    EntryExpr::MapEntry(me) => acc
                        .saturating_add(self.expr(&me.key).cost)
                        .saturating_add(self.expr(&me.value).cost),
                    EntryExpr::StructField(f) => acc.saturating_add(self.expr(&f.value).cost),
                });
                Est {
                    cost,
                    ty: Ty::Unknown,
                }
            }
            Expr::Struct(s) => {
                let cost = s.entries.iter().fold(40u64, |acc, entry| match &entry.expr {
                    EntryExpr::MapEntry(me) => acc.saturating_add(self.expr(&me.value).cost),
                    EntryExpr::StructField(f) => acc.saturating_add(self.expr(&f.value).cost),
                });
                Est {
                    cost,
                    ty: Ty::Unknown,
                }
            }
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::Call(c) => self.call(c),
            Expr::Unspecified => Est {
                cost: 0,
                ty: Ty::Unknown,
            },
        }
    }

    /// cel-go `costComprehension`: range, init and result once, condition and step per element.
    fn comprehension(&mut self, c: &ComprehensionExpr) -> Est<'a> {
        let range = self.expr(&c.iter_range);
        let init = self.expr(&c.accu_init);
        let count = range.ty.size();
        let builds_list = matches!(c.accu_init.expr, Expr::List(_));
        let accu_ty = init.ty.clone();
        self.locals.push((c.accu_var.clone(), accu_ty));
        match &c.iter_var2 {
            Some(v2) => {
                // Two-variable form: index or key, then the element.
                let key = if range.ty.is_list() {
                    Ty::Scalar
                } else {
                    Ty::Unknown
                };
                self.locals.push((c.iter_var.clone(), key));
                self.locals.push((v2.clone(), range.ty.element(false)));
            }
            None => self.locals.push((c.iter_var.clone(), range.ty.element(true))),
        }
        let per = self
            .expr(&c.loop_cond)
            .cost
            .saturating_add(self.expr(&c.loop_step).cost);
        self.locals.pop();
        if c.iter_var2.is_some() {
            self.locals.pop();
        }
        let result = self.expr(&c.result);
        self.locals.pop();
        let ty = if builds_list {
            Ty::List(Box::new(Ty::Unknown), count)
        } else {
            result.ty
        };
        Est {
            cost: range
                .cost
                .saturating_add(init.cost)
                .saturating_add(result.cost)
                .saturating_add(count.saturating_mul(per)),
            ty,
        }
    }

    /// cel-go `functionCost` and apiserver `library.CostEstimator.EstimateCallCost`.
    fn call(&mut self, c: &CallExpr) -> Est<'a> {
        let target = c.target.as_ref().map(|t| self.expr(t));
        let args: Vec<Est<'a>> = c.args.iter().map(|a| self.expr(a)).collect();
        let args_cost = args
            .iter()
            .chain(target.iter())
            .fold(0u64, |acc, a| acc.saturating_add(a.cost));
        let size = |i: usize| args.get(i).map_or(0, |a| a.ty.size());
        let tsize = target.as_ref().map_or(0, |t| t.ty.size());
        let fixed = |ty: Ty<'a>| Est {
            cost: args_cost.saturating_add(1),
            ty,
        };
        let plus = |extra: u64, ty: Ty<'a>| Est {
            cost: args_cost.saturating_add(extra),
            ty,
        };
        let member = target.is_some();
        match (c.func_name.as_str(), member) {
            ("_&&_" | "_||_", false) => plus(0, Ty::Scalar),
            ("_?_:_", false) if args.len() == 3 => {
                let branch = args[1].cost.max(args[2].cost);
                Est {
                    cost: args[0].cost.saturating_add(branch),
                    ty: args[1].ty.clone(),
                }
            }
            ("_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_", false) => {
                let smallest = size(0).min(size(1)).max(1);
                plus(factor(smallest, TRAVERSAL), Ty::Scalar)
            }
            ("_+_", false) if args.iter().any(|a| a.ty.is_list()) => {
                let n = size(0).saturating_add(size(1));
                plus(1, Ty::List(Box::new(Ty::Unknown), n))
            }
            ("_+_", false) if args.iter().any(|a| a.ty.is_string()) => {
                let n = size(0).saturating_add(size(1));
                plus(factor(n, TRAVERSAL), Ty::Str(n))
            }
            ("@in", false) if args.get(1).is_some_and(|a| a.ty.is_list()) => plus(size(1), Ty::Scalar),
            ("matches", true) if args.len() == 1 => {
                let text = factor(tsize.saturating_add(1), TRAVERSAL);
                plus(text.saturating_mul(factor(size(0), REGEX)), Ty::Scalar)
            }
            ("contains", true) if args.len() == 1 => plus(
                factor(tsize, TRAVERSAL).saturating_mul(factor(size(0), TRAVERSAL)),
                Ty::Scalar,
            ),
            ("startsWith" | "endsWith", true) if args.len() == 1 => {
                plus(factor(size(0), TRAVERSAL), Ty::Scalar)
            }
            ("lowerAscii" | "upperAscii" | "substring" | "trim", true) => {
                plus(factor(tsize, TRAVERSAL), Ty::Str(tsize))
            }
            ("replace" | "split", true) => plus(factor(tsize, 2.0 * TRAVERSAL), Ty::Unknown),
            ("indexOf" | "lastIndexOf", true) if target.as_ref().is_some_and(|t| t.ty.is_string()) => {
                plus(factor(tsize, TRAVERSAL), Ty::Scalar)
            }
            ("isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf", true) => {
                let elem = target.as_ref().map_or(Ty::Unknown, |t| t.ty.element(false));
                let per = if elem.is_string() {
                    1 + factor(elem.size(), TRAVERSAL)
                } else {
                    1
                };
                plus(tsize.saturating_mul(per), Ty::Unknown)
            }
            ("join", true) => {
                let elem = target.as_ref().map_or(Ty::Unknown, |t| t.ty.element(false));
                plus(factor(tsize.saturating_mul(elem.size()), TRAVERSAL), Ty::Unknown)
            }
            ("url", false) => plus(factor(size(0), TRAVERSAL), Ty::Unknown),
            ("size", _) => fixed(Ty::Scalar),
            ("_[_]", false) if args.len() == 2 => {
                let ty = match &c.args[1].expr {
                    Expr::Literal(LiteralValue::String(k)) => args[0].ty.field(k.inner()),
                    _ => args[0].ty.element(false),
                };
                fixed(ty)
            }
            _ => fixed(Ty::Unknown),
        }
    }
}

/// The estimated cost of one evaluation of `rule` with `self` bound to `node`.
fn rule_cost(rule: &str, node: &Value, resource_root: bool) -> Option<u64> {
    let parsed = cel::parser::Parser::new().parse(rule).ok()?;
    let mut coster = Coster {
        locals: vec![
            ("self".to_string(), Ty::Node(node, resource_root)),
            ("oldSelf".to_string(), Ty::Node(node, resource_root)),
        ],
    };
    Some(coster.expr(&parsed).cost)
}

/// `getCostErrorMessage`.
fn cost_message(what: &str, cost: u64, limit: u64) -> String {
    let exceed = cost as f64 / limit as f64;
    let by = if exceed > 100.0 {
        "more than 100x".to_string()
    } else if exceed < 1.5 {
        format!("{exceed:.6}x")
    } else {
        format!("{exceed:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {by} (try simplifying the rule, or adding maxItems, \
         maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// Rule costs of one version's schema, gathered while walking it.
#[derive(Default)]
struct Totals {
    total: u64,
    /// The (at most four) costliest rules of at least 1% of the schema limit.
    most_expensive: Vec<(String, u64)>,
    errors: Vec<FieldError>,
}

impl Totals {
    /// `TotalCost.ObserveExpressionCost`.
    fn observe(&mut self, path: &str, cost: u64) {
        self.total = self.total.saturating_add(cost);
        if cost < CRD_LIMIT / 100 {
            return;
        }
        self.most_expensive.push((path.to_string(), cost));
        self.most_expensive.sort_by_key(|e| std::cmp::Reverse(e.1));
        self.most_expensive.truncate(4);
    }
}

/// `extractMaxElements` of a parent: how many times each child may occur (None: unbounded).
fn child_factor(parent: &Value) -> Option<u64> {
    match ty_of(parent) {
        "array" => num(parent, "maxItems"),
        "object" if additional(parent).is_some() => num(parent, "maxProperties"),
        _ => Some(1),
    }
}

/// Walks a schema node at `path`, `cardinality` being how many times it may occur (None once
/// an enclosing list or map is unbounded).
fn walk(s: &Value, path: &str, cardinality: Option<u64>, resource_root: bool, totals: &mut Totals) {
    let rules = s.get("x-kubernetes-validations").and_then(Value::as_array);
    for (i, r) in rules.into_iter().flatten().enumerate() {
        let Some(cost) = r
            .get("rule")
            .and_then(Value::as_str)
            .and_then(|rule| rule_cost(rule, s, resource_root))
        else {
            continue;
        };
        // `getExpressionCost`: bounded cardinality from the schema, else what fits a request.
        let times = cardinality.unwrap_or_else(|| MAX_REQUEST / (min_size(s) + 1));
        let cost = cost.saturating_mul(times);
        let rule_path = format!("{path}.x-kubernetes-validations[{i}].rule");
        if cost > RULE_LIMIT {
            totals.errors.push(field::forbidden(
                &rule_path,
                &cost_message("estimated rule cost", cost, RULE_LIMIT),
            ));
        }
        totals.observe(&rule_path, cost);
    }
    let inner = child_factor(s).and_then(|f| cardinality.map(|c| c.saturating_mul(f)));
    let embedded = |p: &Value| p.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true);
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            walk(p, &format!("{path}.properties[{k}]"), inner, embedded(p), totals);
        }
    }
    if let Some(items) = s.get("items").filter(|i| i.is_object()) {
        walk(items, &format!("{path}.items"), inner, embedded(items), totals);
    }
    if let Some(a) = additional(s) {
        walk(
            a,
            &format!("{path}.additionalProperties"),
            inner,
            embedded(a),
            totals,
        );
    }
}

/// The cost errors of a CRD's rules, one version's schema at a time.
pub fn check_crd(crd: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    for (i, v) in versions.into_iter().flatten().enumerate() {
        let Some(schema) = v.pointer("/schema/openAPIV3Schema") else {
            continue;
        };
        let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
        let mut totals = Totals::default();
        walk(schema, &path, Some(1), true, &mut totals);
        errs.append(&mut totals.errors);
        if totals.total > CRD_LIMIT {
            for (p, _) in &totals.most_expensive {
                errs.push(field::forbidden(
                    p,
                    "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
                ));
            }
            errs.push(field::forbidden(
                &path,
                &cost_message(
                    "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                    totals.total,
                    CRD_LIMIT,
                ),
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(rule: &str, node: Value) -> u64 {
        rule_cost(rule, &node, false).expect("parses")
    }

    /// cel-go cost.go: `labels.all(l, l.matches(re))` over 64 labels of at most 63 characters
    /// (the shape the findings doc computes for RunnerGroup labels) is far below the limit.
    #[test]
    fn bounded_list_of_bounded_strings_is_cheap() {
        let labels = json!({"type": "array", "maxItems": 64, "items": {"type": "string", "maxLength": 63}});
        let node = json!({"type": "object", "properties": {"labels": labels}});
        let re = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
        let c = cost(&format!("self.labels.all(l, l.matches('{re}'))"), node);
        // Range 2, result 1; per label: condition 2, accu 1, `l` 1, then
        // ceil((63 × 4 + 1) × 0.1) × ceil(len(re) × 0.25).
        assert_eq!(c, 2 + 1 + 64 * (2 + 1 + 1 + 26 * factor(re.len() as u64, REGEX)));
        assert!(c < RULE_LIMIT);
    }

    /// schemas.go `estimateMaxStringLengthPerRequest`: an unbounded string is 3 MiB − 2 bytes.
    #[test]
    fn unbounded_strings_and_lists_are_expensive() {
        let node = json!({"type": "object", "properties": {"s": {"type": "string"}}});
        let re = "^(a|b|c|d|e|f|g|h|i|j|k|l|m|n)+$";
        let c = cost(&format!("self.s.matches('{re}')"), node);
        assert_eq!(
            c,
            2 + factor(MAX_REQUEST - 1, TRAVERSAL) * factor(re.len() as u64, REGEX)
        );
        assert!(c < RULE_LIMIT, "one unbounded string once is within budget");
        let strings =
            json!({"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "string"}}}});
        assert!(cost(&format!("self.xs.all(x, x.matches('{re}'))"), strings) > RULE_LIMIT);
        let items = json!({"type": "object", "properties": {"xs": {"type": "array",
            "items": {"type": "string", "maxLength": 253}}}});
        assert!(cost("self.xs.all(x, x.startsWith('a'))", items.clone()) < RULE_LIMIT);
        assert!(cost("self.xs.all(x, self.xs.exists(y, y == x))", items) > RULE_LIMIT);
    }

    /// validation.go `getCostErrorMessage`.
    #[test]
    fn cost_messages() {
        assert!(
            cost_message("estimated rule cost", 12_000_000, RULE_LIMIT).starts_with(
                "estimated rule cost exceeds budget by factor of 1.200000x (try simplifying the rule"
            )
        );
        assert!(cost_message("c", 25_000_000, RULE_LIMIT).contains("factor of 2.5x"));
        assert!(cost_message("c", u64::MAX, RULE_LIMIT).contains("factor of more than 100x"));
    }
}
