//! Streams against a real PostgreSQL: windows computed independently here
//! from the pushed events must be exactly what the sink receives; late
//! events; definition changes; PostgreSQL's own error for a bad
//! expression; a `kill -9` of a running queenwire followed by a restart,
//! and two queenwires sharing the stream, still emit every window exactly
//! once (ledger).

mod common;

use common::proxy::{connect, Proxy};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_postgres::config::Host;
use tokio_postgres::{Client, SimpleQueryMessage};

/// One event: (partition, key, event time in seconds, amount in cents).
type Ev = (String, String, i64, i64);

/// One emitted window: (partition, key, start s, end s) → (n, total cents, late).
type Windows = BTreeMap<(String, String, i64, i64), Vec<(i64, i64, bool)>>;

const HANG: Duration = Duration::from_secs(120);

fn amount(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

async fn push(client: &Client, queue: &str, events: &[Ev]) {
    for chunk in events.chunks(400) {
        let rows: Vec<String> = chunk
            .iter()
            .map(|(p, k, t, c)| {
                format!(
                    "('{p}', '{{\"k\": \"{k}\", \"t\": {t}, \"amount\": \"{}\"}}')",
                    amount(*c)
                )
            })
            .collect();
        client
            .batch_execute(&format!(
                "PUSH INTO {queue} (partition, payload) VALUES {}",
                rows.join(", ")
            ))
            .await
            .unwrap();
    }
}

fn texts(messages: Vec<SimpleQueryMessage>, columns: &[&str]) -> Vec<Vec<Option<String>>> {
    messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                columns
                    .iter()
                    .map(|c| r.get(*c).map(str::to_string))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// Reads the sink until `expected` windows arrived (or the hang bound):
/// the emitted JSON is read back by PostgreSQL itself.
async fn drain(client: &Client, sink: &str, expected: usize) -> Windows {
    let raw = drain_raw(client, sink, expected).await;
    parse_windows(client, raw).await
}

/// The sink's (partition, payload) pairs, once `expected` arrived (and a
/// little longer, so a duplicate would show).
async fn drain_raw(client: &Client, sink: &str, expected: usize) -> Vec<(String, String)> {
    let began = Instant::now();
    let mut raw: Vec<(String, String)> = Vec::new();
    while raw.len() < expected && began.elapsed() < HANG {
        let got = client
            .simple_query(&format!(
                "POP FROM {sink} LIMIT 1000 PARTITIONS 50 AUTO ACK"
            ))
            .await
            .unwrap();
        let rows = texts(got, &["partition", "payload"]);
        if rows.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for r in rows {
            raw.push((r[0].clone().unwrap(), r[1].clone().unwrap()));
        }
    }
    // A little longer: anything beyond the expected is a duplicate.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let extra = client
        .simple_query(&format!(
            "POP FROM {sink} LIMIT 1000 PARTITIONS 50 AUTO ACK"
        ))
        .await
        .unwrap();
    for r in texts(extra, &["partition", "payload"]) {
        raw.push((r[0].clone().unwrap(), r[1].clone().unwrap()));
    }
    raw
}

async fn parse_windows(client: &Client, raw: Vec<(String, String)>) -> Windows {
    let mut out = Windows::new();
    for (p, payload) in raw {
        let row = client
            .query_one(
                "SELECT j->>'key', extract(epoch FROM (j->>'window_start')::timestamptz)::bigint,
                        extract(epoch FROM (j->>'window_end')::timestamptz)::bigint,
                        (j->>'n')::bigint, ((j->>'total')::numeric * 100)::bigint,
                        COALESCE((j->>'late')::boolean, false)
                 FROM (SELECT $1::text::jsonb AS j) s",
                &[&payload],
            )
            .await
            .unwrap();
        out.entry((p, row.get(0), row.get(1), row.get(2)))
            .or_default()
            .push((row.get(3), row.get(4), row.get(5)));
    }
    out
}

/// The windows the events make, computed here without the engine.
fn expected(events: &[Ev], windows: impl Fn(i64) -> Vec<(i64, i64)>) -> Windows {
    let mut acc: BTreeMap<(String, String, i64, i64), (i64, i64)> = BTreeMap::new();
    for (p, k, t, c) in events {
        for (s, e) in windows(*t) {
            let w = acc.entry((p.clone(), k.clone(), s, e)).or_default();
            w.0 += 1;
            w.1 += c;
        }
    }
    acc.into_iter()
        .map(|(k, (n, total))| (k, vec![(n, total, false)]))
        .collect()
}

/// Sessions per (partition, key): events in time order, a gap of `gap` s
/// or more starts a new one; a session ends at its last event + gap.
fn expected_sessions(events: &[Ev], gap: i64) -> Windows {
    let mut by: BTreeMap<(String, String), Vec<(i64, i64)>> = BTreeMap::new();
    for (p, k, t, c) in events {
        by.entry((p.clone(), k.clone())).or_default().push((*t, *c));
    }
    let mut out = Windows::new();
    for ((p, k), mut evs) in by {
        evs.sort();
        let mut current: Option<(i64, i64, i64, i64)> = None; // start, last, n, total
        for (t, c) in evs {
            current = match current {
                Some((s, last, n, total)) if t < last + gap => Some((s, t, n + 1, total + c)),
                Some((s, last, n, total)) => {
                    out.insert(
                        (p.clone(), k.clone(), s, last + gap),
                        vec![(n, total, false)],
                    );
                    Some((t, t, 1, c))
                }
                None => Some((t, t, 1, c)),
            };
        }
        if let Some((s, last, n, total)) = current {
            out.insert(
                (p.clone(), k.clone(), s, last + gap),
                vec![(n, total, false)],
            );
        }
    }
    out
}

/// Events in time order per partition, several keys, amounts with cents.
fn events(partitions: usize, per_partition: i64) -> Vec<Ev> {
    let mut out = Vec::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for p in 0..partitions {
        let mut t = 0;
        for _ in 0..per_partition {
            t += (next() % 4) as i64; // sometimes the same second
            let key = format!("k{}", next() % 3);
            out.push((format!("p{p}"), key, t, (next() % 10_000) as i64));
        }
    }
    out
}

/// One event per partition far beyond the others: it closes every window
/// before it (its own stays open).
fn closers(partitions: usize) -> Vec<Ev> {
    (0..partitions)
        .map(|p| (format!("p{p}"), "closer".to_string(), 80_000, 0))
        .collect()
}

fn without_closer(mut w: Windows) -> Windows {
    w.retain(|(_, k, _, _), _| k != "closer");
    w
}

#[tokio::test]
async fn tumbling_sliding_and_session_windows_hold_exactly_the_pushed_counts_and_sums() {
    let proxy = Proxy::start("streams_windows").await;
    let client = proxy.connect().await;
    let aggs = "AGGREGATE (count(*) AS n, sum((payload->>'amount')::numeric) AS total)";
    client
        .batch_execute(&format!(
            "CREATE STREAM tumble FROM src {common_k} WINDOW TUMBLING '10s' {et} {aggs} INTO out_tumble;
             CREATE STREAM slide FROM src {common_k} WINDOW SLIDING '30s' EVERY '10s' {et} {aggs} INTO out_slide;
             CREATE STREAM sess FROM src {common_k} WINDOW SESSION GAP '5s' {et} {aggs} INTO out_sess;",
            common_k = "KEY BY payload->>'k'",
            et = "EVENT TIME to_timestamp((payload->>'t')::bigint)",
        ))
        .await
        .unwrap();
    let evs = events(3, 300);
    push(&client, "src", &evs).await;
    push(&client, "src", &closers(3)).await;

    let tumbling = expected(&evs, |t| {
        let s = t.div_euclid(10) * 10;
        vec![(s, s + 10)]
    });
    let sliding = expected(&evs, |t| {
        (t.div_euclid(10) - 2..=t.div_euclid(10))
            .map(|k| (k * 10, k * 10 + 30))
            .collect()
    });
    let sessions = expected_sessions(&evs, 5);
    for (sink, want) in [
        ("out_tumble", tumbling),
        ("out_slide", sliding),
        ("out_sess", sessions),
    ] {
        let got = without_closer(drain(&client, sink, want.len()).await);
        assert_eq!(got.len(), want.len(), "{sink}: windows");
        assert_eq!(got, want, "{sink}");
    }
    let shown = texts(
        client.simple_query("SHOW STREAMS").await.unwrap(),
        &["stream", "messages", "lag", "open_windows"],
    );
    assert_eq!(shown.len(), 3);
    for s in shown {
        assert_eq!(s[1].as_deref(), Some("903"), "{s:?}");
        assert_eq!(s[2].as_deref(), Some("0"), "{s:?}");
    }
    // The open windows are plain rows of queen.stream_state.
    let direct = proxy.connect_direct().await;
    let open: i64 = direct
        .query_one(
            "SELECT count(*) FROM queen.stream_state WHERE key = 'closer'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(open >= 3, "{open}");
}

#[tokio::test]
async fn late_events_are_dropped_included_or_within_the_allowed_lateness() {
    let proxy = Proxy::start("streams_late").await;
    let client = proxy.connect().await;
    let et = "EVENT TIME to_timestamp((payload->>'t')::bigint)";
    let rest = "AGGREGATE (count(*) AS n, sum((payload->>'amount')::numeric) AS total)";
    client
        .batch_execute(&format!(
            "CREATE STREAM drop_late FROM src KEY BY payload->>'k' WINDOW TUMBLING 10 {et} ON LATE DROP {rest} INTO out_drop;
             CREATE STREAM keep_late FROM src KEY BY payload->>'k' WINDOW TUMBLING 10 {et} ON LATE INCLUDE {rest} INTO out_include;
             CREATE STREAM lenient FROM src KEY BY payload->>'k' WINDOW TUMBLING 10 {et} ALLOWED LATENESS '10s' {rest} INTO out_lenient;"
        ))
        .await
        .unwrap();
    let ev = |t: i64, c: i64| ("Default".to_string(), "a".to_string(), t, c);
    push(
        &client,
        "src",
        &[ev(1, 100), ev(15, 200), ev(2, 300), ev(45, 0)],
    )
    .await;
    let key = |s: i64| ("Default".to_string(), "a".to_string(), s, s + 10);

    let dropped = drain(&client, "out_drop", 2).await;
    assert_eq!(
        dropped,
        Windows::from([
            (key(0), vec![(1, 100, false)]),
            (key(10), vec![(1, 200, false)])
        ])
    );
    let included = drain(&client, "out_include", 3).await;
    assert_eq!(
        included,
        Windows::from([
            (key(0), vec![(1, 100, false), (1, 300, true)]),
            (key(10), vec![(1, 200, false)])
        ])
    );
    // Watermark 15 - 10 = 5 when t=2 arrives: [0, 10) is still open.
    let lenient = drain(&client, "out_lenient", 2).await;
    assert_eq!(
        lenient,
        Windows::from([
            (key(0), vec![(2, 400, false)]),
            (key(10), vec![(1, 200, false)])
        ])
    );
    let late = texts(
        client.simple_query("SHOW STREAMS").await.unwrap(),
        &["stream", "late_dropped"],
    );
    assert!(
        late.contains(&vec![Some("drop_late".into()), Some("1".into())]),
        "{late:?}"
    );
    assert!(
        late.contains(&vec![Some("keep_late".into()), Some("0".into())]),
        "{late:?}"
    );
}

fn code(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_default()
}

#[tokio::test]
async fn a_changed_definition_needs_or_replace_and_a_bad_expression_gets_postgresql_s_own_error() {
    let proxy = Proxy::start("streams_ddl").await;
    let client = proxy.connect().await;
    let def = "FROM src KEY BY payload->>'k' WINDOW TUMBLING '1m' AGGREGATE (count(*)) INTO out";
    client
        .batch_execute(&format!("CREATE STREAM s {def}"))
        .await
        .unwrap();
    // The same definition again changes nothing.
    client
        .batch_execute(&format!("CREATE STREAM s {def}"))
        .await
        .unwrap();
    // SHOW STREAMS says it as a CREATE STREAM would, every default spelt
    // out, and what it says is the same definition (no 42710).
    let shown = texts(
        client.simple_query("SHOW STREAMS").await.unwrap(),
        &["definition"],
    );
    let shown = shown[0][0].clone().unwrap_or_default();
    assert_eq!(
        shown,
        "FROM src GROUP \"stream:s\" SUBSCRIBE FROM BEGINNING KEY BY payload->>'k' \
         WINDOW TUMBLING '60000ms' AGGREGATE (count(*) AS count) INTO \"out\""
    );
    client
        .batch_execute(&format!("CREATE STREAM s {shown}"))
        .await
        .unwrap();
    let changed = "FROM src KEY BY payload->>'k' WINDOW TUMBLING '1m' GRACE '5s' AGGREGATE (count(*)) INTO out";
    let e = client
        .batch_execute(&format!("CREATE STREAM s {changed}"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42710", "{e:?}");
    client
        .batch_execute(&format!("CREATE OR REPLACE STREAM s {changed}"))
        .await
        .unwrap();
    let reshaped =
        "FROM src KEY BY payload->>'k' WINDOW TUMBLING '2m' AGGREGATE (count(*)) INTO out";
    let e = client
        .batch_execute(&format!("CREATE OR REPLACE STREAM s {reshaped}"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "55000", "{e:?}");
    client
        .batch_execute(&format!("CREATE OR REPLACE STREAM s {reshaped} RESET"))
        .await
        .unwrap();

    // PostgreSQL reads the expressions, and its error is the answer.
    let e = client
        .batch_execute("CREATE STREAM bad FROM src KEY BY payload->>nosuch WINDOW TUMBLING 60 AGGREGATE (count(*)) INTO out")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42703", "{e:?}");
    let e = client
        .batch_execute("CREATE STREAM bad FROM src WHERE (payload->>'a') + 1 > 0 WINDOW TUMBLING 60 AGGREGATE (count(*)) INTO out")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42883", "{e:?}");
    let e = client
        .batch_execute(
            "CREATE STREAM bad FROM src WINDOW TUMBLING 60 AGGREGATE (sum(now())) INTO out",
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42846", "{e:?}");
    assert!(texts(
        client.simple_query("SHOW STREAMS").await.unwrap(),
        &["stream"]
    )
    .iter()
    .all(|r| r[0].as_deref() == Some("s")));

    // Inside a transaction block: refused (the stream tables' locks come
    // before every queue lock).
    client.batch_execute("BEGIN").await.unwrap();
    let e = client.batch_execute("DROP STREAM s").await.unwrap_err();
    assert_eq!(code(&e), "25001", "{e:?}");
    client.batch_execute("ROLLBACK").await.unwrap();

    // Over the extended protocol, Describe answers before Execute.
    let show = client.prepare("SHOW STREAMS").await.unwrap();
    assert_eq!(show.columns()[0].name(), "stream");
    assert_eq!(show.columns().len(), 14);
    let one = client.prepare("SHOW STREAM $1").await.unwrap();
    assert_eq!(
        one.columns()[4].type_(),
        &tokio_postgres::types::Type::JSONB
    );
    assert!(client.query(&one, &[&"s"]).await.unwrap().is_empty());
    let pause = client.prepare("ALTER STREAM $1 PAUSE").await.unwrap();
    client.execute(&pause, &[&"s"]).await.unwrap();
    let paused = texts(
        client.simple_query("SHOW STREAMS").await.unwrap(),
        &["paused"],
    );
    assert_eq!(paused, vec![vec![Some("t".to_string())]]);
    client.batch_execute("ALTER STREAM s RESUME").await.unwrap();
    // CREATE with parameters for its names and durations.
    let create = client
        .prepare(
            "CREATE STREAM $1 FROM $2 WINDOW TUMBLING $3 GRACE $4 AGGREGATE (count(*)) INTO $5",
        )
        .await
        .unwrap();
    assert!(create.columns().is_empty());
    assert_eq!(create.params().len(), 5);
    client
        .execute(&create, &[&"p", &"src", &"30s", &"1s", &"p_out"])
        .await
        .unwrap();
    client
        .batch_execute("DROP STREAM p")
        .await
        .unwrap_or_else(|e| panic!("DROP STREAM p: {e:?}"));
    let e = client
        .batch_execute("SHOW STREAM nosuch")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42704", "{e:?}");
    let e = client
        .batch_execute("DROP STREAM nosuch")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42704", "{e:?}");
    client
        .batch_execute("DROP STREAM IF EXISTS nosuch; DROP STREAM s")
        .await
        .unwrap();
    assert!(client
        .simple_query("SHOW STREAMS")
        .await
        .unwrap()
        .iter()
        .all(|m| !matches!(m, SimpleQueryMessage::Row(_))));
    // PostgreSQL's own statements about other objects still pass.
    client
        .batch_execute("CREATE TABLE stream (x int); DROP TABLE stream")
        .await
        .unwrap();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn backend_string(db: &tokio_postgres::Config) -> String {
    let host = match &db.get_hosts()[0] {
        Host::Unix(path) => path.display().to_string(),
        Host::Tcp(name) => name.clone(),
    };
    format!(
        "host={host} port={} user={} dbname={}",
        db.get_ports()[0],
        db.get_user().unwrap(),
        db.get_dbname().unwrap()
    )
}

/// A queenwire process; killed (SIGKILL) and reaped when dropped.
struct Process {
    child: Child,
    port: u16,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn spawn(db: &tokio_postgres::Config) -> (Process, Client) {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_queenwire"))
        .args([
            "--backend",
            &backend_string(db),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--pool-size",
            "3",
            "--log-level",
            "warn",
        ])
        .env_remove("DATABASE_URL")
        .env_remove("QUEENWIRE_BACKEND")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let child = Process { child, port };
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1").port(port).user("tester").dbname("x");
    let began = Instant::now();
    loop {
        if let Ok((client, conn)) = cfg.connect(tokio_postgres::NoTls).await {
            tokio::spawn(async move {
                let _ = conn.await;
            });
            return (child, client);
        }
        assert!(began.elapsed() < HANG, "queenwire did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn tumbling(evs: &[Ev]) -> Windows {
    expected(evs, |t| {
        let s = t.div_euclid(10) * 10;
        vec![(s, s + 10)]
    })
}

const TUMBLING: &str = "CREATE STREAM totals FROM src KEY BY payload->>'k' WINDOW TUMBLING 10 EVENT TIME to_timestamp((payload->>'t')::bigint) AGGREGATE (count(*) AS n, sum((payload->>'amount')::numeric) AS total) INTO out";

/// Waits until the sink holds some windows (the stream is running), not
/// taking them.
async fn running(direct: &Client) {
    let began = Instant::now();
    loop {
        let n: i64 = direct
            .query_one(
                "SELECT COALESCE(sum(windows_emitted), 0)::bigint FROM queen.stream_partitions",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            return;
        }
        assert!(began.elapsed() < HANG, "the stream never emitted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_kill_9_mid_stream_then_a_restart_emits_every_window_exactly_once() {
    let db = common::cluster::fresh_database("streams_kill");
    let (first, client) = spawn(&db).await;
    let direct = connect(&db).await;
    client.batch_execute(TUMBLING).await.unwrap();
    let evs = events(4, 5_000);
    let (before, after) = evs.split_at(evs.len() / 2);
    push(&client, "src", before).await;
    running(&direct).await;
    // SIGKILL while it works through the first half.
    drop(first);
    let done: i64 = direct
        .query_one(
            "SELECT COALESCE(sum(messages), 0)::bigint FROM queen.stream_partitions",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    println!("killed after {done} of {} messages", before.len());
    drop(client);
    let (_second, client) = spawn(&db).await;
    push(&client, "src", after).await;
    push(&client, "src", &closers(4)).await;
    let want = tumbling(&evs);
    let got = without_closer(drain(&client, "out", want.len()).await);
    let twice: Vec<_> = got.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(twice.is_empty(), "emitted more than once: {twice:?}");
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
}

#[tokio::test]
async fn two_queenwires_share_a_stream_never_run_one_partition_at_once_and_one_takes_over_when_the_other_dies(
) {
    let db = common::cluster::fresh_database("streams_two");
    let (_a, client_a) = spawn(&db).await;
    let (_b, client_b) = spawn(&db).await;
    client_a.batch_execute(TUMBLING).await.unwrap();
    let evs = events(8, 2_000);
    let (half_a, half_b): (Vec<Ev>, Vec<Ev>) =
        evs.iter().cloned().partition(|e| e.0.as_str() < "p4");
    // Both push at once, each to its own partitions; both run the stream.
    tokio::join!(
        push(&client_a, "src", &half_a),
        push(&client_b, "src", &half_b)
    );
    push(&client_a, "src", &closers(8)).await;
    // Then A dies (kill -9) with whatever batches it holds: B takes its
    // partitions over once their leases run out.
    drop(_a);
    let killed = Instant::now();
    let want = tumbling(&evs);
    let got = without_closer(drain(&client_b, "out", want.len()).await);
    println!(
        "every window was in the sink {:.1} s after A was killed (leases of 10 s)",
        killed.elapsed().as_secs_f64() - 1.5
    );
    let twice: Vec<_> = got.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(twice.is_empty(), "emitted more than once: {twice:?}");
    assert_eq!(got, want);
    let _ = _b.port;
}

#[tokio::test]
async fn expressions_run_with_the_tenant_s_own_rights_never_the_engine_s() {
    use queenwire::users::{Passthrough, User, Users, Verifier};
    use uuid::Uuid;
    let mut users = Users::default();
    for (name, tenant, passthrough) in [
        ("a", 0xa, Passthrough::Full),
        ("b", 0xb, Passthrough::Full),
        ("n", 0xc, Passthrough::None),
    ] {
        users.users.insert(
            name.into(),
            User {
                name: name.into(),
                tenant: Uuid::from_u128(tenant),
                passthrough,
                verifier: Verifier::new("pw"),
            },
        );
    }
    let users = std::sync::Arc::new(users);
    let proxy = Proxy::start_with("streams_rights", |c| c.users = Some(users.clone())).await;
    let login = |name: &'static str| {
        let mut cfg = proxy.client_config();
        cfg.user(name).password("pw");
        cfg
    };
    let a = connect(&login("a")).await;
    let b = connect(&login("b")).await;
    let n = connect(&login("n")).await;
    // Reading the engine's tables from an expression: PostgreSQL refuses it,
    // because the expression runs as tenant a's role.
    let e = a
        .batch_execute("CREATE STREAM peek FROM src KEY BY (SELECT count(*)::text FROM queen.log_segments) WINDOW TUMBLING 10 AGGREGATE (count(*)) INTO out")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42501", "{e:?}");
    // A user without plain SQL has no role to run expressions as.
    let e = n
        .batch_execute("CREATE STREAM s FROM src WINDOW TUMBLING 10 AGGREGATE (count(*)) INTO out")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42501", "{e:?}");
    // An ordinary stream runs, evaluated on the tenant's role.
    a.batch_execute(TUMBLING).await.unwrap();
    let evs = events(1, 50);
    push(&a, "src", &evs).await;
    push(&a, "src", &closers(1)).await;
    let want = tumbling(&evs);
    assert_eq!(without_closer(drain(&a, "out", want.len()).await), want);
    // The open windows in plain SQL: the view, filtered by tenant; the
    // table itself is the engine's.
    let open = a
        .query("SELECT stream, key FROM queen.stream_windows", &[])
        .await
        .unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].get::<_, String>(1), "closer");
    let e = a
        .query("SELECT * FROM queen.stream_state", &[])
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42501", "{e:?}");
    // Another tenant sees none of it and cannot touch it.
    assert!(b
        .query("SELECT * FROM queen.stream_windows", &[])
        .await
        .unwrap()
        .is_empty());
    assert!(texts(b.simple_query("SHOW STREAMS").await.unwrap(), &["stream"]).is_empty());
    let e = b.batch_execute("DROP STREAM totals").await.unwrap_err();
    assert_eq!(code(&e), "42704", "{e:?}");
    let e = b.batch_execute("SHOW STREAM totals").await.unwrap_err();
    assert_eq!(code(&e), "42704", "{e:?}");
}

#[tokio::test]
async fn processing_time_windows_on_a_quiet_partition_close_by_idle_flush() {
    let proxy = Proxy::start("streams_idle").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE STREAM quiet FROM src KEY BY payload->>'k' WINDOW TUMBLING '1s' IDLE FLUSH '500ms' AGGREGATE (count(*) AS n, sum((payload->>'amount')::numeric) AS total, avg((payload->>'amount')::numeric) AS mean, first(payload->'t') AS first_t, last(payload->'t') AS last_t, min((payload->>'t')::int) AS lo, max((payload->>'t')::int) AS hi) INTO out")
        .await
        .unwrap();
    let evs: Vec<Ev> = (0..5)
        .map(|t| ("Default".to_string(), "a".to_string(), t, 100 * (t + 1)))
        .collect();
    push(&client, "src", &evs).await;
    // Nothing more is pushed: only the wall clock closes the window(s).
    // One PUSH gives its messages one created_at: one window.
    let raw = drain_raw(&client, "out", 1).await;
    assert_eq!(raw.len(), 1, "{raw:?}");
    let row = client
        .query_one(
            "SELECT (j->>'n')::int, (j->>'total')::numeric::text, (j->>'mean')::numeric::text,
                    j->>'first_t', j->>'last_t', j->>'lo', j->>'hi', j ? 'late'
             FROM (SELECT $1::text::jsonb AS j) s",
            &[&raw[0].1],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 5);
    assert_eq!(row.get::<_, String>(1), "15.00");
    assert_eq!(row.get::<_, String>(2), "3");
    let texts: Vec<String> = (3..7).map(|i| row.get(i)).collect();
    assert_eq!(texts, ["0", "4", "0", "4"]);
    assert!(!row.get::<_, bool>(7));
}

#[tokio::test]
async fn postgresql_itself_rejects_every_stream_statement_so_the_dialect_takes_nothing_of_its() {
    let proxy = Proxy::start("streams_pg").await;
    let direct = proxy.connect_direct().await;
    for sql in [
        "CREATE STREAM s FROM q WINDOW TUMBLING 10 AGGREGATE (count(*)) INTO o",
        "CREATE OR REPLACE STREAM s FROM q WINDOW TUMBLING 10 AGGREGATE (count(*)) INTO o RESET",
        "DROP STREAM s",
        "DROP STREAM IF EXISTS s",
        "ALTER STREAM s PAUSE",
        "SHOW STREAM s",
    ] {
        let e = direct.batch_execute(sql).await.unwrap_err();
        assert_eq!(code(&e), "42601", "{sql}: {e:?}");
    }
    let e = direct.batch_execute("SHOW STREAMS").await.unwrap_err();
    assert_eq!(code(&e), "42704", "{e:?}");
}

#[tokio::test]
async fn purge_tenant_removes_the_tenant_s_streams_and_their_windows() {
    let proxy = Proxy::start("streams_purge").await;
    let client = proxy.connect().await;
    client.batch_execute(TUMBLING).await.unwrap();
    push(&client, "src", &events(2, 20)).await;
    let direct = proxy.connect_direct().await;
    let count = |table: &'static str| {
        let direct = &direct;
        async move {
            direct
                .query_one(&format!("SELECT count(*) FROM queen.{table}"), &[])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    let began = Instant::now();
    while count("stream_state").await == 0 {
        assert!(began.elapsed() < HANG, "no window opened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client
        .batch_execute("PURGE TENANT '00000000-0000-0000-0000-000000000001'")
        .await
        .unwrap();
    for table in ["streams", "stream_partitions", "stream_state"] {
        assert_eq!(count(table).await, 0, "{table}");
    }
}

#[tokio::test]
async fn a_slow_expression_fails_its_own_cycles_and_holds_up_no_other_stream() {
    let proxy = Proxy::start("streams_slow").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE STREAM slow FROM slow_src KEY BY (SELECT pg_sleep(8)::text) WINDOW TUMBLING 10 AGGREGATE (count(*)) INTO slow_out")
        .await
        .unwrap();
    client.batch_execute(TUMBLING).await.unwrap();
    push(&client, "slow_src", &events(1, 3)).await;
    let evs = events(1, 100);
    push(&client, "src", &evs).await;
    push(&client, "src", &closers(1)).await;
    let want = tumbling(&evs);
    assert_eq!(
        without_closer(drain(&client, "out", want.len()).await),
        want
    );
    let began = Instant::now();
    loop {
        let rows = texts(
            client.simple_query("SHOW STREAMS").await.unwrap(),
            &["stream", "last_error"],
        );
        let slow = rows
            .iter()
            .find(|r| r[0].as_deref() == Some("slow"))
            .unwrap();
        if let Some(e) = &slow[1] {
            assert!(e.contains("took longer than"), "{e}");
            break;
        }
        assert!(began.elapsed() < HANG, "no error noted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn subscribe_from_now_or_a_timestamp_skips_what_came_before() {
    let proxy = Proxy::start("streams_subscribe").await;
    let client = proxy.connect().await;
    let early: Vec<Ev> = (0..5)
        .map(|t| ("Default".to_string(), "a".to_string(), t, 100))
        .collect();
    push(&client, "src", &early).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let direct = proxy.connect_direct().await;
    let cut: String = direct
        .query_one("SELECT now()::text", &[])
        .await
        .unwrap()
        .get(0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let rest = "KEY BY payload->>'k' WINDOW TUMBLING 10 EVENT TIME to_timestamp((payload->>'t')::bigint) AGGREGATE (count(*) AS n, sum((payload->>'amount')::numeric) AS total)";
    client
        .batch_execute(&format!(
            "CREATE STREAM from_now FROM src SUBSCRIBE FROM NOW {rest} INTO out_now;
             CREATE STREAM from_cut FROM src SUBSCRIBE FROM '{cut}' {rest} INTO out_cut;
             CREATE STREAM from_start FROM src {rest} INTO out_start;"
        ))
        .await
        .unwrap();
    // Each group's first POP fixes where it starts: wait until all three
    // were seen.
    let began = Instant::now();
    loop {
        let seen: i64 = direct
            .query_one(
                "SELECT count(*) FROM queen.consumer_groups_metadata WHERE consumer_group LIKE 'stream:from_%'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if seen == 3 {
            break;
        }
        assert!(began.elapsed() < HANG, "the groups were never seen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let late: Vec<Ev> = (20..25)
        .map(|t| ("Default".to_string(), "a".to_string(), t, 1))
        .collect();
    push(&client, "src", &late).await;
    let closer = ("Default".to_string(), "closer".to_string(), 80_000, 0);
    push(&client, "src", &[closer]).await;
    let key = |s: i64| ("Default".to_string(), "a".to_string(), s, s + 10);
    let only_late = Windows::from([(key(20), vec![(5, 5, false)])]);
    let everything = Windows::from([
        (key(0), vec![(5, 500, false)]),
        (key(20), vec![(5, 5, false)]),
    ]);
    for (sink, want) in [
        ("out_now", &only_late),
        ("out_cut", &only_late),
        ("out_start", &everything),
    ] {
        let got = without_closer(drain(&client, sink, want.len()).await);
        assert_eq!(&got, want, "{sink}");
    }
}

#[tokio::test]
async fn or_replace_with_reset_reads_the_source_again_under_the_new_definition() {
    let proxy = Proxy::start("streams_reset").await;
    let client = proxy.connect().await;
    client.batch_execute(TUMBLING).await.unwrap();
    let evs = events(2, 200);
    push(&client, "src", &evs).await;
    push(&client, "src", &closers(2)).await;
    let want = tumbling(&evs);
    assert_eq!(
        without_closer(drain(&client, "out", want.len()).await),
        want
    );
    client
        .batch_execute(&format!(
            "{} RESET",
            TUMBLING
                .replace("CREATE STREAM", "CREATE OR REPLACE STREAM")
                .replace("TUMBLING 10", "TUMBLING 20")
                .replace("INTO out", "INTO out20")
        ))
        .await
        .unwrap();
    let want20 = expected(&evs, |t| {
        let s = t.div_euclid(20) * 20;
        vec![(s, s + 20)]
    });
    assert_eq!(
        without_closer(drain(&client, "out20", want20.len()).await),
        want20
    );
}

#[tokio::test]
async fn a_message_the_expressions_fail_on_is_retried_then_dead_lettered_and_the_rest_go_on() {
    let proxy = Proxy::start("streams_poison").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE src WITH (retry_limit = 1, retry_delay = '100ms')")
        .await
        .unwrap();
    client.batch_execute(TUMBLING).await.unwrap();
    let mut evs = events(1, 40);
    for e in &mut evs {
        e.0 = "Default".to_string();
    }
    push(&client, "src", &evs[..20]).await;
    client
        .batch_execute(
            "PUSH INTO src VALUES ('{\"k\": \"k0\", \"t\": 1, \"amount\": \"not a number\"}')",
        )
        .await
        .unwrap();
    push(&client, "src", &evs[20..]).await;
    let closer = ("Default".to_string(), "closer".to_string(), 80_000, 0);
    push(&client, "src", &[closer]).await;
    // Every good message counted once; the bad one in the DLQ, with the
    // error as the reason.
    let want = tumbling(&evs);
    assert_eq!(
        without_closer(drain(&client, "out", want.len()).await),
        want
    );
    let dlq = texts(
        client.simple_query("SHOW DLQ FROM src").await.unwrap(),
        &["payload", "reason", "group"],
    );
    assert_eq!(dlq.len(), 1, "{dlq:?}");
    assert!(
        dlq[0][0].as_deref().unwrap_or("").contains("not a number"),
        "{dlq:?}"
    );
    assert!(
        dlq[0][1]
            .as_deref()
            .unwrap_or("")
            .contains("invalid input syntax"),
        "{dlq:?}"
    );
    assert_eq!(dlq[0][2].as_deref(), Some("stream:totals"));
}

/// Pushes payloads (JSON texts) into one partition, in order.
async fn push_payloads(client: &Client, queue: &str, partition: &str, payloads: &[String]) {
    for chunk in payloads.chunks(150) {
        let rows: Vec<String> = chunk
            .iter()
            .map(|p| format!("('{partition}', '{}')", p.replace('\'', "''")))
            .collect();
        client
            .batch_execute(&format!(
                "PUSH INTO {queue} (partition, payload) VALUES {}",
                rows.join(", ")
            ))
            .await
            .unwrap();
    }
}

/// (partition, key, window start) → what a reduce stream emitted: the ids
/// its collecting function gathered, the id of its max-by-amount object,
/// and the count.
type Folded = BTreeMap<(String, String, i64), Vec<(Vec<i64>, i64, i64)>>;

async fn folded(client: &Client, raw: Vec<(String, String)>) -> Folded {
    let mut out = Folded::new();
    for (p, payload) in raw {
        let row = client
            .query_one(
                "SELECT j->>'key', extract(epoch FROM (j->>'window_start')::timestamptz)::bigint,
                        ARRAY(SELECT x::bigint FROM jsonb_array_elements_text(j->'ids') AS x),
                        (j->'top'->>'id')::bigint, (j->>'n')::bigint
                 FROM (SELECT $1::text::jsonb AS j) s",
                &[&payload],
            )
            .await
            .unwrap();
        out.entry((p, row.get(0), row.get(1))).or_default().push((
            row.get(2),
            row.get(3),
            row.get(4),
        ));
    }
    out
}

#[tokio::test]
async fn reduce_folds_each_tumbling_and_sliding_window_over_a_sql_function_in_order() {
    let proxy = Proxy::start("streams_reduce").await;
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE FUNCTION collect_ids(state jsonb, payload jsonb) RETURNS jsonb
               LANGUAGE sql AS $$ SELECT state || jsonb_build_array(payload->'id') $$;
             CREATE FUNCTION max_by_amount(state jsonb, payload jsonb) RETURNS jsonb
               LANGUAGE sql AS $$ SELECT CASE WHEN state = '{}'::jsonb
                 OR (payload->>'amount')::numeric > (state->>'amount')::numeric
                 THEN payload ELSE state END $$;",
        )
        .await
        .unwrap();
    let aggs = "AGGREGATE (count(*) AS n, reduce(collect_ids, '[]') AS ids, reduce(public.max_by_amount, '{}'::jsonb) AS top)";
    let common = "KEY BY payload->>'k'";
    let et = "EVENT TIME to_timestamp((payload->>'t')::bigint)";
    client
        .batch_execute(&format!(
            "CREATE STREAM r_tumble FROM src {common} WINDOW TUMBLING '10s' {et} {aggs} INTO out_tumble;
             CREATE STREAM r_slide FROM src {common} WINDOW SLIDING '30s' EVERY '10s' {et} {aggs} INTO out_slide;"
        ))
        .await
        .unwrap();
    // Two partitions, each in time order, several batches (pushed in
    // chunks), ids unique, amounts with ties (the first one stays top).
    let evs = events(2, 400);
    let mut by_partition: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, (p, k, t, c)) in evs.iter().enumerate() {
        by_partition.entry(p.clone()).or_default().push(format!(
            "{{\"id\": {id}, \"k\": \"{k}\", \"t\": {t}, \"amount\": \"{}\"}}",
            amount(c % 50)
        ));
    }
    for (p, payloads) in &by_partition {
        push_payloads(&client, "src", p, payloads).await;
        push_payloads(
            &client,
            "src",
            p,
            &["{\"id\": -1, \"k\": \"closer\", \"t\": 80000, \"amount\": \"0\"}".to_string()],
        )
        .await;
    }
    // Computed here, without the engine: per window, the ids in offset
    // order, the first id of the largest amount.
    let want = |windows: &dyn Fn(i64) -> Vec<i64>| {
        // (ids, top id, top amount, count) per window.
        type Acc = (Vec<i64>, i64, i64, i64);
        let mut acc: BTreeMap<(String, String, i64), Acc> = BTreeMap::new();
        for (id, (p, k, t, c)) in evs.iter().enumerate() {
            for s in windows(*t) {
                let w = acc
                    .entry((p.clone(), k.clone(), s))
                    .or_insert((Vec::new(), -1, -1, 0));
                w.0.push(id as i64);
                if c % 50 > w.2 {
                    w.1 = id as i64;
                    w.2 = c % 50;
                }
                w.3 += 1;
            }
        }
        acc.into_iter()
            .map(|(k, (ids, top, _, n))| (k, vec![(ids, top, n)]))
            .collect::<Folded>()
    };
    let tumbling = want(&|t| vec![t.div_euclid(10) * 10]);
    let sliding = want(&|t| {
        (t.div_euclid(10) - 2..=t.div_euclid(10))
            .map(|k| k * 10)
            .collect()
    });
    for (sink, want) in [("out_tumble", tumbling), ("out_slide", sliding)] {
        let raw = drain_raw(&client, sink, want.len()).await;
        let mut got = folded(&client, raw).await;
        got.retain(|(_, k, _), _| k != "closer");
        assert_eq!(got.len(), want.len(), "{sink}: windows");
        assert_eq!(got, want, "{sink}");
    }
    // The open windows keep the folded state as jsonb, queryable.
    let direct = proxy.connect_direct().await;
    let ids: String = direct
        .query_one(
            "SELECT (state->'ids')::text FROM queen.stream_state st JOIN queen.streams s ON s.id = st.stream_id
             WHERE s.name = 'r_tumble' AND st.key = 'closer' LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ids, "[[-1]]");
}

#[tokio::test]
async fn reduce_is_refused_with_session_windows_and_a_bad_function_gets_postgresql_s_own_error() {
    use queenwire::users::{Passthrough, User, Users, Verifier};
    use uuid::Uuid;
    let mut users = Users::default();
    users.users.insert(
        "a".into(),
        User {
            name: "a".into(),
            tenant: Uuid::from_u128(0xa),
            passthrough: Passthrough::Full,
            verifier: Verifier::new("pw"),
        },
    );
    let users = std::sync::Arc::new(users);
    let proxy = Proxy::start_with("streams_reduce_bad", |c| c.users = Some(users.clone())).await;
    let mut cfg = proxy.client_config();
    cfg.user("a").password("pw");
    let a = connect(&cfg).await;
    // The functions are the database owner's; EXECUTE is PUBLIC's unless
    // revoked.
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute(
            "CREATE FUNCTION public.f1(s jsonb, p jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT s $$;
             CREATE FUNCTION public.f2(s jsonb, p jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT p $$;
             CREATE FUNCTION public.as_text(s text, p text) RETURNS text LANGUAGE sql AS $$ SELECT s $$;
             CREATE FUNCTION public.gives_text(s jsonb, p jsonb) RETURNS text LANGUAGE sql AS $$ SELECT s::text $$;
             CREATE FUNCTION public.private(s jsonb, p jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT s $$;
             REVOKE EXECUTE ON FUNCTION public.private(jsonb, jsonb) FROM PUBLIC;",
        )
        .await
        .unwrap();
    let create = |agg: &str, window: &str| {
        format!("CREATE STREAM r FROM src WINDOW {window} AGGREGATE ({agg}) INTO out")
    };
    for (agg, window, want) in [
        ("reduce(f1, '{}')", "SESSION GAP '5s'", "0A000"),
        ("reduce(nosuch, '{}')", "TUMBLING 10", "42883"),
        ("reduce(as_text, '{}')", "TUMBLING 10", "42883"),
        ("reduce(gives_text, '{}')", "TUMBLING 10", "42804"),
        ("reduce(f1, '{not json')", "TUMBLING 10", "22P02"),
        ("reduce(private, '{}')", "TUMBLING 10", "42501"),
        ("reduce(f1(1), '{}')", "TUMBLING 10", "42601"),
    ] {
        let e = a.batch_execute(&create(agg, window)).await.unwrap_err();
        assert_eq!(code(&e), want, "{agg}: {e:?}");
    }
    assert!(texts(a.simple_query("SHOW STREAMS").await.unwrap(), &["stream"]).is_empty());
    // The function is part of the definition (and of the state's shape).
    a.batch_execute(&create("reduce(f1, '{}') AS x", "TUMBLING 10"))
        .await
        .unwrap();
    a.batch_execute(&create("reduce(f1, '{}') AS x", "TUMBLING 10"))
        .await
        .unwrap();
    let e = a
        .batch_execute(&create("reduce(f2, '{}') AS x", "TUMBLING 10"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42710", "{e:?}");
    let e = a
        .batch_execute(
            &create("reduce(f1, '[]') AS x", "TUMBLING 10").replace("CREATE", "CREATE OR REPLACE"),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), "55000", "{e:?}");
    a.batch_execute(&format!(
        "{} RESET",
        create("reduce(f2, '{}') AS x", "TUMBLING 10").replace("CREATE", "CREATE OR REPLACE")
    ))
    .await
    .unwrap();
    // A text min/max is typed on the tenant's role too.
    a.batch_execute("CREATE STREAM names FROM src WINDOW TUMBLING 10 AGGREGATE (min(payload->>'name') AS lo, max(now()) AS at) INTO out")
        .await
        .unwrap();
    let fns: String = direct
        .query_one(
            "SELECT agg_fns::text FROM queen.streams WHERE name = 'names'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(fns, "{min_text,max_timestamptz}");
    a.batch_execute("DROP STREAM names").await.unwrap();
    let def = texts(
        a.simple_query("SHOW STREAMS").await.unwrap(),
        &["definition"],
    );
    assert!(
        def[0][0]
            .as_deref()
            .unwrap_or("")
            .contains("reduce(f2, '{}') AS x"),
        "{def:?}"
    );
}

#[tokio::test]
async fn a_reduce_that_raises_rolls_its_cycle_back_and_the_batch_comes_again_once_the_function_is_fixed(
) {
    let proxy = Proxy::start("streams_reduce_raise").await;
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE FUNCTION picky(s jsonb, p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
             BEGIN
               IF p ? 'boom' THEN RAISE EXCEPTION 'picky does not take %', p->'id'; END IF;
               RETURN s || jsonb_build_array(p->'id');
             END $$;
             CREATE STREAM r FROM src WINDOW TUMBLING 10 EVENT TIME to_timestamp((payload->>'t')::bigint)
               AGGREGATE (count(*) AS n, reduce(picky, '[]') AS ids) INTO out;",
        )
        .await
        .unwrap();
    let payloads: Vec<String> = (1..=5)
        .map(|i| {
            let boom = if i == 3 { ", \"boom\": true" } else { "" };
            format!("{{\"id\": {i}, \"t\": {i}{boom}}}")
        })
        .chain(["{\"id\": 99, \"t\": 100}".to_string()])
        .collect();
    push_payloads(&client, "src", "Default", &payloads).await;
    // The cycle fails: its error is noted, nothing is kept.
    let began = Instant::now();
    let error = loop {
        let shown = texts(
            client.simple_query("SHOW STREAMS").await.unwrap(),
            &["last_error", "messages"],
        );
        if let Some(e) = shown[0][0].clone() {
            assert_eq!(shown[0][1].as_deref(), Some("0"), "{shown:?}");
            break e;
        }
        assert!(began.elapsed() < HANG, "no error noted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(error.contains("picky does not take 3"), "{error}");
    let direct = proxy.connect_direct().await;
    let kept: i64 = direct
        .query_one("SELECT count(*) FROM queen.stream_state", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 0);
    assert!(texts(
        client
            .simple_query("POP FROM out LIMIT 10 AUTO ACK")
            .await
            .unwrap(),
        &["payload"]
    )
    .is_empty());
    // Fixed: the batch comes back after its lease and the window is
    // emitted once, with every message folded in order.
    client
        .batch_execute(
            "CREATE OR REPLACE FUNCTION picky(s jsonb, p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
             BEGIN RETURN s || jsonb_build_array(p->'id'); END $$;",
        )
        .await
        .unwrap();
    let raw = drain_raw(&client, "out", 1).await;
    assert_eq!(raw.len(), 1, "{raw:?}");
    let row = client
        .query_one(
            "SELECT (j->>'n')::int, (j->'ids')::text FROM (SELECT $1::text::jsonb AS j) s",
            &[&raw[0].1],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 5);
    assert_eq!(row.get::<_, String>(1), "[1, 2, 3, 4, 5]");
}

#[tokio::test]
async fn min_and_max_over_text_and_timestamptz_follow_postgresql_s_order() {
    let proxy = Proxy::start("streams_min_max").await;
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE STREAM mm FROM src KEY BY payload->>'k' WINDOW TUMBLING 10
               EVENT TIME to_timestamp((payload->>'t')::bigint)
               AGGREGATE (min(payload->>'name') AS lo_name, max(payload->>'name') AS hi_name,
                          min((payload->>'at')::timestamptz) AS first_at,
                          max((payload->>'at')::timestamptz) AS last_at,
                          max((payload->>'amount')::numeric) AS top)
               INTO out",
        )
        .await
        .unwrap();
    let names = [
        "pear", "Apple", "apple", "Éclair", "eclair", "zebra", "Zoo", "banana", "10", "9", "ä",
        "a b", "ab",
    ];
    // Per key k0..k2, times 0..39 (four windows each), a name (sometimes
    // none), a timestamp with microseconds and a zone, an amount.
    let mut evs = Vec::new();
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for t in 0..40i64 {
        for k in 0..3 {
            let r = next();
            let name = if r % 7 == 0 {
                None
            } else {
                Some(names[(r % names.len() as u64) as usize])
            };
            let us = 1_700_000_000_000_000 + (next() % 10_000_000_000) as i64;
            evs.push((format!("k{k}"), t, name, us, (next() % 1000) as i64));
        }
    }
    let payloads: Vec<String> = evs
        .iter()
        .map(|(k, t, name, us, c)| {
            let name = name.map_or(String::new(), |n| format!(", \"name\": \"{n}\""));
            // The same instant written in another zone: ordered by instant.
            let at = chrono_like(*us);
            format!(
                "{{\"k\": \"{k}\", \"t\": {t}{name}, \"at\": \"{at}\", \"amount\": \"{}\"}}",
                amount(*c)
            )
        })
        .chain([
            "{\"k\": \"closer\", \"t\": 90000, \"at\": \"2026-01-01\", \"amount\": \"0\"}"
                .to_string(),
        ])
        .collect();
    push_payloads(&client, "src", "Default", &payloads).await;

    type Event<'a> = (String, i64, Option<&'a str>, i64, i64);
    let mut windows: BTreeMap<(String, i64), Vec<&Event>> = BTreeMap::new();
    for e in &evs {
        windows
            .entry((e.0.clone(), e.1.div_euclid(10) * 10))
            .or_default()
            .push(e);
    }
    let raw = drain_raw(&client, "out", windows.len()).await;
    let direct = proxy.connect_direct().await;
    let mut got = BTreeMap::new();
    for (_, payload) in raw {
        let row = client
            .query_one(
                "SELECT j->>'key', extract(epoch FROM (j->>'window_start')::timestamptz)::bigint,
                        j->>'lo_name', j->>'hi_name',
                        (extract(epoch FROM (j->>'first_at')::timestamptz) * 1000000)::bigint,
                        (extract(epoch FROM (j->>'last_at')::timestamptz) * 1000000)::bigint,
                        ((j->>'top')::numeric * 100)::bigint,
                        jsonb_typeof(j->'lo_name') || jsonb_typeof(j->'first_at') || jsonb_typeof(j->'top')
                 FROM (SELECT $1::text::jsonb AS j) s",
                &[&payload],
            )
            .await
            .unwrap();
        let key: String = row.get(0);
        if key == "closer" {
            continue;
        }
        assert_eq!(row.get::<_, String>(7), "stringstringnumber", "{payload}");
        got.insert(
            (key, row.get::<_, i64>(1)),
            (
                row.get::<_, Option<String>>(2),
                row.get::<_, Option<String>>(3),
                row.get::<_, i64>(4),
                row.get::<_, i64>(5),
                row.get::<_, i64>(6),
            ),
        );
    }
    assert_eq!(got.len(), windows.len());
    for (w, evs) in &windows {
        // PostgreSQL orders the text (the database's collation), here on
        // its own, apart from the stream.
        let names: Vec<&str> = evs.iter().filter_map(|e| e.2).collect();
        let order = direct
            .query_one(
                "SELECT min(x), max(x) FROM unnest($1::text[]) AS x",
                &[&names],
            )
            .await
            .unwrap();
        let want = (
            order.get::<_, Option<String>>(0),
            order.get::<_, Option<String>>(1),
            evs.iter().map(|e| e.3).min().unwrap(),
            evs.iter().map(|e| e.3).max().unwrap(),
            evs.iter().map(|e| e.4).max().unwrap(),
        );
        assert_eq!(got[w], want, "{w:?}");
    }
}

/// Microseconds since the epoch as an ISO 8601 text in UTC+05:30.
fn chrono_like(us: i64) -> String {
    let shifted = us + 19_800_000_000;
    use queenwire::engine::values::{format_timestamptz, pg_from_unix_micros};
    let utc = format_timestamptz(pg_from_unix_micros(shifted));
    // "YYYY-MM-DD HH:MM:SS[.f]+00" -> the same wall clock at +05:30.
    format!("{}+05:30", utc.trim_end_matches("+00"))
}
