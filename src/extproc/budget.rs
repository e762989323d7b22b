//! A global budget of buffered request-body bytes, shared by every stream.
//!
//! epp must hold a request's body until it is complete (routing reads the whole body), so the per-stream
//! limit (`--max-request-body-bytes`) alone lets many slow or idle clients pin that much memory each. The
//! budget (`--max-buffered-request-bytes`) bounds the sum: a chunk that would take it past the limit gets
//! its request a 503 with the reason, rather than epp running out of memory. Each stream's share is a
//! [`BodyReservation`], given back as soon as the body is forwarded or the stream ends.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The bytes all streams may hold at once.
#[derive(Debug)]
pub struct BodyBudget {
    limit: usize,
    used: AtomicUsize,
}

impl BodyBudget {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self { limit, used: AtomicUsize::new(0) })
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// Takes `n` bytes if they fit.
    fn try_take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        // Never below zero: a reservation gives back only what it took.
        let _ =
            self.used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| Some(used.saturating_sub(n)));
    }
}

/// One stream's share of the budget.
#[derive(Debug)]
pub struct BodyReservation {
    budget: Arc<BodyBudget>,
    held: usize,
}

impl BodyReservation {
    pub fn new(budget: Arc<BodyBudget>) -> Self {
        Self { budget, held: 0 }
    }

    /// Grows the share by `n` bytes; false (and nothing taken) when the budget is spent.
    pub fn grow(&mut self, n: usize) -> bool {
        if !self.budget.try_take(n) {
            return false;
        }
        self.held += n;
        true
    }

    /// Gives the whole share back (the body was forwarded or dropped).
    pub fn release(&mut self) {
        self.budget.give_back(std::mem::take(&mut self.held));
    }
}

impl Drop for BodyReservation {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_limit_and_come_back() {
        let budget = BodyBudget::new(100);
        let mut a = BodyReservation::new(budget.clone());
        let mut b = BodyReservation::new(budget.clone());
        assert!(a.grow(60));
        assert!(!b.grow(50), "60 + 50 is over 100");
        assert_eq!(budget.used(), 60, "a refused grow takes nothing");
        assert!(b.grow(40));
        a.release();
        assert_eq!(budget.used(), 40);
        a.release();
        assert_eq!(budget.used(), 40, "releasing twice gives back nothing more");
        drop(b);
        assert_eq!(budget.used(), 0);
        assert!(!BodyReservation::new(budget).grow(usize::MAX), "no overflow");
    }
}
