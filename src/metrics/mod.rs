//! Observability: the counters and histograms the hot path feeds, the
//! gauges read at scrape time, and how they leave the process.
//!
//! - `mod.rs` (here) — [`Metrics`], one per server: statement counts and
//!   latencies by [`Kind`], errors by SQLSTATE class, passthrough
//!   statements, long-poll waiters, maintenance runs;
//! - `queues` — the per-queue counters behind a bounded, sharded map of
//!   interned names (a cap, then one `other` bucket);
//! - `histogram` — a fixed-bucket latency histogram of atomics;
//! - `clients` — the live sessions as the admin view lists them;
//! - `gauges` — queue depth, group lag and DLQ depth read from the `queen`
//!   views at scrape time (cached), and the readiness probe;
//! - `exposition` — the Prometheus text format (0.0.4);
//! - `http` — the tiny HTTP/1.1 server of `--metrics-listen`;
//! - `log` — `--log-format json`.
//!
//! The hot path only touches atomics (and a read lock on one shard of the
//! queue map); nothing here does I/O except `gauges` and `http`.

pub mod clients;
pub mod exposition;
pub mod flush;
pub mod gauges;
pub mod histogram;
pub mod http;
pub mod log;
pub mod queues;

use crate::backend::pool::Pool;
use histogram::Histogram;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

/// Distinct (tenant, queue) label pairs kept before the rest share the
/// `other` bucket, unless configured otherwise.
pub const DEFAULT_QUEUE_CAP: usize = 1000;

/// The kinds of statement that get a latency histogram and a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Push,
    Pop,
    Ack,
    Renew,
    /// CREATE/ALTER/DROP QUEUE, SEEK/DROP GROUP.
    QueueAdmin,
    /// SHOW QUEUES/PARTITIONS/GROUPS/DLQ.
    Show,
    Kv,
    /// SCHEDULE, CANCEL SCHEDULE, SHOW SCHEDULES.
    Timer,
    /// SHOW QUEENWIRE …: the admin view.
    Console,
    /// Plain SQL passed through to PostgreSQL.
    Passthrough,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::Push,
        Kind::Pop,
        Kind::Ack,
        Kind::Renew,
        Kind::QueueAdmin,
        Kind::Show,
        Kind::Kv,
        Kind::Timer,
        Kind::Console,
        Kind::Passthrough,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Push => "push",
            Kind::Pop => "pop",
            Kind::Ack => "ack",
            Kind::Renew => "renew",
            Kind::QueueAdmin => "queue_admin",
            Kind::Show => "show",
            Kind::Kv => "kv",
            Kind::Timer => "timer",
            Kind::Console => "console",
            Kind::Passthrough => "passthrough",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Counts and latencies of one statement kind.
#[derive(Default)]
pub struct KindStats {
    pub ok: AtomicU64,
    pub failed: AtomicU64,
    pub latency: Histogram,
}

/// SQLSTATE classes are two characters of `0-9A-Z`: one counter each.
const CLASSES: usize = 36 * 36;

/// A SQLSTATE character as a base-36 digit (`0-9`, then `A-Z`).
fn class_digit(c: char) -> Option<usize> {
    c.to_digit(36).map(|d| d as usize)
}

fn class_char(d: usize) -> char {
    char::from_digit(d as u32, 36).map_or('?', |c| c.to_ascii_uppercase())
}

/// The metrics of one server.
pub struct Metrics {
    kinds: [KindStats; Kind::ALL.len()],
    errors: Box<[AtomicU64]>,
    /// Statements (and simple-query messages of several) passed through.
    pub passthrough_statements: AtomicU64,
    /// POP … WAIT statements in progress.
    pub waiters: AtomicI64,
    pub queues: queues::QueueTable,
    pub clients: clients::Clients,
    maintenance: Mutex<BTreeMap<&'static str, u64>>,
    pools: RwLock<Vec<(String, Pool)>>,
    /// Without a users file every client is trusted (loopback, the
    /// engine's role): the admin view shows them everything.
    pub trusted_clients: bool,
}

impl Metrics {
    pub fn new(queue_cap: usize, trusted_clients: bool) -> Metrics {
        Metrics {
            kinds: Default::default(),
            errors: (0..CLASSES).map(|_| AtomicU64::new(0)).collect(),
            passthrough_statements: AtomicU64::new(0),
            waiters: AtomicI64::new(0),
            queues: queues::QueueTable::new(queue_cap),
            clients: clients::Clients::default(),
            maintenance: Mutex::new(BTreeMap::new()),
            pools: RwLock::new(Vec::new()),
            trusted_clients,
        }
    }

    /// One statement of `kind` finished after `elapsed`.
    pub fn statement(&self, kind: Kind, elapsed: Duration, ok: bool) {
        let stats = &self.kinds[kind.index()];
        if ok {
            stats.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            stats.failed.fetch_add(1, Ordering::Relaxed);
        }
        stats.latency.observe(elapsed);
    }

    pub fn kind(&self, kind: Kind) -> &KindStats {
        &self.kinds[kind.index()]
    }

    /// A client was sent an error with this SQLSTATE.
    pub fn error(&self, sqlstate: &str) {
        let mut chars = sqlstate.chars();
        let (Some(hi), Some(lo)) = (
            chars.next().and_then(class_digit),
            chars.next().and_then(class_digit),
        ) else {
            return;
        };
        self.errors[hi * 36 + lo].fetch_add(1, Ordering::Relaxed);
    }

    /// Errors sent to clients, by SQLSTATE class (only classes seen).
    pub fn errors_by_class(&self) -> Vec<(String, u64)> {
        self.errors
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let n = n.load(Ordering::Relaxed);
                (n > 0).then(|| {
                    let class: String = [class_char(i / 36), class_char(i % 36)].iter().collect();
                    (class, n)
                })
            })
            .collect()
    }

    /// One cycle of an elected maintenance task ran in this process.
    pub fn maintenance_run(&self, task: &'static str) {
        let mut runs = match self.maintenance.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        *runs.entry(task).or_insert(0) += 1;
    }

    pub fn maintenance_runs(&self) -> Vec<(&'static str, u64)> {
        let runs = match self.maintenance.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        runs.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// The pools the admin view and the pool gauges report, by role name.
    pub fn set_pools(&self, pools: Vec<(String, Pool)>) {
        if let Ok(mut guard) = self.pools.write() {
            *guard = pools;
        }
    }

    /// Adds the pools whose labels are not known yet (a reload's new
    /// tenant roles).
    pub fn add_pools(&self, pools: Vec<(String, Pool)>) {
        if let Ok(mut guard) = self.pools.write() {
            for (label, pool) in pools {
                if !guard.iter().any(|(l, _)| *l == label) {
                    guard.push((label, pool));
                }
            }
        }
    }

    /// Each pool's role and status.
    pub fn pool_status(&self) -> Vec<PoolStatus> {
        let pools = match self.pools.read() {
            Ok(p) => p,
            Err(p) => p.into_inner(),
        };
        pools
            .iter()
            .map(|(role, pool)| {
                let s = pool.status();
                PoolStatus {
                    role: role.clone(),
                    max: s.max_size,
                    active: s.size.saturating_sub(s.available),
                    idle: s.available,
                    waiting: s.waiting,
                }
            })
            .collect()
    }
}

/// One pool as the admin view and `/metrics` report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStatus {
    pub role: String,
    pub max: usize,
    /// Connections handed out now.
    pub active: usize,
    /// Open connections waiting in the pool.
    pub idle: usize,
    /// Checkouts waiting for a connection.
    pub waiting: usize,
}

/// A POP … WAIT in progress, for the waiters gauge: counted while alive.
pub struct Waiting<'m>(&'m Metrics);

impl<'m> Waiting<'m> {
    pub fn begin(metrics: &'m Metrics) -> Waiting<'m> {
        metrics.waiters.fetch_add(1, Ordering::Relaxed);
        Waiting(metrics)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::Relaxed);
    }
}

tokio::task_local! {
    /// The metrics of the server whose maintenance loop runs in this task:
    /// the elected tasks count their runs here without every loop taking
    /// the registry as an argument.
    pub static MAINTENANCE: std::sync::Arc<Metrics>;
}

/// Counts a run of `task` for the server whose maintenance loop this is
/// (nothing outside one).
pub fn count_maintenance_run(task: &'static str) {
    let _ = MAINTENANCE.try_with(|m| m.maintenance_run(task));
}

/// Resident set size of this process in bytes (`/proc/self/statm`).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_count_by_class() {
        let m = Metrics::new(10, true);
        m.error("42601");
        m.error("42P01");
        m.error("23505");
        m.error("x");
        m.error("");
        assert_eq!(
            m.errors_by_class(),
            vec![("23".to_string(), 1), ("42".to_string(), 2)]
        );
    }

    #[test]
    fn statements_count_by_outcome() {
        let m = Metrics::new(10, true);
        m.statement(Kind::Push, Duration::from_millis(2), true);
        m.statement(Kind::Push, Duration::from_millis(3), false);
        assert_eq!(m.kind(Kind::Push).ok.load(Ordering::Relaxed), 1);
        assert_eq!(m.kind(Kind::Push).failed.load(Ordering::Relaxed), 1);
        assert_eq!(m.kind(Kind::Push).latency.snapshot().count, 2);
    }

    #[test]
    fn waiting_counts_while_alive() {
        let m = Metrics::new(10, true);
        {
            let _a = Waiting::begin(&m);
            let _b = Waiting::begin(&m);
            assert_eq!(m.waiters.load(Ordering::Relaxed), 2);
        }
        assert_eq!(m.waiters.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn rss_is_read() {
        assert!(resident_bytes().is_some_and(|b| b > 0));
    }
}
