//! Lanes: the statements of one kind and key waiting for the next write,
//! and how long that write waits for its batch-mates.
//!
//! Clients that send a statement, wait for its answer and send the next
//! (a producer pushing one message at a time, a consumer popping in a loop)
//! come back right after each write. A writer that began its next write at
//! once would write only the statements that waited through the last one:
//! with C such clients the writes alternate between two halves of them,
//! about C/2 statements each, two commits where one would do. So before a
//! write the writer waits, at most `LINGER` after the last write ended, for
//! the sessions it answered that come back that fast.
//!
//! Which sessions do is measured, session by session: a session's next
//! statement in the same lane tells how long it took to come back. A
//! session is waited for once its returns have been fast (within `LINGER`)
//! for a while, and no longer once a return was late or a wait for it ran
//! out. Sessions that go elsewhere between two statements of a lane (a POP
//! followed by an ACK, a POP … WAIT with nothing to wait for) are never
//! waited for: a lone statement, or a lane whose sessions do not come back
//! fast, is written at once as before. A session is its task
//! (`tokio::task::Id`): each client connection is served by one task.

use super::{lock, MAX_FUSED_STATEMENTS};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio::task;
use tokio::time::{Duration, Instant};

/// The longest a write waits for sessions its last write answered (from
/// the end of that write; tokio's timers tick in milliseconds, so the wait
/// ends at the first tick after it), and what "come back fast" means.
const LINGER: Duration = Duration::from_micros(500);

/// A session is waited for once this many of its returns in a row were
/// fast.
const FAST_IN_A_ROW: u8 = 2;

/// A lane forgets a session that has sent nothing to it for this long.
const FORGET_AFTER: Duration = Duration::from_secs(1);

pub(super) struct Lane<J> {
    state: Mutex<State<J>>,
    arrived: Notify,
    linger: Duration,
}

struct State<J> {
    /// The statements waiting, each with its session.
    waiting: Vec<(J, Option<task::Id>)>,
    writing: bool,
    /// The sessions of the write in flight (`None`: none is).
    in_flight: Option<Vec<task::Id>>,
    /// The sessions of the last write that ended and have not sent another
    /// statement here since, and when it ended.
    answered: Vec<task::Id>,
    answered_at: Instant,
    /// Per session: its fast returns in a row, and when it last came.
    habits: HashMap<task::Id, (u8, Instant)>,
}

impl<J> State<J> {
    fn observe(&mut self, session: task::Id, fast: bool, now: Instant) {
        let habit = self.habits.entry(session).or_insert((0, now));
        habit.0 = if fast { habit.0.saturating_add(1) } else { 0 };
        habit.1 = now;
    }

    fn expected(&self, session: &task::Id) -> bool {
        self.habits
            .get(session)
            .is_some_and(|(fast, _)| *fast >= FAST_IN_A_ROW)
    }
}

/// The lanes of one kind of statement, one per key.
pub(super) struct Lanes<K, J> {
    lanes: Mutex<HashMap<K, Arc<Lane<J>>>>,
    linger: Duration,
}

impl<K, J> Default for Lanes<K, J> {
    fn default() -> Self {
        Lanes::with_linger(LINGER)
    }
}

impl<K, J> Lanes<K, J> {
    /// Lanes whose writes wait up to `linger` for their sessions.
    pub(super) fn with_linger(linger: Duration) -> Self {
        Lanes {
            lanes: Mutex::new(HashMap::new()),
            linger,
        }
    }
}

impl<K: Hash + Eq, J> Lanes<K, J> {
    /// Queues `job` in the lane of `key`; the lane is returned when no
    /// write of it is in flight, and the caller then leads the writes.
    pub(super) fn enqueue(&self, key: K, job: J) -> Option<Arc<Lane<J>>> {
        self.enqueue_from(key, job, true)
    }

    /// [`Lanes::enqueue`]; `session`: queued by the statement's session
    /// (whose returns the lane learns), not handed over by another task.
    pub(super) fn enqueue_from(&self, key: K, job: J, session: bool) -> Option<Arc<Lane<J>>> {
        let lane = lock(&self.lanes)
            .entry(key)
            .or_insert_with(|| Lane::new(self.linger))
            .clone();
        let session = if session { task::try_id() } else { None };
        let now = Instant::now();
        let lead = {
            let mut s = lock(&lane.state);
            if let Some(me) = session {
                // Back before its write was seen to end counts as fast.
                let flying = s
                    .in_flight
                    .as_ref()
                    .and_then(|f| f.iter().position(|a| *a == me));
                let fast = if let Some(at) = flying {
                    s.in_flight.as_mut().map(|f| f.swap_remove(at));
                    Some(true)
                } else if let Some(at) = s.answered.iter().position(|a| *a == me) {
                    s.answered.swap_remove(at);
                    Some(now.duration_since(s.answered_at) < lane.linger)
                } else {
                    None
                };
                if let Some(fast) = fast {
                    s.observe(me, fast, now);
                }
            }
            s.waiting.push((job, session));
            !std::mem::replace(&mut s.writing, true)
        };
        if !lead {
            lane.arrived.notify_one();
        }
        lead.then_some(lane)
    }
}

impl<J> Lane<J> {
    fn new(linger: Duration) -> Arc<Lane<J>> {
        Arc::new(Lane {
            state: Mutex::new(State {
                waiting: Vec::new(),
                writing: false,
                in_flight: None,
                answered: Vec::new(),
                answered_at: Instant::now(),
                habits: HashMap::new(),
            }),
            arrived: Notify::new(),
            linger,
        })
    }

    /// The next statements to write together, once the sessions expected
    /// back have come (or the linger after the last write ended); `None` when
    /// none is waiting, and the lane's writer then stops.
    pub(super) async fn next(&self) -> Option<Vec<J>> {
        let (target, expected, deadline) = {
            let mut s = lock(&self.state);
            // The write in flight, if any, has ended.
            if let Some(sessions) = s.in_flight.take() {
                s.answered = sessions;
                s.answered_at = Instant::now();
            }
            let ended = s.answered_at;
            if s.waiting.is_empty() {
                s.writing = false;
                return None;
            }
            // Sessions end without saying so.
            let now = Instant::now();
            if s.habits.len() > 64 {
                s.habits
                    .retain(|_, (_, seen)| now.duration_since(*seen) < FORGET_AFTER);
            }
            let expected: Vec<task::Id> = s
                .answered
                .iter()
                .filter(|a| s.expected(a))
                .copied()
                .collect();
            let target = (s.waiting.len() + expected.len()).min(MAX_FUSED_STATEMENTS);
            (target, expected, ended + self.linger)
        };
        let mut missed = false;
        loop {
            let arrived = self.arrived.notified();
            {
                let mut s = lock(&self.state);
                if s.waiting.len() >= target || missed {
                    if missed {
                        // Those expected that did not come are late (the
                        // ones that came left `answered`).
                        let now = Instant::now();
                        for session in &expected {
                            if s.answered.contains(session) {
                                s.observe(*session, false, now);
                            }
                        }
                    }
                    let n = s.waiting.len().min(MAX_FUSED_STATEMENTS);
                    let (batch, sessions): (Vec<J>, Vec<Option<task::Id>>) =
                        s.waiting.drain(..n).unzip();
                    s.in_flight = Some(sessions.into_iter().flatten().collect());
                    return Some(batch);
                }
            }
            missed = tokio::time::timeout_at(deadline, arrived).await.is_err();
        }
    }
}

#[cfg(test)]
mod tests {
    //! The lane alone, on tokio's paused clock: time moves only when every
    //! task waits on a timer, so the timings below are exact whatever the
    //! machine's load. Its timers tick in milliseconds, so the scale is
    //! ten times the real one: a write takes 10 ms, a client comes back in
    //! 1 ms, the lanes wait up to 3 ms.
    use super::*;
    use tokio::sync::oneshot;

    /// A statement: its session's number, and its answer.
    type Job = (usize, oneshot::Sender<()>);

    const WRITE: Duration = Duration::from_millis(10);
    const TEST_LINGER: Duration = Duration::from_millis(3);
    const MS: Duration = Duration::from_millis(1);

    struct Setup {
        lanes: Lanes<u8, Job>,
        /// Each write: when it began and its sessions.
        writes: Mutex<Vec<(Instant, Vec<usize>)>>,
    }

    impl Setup {
        fn new(linger: Duration) -> Arc<Setup> {
            Arc::new(Setup {
                lanes: Lanes {
                    lanes: Mutex::new(HashMap::new()),
                    linger,
                },
                writes: Mutex::new(Vec::new()),
            })
        }

        /// Queues one statement of `session` and waits for its write; the
        /// lead starts the writer, as the fusers do.
        async fn statement(self: &Arc<Self>, session: usize) {
            let (tx, rx) = oneshot::channel();
            if let Some(lane) = self.lanes.enqueue(0, (session, tx)) {
                let setup = self.clone();
                tokio::spawn(async move {
                    while let Some(jobs) = lane.next().await {
                        let sessions = jobs.iter().map(|(s, _)| *s).collect();
                        lock(&setup.writes).push((Instant::now(), sessions));
                        tokio::time::sleep(WRITE).await;
                        for (_, reply) in jobs {
                            let _ = reply.send(());
                        }
                    }
                });
            }
            rx.await.expect("the writer answers every statement");
        }

        /// Session `i` starts at `i` ms and sends `rounds[i]` statements,
        /// `pause(i)` after each answer; the writes made.
        async fn run(
            self: &Arc<Self>,
            rounds: &[usize],
            pause: fn(usize) -> Duration,
        ) -> Vec<(Instant, Vec<usize>)> {
            let mut sessions = Vec::new();
            for (i, &n) in rounds.iter().enumerate() {
                let setup = self.clone();
                sessions.push(tokio::spawn(async move {
                    tokio::time::sleep(MS * i as u32).await;
                    for _ in 0..n {
                        setup.statement(i).await;
                        tokio::time::sleep(pause(i)).await;
                    }
                }));
            }
            for s in sessions {
                s.await.expect("a session task");
            }
            let writes = std::mem::take(&mut *lock(&self.writes));
            let written: usize = writes.iter().map(|(_, s)| s.len()).sum();
            assert_eq!(
                written,
                rounds.iter().sum::<usize>(),
                "every statement written once"
            );
            writes
        }
    }

    fn sizes(writes: &[(Instant, Vec<usize>)]) -> Vec<usize> {
        writes.iter().map(|(_, s)| s.len()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn sessions_that_come_back_at_once_share_every_write() {
        // Without the wait the writes alternate between the session that
        // led the first write and the seven that queued behind it: 1, 7,
        // 1, 7, ….
        let writes = Setup::new(TEST_LINGER).run(&[40; 8], |_| MS).await;
        let sizes = sizes(&writes);
        // The first writes learn that the sessions come back; from then on
        // all eight are in each write.
        let settled = &sizes[sizes.len() / 2..sizes.len() - 1];
        assert!(settled.iter().all(|&n| n == 8), "write sizes {sizes:?}");
        assert!(
            writes.len() <= 60,
            "{} writes for 320 statements: {sizes:?}",
            writes.len()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sessions_that_come_back_slowly_are_not_waited_for() {
        // Each session pauses 5 ms (longer than the linger) after each
        // answer: every write begins the instant its lead arrives.
        let setup = Setup::new(TEST_LINGER);
        let writes = setup.run(&[20; 4], |_| MS * 5).await;
        let mut waits = Vec::new();
        for w in writes.windows(2) {
            let (previous, (at, _)) = (&w[0], &w[1]);
            // The lead of the next write is the first session back: 5 ms
            // after the previous write ended, or at once if one was queued.
            let ended = previous.0 + WRITE;
            let wait = at.duration_since(ended);
            if wait != Duration::ZERO && wait != MS * 5 {
                waits.push(wait);
            }
        }
        assert!(
            waits.is_empty(),
            "writes that waited: {waits:?} (sizes {:?})",
            sizes(&writes)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lane_whose_sessions_are_half_fast_rarely_waits_in_vain() {
        // Half the sessions come back in 1 ms, half in 5 ms (beyond the
        // 3 ms linger): a wait for the average number back would reach the
        // deadline about every other write.
        let writes = Setup::new(TEST_LINGER)
            .run(&[60; 8], |i| if i % 2 == 0 { MS } else { MS * 5 })
            .await;
        let in_vain = writes
            .windows(2)
            .filter(|w| w[1].0.duration_since(w[0].0) == WRITE + TEST_LINGER)
            .count();
        assert!(
            in_vain * 10 <= writes.len(),
            "{in_vain} of {} writes began at the deadline: {:?}",
            writes.len(),
            sizes(&writes)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_statement_is_written_at_once() {
        let start = Instant::now();
        let writes = Setup::new(TEST_LINGER).run(&[5], |_| MS).await;
        for (i, (at, _)) in writes.iter().enumerate() {
            assert_eq!(
                at.duration_since(start),
                (WRITE + MS) * i as u32,
                "write {i}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_that_stops_delays_one_write_by_at_most_the_linger() {
        // Eight sessions come back at once; the first stops after its 20th
        // statement. The write after that waits for it once, at most the
        // linger, and the others go on.
        let mut rounds = [40; 8];
        rounds[0] = 20;
        let writes = Setup::new(TEST_LINGER).run(&rounds, |_| MS).await;
        let gaps: Vec<Duration> = writes
            .windows(2)
            .map(|w| w[1].0.duration_since(w[0].0) - WRITE)
            .collect();
        assert!(
            gaps.iter().all(|g| *g <= TEST_LINGER),
            "gaps between writes {gaps:?}"
        );
        let waited = gaps.iter().filter(|g| **g > MS).count();
        assert!(
            waited <= 1,
            "{waited} writes waited longer than the clients' return: {gaps:?}"
        );
    }
}
