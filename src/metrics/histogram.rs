//! A latency histogram of fixed buckets, each an atomic counter: observing
//! is a short search and three relaxed additions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in seconds (`+Inf` comes after them).
pub const BOUNDS: [f64; 15] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The same bounds in nanoseconds, for the hot path.
const BOUNDS_NS: [u64; 15] = [
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
];

pub struct Histogram {
    /// Per bucket (not cumulative); the last is `+Inf`.
    buckets: [AtomicU64; BOUNDS.len() + 1],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            buckets: Default::default(),
            sum_ns: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

/// A histogram read at one moment, cumulative as Prometheus wants it.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Observations at or below each of [`BOUNDS`], then the total.
    pub cumulative: Vec<u64>,
    pub sum_seconds: f64,
    pub count: u64,
}

impl Histogram {
    pub fn observe(&self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let bucket = BOUNDS_NS.partition_point(|&b| b < ns);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The buckets are read one by one while others observe: the count is
    /// taken as the buckets' total, so `+Inf` always equals `_count`.
    pub fn snapshot(&self) -> Snapshot {
        let mut running = 0;
        let mut cumulative = Vec::with_capacity(self.buckets.len());
        for b in &self.buckets {
            running += b.load(Ordering::Relaxed);
            cumulative.push(running);
        }
        Snapshot {
            count: running,
            cumulative,
            sum_seconds: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(500)); // exactly the first bound
        h.observe(Duration::from_micros(501));
        h.observe(Duration::from_secs(60)); // +Inf
        let s = h.snapshot();
        assert_eq!(s.cumulative[0], 1);
        assert_eq!(s.cumulative[1], 2);
        assert_eq!(s.cumulative[BOUNDS.len() - 1], 2);
        assert_eq!(s.cumulative[BOUNDS.len()], 3);
        assert_eq!(s.count, 3);
        assert!((s.sum_seconds - 60.001001).abs() < 1e-6);
    }

    #[test]
    fn the_bounds_agree() {
        for (s, ns) in BOUNDS.iter().zip(BOUNDS_NS) {
            assert_eq!((s * 1e9).round() as u64, ns);
        }
    }
}
