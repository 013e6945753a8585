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
