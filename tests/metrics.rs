//! `--metrics-listen`: /metrics after real statements (checked value by
//! value and by `promtool check metrics`), /health and /ready (503 while
//! PostgreSQL is unreachable), the bounded per-queue labels, the HTTP
//! refusals, `--log-format json` of the binary, and the Grafana dashboard's
//! queries against the names a running proxy emits.

mod common;

use common::cut::Cutter;
use common::proxy::Proxy;
use common::sql::rows;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TENANT: &str = "00000000-0000-0000-0000-000000000001";

/// Sends `request` as is and returns (status, body).
async fn http_raw(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out))
        .await
        .expect("the exporter answers")
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    http_raw(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes(),
    )
    .await
}

/// The value of the sample written exactly as `series` (name and labels).
fn value(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn must(page: &str, series: &str) -> f64 {
    value(page, series).unwrap_or_else(|| panic!("no sample {series} in:\n{page}"))
}

/// Metric names of the page's samples, with a histogram's suffixes taken
/// off.
fn sample_names(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(|n| {
            n.trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count")
                .to_string()
        })
        .collect()
}

/// `promtool check metrics` on the page: a missing promtool fails the test
/// (`.ci/run` installs Debian's `prometheus` package).
fn promtool(page: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (apt-get install prometheus)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(page.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics:\n{}{}\n--- page ---\n{page}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn start(prefix: &str, cap: usize) -> (Proxy, SocketAddr) {
    let proxy = Proxy::start_with(prefix, |c| {
        c.metrics_listen = Some("127.0.0.1:0".into());
        c.metrics_queue_cap = cap;
    })
    .await;
    let addr = proxy.server.metrics_addr.expect("the exporter listens");
    (proxy, addr)
}

#[tokio::test]
async fn a_scrape_counts_what_ran_and_passes_promtool() {
    let (proxy, addr) = start("metrics_scrape", 1000).await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE mq WITH (retry_limit = 0)")
        .await
        .unwrap();
    rows(
        &client,
        "PUSH INTO mq VALUES ('{\"n\":1}'), ('{\"n\":2}'), ('{\"n\":3}')",
    )
    .await;
    let popped = rows(&client, "POP FROM mq LIMIT 3 LEASE 60").await;
    assert_eq!(popped.len(), 3);
    let receipt = |i: usize| popped[i]["receipt"].clone().unwrap();
    let acked = rows(&client, &format!("ACK '{}'", receipt(0))).await;
    assert_eq!(acked[0]["status"].as_deref(), Some("acked"));
    let failed = rows(&client, &format!("ACK '{}' FAILED", receipt(1))).await;
    assert_eq!(failed[0]["status"].as_deref(), Some("dead_lettered"));
    // Plain SQL, one that PostgreSQL fails (42P01), one the proxy fails (22P02).
    rows(&client, "SELECT 1").await;
    let e = client
        .simple_query("SELECT * FROM no_such_table")
        .await
        .unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("42P01"));
    let e = client
        .simple_query("ACK 'not-a-receipt'")
        .await
        .unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("22P02"));

    let (status, page) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    let q = |name: &str| format!("{name}{{tenant=\"{TENANT}\",queue=\"mq\"}}");
    assert_eq!(must(&page, &q("queenwire_messages_pushed_total")), 3.0);
    assert_eq!(must(&page, &q("queenwire_messages_popped_total")), 3.0);
    assert_eq!(must(&page, &q("queenwire_messages_acked_total")), 1.0);
    assert_eq!(must(&page, &q("queenwire_messages_failed_total")), 1.0);
    assert_eq!(
        must(&page, &q("queenwire_messages_dead_lettered_total")),
        1.0
    );
    assert_eq!(must(&page, &q("queenwire_queue_dlq_messages")), 1.0);
    assert_eq!(must(&page, &q("queenwire_queue_messages")), 3.0);
    assert!(value(&page, &q("queenwire_queue_pending_messages")).is_some());
    assert_eq!(must(&page, "queenwire_queue_gauges_up"), 1.0);
    // The depth gauges are SHOW QUEUES's numbers.
    let shown = rows(&client, "SHOW QUEUES").await;
    let mq = shown
        .iter()
        .find(|r| r["queue"].as_deref() == Some("mq"))
        .unwrap();
    for (column, metric) in [
        ("messages", "queenwire_queue_messages"),
        ("pending", "queenwire_queue_pending_messages"),
        ("dead_lettered", "queenwire_queue_dlq_messages"),
    ] {
        let shown: f64 = mq[column].as_deref().unwrap().parse().unwrap();
        assert_eq!(must(&page, &q(metric)), shown, "{column}");
    }
    let stmt = |kind: &str, outcome: &str| {
        must(
            &page,
            &format!("queenwire_statements_total{{kind=\"{kind}\",outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(stmt("push", "ok"), 1.0);
    assert_eq!(stmt("pop", "ok"), 1.0);
    assert_eq!(stmt("ack", "ok"), 2.0);
    assert_eq!(stmt("ack", "error"), 1.0);
    assert_eq!(stmt("queue_admin", "ok"), 1.0);
    assert_eq!(stmt("passthrough", "ok"), 1.0);
    assert_eq!(stmt("passthrough", "error"), 1.0);
    assert_eq!(must(&page, "queenwire_passthrough_statements_total"), 2.0);
    assert_eq!(
        must(
            &page,
            "queenwire_statement_duration_seconds_count{kind=\"ack\"}"
        ),
        3.0
    );
    assert_eq!(
        must(
            &page,
            "queenwire_statement_duration_seconds_bucket{kind=\"push\",le=\"+Inf\"}"
        ),
        1.0
    );
    assert_eq!(must(&page, "queenwire_errors_total{class=\"42\"}"), 1.0);
    assert_eq!(must(&page, "queenwire_errors_total{class=\"22\"}"), 1.0);
    assert_eq!(must(&page, "queenwire_sessions"), 1.0);
    assert_eq!(
        must(&page, "queenwire_pool_max_connections{role=\"engine\"}"),
        4.0
    );
    assert!(value(
        &page,
        "queenwire_pool_connections{role=\"engine\",state=\"idle\"}"
    )
    .is_some());
    assert_eq!(must(&page, "queenwire_pop_waiters"), 0.0);
    assert!(must(&page, "queenwire_process_resident_memory_bytes") > 1e6);
    assert_eq!(must(&page, "queenwire_queue_series_cap"), 1000.0);
    promtool(&page);

    // AUTO ACK acknowledges at delivery.
    rows(&client, "PUSH INTO auto_q VALUES ('{}')").await;
    assert_eq!(rows(&client, "POP FROM auto_q AUTO ACK").await.len(), 1);
    let (_, page) = get(addr, "/metrics").await;
    let auto = |name: &str| format!("{name}{{tenant=\"{TENANT}\",queue=\"auto_q\"}}");
    assert_eq!(must(&page, &auto("queenwire_messages_popped_total")), 1.0);
    assert_eq!(must(&page, &auto("queenwire_messages_acked_total")), 1.0);

    // Plain SQL over the extended protocol: counted and timed at its Sync.
    let seven: i32 = client
        .query_one("SELECT $1::int4", &[&7i32])
        .await
        .unwrap()
        .get(0);
    assert_eq!(seven, 7);
    let (_, page) = get(addr, "/metrics").await;
    assert_eq!(must(&page, "queenwire_passthrough_statements_total"), 3.0);
    assert_eq!(
        must(
            &page,
            "queenwire_statements_total{kind=\"passthrough\",outcome=\"ok\"}"
        ),
        2.0
    );

    // A POP … WAIT in progress is a waiter.
    let waiter = proxy.connect().await;
    let parked = tokio::spawn(async move {
        waiter.simple_query("POP FROM mq WAIT '3s'").await.unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, page) = get(addr, "/metrics").await;
        if must(&page, "queenwire_pop_waiters") == 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "the waiter never showed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    parked.await.unwrap();
}

#[tokio::test]
async fn health_ready_and_bad_requests() {
    let (_proxy, addr) = start("metrics_http", 1000).await;
    assert_eq!(get(addr, "/health").await.0, 200);
    assert_eq!(get(addr, "/ready").await.0, 200);
    assert_eq!(get(addr, "/metrics?x=1").await.0, 200);
    assert_eq!(get(addr, "/nope").await.0, 404);
    let (status, _) = http_raw(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
    assert_eq!(status, 405);
    assert_eq!(http_raw(addr, b"HELLO\r\n\r\n").await.0, 400);
    assert_eq!(http_raw(addr, b"GET /metrics HTTP/9\r\n\r\n").await.0, 400);
    let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 20_000));
    assert_eq!(http_raw(addr, &huge).await.0, 431);
    // Over 8 KiB with its blank line in the same read: still too large.
    let mut long_header = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    long_header.extend(std::iter::repeat_n(b'a', 9_000));
    long_header.extend_from_slice(b"\r\n\r\n");
    assert_eq!(http_raw(addr, &long_header).await.0, 431);
    // Lines ended by a bare LF are taken, as HTTP asks of servers.
    assert_eq!(
        http_raw(addr, b"GET /health HTTP/1.1\nHost: a\n\n").await.0,
        200
    );
    // HEAD: the headers without the body.
    let (status, body) = http_raw(addr, b"HEAD /health HTTP/1.1\r\n\r\n").await;
    assert_eq!((status, body.as_str()), (200, ""));
}

#[tokio::test]
async fn ready_is_503_while_postgresql_is_unreachable() {
    let db = common::cluster::fresh_database("metrics_ready");
    let cutter = Cutter::start().await;
    let proxy = Proxy::start_on(cutter.config(&db), |c| {
        c.metrics_listen = Some("127.0.0.1:0".into());
    })
    .await;
    let addr = proxy.server.metrics_addr.unwrap();
    assert_eq!(get(addr, "/ready").await.0, 200);
    cutter.down();
    let until = |want: u16| async move {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, _) = get(addr, "/ready").await;
            if status == want {
                return;
            }
            assert!(Instant::now() < deadline, "/ready never became {want}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    until(503).await;
    // The process is still up, and /metrics still answers (without the
    // queue gauges).
    assert_eq!(get(addr, "/health").await.0, 200);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (status, page) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(must(&page, "queenwire_queue_gauges_up"), 0.0);
    cutter.up();
    until(200).await;
}

#[tokio::test]
async fn per_queue_labels_stop_at_the_cap() {
    let (proxy, addr) = start("metrics_cap", 5).await;
    let client = proxy.connect().await;
    for i in 0..20 {
        rows(&client, &format!("PUSH INTO capq{i:02} VALUES ('{{}}')")).await;
    }
    let (_, page) = get(addr, "/metrics").await;
    let pushed: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with("queenwire_messages_pushed_total{"))
        .collect();
    assert_eq!(pushed.len(), 6, "five queues and other: {pushed:?}");
    assert_eq!(
        must(
            &page,
            "queenwire_messages_pushed_total{tenant=\"other\",queue=\"other\"}"
        ),
        15.0
    );
    assert_eq!(must(&page, "queenwire_queue_series"), 5.0);
    let depth = page
        .lines()
        .filter(|l| l.starts_with("queenwire_queue_messages{"))
        .count();
    assert_eq!(depth, 5, "the gauges are capped alike");
    assert_eq!(must(&page, "queenwire_queue_gauges_omitted"), 15.0);
    promtool(&page);
}

/// A key=value connection string of `cfg` for `--backend`.
fn backend_string(cfg: &tokio_postgres::Config) -> String {
    let host = match &cfg.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
    };
    format!(
        "host={host} port={} user={} dbname={}",
        cfg.get_ports()[0],
        cfg.get_user().unwrap(),
        cfg.get_dbname().unwrap()
    )
}

/// Each line parses as JSON and carries level, message and target
/// (checked by python3's json module, which the layout test needs too).
fn check_json_lines(text: &str) {
    let script = r#"
import json, sys
n = 0
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line:
        continue
    obj = json.loads(line)
    for key in ("timestamp", "level", "target", "message"):
        assert key in obj, (key, line)
    n += 1
assert n > 0, "no lines"
print(n)
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}\n--- lines ---\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn json_logs_are_one_object_a_line() {
    let db = common::cluster::fresh_database("metrics_json_log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_queenwire"))
        .args([
            "--backend",
            &backend_string(&db),
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--log-level",
            "debug",
        ])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !lines
        .iter()
        .any(|l: &String| l.contains("metrics on http://"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(_) => panic!("no start-up lines: {lines:?}"),
        }
    }
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        lines.push(line);
    }
    check_json_lines(&lines.join("\n"));
    assert!(lines
        .iter()
        .any(|l| l.contains(r#""level":"INFO""#) && l.contains(r#""target":"queenwire""#)));
}

/// Every metric name the dashboard's PromQL uses, as python3 extracts them
/// from the panels' `expr` fields (failing if the file is not JSON), and
/// the SQL of its PostgreSQL panels.
fn dashboard_queries() -> (BTreeSet<String>, Vec<String>) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/grafana/queenwire.json");
    let script = r#"
import json, re, sys
d = json.load(open(sys.argv[1]))
def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get("panels", []))
n = 0
for p in panels(d["panels"]):
    for t in p.get("targets", []):
        if "expr" in t:
            n += 1
            for m in re.findall(r"queenwire_[a-z_]+", t["expr"]):
                print(m)
        if "rawSql" in t:
            print("SQL\t" + t["rawSql"])
assert n > 0, "no PromQL targets"
"#;
    let out = Command::new("python3")
        .args(["-c", script, path])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let sql = text
        .lines()
        .filter_map(|l| l.strip_prefix("SQL\t"))
        .map(str::to_string)
        .collect();
    let names = text
        .lines()
        .filter(|l| !l.starts_with("SQL\t"))
        .map(|n| {
            n.trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count")
                .to_string()
        })
        .collect();
    (names, sql)
}

#[tokio::test]
async fn the_dashboard_queries_metrics_the_exporter_emits() {
    let (proxy, addr) = start("metrics_dashboard", 1000).await;
    let client = proxy.connect().await;
    // Enough traffic for every per-queue and per-group series to appear.
    rows(&client, "PUSH INTO dash VALUES ('{}')").await;
    let popped = rows(&client, "POP FROM dash GROUP g").await;
    rows(
        &client,
        &format!("ACK '{}'", popped[0]["receipt"].clone().unwrap()),
    )
    .await;
    let _ = client.simple_query("SELECT * FROM missing").await;
    let (_, page) = get(addr, "/metrics").await;
    let emitted = sample_names(&page);
    let declared: BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect();
    let (used, sql) = dashboard_queries();
    let unknown: Vec<&String> = used.iter().filter(|n| !declared.contains(*n)).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard queries {unknown:?}, which the exporter does not emit"
    );
    let silent: Vec<&String> = used.iter().filter(|n| !emitted.contains(*n)).collect();
    // Maintenance runs need an elected cycle; everything else has samples.
    assert!(
        silent
            .iter()
            .all(|n| n.as_str() == "queenwire_maintenance_runs_total"),
        "no samples for {silent:?}"
    );
    // The PostgreSQL panels' SQL runs against the applied schema.
    assert!(!sql.is_empty());
    let direct = proxy.connect_direct().await;
    for q in sql {
        direct
            .simple_query(&q)
            .await
            .unwrap_or_else(|e| panic!("{q}: {e}"));
    }
}

#[tokio::test]
async fn maintenance_runs_are_counted_by_task() {
    let proxy = Proxy::start_with("metrics_maintenance", |c| {
        c.metrics_listen = Some("127.0.0.1:0".into());
        c.retention.interval = Duration::from_secs(1);
    })
    .await;
    let addr = proxy.server.metrics_addr.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, page) = get(addr, "/metrics").await;
        let runs = |task: &str| {
            value(
                &page,
                &format!("queenwire_maintenance_runs_total{{task=\"{task}\"}}"),
            )
            .unwrap_or(0.0)
        };
        // The only queenwire on its database is elected for every task.
        if ["log_retention", "log_cleanup", "kv_sweep", "log_expire"]
            .iter()
            .all(|t| runs(t) >= 1.0)
        {
            break;
        }
        assert!(Instant::now() < deadline, "not every task ran:\n{page}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Counters are exact under concurrency: pushes from many sessions at once
/// (fused into shared writes), then concurrent POP and ACK, against a
/// ledger of what the clients were told.
#[tokio::test]
async fn counters_match_a_ledger_of_concurrent_work() {
    let (proxy, addr) = start("metrics_ledger", 1000).await;
    let mut pushers = Vec::new();
    for p in 0..8 {
        let client = proxy.connect().await;
        pushers.push(tokio::spawn(async move {
            let mut pushed = 0usize;
            for i in 0..40 {
                let n = 1 + (p + i) % 3;
                let values: Vec<String> = (0..n).map(|k| format!("('{{\"k\":{k}}}')")).collect();
                let got = rows(
                    &client,
                    &format!("PUSH INTO ledger VALUES {}", values.join(", ")),
                )
                .await;
                pushed += got.len();
            }
            pushed
        }));
    }
    let mut ledger = 0;
    for p in pushers {
        ledger += p.await.unwrap();
    }
    let mut consumers = Vec::new();
    for _ in 0..4 {
        let client = proxy.connect().await;
        consumers.push(tokio::spawn(async move {
            let mut acked = 0usize;
            loop {
                let got = rows(&client, "POP FROM ledger LIMIT 7 LEASE 60").await;
                if got.is_empty() {
                    return acked;
                }
                let list: Vec<String> = got
                    .iter()
                    .map(|r| format!("'{}'", r["receipt"].clone().unwrap()))
                    .collect();
                let statuses = rows(&client, &format!("ACK {}", list.join(", "))).await;
                acked += statuses
                    .iter()
                    .filter(|r| r["status"].as_deref() == Some("acked"))
                    .count();
            }
        }));
    }
    let mut acked = 0;
    for c in consumers {
        acked += c.await.unwrap();
    }
    assert_eq!(acked, ledger, "every pushed message was acknowledged once");
    let (_, page) = get(addr, "/metrics").await;
    let q = |name: &str| format!("{name}{{tenant=\"{TENANT}\",queue=\"ledger\"}}");
    assert_eq!(
        must(&page, &q("queenwire_messages_pushed_total")),
        ledger as f64
    );
    assert_eq!(
        must(&page, &q("queenwire_messages_popped_total")),
        ledger as f64
    );
    assert_eq!(
        must(&page, &q("queenwire_messages_acked_total")),
        ledger as f64
    );
    assert_eq!(must(&page, &q("queenwire_queue_messages")), ledger as f64);
    assert_eq!(must(&page, &q("queenwire_queue_pending_messages")), 0.0);
    assert_eq!(
        must(
            &page,
            "queenwire_statements_total{kind=\"push\",outcome=\"ok\"}"
        ),
        320.0
    );
}

/// From the moment a drain begins `/ready` is 503, so a load balancer
/// stops sending clients, while `/health` and `/metrics` still answer
/// until the drain ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_is_503_from_the_start_of_a_drain() {
    let (proxy, addr) = start("metrics_drain", 1000).await;
    let client = proxy.connect().await;
    // An open transaction keeps the drain going.
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(get(addr, "/ready").await.0, 200);
    let draining = tokio::spawn(
        proxy
            .server
            .drain(tokio::time::sleep(Duration::from_secs(3))),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let (status, body) = get(addr, "/ready").await;
        if status == 503 {
            assert!(body.contains("shutting down"), "{body}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still ready while draining"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(get(addr, "/health").await.0, 200);
    assert_eq!(get(addr, "/metrics").await.0, 200);
    draining.await.unwrap();
}
