//! Per-queue counters behind a bounded map: the first `cap` distinct
//! (tenant, queue) pairs get series of their own, every later one counts in
//! the shared `other` bucket, so a million queues cost `cap` entries.
//!
//! The map is sharded by a hash of the name, each shard under an `RwLock`;
//! a counter bump is one read lock, two hash lookups without allocating
//! (tenant, then the interned name) and a relaxed addition. A new queue
//! takes one shard's write lock once.
//!
//! ACK's receipts name partitions, not queues: the partitions POP hands
//! out are remembered (bounded as well) so that ACK results count on the
//! queue they belong to; an ACK of a partition this process never popped
//! from counts in `other`.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use uuid::Uuid;

const SHARDS: usize = 16;
/// Partitions remembered for ACK, per queue allowed (bounded in total).
const PARTITIONS_PER_QUEUE: usize = 64;

/// The label values of the overflow bucket: no tenant is named `other`
/// (tenants are UUIDs), so it cannot collide with a real queue.
pub const OTHER: &str = "other";

/// The counters of one queue (or of the `other` bucket).
#[derive(Default)]
pub struct QueueCounters {
    pub tenant: Option<Uuid>,
    pub name: Box<str>,
    pub pushed: AtomicU64,
    pub popped: AtomicU64,
    pub acked: AtomicU64,
    /// ACK … FAILED results: retried or dead-lettered.
    pub failed: AtomicU64,
    pub dead_lettered: AtomicU64,
}

impl QueueCounters {
    pub fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }
}

type Shard = RwLock<HashMap<Uuid, HashMap<Box<str>, Arc<QueueCounters>>>>;

pub struct QueueTable {
    shards: Vec<Shard>,
    hasher: std::collections::hash_map::RandomState,
    len: AtomicUsize,
    cap: usize,
    other: Arc<QueueCounters>,
    partitions: RwLock<HashMap<i64, Arc<QueueCounters>>>,
}

/// One series, as exposition reads it.
pub struct QueueSample {
    pub tenant: String,
    pub queue: String,
    pub pushed: u64,
    pub popped: u64,
    pub acked: u64,
    pub failed: u64,
    pub dead_lettered: u64,
}

impl QueueTable {
    pub fn new(cap: usize) -> QueueTable {
        QueueTable {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            hasher: Default::default(),
            len: AtomicUsize::new(0),
            cap,
            other: Arc::new(QueueCounters {
                name: OTHER.into(),
                ..QueueCounters::default()
            }),
            partitions: RwLock::default(),
        }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Distinct queues with series of their own.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, name: &str) -> &Shard {
        &self.shards[(self.hasher.hash_one(name) as usize) % SHARDS]
    }

    /// The counters of (tenant, queue): its own while under the cap, else
    /// the `other` bucket's.
    pub fn get(&self, tenant: Uuid, queue: &str) -> Arc<QueueCounters> {
        let shard = self.shard(queue);
        {
            let map = match shard.read() {
                Ok(m) => m,
                Err(p) => p.into_inner(),
            };
            if let Some(c) = map.get(&tenant).and_then(|t| t.get(queue)) {
                return c.clone();
            }
        }
        if self.len() >= self.cap {
            return self.other.clone();
        }
        let mut map = match shard.write() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let queues = map.entry(tenant).or_default();
        if let Some(c) = queues.get(queue) {
            return c.clone();
        }
        // Reserve a place under the cap (another shard may race for it).
        if self
            .len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .is_err()
        {
            return self.other.clone();
        }
        let c = Arc::new(QueueCounters {
            tenant: Some(tenant),
            name: queue.into(),
            ..QueueCounters::default()
        });
        queues.insert(queue.into(), c.clone());
        c
    }

    /// POP handed out messages of `partition` of this queue.
    pub fn learn_partition(&self, partition: i64, counters: &Arc<QueueCounters>) {
        // An unknown partition counts in `other` anyway.
        if Arc::ptr_eq(counters, &self.other) {
            return;
        }
        {
            let map = match self.partitions.read() {
                Ok(m) => m,
                Err(p) => p.into_inner(),
            };
            if map.contains_key(&partition) {
                return;
            }
            if map.len() >= self.cap.max(1).saturating_mul(PARTITIONS_PER_QUEUE) {
                return;
            }
        }
        if let Ok(mut map) = self.partitions.write() {
            map.entry(partition).or_insert_with(|| counters.clone());
        }
    }

    /// The counters an ACK of `partition` counts on.
    pub fn of_partition(&self, partition: Option<i64>) -> Arc<QueueCounters> {
        let map = match self.partitions.read() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        partition
            .and_then(|p| map.get(&p).cloned())
            .unwrap_or_else(|| self.other.clone())
    }

    /// Every series (the `other` bucket last, once it counted anything).
    pub fn samples(&self) -> Vec<QueueSample> {
        let mut out = Vec::with_capacity(self.len() + 1);
        let sample = |c: &QueueCounters, tenant: String| QueueSample {
            tenant,
            queue: c.name.to_string(),
            pushed: c.pushed.load(Ordering::Relaxed),
            popped: c.popped.load(Ordering::Relaxed),
            acked: c.acked.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            dead_lettered: c.dead_lettered.load(Ordering::Relaxed),
        };
        for shard in &self.shards {
            let map = match shard.read() {
                Ok(m) => m,
                Err(p) => p.into_inner(),
            };
            for (tenant, queues) in map.iter() {
                for c in queues.values() {
                    out.push(sample(c, tenant.to_string()));
                }
            }
        }
        out.sort_by(|a, b| (&a.tenant, &a.queue).cmp(&(&b.tenant, &b.queue)));
        let other = sample(&self.other, OTHER.to_string());
        if other.pushed + other.popped + other.acked + other.failed + other.dead_lettered > 0 {
            out.push(other);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_beyond_the_cap_share_the_other_bucket() {
        let t = QueueTable::new(3);
        let tenant = Uuid::from_u128(7);
        for i in 0..10_000 {
            let c = t.get(tenant, &format!("q{i}"));
            QueueCounters::add(&c.pushed, 1);
        }
        assert_eq!(t.len(), 3);
        let samples = t.samples();
        assert_eq!(samples.len(), 4, "three queues and other");
        let other = samples.last().unwrap();
        assert_eq!(other.queue, OTHER);
        assert_eq!(other.tenant, OTHER);
        assert_eq!(other.pushed, 10_000 - 3);
        // A queue that got its own series keeps it.
        let first = &samples[0].queue;
        QueueCounters::add(&t.get(tenant, first).pushed, 5);
        assert_eq!(t.samples()[0].pushed, 6);
    }

    #[test]
    fn a_million_queues_cost_the_cap() {
        let t = QueueTable::new(1000);
        let mut name = String::new();
        for i in 0..1_000_000u32 {
            use std::fmt::Write;
            name.clear();
            let _ = write!(name, "queue-{i}");
            let c = t.get(Uuid::from_u128(u128::from(i % 7)), &name);
            QueueCounters::add(&c.pushed, 1);
            t.learn_partition(i64::from(i), &c);
        }
        assert_eq!(t.len(), 1000);
        let samples = t.samples();
        assert_eq!(samples.len(), 1001);
        assert_eq!(samples.iter().map(|s| s.pushed).sum::<u64>(), 1_000_000);
        assert_eq!(samples.last().unwrap().pushed, 999_000);
        let shards: usize = t
            .shards
            .iter()
            .map(|s| s.read().unwrap().values().map(HashMap::len).sum::<usize>())
            .sum();
        assert_eq!(shards, 1000, "no entry for a queue past the cap");
        // Only the partitions of queues with series of their own.
        assert_eq!(t.partitions.read().unwrap().len(), 1000);
    }

    #[test]
    fn the_same_name_in_two_tenants_is_two_series() {
        let t = QueueTable::new(10);
        QueueCounters::add(&t.get(Uuid::from_u128(1), "q").popped, 1);
        QueueCounters::add(&t.get(Uuid::from_u128(2), "q").popped, 2);
        QueueCounters::add(&t.get(Uuid::from_u128(1), "q").popped, 1);
        let s = t.samples();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].popped, s[1].popped), (2, 2));
    }

    #[test]
    fn concurrent_first_uses_never_pass_the_cap() {
        let t = Arc::new(QueueTable::new(50));
        let threads: Vec<_> = (0..8)
            .map(|n| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        QueueCounters::add(&t.get(Uuid::nil(), &format!("q{n}-{i}")).pushed, 1);
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        assert_eq!(t.len(), 50);
        let total: u64 = t.samples().iter().map(|s| s.pushed).sum();
        assert_eq!(total, 8000, "nothing lost to the race");
    }

    #[test]
    fn acks_count_on_the_queue_that_popped_the_partition() {
        let t = QueueTable::new(10);
        let q = t.get(Uuid::nil(), "q");
        t.learn_partition(42, &q);
        QueueCounters::add(&t.of_partition(Some(42)).acked, 1);
        QueueCounters::add(&t.of_partition(Some(43)).acked, 1);
        QueueCounters::add(&t.of_partition(None).acked, 1);
        let s = t.samples();
        assert_eq!(s[0].acked, 1);
        assert_eq!(s.last().unwrap().queue, OTHER);
        assert_eq!(s.last().unwrap().acked, 2);
    }
}
