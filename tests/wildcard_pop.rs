//! `POP FROM NAMESPACE ns [TASK t] …` end to end: higher priority first,
//! turns among the queues of one priority, ACK of what it delivered, WAIT
//! woken by a push into any queue of the namespace (also through another
//! queenwire), the group registered durably, tenants apart, and a ledgered
//! run of several consumers of one group.

mod common;

use common::proxy::{connect, Proxy};
use common::sql::rows;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tokio_postgres::Client;

fn col(row: &HashMap<String, Option<String>>, name: &str) -> String {
    row.get(name).cloned().flatten().unwrap_or_default()
}

async fn sql_error(client: &Client, sql: &str) -> String {
    let err = client.simple_query(sql).await.expect_err(sql);
    err.as_db_error()
        .map(|e| e.code().code().to_string())
        .unwrap_or_else(|| panic!("{sql}: {err}"))
}

async fn push(client: &Client, queue: &str, n: usize) {
    let values: Vec<String> = (0..n)
        .map(|i| format!("('{{\"q\":\"{queue}\",\"i\":{i}}}')"))
        .collect();
    rows(
        client,
        &format!("PUSH INTO {queue} VALUES {}", values.join(", ")),
    )
    .await;
}

/// The queue of each row a statement returned, in order.
async fn popped_queues(client: &Client, sql: &str) -> Vec<String> {
    rows(client, sql)
        .await
        .iter()
        .map(|r| col(r, "queue"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priority_queues_are_served_first() {
    let proxy = Proxy::start("wild_priority").await;
    let c = proxy.connect().await;
    c.batch_execute(
        "CREATE QUEUE low WITH (namespace = 'billing', priority = 1);
         CREATE QUEUE high WITH (namespace = 'billing', priority = 10);
         CREATE QUEUE middle WITH (namespace = 'billing', priority = 5);
         CREATE QUEUE elsewhere WITH (namespace = 'shipping', priority = 100);
         CREATE QUEUE fleeting WITH (namespace = 'billing', priority = 50, class = ephemeral);",
    )
    .await
    .unwrap();
    // The ephemeral one is listed (marked) and served from memory at its
    // priority.
    for q in ["low", "high", "middle", "elsewhere", "fleeting"] {
        push(&c, q, 2).await;
    }
    let direct = proxy.connect_direct().await;
    let listed: Vec<String> = direct
        .query(
            "SELECT queue_name FROM queen.log_namespace_queues_v2('billing')",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(listed, ["fleeting", "high", "middle", "low"]);
    let mut order = Vec::new();
    for _ in 0..9 {
        order.extend(popped_queues(&c, "POP FROM NAMESPACE billing AUTO ACK").await);
    }
    assert_eq!(
        order,
        ["fleeting", "fleeting", "high", "high", "middle", "middle", "low", "low"]
    );
    // An ephemeral queue's delivery under a lease is ACKed as any.
    push(&c, "fleeting", 1).await;
    let got = rows(&c, "POP FROM NAMESPACE billing GROUP leased").await;
    assert_eq!(col(&got[0], "queue"), "fleeting");
    let acked = rows(&c, &format!("ACK '{}'", col(&got[0], "receipt"))).await;
    assert_eq!(col(&acked[0], "status"), "acked");
    // Every group the ephemeral queue has seen takes the message: it leaves
    // memory (a group first seen later starts at the oldest message held).
    rows(&c, "POP FROM fleeting LIMIT 100 AUTO ACK").await;

    // A LIMIT larger than the top queue holds goes on down the priorities.
    for q in ["low", "high", "middle"] {
        push(&c, q, 2).await;
    }
    let got = popped_queues(
        &c,
        "POP FROM NAMESPACE billing GROUP wide LIMIT 5 PARTITIONS 3 AUTO ACK",
    )
    .await;
    assert_eq!(got, ["high", "high", "high", "high", "middle"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_of_one_priority_take_turns_and_task_narrows_the_namespace() {
    let proxy = Proxy::start("wild_fair").await;
    let c = proxy.connect().await;
    for q in ["a", "b", "c"] {
        c.batch_execute(&format!(
            "CREATE QUEUE {q} WITH (namespace = 'ns', task = 'work', priority = 3)"
        ))
        .await
        .unwrap();
        push(&c, q, 4).await;
    }
    c.batch_execute("CREATE QUEUE d WITH (namespace = 'ns', task = 'other', priority = 3)")
        .await
        .unwrap();
    push(&c, "d", 4).await;
    let mut served = Vec::new();
    for _ in 0..9 {
        served.extend(popped_queues(&c, "POP FROM NAMESPACE ns TASK work AUTO ACK").await);
    }
    // Each of the three within every three POPs; d is another task.
    for window in served.chunks(3) {
        let distinct: HashSet<&String> = window.iter().collect();
        assert_eq!(distinct.len(), 3, "{served:?}");
    }
    assert!(!served.contains(&"d".to_string()));
    let rest = popped_queues(&c, "POP FROM NAMESPACE ns TASK other LIMIT 10 AUTO ACK").await;
    assert_eq!(rest, ["d", "d", "d", "d"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_popped_message_is_acked_by_its_receipt_over_both_protocols() {
    let proxy = Proxy::start("wild_ack").await;
    let c = proxy.connect().await;
    c.batch_execute("CREATE QUEUE jobs WITH (namespace = 'etl')")
        .await
        .unwrap();
    push(&c, "jobs", 1).await;
    // Extended protocol, with parameters; Describe gives POP's columns.
    let stmt = c
        .prepare("POP FROM NAMESPACE $1 GROUP $2 LEASE '30s'")
        .await
        .unwrap();
    let names: Vec<&str> = stmt.columns().iter().map(|c| c.name()).collect();
    assert_eq!(
        names,
        [
            "receipt",
            "message_id",
            "queue",
            "partition",
            "offset",
            "payload",
            "transaction_id",
            "trace_id",
            "retry_count",
            "created_at",
            "lease_expires_at"
        ]
    );
    let got = c.query(&stmt, &[&"etl", &"workers"]).await.unwrap();
    assert_eq!(got.len(), 1);
    let queue: String = got[0].get("queue");
    let receipt: String = got[0].get("receipt");
    assert_eq!(queue, "jobs");
    // Leased: the group gets nothing more until the ACK.
    assert!(c
        .query(&stmt, &[&"etl", &"workers"])
        .await
        .unwrap()
        .is_empty());
    let acked = rows(&c, &format!("ACK '{receipt}'")).await;
    assert_eq!(col(&acked[0], "status"), "acked");
    assert!(c
        .query(&stmt, &[&"etl", &"workers"])
        .await
        .unwrap()
        .is_empty());
    // Another group gets the message (fan-out), through the simple protocol.
    assert_eq!(
        popped_queues(&c, "POP FROM NAMESPACE etl GROUP audit AUTO ACK").await,
        ["jobs"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_wildcard_pop_is_woken_by_a_push_into_any_queue_of_the_namespace() {
    let proxy = Proxy::start("wild_wait").await;
    let other = Proxy::start_on(proxy.direct.clone(), |_| {}).await;
    let c = proxy.connect().await;
    for q in ["one", "two", "three"] {
        c.batch_execute(&format!("CREATE QUEUE {q} WITH (namespace = 'waiting')"))
            .await
            .unwrap();
    }
    // Nothing there: a POP without WAIT returns no rows at once.
    assert!(popped_queues(&c, "POP FROM NAMESPACE waiting")
        .await
        .is_empty());
    for (pusher, queue) in [(&proxy, "two"), (&other, "three")] {
        let cfg = proxy.client_config();
        let waiter = tokio::spawn(async move {
            let client = connect(&cfg).await;
            popped_queues(&client, "POP FROM NAMESPACE waiting WAIT 60 AUTO ACK").await
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let p = pusher.connect().await;
        push(&p, queue, 1).await;
        // A generous hang bound, not a timing claim.
        let got = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("the waiting POP returns")
            .unwrap();
        assert_eq!(got, [queue]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_is_registered_durably_with_one_subscription_for_the_namespace() {
    let proxy = Proxy::start("wild_subscribe").await;
    let c = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    c.batch_execute("CREATE QUEUE early WITH (namespace = 'sub')")
        .await
        .unwrap();
    push(&c, "early", 1).await;
    // SUBSCRIBE FROM NOW on first sight: the old message is not delivered,
    // and the group is written down although nothing was popped.
    assert!(
        popped_queues(&c, "POP FROM NAMESPACE sub GROUP late SUBSCRIBE FROM NOW")
            .await
            .is_empty()
    );
    let registered = direct
        .query(
            "SELECT q.name, m.subscription_mode FROM queen.consumer_groups_metadata m
             JOIN queen.queues q ON q.id = m.queue_id WHERE m.consumer_group = 'late'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(registered.len(), 1);
    assert_eq!(registered[0].get::<_, String>(1), "now");
    // A queue that joins the namespace afterwards: its messages pushed
    // before the group's next POP are delivered (the namespace's
    // subscription is the group's first), the old one of `early` is not.
    c.batch_execute("CREATE QUEUE later WITH (namespace = 'sub')")
        .await
        .unwrap();
    push(&c, "later", 1).await;
    push(&c, "early", 1).await;
    let mut got = popped_queues(
        &c,
        "POP FROM NAMESPACE sub GROUP late LIMIT 10 PARTITIONS 5 AUTO ACK",
    )
    .await;
    got.sort();
    assert_eq!(got, ["early", "later"]);
    // A namespace that does not exist yet: no rows, no error.
    assert!(popped_queues(&c, "POP FROM NAMESPACE nothing GROUP g")
        .await
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_namespace_is_invisible() {
    use queenwire::users::{Passthrough, User, Users, Verifier};
    use uuid::Uuid;
    let mut users = Users::default();
    for (name, tenant) in [("a", Uuid::from_u128(0xa)), ("b", Uuid::from_u128(0xb))] {
        users.users.insert(
            name.into(),
            User {
                name: name.into(),
                tenant,
                passthrough: Passthrough::Full,
                verifier: Verifier::new("pw"),
            },
        );
    }
    let users = std::sync::Arc::new(users);
    let proxy = Proxy::start_with("wild_tenants", |c| c.users = Some(users.clone())).await;
    let login = |name: &str| {
        let mut cfg = proxy.client_config();
        cfg.user(name).password("pw");
        cfg
    };
    let a = connect(&login("a")).await;
    let b = connect(&login("b")).await;
    a.batch_execute("CREATE QUEUE secrets WITH (namespace = 'shared', priority = 9)")
        .await
        .unwrap();
    push(&a, "secrets", 3).await;
    // b has a namespace of the same name, with a queue of the same name.
    assert!(
        popped_queues(&b, "POP FROM NAMESPACE shared LIMIT 10 AUTO ACK")
            .await
            .is_empty()
    );
    b.batch_execute("CREATE QUEUE secrets WITH (namespace = 'shared')")
        .await
        .unwrap();
    push(&b, "secrets", 1).await;
    let got = rows(&b, "POP FROM NAMESPACE shared LIMIT 10 AUTO ACK").await;
    // One row: b's own message, none of a's three.
    assert_eq!(got.len(), 1);
    // a's three are all still there for a.
    assert_eq!(
        popped_queues(&a, "POP FROM NAMESPACE shared LIMIT 10 AUTO ACK")
            .await
            .len(),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_wildcard_pops_are_refused_with_a_sqlstate() {
    let proxy = Proxy::start("wild_bad").await;
    let c = proxy.connect().await;
    assert_eq!(
        sql_error(&c, "POP FROM NAMESPACE ns PARTITION p").await,
        "42601"
    );
    assert_eq!(sql_error(&c, "POP FROM NAMESPACE ns TASK").await, "42601");
    assert_eq!(
        sql_error(&c, "POP FROM NAMESPACE ns LIMIT 0").await,
        "22023"
    );
    // `namespace` followed by a clause is still a queue's name.
    assert!(rows(&c, "POP FROM namespace LIMIT 1").await.is_empty());
    let r = c.simple_query("SELECT 1").await.unwrap();
    assert!(!r.is_empty());
}

/// Several consumers of one group pop one namespace concurrently and ACK;
/// a producer ledger of transaction ids against the consumers': nothing
/// lost, nothing acknowledged twice, and no two consumers ever held one
/// message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_consumers_of_one_group_get_each_message_once() {
    const QUEUES: usize = 4;
    const PER_QUEUE: usize = 150;
    const CONSUMERS: usize = 4;
    let proxy = Proxy::start_with("wild_ledger", |c| c.pool_size = 8).await;
    let second = Proxy::start_on(proxy.direct.clone(), |c| c.pool_size = 8).await;
    let c = proxy.connect().await;
    let mut sent = HashSet::new();
    for q in 0..QUEUES {
        c.batch_execute(&format!(
            "CREATE QUEUE led{q} WITH (namespace = 'ledger', priority = {})",
            q % 2
        ))
        .await
        .unwrap();
        let mut values = Vec::new();
        for i in 0..PER_QUEUE {
            let txn = format!("q{q}-{i}");
            values.push(format!("('{{}}', 'part-{}', '{txn}')", i % 5));
            sent.insert(txn);
        }
        rows(
            &c,
            &format!(
                "PUSH INTO led{q} (payload, partition, transaction_id) VALUES {}",
                values.join(", ")
            ),
        )
        .await;
    }
    let mut consumers = Vec::new();
    for n in 0..CONSUMERS {
        let cfg = if n % 2 == 0 {
            proxy.client_config()
        } else {
            second.client_config()
        };
        consumers.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            let mut acked = Vec::new();
            let mut empty = 0;
            while empty < 3 {
                let got = rows(
                    &client,
                    "POP FROM NAMESPACE ledger GROUP g LIMIT 7 PARTITIONS 2 WAIT '300ms'",
                )
                .await;
                if got.is_empty() {
                    empty += 1;
                    continue;
                }
                empty = 0;
                let receipts: Vec<String> = got
                    .iter()
                    .map(|r| format!("'{}'", col(r, "receipt")))
                    .collect();
                let statuses = rows(&client, &format!("ACK {}", receipts.join(", "))).await;
                for (row, status) in got.iter().zip(&statuses) {
                    if col(status, "status") == "acked" {
                        acked.push(col(row, "transaction_id"));
                    }
                }
            }
            acked
        }));
    }
    let mut received: HashMap<String, usize> = HashMap::new();
    for consumer in consumers {
        for txn in tokio::time::timeout(Duration::from_secs(300), consumer)
            .await
            .expect("consumers finish")
            .unwrap()
        {
            *received.entry(txn).or_default() += 1;
        }
    }
    let duplicates: Vec<_> = received.iter().filter(|(_, n)| **n > 1).collect();
    let lost: Vec<_> = sent.iter().filter(|t| !received.contains_key(*t)).collect();
    assert!(duplicates.is_empty(), "acknowledged twice: {duplicates:?}");
    assert!(lost.is_empty(), "lost: {} of {}", lost.len(), sent.len());
    assert_eq!(received.len(), QUEUES * PER_QUEUE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_pop_in_a_rolled_back_block_delivers_again() {
    let proxy = Proxy::start("wild_block").await;
    let c = proxy.connect().await;
    c.batch_execute("CREATE QUEUE inblock WITH (namespace = 'blk')")
        .await
        .unwrap();
    push(&c, "inblock", 1).await;
    c.batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        popped_queues(&c, "POP FROM NAMESPACE blk AUTO ACK").await,
        ["inblock"]
    );
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(
        popped_queues(&c, "POP FROM NAMESPACE blk AUTO ACK").await,
        ["inblock"]
    );
    assert!(popped_queues(&c, "POP FROM NAMESPACE blk AUTO ACK")
        .await
        .is_empty());
}

/// A queue dropped between a wildcard POP's listing of its namespace and
/// its POP of that queue stays dropped: the wildcard's POP of one queue
/// does not make a missing queue, as a POP naming its queue does (seen
/// as a race with DROP QUEUE: the queue came back, outside its namespace,
/// and the next CREATE QUEUE of it failed with 42710). The call is the
/// engine's, made directly, so the race is not needed to show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_pop_never_brings_back_a_dropped_queue() {
    let proxy = Proxy::start("wildcard_dropped").await;
    let direct = connect(&proxy.direct).await;
    let exists = |name: &'static str| {
        let direct = &direct;
        async move {
            let n: i64 = direct
                .query_one(
                    "SELECT count(*) FROM queen.queues WHERE name = $1",
                    &[&name],
                )
                .await
                .unwrap()
                .get(0);
            n > 0
        }
    };
    let call = "SELECT * FROM queen.log_pop_v2($1, NULL, 'g', 1, 1, NULL, 'beginning', NULL, \
                false, '00000000-0000-0000-0000-000000000001', NULL, NULL, $2)";
    let rows = direct
        .query(call, &[&"listed_then_dropped", &false])
        .await
        .unwrap();
    assert!(rows.is_empty());
    assert!(!exists("listed_then_dropped").await);
    // A POP naming its queue (with a group) still makes it.
    direct
        .query(call, &[&"named_by_its_pop", &true])
        .await
        .unwrap();
    assert!(exists("named_by_its_pop").await);
    // And wildcard POPs still serve their namespace.
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE QUEUE still_served WITH (namespace = 'wd'); \
             PUSH INTO still_served VALUES ('1')",
        )
        .await
        .unwrap();
    let got = rows_of(&client, "POP FROM NAMESPACE wd GROUP g AUTO ACK").await;
    assert_eq!(got, 1);
}

async fn rows_of(client: &Client, sql: &str) -> usize {
    rows(client, sql).await.len()
}

/// `namespace = NULL` (bare), `''` or a NULL parameter leaves a queue
/// without a namespace or task — none is stored as text a wildcard POP
/// could never name — and `class` and `overflow` words read in any case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_or_empty_namespace_clears_it_and_class_words_read_in_any_case() {
    let proxy = Proxy::start("wild_clear").await;
    let c = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    let stored = |q: &'static str| {
        let direct = &direct;
        async move {
            let row = direct
                .query_one(
                    "SELECT namespace, task FROM queen.queues WHERE name = $1",
                    &[&q],
                )
                .await
                .unwrap();
            (
                row.get::<_, Option<String>>(0),
                row.get::<_, Option<String>>(1),
            )
        }
    };
    c.batch_execute(
        "CREATE QUEUE bare WITH (namespace = NULL, task = null);
         CREATE QUEUE empty WITH (namespace = '', task = '');
         CREATE QUEUE texty WITH (namespace = 'NULL', task = 't')",
    )
    .await
    .unwrap();
    assert_eq!(stored("bare").await, (None, None));
    assert_eq!(stored("empty").await, (None, None));
    assert_eq!(
        stored("texty").await,
        (Some("NULL".to_string()), Some("t".to_string()))
    );
    // ALTER clears a namespace a queue had, by word or by parameter.
    c.batch_execute("ALTER QUEUE texty SET (namespace = NULL)")
        .await
        .unwrap();
    assert_eq!(stored("texty").await, (None, Some("t".to_string())));
    let alter = c
        .prepare_typed(
            "ALTER QUEUE texty SET (namespace = $1, task = $2)",
            &[
                tokio_postgres::types::Type::TEXT,
                tokio_postgres::types::Type::TEXT,
            ],
        )
        .await
        .unwrap();
    c.execute(&alter, &[&"billing", &"t2"]).await.unwrap();
    assert_eq!(
        stored("texty").await,
        (Some("billing".to_string()), Some("t2".to_string()))
    );
    c.execute(&alter, &[&None::<&str>, &None::<&str>])
        .await
        .unwrap();
    assert_eq!(stored("texty").await, (None, None));
    // A NULL parameter for an option that has no "none" is refused.
    let lease = c
        .prepare_typed(
            "ALTER QUEUE texty SET (lease_time = $1)",
            &[tokio_postgres::types::Type::TEXT],
        )
        .await
        .unwrap();
    let err = c.execute(&lease, &[&None::<&str>]).await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("22004"), "{err}");

    c.batch_execute(
        "CREATE QUEUE fleeting WITH (class = Ephemeral, overflow = DROP_OLDEST, max_length = 5)",
    )
    .await
    .unwrap();
    let class: String = direct
        .query_one(
            "SELECT e.overflow FROM queen.ephemeral_queues e JOIN queen.queues q ON q.id = e.queue_id WHERE q.name = 'fleeting'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(class, "drop_oldest");
    assert_eq!(
        sql_error(&c, "CREATE QUEUE odd WITH (class = ephemerall)").await,
        "22023"
    );
}
