//! Once a minute, this process's counters into PostgreSQL: its row of
//! `queen.worker_metrics` and, for each queue it has its own series for,
//! `queen.queue_ops_metrics` (019_worker_metrics). Only what changed since
//! the last flush that PostgreSQL took is sent; a flush that fails (the
//! backend is away) is sent with the next one, in a later minute.

use super::{Kind, Metrics};
use crate::backend::call::execute;
use crate::backend::health::Health;
use crate::calls::metrics::Flush;
use crate::json::{array, JsonValue, Object};
use crate::shutdown::ShutdownSignal;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How often the counters go to PostgreSQL (by default).
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(60);

/// The counters as they stood at one moment.
#[derive(Default, Clone)]
struct Totals {
    worker: HashMap<&'static str, u64>,
    /// (tenant, queue) → pushed, popped, acked, failed, dead-lettered.
    queues: HashMap<(String, String), [u64; 5]>,
}

const QUEUE_COLUMNS: [&str; 5] = [
    "push_messages",
    "pop_messages",
    "ack_success",
    "ack_failed",
    "dead_lettered",
];

fn totals(m: &Metrics) -> Totals {
    let count = |k: Kind| {
        let s = m.kind(k);
        s.ok.load(Ordering::Relaxed) + s.failed.load(Ordering::Relaxed)
    };
    let mut t = Totals::default();
    let mut sums = [0u64; 5];
    for s in m.queues.samples() {
        let v = [s.pushed, s.popped, s.acked, s.failed, s.dead_lettered];
        for (sum, x) in sums.iter_mut().zip(v) {
            *sum += x;
        }
        if s.tenant != super::queues::OTHER {
            t.queues.insert((s.tenant, s.queue), v);
        }
    }
    for (column, sum) in QUEUE_COLUMNS.iter().zip(sums) {
        t.worker.insert(column, sum);
    }
    t.worker.insert("push_requests", count(Kind::Push));
    t.worker.insert("pop_requests", count(Kind::Pop));
    t.worker.insert(
        "passthrough",
        m.passthrough_statements.load(Ordering::Relaxed),
    );
    t.worker
        .insert("errors", m.errors_by_class().iter().map(|(_, n)| n).sum());
    t
}

/// The flush of `now` against what PostgreSQL already has (`sent`): the
/// worker object and the queues array.
fn payload(m: &Metrics, now: &Totals, sent: &Totals) -> (String, String) {
    let mut worker = Object::new();
    for (column, n) in &now.worker {
        let before = sent.worker.get(column).copied().unwrap_or(0);
        worker = worker.member(
            column,
            JsonValue::Uint(u128::from(n.saturating_sub(before))),
        );
    }
    let pools = m.pool_status();
    let gauges = [
        ("sessions", m.clients.count() as u128),
        ("pool_in_use", pools.iter().map(|p| p.active as u128).sum()),
        ("pool_idle", pools.iter().map(|p| p.idle as u128).sum()),
        (
            "pool_waiting",
            pools.iter().map(|p| p.waiting as u128).sum(),
        ),
        (
            "parked_pops",
            m.waiters.load(Ordering::Relaxed).max(0) as u128,
        ),
        (
            "rss_bytes",
            u128::from(super::resident_bytes().unwrap_or(0)),
        ),
    ];
    for (column, v) in gauges {
        worker = worker.member(column, JsonValue::Uint(v));
    }
    let queues = now.queues.iter().filter_map(|((tenant, queue), v)| {
        let before = sent
            .queues
            .get(&(tenant.clone(), queue.clone()))
            .copied()
            .unwrap_or_default();
        if v == &before {
            return None;
        }
        let mut o = Object::new()
            .member("tenant", JsonValue::Str(tenant))
            .member("queue", JsonValue::Str(queue));
        for ((column, n), b) in QUEUE_COLUMNS.iter().zip(v).zip(before) {
            o = o.member(column, JsonValue::Uint(u128::from(n.saturating_sub(b))));
        }
        Some(o.finish())
    });
    (worker.finish(), array(queues))
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Flushes every `interval` until shutdown begins, then once more.
pub async fn run(
    config: tokio_postgres::Config,
    metrics: Arc<Metrics>,
    interval: Duration,
    shutdown: ShutdownSignal,
) {
    let host = hostname();
    let pid = std::process::id() as i32;
    let mut sent = Totals::default();
    let mut health = Health::new("metrics flush");
    let mut client: Option<tokio_postgres::Client> = None;
    let mut tick = tokio::time::interval(interval);
    tick.tick().await;
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            () = shutdown.begun() => true,
        };
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            client = match config.connect(tokio_postgres::NoTls).await {
                Ok((c, connection)) => {
                    tokio::spawn(async move {
                        let _ = connection.await;
                    });
                    Some(c)
                }
                Err(e) => {
                    health.lost(&e);
                    None
                }
            };
        }
        if let Some(c) = &client {
            let now = totals(&metrics);
            let (worker, queues) = payload(&metrics, &now, &sent);
            let flush = Flush {
                hostname: &host,
                pid,
                bucket: SystemTime::now(),
                worker,
                queues,
            };
            match execute(c, &flush).await {
                Ok(_) => {
                    health.ok();
                    sent = now;
                }
                Err(e) => health.lost(&e),
            }
        }
        if last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_sends_what_changed_since_the_last_one() {
        let m = Metrics::new(10, true);
        let q = m.queues.get(uuid::Uuid::nil(), "q");
        q.pushed.fetch_add(5, Ordering::Relaxed);
        m.passthrough_statements.fetch_add(2, Ordering::Relaxed);
        let first = totals(&m);
        let (worker, queues) = payload(&m, &first, &Totals::default());
        assert!(worker.contains("\"push_messages\":5"), "{worker}");
        assert!(worker.contains("\"passthrough\":2"), "{worker}");
        assert!(queues.contains("\"queue\":\"q\""), "{queues}");
        q.pushed.fetch_add(3, Ordering::Relaxed);
        let second = totals(&m);
        let (worker, queues) = payload(&m, &second, &first);
        assert!(worker.contains("\"push_messages\":3"), "{worker}");
        assert!(worker.contains("\"passthrough\":0"), "{worker}");
        assert!(queues.contains("\"push_messages\":3"), "{queues}");
        let (_, queues) = payload(&m, &second, &second);
        assert_eq!(queues, "[]");
    }
}
