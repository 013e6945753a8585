//! The Prometheus text exposition format, version 0.0.4: for each metric a
//! `# HELP` and a `# TYPE` line, then its samples.

use super::gauges::Snapshot;
use super::histogram::BOUNDS;
use super::{resident_bytes, Kind, Metrics};
use std::fmt::Write;
use std::sync::atomic::Ordering;

/// The Content-Type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every metric name the exporter emits (the dashboard test and the docs
/// check against it).
pub const NAMES: &[&str] = &[
    "queenwire_messages_pushed_total",
    "queenwire_messages_popped_total",
    "queenwire_messages_acked_total",
    "queenwire_messages_failed_total",
    "queenwire_messages_dead_lettered_total",
    "queenwire_queue_series",
    "queenwire_queue_series_cap",
    "queenwire_queue_messages",
    "queenwire_queue_pending_messages",
    "queenwire_queue_dlq_messages",
    "queenwire_group_lag_messages",
    "queenwire_queue_gauges_up",
    "queenwire_queue_gauges_omitted",
    "queenwire_pop_waiters",
    "queenwire_statements_total",
    "queenwire_statement_duration_seconds",
    "queenwire_passthrough_statements_total",
    "queenwire_errors_total",
    "queenwire_sessions",
    "queenwire_pool_connections",
    "queenwire_pool_max_connections",
    "queenwire_pool_waiting",
    "queenwire_maintenance_runs_total",
    "queenwire_process_resident_memory_bytes",
];

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

struct Out(String);

impl Out {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }
}

/// A float as the format writes it.
fn float(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        format!("{v}")
    }
}

/// The whole page: the process's counters, `gauges` (read from the
/// views), the pools and the process.
pub fn render(m: &Metrics, gauges: &Snapshot) -> String {
    let mut o = Out(String::with_capacity(16 * 1024));
    let queues = m.queues.samples();
    type Field = fn(&super::queues::QueueSample) -> u64;
    let per_queue: [(&str, &str, Field); 5] = [
        (
            "queenwire_messages_pushed_total",
            "Messages pushed (duplicates not counted), per queue.",
            |s| s.pushed,
        ),
        (
            "queenwire_messages_popped_total",
            "Messages handed out by POP, per queue.",
            |s| s.popped,
        ),
        (
            "queenwire_messages_acked_total",
            "Messages acknowledged as processed, per queue.",
            |s| s.acked,
        ),
        (
            "queenwire_messages_failed_total",
            "Messages acknowledged FAILED (retried or dead-lettered), per queue.",
            |s| s.failed,
        ),
        (
            "queenwire_messages_dead_lettered_total",
            "Messages an ACK FAILED sent to the dead-letter queue, per queue.",
            |s| s.dead_lettered,
        ),
    ];
    for (name, help, field) in per_queue {
        o.header(name, "counter", help);
        for s in &queues {
            o.sample(
                name,
                &[("tenant", &s.tenant), ("queue", &s.queue)],
                field(s),
            );
        }
    }
    o.header(
        "queenwire_queue_series",
        "gauge",
        "Queues with per-queue series of their own (the rest count in queue=\"other\").",
    );
    o.sample("queenwire_queue_series", &[], m.queues.len());
    o.header(
        "queenwire_queue_series_cap",
        "gauge",
        "Most queues with per-queue series of their own (--metrics-queue-cap).",
    );
    o.sample("queenwire_queue_series_cap", &[], m.queues.cap());

    type DepthField = fn(&super::gauges::Depth) -> i64;
    let depth: [(&str, &str, DepthField); 3] = [
        (
            "queenwire_queue_messages",
            "Retained messages per queue (queen.queue_depth.messages).",
            |d| d.messages,
        ),
        (
            "queenwire_queue_pending_messages",
            "Messages the furthest-behind group has not acknowledged (queen.queue_depth.pending).",
            |d| d.pending,
        ),
        (
            "queenwire_queue_dlq_messages",
            "Dead-letter queue entries per queue (queen.queue_depth.dead_lettered).",
            |d| d.dead_lettered,
        ),
    ];
    for (name, help, field) in depth {
        o.header(name, "gauge", help);
        for d in &gauges.depth {
            o.sample(
                name,
                &[("tenant", &d.tenant), ("queue", &d.queue)],
                field(d),
            );
        }
    }
    o.header(
        "queenwire_group_lag_messages",
        "gauge",
        "Retained messages after a consumer group's cursor (queen.group_lag.lag).",
    );
    for l in &gauges.lag {
        o.sample(
            "queenwire_group_lag_messages",
            &[
                ("tenant", &l.tenant),
                ("queue", &l.queue),
                ("group", &l.group),
            ],
            l.lag,
        );
    }
    o.header(
        "queenwire_queue_gauges_up",
        "gauge",
        "1 when the last read of the queue views succeeded.",
    );
    o.sample("queenwire_queue_gauges_up", &[], u8::from(gauges.ok));
    o.header(
        "queenwire_queue_gauges_omitted",
        "gauge",
        "Queues past the cap, without depth gauges (the queen views have them).",
    );
    o.sample("queenwire_queue_gauges_omitted", &[], gauges.omitted_queues);

    o.header(
        "queenwire_pop_waiters",
        "gauge",
        "POP ... WAIT statements in progress (long-poll waiters).",
    );
    o.sample(
        "queenwire_pop_waiters",
        &[],
        m.waiters.load(Ordering::Relaxed).max(0),
    );

    o.header(
        "queenwire_statements_total",
        "counter",
        "Statements run, by kind and outcome.",
    );
    for kind in Kind::ALL {
        let s = m.kind(kind);
        o.sample(
            "queenwire_statements_total",
            &[("kind", kind.as_str()), ("outcome", "ok")],
            s.ok.load(Ordering::Relaxed),
        );
        o.sample(
            "queenwire_statements_total",
            &[("kind", kind.as_str()), ("outcome", "error")],
            s.failed.load(Ordering::Relaxed),
        );
    }
    let name = "queenwire_statement_duration_seconds";
    o.header(
        name,
        "histogram",
        "Statement latency in the proxy, by kind (POP includes its WAIT).",
    );
    for kind in Kind::ALL {
        let snap = m.kind(kind).latency.snapshot();
        let bucket = format!("{name}_bucket");
        for (i, n) in snap.cumulative.iter().enumerate() {
            let le = BOUNDS.get(i).map_or("+Inf".to_string(), |b| float(*b));
            o.sample(&bucket, &[("kind", kind.as_str()), ("le", &le)], n);
        }
        o.sample(
            &format!("{name}_sum"),
            &[("kind", kind.as_str())],
            float(snap.sum_seconds),
        );
        o.sample(
            &format!("{name}_count"),
            &[("kind", kind.as_str())],
            snap.count,
        );
    }
    o.header(
        "queenwire_passthrough_statements_total",
        "counter",
        "Plain SQL statements passed through to PostgreSQL.",
    );
    o.sample(
        "queenwire_passthrough_statements_total",
        &[],
        m.passthrough_statements.load(Ordering::Relaxed),
    );
    o.header(
        "queenwire_errors_total",
        "counter",
        "Errors sent to clients, by SQLSTATE class (the first two characters).",
    );
    for (class, n) in m.errors_by_class() {
        o.sample("queenwire_errors_total", &[("class", &class)], n);
    }
    o.header("queenwire_sessions", "gauge", "Client sessions now.");
    o.sample("queenwire_sessions", &[], m.clients.count());

    let pools = m.pool_status();
    o.header(
        "queenwire_pool_connections",
        "gauge",
        "Backend connections per pool (role): active = handed out, idle = open in the pool.",
    );
    for p in &pools {
        o.sample(
            "queenwire_pool_connections",
            &[("role", &p.role), ("state", "active")],
            p.active,
        );
        o.sample(
            "queenwire_pool_connections",
            &[("role", &p.role), ("state", "idle")],
            p.idle,
        );
    }
    o.header(
        "queenwire_pool_max_connections",
        "gauge",
        "Most backend connections per pool (role).",
    );
    for p in &pools {
        o.sample(
            "queenwire_pool_max_connections",
            &[("role", &p.role)],
            p.max,
        );
    }
    o.header(
        "queenwire_pool_waiting",
        "gauge",
        "Checkouts waiting for a backend connection, per pool (role).",
    );
    for p in &pools {
        o.sample("queenwire_pool_waiting", &[("role", &p.role)], p.waiting);
    }
    o.header(
        "queenwire_maintenance_runs_total",
        "counter",
        "Cycles of an elected maintenance task this process ran, by task.",
    );
    for (task, n) in m.maintenance_runs() {
        o.sample("queenwire_maintenance_runs_total", &[("task", task)], n);
    }
    o.header(
        "queenwire_process_resident_memory_bytes",
        "gauge",
        "Resident set size of the queenwire process.",
    );
    o.sample(
        "queenwire_process_resident_memory_bytes",
        &[],
        resident_bytes().unwrap_or(0),
    );
    o.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::queues::QueueCounters;
    use std::time::Duration;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("x\ny"), "x\\ny");
    }

    #[test]
    fn every_metric_has_help_and_type_and_only_known_names() {
        let m = Metrics::new(10, true);
        QueueCounters::add(&m.queues.get(uuid::Uuid::nil(), "q\"1").pushed, 3);
        m.statement(Kind::Push, Duration::from_millis(1), true);
        m.error("42601");
        m.maintenance_run("kv_sweep");
        let page = render(&m, &Snapshot::default());
        for name in NAMES {
            assert!(page.contains(&format!("# HELP {name} ")), "{name}");
            assert!(page.contains(&format!("# TYPE {name} ")), "{name}");
        }
        for line in page.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let base = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(NAMES.contains(&base), "{line}");
        }
        assert!(page.contains(
            "queenwire_messages_pushed_total{tenant=\"00000000-0000-0000-0000-000000000000\",queue=\"q\\\"1\"} 3"
        ));
        assert!(page.contains("queenwire_errors_total{class=\"42\"} 1"));
        assert!(page
            .contains("queenwire_statement_duration_seconds_bucket{kind=\"push\",le=\"+Inf\"} 1"));
    }
}
