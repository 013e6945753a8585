//! The partition ids the engine's fused pushes were answered with, so that
//! a push into partitions it has written to before names them by id
//! (`log_push_ids_v1`) instead of having each one found by name and the
//! call checked with aggregates over its arrays (`log_push_many_v1`).
//!
//! The cache is a hint, never the truth: `log_push_ids_v1` checks every id
//! against its partition's queue and name under the queue's key and, when
//! one is wrong or the queue is not as the fast path needs it, writes
//! nothing and answers `stale`. The queue's ids are then forgotten and the
//! queue kept off the fast path for a while (a queue with a size limit or a
//! dedup window would otherwise pay a wasted call on every write).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// At most this many ids are kept; past it the cache starts again empty
/// (about 80 bytes an entry).
const MAX_IDS: usize = 50_000;

/// How long a queue whose ids went stale is written by name.
const SHUN_FOR: Duration = Duration::from_secs(10);

/// tenant → queue → partition name → id, and the queues kept off.
#[derive(Default)]
pub struct Placed {
    inner: Mutex<Inner>,
}

type PerQueue<V> = HashMap<Uuid, HashMap<String, V>>;

#[derive(Default)]
struct Inner {
    ids: PerQueue<HashMap<String, i64>>,
    len: usize,
    shunned: PerQueue<Instant>,
}

impl Placed {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ids of `partitions` of `queue`, when every one is known.
    pub fn ids<'a>(
        &self,
        tenant: Uuid,
        queue: &str,
        partitions: impl IntoIterator<Item = &'a str>,
    ) -> Option<Vec<i64>> {
        let mut inner = self.lock();
        if let Some(shunned) = inner.shunned.get_mut(&tenant) {
            if let Some(until) = shunned.get(queue) {
                if Instant::now() < *until {
                    return None;
                }
                shunned.remove(queue);
            }
        }
        let known = inner.ids.get(&tenant)?.get(queue)?;
        partitions
            .into_iter()
            .map(|name| known.get(name).copied())
            .collect()
    }

    /// Remembers the ids of partitions: (queue, partition, id).
    pub fn learn<'a>(
        &self,
        tenant: Uuid,
        placed: impl IntoIterator<Item = (&'a str, &'a str, i64)>,
    ) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let shunned = inner.shunned.get(&tenant);
        for (queue, partition, id) in placed {
            if shunned.is_some_and(|s| s.contains_key(queue)) {
                continue;
            }
            let known = inner
                .ids
                .get(&tenant)
                .and_then(|q| q.get(queue))
                .and_then(|p| p.get(partition));
            if known == Some(&id) {
                continue;
            }
            if inner.len >= MAX_IDS {
                inner.ids.clear();
                inner.len = 0;
            }
            let names = inner
                .ids
                .entry(tenant)
                .or_default()
                .entry(queue.to_string())
                .or_default();
            if names.insert(partition.to_string(), id).is_none() {
                inner.len += 1;
            }
        }
    }

    /// The fast path refused `queue`: its ids are forgotten and it is
    /// written by name for a while.
    pub fn stale(&self, tenant: Uuid, queue: &str) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        if let Some(names) = inner.ids.get_mut(&tenant).and_then(|q| q.remove(queue)) {
            inner.len -= names.len();
        }
        let now = Instant::now();
        for shunned in inner.shunned.values_mut() {
            shunned.retain(|_, until| *until > now);
        }
        inner.shunned.retain(|_, s| !s.is_empty());
        inner
            .shunned
            .entry(tenant)
            .or_default()
            .insert(queue.to_string(), now + SHUN_FOR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_known_only_all_together_and_forgotten_when_stale() {
        let placed = Placed::default();
        let t = Uuid::nil();
        placed.learn(t, [("q", "a", 1), ("q", "b", 2)]);
        assert_eq!(placed.ids(t, "q", ["b", "a"]), Some(vec![2, 1]));
        assert_eq!(placed.ids(t, "q", ["a", "c"]), None);
        assert_eq!(placed.ids(t, "other", ["a"]), None);
        placed.stale(t, "q");
        assert_eq!(placed.ids(t, "q", ["a"]), None);
        // Kept off for a while: what is answered meanwhile is not learned.
        placed.learn(t, [("q", "a", 1)]);
        assert_eq!(placed.ids(t, "q", ["a"]), None);
        assert_eq!(placed.lock().len, 0);
    }

    #[test]
    fn the_cache_starts_again_past_its_bound() {
        let placed = Placed::default();
        let t = Uuid::nil();
        let names: Vec<String> = (0..MAX_IDS).map(|i| i.to_string()).collect();
        placed.learn(t, names.iter().zip(0..).map(|(n, i)| ("q", n.as_str(), i)));
        assert_eq!(placed.lock().len, MAX_IDS);
        placed.learn(t, [("q", "one more", 0)]);
        assert_eq!(placed.lock().len, 1);
        assert_eq!(placed.ids(t, "q", ["one more"]), Some(vec![0]));
    }
}
