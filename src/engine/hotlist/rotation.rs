//! Wildcard POPs' turns among the queues of one priority
//! (`engine/wildcard.rs`): per (tenant, namespace, task, group) and per
//! priority, the queue the last wildcard POP through this process was
//! served from, so the next one starts after it.

use crate::calls::namespace::NamespaceQueue;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// A rotation no POP used for this long is forgotten.
const ROTATION_IDLE: Duration = Duration::from_secs(600);

/// (tenant, namespace, task, group).
pub type RotationKey = (Uuid, String, Option<String>, String);

/// When a rotation was last used, and per priority the queue last served.
type Turns = (Instant, HashMap<i32, String>);

/// Per (tenant, namespace, task, group): per priority, the queue the last
/// wildcard POP was served from.
#[derive(Default)]
pub struct Rotations {
    last: Mutex<HashMap<RotationKey, Turns>>,
}

impl Rotations {
    fn lock(&self) -> MutexGuard<'_, HashMap<RotationKey, Turns>> {
        match self.last.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The order to look at `queues` in (priority descending, then name, as
    /// the procedure returns them): within each priority, starting after
    /// the queue last served.
    pub fn order<'q>(&self, key: &RotationKey, queues: &'q [NamespaceQueue]) -> Vec<&'q str> {
        let mut map = self.lock();
        let entry = map
            .entry(key.clone())
            .or_insert_with(|| (Instant::now(), HashMap::new()));
        entry.0 = Instant::now();
        rotate(queues, &entry.1)
    }

    /// The POP was served from `queue` (of priority `priority`).
    pub fn served(&self, key: &RotationKey, priority: i32, queue: &str) {
        let mut map = self.lock();
        let entry = map
            .entry(key.clone())
            .or_insert_with(|| (Instant::now(), HashMap::new()));
        entry.1.insert(priority, queue.to_string());
    }

    /// Forgets rotations idle for [`ROTATION_IDLE`].
    pub fn prune(&self) {
        let now = Instant::now();
        self.lock()
            .retain(|_, (used, _)| now.duration_since(*used) < ROTATION_IDLE);
    }
}

/// `queues` in priority order, each priority's run rotated to start at
/// the first name after the one last served there.
fn rotate<'q>(queues: &'q [NamespaceQueue], last: &HashMap<i32, String>) -> Vec<&'q str> {
    let mut out = Vec::with_capacity(queues.len());
    let mut start = 0;
    while start < queues.len() {
        let priority = queues[start].priority;
        let end = queues[start..]
            .iter()
            .position(|q| q.priority != priority)
            .map_or(queues.len(), |n| start + n);
        let tier = &queues[start..end];
        let first = last
            .get(&priority)
            .and_then(|served| {
                tier.iter()
                    .position(|q| q.queue_name.as_str() > served.as_str())
            })
            .unwrap_or(0);
        out.extend(tier[first..].iter().map(|q| q.queue_name.as_str()));
        out.extend(tier[..first].iter().map(|q| q.queue_name.as_str()));
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(list: &[(&str, i32)]) -> Vec<NamespaceQueue> {
        list.iter()
            .map(|(n, p)| NamespaceQueue {
                queue_name: n.to_string(),
                priority: *p,
                ephemeral: false,
            })
            .collect()
    }

    #[test]
    fn higher_priorities_come_first_and_each_priority_rotates() {
        let qs = queues(&[("hi", 9), ("a", 0), ("b", 0), ("c", 0), ("z", -1)]);
        let mut last = HashMap::new();
        assert_eq!(rotate(&qs, &last), ["hi", "a", "b", "c", "z"]);
        last.insert(0, "a".to_string());
        assert_eq!(rotate(&qs, &last), ["hi", "b", "c", "a", "z"]);
        last.insert(0, "c".to_string());
        assert_eq!(rotate(&qs, &last), ["hi", "a", "b", "c", "z"]);
        // A served queue that left the namespace: the next name after it.
        last.insert(0, "bb".to_string());
        assert_eq!(rotate(&qs, &last), ["hi", "c", "a", "b", "z"]);
    }

    #[test]
    fn a_rotation_serves_every_queue_of_a_priority_in_turn() {
        let qs = queues(&[("a", 1), ("b", 1), ("c", 1)]);
        let r = Rotations::default();
        let key = (Uuid::nil(), "ns".to_string(), None, "g".to_string());
        let mut served = Vec::new();
        for _ in 0..6 {
            let first = r.order(&key, &qs)[0].to_string();
            r.served(&key, 1, &first);
            served.push(first);
        }
        assert_eq!(served, ["a", "b", "c", "a", "b", "c"]);
    }
}
