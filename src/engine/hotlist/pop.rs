//! A POP through the hot list: seed the ring when it needs it, then hand
//! `log_pop_v2` a few candidates from its front, and settle what it says.
//! A POP that finds nothing claimable among the candidates looks further
//! (more candidates per round) until it has looked at every id the ring held
//! when it started, then once at the parked ones and at those other POPs
//! hold in flight, so an empty answer means what it meant before the hot
//! list: nothing this process knows of is claimable now.

use super::ring::{Judgement, Maintenance, Seeded, Taken};
use super::{Hotlist, Ring};
use crate::backend::call::Calls;
use crate::calls::queues::HotlistSeed;
use crate::engine::pop::{self, Claimed, PopPlan};
use crate::engine::receipt::ReceiptKey;
use crate::engine::ExecError;
use std::time::{Instant, SystemTime};
use uuid::Uuid;

/// Candidates of a POP's first round, beyond its PARTITIONS. Each costs
/// the procedure a probe (~15-20 µs), and the rotation's front is usually
/// claimable (leased ids are parked, empty ones gone), so the first round
/// is small; the rounds after it grow fourfold.
const FIRST_ROUND: usize = 4;
/// Candidates of one round at most (each round takes four times the last).
const MAX_ROUND: usize = 4096;
/// Partitions a windowed reseed returns at most (the next one goes on from
/// the last it returned).
const WINDOW_LIMIT: i32 = 10_000;

/// Marks an interrupted seed (error, or the statement's future dropped) so
/// the next POP seeds again.
struct Seeding<'a> {
    ring: &'a Ring,
    full: bool,
    done: bool,
}

impl Drop for Seeding<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.ring.lock().seed_abandoned(self.full);
        }
    }
}

/// Candidates in flight: put back if the call does not come back.
struct InFlight<'a> {
    ring: &'a Ring,
    taken: Option<Taken>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.taken.take() {
            self.ring.lock().put_back(t);
        }
    }
}

impl Hotlist {
    /// One attempt of a POP. `digest`: the queue key's wake-up digest.
    /// `in_block`: the POP runs inside a transaction block (or pipeline)
    /// whose snapshot and rollback the ring cannot see, so it drops and
    /// parks nothing. A fused plan ([`PopPlan::for_sessions`]) claims
    /// until it has a partition for each of its sessions or has looked as
    /// far as one POP would.
    pub async fn pop(
        &self,
        conn: &mut Calls<'_>,
        plan: &PopPlan,
        key: &ReceiptKey,
        tenant: Uuid,
        digest: &str,
        in_block: bool,
    ) -> Result<Claimed, ExecError> {
        if plan.named_partition() || plan.args().subscribe_at.is_some() {
            // One partition by name: the unique index finds it. A POP
            // that subscribes from a timestamp has PostgreSQL read its
            // text even when the ring knows the queue empty, so a text
            // that is no time is refused whatever the queue holds.
            return Ok(pop::pop_call(conn, plan, key, tenant, None).await?.0);
        }
        let ring = self.ring(tenant, &plan.queue, plan.group(), digest);
        let maintenance = ring.lock().plan(Instant::now(), ring.wake_gen());
        let deferred = match maintenance {
            Maintenance::None => None,
            Maintenance::WholeQueue => {
                return Ok(pop::pop_call(conn, plan, key, tenant, None).await?.0);
            }
            Maintenance::Full => {
                seed(conn, plan, tenant, &ring, None).await?;
                None
            }
            Maintenance::Window {
                since,
                deferrable: false,
            } => {
                seed(conn, plan, tenant, &ring, Some(since)).await?;
                None
            }
            // Only a wake-up asks for it: claim from the ring as it is
            // first, and catch up only if that finds nothing, so a busy
            // queue's POPs do not pay a reseed each (the periodic one still
            // finds new partitions within RESEED_EVERY).
            Maintenance::Window {
                since,
                deferrable: true,
            } => Some((
                since,
                Seeding {
                    ring: &ring,
                    full: false,
                    done: false,
                },
            )),
        };
        let got = claim(conn, plan, key, tenant, &ring, in_block, Claimed::default()).await?;
        if got.rows.is_empty() && in_block {
            // The block may have pushed into this queue itself: its pushes
            // are announced (and reach the ring) only when it commits, but
            // its own POP sees them, as on PostgreSQL. Nothing claimable in
            // the ring: the whole queue, in the block's snapshot.
            drop(deferred);
            return Ok(pop::pop_call(conn, plan, key, tenant, None).await?.0);
        }
        let Some((since, mut pending)) = deferred else {
            return Ok(got);
        };
        if got.partitions() >= plan.sessions() {
            // Dropping `pending` leaves the reseed due for the next POP.
            return Ok(got);
        }
        pending.done = true;
        drop(pending);
        seed(conn, plan, tenant, &ring, Some(since)).await?;
        claim(conn, plan, key, tenant, &ring, in_block, got).await
    }
}

/// Seeds the ring, fully (`since` `None`) or the window since `since`, for
/// a POP whose `plan` marked it as being seeded.
async fn seed(
    conn: &mut Calls<'_>,
    plan: &PopPlan,
    tenant: Uuid,
    ring: &Ring,
    since: Option<SystemTime>,
) -> Result<(), ExecError> {
    let mut seeding = Seeding {
        ring,
        full: since.is_none(),
        done: false,
    };
    let started = Instant::now();
    let rows = conn
        .run(&HotlistSeed {
            queue: &plan.queue,
            group: plan.group(),
            written_since: since,
            limit: WINDOW_LIMIT,
            tenant,
        })
        .await?;
    let seed = rows
        .into_iter()
        .next()
        .map(|r| Seeded {
            window_from: Some(r.written_to.unwrap_or(r.seen_at)),
            ids: r.partition_ids,
            repair_at: r.repair_at,
            repair_partition: r.repair_partition_id,
            repair_whole: r.repair_whole.unwrap_or(false),
        })
        .unwrap_or_default();
    seeding.done = true;
    let now = Instant::now();
    ring.lock()
        .seed_done(since.is_none(), seed, now, now - started);
    Ok(())
}

/// Claims among the ring's candidates, looking further until something is
/// claimed (a partition for each session of a fused plan, counting those
/// already `got`) or every id the rotation held is looked at, and once at
/// the parked ones.
async fn claim(
    conn: &mut Calls<'_>,
    plan: &PopPlan,
    key: &ReceiptKey,
    tenant: Uuid,
    ring: &Ring,
    in_block: bool,
    mut got: Claimed,
) -> Result<Claimed, ExecError> {
    let mut budget = {
        let mut state = ring.lock();
        state.unpark_due(SystemTime::now());
        state.rotation_len()
    };
    let mut round = FIRST_ROUND + plan.max_partitions();
    let mut parked_looked = false;
    loop {
        // A fused plan that claimed something and has looked at every id
        // the rotation holds stops there: the parked and in-flight looks
        // are for an answer that would be empty (its POPs left without a
        // partition get none, as POPs racing alone would).
        if !got.rows.is_empty() && (budget == 0 || ring.lock().rotation_len() == 0) {
            return Ok(got);
        }
        // What is still wanted: a fused plan's sessions without a partition.
        let rest;
        let call_plan = if plan.sessions() > 1 {
            rest = plan.for_sessions(plan.sessions() - got.partitions());
            &rest
        } else {
            plan
        };
        let taken = {
            let mut state = ring.lock();
            let from_rotation = if budget > 0 {
                state.take(round.min(budget))
            } else {
                None
            };
            match from_rotation {
                Some(t) => {
                    budget -= t.ids.len();
                    Some(t)
                }
                None if !parked_looked => {
                    parked_looked = true;
                    state.take_parked(round, Instant::now())
                }
                None => None,
            }
        };
        let Some(taken) = taken else {
            // Last, the candidates other POPs of this ring hold right now
            // (they take more than they claim); theirs to settle.
            let shared = ring.lock().in_flight_ids(round);
            if !shared.is_empty() {
                got.extend(
                    pop::pop_call(conn, call_plan, key, tenant, Some(&shared))
                        .await?
                        .0,
                );
            }
            return Ok(got);
        };
        let ids = taken.ids.clone();
        let mut flight = InFlight {
            ring,
            taken: Some(taken),
        };
        let (claimed, judged) = pop::pop_call(conn, call_plan, key, tenant, Some(&ids)).await?;
        if let Some(t) = flight.taken.take() {
            let judged: Vec<(i64, Judgement)> = judged
                .iter()
                .map(|(id, state, at)| (*id, Judgement::from_state(state, *at)))
                .collect();
            ring.lock().settle(t, &judged, in_block);
        }
        got.extend(claimed);
        if got.partitions() >= plan.sessions() {
            return Ok(got);
        }
        round = (round * 4).min(MAX_ROUND);
    }
}
