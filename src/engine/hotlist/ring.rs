//! One hot-list ring: the partition ids of one (tenant, queue, group) that
//! may have pending work, in rotation order, and those known to be pending
//! but not claimable before some instant (parked). Pure state, no I/O: the
//! driver (`pop.rs`) decides when to seed and what to take, and reports back
//! what `log_pop_v2` said.
//!
//! Every id is in exactly one place: the rotation (`order`), in flight (taken
//! by a POP and not yet settled), parked, or nowhere. `members` holds the
//! first two with the epoch of the id's latest add; a POP that finds an id
//! empty drops it only if nothing added it again since the POP took it, so a
//! reseed that raced with the POP is never undone by it.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant, SystemTime};

/// A windowed reseed runs at least this often while POPs come, wake-up or
/// not: the bound on how late a push without a wake-up (direct SQL, a lost
/// NOTIFY) is found.
pub const RESEED_EVERY: Duration = Duration::from_secs(1);
/// The full reseed (reconcile) period: with [`RECONCILE_SHARE`], the bound
/// on how long a lost hint can strand a message (docs/internals/hotlist.md).
pub const RECONCILE_EVERY: Duration = Duration::from_secs(10);
/// The reconcile period is also at least this many times what the last full
/// seed took, so a queue with very many partitions spends at most about 1 %
/// of its POPs' time reconciling.
pub const RECONCILE_SHARE: u32 = 100;
/// How far a windowed reseed reaches back before the previous one's start:
/// a push stamps `last_write_at` before it commits, so a write committed
/// after a reseed began can carry a stamp a little older than that start
/// (1 s allowed for that), and a push keeps a stamp less than a second old
/// instead of writing its own (003, so that its UPDATE is HOT): 1 s more.
pub const SKEW_MARGIN: Duration = Duration::from_secs(2);
/// Parked ids come back this much after their instant (the database's clock
/// and ours differ a little; early costs a look, late costs latency).
const PARK_SLACK: Duration = Duration::from_millis(5);

/// What the ring needs before this POP takes candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Maintenance {
    None,
    /// Seed from the whole queue (cold ring, reconcile due, repair).
    Full,
    /// Catch up with the partitions written since this (database clock).
    /// `deferrable`: only a wake-up asks for it (the periodic reseed is not
    /// due), so a POP that can claim from the ring as it is may skip it;
    /// dropping it leaves it due for the next POP.
    Window {
        since: SystemTime,
        deferrable: bool,
    },
    /// The ring is cold and another POP is seeding it: claim over the whole
    /// queue this once.
    WholeQueue,
}

/// A candidate as `log_pop_v2` judged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    Claimed,
    Empty,
    /// Pending, not claimable before this instant (lease, retry delay,
    /// window buffer, delayed processing); `None` when unknown.
    Waiting(Option<SystemTime>),
    /// Another POP holds it right now.
    Locked,
}

impl Judgement {
    pub fn from_state(state: &str, retry_at: Option<SystemTime>) -> Judgement {
        match state {
            "claimed" => Judgement::Claimed,
            "empty" => Judgement::Empty,
            "locked" => Judgement::Locked,
            _ => Judgement::Waiting(retry_at),
        }
    }
}

/// Ids a POP took; settled or put back by the driver.
#[derive(Debug)]
pub struct Taken {
    pub ids: Vec<i64>,
    epoch: u64,
}

/// A seed's answer, as the driver hands it over.
#[derive(Debug, Clone, Default)]
pub struct Seeded {
    pub ids: Vec<i64>,
    /// Where the next window starts (database clock).
    pub window_from: Option<SystemTime>,
    pub repair_at: Option<SystemTime>,
    pub repair_partition: Option<i64>,
    pub repair_whole: bool,
}

#[derive(Debug, Default)]
pub struct RingState {
    order: VecDeque<i64>,
    members: HashMap<i64, u64>,
    in_flight: HashSet<i64>,
    parked: BTreeSet<(SystemTime, i64)>,
    parked_until: HashMap<i64, SystemTime>,
    epoch: u64,
    seeded: bool,
    seeding: bool,
    full_due: bool,
    window_due: bool,
    window_from: Option<SystemTime>,
    repair_seen: Option<SystemTime>,
    last_window: Option<Instant>,
    last_full: Option<Instant>,
    reconcile_every: Duration,
    wake_seen: u64,
    last_used: Option<Instant>,
}

impl RingState {
    /// Not planned for since `idle` before `now` (nor ever).
    pub fn idle(&self, now: Instant, idle: Duration) -> bool {
        self.last_used.is_none_or(|t| now.duration_since(t) >= idle)
    }

    /// Ids in the rotation (not in flight, not parked).
    pub fn rotation_len(&self) -> usize {
        self.order.len()
    }

    pub fn parked_len(&self) -> usize {
        self.parked.len()
    }

    /// Decides this POP's maintenance; a `Full` or `Window` answer marks the
    /// ring as being seeded until [`RingState::seed_done`] or
    /// [`RingState::seed_abandoned`].
    pub fn plan(&mut self, now: Instant, wake_gen: u64) -> Maintenance {
        self.last_used = Some(now);
        if self.seeding {
            return if self.seeded {
                Maintenance::None
            } else {
                Maintenance::WholeQueue
            };
        }
        let every = self.reconcile_every.max(RECONCILE_EVERY);
        let reconcile = self
            .last_full
            .is_none_or(|t| now.duration_since(t) >= every);
        if !self.seeded || self.full_due || reconcile {
            self.seeding = true;
            self.full_due = false;
            self.wake_seen = wake_gen;
            return Maintenance::Full;
        }
        let periodic = self
            .last_window
            .is_none_or(|t| now.duration_since(t) >= RESEED_EVERY);
        if self.window_due || wake_gen != self.wake_seen || periodic {
            self.seeding = true;
            self.window_due = false;
            self.wake_seen = wake_gen;
            let from = self.window_from.unwrap_or(SystemTime::UNIX_EPOCH);
            return Maintenance::Window {
                since: from.checked_sub(SKEW_MARGIN).unwrap_or(from),
                deferrable: !periodic,
            };
        }
        Maintenance::None
    }

    /// A seed that did not complete (error, cancelled): the next POP
    /// seeds again.
    pub fn seed_abandoned(&mut self, full: bool) {
        self.seeding = false;
        if full {
            self.full_due = true;
        } else {
            self.window_due = true;
        }
    }

    /// `took`: how long the seed's call took.
    pub fn seed_done(&mut self, full: bool, seed: Seeded, now: Instant, took: Duration) {
        self.seeding = false;
        self.last_window = Some(now);
        if full {
            self.last_full = Some(now);
            self.reconcile_every = took.saturating_mul(RECONCILE_SHARE);
        }
        for id in &seed.ids {
            self.add(*id, false);
        }
        if seed.window_from.is_some() {
            self.window_from = seed.window_from;
        }
        if seed.repair_at != self.repair_seen {
            // The first sight of the repair row is no news: the seed that
            // saw it already reflects the cursors it announced.
            let news = self.seeded && seed.repair_at.is_some();
            self.repair_seen = seed.repair_at;
            if news {
                if seed.repair_whole {
                    self.repaired();
                } else if let Some(id) = seed.repair_partition {
                    self.add(id, true);
                }
            }
        }
        self.seeded = true;
    }

    /// A deliberate cursor move of the whole queue (SEEK, DROP GROUP): its
    /// leases are released, so everything parked comes back, and the next
    /// POP reseeds fully.
    pub fn repaired(&mut self) {
        let parked: Vec<i64> = self.parked_until.keys().copied().collect();
        for id in parked {
            self.add(id, true);
        }
        self.full_due = true;
    }

    /// Adds an id at the back of the rotation (or refreshes its epoch when
    /// it is there or in flight). A parked id stays parked unless `force`.
    pub fn add(&mut self, id: i64, force: bool) {
        self.epoch += 1;
        if let Some(e) = self.members.get_mut(&id) {
            *e = self.epoch;
            return;
        }
        if let Some(until) = self.parked_until.get(&id).copied() {
            if !force {
                return;
            }
            self.parked.remove(&(until, id));
            self.parked_until.remove(&id);
        }
        self.members.insert(id, self.epoch);
        self.order.push_back(id);
    }

    /// A parked id whose holder is known to have let go (an ACK through
    /// this process): back into the rotation.
    pub fn release(&mut self, id: i64) {
        if self.parked_until.contains_key(&id) {
            self.add(id, true);
        }
    }

    /// Moves parked ids whose instant has passed back into the rotation.
    pub fn unpark_due(&mut self, now: SystemTime) {
        while let Some(&(until, id)) = self.parked.first() {
            if until + PARK_SLACK > now {
                break;
            }
            self.parked.pop_first();
            self.parked_until.remove(&id);
            self.epoch += 1;
            self.members.insert(id, self.epoch);
            self.order.push_back(id);
        }
    }

    /// Takes up to `k` ids from the front of the rotation.
    pub fn take(&mut self, k: usize) -> Option<Taken> {
        if self.order.is_empty() || k == 0 {
            return None;
        }
        let n = k.min(self.order.len());
        let ids: Vec<i64> = self.order.drain(..n).collect();
        self.in_flight.extend(ids.iter().copied());
        Some(Taken {
            ids,
            epoch: self.epoch,
        })
    }

    /// Takes up to `k` parked ids, soonest first, to look at them again
    /// (the rotation is empty: a holder may have let go through another
    /// process).
    pub fn take_parked(&mut self, k: usize) -> Option<Taken> {
        let mut ids = Vec::new();
        while ids.len() < k {
            let Some((_, id)) = self.parked.pop_first() else {
                break;
            };
            self.parked_until.remove(&id);
            self.epoch += 1;
            self.members.insert(id, self.epoch);
            self.in_flight.insert(id);
            ids.push(id);
        }
        (!ids.is_empty()).then_some(Taken {
            ids,
            epoch: self.epoch,
        })
    }

    /// Up to `k` ids other POPs hold in flight, to look at too when the
    /// rotation and the parked ids gave nothing: a POP takes more candidates
    /// than it claims, so without this a concurrent POP on a small ring
    /// would answer empty while one of them is claimable. The ids stay the
    /// other POPs' to settle.
    pub fn in_flight_ids(&self, k: usize) -> Vec<i64> {
        self.in_flight.iter().take(k).copied().collect()
    }

    /// Puts taken ids back at the front, in their order (the POP did not
    /// get to them).
    pub fn put_back(&mut self, taken: Taken) {
        for id in taken.ids.into_iter().rev() {
            self.in_flight.remove(&id);
            if self.members.contains_key(&id) {
                self.order.push_front(id);
            }
        }
    }

    /// Settles what a POP learnt of the ids it took. `judged` may name an
    /// id more than once (one row per claimed segment) and names none that
    /// was not reached. `keep` (the POP ran inside a transaction block,
    /// whose snapshot and rollback the ring cannot see): nothing is dropped
    /// or parked, every id goes back into the rotation.
    pub fn settle(&mut self, taken: Taken, judged: &[(i64, Judgement)], keep: bool) {
        let mut verdict: HashMap<i64, Judgement> = HashMap::with_capacity(judged.len());
        for &(id, j) in judged {
            verdict.entry(id).or_insert(j);
        }
        let mut unreached = Vec::new();
        for id in taken.ids {
            self.in_flight.remove(&id);
            let Some(&epoch) = self.members.get(&id) else {
                continue;
            };
            let refreshed = epoch > taken.epoch;
            match verdict.get(&id) {
                None => unreached.push(id),
                Some(Judgement::Empty) if !keep && !refreshed => {
                    self.members.remove(&id);
                }
                Some(Judgement::Waiting(Some(until))) if !keep && !refreshed => {
                    self.members.remove(&id);
                    self.parked.insert((*until, id));
                    self.parked_until.insert(id, *until);
                }
                Some(_) => self.order.push_back(id),
            }
        }
        for id in unreached.into_iter().rev() {
            self.order.push_front(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(ids: &[i64]) -> Seeded {
        Seeded {
            ids: ids.to_vec(),
            window_from: Some(SystemTime::now()),
            ..Seeded::default()
        }
    }

    fn seeded_ring(ids: &[i64]) -> RingState {
        let mut r = RingState::default();
        assert_eq!(r.plan(Instant::now(), 0), Maintenance::Full);
        r.seed_done(true, seed(ids), Instant::now(), Duration::ZERO);
        r
    }

    #[test]
    fn a_cold_ring_seeds_fully_once_and_others_claim_over_the_queue() {
        let mut r = RingState::default();
        let now = Instant::now();
        assert_eq!(r.plan(now, 0), Maintenance::Full);
        assert_eq!(r.plan(now, 0), Maintenance::WholeQueue);
        r.seed_done(true, seed(&[1, 2]), now, Duration::ZERO);
        assert_eq!(r.plan(now, 0), Maintenance::None);
        assert!(matches!(
            r.plan(now, 1),
            Maintenance::Window {
                deferrable: true,
                ..
            }
        ));
        r.seed_done(false, seed(&[]), now, Duration::ZERO);
        assert!(matches!(
            r.plan(now + RESEED_EVERY, 1),
            Maintenance::Window {
                deferrable: false,
                ..
            }
        ));
        r.seed_abandoned(false);
        assert!(matches!(r.plan(now, 1), Maintenance::Window { .. }));
        r.seed_done(false, seed(&[]), now, Duration::ZERO);
        assert_eq!(r.plan(now + RECONCILE_EVERY, 1), Maintenance::Full);
        // A full seed that took long stretches the reconcile period.
        r.seed_done(true, seed(&[]), now, Duration::from_secs(1));
        let later = now + RECONCILE_EVERY + Duration::from_secs(1);
        assert!(matches!(r.plan(later, 1), Maintenance::Window { .. }));
        r.seed_done(false, seed(&[]), later, Duration::ZERO);
        assert_eq!(
            r.plan(now + Duration::from_secs(u64::from(RECONCILE_SHARE)), 1),
            Maintenance::Full
        );
    }

    #[test]
    fn the_rotation_serves_the_front_and_sends_the_claimed_to_the_back() {
        let mut r = seeded_ring(&[1, 2, 3, 4]);
        let t = r.take(2).unwrap();
        assert_eq!(t.ids, vec![1, 2]);
        // 1 claimed, 2 not reached.
        r.settle(
            t,
            &[(1, Judgement::Claimed), (1, Judgement::Claimed)],
            false,
        );
        let t = r.take(10).unwrap();
        assert_eq!(t.ids, vec![2, 3, 4, 1]);
        r.put_back(t);
        assert_eq!(r.rotation_len(), 4);
    }

    #[test]
    fn empty_drops_unless_readded_meanwhile_and_waiting_parks() {
        let mut r = seeded_ring(&[1, 2, 3]);
        let t = r.take(3).unwrap();
        r.add(2, false); // a reseed raced with the POP
        let soon = SystemTime::now() + Duration::from_secs(3600);
        r.settle(
            t,
            &[
                (1, Judgement::Empty),
                (2, Judgement::Empty),
                (3, Judgement::Waiting(Some(soon))),
            ],
            false,
        );
        assert_eq!(r.rotation_len(), 1);
        assert_eq!(r.parked_len(), 1);
        // A windowed reseed does not unpark; a release does.
        r.add(3, false);
        assert_eq!(r.parked_len(), 1);
        r.release(3);
        assert_eq!((r.rotation_len(), r.parked_len()), (2, 0));
        let t = r.take(5).unwrap();
        assert_eq!(t.ids, vec![2, 3]);
        // In a transaction block nothing is dropped.
        r.settle(t, &[(2, Judgement::Empty), (3, Judgement::Empty)], true);
        assert_eq!(r.rotation_len(), 2);
    }

    #[test]
    fn parked_ids_come_back_when_due_or_when_looked_at_again() {
        let mut r = seeded_ring(&[1, 2]);
        let t = r.take(2).unwrap();
        let now = SystemTime::now();
        r.settle(
            t,
            &[
                (1, Judgement::Waiting(Some(now))),
                (2, Judgement::Waiting(Some(now + Duration::from_secs(60)))),
            ],
            false,
        );
        r.unpark_due(now + Duration::from_secs(1));
        let t = r.take(5).unwrap();
        assert_eq!(t.ids, vec![1]);
        r.settle(t, &[(1, Judgement::Empty)], false);
        r.unpark_due(now + Duration::from_secs(1));
        assert!(r.take(5).is_none());
        let t = r.take_parked(5).unwrap();
        assert_eq!(t.ids, vec![2]);
        r.settle(t, &[(2, Judgement::Locked)], false);
        assert_eq!(r.rotation_len(), 1);
    }

    #[test]
    fn ids_in_flight_can_be_looked_at_by_another_pop() {
        let mut r = seeded_ring(&[1, 2]);
        let t = r.take(5).unwrap();
        assert!(r.take(5).is_none());
        let mut shared = r.in_flight_ids(5);
        shared.sort();
        assert_eq!(shared, vec![1, 2]);
        r.settle(t, &[(1, Judgement::Claimed)], false);
        assert!(r.in_flight_ids(5).is_empty());
        assert_eq!(r.rotation_len(), 2);
    }

    #[test]
    fn a_repair_is_news_only_after_the_first_sight() {
        let mut r = RingState::default();
        r.plan(Instant::now(), 0);
        let at = SystemTime::now();
        let mut s = seed(&[1]);
        s.repair_at = Some(at);
        s.repair_whole = true;
        r.seed_done(true, s.clone(), Instant::now(), Duration::ZERO);
        assert_eq!(r.plan(Instant::now(), 0), Maintenance::None);
        // A new repair naming one partition: that one comes back at once.
        r.plan(Instant::now(), 1);
        let mut s2 = seed(&[]);
        s2.repair_at = Some(at + Duration::from_secs(1));
        s2.repair_partition = Some(7);
        r.seed_done(false, s2, Instant::now(), Duration::ZERO);
        assert_eq!(r.rotation_len(), 2);
        // A whole-queue one: a full reseed next.
        r.plan(Instant::now(), 2);
        let mut s3 = seed(&[]);
        s3.repair_at = Some(at + Duration::from_secs(2));
        s3.repair_whole = true;
        r.seed_done(false, s3, Instant::now(), Duration::ZERO);
        assert_eq!(r.plan(Instant::now(), 2), Maintenance::Full);
    }
}
