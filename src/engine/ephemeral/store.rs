//! One ephemeral queue's messages, in the memory of the queenwire that owns
//! it: pure state, no I/O, no clock of its own (every call is given `now`).
//!
//! A message has a sequence number (its `offset`), a partition and a
//! payload. Each consumer group has its own view: the messages it
//! acknowledged, the retries it counted, its leases. As for durable queues,
//! per (partition, group) one lease at a time, covering the batch one POP
//! took from that partition; a lease that expires counts a failure of each
//! message it held unacknowledged, and those come again with `retry_count +
//! 1`; past `retry_limit` a message is dropped for the group (ephemeral
//! queues have no DLQ: it is reported `dead_lettered` and kept nowhere). A
//! group first seen starts at the oldest message held (or, with SUBSCRIBE
//! FROM NOW, after the newest). A message leaves memory once every group
//! the queue has seen acknowledged it, when it is older than `ttl`, or when
//! `overflow = drop_oldest` makes room.
//!
//! The queue's time-based delivery options hold as for durable queues:
//! after `ACK … FAILED` (a retry) the partition is held back from that
//! group for `retry_delay`; a message is invisible to POP until it has been
//! held `delayed_processing`; a partition is invisible until its newest
//! message has been held `window_buffer`.
//!
//! Deduplication as for durable queues, in memory: a `transaction_id`
//! already pushed to the same partition within `dedup_window` (or earlier
//! in the same PUSH) is a duplicate of that message, which nothing is
//! stored for. The ids are remembered for the window whether or not their
//! messages are still held, at most [`MAX_REMEMBERED`] per queue (the
//! oldest forgotten first).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant, SystemTime};
use uuid::Uuid;

/// Transaction ids one queue remembers at most.
pub const MAX_REMEMBERED: usize = 1_000_000;

/// The declaration's limits and the queue options the store honours.
#[derive(Debug, Clone, PartialEq)]
pub struct Quota {
    pub max_length: Option<u64>,
    pub max_bytes: Option<u64>,
    /// `None`: messages do not expire.
    pub ttl: Option<Duration>,
    pub drop_oldest: bool,
    pub lease_time: Duration,
    pub retry_limit: i32,
    /// After a FAILED ack that retries: the partition is held back this long.
    pub retry_delay: Duration,
    /// A message is invisible to POP until held this long.
    pub delayed_processing: Duration,
    /// A partition is invisible to POP until its newest message is held
    /// this long.
    pub window_buffer: Duration,
    /// How long a transaction id is remembered (zero: only within one
    /// PUSH).
    pub dedup_window: Duration,
}

/// What became of one message of a PUSH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Stored as this sequence number.
    Queued(i64),
    /// A duplicate of the message stored as `seq` with id `id`.
    Duplicate { seq: i64, id: Uuid },
}

/// A message as PUSH hands it over.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    pub id: Uuid,
    pub partition: String,
    pub payload: String,
    pub transaction_id: Option<String>,
    pub trace_id: Option<String>,
    pub created_at_micros: i64,
}

#[derive(Debug, Clone)]
struct Message {
    seq: i64,
    msg: NewMessage,
    held_since: Instant,
}

/// One message a POP took.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivered {
    pub seq: i64,
    pub msg: NewMessage,
    pub retry_count: i32,
    /// `None` with AUTO ACK.
    pub lease: Option<(Uuid, SystemTime)>,
}

#[derive(Debug, Clone)]
struct Lease {
    token: Uuid,
    expires: Instant,
    expires_at: SystemTime,
    seqs: Vec<i64>,
}

#[derive(Debug, Default)]
struct Group {
    /// Messages below this are not the group's (SUBSCRIBE FROM NOW).
    from_seq: i64,
    acked: HashSet<i64>,
    retries: HashMap<i64, i32>,
    /// By partition.
    leases: HashMap<String, Lease>,
    /// Partitions held back (retry_delay) until then.
    blocked: HashMap<String, Instant>,
}

/// What a PUSH that does not fit gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow {
    pub reason: String,
}

#[derive(Debug)]
pub struct Store {
    pub quota: Quota,
    messages: VecDeque<Message>,
    bytes: u64,
    next_seq: i64,
    groups: HashMap<String, Group>,
    /// When each partition was last pushed to (kept while `window_buffer`
    /// is set).
    last_write: HashMap<String, Instant>,
    /// Transaction ids pushed (`partition \0 id`) within the dedup window:
    /// the message's sequence number, id, and when.
    remembered: HashMap<String, (i64, Uuid, Instant)>,
    /// The same keys in the order they were pushed, to forget them.
    remembered_order: VecDeque<(Instant, String)>,
}

/// Where a group first seen starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    Oldest,
    Newest,
}

impl Store {
    pub fn new(quota: Quota) -> Store {
        Store {
            quota,
            messages: VecDeque::new(),
            bytes: 0,
            next_seq: 0,
            groups: HashMap::new(),
            last_write: HashMap::new(),
            remembered: HashMap::new(),
            remembered_order: VecDeque::new(),
        }
    }

    /// Forgets transaction ids older than the window (and beyond the cap).
    fn forget(&mut self, now: Instant) {
        let window = self.quota.dedup_window;
        while let Some((at, _)) = self.remembered_order.front() {
            let old = now.duration_since(*at) >= window;
            if !old && self.remembered_order.len() <= MAX_REMEMBERED {
                break;
            }
            if let Some((at, key)) = self.remembered_order.pop_front() {
                if self.remembered.get(&key).is_some_and(|(_, _, t)| *t == at) {
                    self.remembered.remove(&key);
                }
            }
        }
    }

    /// (messages held, messages some group has not acknowledged).
    pub fn counts(&self) -> (i64, i64) {
        let pending = self
            .messages
            .iter()
            .filter(|m| {
                self.groups.is_empty()
                    || self
                        .groups
                        .values()
                        .any(|g| m.seq >= g.from_seq && !g.acked.contains(&m.seq))
            })
            .count();
        (self.messages.len() as i64, pending as i64)
    }

    fn expire(&mut self, now: Instant) {
        if let Some(ttl) = self.quota.ttl {
            while self
                .messages
                .front()
                .is_some_and(|m| now.duration_since(m.held_since) >= ttl)
            {
                self.drop_front();
            }
        }
    }

    fn drop_front(&mut self) {
        if let Some(m) = self.messages.pop_front() {
            self.bytes -= m.msg.payload.len() as u64;
            for g in self.groups.values_mut() {
                g.acked.remove(&m.seq);
                g.retries.remove(&m.seq);
            }
        }
    }

    /// Whether `count` more messages of `bytes` fit (after dropping the
    /// oldest, with `drop_oldest`); the reason when not.
    pub fn check_fit(&self, count: u64, bytes: u64) -> Result<(), Overflow> {
        let too_long = self.quota.max_length.is_some_and(|max| count > max);
        let too_big = self.quota.max_bytes.is_some_and(|max| bytes > max);
        if too_long || too_big {
            return Err(Overflow {
                reason: "the PUSH alone exceeds the queue's max_length or max_bytes".into(),
            });
        }
        if self.quota.drop_oldest {
            return Ok(());
        }
        let len = self.messages.len() as u64 + count;
        if self.quota.max_length.is_some_and(|max| len > max) {
            return Err(Overflow {
                reason: format!(
                    "ephemeral queue holds {} of max_length {} messages (overflow = reject)",
                    self.messages.len(),
                    self.quota.max_length.unwrap_or_default()
                ),
            });
        }
        if self
            .quota
            .max_bytes
            .is_some_and(|max| self.bytes + bytes > max)
        {
            return Err(Overflow {
                reason: format!(
                    "ephemeral queue holds {} of max_bytes {} bytes (overflow = reject)",
                    self.bytes,
                    self.quota.max_bytes.unwrap_or_default()
                ),
            });
        }
        Ok(())
    }

    /// Appends the messages that are not duplicates, all or none; what
    /// became of each, in order.
    pub fn push(
        &mut self,
        messages: Vec<NewMessage>,
        now: Instant,
    ) -> Result<Vec<Pushed>, Overflow> {
        self.expire(now);
        self.forget(now);
        // Each row's duplicate: of a remembered id, or of an earlier row.
        enum Of {
            Stored(i64, Uuid),
            Row(usize),
        }
        let mut first: HashMap<String, usize> = HashMap::new();
        let dups: Vec<Option<Of>> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let t = m.transaction_id.as_deref()?;
                let key = format!("{}\0{t}", m.partition);
                if let Some((seq, id, _)) = self.remembered.get(&key) {
                    return Some(Of::Stored(*seq, *id));
                }
                match first.get(&key) {
                    Some(j) => Some(Of::Row(*j)),
                    None => {
                        first.insert(key, i);
                        None
                    }
                }
            })
            .collect();
        let fresh = dups.iter().filter(|d| d.is_none()).count() as u64;
        let bytes: u64 = messages
            .iter()
            .zip(&dups)
            .filter(|(_, d)| d.is_none())
            .map(|(m, _)| m.payload.len() as u64)
            .sum();
        self.check_fit(fresh, bytes)?;
        let len = self.messages.len() as u64 + fresh;
        let mut excess_len = self
            .quota
            .max_length
            .map_or(0, |max| len.saturating_sub(max));
        while excess_len > 0
            || self
                .quota
                .max_bytes
                .is_some_and(|max| self.bytes + bytes > max)
        {
            self.drop_front();
            excess_len = excess_len.saturating_sub(1);
        }
        let window = self.quota.window_buffer;
        if window.is_zero() {
            self.last_write.clear();
        } else {
            // Bounded: a stamp older than the window hides nothing.
            if self.last_write.len() > 2 * self.messages.len() + 64 {
                self.last_write
                    .retain(|_, at| now.duration_since(*at) < window);
            }
            for m in messages.iter().zip(&dups).filter(|(_, d)| d.is_none()) {
                match self.last_write.get_mut(&m.0.partition) {
                    Some(at) => *at = now,
                    None => {
                        self.last_write.insert(m.0.partition.clone(), now);
                    }
                }
            }
        }
        let remember = !self.quota.dedup_window.is_zero();
        let mut out: Vec<Pushed> = Vec::with_capacity(messages.len());
        // The message each row names (its own, or the one it repeats): a
        // row repeats only an earlier one, so `named[j]` is there.
        let mut named: Vec<(i64, Uuid)> = Vec::with_capacity(messages.len());
        for (msg, dup) in messages.into_iter().zip(dups) {
            let (seq, id) = match dup {
                Some(Of::Stored(seq, id)) => (seq, id),
                Some(Of::Row(j)) => named[j],
                None => {
                    let (seq, id) = (self.next_seq, msg.id);
                    self.next_seq += 1;
                    self.bytes += msg.payload.len() as u64;
                    if let (true, Some(t)) = (remember, msg.transaction_id.as_deref()) {
                        let key = format!("{}\0{t}", msg.partition);
                        self.remembered.insert(key.clone(), (seq, id, now));
                        self.remembered_order.push_back((now, key));
                    }
                    self.messages.push_back(Message {
                        seq,
                        msg,
                        held_since: now,
                    });
                    named.push((seq, id));
                    out.push(Pushed::Queued(seq));
                    continue;
                }
            };
            named.push((seq, id));
            out.push(Pushed::Duplicate { seq, id });
        }
        self.forget(now);
        Ok(out)
    }

    /// Sequence numbers below this have left memory.
    fn oldest_seq(&self) -> i64 {
        self.messages.front().map_or(self.next_seq, |m| m.seq)
    }

    fn group(&mut self, name: &str, start: Start) -> &mut Group {
        let next = self.next_seq;
        let oldest = self.messages.front().map_or(next, |m| m.seq);
        self.groups
            .entry(name.to_string())
            .or_insert_with(|| Group {
                from_seq: match start {
                    Start::Oldest => oldest,
                    Start::Newest => next,
                },
                ..Group::default()
            })
    }

    /// Expired leases of the group: each unacknowledged message of one
    /// counts a failure; past the retry limit it is dropped for the group.
    fn settle_expired(&mut self, name: &str, now: Instant) {
        let retry_limit = self.quota.retry_limit;
        let oldest = self.oldest_seq();
        let Some(g) = self.groups.get_mut(name) else {
            return;
        };
        let expired: Vec<String> = g
            .leases
            .iter()
            .filter(|(_, l)| l.expires <= now)
            .map(|(p, _)| p.clone())
            .collect();
        for partition in expired {
            if let Some(lease) = g.leases.remove(&partition) {
                for seq in lease.seqs {
                    if seq < oldest || g.acked.contains(&seq) {
                        continue;
                    }
                    let r = g.retries.entry(seq).or_insert(0);
                    *r += 1;
                    if *r > retry_limit {
                        g.acked.insert(seq);
                    }
                }
            }
        }
    }

    /// Takes up to `limit` messages from up to `partitions` partitions for
    /// `group`, oldest first, each partition's in order.
    #[allow(clippy::too_many_arguments)]
    pub fn pop(
        &mut self,
        group: &str,
        start: Start,
        limit: usize,
        partitions: usize,
        lease: Option<Duration>,
        auto_ack: bool,
        now: Instant,
        wall: SystemTime,
    ) -> Vec<Delivered> {
        self.expire(now);
        self.group(group, start);
        self.settle_expired(group, now);
        let lease_time = lease.unwrap_or(self.quota.lease_time);
        let (delayed, window) = (self.quota.delayed_processing, self.quota.window_buffer);
        let last_write = &self.last_write;
        let Some(g) = self.groups.get_mut(group) else {
            return Vec::new();
        };
        g.blocked.retain(|_, until| *until > now);
        let mut out = Vec::new();
        let mut chosen: Vec<String> = Vec::new();
        let mut closed: HashSet<&str> = HashSet::new();
        for m in &self.messages {
            if out.len() >= limit {
                break;
            }
            // Messages are held in push order: the rest are younger still.
            if !delayed.is_zero() && now.duration_since(m.held_since) < delayed {
                break;
            }
            let p = m.msg.partition.as_str();
            if m.seq < g.from_seq
                || closed.contains(p)
                || g.leases.contains_key(p)
                || g.blocked.contains_key(p)
            {
                continue;
            }
            let windowed = !window.is_zero()
                && last_write
                    .get(p)
                    .is_some_and(|at| now.duration_since(*at) < window);
            if windowed {
                closed.insert(p);
                continue;
            }
            if g.acked.contains(&m.seq) {
                continue;
            }
            if !chosen.iter().any(|c| c == p) {
                if chosen.len() >= partitions {
                    closed.insert(p);
                    continue;
                }
                chosen.push(p.to_string());
            }
            out.push(Delivered {
                seq: m.seq,
                msg: m.msg.clone(),
                retry_count: g.retries.get(&m.seq).copied().unwrap_or(0),
                lease: None,
            });
        }
        if auto_ack {
            for d in &out {
                g.acked.insert(d.seq);
            }
        } else {
            for p in &chosen {
                let token = Uuid::from_u128(rand::random());
                let expires_at = wall + lease_time;
                let seqs: Vec<i64> = out
                    .iter()
                    .filter(|d| &d.msg.partition == p)
                    .map(|d| d.seq)
                    .collect();
                for d in out.iter_mut().filter(|d| &d.msg.partition == p) {
                    d.lease = Some((token, expires_at));
                }
                g.leases.insert(
                    p.clone(),
                    Lease {
                        token,
                        expires: now + lease_time,
                        expires_at,
                        seqs,
                    },
                );
            }
        }
        self.collect();
        out
    }

    /// ACK (or ACK … FAILED) of message `seq` under lease `token`:
    /// `acked`, `retry`, `dead_lettered` or `stale`.
    pub fn ack(
        &mut self,
        group: &str,
        seq: i64,
        token: Uuid,
        failed: bool,
        now: Instant,
    ) -> &'static str {
        self.settle_expired(group, now);
        let retry_limit = self.quota.retry_limit;
        let retry_delay = self.quota.retry_delay;
        let oldest = self.oldest_seq();
        let Some(g) = self.groups.get_mut(group) else {
            return "stale";
        };
        let Some((partition, lease)) = g
            .leases
            .iter()
            .find(|(_, l)| l.token == token && l.seqs.contains(&seq))
            .map(|(p, l)| (p.clone(), l.clone()))
        else {
            return "stale";
        };
        let status = if failed {
            // The lease ends: this message and the rest of the batch come
            // again (in order), this one with one more failure counted.
            g.leases.remove(&partition);
            let r = g.retries.entry(seq).or_insert(0);
            *r += 1;
            if *r > retry_limit {
                g.acked.insert(seq);
                "dead_lettered"
            } else {
                if !retry_delay.is_zero() {
                    g.blocked.insert(partition.clone(), now + retry_delay);
                }
                "retry"
            }
        } else {
            g.acked.insert(seq);
            // Messages that left memory (collected, ttl, drop_oldest) count
            // as done.
            if lease
                .seqs
                .iter()
                .all(|s| *s < oldest || g.acked.contains(s))
            {
                g.leases.remove(&partition);
            }
            "acked"
        };
        self.collect();
        status
    }

    /// RENEW: the lease's new expiry, `None` when it is not held.
    pub fn renew(
        &mut self,
        group: &str,
        seq: i64,
        token: Uuid,
        extend: Option<Duration>,
        now: Instant,
        wall: SystemTime,
    ) -> Option<SystemTime> {
        let extend = extend.unwrap_or(self.quota.lease_time);
        let g = self.groups.get_mut(group)?;
        let lease = g
            .leases
            .values_mut()
            .find(|l| l.token == token && l.seqs.contains(&seq) && l.expires > now)?;
        if now + extend > lease.expires {
            lease.expires = now + extend;
            lease.expires_at = wall + extend;
        }
        Some(lease.expires_at)
    }

    /// Drops, from the front, messages every group acknowledged.
    fn collect(&mut self) {
        if self.groups.is_empty() {
            return;
        }
        while let Some(front) = self.messages.front() {
            let seq = front.seq;
            let done = self
                .groups
                .values()
                .all(|g| seq < g.from_seq || g.acked.contains(&seq));
            if !done {
                break;
            }
            self.drop_front();
        }
    }
}

#[cfg(test)]
mod tests;
