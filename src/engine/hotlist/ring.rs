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
//!
//! A partition claimed here with a lease is parked until the lease ends (no
//! other POP can claim it before), and when the claim drained it (reached
//! its last offset) an ACK through this process leaves it parked but
//! *quiet*: not looked at again, since nothing is there, until a write
//! brings it back (a reseed's `add`) or its lease instant passes (a partial
//! ACK whose lease then expires: redelivery, as before). That saves the
//! consumer's next POP a call on the partition it has just emptied.

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
/// A ring's parked ids are looked at again (before their instant) at most
/// this often: that look is how a POP finds a lease released through
/// another queenwire, so this bounds how late it does (an ACK through this
/// one releases at once). Without the bound, every POP that found the ring
/// empty paid a round trip for ids it had just seen leased: eight
/// consumers of a one-partition queue, seven of them always empty, paid
/// one to two each per POP.
pub const PARKED_LOOK_EVERY: Duration = Duration::from_millis(10);
/// The same bound for ids leased by a claim through this process: their
/// ACK normally comes through here too and brings them back at once, so a
/// look only finds an ACK through another queenwire (a client whose pool
/// spans several), for which this is how late. Looked at every
/// [`PARKED_LOOK_EVERY`], four consumers at 200 msg/s spent a sixth of their
/// POP calls on partitions they held themselves.
pub const OWN_LEASE_LOOK_EVERY: Duration = Duration::from_millis(100);
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
    /// Claimed; with a lease until this instant (`None`: AUTO ACK).
    Claimed(Option<SystemTime>),
    /// Claimed for a shared group: other messages of it may be claimable
    /// at once by another POP, so it stays in the rotation.
    Shared,
    /// Claimed up to the partition's last offset (follows its `Claimed`).
    Drained,
    Empty,
    /// Pending, not claimable before this instant (lease, retry delay,
    /// window buffer, delayed processing); `None` when unknown.
    Waiting(Option<SystemTime>),
    /// Another POP holds it right now.
    Locked,
}

impl Judgement {
    /// `retry_at`: for `claimed`, the lease's expiry.
    pub fn from_state(state: &str, retry_at: Option<SystemTime>) -> Judgement {
        match state {
            "claimed" => Judgement::Claimed(retry_at),
            "shared" | "shared+" => Judgement::Shared,
            "drained" => Judgement::Drained,
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
    /// Of `in_flight`, the parked ids a POP is looking at again.
    parked_in_flight: HashSet<i64>,
    /// Of `in_flight`, ids a POP took alone: it claims the one if anyone
    /// can, so another POP does not look at it.
    solo_in_flight: HashSet<i64>,
    /// When a POP last took parked ids to look at them again.
    parked_looked: Option<Instant>,
    /// When a POP last took parked ids of [`RingState::own`] to look at.
    own_looked: Option<Instant>,
    parked: BTreeSet<(SystemTime, i64)>,
    parked_until: HashMap<i64, SystemTime>,
    /// Parked ids claimed here with a lease by a claim that drained them.
    drained: HashSet<i64>,
    /// Drained ids an ACK through this process has answered since: parked
    /// until their lease instant, but never looked at before it.
    quiet: HashSet<i64>,
    /// Parked ids (or parked ids looked at again) leased by a claim
    /// through this process: looked at every [`OWN_LEASE_LOOK_EVERY`].
    own: HashSet<i64>,
    /// A POP through this ring claimed for a shared group: a push into a
    /// partition parked as leased or waiting makes new messages claimable
    /// there at once, so [`RingState::fed`] brings it back.
    shared: bool,
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

    /// When the soonest parked id comes back (a lease ends, a retry delay
    /// or a window passes), on the database's clock.
    pub fn next_due(&self) -> Option<SystemTime> {
        self.parked.first().map(|&(until, _)| until + PARK_SLACK)
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

    /// A push through this process committed into these partitions.
    pub fn fed(&mut self, ids: &[i64]) {
        let force = self.shared;
        for id in ids {
            self.add(*id, force);
        }
    }

    /// Adds an id at the back of the rotation (or refreshes its epoch when
    /// it is there or in flight). A parked id stays parked unless `force`.
    pub fn add(&mut self, id: i64, force: bool) {
        self.epoch += 1;
        if let Some(e) = self.members.get_mut(&id) {
            *e = self.epoch;
            return;
        }
        if self.parked_until.contains_key(&id) {
            // Written to since: its ACK must bring it back, and a quiet
            // one (answered, so not leased any more) comes back now.
            self.drained.remove(&id);
            if !force && !self.quiet.contains(&id) {
                return;
            }
            self.unpark(id);
            self.own.remove(&id);
        }
        self.members.insert(id, self.epoch);
        self.order.push_back(id);
    }

    /// Takes a parked id out of the parked set (and its marks but `own`,
    /// which a look again keeps).
    fn unpark(&mut self, id: i64) {
        if let Some(until) = self.parked_until.remove(&id) {
            self.parked.remove(&(until, id));
        }
        self.drained.remove(&id);
        self.quiet.remove(&id);
    }

    /// Parks an id until `until`.
    fn park(&mut self, id: i64, until: SystemTime) {
        self.members.remove(&id);
        self.parked.insert((until, id));
        self.parked_until.insert(id, until);
    }

    /// A parked id whose holder is known to have let go (an ACK through
    /// this process; `plain`: not FAILED): back into the rotation, unless a
    /// plain ACK answers a claim that drained it, which leaves it quiet. A
    /// FAILED one always brings it back: its message comes again after the
    /// retry delay, not at the lease's end.
    pub fn release(&mut self, id: i64, plain: bool) {
        if !self.parked_until.contains_key(&id) {
            return;
        }
        if plain && (self.drained.remove(&id) || self.quiet.contains(&id)) {
            self.quiet.insert(id);
        } else {
            self.add(id, true);
        }
    }

    /// A parked id whose claim was given back undelivered (a held claim
    /// its session did not take): back at the front of the rotation, its
    /// turn unused. At the back, a consumer whose next POP comes after the
    /// hold would find the claim made for it on the next partition given
    /// back behind the others every time, and that partition never served.
    pub fn given_back(&mut self, id: i64) {
        if !self.parked_until.contains_key(&id) {
            return;
        }
        self.rejoin(id, true);
    }

    /// Moves parked ids whose instant has passed back into the rotation.
    pub fn unpark_due(&mut self, now: SystemTime) {
        while let Some(&(until, id)) = self.parked.first() {
            if until + PARK_SLACK > now {
                break;
            }
            self.rejoin(id, false);
        }
    }

    /// A parked id back into the rotation, at its front or its back.
    fn rejoin(&mut self, id: i64, front: bool) {
        self.unpark(id);
        self.own.remove(&id);
        self.epoch += 1;
        self.members.insert(id, self.epoch);
        if front {
            self.order.push_front(id);
        } else {
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
        if let [id] = ids[..] {
            self.solo_in_flight.insert(id);
        }
        Some(Taken {
            ids,
            epoch: self.epoch,
        })
    }

    /// Takes up to `k` parked ids, soonest first, to look at them again
    /// (the rotation is empty: a holder may have let go through another
    /// process).
    pub fn take_parked(&mut self, k: usize, now: Instant) -> Option<Taken> {
        let due = |last: Option<Instant>, every: Duration| {
            last.is_none_or(|t| now.saturating_duration_since(t) >= every)
        };
        let others_due = due(self.parked_looked, PARKED_LOOK_EVERY);
        let own_due = due(self.own_looked, OWN_LEASE_LOOK_EVERY);
        if self.parked.is_empty() || !(others_due || own_due) {
            return None;
        }
        // Quiet ids are not looked at: their claim drained them and an ACK
        // here answered it.
        let ids: Vec<i64> = self
            .parked
            .iter()
            .map(|&(_, id)| id)
            .filter(|id| {
                !self.quiet.contains(id)
                    && if self.own.contains(id) {
                        own_due
                    } else {
                        others_due
                    }
            })
            .take(k)
            .collect();
        if ids.is_empty() {
            return None;
        }
        for id in &ids {
            if self.own.contains(id) {
                self.own_looked = Some(now);
            } else {
                self.parked_looked = Some(now);
            }
        }
        for &id in &ids {
            self.unpark(id);
            self.epoch += 1;
            self.members.insert(id, self.epoch);
            self.in_flight.insert(id);
            self.parked_in_flight.insert(id);
        }
        Some(Taken {
            ids,
            epoch: self.epoch,
        })
    }

    /// Up to `k` ids other POPs hold in flight, to look at too when the
    /// rotation and the parked ids gave nothing: a POP takes more candidates
    /// than it claims, so without this a concurrent POP on a small ring
    /// would answer empty while one of them is claimable. The ids stay the
    /// other POPs' to settle. Parked ids another POP looks at again are not
    /// among them: they were last seen not claimable, and that POP claims
    /// them if they have become so; nor is an id a POP took alone, which
    /// that POP claims if it can be (in the e2e bench, four consumers at
    /// 200 msg/s, these looks were a fifth of all POP calls, most of them
    /// at such ids).
    pub fn in_flight_ids(&self, k: usize) -> Vec<i64> {
        self.in_flight
            .iter()
            .filter(|id| !self.parked_in_flight.contains(id) && !self.solo_in_flight.contains(id))
            .take(k)
            .copied()
            .collect()
    }

    /// Puts taken ids back at the front, in their order (the POP did not
    /// get to them).
    pub fn put_back(&mut self, taken: Taken) {
        for id in taken.ids.into_iter().rev() {
            self.in_flight.remove(&id);
            self.parked_in_flight.remove(&id);
            self.solo_in_flight.remove(&id);
            self.own.remove(&id);
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
        let mut drained = HashSet::new();
        for &(id, j) in judged {
            if j == Judgement::Drained {
                drained.insert(id);
            } else {
                self.shared |= j == Judgement::Shared;
                verdict.entry(id).or_insert(j);
            }
        }
        let mut unreached = Vec::new();
        for id in taken.ids {
            self.in_flight.remove(&id);
            self.parked_in_flight.remove(&id);
            self.solo_in_flight.remove(&id);
            let was_own = self.own.remove(&id);
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
                    self.park(id, *until);
                    if was_own {
                        self.own.insert(id);
                    }
                }
                // Leased to this POP: nobody claims it before the lease
                // ends or its ACK (here: `release`) lets go.
                Some(Judgement::Claimed(Some(until))) if !keep && !refreshed => {
                    self.park(id, *until);
                    self.own.insert(id);
                    if drained.contains(&id) {
                        self.drained.insert(id);
                    }
                }
                // AUTO ACK took everything there was.
                Some(Judgement::Claimed(None)) if !keep && !refreshed && drained.contains(&id) => {
                    self.members.remove(&id);
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
mod tests;
