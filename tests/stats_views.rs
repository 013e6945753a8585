//! The stats readers of seed 018 as plain `queen` views: per queue,
//! namespace and task, per-queue lag, and operations per minute. A known
//! workload in two tenants gives the expected numbers, and each tenant role
//! sees only its own rows (the owner sees both).

mod common;

use common::proxy::Proxy;
use common::sql::{rows, Row};
use queenwire::users::{Passthrough, User, Users, Verifier};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::Client;
use uuid::Uuid;

const TENANT_A: Uuid = Uuid::from_u128(0x5a);
const TENANT_B: Uuid = Uuid::from_u128(0x5b);

fn users() -> Arc<Users> {
    let mut users = Users::default();
    for (name, tenant, passthrough) in [
        ("a", TENANT_A, Passthrough::Full),
        ("a_ro", TENANT_A, Passthrough::ReadOnly),
        ("b", TENANT_B, Passthrough::Full),
    ] {
        users.users.insert(
            name.into(),
            User {
                name: name.into(),
                tenant,
                passthrough,
                verifier: Verifier::new("pw"),
            },
        );
    }
    Arc::new(users)
}

async fn login(proxy: &Proxy, name: &str) -> Client {
    let mut cfg = proxy.client_config();
    cfg.user(name).password("pw");
    common::proxy::connect(&cfg).await
}

fn cells(rows: &[Row], columns: &[&str]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| {
            columns
                .iter()
                .map(|c| r[*c].clone().unwrap_or_else(|| "NULL".into()))
                .collect()
        })
        .collect()
}

fn strs(rows: &[&[&str]]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| r.iter().map(|s| s.to_string()).collect())
        .collect()
}

#[tokio::test]
async fn the_stats_views_give_a_known_workloads_numbers_to_its_tenant_only() {
    let proxy = Proxy::start_with("stats_views", |c| {
        c.users = Some(users());
        c.metrics_flush_interval = Duration::from_millis(200);
    })
    .await;
    let a = login(&proxy, "a").await;
    let b = login(&proxy, "b").await;
    a.batch_execute(
        "CREATE QUEUE a1 WITH (namespace = billing, task = invoice);
         CREATE QUEUE a2 WITH (namespace = billing, task = refund);
         PUSH INTO a1 VALUES ('{\"n\": 1}'), ('{\"n\": 2}'), ('{\"n\": 3}');
         PUSH INTO a2 VALUES ('{\"n\": 4}'), ('{\"n\": 5}');
         PUSH INTO a3 VALUES ('{\"n\": 6}');",
    )
    .await
    .unwrap();
    b.batch_execute(
        "CREATE QUEUE b1 WITH (namespace = billing, task = invoice);
         PUSH INTO b1 VALUES ('1'), ('2'), ('3'), ('4'), ('5');",
    )
    .await
    .unwrap();
    // a1: group g acknowledges two of three; a2: g holds one in a lease.
    assert_eq!(
        rows(&a, "POP FROM a1 GROUP g LIMIT 2 AUTO ACK").await.len(),
        2
    );
    assert_eq!(rows(&a, "POP FROM a2 GROUP g LIMIT 1").await.len(), 1);

    let per_queue = rows(
        &a,
        "SELECT queue, namespace, task, partitions, messages, pending, pushed_last_hour FROM queen.queue_stats ORDER BY queue",
    )
    .await;
    let columns = [
        "queue",
        "namespace",
        "task",
        "partitions",
        "messages",
        "pending",
        "pushed_last_hour",
    ];
    assert_eq!(
        cells(&per_queue, &columns),
        strs(&[
            &["a1", "billing", "invoice", "1", "3", "1", "3"],
            &["a2", "billing", "refund", "1", "2", "2", "2"],
            &["a3", "NULL", "NULL", "1", "1", "1", "1"],
        ])
    );
    let namespaces = rows(
        &a,
        "SELECT namespace, queues, messages, pending, pushed_last_minute FROM queen.namespace_stats ORDER BY namespace NULLS LAST",
    )
    .await;
    assert_eq!(
        cells(
            &namespaces,
            &[
                "namespace",
                "queues",
                "messages",
                "pending",
                "pushed_last_minute"
            ]
        ),
        strs(&[
            &["billing", "2", "5", "3", "5"],
            &["NULL", "1", "1", "1", "1"]
        ])
    );
    let tasks = rows(
        &a,
        "SELECT namespace, task, queues, messages, pending FROM queen.task_stats ORDER BY task NULLS LAST",
    )
    .await;
    assert_eq!(
        cells(
            &tasks,
            &["namespace", "task", "queues", "messages", "pending"]
        ),
        strs(&[
            &["billing", "invoice", "1", "3", "1"],
            &["billing", "refund", "1", "2", "2"],
            &["NULL", "NULL", "1", "1", "1"],
        ])
    );
    let lag = rows(
        &a,
        "SELECT queue, groups, max_lag, total_lag, lagging_groups, dead_groups FROM queen.queue_lag ORDER BY queue",
    )
    .await;
    assert_eq!(
        cells(
            &lag,
            &[
                "queue",
                "groups",
                "max_lag",
                "total_lag",
                "lagging_groups",
                "dead_groups"
            ]
        ),
        strs(&[
            &["a1", "1", "1", "1", "0", "0"],
            &["a2", "1", "2", "2", "0", "0"]
        ])
    );

    // Operations per minute arrive with the metrics flush (every 200 ms
    // here); a generous bound, never a timing assertion.
    let ops_sql = "SELECT queue, sum(pushed)::BIGINT AS pushed, sum(popped)::BIGINT AS popped, sum(acked)::BIGINT AS acked FROM queen.queue_ops_per_minute GROUP BY queue ORDER BY queue";
    let want = strs(&[
        &["a1", "3", "2", "2"],
        &["a2", "2", "1", "0"],
        &["a3", "1", "0", "0"],
    ]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let ops = loop {
        let ops = cells(
            &rows(&a, ops_sql).await,
            &["queue", "pushed", "popped", "acked"],
        );
        if ops == want || tokio::time::Instant::now() > deadline {
            break ops;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ops, want);

    // Tenant b sees its own queue only, also in the shared namespace name.
    let b_namespaces = rows(
        &b,
        "SELECT namespace, queues, messages FROM queen.namespace_stats",
    )
    .await;
    assert_eq!(
        cells(&b_namespaces, &["namespace", "queues", "messages"]),
        strs(&[&["billing", "1", "5"]])
    );
    assert_eq!(
        cells(
            &rows(&b, "SELECT queue FROM queen.queue_stats").await,
            &["queue"]
        ),
        strs(&[&["b1"]])
    );
    assert!(rows(&b, "SELECT * FROM queen.queue_lag").await.is_empty());
    let b_ops = rows(&b, "SELECT DISTINCT queue FROM queen.queue_ops_per_minute").await;
    assert!(
        b_ops.iter().all(|r| r["queue"].as_deref() == Some("b1")),
        "{b_ops:?}"
    );
    // The read-only role of a sees what a sees, over the extended protocol.
    let ro = login(&proxy, "a_ro").await;
    let n: i64 = ro
        .query_one("SELECT count(*) FROM queen.task_stats", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 3);
    // The owner sees both tenants.
    let direct = proxy.connect_direct().await;
    let both: i64 = direct
        .query_one(
            "SELECT count(DISTINCT tenant_id) FROM queen.namespace_stats WHERE namespace = 'billing'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(both, 2);
    // A tenant role cannot read another tenant through the function either.
    let err = a
        .simple_query(&format!(
            "SELECT * FROM queen.queue_ops_v1(now() - interval '1 hour', '{TENANT_B}'::uuid)"
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "42501");
}
