//! A budget for one paged listing: pages fetched, entries kept and bytes read.
//!
//! Each page is capped by [`crate::read_capped`], but a server can still send page after
//! page (a `total_count` that never is reached) or huge items. Over budget, the listing fails
//! as a whole: returning the part read so far would look like a complete answer, and a
//! reconciler planning from it would miss queued jobs or take registered runners for gone.
//!
//! Bytes alone do not bound memory: a 3-byte `"",` decodes to a 24-byte `String`. So pages are
//! decoded against the budget ([`ListingBudget::decode_page`]): each item and each label it
//! keeps is an entry, items and labels keep bounded strings ([`crate::bounded`]), and decoding
//! stops at the first item past the listing's room. A listing's decoded size is then bounded
//! by its limits: `max_items` entries of bounded size, and strings of at most `max_bytes` in
//! all (a decoded string is never longer than its JSON).

use serde::Deserialize;

use crate::body::ByteSize;
use crate::bounded::{self, Entries, Page, PageShape};

/// The limits of one listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListingLimits {
    /// Most pages requested.
    pub max_pages: u32,
    /// Most entries kept across pages: each item is one, and so is each label it keeps
    /// ([`Entries`]).
    pub max_items: usize,
    /// Most body bytes read across pages (what decoded items can take in memory follows it).
    pub max_bytes: usize,
}

impl ListingLimits {
    /// Limits for forge listings: far above any real queue or runner fleet of one scope
    /// (20 000 entries, e.g. 5 000 jobs or runners of three labels each; 400 pages), yet small
    /// next to the operator's memory (16 MiB read; an entry keeps at most a few hundred bytes
    /// besides its strings).
    pub const FORGE_DEFAULT: ListingLimits = ListingLimits {
        max_pages: 400,
        max_items: 20_000,
        max_bytes: 16 * 1024 * 1024,
    };
}

/// Which limit a listing passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListingError {
    /// More pages than `max_pages` and the server still says there is more.
    #[error("the listing did not end within {0} pages")]
    Pages(u32),
    /// More entries (items and their labels) than `max_items`.
    #[error("the listing holds more than {0} items and labels")]
    Items(usize),
    /// More bytes than `max_bytes` across pages.
    #[error("the listing is larger than {}", ByteSize(*.0))]
    Bytes(usize),
}

/// What one listing has used so far.
#[derive(Debug)]
pub struct ListingBudget {
    limits: ListingLimits,
    pages: u32,
    items: usize,
    bytes: usize,
}

impl ListingBudget {
    /// A fresh budget.
    pub fn new(limits: ListingLimits) -> ListingBudget {
        ListingBudget {
            limits,
            pages: 0,
            items: 0,
            bytes: 0,
        }
    }

    /// The number of the next page to request (1-based), or an error when the listing has
    /// already used every page it may.
    pub fn next_page(&mut self) -> Result<u32, ListingError> {
        if self.pages >= self.limits.max_pages {
            return Err(ListingError::Pages(self.limits.max_pages));
        }
        self.pages += 1;
        Ok(self.pages)
    }

    /// Entries the listing may still keep.
    pub fn room(&self) -> usize {
        self.limits.max_items.saturating_sub(self.items)
    }

    /// Decodes one page of the listing from `body`, keeping no more entries than the listing
    /// has room for: past that, decoding stops and the page is [`ListingError::Items`], so the
    /// memory for the rest is never taken. `None` when the body is not such a page (a bad
    /// response). Charges nothing: see [`ListingBudget::charge_page`].
    ///
    /// Fits the decode callback of [`crate::RestClient::send`], which runs while the budget
    /// is only borrowed.
    pub fn decode_page<T>(&self, body: &[u8], shape: PageShape) -> Option<Result<Page<T>, ListingError>>
    where
        T: for<'de> Deserialize<'de> + Entries,
    {
        match bounded::decode_page(body, shape, self.room()) {
            Ok(Some(page)) => Some(Ok(page)),
            Ok(None) => Some(Err(ListingError::Items(self.limits.max_items))),
            Err(_) => None,
        }
    }

    /// Counts a page from [`ListingBudget::decode_page`]: its entries and body bytes.
    pub fn charge_page<T>(&mut self, page: &Page<T>) -> Result<(), ListingError> {
        self.charge(page.entries, page.bytes)
    }

    /// Counts a page of `items` entries read from `bytes` body bytes.
    pub fn charge(&mut self, items: usize, bytes: usize) -> Result<(), ListingError> {
        self.items = self.items.saturating_add(items);
        self.bytes = self.bytes.saturating_add(bytes);
        if self.items > self.limits.max_items {
            return Err(ListingError::Items(self.limits.max_items));
        }
        if self.bytes > self.limits.max_bytes {
            return Err(ListingError::Bytes(self.limits.max_bytes));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: ListingLimits = ListingLimits {
        max_pages: 3,
        max_items: 10,
        max_bytes: 1000,
    };

    #[test]
    fn stops_at_each_limit() {
        let mut b = ListingBudget::new(SMALL);
        assert_eq!(b.next_page(), Ok(1));
        assert_eq!(b.next_page(), Ok(2));
        assert_eq!(b.next_page(), Ok(3));
        assert_eq!(b.next_page(), Err(ListingError::Pages(3)));

        let mut b = ListingBudget::new(SMALL);
        assert_eq!(b.charge(10, 10), Ok(()));
        assert_eq!(b.charge(1, 10), Err(ListingError::Items(10)));

        let mut b = ListingBudget::new(SMALL);
        assert_eq!(b.charge(1, 1000), Ok(()));
        assert_eq!(b.charge(0, 1), Err(ListingError::Bytes(1000)));
        assert_eq!(
            ListingError::Bytes(16 * 1024 * 1024).to_string(),
            "the listing is larger than 16 MiB"
        );
    }
}
