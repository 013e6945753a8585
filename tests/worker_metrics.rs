//! Seed files 019 and 020: the metrics tables, the partition lifecycle
//! triggers (attached once, never re-created by a boot) and the rollup that
//! folds their deltas.

mod common;

use common::proxy::Proxy;
use queenwire::engine::schema;

async fn trigger_oids(client: &tokio_postgres::Client) -> Vec<(String, u32)> {
    client
        .query(
            "SELECT t.tgname::text, t.oid FROM pg_trigger t \
             WHERE t.tgrelid = 'queen.log_partitions'::regclass AND NOT t.tgisinternal \
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test]
async fn partition_counters_are_attached_once_and_rolled_up() {
    let proxy = Proxy::start("worker_metrics").await;
    let direct = proxy.connect_direct().await;
    let client = proxy.connect().await;

    let before = trigger_oids(&direct).await;
    assert_eq!(
        before.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        [
            "trg_partitions_created_counter",
            "trg_partitions_deleted_counter",
            // 030: no partition for an ephemeral queue (once a statement).
            "trg_partitions_ephemeral_guard"
        ]
    );
    // A second boot's apply leaves the triggers alone (no DROP/CREATE on
    // the hot table): same trigger rows.
    schema::apply(&direct).await.unwrap();
    assert_eq!(trigger_oids(&direct).await, before);

    // Three new partitions in one PUSH, one more in another; pushing again
    // into existing ones adds nothing.
    client
        .simple_query(
            "PUSH INTO wm (partition, payload) VALUES ('a', '{}'), ('b', '{}'), ('c', '{}')",
        )
        .await
        .unwrap();
    client
        .simple_query("PUSH INTO wm PARTITION 'd' VALUES ('{}')")
        .await
        .unwrap();
    client
        .simple_query("PUSH INTO wm (partition, payload) VALUES ('a', '{}'), ('d', '{}')")
        .await
        .unwrap();
    let deltas: i64 = direct
        .query_one(
            "SELECT COALESCE(sum(d.created), 0) FROM queen.partition_counter_deltas d \
             JOIN queen.queues q ON q.id = d.queue_id WHERE q.name = 'wm'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(deltas, 4);

    let folded: i32 = direct
        .query_one("SELECT queen.metrics_rollup_v1()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(folded >= 2, "{folded}");
    let (created, count): (i64, i64) = {
        let r = direct
            .query_one(
                "SELECT sum(m.partitions_created)::int8, max(m.partition_count)::int8 \
                 FROM queen.queue_ops_metrics m JOIN queen.queues q ON q.id = m.queue_id \
                 WHERE q.name = 'wm'",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((created, count), (4, 4));
    let left: i64 = direct
        .query_one("SELECT count(*) FROM queen.partition_counter_deltas", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);

    // Dropping the queue deletes its partitions (a deleted-counter delta for
    // a queue that no longer exists, dropped by the next rollup) and, by
    // cascade, its metrics rows.
    client.simple_query("DROP QUEUE wm").await.unwrap();
    direct
        .query_one("SELECT queen.metrics_rollup_v1()", &[])
        .await
        .unwrap();
    let rows: i64 = direct
        .query_one(
            "SELECT (SELECT count(*) FROM queen.queue_ops_metrics m \
                     WHERE NOT EXISTS (SELECT 1 FROM queen.queues q WHERE q.id = m.queue_id)) \
                  + (SELECT count(*) FROM queen.partition_counter_deltas)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn a_process_flush_adds_counters_and_replaces_gauges() {
    let proxy = Proxy::start("worker_metrics_flush").await;
    let direct = proxy.connect_direct().await;
    let client = proxy.connect().await;
    client.simple_query("CREATE QUEUE wf").await.unwrap();
    let flush = "SELECT queen.metrics_flush_v1('host-a', 42, '2026-12-01 10:00:30+00', $1::text::jsonb, $2::text::jsonb)";
    let tenant = queenwire::engine::DEFAULT_TENANT.to_string();
    let queues = format!(
        r#"[{{"tenant":"{tenant}","queue":"wf","push_messages":5}},{{"tenant":"{tenant}","queue":"gone","push_messages":9}}]"#
    );
    for (sessions, pushes) in [(3, 10), (7, 20)] {
        let worker = format!(r#"{{"sessions":{sessions},"push_messages":{pushes}}}"#);
        let n: i32 = direct
            .query_one(flush, &[&worker, &queues])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 1, "only the existing queue gets a row");
    }
    let r = direct
        .query_one(
            "SELECT sessions, push_messages, bucket_time::text FROM queen.worker_metrics \
             WHERE hostname = 'host-a' AND pid = 42",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(r.get::<_, i32>(0), 7);
    assert_eq!(r.get::<_, i64>(1), 30);
    assert_eq!(r.get::<_, String>(2), "2026-12-01 10:00:00+00");
    let pushed: i64 = direct
        .query_one(
            "SELECT m.push_messages FROM queen.queue_ops_metrics m \
             JOIN queen.queues q ON q.id = m.queue_id WHERE q.name = 'wf'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(pushed, 10);
    // Old rows go with the rollup's keep interval.
    direct
        .query_one("SELECT queen.metrics_rollup_v1('1 minute')", &[])
        .await
        .unwrap();
    let old: i64 = direct
        .query_one(
            "SELECT count(*) FROM queen.worker_metrics WHERE hostname = 'host-a'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(old, 0);
}

/// A running queenwire writes its own counters: its row of
/// queen.worker_metrics and its queues' rows of queen.queue_ops_metrics
/// (here every second instead of every minute).
#[tokio::test]
async fn a_running_queenwire_flushes_its_counters() {
    let proxy = Proxy::start_with("worker_metrics_live", |c| {
        c.metrics_flush_interval = std::time::Duration::from_millis(500);
    })
    .await;
    let direct = proxy.connect_direct().await;
    let client = proxy.connect().await;
    for _ in 0..3 {
        client
            .simple_query("PUSH INTO wl VALUES ('{}')")
            .await
            .unwrap();
    }
    client
        .simple_query("POP FROM wl LIMIT 2 AUTO ACK")
        .await
        .unwrap();
    let pid = std::process::id() as i32;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let worker = direct
            .query_one(
                "SELECT COALESCE(sum(push_messages), 0)::int8, COALESCE(sum(pop_messages), 0)::int8 \
                 FROM queen.worker_metrics WHERE pid = $1",
                &[&pid],
            )
            .await
            .unwrap();
        let queue = direct
            .query_one(
                "SELECT COALESCE(sum(m.push_messages), 0)::int8, COALESCE(sum(m.pop_messages), 0)::int8 \
                 FROM queen.queue_ops_metrics m JOIN queen.queues q ON q.id = m.queue_id \
                 WHERE q.name = 'wl'",
                &[],
            )
            .await
            .unwrap();
        let got = (
            worker.get::<_, i64>(0),
            worker.get::<_, i64>(1),
            queue.get::<_, i64>(0),
            queue.get::<_, i64>(1),
        );
        if got == (3, 2, 3, 2) {
            break;
        }
        if std::time::Instant::now() > deadline {
            let rows: Vec<String> = direct
                .query(
                    "SELECT row_to_json(w)::text FROM queen.worker_metrics w",
                    &[],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            panic!("flushed: {got:?} {rows:?}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// 030's guard: no partition of an ephemeral queue, whatever inserts it,
/// checked once a statement over the rows it inserted; a database with the
/// earlier per-row guard has it replaced by the next boot's apply.
#[tokio::test]
async fn the_ephemeral_guard_refuses_a_statement_with_any_partition_of_an_ephemeral_queue() {
    let proxy = Proxy::start("worker_metrics_guard").await;
    let direct = proxy.connect_direct().await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE eg WITH (class = ephemeral); CREATE QUEUE dg")
        .await
        .unwrap();
    let insert = |names: &str| {
        format!(
            "INSERT INTO queen.log_partitions (queue_id, name) \
             SELECT q.id, 'p' || g FROM queen.queues q, generate_series(1, 3) g \
             WHERE q.name IN ({names})"
        )
    };
    let partitions = "SELECT count(*) FROM queen.log_partitions p \
                      JOIN queen.queues q ON q.id = p.queue_id WHERE q.name IN ('eg', 'dg')";
    let level = "SELECT t.tgtype::int & 1 FROM pg_trigger t \
                 WHERE t.tgrelid = 'queen.log_partitions'::regclass \
                   AND t.tgname = 'trg_partitions_ephemeral_guard'";
    for round in ["fresh", "after replacing the row guard"] {
        let e = direct
            .batch_execute(&insert("'dg', 'eg'"))
            .await
            .expect_err("a statement with an ephemeral queue's partitions");
        assert_eq!(e.code().map(|c| c.code()), Some("55000"), "{round}: {e}");
        let n: i64 = direct.query_one(partitions, &[]).await.unwrap().get(0);
        assert_eq!(
            n, 0,
            "{round}: the durable queue's rows of that statement stayed"
        );
        let level: i32 = direct.query_one(level, &[]).await.unwrap().get(0);
        assert_eq!(level, 0, "{round}: not a statement-level trigger");
        // What a database had before: the per-row guard.
        direct
            .batch_execute(
                "CREATE FUNCTION queen.ephemeral_guard_partition_v1() RETURNS trigger \
                 LANGUAGE plpgsql AS $$ BEGIN \
                   IF EXISTS (SELECT 1 FROM queen.ephemeral_queues e WHERE e.queue_id = NEW.queue_id) \
                   THEN RAISE EXCEPTION 'ephemeral' USING ERRCODE = '55000'; END IF; \
                   RETURN NEW; END $$; \
                 DROP TRIGGER trg_partitions_ephemeral_guard ON queen.log_partitions; \
                 CREATE TRIGGER trg_partitions_ephemeral_guard BEFORE INSERT ON queen.log_partitions \
                   FOR EACH ROW EXECUTE FUNCTION queen.ephemeral_guard_partition_v1()",
            )
            .await
            .unwrap();
        schema::apply(&direct).await.unwrap();
        let old: i64 = direct
            .query_one(
                "SELECT count(*) FROM pg_proc WHERE proname = 'ephemeral_guard_partition_v1'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(old, 0, "the row guard's function stayed");
    }
    direct.batch_execute(&insert("'dg'")).await.unwrap();
    let n: i64 = direct.query_one(partitions, &[]).await.unwrap().get(0);
    assert_eq!(n, 3);
}
