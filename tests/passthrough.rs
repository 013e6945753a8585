//! Plain SQL through queenwire behaves as on PostgreSQL itself, over the
//! simple and the extended protocol, with psql and tokio-postgres.

mod common;

use common::proxy::Proxy;
use common::raw::{bind_text, execute, pipeline, sync, Raw};
use queenwire::protocol::frontend;
use std::time::{Duration, Instant};

#[tokio::test]
async fn psql_runs_simple_and_multi_statement_queries() {
    let proxy = Proxy::start("psql_simple").await;
    let (ok, out, err) = proxy
        .psql(&[
            "-At",
            "-c",
            "SELECT 1 AS one; SELECT 'two'",
            "-c",
            "SELECT 3",
        ])
        .await;
    assert!(ok, "{err}");
    assert_eq!(out, "1\ntwo\n3\n");

    let script = "CREATE TABLE t (id int PRIMARY KEY, body jsonb);\n\
                  BEGIN;\nINSERT INTO t VALUES (1, '{\"a\":1}'), (2, '[1,2]');\nCOMMIT;\n\
                  SELECT id, body->>'a' FROM t ORDER BY id;\n\
                  \\copy (SELECT id FROM t ORDER BY id) TO STDOUT\n";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("script.sql");
    std::fs::write(&file, script).unwrap();
    let (ok, out, err) = proxy.psql(&["-At", "-f", file.to_str().unwrap()]).await;
    assert!(ok, "{err}");
    assert!(out.ends_with("1|1\n2|\n1\n2\n"), "{out}");

    let (ok, _, err) = proxy.psql(&["-c", "SELECT * FROM missing_table"]).await;
    assert!(!ok);
    assert!(err.contains("missing_table"), "{err}");
}

#[tokio::test]
async fn psql_copy_in_and_out() {
    let proxy = Proxy::start("psql_copy").await;
    let (ok, _, err) = proxy
        .psql(&["-c", "CREATE TABLE c (id int, name text)"])
        .await;
    assert!(ok, "{err}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rows.csv");
    std::fs::write(&file, "1,one\n2,two\n3,three\n").unwrap();
    let cmd = format!("\\copy c FROM '{}' WITH (FORMAT csv)", file.display());
    let (ok, _, err) = proxy.psql(&["-c", &cmd]).await;
    assert!(ok, "{err}");
    let (ok, out, err) = proxy
        .psql(&[
            "-At",
            "-c",
            "COPY (SELECT name FROM c ORDER BY id) TO STDOUT",
        ])
        .await;
    assert!(ok, "{err}");
    assert_eq!(out, "one\ntwo\nthree\n");
}

#[tokio::test]
async fn extended_protocol_binary_parameters_of_common_types() {
    let proxy = Proxy::start("ext_binary").await;
    let client = proxy.connect().await;
    let id = uuid::Uuid::now_v7();
    let when = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let row = client
        .query_one(
            "SELECT $1::int4 + 1, $2::int8 * 2, $3::text || '!', $4::uuid, $5::timestamptz, $6::bytea, $7::int4[], $8::text[]",
            &[&41i32, &21i64, &"hi", &id, &when, &vec![0u8, 1, 255], &vec![1i32, 2, 3], &vec!["a", "b"]],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 42);
    assert_eq!(row.get::<_, i64>(1), 42);
    assert_eq!(row.get::<_, String>(2), "hi!");
    assert_eq!(row.get::<_, uuid::Uuid>(3), id);
    assert_eq!(row.get::<_, std::time::SystemTime>(4), when);
    assert_eq!(row.get::<_, Vec<u8>>(5), vec![0u8, 1, 255]);
    assert_eq!(row.get::<_, Vec<i32>>(6), vec![1, 2, 3]);
    assert_eq!(row.get::<_, Vec<String>>(7), vec!["a", "b"]);
    // jsonb and numeric have no binary codec in this client build: their
    // text forms travel through a cast.
    let row = client
        .query_one(
            "SELECT ($1::text::jsonb)->>'k', ($2::text::numeric * 2)::text",
            &[&"{\"k\":\"v\"}", &"1.25"],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "v");
    assert_eq!(row.get::<_, String>(1), "2.50");
}

#[tokio::test]
async fn extended_protocol_text_parameters_and_results() {
    let proxy = Proxy::start("ext_text").await;
    let mut raw = Raw::connect(proxy.addr).await;
    raw.send(&[
        frontend::build_parse(
            "typed",
            "SELECT $1::int4 + 1, $2::int8, $3::jsonb -> 'a', $4::uuid, $5::timestamptz AT TIME ZONE 'UTC', $6::numeric * 2, $7::bytea, $8::int[]",
            &[],
        ),
        bind_text(
            "",
            "typed",
            &[
                Some("41"),
                Some("9000000000"),
                Some("{\"a\": [1, 2]}"),
                Some("0192f3c4-5b6a-7c8d-9e0f-a1b2c3d4e5f6"),
                Some("2026-01-02 03:04:05+00"),
                Some("1.5"),
                Some("\\x00ff"),
                Some("{1,2,3}"),
            ],
        ),
        execute("", 0),
        sync(),
    ])
    .await;
    let r = raw.read_until_ready().await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(
        r.rows,
        vec![vec![
            Some("42".into()),
            Some("9000000000".into()),
            Some("[1, 2]".into()),
            Some("0192f3c4-5b6a-7c8d-9e0f-a1b2c3d4e5f6".into()),
            Some("2026-01-02 03:04:05".into()),
            Some("3.0".into()),
            Some("\\x00ff".into()),
            Some("{1,2,3}".into()),
        ]]
    );
    assert_eq!(r.status, b'I');
}

#[tokio::test]
async fn portal_is_fetched_in_chunks() {
    let proxy = Proxy::start("portal_chunks").await;
    let mut client = proxy.connect().await;
    let tx = client.transaction().await.unwrap();
    let stmt = tx
        .prepare("SELECT g FROM generate_series(1, 25) g")
        .await
        .unwrap();
    let portal = tx.bind(&stmt, &[]).await.unwrap();
    let mut seen = Vec::new();
    let mut chunks = 0;
    loop {
        let rows = tx.query_portal(&portal, 10).await.unwrap();
        if rows.is_empty() {
            break;
        }
        chunks += 1;
        seen.extend(rows.iter().map(|r| r.get::<_, i32>(0)));
    }
    tx.commit().await.unwrap();
    assert_eq!(seen, (1..=25).collect::<Vec<_>>());
    assert_eq!(chunks, 3);

    // The same with the raw protocol: PortalSuspended after each chunk.
    let mut raw = Raw::connect(proxy.addr).await;
    raw.simple("BEGIN").await;
    raw.send(&[
        frontend::build_parse("", "SELECT g FROM generate_series(1, 5) g", &[]),
        bind_text("p", "", &[]),
        execute("p", 2),
        execute("p", 2),
        execute("p", 2),
        sync(),
    ])
    .await;
    let r = raw.read_until_ready().await;
    assert_eq!(r.rows.len(), 5);
    assert_eq!(r.tags.iter().filter(|t| **t == b's').count(), 2);
    assert_eq!(r.completions, vec!["SELECT 1"]);
    assert_eq!(r.status, b'T');
    assert_eq!(raw.simple("COMMIT").await.status, b'I');
}

/// Tag and body of every message of one exchange.
fn frames(r: &common::raw::Replies) -> Vec<(u8, Vec<u8>)> {
    r.messages
        .iter()
        .map(|m| (m.tag, m.body.to_vec()))
        .collect()
}

#[tokio::test]
async fn result_rows_arrive_exactly_as_postgresql_sends_them() {
    let proxy = Proxy::start("rows_as_sent").await;
    let mut through = Raw::connect(proxy.addr).await;
    let mut direct = Raw::connect_direct(&proxy.direct).await;
    // Many rows, NULLs, empty strings, rows larger than any read buffer,
    // and a result cut short by an error after thousands of rows.
    let simple = [
        "SELECT g, CASE WHEN g % 7 = 0 THEN NULL ELSE repeat('x', g % 300) END, '' \
         FROM generate_series(1, 60000) g",
        "SELECT repeat(md5(g::text), 8000 * g) FROM generate_series(1, 4) g",
        "SELECT 1 / (g - 30000) FROM generate_series(1, 40000) g",
        "SELECT 1; SELECT g FROM generate_series(1, 3) g; SELECT 'after'",
    ];
    for sql in simple {
        let (a, b) = (through.simple(sql).await, direct.simple(sql).await);
        assert!(!b.rows.is_empty(), "{sql}");
        assert_eq!(frames(&a), frames(&b), "{sql}");
    }
    // Extended: a portal fetched in chunks inside a block, then a pipeline
    // whose second statement fails after its rows started.
    for raw in [&mut through, &mut direct] {
        raw.simple("BEGIN").await;
    }
    let chunks = [
        frontend::build_parse(
            "",
            "SELECT g, repeat('y', g % 50) FROM generate_series(1, 9000) g",
            &[],
        ),
        bind_text("p", "", &[]),
        execute("p", 4000),
        execute("p", 4000),
        execute("p", 4000),
        sync(),
    ];
    let failing = pipeline(&[
        "SELECT g FROM generate_series(1, 5000) g",
        "SELECT 1 / (g - 2500) FROM generate_series(1, 5000) g",
        "SELECT 3",
    ]);
    for msgs in [&chunks[..], &failing[..]] {
        through.send(msgs).await;
        direct.send(msgs).await;
        let (a, b) = (
            through.read_until_ready().await,
            direct.read_until_ready().await,
        );
        assert!(!b.rows.is_empty());
        assert_eq!(frames(&a), frames(&b));
    }
    // The session goes on.
    assert_eq!(through.simple("ROLLBACK").await.status, b'I');
    let r = through.simple("SELECT 4").await;
    assert_eq!(r.rows, vec![vec![Some("4".into())]]);
}

#[tokio::test]
async fn error_mid_pipeline_skips_to_sync_and_the_session_goes_on() {
    let proxy = Proxy::start("pipeline_error").await;
    let mut raw = Raw::connect(proxy.addr).await;
    raw.send(&pipeline(&[
        "SELECT 1",
        "SELECT * FROM no_such_table",
        "SELECT 3",
    ]))
    .await;
    let r = raw.read_until_ready().await;
    assert_eq!(r.rows, vec![vec![Some("1".into())]]);
    assert_eq!(r.errors.len(), 1);
    assert_eq!(r.errors[0].code(), "42P01");
    assert_eq!(r.status, b'I');
    // Nothing from the statements after the error.
    assert_eq!(r.completions, vec!["SELECT 1"]);
    let r = raw.simple("SELECT 4").await;
    assert_eq!(r.rows, vec![vec![Some("4".into())]]);

    // tokio-postgres pipelines its queries; one failing leaves the others.
    let client = proxy.connect().await;
    let (a, b, c) = tokio::join!(
        client.query_one("SELECT 1::int4", &[]),
        client.query_one("SELECT 1/0", &[]),
        client.query_one("SELECT 3::int4", &[])
    );
    assert_eq!(a.unwrap().get::<_, i32>(0), 1);
    assert_eq!(b.unwrap_err().code().unwrap().code(), "22012");
    assert_eq!(c.unwrap().get::<_, i32>(0), 3);
}

#[tokio::test]
async fn ready_for_query_reports_the_transaction_status() {
    let proxy = Proxy::start("rfq_status").await;
    let mut raw = Raw::connect(proxy.addr).await;
    assert_eq!(raw.simple("SELECT 1").await.status, b'I');
    assert_eq!(raw.simple("BEGIN").await.status, b'T');
    assert_eq!(raw.simple("CREATE TABLE s (x int)").await.status, b'T');
    assert_eq!(raw.simple("SAVEPOINT a").await.status, b'T');
    let r = raw.simple("SELECT 1/0").await;
    assert_eq!(r.errors[0].code(), "22012");
    assert_eq!(r.status, b'E');
    let r = raw.simple("SELECT 1").await;
    assert_eq!(r.errors[0].code(), "25P02");
    assert_eq!(r.status, b'E');
    assert_eq!(raw.simple("ROLLBACK TO SAVEPOINT a").await.status, b'T');
    assert_eq!(raw.simple("INSERT INTO s VALUES (1)").await.status, b'T');
    assert_eq!(raw.simple("COMMIT").await.status, b'I');
    let r = raw.simple("SELECT count(*) FROM s").await;
    assert_eq!(r.rows, vec![vec![Some("1".into())]]);

    // The same over the extended protocol.
    raw.send(&[
        frontend::build_parse("", "BEGIN", &[]),
        bind_text("", "", &[]),
        execute("", 0),
        sync(),
    ])
    .await;
    assert_eq!(raw.read_until_ready().await.status, b'T');
    raw.send(&[
        frontend::build_parse("", "SELECT 1/0", &[]),
        bind_text("", "", &[]),
        execute("", 0),
        sync(),
    ])
    .await;
    assert_eq!(raw.read_until_ready().await.status, b'E');
    assert_eq!(raw.simple("ROLLBACK").await.status, b'I');
}

/// A plain BEGIN outside a block is answered before PostgreSQL's reply
/// (`session::simple::begin_ahead`): the client gets PostgreSQL's bytes,
/// and the block is PostgreSQL's — what follows runs inside it, over
/// either protocol, plain SQL and dialect statements alike.
#[tokio::test]
async fn a_begin_answered_ahead_opens_the_block_postgresql_opens() {
    let proxy = Proxy::start("begin_ahead").await;
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute("CREATE TABLE b (x int)")
        .await
        .unwrap();
    let mut via = Raw::connect(proxy.addr).await;
    let mut pg = Raw::connect_direct(&proxy.direct).await;
    for begin in [
        "BEGIN",
        "begin work;",
        "START TRANSACTION",
        "BEGIN ISOLATION LEVEL REPEATABLE READ",
    ] {
        let (a, b) = (via.simple(begin).await, pg.simple(begin).await);
        assert_eq!(
            (&a.tags, &a.completions, a.status),
            (&b.tags, &b.completions, b.status),
            "{begin}"
        );
        assert_eq!(a.status, b'T');
        // A BEGIN inside the block: PostgreSQL's warning, through.
        let (a, b) = (via.simple("BEGIN").await, pg.simple("BEGIN").await);
        assert_eq!((&a.tags, a.status), (&b.tags, b.status), "{begin} twice");
        assert_eq!(via.simple("INSERT INTO b VALUES (1)").await.status, b'T');
        assert_eq!(via.simple("ROLLBACK").await.status, b'I');
        assert_eq!(pg.simple("ROLLBACK").await.status, b'I');
    }
    assert_eq!(
        direct
            .query_one("SELECT count(*) FROM b", &[])
            .await
            .unwrap()
            .get::<_, i64>(0),
        0,
        "rolled-back inserts stayed"
    );

    // The statement after it is in the block (a SAVEPOINT outside one is
    // 25P01), and a failed statement fails the block.
    via.simple("BEGIN").await;
    let r = via.simple("SAVEPOINT s").await;
    assert!(r.errors.is_empty(), "not in the block: {:?}", r.errors);
    let r = via.simple("SELECT 1/0").await;
    assert_eq!((r.errors[0].code(), r.status), ("22012", b'E'));
    assert_eq!(via.simple("COMMIT").await.completions, ["ROLLBACK"]);

    // The extended protocol after it, then a dialect statement in the same
    // block: rolled back with it.
    via.simple("CREATE QUEUE bq").await;
    via.simple("BEGIN").await;
    via.send(&[
        frontend::build_parse("", "INSERT INTO b VALUES (2)", &[]),
        bind_text("", "", &[]),
        execute("", 0),
        sync(),
    ])
    .await;
    assert_eq!(via.read_until_ready().await.status, b'T');
    let r = via.simple("PUSH INTO bq VALUES ('{}')").await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.status, b'T');
    assert_eq!(via.simple("ROLLBACK").await.status, b'I');
    let n: i64 = direct
        .query_one(
            "SELECT (SELECT count(*) FROM b) + (SELECT count(*) FROM queen.log_segments s \
             JOIN queen.log_partitions p ON p.id = s.partition_id \
             JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'bq')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "a statement of the rolled-back block stayed");

    // A client that sends nothing after its BEGIN has it sent anyway, at
    // once (within a millisecond): PostgreSQL shows the block open.
    let mut waits = Raw::connect(proxy.addr).await;
    assert_eq!(waits.simple("BEGIN").await.status, b'T');
    until_open_blocks(&direct, 1, "the BEGIN never reached PostgreSQL").await;
    assert_eq!(waits.simple("SAVEPOINT w").await.status, b'T');
    assert_eq!(waits.simple("COMMIT").await.status, b'I');

    // A client that leaves right after its BEGIN leaves no transaction
    // (`via` holds none now either).
    let mut gone = Raw::connect(proxy.addr).await;
    assert_eq!(gone.simple("BEGIN").await.status, b'T');
    drop(gone);
    until_open_blocks(&direct, 0, "a transaction stayed open").await;
    assert_eq!(via.simple("SELECT 1").await.status, b'I');
}

/// A dialect statement right after a BEGIN answered ahead goes to
/// PostgreSQL in the same write as the BEGIN (the connection reads the
/// BEGIN's replies before its own), over either protocol: it runs inside
/// the block, a ROLLBACK undoes it, a COMMIT keeps it. A dialect statement
/// that needs no backend leaves the BEGIN to go on its own.
#[tokio::test]
async fn a_dialect_statement_after_a_begin_answered_ahead_runs_in_its_block() {
    let proxy = Proxy::start("begin_dialect").await;
    let direct = proxy.connect_direct().await;
    let mut via = Raw::connect(proxy.addr).await;
    via.simple("CREATE QUEUE bd").await;
    let segments = || async {
        direct
            .query_one(
                "SELECT count(*) FROM queen.log_segments s \
                 JOIN queen.log_partitions p ON p.id = s.partition_id \
                 JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'bd'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let push = "PUSH INTO bd VALUES ('{}')";
    via.send(&[frontend::build_parse("push", push, &[]), sync()])
        .await;
    assert_eq!(via.read_until_ready().await.status, b'I');
    let ways = [
        ("a simple query", vec![frontend::build_query(push)]),
        (
            "the Bind of a statement prepared before",
            vec![bind_text("", "push", &[]), execute("", 0), sync()],
        ),
        (
            "an unnamed Parse, as drivers below their prepare threshold send it",
            vec![
                frontend::build_parse("", push, &[]),
                bind_text("", "", &[]),
                execute("", 0),
                sync(),
            ],
        ),
    ];
    let mut kept = 0;
    for (way, messages) in &ways {
        for end in ["ROLLBACK", "COMMIT"] {
            assert_eq!(via.simple("BEGIN").await.status, b'T');
            via.send(messages).await;
            let r = via.read_until_ready().await;
            assert!(r.errors.is_empty(), "{way}: {:?}", r.errors);
            assert_eq!(r.status, b'T', "{way}");
            let r = via.simple("SAVEPOINT s").await;
            assert!(
                r.errors.is_empty(),
                "{way}: not in the block: {:?}",
                r.errors
            );
            assert_eq!(via.simple(end).await.status, b'I');
            kept += usize::from(end == "COMMIT");
            assert_eq!(segments().await, kept as i64, "{way}, after {end}");
        }
    }
    // A statement the proxy answers alone: the block is still PostgreSQL's.
    assert_eq!(via.simple("BEGIN").await.status, b'T');
    let r = via.simple("SHOW QUEENWIRE POOLS").await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    until_open_blocks(&direct, 1, "the BEGIN never reached PostgreSQL").await;
    let r = via.simple("SAVEPOINT t").await;
    assert!(r.errors.is_empty(), "not in the block: {:?}", r.errors);
    assert_eq!(via.simple("COMMIT").await.status, b'I');
    assert_eq!(via.simple("SELECT 1").await.status, b'I');
}

/// Waits (at most 10 s) until PostgreSQL shows `n` sessions idle in a
/// transaction block.
async fn until_open_blocks(direct: &tokio_postgres::Client, n: i64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let open: i64 = direct
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if open == n {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {open} open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn prepared_statement_survives_moving_between_backend_connections() {
    let proxy = Proxy::start_with("prepared_moves", |c| c.pool_size = 3).await;
    let client = proxy.connect().await;
    let stmt = client
        .prepare("SELECT $1::int4 + 1, pg_backend_pid()")
        .await
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut churners = Vec::new();
    for _ in 0..6 {
        let client = proxy.connect().await;
        let stop = stop.clone();
        churners.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                client
                    .batch_execute("BEGIN; SELECT pg_sleep(0.002); COMMIT")
                    .await
                    .unwrap();
            }
        }));
    }
    let mut pids = std::collections::HashSet::new();
    for i in 0..100i32 {
        let row = client.query_one(&stmt, &[&i]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), i + 1);
        pids.insert(row.get::<_, i32>(1));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in churners {
        c.await.unwrap();
    }
    assert!(pids.len() >= 2, "the statement never moved: {pids:?}");
}

#[tokio::test]
async fn fifty_clients_share_a_pool_of_four() {
    let proxy = Proxy::start_with("pool_of_four", |c| c.pool_size = 4).await;
    let dbname = proxy.direct.get_dbname().unwrap().to_string();
    let mut monitor_cfg = proxy.direct.clone();
    monitor_cfg.dbname("postgres");
    let monitor = common::proxy::connect(&monitor_cfg).await;
    let mut tasks = Vec::new();
    for i in 0..50i32 {
        let cfg = proxy.client_config();
        tasks.push(tokio::spawn(async move {
            let client = common::proxy::connect(&cfg).await;
            let mut sum = 0;
            for _ in 0..3 {
                let row = client
                    .query_one("SELECT $1::int4, pg_sleep(0.01)", &[&i])
                    .await
                    .unwrap();
                sum += row.get::<_, i32>(0);
            }
            sum
        }));
    }
    let mut peak = 0i64;
    while tasks.iter().any(|t| !t.is_finished()) {
        let n: i64 = monitor
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND application_name <> $2",
                &[&dbname, &queenwire::server::BACKGROUND_APPLICATION_NAME],
            )
            .await
            .unwrap()
            .get(0);
        peak = peak.max(n);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 3 * (0..50).sum::<i32>());
    assert!(peak <= 4, "{peak} backend connections for a pool of 4");
    assert!(peak >= 1);
}

/// A cancel the client sends as its statement finishes cancels that
/// statement or nothing: never the statement of the session the pool hands
/// the connection to next (one connection for both here). PostgreSQL's
/// cancel key reaches only its own backend; a pooled backend is another
/// client's a moment later, so its connection waits for the cancel to be
/// taken before the pool hands it on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_cancel_never_reaches_the_next_session_on_its_connection() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let proxy = Proxy::start_with("cancel_late", |c| c.pool_size = 1).await;
    let a = proxy.connect().await;
    let b = proxy.connect().await;
    let stop = Arc::new(AtomicBool::new(false));
    let bystander = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let (mut ran, mut cancelled) = (0, 0);
            while !stop.load(Ordering::SeqCst) {
                match b.simple_query("SELECT pg_sleep(0.01)").await {
                    Ok(_) => ran += 1,
                    Err(e) if e.code().map(|c| c.code()) == Some("57014") => cancelled += 1,
                    Err(e) => panic!("bystander: {e}"),
                }
            }
            (ran, cancelled)
        })
    };
    let token = a.cancel_token();
    let until = Instant::now() + Duration::from_secs(4);
    let mut sent = 0u64;
    while Instant::now() < until {
        // The cancel lands anywhere from before the statement runs to
        // after its reply: 0 to 4 ms after it is sent.
        let delay = Duration::from_micros((sent * 1_237) % 4_000);
        let cancel = async {
            tokio::time::sleep(delay).await;
            token.cancel_query(tokio_postgres::NoTls).await.unwrap();
        };
        let (own, ()) = tokio::join!(a.simple_query("SELECT pg_sleep(0.002)"), cancel);
        if let Err(e) = own {
            assert_eq!(e.code().map(|c| c.code()), Some("57014"), "{e}");
        }
        sent += 1;
    }
    stop.store(true, Ordering::SeqCst);
    let (ran, cancelled) = bystander.await.unwrap();
    assert!(ran > 0 && sent > 100, "ran {ran}, cancels sent {sent}");
    assert_eq!(
        cancelled, 0,
        "{cancelled} of the bystander's {} statements cancelled by {sent} cancels of another session",
        ran + cancelled
    );
}

#[tokio::test]
async fn cancel_reaches_the_backend_query() {
    let proxy = Proxy::start("cancel").await;
    let client = proxy.connect().await;
    let token = client.cancel_token();
    let started = Instant::now();
    // Cancel once the sleep is seen running on PostgreSQL: a cancel that
    // lands while the statement is still being parsed cancels the parse
    // instead, and one that lands between messages may be kept by the
    // backend for whatever it runs next (as it would be on PostgreSQL).
    let direct = proxy.connect_direct().await;
    let canceller = tokio::spawn(async move {
        for _ in 0..300 {
            let running = direct
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'",
                    &[],
                )
                .await
                .unwrap()
                .get::<_, i64>(0);
            if running > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    });
    let err = client
        .query_one("SELECT pg_sleep(30)", &[])
        .await
        .unwrap_err();
    canceller.await.unwrap();
    assert_eq!(err.code().unwrap().code(), "57014");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // The session is still usable.
    let row = client.query_one("SELECT 1::int4", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 1);
}

#[tokio::test]
async fn a_client_killed_mid_transaction_leaves_no_open_transaction() {
    let proxy = Proxy::start("killed_client").await;
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute("CREATE TABLE k (id int)")
        .await
        .unwrap();
    let dbname = proxy.direct.get_dbname().unwrap().to_string();

    // A psql process killed while its transaction is open.
    let mut psql = std::process::Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &proxy.addr.port().to_string(),
            "-U",
            "tester",
            "-X",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let stdin = psql.stdin.as_mut().unwrap();
        stdin
            .write_all(b"BEGIN;\nINSERT INTO k VALUES (1);\n")
            .unwrap();
        stdin.flush().unwrap();
    }
    // And a raw client that vanishes in the middle of one.
    let mut raw = Raw::connect(proxy.addr).await;
    assert_eq!(
        raw.simple("BEGIN; INSERT INTO k VALUES (2)").await.status,
        b'T'
    );

    let idle_in_tx = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state = 'idle in transaction'";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = direct
            .query_one(idle_in_tx, &[&dbname])
            .await
            .unwrap()
            .get(0);
        if n == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "transactions never opened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    psql.kill().unwrap();
    psql.wait().unwrap();
    drop(raw);

    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n: i64 = direct
            .query_one(idle_in_tx, &[&dbname])
            .await
            .unwrap()
            .get(0);
        if n == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{n} transactions still open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let n: i64 = direct
        .query_one("SELECT count(*) FROM k", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "a killed client's transaction committed");
    // The proxy still serves.
    let client = proxy.connect().await;
    client.query_one("SELECT 1", &[]).await.unwrap();
}

#[tokio::test]
async fn session_settings_pin_and_startup_parameters_follow_the_session() {
    let proxy = Proxy::start_with("pinning", |c| c.pool_size = 2).await;
    let mut cfg = proxy.client_config();
    cfg.application_name("pinned-app");
    let a = common::proxy::connect(&cfg).await;
    let name: String = a
        .query_one("SHOW application_name", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(name, "pinned-app");
    a.batch_execute("SET search_path = pg_catalog")
        .await
        .unwrap();
    let b = proxy.connect().await;
    // b runs on the other connection and does not see a's setting.
    for _ in 0..5 {
        let path: String = b.query_one("SHOW search_path", &[]).await.unwrap().get(0);
        assert_eq!(path, "\"$user\", public");
        let name: String = b
            .query_one("SHOW application_name", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(name, "");
    }
    let path: String = a.query_one("SHOW search_path", &[]).await.unwrap().get(0);
    assert_eq!(path, "pg_catalog");
}

/// Session state taken through a name spelled quoted, `U&"…"` or
/// schema-qualified, or through `UPDATE pg_settings`, pins the session as
/// the plain spelling does: no other client ever sees it.
#[tokio::test]
async fn session_state_pins_however_its_names_are_spelled() {
    let proxy = Proxy::start_with("pinning_spelled", |c| c.pool_size = 2).await;
    let default_path: String = proxy
        .connect()
        .await
        .query_one("SHOW search_path", &[])
        .await
        .unwrap()
        .get(0);
    let settings = [
        r#"SELECT "set_config"('search_path', 'pg_catalog', false)"#,
        r#"SELECT "pg_catalog"."set_config"('search_path', 'pg_catalog', false)"#,
        r#"SELECT U&"set\005Fconfig"('search_path', 'pg_catalog', false)"#,
        r#"SELECT u&"set!005Fconfig" UESCAPE '!' ('search_path', 'pg_catalog', false)"#,
        "UPDATE pg_settings SET setting = 'pg_catalog' WHERE name = 'search_path'",
        "UPDATE pg_catalog.pg_settings SET setting = 'pg_catalog' WHERE name = 'search_path'",
    ];
    for sql in settings {
        let a = proxy.connect().await;
        a.simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let b = proxy.connect().await;
        for _ in 0..5 {
            let path: String = b.query_one("SHOW search_path", &[]).await.unwrap().get(0);
            assert_eq!(path, default_path, "{sql} reached another client");
        }
        let path: String = a.query_one("SHOW search_path", &[]).await.unwrap().get(0);
        assert_eq!(path, "pg_catalog", "{sql}");
    }
    let locks = [
        (r#"SELECT "pg_advisory_lock"(4711)"#, 4711i64),
        (r#"SELECT pg_catalog."pg_advisory_lock"(4712)"#, 4712),
        (r#"SELECT U&"pg\005Fadvisory\005Flock"(4713)"#, 4713),
    ];
    for (sql, key) in locks {
        let a = proxy.connect().await;
        a.simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let b = proxy.connect().await;
        for _ in 0..5 {
            let got: bool = b
                .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&key])
                .await
                .unwrap()
                .get(0);
            assert!(!got, "{sql}: another client took the lock a holds");
        }
        drop(a);
        // The session's end releases it.
        let direct = proxy.connect_direct().await;
        let mut held = 1;
        for _ in 0..50 {
            held = direct
                .query_one(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1::int8::oid",
                    &[&key],
                )
                .await
                .unwrap()
                .get::<_, i64>(0);
            if held == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(held, 0, "{sql}: the lock outlived its session");
    }
    let a = proxy.connect().await;
    a.simple_query(r#"CREATE TABLE U&"pg\005Ftemp".spelled_secret AS SELECT 1 AS x"#)
        .await
        .unwrap();
    let b = proxy.connect().await;
    for _ in 0..5 {
        let seen: Option<String> = b
            .query_one("SELECT to_regclass('pg_temp.spelled_secret')::text", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(seen, None, "another client sees a's temp table");
    }
}

/// `setseed()` seeds the session's backend: its draws after it are
/// PostgreSQL's sequence for that seed, and the seeded backend never
/// serves another client (with a pool of one, the next client would
/// otherwise continue the sequence).
async fn draw(c: &tokio_postgres::Client, sql: &str) -> f64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn a_seeded_random_sequence_stays_with_its_session() {
    let proxy = Proxy::start_with("setseed", |c| c.pool_size = 1).await;
    let direct = proxy.connect_direct().await;
    direct.batch_execute("SELECT setseed(0.5)").await.unwrap();
    let mut want = Vec::new();
    for _ in 0..3 {
        want.push(draw(&direct, "SELECT random()").await);
    }
    let a = proxy.connect().await;
    a.batch_execute("SELECT setseed(0.5)").await.unwrap();
    let got = vec![
        draw(&a, "SELECT random()").await,
        draw(&a, "SELECT random()").await,
    ];
    assert_eq!(got, want[..2], "the seeded sequence, as on PostgreSQL");
    drop(a);
    let b = proxy.connect().await;
    let next = draw(&b, "SELECT random()").await;
    assert_ne!(
        next, want[2],
        "another client continued a's seeded sequence"
    );
}

#[tokio::test]
async fn startup_reports_the_backends_parameter_statuses() {
    let proxy = Proxy::start("param_status").await;
    let mut raw = Raw::connect(proxy.addr).await;
    // Raw::connect checked startup; ask again what the proxy reported.
    let r = raw.simple("SHOW server_version").await;
    let version = r.rows[0][0].clone().unwrap();
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    let direct_version: String = direct
        .query_one("SHOW server_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, direct_version);
    // tokio-postgres refuses a server that does not report these.
    for p in [
        "server_version",
        "server_encoding",
        "client_encoding",
        "DateStyle",
        "TimeZone",
        "integer_datetimes",
        "standard_conforming_strings",
    ] {
        let v: String = client
            .query_one(&format!("SHOW {p}"), &[])
            .await
            .unwrap()
            .get(0);
        assert!(!v.is_empty(), "{p}");
    }
}

#[tokio::test]
async fn scram_users_log_in_and_everyone_else_gets_28p01() {
    use queenwire::users::{Passthrough, User, Users, Verifier};
    let mut users = Users::default();
    for (name, policy) in [("alice", Passthrough::Full), ("bob", Passthrough::None)] {
        users.users.insert(
            name.into(),
            User {
                name: name.into(),
                tenant: queenwire::engine::DEFAULT_TENANT,
                passthrough: policy,
                verifier: Verifier::new("s3cret"),
            },
        );
    }
    let users = std::sync::Arc::new(users);
    let proxy = Proxy::start_with("scram", |c| c.users = Some(users.clone())).await;
    let mut cfg = proxy.client_config();
    cfg.user("alice");
    // No password to give: the login cannot complete.
    assert!(cfg.connect(tokio_postgres::NoTls).await.is_err());
    cfg.password("wrong");
    let err = cfg
        .connect(tokio_postgres::NoTls)
        .await
        .err()
        .expect("wrong password refused");
    assert_eq!(err.code().map(|c| c.code()), Some("28P01"), "{err}");
    // An unknown user gets the very same answer.
    let mut ghost = proxy.client_config();
    ghost.user("ghost").password("s3cret");
    let err = ghost
        .connect(tokio_postgres::NoTls)
        .await
        .err()
        .expect("unknown user refused");
    assert_eq!(err.code().map(|c| c.code()), Some("28P01"), "{err}");
    cfg.password("s3cret");
    let client = common::proxy::connect(&cfg).await;
    client.query_one("SELECT 1", &[]).await.unwrap();
    // bob's policy is none: queue statements only.
    let mut bob = proxy.client_config();
    bob.user("bob").password("s3cret");
    let bob = common::proxy::connect(&bob).await;
    let err = bob.simple_query("SELECT 1").await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42501"));
    bob.simple_query("PUSH INTO bobs VALUES ('1')")
        .await
        .unwrap();
    // psql, too.
    let (ok, out, err) = proxy
        .psql_env(
            &["-U", "alice", "-At", "-c", "SELECT 7"],
            &[("PGPASSWORD", "s3cret")],
        )
        .await;
    assert!(ok, "{err}");
    assert_eq!(out, "7\n");
}

#[tokio::test]
async fn dialect_and_plain_statements_share_one_extended_pipeline() {
    let proxy = Proxy::start("mixed_pipeline").await;
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute("CREATE TABLE audit (note text)")
        .await
        .unwrap();
    let mut raw = Raw::connect(proxy.addr).await;
    raw.send(&[
        frontend::build_parse("", "BEGIN", &[]),
        bind_text("", "", &[]),
        execute("", 0),
        frontend::build_parse("", "INSERT INTO audit VALUES ($1)", &[]),
        bind_text("", "", &[Some("before push")]),
        execute("", 0),
        frontend::build_parse("push", "PUSH INTO piped VALUES ($1)", &[]),
        bind_text("", "push", &[Some("{\"k\":1}")]),
        execute("", 0),
        frontend::build_parse("", "INSERT INTO audit VALUES ('after push')", &[]),
        bind_text("", "", &[]),
        execute("", 0),
        frontend::build_parse("", "COMMIT", &[]),
        bind_text("", "", &[]),
        execute("", 0),
        sync(),
    ])
    .await;
    let r = raw.read_until_ready().await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(
        r.completions,
        vec!["BEGIN", "INSERT 0 1", "SELECT 1", "INSERT 0 1", "COMMIT"]
    );
    assert_eq!(r.status, b'I');
    let n: i64 = direct
        .query_one("SELECT count(*) FROM audit", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
    let r = raw.simple("POP FROM piped").await;
    assert_eq!(r.rows.len(), 1);

    // A dialect error inside the block aborts it, as a PostgreSQL error would.
    raw.simple("BEGIN").await;
    raw.simple("INSERT INTO audit VALUES ('doomed')").await;
    let r = raw.simple("ACK 'forged'").await;
    assert_eq!(r.errors[0].code(), "22P02");
    assert_eq!(r.status, b'E');
    assert_eq!(raw.simple("COMMIT").await.completions, vec!["ROLLBACK"]);
    let n: i64 = direct
        .query_one("SELECT count(*) FROM audit", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
}

#[tokio::test]
async fn startup_settings_and_options_apply_as_postgresql_applies_them() {
    let proxy = Proxy::start("startup_options").await;
    let mut cfg = proxy.client_config();
    cfg.options("-c search_path=pg_catalog,public --statement-timeout=5s");
    let client = common::proxy::connect(&cfg).await;
    let row = client
        .query_one(
            "SELECT current_schemas(false)::text, current_setting('statement_timeout')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "{pg_catalog,public}");
    assert_eq!(row.get::<_, String>(1), "5s");
    // A list given as a startup parameter stays a list.
    let mut raw_cfg = proxy.client_config();
    raw_cfg.options("-c search_path=information_schema,public");
    let other = common::proxy::connect(&raw_cfg).await;
    let schemas: String = other
        .query_one("SELECT current_schemas(false)::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(schemas, "{information_schema,public}");
    // A bad option is refused at login, as PostgreSQL does.
    let mut bad = proxy.client_config();
    bad.options("-c no_such_setting_here=1");
    assert!(bad.connect(tokio_postgres::NoTls).await.is_err());
}

#[tokio::test]
async fn deallocate_from_the_client_leaves_the_proxy_consistent() {
    let proxy = Proxy::start_with("deallocate", |c| c.pool_size = 2).await;
    let client = proxy.connect().await;
    client.simple_query("KV PUT d k '1' FOREVER").await.unwrap();
    let stmt = client.prepare("SELECT $1::int4 * 2").await.unwrap();
    assert_eq!(
        client
            .query_one(&stmt, &[&21i32])
            .await
            .unwrap()
            .get::<_, i32>(0),
        42
    );
    // DEALLOCATE ALL wipes every statement on the backend connection, the
    // proxy's own included: they are prepared again where needed.
    client.batch_execute("DEALLOCATE ALL").await.unwrap();
    assert_eq!(client.simple_query("KV GET d k").await.unwrap().len(), 3);
    let again = client.prepare("SELECT $1::int4 * 2").await.unwrap();
    assert_eq!(
        client
            .query_one(&again, &[&4i32])
            .await
            .unwrap()
            .get::<_, i32>(0),
        8
    );
    // DEALLOCATE of one client statement by name.
    let mut raw = Raw::connect(proxy.addr).await;
    raw.send(&[frontend::build_parse("mine", "SELECT 5", &[]), sync()])
        .await;
    assert!(raw.read_until_ready().await.errors.is_empty());
    let r = raw.simple("DEALLOCATE mine").await;
    assert_eq!(r.completions, vec!["DEALLOCATE"]);
    raw.send(&[bind_text("", "mine", &[]), execute("", 0), sync()])
        .await;
    let r = raw.read_until_ready().await;
    assert_eq!(r.errors[0].code(), "26000");
    client.query_one("SELECT 1", &[]).await.unwrap();
    // Other sessions are unaffected.
    let other = proxy.connect().await;
    other.simple_query("KV GET d k").await.unwrap();
}

/// An unnamed statement parsed in one exchange and bound in a later one
/// survives another session's simple query on the same backend connection
/// in between (a simple query destroys the backend's unnamed statement, so
/// the proxy parses it again).
#[tokio::test]
async fn unnamed_statement_survives_another_sessions_simple_query_in_between() {
    let proxy = Proxy::start_with("unnamed_between", |c| c.pool_size = 1).await;
    let mut z = Raw::connect(proxy.addr).await;
    z.send(&[
        frontend::build_parse("", "SELECT $1::int4 * 2", &[]),
        sync(),
    ])
    .await;
    let r = z.read_until_ready().await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let mut w = Raw::connect(proxy.addr).await;
    let r = w.simple("SELECT 1").await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    z.send(&[bind_text("", "", &[Some("21")]), execute("", 0), sync()])
        .await;
    let r = z.read_until_ready().await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.rows, vec![vec![Some("42".to_string())]]);
}

/// Dialect portals live in the proxy until Sync: a pipeline binding more
/// than a session may hold gets 54000, and the session goes on.
#[tokio::test]
async fn too_many_open_dialect_portals_get_54000() {
    let proxy = Proxy::start("portal_limit").await;
    let mut raw = Raw::connect(proxy.addr).await;
    let mut msgs = vec![frontend::build_parse(
        "s",
        "PUSH INTO portal_q VALUES ($1)",
        &[],
    )];
    for i in 0..10_001 {
        msgs.push(bind_text(&format!("p{i}"), "s", &[Some("{}")]));
    }
    msgs.push(sync());
    raw.send(&msgs).await;
    let r = raw.read_until_ready().await;
    let codes: Vec<&str> = r.errors.iter().map(|e| e.code()).collect();
    assert_eq!(codes, ["54000"]);
    assert_eq!(r.tags.iter().filter(|t| **t == b'2').count(), 10_000);
    // Sync ended the pipeline's transaction: the portals are gone, there is
    // room again, and nothing was pushed.
    raw.send(&[
        bind_text("again", "s", &[Some("{\"n\":1}")]),
        execute("again", 0),
        sync(),
    ])
    .await;
    let r = raw.read_until_ready().await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let client = proxy.connect().await;
    let popped = client
        .simple_query("POP FROM portal_q LIMIT 100")
        .await
        .unwrap();
    let rows = popped
        .iter()
        .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
        .count();
    assert_eq!(rows, 1);
}

/// A dialect portal executed with a row limit returns its rows in parts
/// with PortalSuspended between, as PostgreSQL's portals do (pgjdbc's
/// fetch size, psycopg's server-side cursors), and runs its statement once.
#[tokio::test]
async fn dialect_portals_honour_the_execute_row_limit_and_run_once() {
    let proxy = Proxy::start("portal_rows").await;
    let client = proxy.connect().await;
    let values: Vec<String> = (0..15).map(|i| format!("('{{\"n\":{i}}}')")).collect();
    client
        .simple_query(&format!("PUSH INTO paged VALUES {}", values.join(", ")))
        .await
        .unwrap();
    let mut raw = Raw::connect(proxy.addr).await;
    raw.send(&[
        frontend::build_parse("pop10", "POP FROM paged LIMIT 10 AUTO ACK", &[]),
        bind_text("c", "pop10", &[]),
        execute("c", 3),
        execute("c", 3),
        execute("c", 10),
        execute("c", 10),
        sync(),
    ])
    .await;
    let r = raw.read_until_ready().await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.rows.len(), 10);
    let flow: String = r
        .tags
        .iter()
        .filter(|t| matches!(t, b'D' | b's' | b'C'))
        .map(|t| *t as char)
        .collect();
    assert_eq!(flow, "DDDsDDDsDDDDCC");
    let last_two = &r.completions[r.completions.len() - 2..];
    assert!(last_two[0].ends_with(" 4"), "{last_two:?}");
    assert!(last_two[1].ends_with(" 0"), "{last_two:?}");
    // The statement ran once: ten popped, five left.
    let left = client
        .simple_query("POP FROM paged LIMIT 100 AUTO ACK")
        .await
        .unwrap()
        .iter()
        .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
        .count();
    assert_eq!(left, 5);
}

/// A pipeline larger than the sockets between the proxy and PostgreSQL
/// buffer, with replies as large: PostgreSQL stops reading while its
/// replies wait, so the proxy must read them before it has sent the whole
/// pipeline (libpq, straight to PostgreSQL, reads while it writes; so does
/// this client).
#[tokio::test]
async fn a_pipeline_larger_than_the_socket_buffers_is_answered() {
    use queenwire::protocol::read_message;
    use tokio::io::AsyncWriteExt;
    let proxy = Proxy::start("big_pipeline").await;
    let raw = Raw::connect(proxy.addr).await;
    let param = "x".repeat(64 * 1024);
    let statements = 400;
    let mut bytes = bytes::BytesMut::new();
    frontend::build_parse("echo", "SELECT $1::text", &[]).encode(&mut bytes);
    for _ in 0..statements {
        bind_text("", "echo", &[Some(&param)]).encode(&mut bytes);
        execute("", 0).encode(&mut bytes);
    }
    sync().encode(&mut bytes);
    let (mut reader, mut writer) = tokio::io::split(raw.stream);
    let write = tokio::spawn(async move {
        writer
            .write_all(&bytes)
            .await
            .expect("the pipeline is sent");
        writer
    });
    let read = async {
        let mut buf = bytes::BytesMut::new();
        let mut rows = 0;
        loop {
            let m = read_message(&mut reader, &mut buf, 1 << 30)
                .await
                .expect("a reply");
            match m.tag {
                b'D' => rows += 1,
                b'E' => panic!("{:?}", queenwire::protocol::SqlError::parse(&m.body)),
                b'Z' => return rows,
                _ => {}
            }
        }
    };
    let rows = tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("the pipeline is answered (the proxy and PostgreSQL did not wait for each other)");
    assert_eq!(rows, statements);
    write.await.unwrap();
}

/// After an error mid-pipeline, PostgreSQL skips everything up to the
/// Sync: so is the next part of a dialect portal, even when the error is
/// only read from the backend as that Execute comes.
#[tokio::test]
async fn a_dialect_portal_s_next_part_is_skipped_after_an_error_mid_pipeline() {
    let proxy = Proxy::start("portal_after_error").await;
    let client = proxy.connect().await;
    client
        .simple_query("PUSH INTO parted VALUES ('{}'), ('{}'), ('{}')")
        .await
        .unwrap();
    let mut raw = Raw::connect(proxy.addr).await;
    raw.send(&[
        frontend::build_parse("pop", "POP FROM parted LIMIT 3", &[]),
        bind_text("c", "pop", &[]),
        execute("c", 1),
        frontend::build_parse("", "SELECT 1/0", &[]),
        bind_text("", "", &[]),
        execute("", 0),
        execute("c", 1),
        sync(),
    ])
    .await;
    let r = tokio::time::timeout(Duration::from_secs(20), raw.read_until_ready())
        .await
        .expect("the Sync is answered");
    let tags: String = r.tags.iter().map(|t| *t as char).collect();
    // The first part, the error (PostgreSQL's planner raises it at Bind),
    // then nothing but ReadyForQuery.
    assert_eq!(tags, "12Ds1EZ", "{:?}", r.errors);
    assert_eq!(r.status, b'I');
}

#[tokio::test]
async fn a_cancelled_pop_wait_does_not_cancel_the_next_statement() {
    // The session holds a backend connection (SET pins it) while its POP
    // … WAIT waits in the proxy. A client's cancel ends the wait; the
    // cancel forwarded to the idle backend must not land on the statement
    // the client sends right after the 57014 (seen intermittently with
    // pgjdbc's setQueryTimeout: the next SELECT 1 was cancelled).
    let proxy = Proxy::start("cancel_wait").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE cw; SET application_name = 'pinned'")
        .await
        .unwrap();
    for round in 0..20 {
        let token = client.cancel_token();
        let canceller = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            token.cancel_query(tokio_postgres::NoTls).await.unwrap();
        });
        let err = client
            .simple_query("POP FROM cw WAIT 20")
            .await
            .expect_err("the wait is cancelled");
        canceller.await.unwrap();
        assert_eq!(err.code().map(|c| c.code()), Some("57014"), "round {round}");
        client
            .simple_query("SELECT pg_sleep(0.05)")
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "round {round}: the next statement failed: {:?}",
                    e.as_db_error()
                )
            });
    }
}

/// A cancel request ends a statement that waits for a backend connection
/// (every one held by another session's transaction) with 57014, as
/// PostgreSQL's cancel ends a statement waiting on a lock; the session goes
/// on.
#[tokio::test]
async fn a_cancel_ends_a_wait_for_a_backend_connection() {
    let proxy = Proxy::start_with("pool_wait_cancel", |c| {
        c.pool_size = 1;
        c.pool_wait_timeout = Some(Duration::from_secs(60));
    })
    .await;
    let holder = proxy.connect().await;
    let waiter = proxy.connect().await;
    holder.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let cancel = waiter.cancel_token();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        cancel.cancel_query(tokio_postgres::NoTls).await
    });
    // A bound that catches the wait going on to its 60 s timeout.
    let err = tokio::time::timeout(Duration::from_secs(20), waiter.batch_execute("SELECT 1"))
        .await
        .expect("the cancel did not end the wait")
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "57014", "{err}");
    canceller.await.unwrap().unwrap();
    holder.batch_execute("COMMIT").await.unwrap();
    let one: i32 = waiter.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1, "the session goes on");
}

/// Every backend connection held by another session's transaction: a
/// statement waits at most `--pool-wait-timeout`, then fails with 53300
/// (simple and extended protocol alike), and the session goes on once a
/// connection is free again. Without the bound it would wait for as long
/// as the other transaction stays open (a client stalled on its own other
/// session never would end it).
#[tokio::test]
async fn a_statement_that_waits_past_the_pool_wait_timeout_gets_53300() {
    let proxy = Proxy::start_with("pool_wait", |c| {
        c.pool_size = 1;
        c.pool_wait_timeout = Some(Duration::from_millis(300));
    })
    .await;
    // Both log in first: a login takes a backend connection for a moment
    // too (and past the bound is refused with the same 53300).
    let holder = proxy.connect().await;
    let waiter = proxy.connect().await;
    holder.batch_execute("BEGIN; SELECT 1").await.unwrap();

    // A bound that catches a hang (the fault this test is about), not a
    // timing assertion.
    let hang = Duration::from_secs(30);
    let err = tokio::time::timeout(hang, waiter.batch_execute("SELECT 1"))
        .await
        .expect("the simple query waited for good")
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "53300", "{err}");
    let err = tokio::time::timeout(hang, waiter.query_one("SELECT $1::int4", &[&7i32]))
        .await
        .expect("the extended query waited for good")
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "53300", "{err}");

    holder.batch_execute("COMMIT").await.unwrap();
    let seven: i32 = waiter
        .query_one("SELECT $1::int4", &[&7i32])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        seven, 7,
        "the waiting session goes on once a connection is free"
    );
    holder.batch_execute("SELECT 1").await.unwrap();
}
