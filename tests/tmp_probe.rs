mod common;
use common::proxy::Proxy;

#[tokio::test]
async fn probe_whole_queue_pop() {
    let proxy = Proxy::start("probe_whole").await;
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute("SELECT queen.configure_queue_v1('w', '{}'::jsonb)")
        .await
        .unwrap();
    let push = "SELECT count(*) FROM queen.log_push_v1('w', ARRAY['a'], ARRAY[1], ARRAY['\\x01'::bytea], NULL, ARRAY[gen_random_uuid()], ARRAY[now()], ARRAY[now()])";
    let call = "SELECT count(*) FROM queen.log_pop_v2('w', NULL, 'g1', 1, 1, NULL, 'beginning', NULL, true) WHERE state = 'claimed'";
    let call2 = "SELECT count(*) FROM queen.log_pop_v2('w', NULL, 'g1', 1, 1, NULL, 'beginning', NULL, true, '00000000-0000-0000-0000-000000000001', (SELECT array_agg(p.id) FROM queen.log_partitions p WHERE p.name = 'a')) WHERE state = 'claimed'";
    let loader = proxy.connect_direct().await;
    let fill = |a: i32, b: i32| {
        format!(
        "INSERT INTO queen.log_partitions (queue_id, name, last_offset, last_write_at) \
         SELECT q.id, 'bulk' || g, 0, now() FROM queen.queues q, generate_series({a}, {b}) g WHERE q.name = 'other'; \
         INSERT INTO queen.log_segments (partition_id, base_offset, min_created_at, max_created_at, message_count, byte_size, blob) \
         SELECT p.id, 0, now(), now(), 1, 1, '\\x00' FROM queen.log_partitions p WHERE p.name LIKE 'bulk%' AND substr(p.name, 5)::int BETWEEN {a} AND {b}; \
         INSERT INTO queen.log_consumers (partition_id, consumer_group) \
         SELECT p.id, 'g1' FROM queen.log_partitions p WHERE p.name LIKE 'bulk%' AND substr(p.name, 5)::int BETWEEN {a} AND {b}")
    };
    loader
        .batch_execute("SELECT queen.configure_queue_v1('other', '{}'::jsonb)")
        .await
        .unwrap();
    loader.batch_execute(&fill(1, 300)).await.unwrap();
    loader.batch_execute("ANALYZE queen.log_partitions; ANALYZE queen.log_consumers; ANALYZE queen.log_segments; ANALYZE queen.log_txns").await.unwrap();
    for c in [call, call2] {
        direct.query_one(push, &[]).await.unwrap();
        let n: i64 = direct.query_one(c, &[]).await.unwrap().get(0);
        assert_eq!(n, 1);
    }
    loader.batch_execute(&fill(301, 20300)).await.unwrap();
    for c in [call, call2] {
        direct.query_one(push, &[]).await.unwrap();
        direct.batch_execute("BEGIN").await.unwrap();
        let n: i64 = direct.query_one(c, &[]).await.unwrap().get(0);
        let rows = direct.query("SELECT relname::text, COALESCE(seq_tup_read,0) FROM pg_stat_xact_user_tables WHERE schemaname = 'queen' AND seq_tup_read > 0", &[]).await.unwrap();
        direct.batch_execute("COMMIT").await.unwrap();
        for r in rows {
            let (a, b): (String, i64) = (r.get(0), r.get(1));
            eprintln!("SEQ {a} {b}");
        }
        eprintln!("popped {n}");
    }
}
