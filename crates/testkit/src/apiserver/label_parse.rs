//! Parsing a `labelSelector` query parameter as the real server does: a lexer and a recursive
//! descent parser over the same grammar and error messages as apimachinery v0.34
//! `pkg/labels/selector.go` (`Lexer`, `Parser.parse`, `parseRequirement`,
//! `parseKeyAndInferOperator`, `parseOperator`, `parseValues`, `parseIdentifiersList`,
//! `parseExactValue`), each requirement checked by `NewRequirement` (`validateLabelKey`,
//! `validateLabelValue`). A bad selector is a 400 whose message is the parser's error.

use std::collections::BTreeSet;

use super::field::{self, FieldError};
use super::naming;

/// A selector operator (`selection.Operator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `=`.
    Equals,
    /// `==`.
    DoubleEquals,
    /// `!=`.
    NotEquals,
    /// `in`.
    In,
    /// `notin`.
    NotIn,
    /// A bare key.
    Exists,
    /// `!key`.
    DoesNotExist,
    /// `gt` (`>`): the label's integer value is greater.
    GreaterThan,
    /// `lt` (`<`).
    LessThan,
}

/// One parsed, validated requirement: key, operator and values (sorted, de-duplicated).
#[derive(Clone, Debug, PartialEq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// The operator.
    pub op: Op,
    /// The values (empty for exists / does-not-exist).
    pub values: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Error(String),
    End,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Ident(String),
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

impl Tok {
    /// The literal the parser's messages quote.
    fn literal(&self) -> &str {
        match self {
            Tok::Error(s) | Tok::Ident(s) => s,
            Tok::End => "",
            Tok::ClosedPar => ")",
            Tok::Comma => ",",
            Tok::DoesNotExist => "!",
            Tok::DoubleEquals => "==",
            Tok::Equals => "=",
            Tok::GreaterThan => ">",
            Tok::In => "in",
            Tok::LessThan => "<",
            Tok::NotEquals => "!=",
            Tok::NotIn => "notin",
            Tok::OpenPar => "(",
        }
    }
}

/// `string2token`: the fixed tokens.
fn keyword(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosedPar,
        "," => Tok::Comma,
        "!" => Tok::DoesNotExist,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::GreaterThan,
        "in" => Tok::In,
        "<" => Tok::LessThan,
        "!=" => Tok::NotEquals,
        "notin" => Tok::NotIn,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Splits the selector into tokens, ending with `End`.
fn lex(s: &str) -> Vec<Tok> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        while pos < b.len() && is_whitespace(b[pos]) {
            pos += 1;
        }
        let Some(&c) = b.get(pos) else {
            out.push(Tok::End);
            return out;
        };
        if is_special(c) {
            // The longest run of special characters that still spells a token.
            let start = pos;
            let mut last = None;
            while pos < b.len() && is_special(b[pos]) {
                match keyword(&s[start..=pos]) {
                    Some(t) => {
                        last = Some(t);
                        pos += 1;
                    }
                    None if last.is_some() => break,
                    None => pos += 1,
                }
            }
            out.push(last.unwrap_or_else(|| {
                Tok::Error(format!("error expected: keyword found '{}'", &s[start..pos]))
            }));
        } else {
            let start = pos;
            while pos < b.len() && !is_special(b[pos]) && !is_whitespace(b[pos]) {
                pos += 1;
            }
            let word = &s[start..pos];
            out.push(match word {
                "in" => Tok::In,
                "notin" => Tok::NotIn,
                _ => Tok::Ident(word.to_string()),
            });
        }
    }
}

/// Whether `in`/`notin` read as identifiers (`ParserContext` `Values`) or as operators.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn in_ctx(tok: &Tok, ctx: Ctx) -> Tok {
        match tok {
            Tok::In | Tok::NotIn if ctx == Ctx::Values => Tok::Ident(tok.literal().to_string()),
            t => t.clone(),
        }
    }

    fn lookahead(&self, ctx: Ctx) -> Tok {
        Parser::in_ctx(self.toks.get(self.pos).unwrap_or(&Tok::End), ctx)
    }

    fn consume(&mut self, ctx: Ctx) -> Tok {
        let t = self.lookahead(ctx);
        self.pos += 1;
        t
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            match self.lookahead(Ctx::Values) {
                Tok::Ident(_) | Tok::DoesNotExist => {
                    let r = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    match self.consume(Ctx::Values) {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let next = self.lookahead(Ctx::Values);
                            if !matches!(next, Tok::Ident(_) | Tok::DoesNotExist) {
                                return Err(format!(
                                    "found '{}', expected: identifier after ','",
                                    next.literal()
                                ));
                            }
                        }
                        t => {
                            return Err(format!(
                                "found '{}', expected: ',' or 'end of string'",
                                t.literal()
                            ));
                        }
                    }
                }
                Tok::End => return Ok(reqs),
                t => {
                    return Err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        t.literal()
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let (key, op) = self.key_and_inferred_operator()?;
        if let Some(op @ (Op::Exists | Op::DoesNotExist)) = op {
            return new_requirement(key, op, BTreeSet::new());
        }
        let op = self.operator()?;
        let values = match op {
            Op::In | Op::NotIn => self.values()?,
            _ => self.exact_value()?,
        };
        new_requirement(key, op, values)
    }

    fn key_and_inferred_operator(&mut self) -> Result<(String, Option<Op>), String> {
        let mut op = None;
        let mut tok = self.consume(Ctx::Values);
        if tok == Tok::DoesNotExist {
            op = Some(Op::DoesNotExist);
            tok = self.consume(Ctx::Values);
        }
        let Tok::Ident(key) = tok else {
            return Err(format!("found '{}', expected: identifier", tok.literal()));
        };
        let key_errs = key_errors(&key);
        if !key_errs.is_empty() {
            return Err(field::aggregate(&key_errs));
        }
        if matches!(self.lookahead(Ctx::Values), Tok::End | Tok::Comma) && op.is_none() {
            op = Some(Op::Exists);
        }
        Ok((key, op))
    }

    fn operator(&mut self) -> Result<Op, String> {
        Ok(match self.consume(Ctx::KeyAndOperator) {
            Tok::In => Op::In,
            Tok::Equals => Op::Equals,
            Tok::DoubleEquals => Op::DoubleEquals,
            Tok::GreaterThan => Op::GreaterThan,
            Tok::LessThan => Op::LessThan,
            Tok::NotIn => Op::NotIn,
            Tok::NotEquals => Op::NotEquals,
            t => {
                return Err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    t.literal()
                ));
            }
        })
    }

    fn values(&mut self) -> Result<BTreeSet<String>, String> {
        let t = self.consume(Ctx::Values);
        if t != Tok::OpenPar {
            return Err(format!("found '{}' expected: '('", t.literal()));
        }
        let ahead = self.lookahead(Ctx::Values);
        match ahead {
            Tok::Ident(_) | Tok::Comma => {
                let set = self.identifiers()?;
                if self.consume(Ctx::Values) != Tok::ClosedPar {
                    // Upstream quotes the token seen after '(' here, not the one that failed.
                    return Err(format!("found '{}', expected: ')'", ahead.literal()));
                }
                Ok(set)
            }
            Tok::ClosedPar => {
                self.consume(Ctx::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            t => Err(format!(
                "found '{}', expected: ',', ')' or identifier",
                t.literal()
            )),
        }
    }

    /// A comma-separated list in which empty entries are the empty value.
    fn identifiers(&mut self) -> Result<BTreeSet<String>, String> {
        let mut set = BTreeSet::new();
        loop {
            match self.consume(Ctx::Values) {
                Tok::Ident(v) => {
                    set.insert(v);
                    match self.lookahead(Ctx::Values) {
                        Tok::Comma => continue,
                        Tok::ClosedPar => return Ok(set),
                        t => {
                            return Err(format!("found '{}', expected: ',' or ')'", t.literal()));
                        }
                    }
                }
                Tok::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    match self.lookahead(Ctx::Values) {
                        Tok::ClosedPar => {
                            set.insert(String::new());
                            return Ok(set);
                        }
                        Tok::Comma => {
                            set.insert(String::new());
                        }
                        _ => {}
                    }
                }
                t => return Err(format!("found '{}', expected: ',', or identifier", t.literal())),
            }
        }
    }

    fn exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        if matches!(self.lookahead(Ctx::Values), Tok::End | Tok::Comma) {
            return Ok(BTreeSet::from([String::new()]));
        }
        match self.consume(Ctx::Values) {
            Tok::Ident(v) => Ok(BTreeSet::from([v])),
            t => Err(format!("found '{}', expected: identifier", t.literal())),
        }
    }
}

/// `validateLabelKey`, called without a field path: the path prints as `<nil>`.
fn key_errors(key: &str) -> Vec<FieldError> {
    let msgs = naming::qualified_name(key);
    if msgs.is_empty() {
        Vec::new()
    } else {
        vec![field::invalid("<nil>", key, &msgs.join("; "))]
    }
}

/// `NewRequirement`: the key, the integer values of `gt`/`lt`, and every value's label format.
fn new_requirement(key: String, op: Op, values: BTreeSet<String>) -> Result<Requirement, String> {
    let values: Vec<String> = values.into_iter().collect();
    let mut errs = key_errors(&key);
    for (i, v) in values.iter().enumerate() {
        if matches!(op, Op::GreaterThan | Op::LessThan) && v.parse::<i64>().is_err() {
            errs.push(field::invalid(
                &format!("values[{i}]"),
                v,
                "for 'Gt', 'Lt' operators, the value must be an integer",
            ));
        }
    }
    for (i, v) in values.iter().enumerate() {
        let msgs = naming::label_value(v);
        if !msgs.is_empty() {
            errs.push(field::invalid(
                &format!("values[{i}][{key}]"),
                v,
                &msgs.join("; "),
            ));
        }
    }
    if errs.is_empty() {
        Ok(Requirement { key, op, values })
    } else {
        Err(field::aggregate(&errs))
    }
}

/// Parses a whole selector (`labels.Parse`); the error is the message of the 400.
pub fn parse(selector: &str) -> Result<Vec<Requirement>, String> {
    Parser {
        toks: lex(selector),
        pos: 0,
    }
    .parse()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(s: &str) -> Vec<(String, Op, Vec<String>)> {
        parse(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .into_iter()
            .map(|r| (r.key, r.op, r.values))
            .collect()
    }

    /// selector.go `Parse`: the grammar of `x in (foo,,baz),y,z notin ()` and friends.
    #[test]
    fn grammar() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            ops("x in (foo,,baz),y,!z, w notin ()"),
            vec![
                ("x".into(), Op::In, v(&["", "baz", "foo"])),
                ("y".into(), Op::Exists, v(&[])),
                ("z".into(), Op::DoesNotExist, v(&[])),
                ("w".into(), Op::NotIn, v(&[""])),
            ]
        );
        assert_eq!(
            ops("a=,b==c,d!=e"),
            vec![
                ("a".into(), Op::Equals, v(&[""])),
                ("b".into(), Op::DoubleEquals, v(&["c"])),
                ("d".into(), Op::NotEquals, v(&["e"])),
            ]
        );
        assert_eq!(
            ops("n>3,m<2"),
            vec![
                ("n".into(), Op::GreaterThan, v(&["3"])),
                ("m".into(), Op::LessThan, v(&["2"])),
            ]
        );
        assert_eq!(ops(""), vec![]);
        assert_eq!(ops("in in (in)"), vec![("in".into(), Op::In, v(&["in"]))]);
    }

    /// selector.go `NewRequirement` → `validateLabelValue`: a value over 63 characters.
    #[test]
    fn long_value_is_refused_with_the_real_message() {
        let name = "g".repeat(64);
        let err = parse(&format!("forgerunner.dev/group={name}")).expect_err("too long");
        assert_eq!(
            err,
            format!(
                "unable to parse requirement: values[0][forgerunner.dev/group]: Invalid value: \
                 \"{name}\": must be no more than 63 characters"
            )
        );
    }

    /// selector.go `parseKeyAndInferOperator` → `validateLabelKey` (no field path: `<nil>`).
    #[test]
    fn bad_keys_and_syntax() {
        let err = parse("bad key=x").expect_err("space");
        assert_eq!(
            err,
            "unable to parse requirement: found 'key', expected: in, notin, =, ==, !=, gt, lt"
        );
        let err = parse("-x=1").expect_err("key");
        assert!(
            err.starts_with(
                "unable to parse requirement: <nil>: Invalid value: \"-x\": name part must consist"
            ),
            "{err}"
        );
        assert_eq!(
            parse("a=b,").expect_err("trailing"),
            "found '', expected: identifier after ','"
        );
        assert_eq!(
            parse("a in (b").expect_err("unclosed"),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert!(
            parse("a>x")
                .expect_err("gt")
                .contains("for 'Gt', 'Lt' operators, the value must be an integer")
        );
        assert_eq!(
            parse("a=b c").expect_err("junk"),
            "found 'c', expected: ',' or 'end of string'"
        );
    }
}
