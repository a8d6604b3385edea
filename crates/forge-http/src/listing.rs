//! A budget for one paged listing: pages fetched, items kept and bytes read.
//!
//! Each page is capped by [`crate::read_capped`], but a server can still send page after
//! page (a `total_count` that never is reached) or huge items. Over budget, the listing fails
//! as a whole: returning the part read so far would look like a complete answer, and a
//! reconciler planning from it would miss queued jobs or take registered runners for gone.

use crate::body::ByteSize;

/// The limits of one listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListingLimits {
    /// Most pages requested.
    pub max_pages: u32,
    /// Most items kept across pages.
    pub max_items: usize,
    /// Most body bytes read across pages (what decoded items can take in memory follows it).
    pub max_bytes: usize,
}

impl ListingLimits {
    /// Limits for forge listings: far above any real queue or runner fleet of one scope
    /// (10 000 items, 400 pages), yet small next to the operator's memory (16 MiB).
    pub const FORGE_DEFAULT: ListingLimits = ListingLimits {
        max_pages: 400,
        max_items: 10_000,
        max_bytes: 16 * 1024 * 1024,
    };
}

/// Which limit a listing passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListingError {
    /// More pages than `max_pages` and the server still says there is more.
    #[error("the listing did not end within {0} pages")]
    Pages(u32),
    /// More items than `max_items`.
    #[error("the listing holds more than {0} items")]
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

    /// Counts a page of `items` items read from `bytes` body bytes.
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
