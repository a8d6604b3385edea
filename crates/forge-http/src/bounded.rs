//! Decoding forge listings into memory that configuration bounds, not the server's data.
//!
//! The byte caps ([`crate::read_capped`], [`crate::ListingLimits`]) bound what is read, not
//! what it decodes to: 16 MiB of `"",` decodes to 5.6 million `String`s, about 130 MiB of
//! `String` headers alone, and the decoded listing is cached. So Gitea's and Forgejo's listings
//! decode through the visitors here, which never allocate past a bound:
//!
//! - a string keeps at most a fixed number of characters ([`name`], [`label`], [`url`]);
//! - a label list keeps its distinct labels, at most [`KEPT_LABELS`] of them ([`labels`],
//!   [`distinct`]);
//! - a page keeps items only while the listing has room for them, counting each item and each
//!   label it keeps as one entry ([`Entries`], [`crate::ListingBudget::decode_page`]).
//!
//! Every bound is one more than what a RunnerGroup may hold, so cutting never changes a
//! decision. A job matches a group when each of its labels is one of the group's label names
//! (`forgerunner_core::labels::LabelSet::matches`, and the forges' own rule: Gitea's
//! `ActionRunner.CanMatchLabels` and Forgejo's `ActionRunJob.ItRunsOn` are set containment).
//! A group has at most [`MAX_LABELS`] labels of at most [`MAX_LABEL_LEN`] characters. A job
//! with more distinct labels, or a longer one, can never match, and cut to 65 distinct labels
//! or 257 characters it still cannot: it stays over the bound. Duplicates are dropped before
//! counting, so cutting never drops a label that decides the match. Names are compared for
//! equality with names of at most [`MAX_FORGE_NAME_LEN`] characters (Gitea's and Forgejo's
//! `VARCHAR(255)` names), so a longer name cut to 256 characters still equals none of them.
//! A string past its bound is thus refused by every check it meets, as the whole one would be.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use forgerunner_core::validate::{MAX_FORGE_NAME_LEN, MAX_LABEL_LEN, MAX_LABELS, MAX_REPO_LEN, MAX_URL_LEN};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Distinct labels kept per item: one more than a group may have ([`MAX_LABELS`]).
pub const KEPT_LABELS: usize = MAX_LABELS + 1;
/// Characters kept of a label: one more than a group's label may have ([`MAX_LABEL_LEN`]).
pub const KEPT_LABEL_CHARS: usize = MAX_LABEL_LEN + 1;
/// Characters kept of a name or status word: one more than a forge name may have
/// ([`MAX_FORGE_NAME_LEN`]).
pub const KEPT_NAME_CHARS: usize = MAX_FORGE_NAME_LEN + 1;
/// Characters kept of an API URL: the longest forge URL a group may name, an `owner/name`
/// repository and room for the rest of an API path. A job's URL only tells its repository;
/// one cut short tells none.
pub const KEPT_URL_CHARS: usize = MAX_URL_LEN + MAX_REPO_LEN + 256;

/// What a kept item costs its listing's budget, in entries: one for the item and one for each
/// label it keeps. Labels are what an item can hold many of, each with its own `String`, so
/// they are counted like items.
pub trait Entries {
    /// Entries of this item.
    fn entries(&self) -> usize;
}

/// The first `max` characters of `s`.
pub fn first_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

/// A string of at most `max` characters; `null` is empty.
#[derive(Clone, Copy)]
struct Chars {
    max: usize,
}

impl<'de> Visitor<'de> for Chars {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<String, E> {
        Ok(String::new())
    }

    fn visit_unit<E: de::Error>(self) -> Result<String, E> {
        Ok(String::new())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }

    // Only the kept part is copied out of the body (or the parser's scratch buffer).
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(first_chars(v, self.max).to_owned())
    }
}

impl<'de> DeserializeSeed<'de> for Chars {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_option(self)
    }
}

/// `deserialize_with` for a name, status word or other short string: at most
/// [`KEPT_NAME_CHARS`] characters; `null` is empty.
pub fn name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Chars { max: KEPT_NAME_CHARS }.deserialize(d)
}

/// `deserialize_with` for one label: at most [`KEPT_LABEL_CHARS`] characters; `null` is empty.
pub fn label<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Chars {
        max: KEPT_LABEL_CHARS,
    }
    .deserialize(d)
}

/// `deserialize_with` for an API URL: at most [`KEPT_URL_CHARS`] characters; `null` is empty.
pub fn url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Chars { max: KEPT_URL_CHARS }.deserialize(d)
}

/// A list of which only the distinct elements are kept, at most [`KEPT_LABELS`]; `null` is
/// empty.
struct Distinct<S> {
    element: S,
}

impl<'de, S> Visitor<'de> for Distinct<S>
where
    S: DeserializeSeed<'de> + Clone,
    S::Value: PartialEq,
{
    type Value = Vec<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // The server's size hint is not trusted: the list grows with what is kept.
        let mut kept: Vec<S::Value> = Vec::new();
        while kept.len() < KEPT_LABELS {
            let Some(v) = seq.next_element_seed(self.element.clone())? else {
                kept.shrink_to_fit();
                return Ok(kept);
            };
            // Matching is set containment, so a repeat changes nothing; dropping repeats
            // before counting keeps a long list of repeats from pushing out a deciding label.
            if !kept.contains(&v) {
                kept.push(v);
            }
        }
        // Over the bound: the item can match no group already, so the rest is parsed (the
        // body must still be valid JSON) but kept nowhere.
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        kept.shrink_to_fit();
        Ok(kept)
    }
}

impl<'de, S> DeserializeSeed<'de> for Distinct<S>
where
    S: DeserializeSeed<'de> + Clone,
    S::Value: PartialEq,
{
    type Value = Vec<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

/// `deserialize_with` for a list of label names (a job's `runs-on`): the distinct labels, at
/// most [`KEPT_LABELS`], each of at most [`KEPT_LABEL_CHARS`] characters, in the order first
/// sent; `null` is empty.
pub fn labels<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Distinct {
        element: Chars {
            max: KEPT_LABEL_CHARS,
        },
    }
    .deserialize(d)
}

/// `deserialize_with` for a list of label objects (Gitea's `ActionRunnerLabel`): the distinct
/// ones, at most [`KEPT_LABELS`]; `null` is empty. `T` must bound its own strings.
pub fn distinct<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + PartialEq,
{
    Distinct {
        element: PhantomData::<T>,
    }
    .deserialize(d)
}

/// Where a page's items are in its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageShape {
    /// The body is a JSON list of items, or `null` for none (Forgejo's lists).
    List,
    /// The body is an object holding the items in the field `items` and the count across pages
    /// in `total_count` (Gitea's `ActionWorkflowJobsResponse` and `ActionRunnersResponse`).
    Object {
        /// Name of the field holding the items.
        items: &'static str,
    },
}

/// One decoded page of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    /// The page's items, in the order sent.
    pub items: Vec<T>,
    /// `total_count`, when the shape has it and the server sent a number.
    pub total_count: Option<i64>,
    /// Entries the items keep ([`Entries`]).
    pub entries: usize,
    /// Body bytes the page was read from.
    pub bytes: usize,
}

/// Decodes a page of `shape` from `body`, keeping at most `room` entries. `Ok(None)` means
/// the page holds more: decoding stopped at the item that passed `room`, so nothing past the
/// bound was kept. `Err` means the body is not such a page.
pub(crate) fn decode_page<T>(
    body: &[u8],
    shape: PageShape,
    room: usize,
) -> Result<Option<Page<T>>, serde_json::Error>
where
    T: for<'de> Deserialize<'de> + Entries,
{
    let over = Cell::new(false);
    let items = Items {
        room,
        over: &over,
        item: PhantomData,
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let decoded = match shape {
        PageShape::List => items.deserialize(&mut de).map(|kept| (kept, None)),
        PageShape::Object { items: field } => de.deserialize_map(Object { field, items }),
    };
    match decoded.and_then(|page| de.end().map(|()| page)) {
        Ok(((items, entries), total_count)) => Ok(Some(Page {
            items,
            total_count,
            entries,
            bytes: body.len(),
        })),
        Err(_) if over.get() => Ok(None),
        Err(e) => Err(e),
    }
}

/// A page's list of items, kept while they fit in `room` entries; sets `over` and stops at the
/// first item that does not.
struct Items<'a, T> {
    room: usize,
    over: &'a Cell<bool>,
    item: PhantomData<T>,
}

/// Items and the entries they keep.
type Kept<T> = (Vec<T>, usize);

impl<'de, T: Deserialize<'de> + Entries> Visitor<'de> for Items<'_, T> {
    type Value = Kept<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of items or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Kept<T>, E> {
        Ok((Vec::new(), 0))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Kept<T>, E> {
        Ok((Vec::new(), 0))
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Kept<T>, D::Error> {
        d.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kept<T>, A::Error> {
        let mut items = Vec::new();
        let mut entries = 0usize;
        while let Some(item) = seq.next_element::<T>()? {
            entries = entries.saturating_add(item.entries());
            if entries > self.room {
                // Stop here rather than read on: the listing fails whole anyway, and the rest
                // of the page would only be decoded to be dropped.
                self.over.set(true);
                return Err(de::Error::custom(
                    "the page holds more entries than the listing has room for",
                ));
            }
            items.push(item);
        }
        Ok((items, entries))
    }
}

impl<'de, T: Deserialize<'de> + Entries> DeserializeSeed<'de> for Items<'_, T> {
    type Value = Kept<T>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Kept<T>, D::Error> {
        d.deserialize_option(self)
    }
}

/// A page object: the items field, `total_count`, and fields ignored without being kept.
struct Object<'a, T> {
    field: &'static str,
    items: Items<'a, T>,
}

impl<'de, T: Deserialize<'de> + Entries> Visitor<'de> for Object<'_, T> {
    type Value = (Kept<T>, Option<i64>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an object with `{}` and `total_count`", self.field)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let Object { field, items } = self;
        let mut items = Some(items);
        let mut kept = None;
        let mut total = None;
        while let Some(key) = map.next_key_seed(KeySeed { items: field })? {
            match key {
                Key::Items => {
                    // A second copy of the field would be a second budget's worth of items.
                    let seed = items.take().ok_or_else(|| de::Error::duplicate_field(field))?;
                    kept = Some(map.next_value_seed(seed)?);
                }
                Key::Total => total = map.next_value::<Option<i64>>()?,
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((kept.unwrap_or_default(), total))
    }
}

/// A field of a page object.
enum Key {
    Items,
    Total,
    Other,
}

/// Reads a field name without allocating it.
struct KeySeed {
    items: &'static str,
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(if v == self.items {
            Key::Items
        } else if v == "total_count" {
            Key::Total
        } else {
            Key::Other
        })
    }
}

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_identifier(self)
    }
}

#[cfg(test)]
#[path = "bounded_tests.rs"]
mod tests;
