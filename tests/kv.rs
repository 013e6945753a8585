//! The KV store and timers through queenwire: the rules of seed 004, under
//! concurrency, atomic with queue work.

mod common;

use common::proxy::{connect, Proxy};
use common::sql::rows;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

fn col(row: &HashMap<String, Option<String>>, name: &str) -> Option<String> {
    row.get(name).cloned().flatten()
}

async fn code(client: &Client, sql: &str) -> String {
    let err = client.simple_query(sql).await.expect_err(sql);
    err.code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| panic!("{sql}: {err}"))
}

#[tokio::test]
async fn the_kv_table_is_built_as_the_seed_says() {
    let proxy = Proxy::start("kv_catalog").await;
    let direct = proxy.connect_direct().await;
    let columns: Vec<(String, String, Option<String>, String, String)> = direct
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), co.collname::text,
                    a.attgenerated::text, a.attstorage::text
               FROM pg_attribute a LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
              WHERE a.attrelid = 'queen.kv'::regclass AND a.attnum > 0 AND NOT a.attisdropped
              ORDER BY a.attnum",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    let names: Vec<&str> = columns.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "tenant_id",
            "namespace",
            "key",
            "value",
            "version",
            "expires_at",
            "shard",
            "created_at",
            "updated_at"
        ]
    );
    let by_name: HashMap<&str, &(String, String, Option<String>, String, String)> =
        columns.iter().map(|c| (c.0.as_str(), c)).collect();
    assert_eq!(by_name["namespace"].2.as_deref(), Some("C"));
    assert_eq!(by_name["key"].2.as_deref(), Some("C"));
    assert_eq!(by_name["shard"].1, "smallint");
    assert_eq!(by_name["shard"].3, "s", "shard is GENERATED ... STORED");
    assert_eq!(by_name["value"].1, "jsonb");
    assert_eq!(by_name["value"].4, "x", "no SET STORAGE on value");
    let shard_expr: String = direct
        .query_one(
            "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a
               ON a.attrelid = d.adrelid AND a.attnum = d.adnum
              WHERE d.adrelid = 'queen.kv'::regclass AND a.attname = 'shard'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        shard_expr.contains("hashtextextended(key, (0)::bigint) & (63)::bigint"),
        "{shard_expr}"
    );
    let options: Vec<String> = direct
        .query_one(
            "SELECT reloptions FROM pg_class WHERE oid = 'queen.kv'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        options.contains(&"fillfactor=70".to_string()),
        "{options:?}"
    );
    assert!(
        options.contains(&"vacuum_truncate=off".to_string()),
        "{options:?}"
    );
    let indexes: Vec<String> = direct
        .query(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'queen.kv'::regclass ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        indexes.len(),
        2,
        "the primary key and idx_kv_shard_expires only: {indexes:?}"
    );
    assert!(indexes
        .iter()
        .any(|i| i.contains("PRIMARY KEY") || i.contains("(tenant_id, namespace, key)")));
    let partial = indexes
        .iter()
        .find(|i| i.contains("idx_kv_shard_expires"))
        .expect("idx_kv_shard_expires");
    assert!(
        partial.contains("(shard, expires_at)")
            && partial.contains("WHERE (expires_at IS NOT NULL)"),
        "{partial}"
    );
    let seq: (i64, String) = direct
        .query_one(
            "SELECT seqcache, format_type(seqtypid, NULL) FROM pg_sequence WHERE seqrelid = 'queen.kv_version_seq'::regclass",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(seq, (1000, "bigint".to_string()));
    let helpers: Vec<(String, String, bool, String)> = direct
        .query(
            "SELECT proname::text, provolatile::text, proisstrict, proparallel::text FROM pg_proc
              WHERE pronamespace = 'queen'::regnamespace AND proname IN ('kv_live_v1', 'kv_ver_v1') ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(helpers.len(), 2);
    for (name, volatile, strict, parallel) in helpers {
        assert_eq!(
            (volatile.as_str(), strict, parallel.as_str()),
            ("i", false, "s"),
            "{name}"
        );
    }
}

#[tokio::test]
async fn values_versions_and_expiry_follow_the_rules() {
    let proxy = Proxy::start("kv_rules").await;
    let client = proxy.connect().await;
    // 'null' is a value; absent is no row.
    let put = rows(&client, "KV PUT cfg flag 'null' FOREVER").await;
    assert_eq!(col(&put[0], "applied").as_deref(), Some("t"));
    let got = rows(&client, "KV GET cfg flag, missing").await;
    assert_eq!(got.len(), 1);
    assert_eq!(col(&got[0], "value").as_deref(), Some("null"));
    assert_eq!(col(&got[0], "expires_at"), None);

    // Preconditions: EXPECT 0 / IF ABSENT = must not exist; EXPECT v = equality.
    let v1 = col(&put[0], "version").unwrap();
    let refused = rows(&client, "KV PUT cfg flag '1' FOREVER IF ABSENT").await;
    assert_eq!(col(&refused[0], "applied").as_deref(), Some("f"));
    assert_eq!(
        col(&refused[0], "version").as_ref(),
        Some(&v1),
        "a failed precondition returns the current version"
    );
    let ok = rows(&client, &format!("KV PUT cfg flag '2' FOREVER EXPECT {v1}")).await;
    assert_eq!(col(&ok[0], "applied").as_deref(), Some("t"));
    let v2 = col(&ok[0], "version").unwrap();
    assert_ne!(v2, v1);
    let stale = rows(&client, &format!("KV PUT cfg flag '3' FOREVER EXPECT {v1}")).await;
    assert_eq!(col(&stale[0], "applied").as_deref(), Some("f"));
    let absent = rows(&client, "KV PUT cfg nothing '1' FOREVER EXPECT 5").await;
    assert_eq!(col(&absent[0], "version").as_deref(), Some("0"));

    // Expiry: invisible from its instant, pruned or not; a rewrite after
    // expiry is a new lineage that never reuses a version.
    let short = rows(&client, "KV PUT tmp k '\"a\"' TTL '300ms'").await;
    let old = col(&short[0], "version").unwrap();
    assert_eq!(rows(&client, "KV GET tmp k").await.len(), 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(rows(&client, "KV GET tmp k").await.is_empty());
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute(
            "INSERT INTO queen.kv (namespace, key, value, version, expires_at)
             VALUES ('tmp', 'unpruned', '1', nextval('queen.kv_version_seq'), now() - interval '1 second')",
        )
        .await
        .unwrap();
    assert!(
        rows(&client, "KV GET tmp unpruned").await.is_empty(),
        "an expired row is invisible"
    );
    let stored: i64 = direct
        .query_one("SELECT count(*) FROM queen.kv WHERE key = 'unpruned'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 1, "…though it is still stored");
    let renewed = rows(&client, "KV PUT tmp k '\"b\"' TTL 60 EXPECT 0").await;
    assert_eq!(col(&renewed[0], "applied").as_deref(), Some("t"));
    assert_ne!(col(&renewed[0], "version").unwrap(), old);
    let with_old = rows(&client, &format!("KV DELETE tmp k EXPECT {old}")).await;
    assert_eq!(col(&with_old[0], "applied").as_deref(), Some("f"));

    // INCR, DELETE, LIST in byte order with a keyset cursor.
    let n = rows(&client, "KV INCR counters hits BY 5 FOREVER").await;
    assert_eq!(col(&n[0], "value").as_deref(), Some("5"));
    let n = rows(&client, "KV INCR counters hits").await;
    assert_eq!(col(&n[0], "value").as_deref(), Some("6"));
    rows(&client, "KV PUT cfg word '\"text\"' FOREVER").await;
    assert_eq!(
        code(&client, "KV INCR cfg word").await,
        "22023",
        "a non-integer value"
    );
    assert_eq!(
        code(&client, "KV INCR counters fresh").await,
        "22023",
        "creating needs TTL or FOREVER"
    );
    for key in ["b", "a", "ab", "B", "é", "c"] {
        rows(&client, &format!("KV PUT list '{key}' '1' FOREVER")).await;
    }
    let listed: Vec<String> = rows(&client, "KV LIST list")
        .await
        .iter()
        .map(|r| col(r, "key").unwrap())
        .collect();
    assert_eq!(listed, ["B", "a", "ab", "b", "c", "é"]);
    let page: Vec<String> = rows(&client, "KV LIST list PREFIX 'a' LIMIT 5")
        .await
        .iter()
        .map(|r| col(r, "key").unwrap())
        .collect();
    assert_eq!(page, ["a", "ab"]);
    let next: Vec<String> = rows(&client, "KV LIST list AFTER 'ab' LIMIT 2")
        .await
        .iter()
        .map(|r| col(r, "key").unwrap())
        .collect();
    assert_eq!(next, ["b", "c"]);
    let del = rows(&client, "KV DELETE list a").await;
    assert_eq!(col(&del[0], "applied").as_deref(), Some("t"));

    // Bad input.
    assert_eq!(code(&client, "KV GET 'bad ns!' k").await, "22023");
    assert_eq!(code(&client, "KV PUT cfg k '1'").await, "22023");
    assert_eq!(code(&client, "KV PUT cfg k '{bad' FOREVER").await, "22P02");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_if_absent_and_incr_are_atomic_under_concurrency() {
    let proxy = Proxy::start_with("kv_concurrency", |c| c.pool_size = 8).await;
    let mut tasks = Vec::new();
    for c in 0..8 {
        let cfg = proxy.client_config();
        tasks.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            let won = rows(
                &client,
                &format!("KV PUT locks leader '{c}' FOREVER IF ABSENT"),
            )
            .await;
            for _ in 0..250 {
                rows(&client, "KV INCR stats total BY 1 FOREVER").await;
            }
            col(&won[0], "applied") == Some("t".into())
        }));
    }
    let mut winners = 0;
    for t in tasks {
        winners += usize::from(t.await.unwrap());
    }
    assert_eq!(winners, 1);
    let client = proxy.connect().await;
    let total = rows(&client, "KV GET stats total").await;
    assert_eq!(col(&total[0], "value").as_deref(), Some("2000"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_batches_in_opposite_orders_never_deadlock() {
    let proxy = Proxy::start("kv_deadlock").await;
    let a = proxy.connect_direct().await;
    let b = proxy.connect_direct().await;
    let forward = r#"[{"op":"put","ns":"d","key":"k1","value":1,"ttl_ms":null,"expect":null,"if_absent":false},
                     {"op":"put","ns":"d","key":"k2","value":1,"ttl_ms":null,"expect":null,"if_absent":false}]"#;
    let backward = r#"[{"op":"incr","ns":"d","key":"k2","by":1,"expiry":"forever"},
                      {"op":"incr","ns":"d","key":"k1","by":1,"expiry":"forever"}]"#;
    let sql = "SELECT count(*) FROM queen.kv_apply_v1($1::text::jsonb)";
    for _ in 0..200 {
        let (x, y) = tokio::join!(
            async {
                a.batch_execute("BEGIN").await?;
                a.query_one(sql, &[&forward]).await?;
                tokio::task::yield_now().await;
                a.batch_execute("COMMIT").await
            },
            async {
                b.batch_execute("BEGIN").await?;
                b.query_one(sql, &[&backward]).await?;
                tokio::task::yield_now().await;
                b.batch_execute("COMMIT").await
            }
        );
        x.unwrap();
        y.unwrap();
    }
}

#[tokio::test]
async fn kv_queue_and_ack_commit_or_roll_back_together() {
    let proxy = Proxy::start("kv_atomic").await;
    let client = proxy.connect().await;
    rows(&client, "PUSH INTO orders VALUES ('{\"id\":17}')").await;
    // The consumer holds the message; its effect, idempotency marker and
    // acknowledgement then commit together, KV first (the lock order).
    let popped = rows(&client, "POP FROM orders").await;
    assert_eq!(popped.len(), 1);
    let receipt = col(&popped[0], "receipt").unwrap();
    for finish in ["ROLLBACK", "COMMIT"] {
        client.batch_execute("BEGIN").await.unwrap();
        let marker = rows(&client, "KV PUT dedup 'order-17' 'true' FOREVER IF ABSENT").await;
        assert_eq!(col(&marker[0], "applied").as_deref(), Some("t"), "{finish}");
        rows(&client, "PUSH INTO shipped VALUES ('{\"id\":17}')").await;
        let acked = rows(&client, &format!("ACK '{receipt}'")).await;
        assert_eq!(
            col(&acked[0], "status").as_deref(),
            Some("acked"),
            "{finish}"
        );
        client.batch_execute(finish).await.unwrap();
        let marker = rows(&client, "KV GET dedup 'order-17'").await;
        let shipped = rows(&client, "SHOW QUEUES")
            .await
            .iter()
            .any(|r| col(r, "queue").as_deref() == Some("shipped"));
        let lag = rows(&client, "SHOW GROUPS ON orders")
            .await
            .iter()
            .find(|r| col(r, "group").as_deref() == Some("__QUEUE_MODE__"))
            .and_then(|r| col(r, "lag"));
        if finish == "ROLLBACK" {
            assert!(
                marker.is_empty() && !shipped,
                "rollback left something behind"
            );
            assert_eq!(lag.as_deref(), Some("1"), "the ack was rolled back");
        } else {
            assert_eq!(marker.len(), 1);
            assert!(shipped);
            assert_eq!(lag.as_deref(), Some("0"));
        }
    }
}

#[tokio::test]
async fn the_kill_switch_pauses_kv_only() {
    let proxy = Proxy::start("kv_pause").await;
    let client = proxy.connect().await;
    rows(&client, "KV PUT s k '1' FOREVER").await;
    proxy.server.set_kv_paused(true);
    assert_eq!(code(&client, "KV GET s k").await, "55000");
    assert_eq!(code(&client, "KV PUT s k '2' FOREVER").await, "55000");
    rows(&client, "PUSH INTO still_works VALUES ('1')").await;
    assert_eq!(rows(&client, "POP FROM still_works").await.len(), 1);
    proxy.server.set_kv_paused(false);
    assert_eq!(rows(&client, "KV GET s k").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_once_on_time_and_cancel() {
    let proxy = Proxy::start("timers").await;
    let other = Proxy::start_on(proxy.direct.clone(), |_| {}).await;
    let client = proxy.connect().await;
    let scheduled = rows(
        &client,
        "SCHEDULE INTO reminders KEY r1 AFTER '1s' VALUES ('{\"r\":1}')",
    )
    .await;
    assert_eq!(col(&scheduled[0], "key").as_deref(), Some("r1"));
    rows(
        &client,
        "SCHEDULE INTO reminders KEY r2 AFTER '1s' VALUES ('{\"r\":2}')",
    )
    .await;
    // Scheduling an unfired key again replaces it.
    rows(
        &client,
        "SCHEDULE INTO reminders KEY r2 AFTER '1500ms' VALUES ('{\"r\":22}')",
    )
    .await;
    rows(
        &client,
        "SCHEDULE INTO reminders KEY gone AFTER '1s' VALUES ('{\"r\":3}')",
    )
    .await;
    let shown = rows(&client, "SHOW SCHEDULES ON reminders").await;
    assert_eq!(shown.len(), 3);
    let cancelled = rows(&client, "CANCEL SCHEDULE gone ON reminders").await;
    assert_eq!(col(&cancelled[0], "applied").as_deref(), Some("t"));
    let again = rows(&client, "CANCEL SCHEDULE gone ON reminders").await;
    assert_eq!(col(&again[0], "applied").as_deref(), Some("f"));

    let started = Instant::now();
    let waiter = other.connect().await;
    let mut got = Vec::new();
    while got.len() < 2 && started.elapsed() < Duration::from_secs(5) {
        for r in rows(&waiter, "POP FROM reminders LIMIT 10 WAIT 1 AUTO ACK").await {
            got.push((col(&r, "payload").unwrap(), started.elapsed()));
        }
    }
    let payloads: Vec<&str> = got.iter().map(|g| g.0.as_str()).collect();
    assert_eq!(payloads.len(), 2, "{got:?}");
    assert!(
        payloads.contains(&"{\"r\":1}") && payloads.contains(&"{\"r\":22}"),
        "{got:?}"
    );
    for (_, at) in &got {
        assert!(
            *at >= Duration::from_millis(900) && *at < Duration::from_millis(3_600),
            "{got:?}"
        );
    }
    // Exactly once, though two queenwires were firing: nothing more comes.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(rows(&waiter, "POP FROM reminders LIMIT 10 AUTO ACK")
        .await
        .is_empty());
    assert!(rows(&client, "SHOW SCHEDULES").await.is_empty());
    // DROP QUEUE takes its unfired timers with it.
    rows(&client, "SCHEDULE INTO doomed KEY d AFTER 60 VALUES ('1')").await;
    client.batch_execute("DROP QUEUE doomed").await.unwrap();
    assert!(rows(&client, "SHOW SCHEDULES").await.is_empty());
}

#[tokio::test]
async fn kv_writes_after_queue_statements_in_a_block_are_refused() {
    let proxy = Proxy::start("kv_lock_order").await;
    let client = proxy.connect().await;
    rows(&client, "PUSH INTO lo VALUES ('1')").await;
    client.batch_execute("BEGIN").await.unwrap();
    rows(&client, "KV GET s k").await;
    rows(&client, "POP FROM lo").await;
    // Reads stay allowed; writes and timers would invert the lock order.
    rows(&client, "KV GET s k").await;
    assert_eq!(code(&client, "KV PUT s k '1' FOREVER").await, "25000");
    client.batch_execute("ROLLBACK").await.unwrap();
    for late in [
        "SCHEDULE INTO lo KEY t AFTER 60 VALUES ('1')",
        "KV INCR s n FOREVER",
    ] {
        client.batch_execute("BEGIN").await.unwrap();
        rows(&client, "POP FROM lo").await;
        assert_eq!(code(&client, late).await, "25000", "{late}");
        client.batch_execute("ROLLBACK").await.unwrap();
    }
    // Outside a block every statement is its own transaction: no order.
    rows(&client, "POP FROM lo").await;
    rows(&client, "KV PUT s k '1' FOREVER").await;
}

/// A timer whose push is refused (its queue is full) does not hold back the
/// other due timers, of any tenant: it is postponed and tried again later.
#[tokio::test]
async fn a_timer_into_a_full_queue_does_not_hold_back_the_others() {
    let proxy = Proxy::start("timer_full_queue").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE a_full WITH (max_queue_size = 1)")
        .await
        .unwrap();
    rows(&client, "PUSH INTO a_full VALUES ('{\"first\":true}')").await;
    // "a_full" sorts before "b_ok": the refused timer comes first in the
    // claim, every time.
    rows(
        &client,
        "SCHEDULE INTO a_full KEY stuck AFTER 0 VALUES ('{\"t\":1}')",
    )
    .await;
    for i in 0..3 {
        rows(
            &client,
            &format!("SCHEDULE INTO b_ok KEY k{i} AFTER 0 VALUES ('{{\"t\":{i}}}')"),
        )
        .await;
    }
    let started = Instant::now();
    let mut got = 0;
    while got < 3 && started.elapsed() < Duration::from_secs(10) {
        got += rows(&client, "POP FROM b_ok LIMIT 10 WAIT 1 AUTO ACK")
            .await
            .len();
    }
    assert_eq!(got, 3, "the other timers were held back");
    // The refused one waits for its retry, later than now.
    let left = rows(&client, "SHOW SCHEDULES").await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(col(&left[0], "key").as_deref(), Some("stuck"));
    let later: bool = proxy
        .connect_direct()
        .await
        .query_one(
            "SELECT fire_at > clock_timestamp() + interval '3 seconds' FROM queen.log_timers",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(later, "the refused timer was postponed");
    // Nothing of it was written into the full queue.
    let queued = rows(&client, "POP FROM a_full LIMIT 10 AUTO ACK").await;
    assert_eq!(queued.len(), 1);
}

/// A session whose GET was planned while queen.kv was small still reads
/// each key by its primary key once the table holds 20,000 more rows (it
/// read every one when the keys were joined, the join hashed by that
/// plan).
#[tokio::test]
async fn a_get_planned_on_a_small_table_reads_its_key_by_key() {
    let proxy = Proxy::start("kv_plan").await;
    let direct = proxy.connect_direct().await;
    let loader = proxy.connect_direct().await;
    let fill = |from: i32, to: i32| {
        format!(
            "INSERT INTO queen.kv (tenant_id, namespace, key, value, version, created_at, updated_at) \
             SELECT '00000000-0000-0000-0000-000000000001', 'bulk', 'k' || g, '1', g, now(), now() \
             FROM generate_series({from}, {to}) g"
        )
    };
    loader.batch_execute(&fill(1, 300)).await.unwrap();
    loader.batch_execute("ANALYZE queen.kv").await.unwrap();
    let sql = "SELECT count(*) FROM queen.kv_apply_v1($1::text::jsonb)";
    let get = r#"[{"op":"get","ns":"bulk","key":"k7"}]"#;
    let got: i64 = direct.query_one(sql, &[&get]).await.unwrap().get(0);
    assert_eq!(got, 1);
    loader.batch_execute(&fill(301, 20_300)).await.unwrap();
    direct.batch_execute("BEGIN").await.unwrap();
    let got: i64 = direct.query_one(sql, &[&get]).await.unwrap().get(0);
    let scanned = common::sql::sequential_reads(&direct).await;
    direct.batch_execute("COMMIT").await.unwrap();
    assert_eq!(got, 1);
    assert!(
        scanned.is_empty(),
        "rows read by sequential scan: {scanned:?}"
    );
}
