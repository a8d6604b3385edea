use forgerunner_core::labels::runner_can_take;
use serde::Deserialize;

use super::*;
use crate::{ListingBudget, ListingError, ListingLimits};

#[derive(Debug, Default, Deserialize, PartialEq)]
struct Row {
    #[serde(default)]
    id: i64,
    #[serde(default, deserialize_with = "name")]
    name: String,
    #[serde(default, deserialize_with = "labels")]
    labels: Vec<String>,
}

impl Entries for Row {
    fn entries(&self) -> usize {
        1 + self.labels.len()
    }
}

fn row(json: &str) -> Row {
    serde_json::from_str(json).expect("a row")
}

/// A JSON list of `labels`.
fn list(labels: &[String]) -> String {
    serde_json::to_string(labels).expect("JSON")
}

#[test]
fn strings_keep_one_character_past_their_bound() {
    let long = "é".repeat(10_000);
    let r = row(&format!(r#"{{"name":"{long}"}}"#));
    assert_eq!(r.name.chars().count(), KEPT_NAME_CHARS);
    assert_eq!(r.name.len(), 2 * KEPT_NAME_CHARS, "cut on a character boundary");
    let exact = "n".repeat(MAX_FORGE_NAME_LEN);
    assert_eq!(
        row(&format!(r#"{{"name":"{exact}"}}"#)).name,
        exact,
        "a name within bounds is whole"
    );
    assert_eq!(row(r#"{"name":null}"#).name, "");
    assert_eq!(row(r#"{}"#).name, "");
    assert_eq!(
        row(r#"{"name":"a\"b\u00e9"}"#).name,
        "a\"bé",
        "escapes decode as usual"
    );
    assert!(
        serde_json::from_str::<Row>(r#"{"name":7}"#).is_err(),
        "a number is no name"
    );
    assert_eq!(first_chars("abc", 0), "");
    assert_eq!(first_chars("abc", 5), "abc");
}

/// H3c: 4 MiB of `"",` is 1.4 million `String`s (24 bytes each, ~32 MiB) if kept as sent.
#[test]
fn a_list_of_repeats_keeps_one_of_each() {
    let n = 4 * 1024 * 1024 / 3;
    let body = format!(r#"{{"labels":[{}""]}}"#, r#""","#.repeat(n));
    assert_eq!(row(&body).labels, [""]);
    let body = format!(r#"{{"labels":[{}"b","a"]}}"#, r#""a","#.repeat(1000));
    assert_eq!(row(&body).labels, ["a", "b"], "order of first sight");
    assert!(row(r#"{"labels":null}"#).labels.is_empty());
    assert!(row(r#"{}"#).labels.is_empty());
    assert!(row(r#"{"labels":[]}"#).labels.is_empty());
    assert!(
        serde_json::from_str::<Row>(r#"{"labels":["a",1]}"#).is_err(),
        "a number is no label"
    );
    assert!(
        serde_json::from_str::<Row>(r#"{"labels":"a"}"#).is_err(),
        "a string is no list"
    );
}

#[test]
fn a_list_keeps_at_most_one_label_past_the_bound() {
    let many: Vec<String> = (0..10_000).map(|i| format!("l{i}")).collect();
    let r = row(&format!(r#"{{"labels":{}}}"#, list(&many)));
    assert_eq!(r.labels, many[..KEPT_LABELS]);
    let long = "x".repeat(100_000);
    let r = row(&format!(r#"{{"labels":["{long}"]}}"#));
    assert_eq!(r.labels, ["x".repeat(KEPT_LABEL_CHARS)]);
    // Past the bound the rest is parsed, not kept: it must still be JSON.
    let whole = list(&many);
    let open = whole.strip_suffix(']').expect("a list");
    assert!(serde_json::from_str::<Row>(&format!(r#"{{"labels":{open},}}"#)).is_err());
}

/// The choice documented in the module: a list cut at its bound decides every group's match
/// as the whole list does, for groups within the CRD's bounds (at most 64 labels of at most
/// 256 characters).
#[test]
fn cut_lists_decide_every_match_as_the_whole_ones() {
    let names = |n: usize| -> Vec<String> { (0..n).map(|i| format!("l{i}")).collect() };
    let group_64 = names(MAX_LABELS);
    let at_bound = "g".repeat(MAX_LABEL_LEN);
    let mut long_group = names(MAX_LABELS - 1);
    long_group.push(at_bound.clone());
    let mut repeats_then_other: Vec<String> = vec!["l0".into(); 1000];
    repeats_then_other.push("other".into());
    let mut all_65 = names(MAX_LABELS + 1);
    all_65.splice(0..0, vec!["l0".to_string(); 500]);
    let cases: Vec<(&str, Vec<String>, Vec<String>, bool)> = vec![
        (
            "64 labels, all the group's",
            names(MAX_LABELS),
            group_64.clone(),
            true,
        ),
        (
            "65 distinct labels, 64 the group's",
            names(MAX_LABELS + 1),
            group_64.clone(),
            false,
        ),
        ("10 000 distinct labels", names(10_000), group_64.clone(), false),
        (
            "repeats of a group label",
            vec!["l3".into(); 5000],
            group_64.clone(),
            true,
        ),
        (
            "repeats, then a foreign label",
            repeats_then_other,
            group_64.clone(),
            false,
        ),
        ("repeats, then 65 distinct", all_65, group_64.clone(), false),
        (
            "a label at the bound",
            vec![at_bound.clone()],
            long_group.clone(),
            true,
        ),
        (
            "a longer label starting like one at the bound",
            vec![format!("{at_bound}tail")],
            long_group.clone(),
            false,
        ),
        ("an empty label", vec![String::new(); 10], group_64.clone(), false),
    ];
    for (what, runs_on, group, want) in cases {
        let kept = row(&format!(r#"{{"labels":{}}}"#, list(&runs_on))).labels;
        assert!(kept.len() <= KEPT_LABELS && kept.iter().all(|l| l.chars().count() <= KEPT_LABEL_CHARS));
        assert_eq!(runner_can_take(&group, &runs_on), want, "{what}: whole list");
        assert_eq!(runner_can_take(&group, &kept), want, "{what}: kept list");
    }
}

#[derive(Debug, Deserialize, PartialEq)]
struct Named {
    #[serde(default, deserialize_with = "label")]
    name: String,
}

#[test]
fn label_objects_are_kept_distinct_and_bounded() {
    #[derive(Deserialize)]
    struct Runner {
        #[serde(deserialize_with = "distinct")]
        labels: Vec<Named>,
    }
    let one = r#"{"id":0,"name":"x","type":"custom"},"#.repeat(100_000);
    let r: Runner = serde_json::from_str(&format!(r#"{{"labels":[{one}{{"name":"y"}}]}}"#)).expect("runner");
    assert_eq!(r.labels, [Named { name: "x".into() }, Named { name: "y".into() }]);
    let many: Vec<String> = (0..1000).map(|i| format!(r#"{{"name":"l{i}"}}"#)).collect();
    let r: Runner = serde_json::from_str(&format!(r#"{{"labels":[{}]}}"#, many.join(","))).expect("runner");
    assert_eq!(r.labels.len(), KEPT_LABELS);
    let r: Runner = serde_json::from_str(r#"{"labels":null}"#).expect("null");
    assert!(r.labels.is_empty());
}

const SMALL: ListingLimits = ListingLimits {
    max_pages: 10,
    max_items: 10,
    max_bytes: 1 << 20,
};

const JOBS: PageShape = PageShape::Object { items: "jobs" };

#[test]
fn pages_count_items_and_labels() {
    let budget = ListingBudget::new(SMALL);
    let body = br#"{"total_count":9,"jobs":[{"id":1,"labels":["a","b","a"]},{"id":2}],"extra":[1,2]}"#;
    let page: Page<Row> = budget
        .decode_page(body, JOBS)
        .expect("a page")
        .expect("within room");
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.entries, 4, "two items, two distinct labels");
    assert_eq!(page.total_count, Some(9));
    assert_eq!(page.bytes, body.len());

    let page: Page<Row> = budget
        .decode_page(br#"{"jobs":null}"#, JOBS)
        .expect("a page")
        .expect("empty");
    assert_eq!((page.items.len(), page.total_count), (0, None));
    let page: Page<Row> = budget
        .decode_page(b"null", PageShape::List)
        .expect("a page")
        .expect("empty");
    assert!(page.items.is_empty());
    let page: Page<Row> = budget
        .decode_page(br#"[{"id":3,"name":"r"}]"#, PageShape::List)
        .expect("a page")
        .expect("one");
    assert_eq!(page.items[0].name, "r");

    for bad in [
        &br#"{"jobs":[],"jobs":[]}"#[..],
        br#"{"jobs":[]} trailing"#,
        br#"{"jobs":{}}"#,
        br#"[{"id":1}]"#,
        b"<html>",
    ] {
        assert!(
            budget.decode_page::<Row>(bad, JOBS).is_none(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

/// The page stops at the listing's room rather than decoding on: a page of a million items
/// is refused after the eleventh.
#[test]
fn a_page_past_the_room_is_refused_where_it_passes() {
    let mut budget = ListingBudget::new(SMALL);
    let full = br#"{"jobs":[{"id":1,"labels":["a","b","c","d"]},{"id":2,"labels":["e","f","g","h"]}]}"#;
    let page: Page<Row> = budget.decode_page(full, JOBS).expect("a page").expect("fits");
    assert_eq!(page.entries, 10);
    assert_eq!(budget.room(), 10);
    budget.charge_page(&page).expect("within the budget");
    assert_eq!(budget.room(), 0);
    let one_more = budget.decode_page::<Row>(br#"{"jobs":[{"id":3}]}"#, JOBS);
    assert_eq!(one_more, Some(Err(ListingError::Items(10))));
    let empty: Page<Row> = budget
        .decode_page(br#"{"jobs":[]}"#, JOBS)
        .expect("a page")
        .expect("fits");
    assert_eq!(empty.entries, 0);

    let fresh = ListingBudget::new(SMALL);
    // Past the room the rest of the page is not even parsed: invalid JSON after the
    // eleventh item still reads as over budget, not as a bad response.
    let huge = format!(r#"[{}not JSON at all"#, r#"{"id":1},"#.repeat(11));
    assert_eq!(
        fresh.decode_page::<Row>(huge.as_bytes(), PageShape::List),
        Some(Err(ListingError::Items(10)))
    );
    assert_eq!(
        ListingError::Items(20_000).to_string(),
        "the listing holds more than 20000 items and labels"
    );
}
