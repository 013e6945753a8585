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

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant, SystemTime};
use uuid::Uuid;

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

    /// Appends the messages, all or none; their sequence numbers in order.
    pub fn push(&mut self, messages: Vec<NewMessage>, now: Instant) -> Result<Vec<i64>, Overflow> {
        self.expire(now);
        let bytes: u64 = messages.iter().map(|m| m.payload.len() as u64).sum();
        self.check_fit(messages.len() as u64, bytes)?;
        let len = self.messages.len() as u64 + messages.len() as u64;
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
        let mut seqs = Vec::with_capacity(messages.len());
        for msg in messages {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.bytes += msg.payload.len() as u64;
            self.messages.push_back(Message {
                seq,
                msg,
                held_since: now,
            });
            seqs.push(seq);
        }
        Ok(seqs)
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
        let Some(g) = self.groups.get_mut(group) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut chosen: Vec<String> = Vec::new();
        let mut closed: HashSet<&str> = HashSet::new();
        for m in &self.messages {
            if out.len() >= limit {
                break;
            }
            let p = m.msg.partition.as_str();
            if m.seq < g.from_seq || closed.contains(p) || g.leases.contains_key(p) {
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
mod tests {
    use super::*;

    fn quota() -> Quota {
        Quota {
            max_length: Some(3),
            max_bytes: None,
            ttl: None,
            drop_oldest: false,
            lease_time: Duration::from_secs(30),
            retry_limit: 1,
        }
    }

    fn msg(partition: &str, payload: &str) -> NewMessage {
        NewMessage {
            id: Uuid::now_v7(),
            partition: partition.into(),
            payload: payload.into(),
            transaction_id: None,
            trace_id: None,
            created_at_micros: 0,
        }
    }

    fn pop(s: &mut Store, group: &str, limit: usize, now: Instant) -> Vec<Delivered> {
        s.pop(
            group,
            Start::Oldest,
            limit,
            1,
            None,
            false,
            now,
            SystemTime::now(),
        )
    }

    #[test]
    fn reject_refuses_a_push_that_does_not_fit_and_changes_nothing() {
        let mut s = Store::new(quota());
        let now = Instant::now();
        s.push(vec![msg("p", "1"), msg("p", "2")], now).unwrap();
        assert!(s.push(vec![msg("p", "3"), msg("p", "4")], now).is_err());
        assert_eq!(s.counts(), (2, 2));
        s.push(vec![msg("p", "3")], now).unwrap();
        assert_eq!(s.counts(), (3, 3));
    }

    #[test]
    fn drop_oldest_makes_room() {
        let mut s = Store::new(Quota {
            drop_oldest: true,
            ..quota()
        });
        let now = Instant::now();
        s.push(vec![msg("p", "1"), msg("p", "2"), msg("p", "3")], now)
            .unwrap();
        s.push(vec![msg("p", "4"), msg("p", "5")], now).unwrap();
        let got: Vec<String> = pop(&mut s, "g", 10, now)
            .into_iter()
            .map(|d| d.msg.payload)
            .collect();
        assert_eq!(got, ["3", "4", "5"]);
    }

    #[test]
    fn ttl_expires_messages() {
        let mut s = Store::new(Quota {
            ttl: Some(Duration::from_secs(5)),
            ..quota()
        });
        let t0 = Instant::now();
        s.push(vec![msg("p", "old")], t0).unwrap();
        s.push(vec![msg("p", "new")], t0 + Duration::from_secs(3))
            .unwrap();
        let got = pop(&mut s, "g", 10, t0 + Duration::from_secs(6));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].msg.payload, "new");
    }

    #[test]
    fn a_partition_is_leased_to_one_consumer_and_an_expired_lease_redelivers() {
        let mut s = Store::new(quota());
        let t0 = Instant::now();
        s.push(vec![msg("a", "1"), msg("a", "2"), msg("b", "3")], t0)
            .unwrap();
        let first = pop(&mut s, "g", 10, t0);
        assert_eq!(first.len(), 2);
        let second = pop(&mut s, "g", 10, t0);
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].msg.partition, "b");
        assert!(pop(&mut s, "g", 10, t0).is_empty());
        let later = t0 + Duration::from_secs(31);
        let again = pop(&mut s, "g", 10, later);
        assert_eq!(again.len(), 2);
        assert_eq!(again[0].retry_count, 1);
        // Past retry_limit (1) a's messages are dropped for the group; b's,
        // failed once, comes again.
        let rest = pop(&mut s, "g", 10, later + Duration::from_secs(62));
        assert_eq!(rest.len(), 1, "{rest:?}");
        assert_eq!(
            (rest[0].msg.partition.as_str(), rest[0].retry_count),
            ("b", 1)
        );
    }

    #[test]
    fn ack_releases_and_collects_and_a_wrong_token_is_stale() {
        let mut s = Store::new(quota());
        let now = Instant::now();
        s.push(vec![msg("a", "1")], now).unwrap();
        let d = pop(&mut s, "g", 1, now);
        let (token, _) = d[0].lease.unwrap();
        assert_eq!(s.ack("g", d[0].seq, Uuid::now_v7(), false, now), "stale");
        assert_eq!(s.ack("g", d[0].seq, token, false, now), "acked");
        assert_eq!(s.counts(), (0, 0));
        assert_eq!(s.ack("g", d[0].seq, token, false, now), "stale");
    }

    #[test]
    fn acking_a_batch_one_by_one_releases_its_partition() {
        let mut s = Store::new(quota());
        let now = Instant::now();
        s.push(vec![msg("a", "1"), msg("a", "2")], now).unwrap();
        let d = pop(&mut s, "g", 10, now);
        for m in &d {
            assert_eq!(s.ack("g", m.seq, m.lease.unwrap().0, false, now), "acked");
        }
        s.push(vec![msg("a", "3")], now).unwrap();
        let next = pop(&mut s, "g", 10, now);
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].msg.payload, "3");
    }

    #[test]
    fn failed_acks_retry_then_dead_letter() {
        let mut s = Store::new(quota());
        let now = Instant::now();
        s.push(vec![msg("a", "1")], now).unwrap();
        let d = pop(&mut s, "g", 1, now);
        assert_eq!(
            s.ack("g", d[0].seq, d[0].lease.unwrap().0, true, now),
            "retry"
        );
        let d = pop(&mut s, "g", 1, now);
        assert_eq!(d[0].retry_count, 1);
        assert_eq!(
            s.ack("g", d[0].seq, d[0].lease.unwrap().0, true, now),
            "dead_lettered"
        );
        assert!(pop(&mut s, "g", 1, now).is_empty());
    }

    #[test]
    fn groups_fan_out_and_now_starts_after_the_newest() {
        let mut s = Store::new(quota());
        let now = Instant::now();
        s.push(vec![msg("a", "1")], now).unwrap();
        assert_eq!(pop(&mut s, "early", 5, now).len(), 1);
        let late = s.pop(
            "late",
            Start::Newest,
            5,
            1,
            None,
            true,
            now,
            SystemTime::now(),
        );
        assert!(late.is_empty());
        s.push(vec![msg("a", "2")], now).unwrap();
        let late = s.pop(
            "late",
            Start::Newest,
            5,
            1,
            None,
            true,
            now,
            SystemTime::now(),
        );
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].msg.payload, "2");
    }
}
