//! Retention and partition cleanup (sql/procedures/006, src/engine/retention.rs):
//! the two rules and their watermarks, the cleanup rules, the defaults, and
//! a log that stays bounded while it is pushed to and acknowledged.
//!
//! The rule tests call the steps directly on the proxy's database (the
//! proxy's own cycle is set to an hour, so it stays out of the way after its
//! first, empty, pass); the bounded-disk test lets the elected loop run.

mod common;

use common::proxy::Proxy;
use common::sql::rows;
use queenwire::engine::retention::RetentionSettings;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

fn quiet_cycle() -> RetentionSettings {
    RetentionSettings {
        interval: Duration::from_secs(3600),
        cleanup_age: Duration::from_secs(3600),
    }
}

async fn quiet_proxy(prefix: &str) -> Proxy {
    Proxy::start_with(prefix, |c| c.retention = quiet_cycle()).await
}

fn col(row: &common::sql::Row, name: &str) -> String {
    row.get(name).cloned().flatten().unwrap_or_default()
}

async fn partition_id(direct: &Client, queue: &str, partition: &str) -> i64 {
    direct
        .query_one(
            "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
             WHERE q.name = $1 AND p.name = $2",
            &[&queue, &partition],
        )
        .await
        .unwrap()
        .get(0)
}

/// (segments, first_offset, expired_offset, last_offset) of a partition.
async fn partition_state(direct: &Client, id: i64) -> (i64, i64, i64, i64) {
    let row = direct
        .query_one(
            "SELECT (SELECT count(*) FROM queen.log_segments s WHERE s.partition_id = p.id),
                    p.first_offset, p.expired_offset, p.last_offset
             FROM queen.log_partitions p WHERE p.id = $1",
            &[&id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

/// Retention steps on one partition until one marks nothing (so the last
/// batch marked is purged too): the sums of (segments, messages, expired).
async fn step(direct: &Client, id: i64) -> (i32, i64, i64) {
    let mut total = (0, 0, 0);
    loop {
        let row = direct
            .query_one(
                "SELECT segments, messages, expired, more FROM queen.log_retention_step_v1($1, 100)",
                &[&id],
            )
            .await
            .unwrap();
        let (segments, messages, expired): (i32, i64, i64) = (row.get(0), row.get(1), row.get(2));
        total = (total.0 + segments, total.1 + messages, total.2 + expired);
        let more: bool = row.get(3);
        if !more {
            return total;
        }
    }
}

async fn cleanup(direct: &Client, age_seconds: i32) -> i32 {
    direct
        .query_one(
            "SELECT queen.log_partition_cleanup_step_v1($1, 100)",
            &[&age_seconds],
        )
        .await
        .unwrap()
        .get(0)
}

async fn pop_and_ack(client: &Client, sql: &str) -> Vec<String> {
    let got = rows(client, sql).await;
    let payloads = got.iter().map(|r| col(r, "payload")).collect();
    for r in &got {
        let receipt = col(r, "receipt").replace('\'', "''");
        let acked = rows(client, &format!("ACK '{receipt}'")).await;
        assert_eq!(col(&acked[0], "status"), "acked");
    }
    payloads
}

#[tokio::test]
async fn a_new_queue_keeps_completed_messages_7_days_and_unconsumed_ones_forever() {
    let proxy = quiet_proxy("retention_defaults").await;
    let client = proxy.connect().await;
    client.batch_execute("CREATE QUEUE plain").await.unwrap();
    let direct = proxy.connect_direct().await;
    let row = direct
        .query_one(
            "SELECT retention_enabled, retention_seconds, completed_retention_seconds
             FROM queen.queues WHERE name = 'plain'",
            &[],
        )
        .await
        .unwrap();
    let enabled: bool = row.get(0);
    let age: i32 = row.get(1);
    let completed: i32 = row.get(2);
    assert_eq!((enabled, age, completed), (true, 0, 7 * 24 * 3600));
    assert_eq!(
        RetentionSettings::default().cleanup_age,
        Duration::from_secs(7 * 24 * 3600)
    );
}

#[tokio::test]
async fn completed_segments_go_once_every_group_has_passed_them_and_old_enough() {
    let proxy = quiet_proxy("retention_completed").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE done WITH (completed_retention_seconds = 1)")
        .await
        .unwrap();
    for n in 0..3 {
        rows(&client, &format!("PUSH INTO done VALUES ('{n}')")).await;
    }
    let direct = proxy.connect_direct().await;
    let pid = partition_id(&direct, "done", "Default").await;

    // Nobody has consumed anything: nothing is due, however old.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(step(&direct, pid).await, (0, 0, 0));

    // The queue-mode group acknowledges 0 and 1; group `audit` only 0.
    assert_eq!(
        pop_and_ack(&client, "POP FROM done LIMIT 2").await,
        ["0", "1"]
    );
    assert_eq!(
        pop_and_ack(&client, "POP FROM done GROUP audit LIMIT 1").await,
        ["0"]
    );
    assert_eq!(step(&direct, pid).await, (1, 1, 0));
    assert_eq!(partition_state(&direct, pid).await, (2, 1, -1, 2));
    // Nothing more is due until `audit` moves on.
    assert_eq!(step(&direct, pid).await, (0, 0, 0));
    assert_eq!(
        pop_and_ack(&client, "POP FROM done GROUP audit LIMIT 1").await,
        ["1"]
    );
    assert_eq!(step(&direct, pid).await, (1, 1, 0));
    assert_eq!(partition_state(&direct, pid).await, (1, 2, -1, 2));

    // Both groups still get what is left, and SHOW counts what is stored.
    assert_eq!(pop_and_ack(&client, "POP FROM done LIMIT 5").await, ["2"]);
    assert_eq!(
        pop_and_ack(&client, "POP FROM done GROUP audit LIMIT 5").await,
        ["2"]
    );
    let shown = rows(&client, "SHOW PARTITIONS FROM done").await;
    assert_eq!(col(&shown[0], "messages"), "1", "{shown:?}");
}

#[tokio::test]
async fn old_segments_go_by_age_consumed_or_not_and_are_counted_as_expired() {
    let proxy = quiet_proxy("retention_age").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE aged WITH (retention_seconds = 1)")
        .await
        .unwrap();
    for n in 0..3 {
        rows(&client, &format!("PUSH INTO aged VALUES ('{n}')")).await;
    }
    assert_eq!(pop_and_ack(&client, "POP FROM aged LIMIT 1").await, ["0"]);
    let direct = proxy.connect_direct().await;
    let pid = partition_id(&direct, "aged", "Default").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    rows(&client, "PUSH INTO aged VALUES ('\"fresh\"')").await;

    // Three old segments go; two of their messages were never acknowledged.
    assert_eq!(step(&direct, pid).await, (3, 3, 2));
    assert_eq!(partition_state(&direct, pid).await, (1, 3, 2, 3));
    // The group's next POP starts at the oldest message left.
    assert_eq!(
        pop_and_ack(&client, "POP FROM aged LIMIT 5").await,
        ["\"fresh\""]
    );
    let history = rows(&client, "SHOW PARTITIONS FROM aged").await;
    assert_eq!(col(&history[0], "messages"), "1", "{history:?}");
}

#[tokio::test]
async fn a_queue_with_retention_disabled_keeps_everything() {
    let proxy = quiet_proxy("retention_off").await;
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE QUEUE kept WITH (retention_enabled = false, retention_seconds = 1, completed_retention_seconds = 1)",
        )
        .await
        .unwrap();
    rows(&client, "PUSH INTO kept VALUES ('1')").await;
    pop_and_ack(&client, "POP FROM kept").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let direct = proxy.connect_direct().await;
    let pid = partition_id(&direct, "kept", "Default").await;
    let work: i64 = direct
        .query_one(
            "SELECT count(*) FROM queen.log_retention_work_v1(0, 100)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(work, 0);
    assert_eq!(step(&direct, pid).await, (0, 0, 0));
    assert_eq!(partition_state(&direct, pid).await.0, 1);
}

#[tokio::test]
async fn a_step_steps_over_a_partition_a_push_holds_and_never_leaves_a_hole() {
    let proxy = quiet_proxy("retention_skip").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE busy WITH (retention_seconds = 1)")
        .await
        .unwrap();
    rows(&client, "PUSH INTO busy VALUES ('1')").await;
    let direct = proxy.connect_direct().await;
    let pid = partition_id(&direct, "busy", "Default").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // A push holding the partition row in an open transaction block.
    client.batch_execute("BEGIN").await.unwrap();
    rows(&client, "PUSH INTO busy VALUES ('2')").await;
    let started = Instant::now();
    assert_eq!(step(&direct, pid).await, (0, 0, 0));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the step waited"
    );
    client.batch_execute("COMMIT").await.unwrap();

    // Only the old prefix goes; the fresh segment stays.
    assert_eq!(step(&direct, pid).await, (1, 1, 1));
    assert_eq!(partition_state(&direct, pid).await, (1, 1, 0, 1));
}

#[tokio::test]
async fn cleanup_deletes_empty_idle_partitions_but_never_one_with_dlq_rows() {
    let proxy = quiet_proxy("retention_cleanup").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE sparse WITH (retention_seconds = 1, retry_limit = 0)")
        .await
        .unwrap();
    rows(
        &client,
        "PUSH INTO sparse (payload, partition) VALUES ('1', 'empty'), ('2', 'dead'), ('3', 'live')",
    )
    .await;
    // `dead` gets a DLQ row: its one message fails with no retry left.
    let popped = rows(&client, "POP FROM sparse PARTITION dead").await;
    let receipt = col(&popped[0], "receipt");
    let failed = rows(&client, &format!("ACK '{receipt}' FAILED")).await;
    assert_eq!(col(&failed[0], "status"), "dead_lettered");
    let direct = proxy.connect_direct().await;
    let empty = partition_id(&direct, "sparse", "empty").await;
    let dead = partition_id(&direct, "sparse", "dead").await;
    let live = partition_id(&direct, "sparse", "live").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    rows(
        &client,
        "PUSH INTO sparse (payload, partition) VALUES ('4', 'live')",
    )
    .await;
    for pid in [empty, dead, live] {
        step(&direct, pid).await;
    }
    assert_eq!(partition_state(&direct, empty).await.0, 0);
    assert_eq!(partition_state(&direct, dead).await.0, 0);

    // Younger than the cleanup age: kept.
    assert_eq!(cleanup(&direct, 3600).await, 0);
    // Old enough: the empty one goes, the one with DLQ rows and the one
    // with a message stay.
    assert_eq!(cleanup(&direct, 0).await, 1);
    let left: Vec<String> = direct
        .query(
            "SELECT p.name::text FROM queen.log_partitions p ORDER BY p.name",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["dead", "live"]);
    assert_eq!(rows(&client, "SHOW DLQ FROM sparse").await.len(), 1);

    // A later push recreates it under a new id, from offset 0.
    let again = rows(
        &client,
        "PUSH INTO sparse (payload, partition) VALUES ('5', 'empty')",
    )
    .await;
    assert_eq!(col(&again[0], "offset"), "0");
    assert!(partition_id(&direct, "sparse", "empty").await > live);
}

/// Pushes and acknowledges continuously for a bounded time with short
/// completed retention and a one-second cycle; the segment count levels
/// off instead of growing with the number of writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_stays_bounded_while_messages_are_pushed_and_acknowledged() {
    const RUN: Duration = Duration::from_secs(12);
    let proxy = Proxy::start_with("retention_bounded", |c| {
        c.retention = RetentionSettings {
            interval: Duration::from_secs(1),
            cleanup_age: Duration::from_secs(3600),
        }
    })
    .await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE stream WITH (completed_retention_seconds = 1)")
        .await
        .unwrap();
    let direct = proxy.connect_direct().await;
    let started = Instant::now();
    let mut pushed = 0u64;
    let mut samples: Vec<(Duration, i64)> = Vec::new();
    let mut sizes: Vec<(Duration, i64)> = Vec::new();
    let mut next_sample = Duration::ZERO;
    let mut next_vacuum = Duration::from_secs(2);
    while started.elapsed() < RUN {
        let values: Vec<String> = (0..10).map(|i| format!("('{{\"n\":{i}}}')")).collect();
        rows(
            &client,
            &format!("PUSH INTO stream VALUES {}", values.join(", ")),
        )
        .await;
        pushed += 1;
        pop_and_ack(&client, "POP FROM stream LIMIT 10").await;
        if started.elapsed() >= next_sample {
            let n: i64 = direct
                .query_one("SELECT count(*) FROM queen.log_segments", &[])
                .await
                .unwrap()
                .get(0);
            samples.push((started.elapsed(), n));
            next_sample += Duration::from_millis(500);
        }
        // Standing in for autovacuum, which would not wake within the run.
        if started.elapsed() >= next_vacuum {
            sizes.push((started.elapsed(), vacuumed_log_size(&direct).await));
            next_vacuum += Duration::from_secs(2);
        }
    }
    let during = |samples: &[(Duration, i64)], from: Duration, to: Duration| {
        samples
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(0)
    };
    let first_half = during(&samples, Duration::ZERO, RUN / 2);
    let second_half = during(&samples, RUN / 2, RUN);
    eprintln!("pushed {pushed} segments; segment count samples {samples:?}");
    eprintln!("log tables after VACUUM, bytes: {sizes:?}");
    // Far fewer segments kept than written, and no growth from one half of
    // the run to the other (the count saw-tooths between passes).
    assert!(pushed > 50, "too few pushes to tell: {pushed}");
    assert!(
        (second_half as u64) < pushed / 2,
        "kept {second_half} of {pushed}"
    );
    // Passes can fall behind on a loaded machine, so what is checked is
    // that they catch up: once the pushes stop, the next passes bring the
    // count back to what the first half kept (within a generous bound of
    // time, which only catches a hang).
    let caught_up = Instant::now();
    let mut settled = i64::MAX;
    while caught_up.elapsed() < Duration::from_secs(60) {
        settled = direct
            .query_one("SELECT count(*) FROM queen.log_segments", &[])
            .await
            .unwrap()
            .get(0);
        if settled <= first_half + 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        settled <= first_half + 10,
        "still growing: {first_half} then {second_half}, {settled} after the pushes stopped"
    );
    let passes: i64 = direct
        .query_one(
            "SELECT count(*) FROM queen.retention_history WHERE task = 'retention' AND segments > 0",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(passes >= 2, "{passes} retention passes deleted something");

    // And the bytes: after VACUUM the log tables stop growing too.
    let bytes_first = during(&sizes, Duration::ZERO, RUN / 2);
    let settled_bytes = vacuumed_log_size(&direct).await;
    assert!(
        settled_bytes <= bytes_first * 3 / 2 + 65536,
        "log tables still growing: {sizes:?}, {settled_bytes} once caught up"
    );
}

/// pg_total_relation_size of log_segments and log_txns after a VACUUM.
async fn vacuumed_log_size(direct: &Client) -> i64 {
    direct
        .batch_execute("VACUUM queen.log_segments, queen.log_txns")
        .await
        .unwrap();
    direct
        .query_one(
            "SELECT pg_total_relation_size('queen.log_segments') + pg_total_relation_size('queen.log_txns')",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn the_retained_bytes_slow_lane_measures_what_each_queue_keeps() {
    let proxy = quiet_proxy("retention_bytes").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE small WITH (retention_seconds = 1); CREATE QUEUE big")
        .await
        .unwrap();
    rows(&client, "PUSH INTO small VALUES ('1')").await;
    for _ in 0..3 {
        rows(
            &client,
            "PUSH INTO big (payload, partition) VALUES ('1', 'a'), ('2', 'a'), ('3', 'b')",
        )
        .await;
    }
    let direct = proxy.connect_direct().await;
    assert_eq!(
        measure_retained(&direct).await,
        [
            ("big".to_string(), 2, 6, 9, true),
            ("small".to_string(), 1, 1, 1, true)
        ]
    );
    // After retention took `small`'s message, the next lap says so.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let pid = partition_id(&direct, "small", "Default").await;
    step(&direct, pid).await;
    assert_eq!(
        measure_retained(&direct).await[1],
        ("small".to_string(), 1, 0, 0, false)
    );
    // A dropped queue's figures go with it.
    client.batch_execute("DROP QUEUE big").await.unwrap();
    assert_eq!(measure_retained(&direct).await.len(), 1);
}

/// One lap of the slow lane (pages of one queue, to cross page
/// boundaries), then per queue: (name, partitions, segments, messages,
/// bytes > 0), checking the bytes against the segments themselves.
async fn measure_retained(direct: &Client) -> Vec<(String, i32, i64, i64, bool)> {
    let mut after: Option<uuid::Uuid> = None;
    loop {
        let row = direct
            .query_one(
                "SELECT last_queue_id, queues FROM queen.log_retained_bytes_step_v1($1, 1)",
                &[&after],
            )
            .await
            .unwrap();
        let queues: i32 = row.get(1);
        if queues == 0 {
            break;
        }
        after = row.get(0);
    }
    direct
        .query(
            "SELECT q.name::text, r.partitions, r.segments, r.messages, r.bytes,
                    (SELECT COALESCE(sum(s.byte_size), 0)::bigint FROM queen.log_segments s
                     JOIN queen.log_partitions p ON p.id = s.partition_id WHERE p.queue_id = q.id)
             FROM queen.queue_retained_bytes r JOIN queen.queues q ON q.id = r.queue_id
             ORDER BY q.name",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let bytes: i64 = r.get(4);
            let actual: i64 = r.get(5);
            assert_eq!(bytes, actual);
            (r.get(0), r.get(1), r.get(2), r.get(3), bytes > 0)
        })
        .collect()
}

/// A message retention removed while it was leased, then dead-lettered when
/// its lease expired, has no payload: SHOW DLQ lists it with NULL payload
/// and message id, and the session goes on.
#[tokio::test]
async fn a_dead_letter_whose_message_retention_removed_is_listed_without_payload() {
    let proxy = quiet_proxy("retention_dlq_gone").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE gone_dlq WITH (retention_seconds = 1, retry_limit = 0)")
        .await
        .unwrap();
    rows(&client, "PUSH INTO gone_dlq VALUES ('1'), ('2')").await;
    let popped = rows(&client, "POP FROM gone_dlq LIMIT 1 LEASE '1s'").await;
    assert_eq!(popped.len(), 1);
    let direct = proxy.connect_direct().await;
    let pid = partition_id(&direct, "gone_dlq", "Default").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    step(&direct, pid).await;
    // The expired lease is a failure past the limit: dead-lettered.
    let deadline = Instant::now() + Duration::from_secs(20);
    let listed = loop {
        client.simple_query("POP FROM gone_dlq").await.unwrap();
        let listed = rows(&client, "SHOW DLQ FROM gone_dlq").await;
        if !listed.is_empty() || Instant::now() > deadline {
            break listed;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(listed.len(), 1, "the expired lease is dead-lettered");
    assert_eq!(col(&listed[0], "offset"), "0");
    assert_eq!(listed[0].get("payload").cloned().flatten(), None);
    assert_eq!(listed[0].get("message_id").cloned().flatten(), None);
    rows(&client, "SELECT 1").await;
}

/// A shared group never leases what retention removed before delivery:
/// those offsets are expired, not leased without a payload and later
/// dead-lettered as failures.
#[tokio::test]
async fn a_shared_group_skips_what_retention_removed() {
    let proxy = quiet_proxy("retention_shared_skip").await;
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE QUEUE skipped WITH (ordered = false, retention_seconds = 1, retry_limit = 0)",
        )
        .await
        .unwrap();
    for n in 0..4 {
        rows(&client, &format!("PUSH INTO skipped VALUES ('{n}')")).await;
    }
    let popped = rows(&client, "POP FROM skipped LIMIT 1").await;
    assert_eq!(col(&popped[0], "offset"), "0");
    let receipt = col(&popped[0], "receipt");
    rows(&client, &format!("ACK '{receipt}'")).await;
    let direct = proxy.connect_direct().await;
    let pid = partition_id(&direct, "skipped", "Default").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    step(&direct, pid).await;
    rows(&client, "PUSH INTO skipped VALUES ('4')").await;
    let popped = rows(&client, "POP FROM skipped LIMIT 10 LEASE '1s'").await;
    let got: Vec<String> = popped.iter().map(|r| col(r, "offset")).collect();
    assert_eq!(got, ["4"]);
    let leased: i64 = direct
        .query_one(
            "SELECT count(*) FROM queen.log_shared_records r
             WHERE r.partition_id = $1 AND r.state = 0",
            &[&pid],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(leased, 1, "only the message delivered is leased");
    let receipt = col(&popped[0], "receipt");
    rows(&client, &format!("ACK '{receipt}'")).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(rows(&client, "POP FROM skipped LIMIT 10").await.is_empty());
    assert!(rows(&client, "SHOW DLQ FROM skipped").await.is_empty());
}
