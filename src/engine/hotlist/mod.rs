//! The hot list (seed 000; docs/internals/hotlist.md): per (tenant, queue,
//! group), a ring of the partition ids that may have pending work, so a POP
//! hands `log_pop_v2` a few candidates by id instead of scanning every
//! partition of the queue. The database still decides who gets what, so a
//! stale ring costs a look, never a wrong delivery.
//!
//! Fed by: a full seed when a ring is cold and on every reconcile
//! ([`ring::RECONCILE_EVERY`]); the partition ids a fused push through this
//! process wrote, once committed ([`Hotlist::fed`]); a windowed reseed over
//! `(queue_id, last_write_at)` on a wake-up of the queue (a NOTIFY from
//! another process, or a push here that does not carry its partitions: in
//! a transaction block, a timer, a stream's window; [`Hotlist::woken`]) and at least every [`ring::RESEED_EVERY`];
//! `queen.hotlist_repairs` read with every seed (SEEK, DROP GROUP of other
//! processes; this process's own repair its rings at once); what each POP
//! learns (empty candidates leave, waiting ones are parked until their
//! lease, retry delay or window passes, and an ACK through this process
//! brings its partition back).

mod pop;
pub mod ring;
pub mod rotation;

use ring::RingState;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};
use uuid::Uuid;

/// A ring no POP used for this long is forgotten (the next POP of its queue
/// and group seeds it afresh).
const RING_IDLE: Duration = Duration::from_secs(600);

/// One ring and the wake-up counter of its queue.
pub struct Ring {
    state: Mutex<RingState>,
    wakes: Arc<AtomicU64>,
    group: String,
}

impl Ring {
    fn lock(&self) -> MutexGuard<'_, RingState> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn wake_gen(&self) -> u64 {
        self.wakes.load(Ordering::Acquire)
    }
}

type RingKey = (Uuid, String, String);

/// Every ring of this process.
#[derive(Default)]
pub struct Hotlist {
    rings: Mutex<HashMap<RingKey, Arc<Ring>>>,
    /// Wake-up counters by the digest of the queue key (`wake.rs`), which is
    /// all a NOTIFY carries.
    wakes: Mutex<HashMap<String, Arc<AtomicU64>>>,
    /// The rings of each queue by the same digest, for a push to feed.
    by_digest: Mutex<HashMap<String, Vec<Weak<Ring>>>>,
    /// Wildcard POPs' turns among the queues of a namespace.
    pub rotations: rotation::Rotations,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Hotlist {
    /// The ring of (tenant, queue, group), created cold on first use;
    /// `digest` is the queue key's wake-up digest.
    pub fn ring(&self, tenant: Uuid, queue: &str, group: &str, digest: &str) -> Arc<Ring> {
        let key = (tenant, queue.to_string(), group.to_string());
        if let Some(r) = lock(&self.rings).get(&key) {
            return r.clone();
        }
        let wakes = lock(&self.wakes)
            .entry(digest.to_string())
            .or_default()
            .clone();
        let (ring, created) = match lock(&self.rings).entry(key) {
            Entry::Occupied(e) => (e.get().clone(), false),
            Entry::Vacant(v) => {
                let ring = Arc::new(Ring {
                    state: Mutex::new(RingState::default()),
                    wakes,
                    group: group.to_string(),
                });
                (v.insert(ring).clone(), true)
            }
        };
        if created {
            lock(&self.by_digest)
                .entry(digest.to_string())
                .or_default()
                .push(Arc::downgrade(&ring));
        }
        ring
    }

    /// Something was pushed to the queue with this digest (here or in
    /// another process): its rings catch up before their next POP.
    pub fn woken(&self, digest: &str) {
        if let Some(w) = lock(&self.wakes).get(digest) {
            w.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A push through this process committed into these partitions of
    /// the queue with this digest: each ring of the queue takes them as a
    /// reseed would have found them, without one. False when the queue has
    /// no ring here (nothing to give them to).
    pub fn fed(&self, digest: &str, partitions: &[i64]) -> bool {
        let rings: Vec<Arc<Ring>> = lock(&self.by_digest)
            .get(digest)
            .map(|v| v.iter().filter_map(Weak::upgrade).collect())
            .unwrap_or_default();
        for ring in &rings {
            ring.lock().fed(partitions);
        }
        !rings.is_empty()
    }

    /// A SEEK or DROP GROUP through this process: the ring reseeds fully
    /// and gives up its parked ids (their leases were released).
    pub fn repaired(&self, tenant: Uuid, queue: &str, group: &str) {
        let key = (tenant, queue.to_string(), group.to_string());
        let ring = lock(&self.rings).get(&key).cloned();
        if let Some(r) = ring {
            r.lock().repaired();
        }
    }

    /// When a parked partition of the ring of (tenant, queue, group) comes
    /// back, if there is such a ring here: a waiting POP looks again then
    /// instead of at its next poll, so a message whose lease expired (or
    /// whose retry delay passed) reaches a waiter when it becomes available.
    pub fn next_due(&self, tenant: Uuid, queue: &str, group: &str) -> Option<SystemTime> {
        let key = (tenant, queue.to_string(), group.to_string());
        let ring = lock(&self.rings).get(&key).cloned();
        ring.and_then(|r| r.lock().next_due())
    }

    /// ACKs through this process: their partitions' leases may be gone, so
    /// a parked partition of that group comes back into its ring (`plain`:
    /// not FAILED; one its own claim drained stays out, see `ring.rs`).
    pub fn acked(&self, partitions: &[(i64, &str)], plain: bool) {
        if partitions.is_empty() {
            return;
        }
        let rings: Vec<Arc<Ring>> = lock(&self.rings).values().cloned().collect();
        for ring in rings {
            let mut state = None;
            for (id, group) in partitions {
                if *group == ring.group {
                    state.get_or_insert_with(|| ring.lock()).release(*id, plain);
                }
            }
        }
    }

    /// Claims of these (partition, group)s were given back undelivered:
    /// each partition goes to the front of its rotation.
    pub fn given_back(&self, partitions: &[(i64, &str)]) {
        let rings: Vec<Arc<Ring>> = lock(&self.rings).values().cloned().collect();
        for ring in rings {
            for (id, group) in partitions {
                if *group == ring.group {
                    ring.lock().given_back(*id);
                }
            }
        }
    }

    /// Forgets rings idle for [`RING_IDLE`] and wake-up counters no ring
    /// uses (called now and then).
    pub fn prune(&self) {
        let now = Instant::now();
        lock(&self.rings).retain(|_, r| Arc::strong_count(r) > 1 || !r.lock().idle(now, RING_IDLE));
        lock(&self.wakes).retain(|_, w| Arc::strong_count(w) > 1);
        lock(&self.by_digest).retain(|_, v| {
            v.retain(|w| w.strong_count() > 0);
            !v.is_empty()
        });
        self.rotations.prune();
    }
}
