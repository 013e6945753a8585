//! The connection cap as a semaphore. A session's task holds its slot (a
//! permit) from accept to its end, so the slots in use are also the count
//! of live sessions, and waiting for every slot to come back is how a
//! drain would wait for them all.

use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The slots of one listener; clones share them.
#[derive(Clone)]
pub struct SessionSlots {
    permits: Arc<Semaphore>,
    max: usize,
}

/// One session's slot: given back when dropped.
pub struct SessionSlot {
    _permit: OwnedSemaphorePermit,
}

impl SessionSlots {
    /// At most `max` sessions at once.
    pub fn new(max: usize) -> SessionSlots {
        let max = max.min(Semaphore::MAX_PERMITS);
        SessionSlots {
            permits: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// A slot for one more session, or `None` when all are taken (the
    /// client is then refused with 53300).
    pub fn try_take(&self) -> Option<SessionSlot> {
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        Some(SessionSlot { _permit: permit })
    }

    /// Sessions holding a slot now.
    pub fn live(&self) -> usize {
        self.max - self.permits.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_run_out_at_the_cap_and_come_back_when_a_session_ends() {
        let slots = SessionSlots::new(2);
        let a = slots.try_take().expect("first");
        let b = slots.try_take().expect("second");
        assert_eq!(slots.live(), 2);
        assert!(slots.try_take().is_none());
        drop(a);
        assert_eq!(slots.live(), 1);
        let c = slots.try_take().expect("a freed slot");
        assert_eq!(slots.clone().live(), 2);
        drop((b, c));
        assert_eq!(slots.live(), 0);
    }
}
