//! The management plane and message surfaces end to end, through
//! queenwire, against a real PostgreSQL: browsing without leasing, consumer
//! group detail, DLQ replay, traces and the status overview.

mod common;

use common::proxy::Proxy;
use common::sql::{rows, Row};
use tokio_postgres::Client;

fn col(row: &Row, name: &str) -> String {
    row.get(name).cloned().flatten().unwrap_or_default()
}

async fn sql_error(client: &Client, sql: &str) -> tokio_postgres::error::DbError {
    let err = client.simple_query(sql).await.expect_err(sql);
    err.as_db_error()
        .cloned()
        .unwrap_or_else(|| panic!("{sql}: {err}"))
}

/// Every consumer row of the database, as text: what a browse must leave alone.
async fn consumer_rows(direct: &Client) -> Vec<String> {
    direct
        .query(
            "SELECT c::text FROM queen.log_consumers c ORDER BY partition_id, consumer_group",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The forms the dialect takes are syntax errors in PostgreSQL itself, so
/// no valid PostgreSQL statement is ever taken by the dialect; `SHOW word`
/// alone is PostgreSQL's and goes through.
#[tokio::test]
async fn the_new_statements_are_not_postgresql_and_show_word_alone_passes_through() {
    let proxy = Proxy::start("cat_notpg").await;
    let direct = proxy.connect_direct().await;
    for sql in [
        "SHOW MESSAGES FROM q",
        "SHOW MESSAGES FROM q PARTITION p GROUP g FROM OFFSET 1 LIMIT 2",
        "SHOW MESSAGE '0190b2a4-7d1c-7000-8000-000000000001' FROM q",
        "SHOW GROUP g ON q",
        "SHOW LAGGING PARTITIONS ON q OVER '1m'",
        "SHOW TRACE 't'",
        "REPLAY DLQ FROM q LIMIT 1",
    ] {
        let err = sql_error(&direct, sql).await;
        assert_eq!(err.code().code(), "42601", "{sql} in PostgreSQL: {err}");
    }
    let client = proxy.connect().await;
    for sql in [
        "SHOW messages",
        "SHOW message;",
        "SHOW lagging",
        "SHOW trace",
    ] {
        let err = sql_error(&client, sql).await;
        assert_eq!(err.code().code(), "42704", "{sql}: {err}");
        assert!(err.message().contains("configuration parameter"), "{err}");
    }
}

#[tokio::test]
async fn show_messages_browses_in_offset_order_with_each_messages_state_and_leases_nothing() {
    let proxy = Proxy::start("cat_browse").await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    client
        .batch_execute(
            "PUSH INTO b (payload, partition, transaction_id, trace_id) VALUES \
             ('{\"n\":0}', 'p1', 't0', 'tr'), ('{\"n\":1}', 'p1', 't1', NULL), \
             ('{\"n\":2}', 'p1', NULL, NULL), ('{\"n\":3}', 'p2', NULL, NULL)",
        )
        .await
        .unwrap();
    // Queue mode: one message consumed, one leased, the rest pending.
    let popped = rows(&client, "POP FROM b PARTITION p1 LIMIT 1").await;
    rows(&client, &format!("ACK '{}'", col(&popped[0], "receipt"))).await;
    rows(&client, "POP FROM b PARTITION p1 LIMIT 1 LEASE 300").await;
    let before = consumer_rows(&direct).await;

    let all = rows(&client, "SHOW MESSAGES FROM b").await;
    let seen: Vec<(String, String, String, String)> = all
        .iter()
        .map(|r| {
            (
                col(r, "partition"),
                col(r, "offset"),
                col(r, "payload"),
                col(r, "state"),
            )
        })
        .collect();
    let expect = |p: &str, o: &str, n: u32, s: &str| {
        (
            p.to_string(),
            o.to_string(),
            format!("{{\"n\":{n}}}"),
            s.to_string(),
        )
    };
    assert_eq!(
        seen,
        vec![
            expect("p1", "0", 0, "consumed"),
            expect("p1", "1", 1, "leased"),
            expect("p1", "2", 2, "pending"),
            expect("p2", "0", 3, "pending"),
        ]
    );
    assert_eq!(col(&all[0], "transaction_id"), "t0");
    assert_eq!(col(&all[0], "trace_id"), "tr");
    assert_eq!(all[1].get("trace_id"), Some(&None));
    assert!(!col(&all[0], "created_at").is_empty());

    let cut = rows(
        &client,
        "SHOW MESSAGES FROM b PARTITION p1 FROM OFFSET 1 LIMIT 1",
    )
    .await;
    assert_eq!(cut.len(), 1);
    assert_eq!(col(&cut[0], "offset"), "1");
    let future = rows(
        &client,
        "SHOW MESSAGES FROM b FROM '2999-01-01 00:00:00+00'",
    )
    .await;
    assert!(future.is_empty());
    let past = rows(&client, "SHOW MESSAGES FROM b FROM '2000-01-01'").await;
    assert_eq!(past.len(), 4);

    // By id, and for a named group that has popped nothing of p1 yet.
    let id = col(&all[2], "message_id");
    let one = rows(&client, &format!("SHOW MESSAGE '{id}' FROM b")).await;
    assert_eq!(one.len(), 1);
    assert_eq!(col(&one[0], "offset"), "2");
    assert_eq!(col(&one[0], "partition"), "p1");
    rows(&client, "POP FROM b PARTITION p2 GROUP g AUTO ACK").await;
    let g = rows(&client, "SHOW MESSAGES FROM b GROUP g").await;
    let states: Vec<String> = g.iter().map(|r| col(r, "state")).collect();
    assert_eq!(states, ["pending", "pending", "pending", "consumed"]);
    let missing = rows(
        &client,
        "SHOW MESSAGE '0190b2a4-7d1c-7000-8000-000000000001' FROM b",
    )
    .await;
    assert!(missing.is_empty());

    // Browsing changed no cursor, lease or retry count (the POP GROUP g
    // added its own rows: compare the queue-mode ones).
    let after: Vec<String> = consumer_rows(&direct)
        .await
        .into_iter()
        .filter(|r| r.contains("__QUEUE_MODE__"))
        .collect();
    assert_eq!(before, after);
}

#[tokio::test]
async fn show_messages_over_the_extended_protocol_is_described_before_execute() {
    let proxy = Proxy::start("cat_browse_ext").await;
    let client = proxy.connect().await;
    client
        .batch_execute("PUSH INTO e VALUES ('{\"a\":1}'), ('[2]')")
        .await
        .unwrap();
    let statement = client
        .prepare("SHOW MESSAGES FROM $1 FROM OFFSET $2 LIMIT $3")
        .await
        .unwrap();
    let names: Vec<&str> = statement.columns().iter().map(|c| c.name()).collect();
    assert_eq!(
        names,
        [
            "partition",
            "offset",
            "message_id",
            "created_at",
            "transaction_id",
            "trace_id",
            "payload",
            "state"
        ]
    );
    let got = client
        .query(&statement, &[&"e", &1i64, &10i32])
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    let offset: i64 = got[0].get("offset");
    assert_eq!(offset, 1);
    let id: uuid::Uuid = got[0].get("message_id");
    let by_id = client
        .query("SHOW MESSAGE $1 FROM $2", &[&id.to_string(), &"e"])
        .await
        .unwrap();
    assert_eq!(by_id.len(), 1);
    let state: String = by_id[0].get("state");
    assert_eq!(state, "pending");
}

#[tokio::test]
async fn bad_browse_input_gets_a_clear_sqlstate() {
    let proxy = Proxy::start("cat_browse_bad").await;
    let client = proxy.connect().await;
    client
        .batch_execute("PUSH INTO x VALUES ('1')")
        .await
        .unwrap();
    for (sql, code) in [
        ("SHOW MESSAGES FROM nope", "42704"),
        ("SHOW MESSAGES FROM x PARTITION nope", "42704"),
        ("SHOW MESSAGES FROM x GROUP nope", "42704"),
        ("SHOW MESSAGES FROM x FROM 'not a time'", "22007"),
        ("SHOW MESSAGES FROM x FROM OFFSET -3", "22023"),
        ("SHOW MESSAGES FROM x FROM OFFSET 'z'", "22P02"),
        ("SHOW MESSAGES FROM x LIMIT 10001", "54000"),
        ("SHOW MESSAGE 'x' FROM x", "22P02"),
        (
            "SHOW MESSAGE '0190b2a4-7d1c-7000-8000-000000000001' FROM nope",
            "42704",
        ),
    ] {
        let err = sql_error(&client, sql).await;
        assert_eq!(err.code().code(), code, "{sql}: {err}");
    }
    // A parameter is checked like a literal.
    let err = client
        .query("SHOW MESSAGES FROM x FROM OFFSET $1", &[&-1i64])
        .await
        .expect_err("negative offset");
    assert_eq!(err.code().unwrap().code(), "22023");
    assert_eq!(rows(&client, "SELECT 1 AS one").await.len(), 1);
}

#[tokio::test]
async fn consumer_groups_show_state_detail_per_partition_and_lagging_partitions() {
    let proxy = Proxy::start("cat_groups").await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    client
        .batch_execute(
            "CREATE QUEUE g WITH (lease_time = 30); \
             PUSH INTO g (payload, partition) VALUES ('1', 'a'), ('2', 'a'), ('3', 'b')",
        )
        .await
        .unwrap();
    let popped = rows(
        &client,
        "POP FROM g PARTITION a GROUP fast LIMIT 2 LEASE 300",
    )
    .await;
    assert_eq!(popped.len(), 2);
    rows(&client, &format!("ACK '{}'", col(&popped[0], "receipt"))).await;
    rows(&client, "POP FROM g PARTITION b GROUP idle AUTO ACK").await;

    // SHOW GROUPS keeps its columns and appends time lag, last claim, state.
    let groups = rows(&client, "SHOW GROUPS ON g").await;
    let by_group: Vec<(String, String, String)> = groups
        .iter()
        .map(|r| (col(r, "group"), col(r, "lag"), col(r, "state")))
        .collect();
    assert_eq!(
        by_group,
        vec![
            ("fast".into(), "2".into(), "Stable".into()),
            ("idle".into(), "2".into(), "Stable".into())
        ]
    );
    // Age the idle group's pending messages past lease_time, then its last
    // claim past 10 x lease_time: Lagging, then Dead.
    direct
        .batch_execute(
            "UPDATE queen.log_segments s SET min_created_at = min_created_at - interval '2 minutes', \
             max_created_at = max_created_at - interval '2 minutes'",
        )
        .await
        .unwrap();
    let state = |rows: &[Row], group: &str| {
        rows.iter()
            .find(|r| col(r, "group") == group)
            .map(|r| col(r, "state"))
            .unwrap()
    };
    let groups = rows(&client, "SHOW GROUPS ON g").await;
    assert_eq!(state(&groups, "idle"), "Lagging");
    assert!(col(&groups[1], "time_lag_seconds").parse::<i64>().unwrap() >= 119);
    direct
        .batch_execute(
            "UPDATE queen.log_consumers SET last_claimed_at = now() - interval '1 hour' \
             WHERE consumer_group = 'idle'",
        )
        .await
        .unwrap();
    let groups = rows(&client, "SHOW GROUPS").await;
    assert_eq!(state(&groups, "idle"), "Dead");

    let detail = rows(&client, "SHOW GROUP fast ON g").await;
    assert_eq!(detail.len(), 2);
    let a = &detail[0];
    assert_eq!(col(a, "partition"), "a");
    assert_eq!(col(a, "cursor_offset"), "0");
    assert_eq!(col(a, "last_offset"), "1");
    assert_eq!(col(a, "lag"), "1");
    assert_eq!(col(a, "lease_from"), "0");
    assert_eq!(col(a, "lease_to"), "1");
    assert!(!col(a, "lease_expires_at").is_empty());
    assert_eq!(col(a, "retry_count"), "0");
    let b = &detail[1];
    assert_eq!(
        (col(b, "partition"), col(b, "cursor_offset"), col(b, "lag")),
        ("b".into(), "-1".into(), "1".into())
    );
    assert_eq!(b.get("lease_expires_at"), Some(&None));

    let lagging = rows(&client, "SHOW LAGGING PARTITIONS ON g OVER '1m'").await;
    let pairs: Vec<(String, String)> = lagging
        .iter()
        .map(|r| (col(r, "group"), col(r, "partition")))
        .collect();
    assert!(pairs.contains(&("idle".into(), "a".into())), "{pairs:?}");
    assert!(pairs.contains(&("fast".into(), "a".into())), "{pairs:?}");
    let only = rows(&client, "SHOW LAGGING PARTITIONS ON g GROUP fast OVER '1h'").await;
    assert!(only.is_empty());

    // Extended protocol: described before execute.
    let statement = client.prepare("SHOW GROUP $1 ON $2").await.unwrap();
    assert_eq!(statement.columns().len(), 11);
    assert_eq!(
        client
            .query(&statement, &[&"fast", &"g"])
            .await
            .unwrap()
            .len(),
        2
    );
    let statement = client
        .prepare("SHOW LAGGING PARTITIONS ON $1 GROUP $2 OVER $3")
        .await
        .unwrap();
    let got = client
        .query(&statement, &[&"g", &"idle", &"0"])
        .await
        .unwrap();
    // idle has acknowledged all of b: only a lags.
    assert_eq!(got.len(), 1);

    for (sql, code) in [
        ("SHOW GROUP fast ON nope", "42704"),
        ("SHOW GROUP nope ON g", "42704"),
        ("SHOW LAGGING PARTITIONS ON nope", "42704"),
        ("SHOW LAGGING PARTITIONS ON g GROUP nope", "42704"),
        ("SHOW LAGGING PARTITIONS ON g OVER 'later'", "22P02"),
    ] {
        let err = sql_error(&client, sql).await;
        assert_eq!(err.code().code(), code, "{sql}: {err}");
    }
    for sql in ["SHOW GROUP fast ON g", "SHOW LAGGING PARTITIONS ON g"] {
        let err = sql_error(&direct, sql).await;
        assert_eq!(err.code().code(), "42601", "{sql} in PostgreSQL: {err}");
    }
}

#[tokio::test]
async fn replay_dlq_moves_messages_back_as_new_ones_linked_to_the_originals() {
    let proxy = Proxy::start("cat_replay").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE r WITH (retry_limit = 0, retry_delay = 0, lease_time = 1)")
        .await
        .unwrap();
    client
        .batch_execute(
            "PUSH INTO r (payload, trace_id) VALUES ('{\"a\":1}', 'tr-a'), ('{\"b\":2}', NULL)",
        )
        .await
        .unwrap();
    for _ in 0..2 {
        let popped = rows(&client, "POP FROM r").await;
        let acked = rows(
            &client,
            &format!(
                "ACK '{}' FAILED REASON 'upstream timeout'",
                col(&popped[0], "receipt")
            ),
        )
        .await;
        assert_eq!(col(&acked[0], "status"), "dead_lettered");
    }
    let dlq = rows(&client, "SHOW DLQ FROM r").await;
    assert_eq!(dlq.len(), 2);
    let originals: Vec<String> = dlq.iter().map(|r| col(r, "message_id")).collect();

    let replayed = rows(&client, "REPLAY DLQ FROM r WHERE REASON LIKE 'upstream%'").await;
    assert_eq!(replayed.len(), 2);
    for r in &replayed {
        assert_eq!(col(r, "status"), "queued");
        assert_eq!(col(r, "group"), "__QUEUE_MODE__");
        assert_eq!(col(r, "partition"), "Default");
        assert!(originals.contains(&col(r, "original_message_id")));
        assert!(!originals.contains(&col(r, "message_id")));
    }
    assert_eq!(col(&replayed[0], "offset"), "2");
    assert_eq!(col(&replayed[1], "offset"), "3");
    assert!(rows(&client, "SHOW DLQ FROM r").await.is_empty());

    // The new messages carry the payload, the trace id and the link.
    let again = rows(&client, "POP FROM r LIMIT 10").await;
    assert_eq!(again.len(), 2);
    assert_eq!(col(&again[0], "payload"), "{\"a\":1}");
    assert_eq!(col(&again[0], "trace_id"), "tr-a");
    assert_eq!(
        col(&again[0], "transaction_id"),
        format!("replay:{}", col(&replayed[0], "original_message_id"))
    );

    // Nothing matching: no rows, nothing changes.
    assert!(rows(&client, "REPLAY DLQ FROM r WHERE REASON LIKE 'nope%'")
        .await
        .is_empty());
    for (sql, code) in [
        ("REPLAY DLQ FROM nope", "42704"),
        ("REPLAY DLQ FROM r PARTITION nope", "42704"),
        ("REPLAY DLQ FROM r LIMIT 0", "22023"),
        ("REPLAY DLQ FROM r LIMIT 10001", "54000"),
    ] {
        let err = sql_error(&client, sql).await;
        assert_eq!(err.code().code(), code, "{sql}: {err}");
    }
}

#[tokio::test]
async fn a_replay_that_fails_or_rolls_back_leaves_every_row_in_the_dlq() {
    let proxy = Proxy::start("cat_replay_atomic").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE ra WITH (retry_limit = 0)")
        .await
        .unwrap();
    client
        .batch_execute("PUSH INTO ra VALUES ('1'), ('2'), ('3')")
        .await
        .unwrap();
    for _ in 0..2 {
        let popped = rows(&client, "POP FROM ra").await;
        rows(
            &client,
            &format!("ACK '{}' FAILED", col(&popped[0], "receipt")),
        )
        .await;
    }
    assert_eq!(rows(&client, "SHOW DLQ FROM ra").await.len(), 2);
    client
        .batch_execute("ALTER QUEUE ra SET (max_queue_size = 2)")
        .await
        .unwrap();
    // The queue is full: the push half fails, so the take is undone too.
    let err = sql_error(&client, "REPLAY DLQ FROM ra").await;
    assert_eq!(err.code().code(), "54000", "{err}");
    assert_eq!(rows(&client, "SHOW DLQ FROM ra").await.len(), 2);
    // Over the extended protocol as well.
    let err = client
        .query("REPLAY DLQ FROM $1", &[&"ra"])
        .await
        .expect_err("full queue");
    assert_eq!(err.code().unwrap().code(), "54000");
    assert_eq!(rows(&client, "SHOW DLQ FROM ra").await.len(), 2);

    // ROLLBACK undoes a replay inside a block.
    client
        .batch_execute("ALTER QUEUE ra SET (max_queue_size = 0)")
        .await
        .unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(rows(&client, "REPLAY DLQ FROM ra").await.len(), 2);
    assert!(rows(&client, "SHOW DLQ FROM ra").await.is_empty());
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(rows(&client, "SHOW DLQ FROM ra").await.len(), 2);
    let messages = rows(&client, "SHOW MESSAGES FROM ra").await;
    assert_eq!(messages.len(), 3);
    // And COMMIT keeps it.
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(rows(&client, "REPLAY DLQ FROM ra LIMIT 1").await.len(), 1);
    client.batch_execute("COMMIT").await.unwrap();
    assert_eq!(rows(&client, "SHOW DLQ FROM ra").await.len(), 1);
    assert_eq!(rows(&client, "SHOW MESSAGES FROM ra").await.len(), 4);
}

/// Two sessions replaying the same DLQ at once, in small batches until it
/// is empty: the ledger of original ids shows each dead-lettered message
/// replayed exactly once, and the queue holds exactly one new message per
/// DLQ row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_replays_replay_each_dlq_row_exactly_once() {
    const MESSAGES: usize = 120;
    let proxy = Proxy::start("cat_replay_race").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE rr WITH (retry_limit = 0, retry_delay = 0, lease_time = 1)")
        .await
        .unwrap();
    let values: Vec<String> = (0..MESSAGES)
        .map(|i| format!("('{{\"n\":{i}}}', 'p{}')", i % 4))
        .collect();
    client
        .batch_execute(&format!(
            "PUSH INTO rr (payload, partition) VALUES {}",
            values.join(", ")
        ))
        .await
        .unwrap();
    // Dead-letter everything: fail every delivered message (the head of
    // each batch dead-letters at once, the rest come again).
    let mut dead = 0;
    while dead < MESSAGES {
        let popped = rows(&client, "POP FROM rr LIMIT 1 PARTITIONS 1").await;
        assert!(!popped.is_empty(), "{dead} dead");
        let acked = rows(
            &client,
            &format!("ACK '{}' FAILED", col(&popped[0], "receipt")),
        )
        .await;
        assert_eq!(col(&acked[0], "status"), "dead_lettered");
        dead += 1;
    }
    let originals: std::collections::BTreeSet<String> =
        rows(&client, "SHOW DLQ FROM rr LIMIT 10000")
            .await
            .iter()
            .map(|r| col(r, "message_id"))
            .collect();
    assert_eq!(originals.len(), MESSAGES);

    let mut sessions = Vec::new();
    for _ in 0..2 {
        let cfg = proxy.client_config();
        sessions.push(tokio::spawn(async move {
            let client = common::proxy::connect(&cfg).await;
            let mut ledger = Vec::new();
            loop {
                let got = rows(&client, "REPLAY DLQ FROM rr LIMIT 7").await;
                if got.is_empty() {
                    break;
                }
                ledger.extend(got.iter().map(|r| col(r, "original_message_id")));
            }
            ledger
        }));
    }
    let mut replayed = Vec::new();
    let mut per_session = Vec::new();
    for s in sessions {
        let ledger = s.await.unwrap();
        per_session.push(ledger.len());
        replayed.extend(ledger);
    }
    let unique: std::collections::BTreeSet<String> = replayed.iter().cloned().collect();
    assert_eq!(unique.len(), replayed.len(), "a DLQ row replayed twice");
    assert_eq!(unique, originals, "a DLQ row never replayed");
    assert!(rows(&client, "SHOW DLQ FROM rr").await.is_empty());
    let retained: i64 = col(&rows(&client, "SHOW QUEUES").await[0], "messages")
        .parse()
        .unwrap();
    assert_eq!(retained as usize, 2 * MESSAGES, "sessions: {per_session:?}");
}

#[tokio::test]
async fn another_tenants_dlq_cannot_be_replayed() {
    use queenwire::users::{Passthrough, User, Users, Verifier};
    use uuid::Uuid;
    let mut users = Users::default();
    for (name, tenant) in [("a", Uuid::from_u128(0xa)), ("b", Uuid::from_u128(0xb))] {
        users.users.insert(
            name.into(),
            User {
                name: name.into(),
                tenant,
                passthrough: Passthrough::None,
                verifier: Verifier::new("pw"),
            },
        );
    }
    let users = std::sync::Arc::new(users);
    let proxy = Proxy::start_with("cat_replay_tenant", |c| c.users = Some(users.clone())).await;
    let login = |name: &'static str| {
        let mut cfg = proxy.client_config();
        cfg.user(name).password("pw");
        cfg
    };
    let a = common::proxy::connect(&login("a")).await;
    let b = common::proxy::connect(&login("b")).await;
    a.batch_execute("CREATE QUEUE t WITH (retry_limit = 0)")
        .await
        .unwrap();
    a.batch_execute("PUSH INTO t VALUES ('1')").await.unwrap();
    let popped = rows(&a, "POP FROM t").await;
    rows(&a, &format!("ACK '{}' FAILED", col(&popped[0], "receipt"))).await;
    // b has no queue t: its replay, browse and group views see nothing of a's.
    let err = sql_error(&b, "REPLAY DLQ FROM t").await;
    assert_eq!(err.code().code(), "42704");
    let err = sql_error(&b, "SHOW MESSAGES FROM t").await;
    assert_eq!(err.code().code(), "42704");
    b.batch_execute("CREATE QUEUE t").await.unwrap();
    assert!(rows(&b, "REPLAY DLQ FROM t").await.is_empty());
    assert_eq!(rows(&a, "SHOW DLQ FROM t").await.len(), 1);
    assert_eq!(rows(&a, "REPLAY DLQ FROM t").await.len(), 1);
}

#[tokio::test]
async fn show_trace_follows_a_trace_across_queues_with_each_groups_state() {
    let proxy = Proxy::start("cat_trace").await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    client
        .batch_execute(
            "CREATE QUEUE orders WITH (retry_limit = 0); \
             PUSH INTO orders (payload, trace_id) VALUES ('{\"o\":1}', 'checkout-1'), ('{\"o\":2}', 'other'), ('{\"o\":3}', NULL); \
             PUSH INTO emails (payload, partition, trace_id) VALUES ('{\"e\":1}', 'eu', 'checkout-1')",
        )
        .await
        .unwrap();
    // Untraced messages write no trace rows.
    let traced: i64 = direct
        .query_one("SELECT count(*) FROM queen.log_traces", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(traced, 3);
    let trace = rows(&client, "SHOW TRACE 'checkout-1'").await;
    let seen: Vec<(String, String, String)> = trace
        .iter()
        .map(|r| (col(r, "queue"), col(r, "group"), col(r, "state")))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("orders".into(), String::new(), "pushed".into()),
            ("emails".into(), String::new(), "pushed".into()),
        ]
    );
    assert_eq!(col(&trace[1], "partition"), "eu");
    assert_eq!(col(&trace[0], "payload"), "{\"o\":1}");

    // orders: group a acks, group b leases, queue mode dead-letters.
    let a = rows(&client, "POP FROM orders GROUP a").await;
    rows(&client, &format!("ACK '{}'", col(&a[0], "receipt"))).await;
    rows(&client, "POP FROM orders GROUP b LEASE 300").await;
    let q = rows(&client, "POP FROM orders").await;
    rows(&client, &format!("ACK '{}' FAILED", col(&q[0], "receipt"))).await;
    let trace = rows(&client, "SHOW TRACE 'checkout-1'").await;
    let seen: Vec<(String, String, String)> = trace
        .iter()
        .map(|r| (col(r, "queue"), col(r, "group"), col(r, "state")))
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                "orders".into(),
                "__QUEUE_MODE__".into(),
                "dead_lettered".into()
            ),
            ("orders".into(), "a".into(), "acked".into()),
            ("orders".into(), "b".into(), "leased".into()),
            ("emails".into(), String::new(), "pushed".into()),
        ]
    );

    // A replay keeps the trace: the new message joins it.
    let replayed = rows(&client, "REPLAY DLQ FROM orders").await;
    assert_eq!(replayed.len(), 1);
    let trace = rows(&client, "SHOW TRACE $$checkout-1$$").await;
    assert_eq!(trace.len(), 7, "{trace:?}");

    // Extended protocol, unknown trace, bad input, not PostgreSQL.
    let statement = client.prepare("SHOW TRACE $1").await.unwrap();
    assert_eq!(statement.columns().len(), 9);
    assert!(client
        .query(&statement, &[&"nobody"])
        .await
        .unwrap()
        .is_empty());
    let err = sql_error(&client, "SHOW TRACE ''").await;
    assert_eq!(err.code().code(), "22023");
    let err = sql_error(&direct, "SHOW TRACE 'x'").await;
    assert_eq!(err.code().code(), "42601");
}

#[tokio::test]
async fn show_status_and_the_status_view_give_the_tenants_overview() {
    let proxy = Proxy::start("cat_status").await;
    let client = proxy.connect().await;
    let empty = rows(&client, "SHOW STATUS").await;
    assert_eq!(empty.len(), 1);
    assert_eq!(col(&empty[0], "queues"), "0");
    client
        .batch_execute(
            "CREATE QUEUE s1 WITH (retry_limit = 0); \
             PUSH INTO s1 (payload, partition) VALUES ('1', 'a'), ('2', 'a'), ('3', 'b'), ('4', 'c'); \
             PUSH INTO s2 VALUES ('5')",
        )
        .await
        .unwrap();
    let held = rows(&client, "POP FROM s1 PARTITION a LIMIT 2 LEASE 300").await;
    rows(&client, &format!("ACK '{}'", col(&held[0], "receipt"))).await;
    let dead = rows(&client, "POP FROM s1 PARTITION b").await;
    rows(
        &client,
        &format!("ACK '{}' FAILED", col(&dead[0], "receipt")),
    )
    .await;

    let status = rows(&client, "SHOW STATUS").await;
    let s = &status[0];
    let get = |name: &str| col(s, name);
    assert_eq!(get("queues"), "2");
    assert_eq!(get("partitions"), "4");
    assert_eq!(get("consumer_groups"), "1");
    assert_eq!(get("messages"), "5");
    // s1: a has 1 unacked (leased), b is past its dead-lettered one, c 1; s2 1.
    assert_eq!(get("pending"), "3");
    assert_eq!(get("processing"), "1");
    assert_eq!(get("dead_lettered"), "1");
    assert_eq!(get("active_leases"), "1");
    assert_eq!(get("pushed_last_minute"), "5");
    let throughput = get("throughput");
    assert_eq!(throughput.matches("\"minute\"").count(), 16, "{throughput}");
    assert!(throughput.contains("\"pushed\": 5"), "{throughput}");

    // Described before execute; the view says the same.
    let statement = client.prepare("SHOW STATUS").await.unwrap();
    assert_eq!(statement.columns().len(), 10);
    assert_eq!(
        statement.columns()[9].type_(),
        &tokio_postgres::types::Type::JSONB
    );
    let view = rows(
        &client,
        "SELECT queues, pending, processing, dead_lettered FROM queen.status",
    )
    .await;
    assert_eq!(view.len(), 1);
    assert_eq!(
        (
            col(&view[0], "queues"),
            col(&view[0], "pending"),
            col(&view[0], "processing")
        ),
        ("2".into(), "3".into(), "1".into())
    );
    let per_minute = rows(
        &client,
        "SELECT queue, sum(pushed) AS pushed FROM queen.throughput_per_minute GROUP BY queue ORDER BY queue",
    )
    .await;
    assert_eq!(per_minute.len(), 2);
    assert_eq!(col(&per_minute[0], "pushed"), "4");
    let err = sql_error(&client, "SHOW STATUS OF q").await;
    assert_eq!(err.code().code(), "42601");
    // PostgreSQL itself knows no parameter "status": the statement can only fail there.
    let direct = proxy.connect_direct().await;
    let err = sql_error(&direct, "SHOW status").await;
    assert_eq!(err.code().code(), "42704");
}

/// In time mode each partition's first segment may hold older messages
/// (it counts as one toward the limit in the procedure); the browse still
/// returns exactly LIMIT rows when there are that many, in partition order.
#[tokio::test]
async fn show_messages_from_a_time_over_many_partitions_returns_the_limit() {
    let proxy = Proxy::start("cat_browse_time").await;
    let client = proxy.connect().await;
    let values: Vec<String> = (0..60)
        .map(|i| format!("('{{\"n\":{i}}}', 'p{:02}')", i % 30))
        .collect();
    client
        .batch_execute(&format!(
            "PUSH INTO t (payload, partition) VALUES {}",
            values.join(", ")
        ))
        .await
        .unwrap();
    let got = rows(&client, "SHOW MESSAGES FROM t FROM '2000-01-01' LIMIT 7").await;
    assert_eq!(got.len(), 7);
    let partitions: Vec<String> = got.iter().map(|r| col(r, "partition")).collect();
    assert_eq!(
        partitions,
        ["p00", "p00", "p01", "p01", "p02", "p02", "p03"]
    );
    let all = rows(&client, "SHOW MESSAGES FROM t FROM '2000-01-01' LIMIT 1000").await;
    assert_eq!(all.len(), 60);
}

#[tokio::test]
async fn retention_takes_the_trace_rows_of_the_messages_it_deletes() {
    let proxy = Proxy::start("cat_trace_retention").await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    client
        .batch_execute("CREATE QUEUE old WITH (retention_seconds = 1)")
        .await
        .unwrap();
    for n in 0..3 {
        rows(
            &client,
            &format!("PUSH INTO old (payload, trace_id) VALUES ('{n}', 'tr')"),
        )
        .await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    rows(
        &client,
        "PUSH INTO old (payload, trace_id) VALUES ('\"fresh\"', 'tr')",
    )
    .await;
    let pid: i64 = direct
        .query_one("SELECT id FROM queen.log_partitions", &[])
        .await
        .unwrap()
        .get(0);
    loop {
        let more: bool = direct
            .query_one(
                "SELECT more FROM queen.log_retention_step_v1($1, 100)",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0);
        if !more {
            break;
        }
    }
    let left: i64 = direct
        .query_one("SELECT count(*) FROM queen.log_traces", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 1);
    let trace = rows(&client, "SHOW TRACE 'tr'").await;
    assert_eq!(trace.len(), 1);
    assert_eq!(col(&trace[0], "payload"), "\"fresh\"");
}

/// psql, as a user types the statements: simple protocol, several in one go.
#[tokio::test]
async fn psql_runs_the_catalogue_statements() {
    let proxy = Proxy::start("cat_psql").await;
    let script = "CREATE QUEUE p WITH (retry_limit = 0);\n\
        PUSH INTO p (payload, trace_id) VALUES ('{\"a\":1}', 'tp');\n\
        SHOW MESSAGES FROM p;\n\
        SHOW TRACE 'tp';\n\
        SHOW GROUPS;\n\
        SHOW LAGGING PARTITIONS ON p OVER 0;\n\
        REPLAY DLQ FROM p;\n\
        SHOW STATUS;\n";
    let (ok, out, err) = proxy.psql(&["-c", script]).await;
    assert!(ok, "{err}");
    let (ok, out2, err) = proxy
        .psql(&["-At", "-c", "SHOW MESSAGES FROM p", "-c", "SHOW STATUS"])
        .await;
    assert!(ok, "{err}");
    assert!(out2.contains("|{\"a\":1}|pending"), "{out2}");
    assert!(
        out2.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("1|1|0|1|1|0|0|0|1|")),
        "{out2}"
    );
    // psql shows every statement's result of the one Query message.
    assert!(out.contains("pending") && out.contains("pushed"), "{out}");
    let (ok, _, err) = proxy.psql(&["-c", "SHOW MESSAGES FROM nope"]).await;
    assert!(!ok);
    assert!(err.contains("does not exist"), "{err}");
}
