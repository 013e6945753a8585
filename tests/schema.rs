//! The boot-time schema apply: idempotent, safe when proxies boot together,
//! and embedding exactly the files in `sql/procedures`.

mod common;

use common::proxy::{connect, Proxy};
use queenwire::engine::schema;
use std::time::{Duration, Instant};

/// Everything in schema `queen` a re-apply could change.
const CATALOG_SNAPSHOT: &str = r#"
SELECT 'function ' || p.oid::regprocedure::text || ' ' || md5(pg_get_functiondef(p.oid))
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'queen' AND p.prokind IN ('f', 'p')
UNION ALL
SELECT 'relation ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '')
       || ' toast:' || coalesce((SELECT array_to_string(t.reloptions, ',') FROM pg_class t WHERE t.oid = c.reltoastrelid), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'queen'
UNION ALL
SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attstorage::text
       || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE n.nspname = 'queen' AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'index ' || pg_get_indexdef(i.indexrelid)
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'queen'
UNION ALL
SELECT 'trigger ' || pg_get_triggerdef(t.oid)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'queen' AND NOT t.tgisinternal
UNION ALL
SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
  FROM pg_constraint WHERE connamespace = 'queen'::regnamespace
ORDER BY 1
"#;

async fn snapshot(client: &tokio_postgres::Client) -> Vec<String> {
    client
        .query(CATALOG_SNAPSHOT, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn applying_the_schema_twice_changes_nothing() {
    let proxy = Proxy::start("schema_twice").await;
    let direct = proxy.connect_direct().await;
    let before = snapshot(&direct).await;
    assert!(
        before.iter().any(|l| l.starts_with("relation queues ")),
        "{before:?}"
    );
    schema::apply(&direct).await.unwrap();
    let after = snapshot(&direct).await;
    assert_eq!(before, after);
}

#[tokio::test]
async fn two_proxies_booting_at_once_on_an_empty_database_both_come_up() {
    let db = common::cluster::fresh_database("schema_race");
    let (a, b) = tokio::join!(
        Proxy::start_on(db.clone(), |_| {}),
        Proxy::start_on(db.clone(), |_| {})
    );
    for proxy in [&a, &b] {
        let client = proxy.connect().await;
        let n: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_namespace WHERE nspname = 'queen'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 1);
    }
    let direct = connect(&db).await;
    assert!(!snapshot(&direct).await.is_empty());
}

#[test]
fn the_embedded_file_list_equals_the_procedures_directory() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/procedures");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    on_disk.sort();
    let embedded: Vec<String> = schema::PROCEDURE_FILES
        .iter()
        .map(|(n, _)| n.to_string())
        .collect();
    assert_eq!(embedded, on_disk);
    // And each embedded text is the file's current content.
    for (name, text) in schema::PROCEDURE_FILES {
        assert_eq!(
            std::fs::read_to_string(dir.join(name)).unwrap(),
            *text,
            "{name}"
        );
    }
}

#[test]
fn schema_files_apply_in_lexical_order() {
    let names: Vec<&str> = schema::PROCEDURE_FILES.iter().map(|(n, _)| *n).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
}

/// The write step of log_push_v1 is one set-based statement: segments of a
/// partition named twice in one call take offsets in input order, each
/// partition counts on from its own last offset, and a segment's
/// transaction hashes are kept only when it has any.
#[tokio::test]
async fn one_push_call_places_repeated_partitions_in_input_order() {
    let proxy = Proxy::start("push_set_based").await;
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute(
            "SELECT count(*) FROM queen.log_push_v1('setq', ARRAY['b'], ARRAY[1], \
             ARRAY['\\x00'::bytea], NULL, ARRAY[gen_random_uuid()], ARRAY[now()], ARRAY[now()])",
        )
        .await
        .unwrap();
    // No blob starts with 2: that would be a sealed one (003's encryption
    // check answers `plain` for it on a queue without encryption).
    let rows = direct
        .query(
            "SELECT msg_index, status, partition_name, \"offset\" FROM queen.log_push_v1( \
             'setq', ARRAY['a', 'b', 'a'], ARRAY[2, 1, 3], \
             ARRAY['\\x01', '\\x04', '\\x03']::bytea[], \
             ARRAY[NULL, NULL, 7, NULL, NULL, NULL]::bigint[], \
             ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 6)), \
             ARRAY[now(), now(), now()], ARRAY[now(), now(), now()])",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<(i32, String, String, i64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let want: Vec<(i32, String, String, i64)> = [
        (0, "a", 0),
        (1, "a", 1),
        (2, "b", 1),
        (3, "a", 2),
        (4, "a", 3),
        (5, "a", 4),
    ]
    .iter()
    .map(|(i, p, o)| (*i, "queued".to_string(), p.to_string(), *o))
    .collect();
    assert_eq!(got, want);
    let segments: Vec<(String, i64, i32, bool)> = direct
        .query(
            "SELECT p.name, s.base_offset, s.message_count, t.txn_hashes IS NOT NULL \
             FROM queen.log_segments s \
             JOIN queen.log_partitions p ON p.id = s.partition_id \
             JOIN queen.queues q ON q.id = p.queue_id \
             JOIN queen.log_txns t ON t.partition_id = s.partition_id AND t.base_offset = s.base_offset \
             WHERE q.name = 'setq' ORDER BY p.name, s.base_offset",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        segments,
        vec![
            ("a".to_string(), 0, 2, false),
            ("a".to_string(), 2, 3, false),
            ("b".to_string(), 0, 1, false),
            ("b".to_string(), 1, 1, true),
        ]
    );
    let last = last_offsets(&direct, "setq").await;
    assert_eq!(last, vec![("a".to_string(), 4), ("b".to_string(), 1)]);
}

/// With p_per_segment (what the engine asks for) a push whose messages are
/// all queued answers one row per segment: its first message's index,
/// offset and id; a push refused for duplicates still answers per message.
#[tokio::test]
async fn a_push_asked_per_segment_answers_a_row_per_segment() {
    let proxy = Proxy::start("push_per_segment").await;
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute("SELECT queen.configure_queue_v1('segq', '{\"dedup_window\": 60}'::jsonb)")
        .await
        .unwrap();
    let call = |hashes: &str| {
        format!(
            "SELECT msg_index, status, partition_name, \"offset\", message_id FROM queen.log_push_v1( \
             'segq', ARRAY['a', 'b', 'a'], ARRAY[2, 1, 3], \
             ARRAY['\\x01', '\\x04', '\\x03']::bytea[], {hashes}, \
             ARRAY(SELECT ('00000000-0000-0000-0000-00000000000' || g)::uuid FROM generate_series(1, 6) g), \
             ARRAY[now(), now(), now()], ARRAY[now(), now(), now()], p_per_segment => true)"
        )
    };
    type Got = Vec<(i32, String, String, Option<i64>, String)>;
    let run = |sql: String| {
        let direct = &direct;
        async move {
            direct
                .query(&sql, &[])
                .await
                .unwrap()
                .iter()
                .map(|r| {
                    let id: uuid::Uuid = r.get(4);
                    (r.get(0), r.get(1), r.get(2), r.get(3), id.to_string())
                })
                .collect::<Got>()
        }
    };
    let id = |n: u32| format!("00000000-0000-0000-0000-00000000000{n}");
    let got = run(call("ARRAY[NULL, NULL, 7, NULL, NULL, NULL]::bigint[]")).await;
    let want: Got = vec![
        (0, "queued".into(), "a".into(), Some(0), id(1)),
        (2, "queued".into(), "b".into(), Some(0), id(3)),
        (3, "queued".into(), "a".into(), Some(2), id(4)),
    ];
    assert_eq!(got, want);
    // The same transaction id again in b: nothing written, every message
    // answered.
    let got = run(call("ARRAY[NULL, NULL, 7, NULL, NULL, NULL]::bigint[]")).await;
    assert_eq!(got.len(), 6);
    assert_eq!(got[2].1, "duplicate");
    assert!(got.iter().enumerate().all(|(i, r)| r.0 == i as i32));
    assert_eq!(got.iter().filter(|r| r.1 == "retry").count(), 5);
}

/// A push into many partitions, each named by several segments, gives
/// each partition the sum of its segments' messages (summed per name once
/// for this many: the provisioning insert for new partitions, one GROUP BY
/// for existing ones) and answers each segment's place.
#[tokio::test]
async fn a_push_into_many_partitions_sums_each_partitions_segments() {
    let proxy = Proxy::start("push_many_new").await;
    let direct = proxy.connect_direct().await;
    // 300 partitions, named twice each, interleaved: first a segment of 1
    // message, then one of 1, 2 or 3 (partition i: 1 + i % 3).
    let call = "SELECT msg_index, partition_name, \"offset\" FROM queen.log_push_v1( \
             'manyq', \
             ARRAY(SELECT 'p' || (g % 300) FROM generate_series(0, 599) g), \
             ARRAY(SELECT CASE WHEN g < 300 THEN 1 ELSE 1 + g % 300 % 3 END \
                   FROM generate_series(0, 599) g), \
             array_fill('\\x01'::bytea, ARRAY[600]), NULL, \
             ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 900)), \
             array_fill(now(), ARRAY[600]), array_fill(now(), ARRAY[600]), \
             p_per_segment => true)";
    let second = |i: usize| 1 + (i % 3) as i64;
    for round in 0..2i64 {
        // Before this call, partition i ended at offset round * (1 +
        // second(i)) - 1.
        let rows = direct.query(call, &[]).await.unwrap();
        assert_eq!(rows.len(), 600);
        let mut want_index = 0;
        for (k, r) in rows.iter().enumerate() {
            let (index, name, offset): (i32, String, i64) = (r.get(0), r.get(1), r.get(2));
            let i = k % 300;
            let before = round * (1 + second(i));
            assert_eq!(name, format!("p{i}"));
            assert_eq!(index, want_index, "segment {k}");
            assert_eq!(
                offset,
                if k < 300 { before } else { before + 1 },
                "segment {k}"
            );
            want_index += if k < 300 { 1 } else { second(i) as i32 };
        }
        let last = last_offsets(&direct, "manyq").await;
        assert_eq!(last.len(), 300);
        for (name, last_offset) in last {
            let i: usize = name[1..].parse().unwrap();
            assert_eq!(last_offset, (round + 1) * (1 + second(i)) - 1, "{name}");
        }
    }
}

/// Pushes into one partition update its row HOT (heap-only: no new index
/// entries, no version off the page), although `last_write_at` is indexed:
/// a push keeps a stamp less than a second old (003). Without it every
/// push's UPDATE was a non-HOT one, and a busy partition's row bloated
/// until autovacuum came. A queue with a window_buffer is stamped exactly.
#[tokio::test]
async fn pushes_into_one_partition_update_its_row_heap_only() {
    let proxy = Proxy::start("push_hot_update").await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    common::sql::rows(&client, "PUSH INTO hot VALUES ('0')").await;
    let stats = || async {
        let row = direct
            .query_one(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
                 WHERE schemaname = 'queen' AND relname = 'log_partitions'",
                &[],
            )
            .await
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i64>(1))
    };
    let (upd0, hot0) = stats().await;
    const PUSHES: i64 = 200;
    for n in 0..PUSHES {
        common::sql::rows(&client, &format!("PUSH INTO hot VALUES ('{n}')")).await;
    }
    // Backends report their counters when idle, about once a second.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (upd, hot) = loop {
        let (upd, hot) = stats().await;
        if upd - upd0 >= PUSHES || Instant::now() > deadline {
            break (upd - upd0, hot - hot0);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(upd >= PUSHES, "every push updated the partition row: {upd}");
    assert!(
        hot * 10 >= upd * 9,
        "at least 90 % of the updates are HOT: {hot} of {upd}"
    );
    // Stamped exactly with a window_buffer: last_write_at moves each push.
    client
        .batch_execute("CREATE QUEUE windowed WITH (window_buffer = 1)")
        .await
        .unwrap();
    let stamp = || async {
        direct
            .query_one(
                "SELECT p.last_write_at::text FROM queen.log_partitions p
                 JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'windowed'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, String>(0)
    };
    common::sql::rows(&client, "PUSH INTO windowed VALUES ('1')").await;
    let first = stamp().await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    common::sql::rows(&client, "PUSH INTO windowed VALUES ('2')").await;
    assert_ne!(
        first,
        stamp().await,
        "a window_buffer queue is stamped by every push"
    );
}

/// Each partition of `queue` with its last offset, by name.
async fn last_offsets(direct: &tokio_postgres::Client, queue: &str) -> Vec<(String, i64)> {
    direct
        .query(
            "SELECT p.name, p.last_offset FROM queen.log_partitions p \
             JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 ORDER BY 1",
            &[&queue],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// `n` message ids, and a time for each of `segments` segments.
fn ids_and_times(n: i32, segments: usize) -> (Vec<uuid::Uuid>, Vec<std::time::SystemTime>) {
    let ids = (0..n).map(|_| uuid::Uuid::now_v7()).collect();
    let times = (0..segments)
        .map(|_| std::time::SystemTime::now())
        .collect();
    (ids, times)
}

/// `log_push_many_v1`'s call of one queue's segments `(queue, partition,
/// count)`, message ids 1.., optionally with a trace id (which takes the
/// queue-by-queue path) on every message: (msg_index, status, offset).
async fn push_many(
    direct: &tokio_postgres::Client,
    segments: &[(&str, &str, i32)],
    traced: bool,
) -> Result<Vec<(i32, String, i64)>, tokio_postgres::Error> {
    let queues: Vec<&str> = segments.iter().map(|s| s.0).collect();
    let partitions: Vec<&str> = segments.iter().map(|s| s.1).collect();
    let counts: Vec<i32> = segments.iter().map(|s| s.2).collect();
    let n: i32 = counts.iter().sum();
    let blobs: Vec<Vec<u8>> = segments.iter().map(|_| vec![1u8]).collect();
    let (ids, times) = ids_and_times(n, segments.len());
    let traces: Option<Vec<&str>> = traced.then(|| (0..n).map(|_| "t").collect());
    let rows = direct
        .query(
            "SELECT msg_index, status, \"offset\" FROM queen.log_push_many_v1(\
             p_queues => $1, p_partitions => $2, p_counts => $3, p_blobs => $4, \
             p_txn_hashes => NULL, p_message_ids => $5, p_min_created_at => $6, \
             p_max_created_at => $6, p_trace_ids => $7)",
            &[&queues, &partitions, &counts, &blobs, &ids, &times, &traces],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// One call of several queues answers a row per segment, numbered over the
/// call, at the offsets each partition's order gives, the same by the
/// set-based path (queues that exist, no trace id) and by the queue-by-queue
/// one (a trace id), existing and new partitions alike, and a queue the
/// call creates.
#[tokio::test]
async fn one_push_call_of_several_queues_places_each_segment() {
    let proxy = Proxy::start("push_many_queues").await;
    let direct = proxy.connect_direct().await;
    for traced in [false, true] {
        let (a, b, c) = if traced {
            ("ta", "tb", "tc")
        } else {
            ("sa", "sb", "sc")
        };
        for q in [a, b] {
            direct
                .execute("SELECT queen.configure_queue_v1($1, '{}'::jsonb)", &[&q])
                .await
                .unwrap();
        }
        push_many(&direct, &[(a, "x", 2)], traced).await.unwrap();
        let got = push_many(
            &direct,
            &[
                (a, "x", 2),
                (a, "new", 1),
                (a, "x", 1),
                (b, "y", 3),
                (c, "z", 1),
            ],
            traced,
        )
        .await
        .unwrap();
        let queued = |i: i32, o: i64| (i, "queued".to_string(), o);
        assert_eq!(
            got,
            vec![
                queued(0, 2),
                queued(2, 0),
                queued(3, 4),
                queued(4, 0),
                queued(7, 0)
            ],
            "traced: {traced}"
        );
        assert_eq!(
            last_offsets(&direct, a).await,
            vec![("new".to_string(), 0), ("x".to_string(), 4)]
        );
        assert_eq!(last_offsets(&direct, b).await, vec![("y".to_string(), 2)]);
        assert_eq!(last_offsets(&direct, c).await, vec![("z".to_string(), 0)]);
    }
}

/// `log_push_ids_v1`'s call of one queue's segments `(partition name,
/// partition id, count)`, blobs `blob`: (msg_index, status, offset).
async fn push_ids(
    direct: &tokio_postgres::Client,
    queue: &str,
    segments: &[(&str, i64, i32)],
    blob: &[u8],
) -> Result<Vec<(i32, String, Option<i64>)>, tokio_postgres::Error> {
    let names: Vec<&str> = segments.iter().map(|s| s.0).collect();
    let ids: Vec<i64> = segments.iter().map(|s| s.1).collect();
    let counts: Vec<i32> = segments.iter().map(|s| s.2).collect();
    let n: i32 = counts.iter().sum();
    let blobs: Vec<&[u8]> = segments.iter().map(|_| blob).collect();
    let (message_ids, times) = ids_and_times(n, segments.len());
    let rows = direct
        .query(
            "SELECT msg_index, status, \"offset\" FROM queen.log_push_ids_v1(\
             p_queue => $1, p_partitions => $2, p_partition_ids => $3, p_counts => $4, \
             p_blobs => $5, p_txn_hashes => NULL, p_message_ids => $6, \
             p_min_created_at => $7, p_max_created_at => $7)",
            &[&queue, &names, &ids, &counts, &blobs, &message_ids, &times],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// A call by partition ids places each segment as `log_push_many_v1`
/// would (two segments of one partition one after the other); an id that
/// is not that partition of that queue any more, a queue gone, a size
/// limit or blobs sealed otherwise than the queue answer one `stale` row
/// and write nothing; arrays that do not match are refused.
#[tokio::test]
async fn a_push_by_partition_ids_places_its_segments_or_writes_nothing() {
    let proxy = Proxy::start("push_ids_sql").await;
    let direct = proxy.connect_direct().await;
    for q in ["ia", "ib"] {
        direct
            .execute("SELECT queen.configure_queue_v1($1, '{}'::jsonb)", &[&q])
            .await
            .unwrap();
    }
    push_many(
        &direct,
        &[("ia", "x", 2), ("ia", "y", 1), ("ib", "z", 1)],
        false,
    )
    .await
    .unwrap();
    let id = |queue: &'static str, name: &'static str| {
        let direct = &direct;
        async move {
            let row = direct
                .query_one(
                    "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q \
                     ON q.id = p.queue_id WHERE q.name = $1 AND p.name = $2",
                    &[&queue, &name],
                )
                .await
                .unwrap();
            row.get::<_, i64>(0)
        }
    };
    let (x, y, z) = (
        id("ia", "x").await,
        id("ia", "y").await,
        id("ib", "z").await,
    );
    let plain: &[u8] = &[1];
    let got = push_ids(
        &direct,
        "ia",
        &[("y", y, 2), ("x", x, 1), ("y", y, 1)],
        plain,
    )
    .await
    .unwrap();
    let queued = |i: i32, o: i64| (i, "queued".to_string(), Some(o));
    assert_eq!(got, vec![queued(0, 1), queued(2, 2), queued(3, 3)]);
    assert_eq!(
        last_offsets(&direct, "ia").await,
        vec![("x".to_string(), 2), ("y".to_string(), 3)]
    );
    let stale = vec![(0, "stale".to_string(), None)];
    let before = last_offsets(&direct, "ia").await;
    // Another queue's partition, a wrong name, an id that never was, a
    // queue that is not.
    for (queue, segments) in [
        ("ia", vec![("x", x, 1), ("z", z, 1)]),
        ("ia", vec![("x", y, 1)]),
        ("ia", vec![("x", x, 1), ("w", i64::MAX, 1)]),
        ("nq", vec![("x", x, 1)]),
    ] {
        let got = push_ids(&direct, queue, &segments, plain).await.unwrap();
        assert_eq!(got, stale, "{queue} {segments:?}");
    }
    // Blobs sealed for a plain queue.
    let got = push_ids(&direct, "ia", &[("x", x, 1)], &[2]).await.unwrap();
    assert_eq!(got, stale, "sealed blobs");
    // A segment whose times are reversed, alone in its call and beside
    // another (the one-segment path and the set-based one).
    for (names, ids) in [(vec!["x"], vec![x]), (vec!["x", "y"], vec![x, y])] {
        let n = names.len() as i32;
        let rows = direct
            .query(
                "SELECT msg_index, status, \"offset\" FROM queen.log_push_ids_v1('ia', $1, $2, \
                 array_fill(1, ARRAY[$3::INT]), array_fill('\\x01'::BYTEA, ARRAY[$3::INT]), NULL, \
                 ARRAY(SELECT gen_random_uuid() FROM generate_series(1, $3::INT)), \
                 array_fill(now(), ARRAY[$3::INT]), array_fill(now() - interval '1 second', ARRAY[$3::INT]))",
                &[&names, &ids, &n],
            )
            .await
            .unwrap();
        let got: Vec<(i32, String, Option<i64>)> = rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        assert_eq!(got, stale, "reversed times, {n} segment(s)");
    }
    // A size limit: that path does not count the queue's messages.
    direct
        .execute(
            "SELECT queen.configure_queue_v1('ia', '{\"max_queue_size\": 100}'::jsonb, 'alter')",
            &[],
        )
        .await
        .unwrap();
    let got = push_ids(&direct, "ia", &[("x", x, 1)], plain)
        .await
        .unwrap();
    assert_eq!(got, stale, "size limit");
    assert_eq!(last_offsets(&direct, "ia").await, before);
    assert_eq!(
        last_offsets(&direct, "ib").await,
        vec![("z".to_string(), 0)]
    );
    // Arrays that do not match: more messages than the counts say.
    let e = direct
        .query(
            "SELECT * FROM queen.log_push_ids_v1('ia', ARRAY['x'], ARRAY[$1::BIGINT], ARRAY[1], \
             ARRAY['\\x01'::BYTEA], NULL, ARRAY[gen_random_uuid(), gen_random_uuid()], \
             ARRAY[now()], ARRAY[now()])",
            &[&x],
        )
        .await
        .expect_err("two message ids for a count of one");
    assert_eq!(e.code().map(|c| c.code()), Some("22023"), "{e}");
}

/// A partition another transaction creates while a call provisions it:
/// the call's insert waits for that transaction and, once it commits,
/// finds the partition and allocates after its messages (or, waiting
/// longer than its lock timeout, fails with 55P03 and writes nothing).
#[tokio::test]
async fn a_partition_created_meanwhile_is_allocated_after_its_creator() {
    let proxy = Proxy::start("push_many_race").await;
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute("SELECT queen.configure_queue_v1('race', '{}'::jsonb)")
        .await
        .unwrap();
    let mut placed = 0;
    for round in 0..5 {
        let name = format!("r{round}");
        let creator = proxy.connect_direct().await;
        creator.batch_execute("BEGIN").await.unwrap();
        push_many(&creator, &[("race", &name, 2)], false)
            .await
            .unwrap();
        let pusher = proxy.connect_direct().await;
        let (fresh, held) = (format!("f{round}"), name.clone());
        let call = tokio::spawn(async move {
            let segments = [("race", fresh.as_str(), 1), ("race", held.as_str(), 1)];
            push_many(&pusher, &segments, false).await
        });
        // Until the call waits for the creator's insert.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let waiting: i64 = direct
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE wait_event_type = 'Lock' AND query LIKE '%log_push_many_v1%'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            if waiting > 0 || call.is_finished() || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        creator.batch_execute("COMMIT").await.unwrap();
        match call.await.unwrap() {
            Ok(got) => {
                placed += 1;
                let queued = |i: i32, o: i64| (i, "queued".to_string(), o);
                assert_eq!(
                    got,
                    vec![queued(0, 0), queued(1, 2)],
                    "after the creator's 0 and 1"
                );
                let offsets = last_offsets(&direct, "race").await;
                assert!(offsets.contains(&(name.clone(), 2)), "{offsets:?}");
            }
            Err(e) => assert_eq!(e.code().map(|c| c.code()), Some("55P03"), "{e}"),
        }
    }
    assert!(placed > 0, "every round waited past the lock timeout");
}

/// A session whose first calls planned against a small partition table
/// (a young database, the engine's connections at boot) still looks each
/// partition up by its key once the table has grown, by the set-based path
/// and by the queue-by-queue one (a trace id), and each queue by its name
/// once the tenant has 20,000 more: the call reads under 1,000 rows of any
/// table (each read every one when a lookup or the offsets' update was a
/// join the generic plan hashed).
#[tokio::test]
async fn a_push_call_planned_on_a_small_table_stays_a_keyed_lookup() {
    for traced in [false, true] {
        let proxy = Proxy::start(if traced { "push_plan_t" } else { "push_plan" }).await;
        let direct = proxy.connect_direct().await;
        direct
            .batch_execute("SELECT queen.configure_queue_v1('grown', '{}'::jsonb)")
            .await
            .unwrap();
        // Planned on a small table (300 rows, analyzed): a sequential
        // scan is then the cheapest way to read one row.
        let loader = proxy.connect_direct().await;
        loader
            .batch_execute(
                "INSERT INTO queen.log_partitions (queue_id, name) \
                 SELECT q.id, 'pre' || g FROM queen.queues q, generate_series(1, 300) g \
                 WHERE q.name = 'grown'; ANALYZE queen.log_partitions",
            )
            .await
            .unwrap();
        // Every statement planned: provisioning, one existing partition's
        // update, and the lock of several.
        for segments in [
            &[("grown", "first", 1)][..],
            &[("grown", "first", 1), ("grown", "second", 1)],
            &[("grown", "first", 1), ("grown", "second", 1)],
        ] {
            push_many(&direct, segments, traced).await.unwrap();
        }
        loader
            .batch_execute(
                "INSERT INTO queen.log_partitions (queue_id, name) \
                 SELECT q.id, 'bulk' || g FROM queen.queues q, generate_series(1, 20000) g \
                 WHERE q.name = 'grown'; \
                 INSERT INTO queen.queues (tenant_id, name) \
                 SELECT '00000000-0000-0000-0000-000000000001', 'bulk' || g \
                 FROM generate_series(1, 20000) g",
            )
            .await
            .unwrap();
        direct.batch_execute("BEGIN").await.unwrap();
        let segments = [
            ("grown", "first", 1),
            ("grown", "bulk7", 1),
            ("grown", "new", 1),
        ];
        push_many(&direct, &segments, traced).await.unwrap();
        let read = common::sql::rows_read(&direct).await;
        direct.batch_execute("COMMIT").await.unwrap();
        assert!(read.is_empty(), "traced {traced}: rows read: {read:?}");
        assert_eq!(
            last_offsets(&direct, "grown")
                .await
                .into_iter()
                .filter(|(_, o)| *o >= 0)
                .collect::<Vec<_>>(),
            vec![
                ("bulk7".to_string(), 0),
                ("first".to_string(), 3),
                ("new".to_string(), 0),
                ("second".to_string(), 1)
            ],
            "traced {traced}"
        );
    }
}

/// Partitions `w<from>`..`w<to>` of queue `wide`. The first call
/// (`from` 1) makes the queue and analyzes its partitions once they are
/// in: the plans under test are made on those statistics.
async fn wide_queue(loader: &tokio_postgres::Client, from: i32, to: i32) {
    let insert = format!(
        "INSERT INTO queen.log_partitions (queue_id, name, last_offset, last_write_at) \
         SELECT q.id, 'w' || g, 0, now() FROM queen.queues q, generate_series({from}, {to}) g \
         WHERE q.name = 'wide'"
    );
    let sql = if from == 1 {
        format!(
            "SELECT queen.configure_queue_v1('wide', '{{}}'::jsonb); {insert}; \
             ANALYZE queen.log_partitions"
        )
    } else {
        insert
    };
    loader.batch_execute(&sql).await.unwrap();
}

/// Leases `k` messages of partitions `a` and `b` of queue `wide` for group
/// `g` into the temporary table `leased` (the hot list's call, by id).
fn lease_wide(k: i32) -> String {
    format!(
        "CREATE TEMP TABLE IF NOT EXISTS leased AS SELECT * FROM queen.log_pop_v2('none') \
         WHERE false; TRUNCATE leased; INSERT INTO leased SELECT * FROM \
         queen.log_pop_v2('wide', NULL, 'g', {k}, {k}, NULL, 'beginning', NULL, false, \
         '00000000-0000-0000-0000-000000000001', \
         (SELECT array_agg(p.id) FROM queen.log_partitions p \
          WHERE p.queue_id = (SELECT q.id FROM queen.queues q WHERE q.name = 'wide') \
            AND p.name IN ('a', 'b')), 1) \
         WHERE state = 'claimed'"
    )
}

/// Runs `count` (one row, one count) in a transaction of its own; its
/// count and the tables it read 1,000 rows of.
async fn counted_reads(direct: &tokio_postgres::Client, count: &str) -> (i64, Vec<(String, i64)>) {
    direct.batch_execute("BEGIN").await.unwrap();
    let got: i64 = direct.query_one(count, &[]).await.unwrap().get(0);
    let read = common::sql::rows_read(direct).await;
    direct.batch_execute("COMMIT").await.unwrap();
    (got, read)
}

/// An ACK reads its receipts' partitions and queues by key: however many
/// partitions their queue has (20,000 here), neither a lone receipt nor
/// receipts of two partitions read 1,000 rows of any table. (The receipts'
/// queue keys were once taken by a join whose generic plan, on the
/// benchmark's database, read every partition of the queue by queue_id:
/// 0.68 ms of a 0.9 ms ACK at 1,000 partitions. These statistics do not
/// lead the planner there, so this guards the keyed form; it does not
/// reproduce that plan.)
#[tokio::test]
async fn an_ack_reads_by_key_however_many_partitions_its_queue_has() {
    let proxy = Proxy::start("ack_plan").await;
    let direct = proxy.connect_direct().await;
    // Loaded on a connection of its own: a backend's counters of earlier
    // transactions may not be flushed when the call's are read.
    let loader = proxy.connect_direct().await;
    wide_queue(&loader, 1, 1000).await;
    let ack = "SELECT count(*) FROM queen.log_ack_v1(ARRAY(SELECT partition_id FROM leased), \
               ARRAY(SELECT from_offset FROM leased), ARRAY(SELECT 'g'::text FROM leased), \
               ARRAY(SELECT lease_token FROM leased)) WHERE status = 'acked'";
    // The same leases as runs (log_ack_v2): one row a run settled whole.
    let ack_runs = "SELECT count(*) FROM queen.log_ack_v2(ARRAY(SELECT partition_id FROM leased), \
               ARRAY(SELECT 'g'::text FROM leased), ARRAY(SELECT lease_token FROM leased), \
               ARRAY(SELECT from_offset FROM leased), ARRAY(SELECT to_offset FROM leased)) \
               WHERE status = 'acked' AND message_offset IS NULL";
    // Planned while the queue is small, called again once it is not.
    for round in 0..2 {
        if round == 1 {
            wide_queue(&loader, 1001, 21_000).await;
        }
        for k in [1, 2] {
            for call in [ack, ack_runs] {
                push_many(&direct, &[("wide", "a", 1), ("wide", "b", 1)], false)
                    .await
                    .unwrap();
                direct.batch_execute(&lease_wide(k)).await.unwrap();
                let (got, read) = counted_reads(&direct, call).await;
                assert_eq!(got, k as i64, "receipts acked by {call}");
                assert!(read.is_empty(), "rows read by an ACK of {k}: {read:?}");
            }
        }
    }
    // A run that ends before it starts, on a live lease: refused, nothing
    // acked.
    direct.batch_execute(&lease_wide(1)).await.unwrap();
    let reversed = "SELECT count(*) FROM queen.log_ack_v2(ARRAY(SELECT partition_id FROM leased), \
               ARRAY(SELECT 'g'::text FROM leased), ARRAY(SELECT lease_token FROM leased), \
               ARRAY(SELECT to_offset + 1 FROM leased), ARRAY(SELECT to_offset FROM leased))";
    let err = direct.query_one(reversed, &[]).await.unwrap_err();
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::INVALID_PARAMETER_VALUE)
    );
    let message = err.as_db_error().map(|e| e.message().to_string());
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("a run must be")),
        "{message:?}"
    );
    // A run without a last offset answers nothing (stale), no error.
    let unbounded =
        "SELECT count(*) FROM queen.log_ack_v2(ARRAY(SELECT partition_id FROM leased), \
               ARRAY(SELECT 'g'::text FROM leased), ARRAY(SELECT lease_token FROM leased), \
               ARRAY(SELECT from_offset FROM leased), ARRAY[NULL::bigint])";
    let rows: i64 = direct.query_one(unbounded, &[]).await.unwrap().get(0);
    assert_eq!(rows, 0);
    let (got, _) = counted_reads(&direct, ack_runs).await;
    assert_eq!(got, 1, "the lease is still there to ack");
}

/// The same for POP, by candidates (the hot list's) and over the whole
/// queue, and for ACK: a session whose calls were planned while the
/// tables were small (300 partitions, segments and consumer rows of
/// another queue, analyzed) reads no table by sequential scan once each
/// holds 20,000 more (each call read them all when the claimed segment was
/// joined and when the small tables' plans kept sequential scans).
#[tokio::test]
async fn a_pop_call_planned_on_a_small_table_reads_by_key() {
    let proxy = Proxy::start("pop_plan").await;
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute("SELECT queen.configure_queue_v1('grown', '{}'::jsonb)")
        .await
        .unwrap();
    let by_candidates = "SELECT count(*) FROM queen.log_pop_v2('grown', NULL, 'g', 1, 1, \
                NULL, 'beginning', NULL, true, '00000000-0000-0000-0000-000000000001', \
                (SELECT array_agg(p.id) FROM queen.log_partitions p \
                 JOIN queen.queues q ON q.id = p.queue_id \
                 WHERE q.name = 'grown' AND p.name = 'a')) WHERE state = 'claimed'";
    let whole_queue = "SELECT count(*) FROM queen.log_pop_v2('grown', NULL, 'g', 1, 1, \
                NULL, 'beginning', NULL, true) WHERE state = 'claimed'";
    // And an ACK of a leased message (the lease taken before the ACK).
    let lease = "CREATE TEMP TABLE IF NOT EXISTS leased AS SELECT * FROM queen.log_pop_v2('none') \
                 WHERE false; TRUNCATE leased; INSERT INTO leased SELECT * FROM \
                 queen.log_pop_v2('grown', NULL, 'g', 1, 1, NULL, 'beginning', NULL, false) \
                 WHERE state = 'claimed'";
    let ack = "SELECT count(*) FROM queen.log_ack_v1(ARRAY(SELECT partition_id FROM leased), \
               ARRAY(SELECT from_offset FROM leased), ARRAY(SELECT 'g'::text FROM leased), \
               ARRAY(SELECT lease_token FROM leased)) WHERE status = 'acked'";
    // And one ACK of two partitions' leases (the set-based path).
    let lease_two =
        "CREATE TEMP TABLE IF NOT EXISTS leased AS SELECT * FROM queen.log_pop_v2('none') \
                 WHERE false; TRUNCATE leased; INSERT INTO leased SELECT * FROM \
                 queen.log_pop_v2('grown', NULL, 'g', 2, 2, NULL, 'beginning', NULL, false, \
                 '00000000-0000-0000-0000-000000000001', NULL, 1) WHERE state = 'claimed'";
    let calls = [
        (None, by_candidates, 1),
        (None, whole_queue, 1),
        (Some(lease), ack, 1),
        (Some(lease_two), ack, 2),
    ];
    // Partitions of queue `other`, each with a segment and a row of group g.
    let other = |from: i32, to: i32| {
        format!(
            "INSERT INTO queen.log_partitions (queue_id, name, last_offset, last_write_at) \
             SELECT q.id, 'o' || g, 0, now() FROM queen.queues q, generate_series({from}, {to}) g \
             WHERE q.name = 'other'; \
             INSERT INTO queen.log_segments (partition_id, base_offset, min_created_at, \
                 max_created_at, message_count, byte_size, blob) \
             SELECT p.id, 0, now(), now(), 1, 1, '\\x00' FROM queen.log_partitions p \
             JOIN queen.queues q ON q.id = p.queue_id \
             WHERE q.name = 'other' AND p.name IN (SELECT 'o' || g FROM generate_series({from}, {to}) g); \
             INSERT INTO queen.log_consumers (partition_id, consumer_group) \
             SELECT p.id, 'g' FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id \
             WHERE q.name = 'other' AND p.name IN (SELECT 'o' || g FROM generate_series({from}, {to}) g)"
        )
    };
    let loader = proxy.connect_direct().await;
    loader
        .batch_execute(&format!(
            "SELECT queen.configure_queue_v1('other', '{{}}'::jsonb); {}; \
             ANALYZE queen.log_partitions; ANALYZE queen.log_segments; \
             ANALYZE queen.log_consumers; ANALYZE queen.log_txns",
            other(1, 300)
        ))
        .await
        .unwrap();
    // One round: a message to take, the lease when the call is an ACK,
    // then the call; what it returned and the tables it read by
    // sequential scan.
    let round = |before: Option<&'static str>, call: &'static str| {
        let direct = &direct;
        async move {
            push_many(direct, &[("grown", "a", 1), ("grown", "b", 1)], false)
                .await
                .unwrap();
            if let Some(before) = before {
                direct.batch_execute(before).await.unwrap();
            }
            direct.batch_execute("BEGIN").await.unwrap();
            let got: i64 = direct.query_one(call, &[]).await.unwrap().get(0);
            let scanned = common::sql::sequential_reads(direct).await;
            direct.batch_execute("COMMIT").await.unwrap();
            (got, scanned)
        }
    };
    for (before, call, want) in calls {
        assert_eq!(round(before, call).await.0, want, "{call}");
    }
    loader.batch_execute(&other(301, 20_300)).await.unwrap();
    for (before, call, want) in calls {
        let (got, scanned) = round(before, call).await;
        assert_eq!(got, want, "{call}");
        assert!(
            scanned.is_empty(),
            "rows read by sequential scan: {scanned:?} ({call})"
        );
    }
}

/// The same for RENEW: the leases it extends are found by key, never by a
/// join over the queue's partitions, once the session's plans were made
/// while the queue was small.
#[tokio::test]
async fn a_renew_reads_by_key_however_many_partitions_its_queue_has() {
    let proxy = Proxy::start("renew_plan").await;
    let direct = proxy.connect_direct().await;
    // Loaded on a connection of its own (see the ACK's test).
    let loader = proxy.connect_direct().await;
    wide_queue(&loader, 1, 1000).await;
    let renew = "SELECT count(*) FROM queen.log_renew_v1(ARRAY(SELECT partition_id FROM leased), \
                 ARRAY(SELECT 'g'::text FROM leased), ARRAY(SELECT lease_token FROM leased), \
                 600000) WHERE lease_expires_at IS NOT NULL";
    push_many(&direct, &[("wide", "a", 3), ("wide", "b", 3)], false)
        .await
        .unwrap();
    direct.batch_execute(&lease_wide(2)).await.unwrap();
    // Planned while the queue is small (more than the plan cache's five
    // custom plans), called again once it is not.
    for round in 0..2 {
        if round == 1 {
            wide_queue(&loader, 1001, 21_000).await;
        }
        for _ in 0..6 {
            let (got, read) = counted_reads(&direct, renew).await;
            assert_eq!(got, 2, "leases renewed");
            assert!(read.is_empty(), "rows read by a RENEW of 2: {read:?}");
        }
    }
}
