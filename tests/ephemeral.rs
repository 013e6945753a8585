//! Ephemeral queues (030): declared in PostgreSQL, messages only in the
//! memory of the one queenwire that owns the queue (elected through 029's
//! lease table). PUSH/POP/ACK as for durable queues on the owner, quota
//! and overflow, ttl, leases and redelivery, PUSH at COMMIT, a non-owner's
//! 55006 naming the owner, a new owner (and an empty queue) after the owner
//! stops, and bad declarations refused with nothing changed.

mod common;

use common::proxy::{connect, Proxy};
use common::sql::rows;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

fn col(row: &HashMap<String, Option<String>>, name: &str) -> String {
    row.get(name).cloned().flatten().unwrap_or_default()
}

async fn error(client: &Client, sql: &str) -> (String, String) {
    let err = client.simple_query(sql).await.expect_err(sql);
    let db = err.as_db_error().unwrap_or_else(|| panic!("{sql}: {err}"));
    (db.code().code().to_string(), db.message().to_string())
}

async fn receipts_of(client: &Client, sql: &str) -> Vec<String> {
    rows(client, sql)
        .await
        .iter()
        .map(|r| col(r, "receipt"))
        .collect()
}

async fn ack(client: &Client, receipts: &[String]) -> Vec<String> {
    let list: Vec<String> = receipts.iter().map(|r| format!("'{r}'")).collect();
    rows(client, &format!("ACK {}", list.join(", ")))
        .await
        .iter()
        .map(|r| col(r, "status"))
        .collect()
}

/// Rows the database holds for a queue's messages (there must be none).
async fn stored_in_postgres(direct: &Client, queue: &str) -> i64 {
    direct
        .query_one(
            "SELECT (SELECT count(*) FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1)
                  + (SELECT count(*) FROM queen.log_segments s JOIN queen.log_partitions p ON p.id = s.partition_id
                     JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1)",
            &[&queue],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_pop_ack_on_the_owner_and_nothing_in_postgres() {
    let proxy = Proxy::start("eph_basic").await;
    let c = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    c.batch_execute(
        "CREATE QUEUE fast WITH (class = ephemeral, max_length = 3, overflow = reject)",
    )
    .await
    .unwrap();
    let pushed = rows(
        &c,
        "PUSH INTO fast VALUES ('{\"n\":1}'), ('{\"n\":2}'), ('{\"n\":3}')",
    )
    .await;
    let offsets: Vec<String> = pushed.iter().map(|r| col(r, "offset")).collect();
    assert_eq!(offsets, ["0", "1", "2"]);
    assert!(pushed.iter().all(|r| col(r, "status") == "queued"));
    // Full: overflow = reject refuses the whole PUSH.
    let (code, message) = error(&c, "PUSH INTO fast VALUES ('{}')").await;
    assert_eq!(code, "54000", "{message}");
    assert!(message.contains("max_length"), "{message}");
    // Extended protocol: POP's columns, the queue named in each row.
    let got = c.query("POP FROM fast LIMIT $1", &[&10i32]).await.unwrap();
    assert_eq!(got.len(), 3);
    let queue: String = got[0].get("queue");
    assert_eq!(queue, "fast");
    let receipts: Vec<String> = got.iter().map(|r| r.get("receipt")).collect();
    assert_eq!(ack(&c, &receipts).await, ["acked", "acked", "acked"]);
    // Acknowledged: room again, and nothing left to pop.
    assert!(rows(&c, "POP FROM fast").await.is_empty());
    rows(&c, "PUSH INTO fast VALUES ('{}')").await;
    assert_eq!(stored_in_postgres(&direct, "fast").await, 0);
    // SHOW QUEUES says where the messages are.
    let shown = rows(&c, "SHOW QUEUES").await;
    let fast = shown.iter().find(|r| col(r, "queue") == "fast").unwrap();
    assert!(col(fast, "storage").contains("ephemeral"), "{fast:?}");
    assert!(
        col(fast, "storage").contains("lost if it stops"),
        "{fast:?}"
    );
    assert_eq!(col(fast, "messages"), "1");
    rows(&c, "PUSH INTO durable_one VALUES ('{}')").await;
    let shown = rows(&c, "SHOW QUEUES").await;
    let durable = shown
        .iter()
        .find(|r| col(r, "queue") == "durable_one")
        .unwrap();
    assert_eq!(col(durable, "storage"), "durable");
    // DROP QUEUE takes the declaration and the messages; a receipt of
    // the dropped queue is stale.
    let held = receipts_of(&c, "POP FROM fast").await;
    c.batch_execute("DROP QUEUE fast").await.unwrap();
    assert!(rows(&c, "POP FROM fast").await.is_empty());
    assert_eq!(ack(&c, &held).await, ["stale"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_oldest_ttl_and_lease_redelivery() {
    let proxy = Proxy::start("eph_policies").await;
    let c = proxy.connect().await;
    c.batch_execute(
        "CREATE QUEUE ring WITH (class = ephemeral, max_length = 2, overflow = drop_oldest);
         CREATE QUEUE brief WITH (class = ephemeral, ttl = '1s');
         CREATE QUEUE leased WITH (class = ephemeral, retry_limit = 5)",
    )
    .await
    .unwrap();
    rows(&c, "PUSH INTO ring VALUES ('1'), ('2')").await;
    rows(&c, "PUSH INTO ring VALUES ('3')").await;
    // One PUSH larger than the whole queue is refused even so.
    assert_eq!(
        error(&c, "PUSH INTO ring VALUES ('4'), ('5'), ('6')")
            .await
            .0,
        "54000"
    );
    let got: Vec<String> = rows(&c, "POP FROM ring LIMIT 10 AUTO ACK")
        .await
        .iter()
        .map(|r| col(r, "payload"))
        .collect();
    assert_eq!(got, ["2", "3"]);

    rows(&c, "PUSH INTO brief VALUES ('1')").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        rows(&c, "POP FROM brief").await.is_empty(),
        "expired by ttl"
    );

    rows(&c, "PUSH INTO leased VALUES ('1')").await;
    let first = rows(&c, "POP FROM leased LEASE '1s'").await;
    assert_eq!(col(&first[0], "retry_count"), "0");
    assert!(rows(&c, "POP FROM leased").await.is_empty(), "leased");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let again = rows(&c, "POP FROM leased").await;
    assert_eq!(col(&again[0], "retry_count"), "1");
    assert_eq!(col(&again[0], "message_id"), col(&first[0], "message_id"));
    // The expired receipt is stale; the new one acknowledges.
    assert_eq!(ack(&c, &[col(&first[0], "receipt")]).await, ["stale"]);
    assert_eq!(ack(&c, &[col(&again[0], "receipt")]).await, ["acked"]);
    // FAILED: delivered again with one more failure counted.
    rows(&c, "PUSH INTO leased VALUES ('2')").await;
    let r = receipts_of(&c, "POP FROM leased").await;
    let failed = rows(&c, &format!("ACK '{}' FAILED", r[0])).await;
    assert_eq!(col(&failed[0], "status"), "retry");
    assert_eq!(
        col(&rows(&c, "POP FROM leased").await[0], "retry_count"),
        "1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_inside_a_block_takes_effect_at_commit_and_not_at_rollback() {
    let proxy = Proxy::start("eph_txn").await;
    let c = proxy.connect().await;
    let other = proxy.connect().await;
    c.batch_execute("CREATE QUEUE tx WITH (class = ephemeral)")
        .await
        .unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    let pushed = rows(&c, "PUSH INTO tx VALUES ('\"kept\"')").await;
    assert_eq!(col(&pushed[0], "status"), "queued");
    assert!(
        rows(&other, "POP FROM tx").await.is_empty(),
        "not before COMMIT"
    );
    c.batch_execute("COMMIT").await.unwrap();
    // Once COMMIT returned, the messages are there (no WAIT needed).
    let got = rows(&other, "POP FROM tx AUTO ACK").await;
    assert_eq!(col(&got[0], "payload"), "\"kept\"");
    // The extended protocol's implicit transaction: applied at its Sync,
    // before the client sees the PUSH's ReadyForQuery.
    let push = c
        .prepare_typed(
            "PUSH INTO tx VALUES ($1)",
            &[tokio_postgres::types::Type::TEXT],
        )
        .await
        .unwrap();
    let pushed = c.query(&push, &[&"\"extended\""]).await.unwrap();
    assert_eq!(pushed.len(), 1);
    let got = rows(&other, "POP FROM tx AUTO ACK").await;
    assert_eq!(col(&got[0], "payload"), "\"extended\"");

    c.batch_execute("BEGIN").await.unwrap();
    rows(&c, "PUSH INTO tx VALUES ('\"dropped\"')").await;
    c.batch_execute("ROLLBACK").await.unwrap();
    c.batch_execute("BEGIN; PUSH INTO tx VALUES ('\"saved\"'); COMMIT")
        .await
        .unwrap();
    let got = rows(&other, "POP FROM tx LIMIT 10 AUTO ACK").await;
    let payloads: Vec<String> = got.iter().map(|r| col(r, "payload")).collect();
    assert_eq!(payloads, ["\"saved\""]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_pop_is_woken_by_a_push() {
    let proxy = Proxy::start("eph_wait").await;
    let c = proxy.connect().await;
    c.batch_execute("CREATE QUEUE w WITH (class = ephemeral)")
        .await
        .unwrap();
    let cfg = proxy.client_config();
    let waiter = tokio::spawn(async move {
        let client = connect(&cfg).await;
        rows(&client, "POP FROM w WAIT 60 AUTO ACK").await.len()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    rows(&c, "PUSH INTO w VALUES ('1')").await;
    let got = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiting POP returns")
        .unwrap();
    assert_eq!(got, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_declarations_are_refused_and_change_nothing() {
    let proxy = Proxy::start("eph_bad").await;
    let c = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    for (sql, code) in [
        ("CREATE QUEUE b WITH (class = fleeting)", "22023"),
        (
            "CREATE QUEUE b WITH (class = ephemeral, colour = blue)",
            "22023",
        ),
        (
            "CREATE QUEUE b WITH (class = ephemeral, max_length = -1)",
            "22023",
        ),
        (
            "CREATE QUEUE b WITH (class = ephemeral, max_length = 0)",
            "22023",
        ),
        (
            "CREATE QUEUE b WITH (class = ephemeral, max_bytes = 'lots')",
            "22023",
        ),
        ("CREATE QUEUE b WITH (class = ephemeral, ttl = -5)", "22023"),
        (
            "CREATE QUEUE b WITH (class = ephemeral, overflow = spill)",
            "22023",
        ),
        ("CREATE QUEUE b WITH (max_length = 5)", "22023"),
        (
            "CREATE QUEUE b WITH (class = ephemeral, lease_time = 0)",
            "22023",
        ),
    ] {
        assert_eq!(error(&c, sql).await.0, code, "{sql}");
    }
    let queues: i64 = direct
        .query_one("SELECT count(*) FROM queen.queues WHERE name = 'b'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(queues, 0, "a refused CREATE QUEUE left a queue");
    rows(&c, "PUSH INTO plain VALUES ('1')").await;
    c.batch_execute("CREATE QUEUE e WITH (class = ephemeral)")
        .await
        .unwrap();
    assert_eq!(
        error(&c, "ALTER QUEUE plain SET (class = ephemeral)")
            .await
            .0,
        "0A000"
    );
    assert_eq!(
        error(&c, "ALTER QUEUE e SET (class = durable)").await.0,
        "0A000"
    );
    assert_eq!(
        error(&c, "ALTER QUEUE plain SET (max_length = 5)").await.0,
        "22023"
    );
    assert_eq!(
        error(&c, "CREATE QUEUE e WITH (class = ephemeral)").await.0,
        "42710"
    );
    // The quota can be altered; the class is still ephemeral.
    c.batch_execute("ALTER QUEUE e SET (max_length = 1)")
        .await
        .unwrap();
    rows(&c, "PUSH INTO e VALUES ('1')").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(error(&c, "PUSH INTO e VALUES ('2')").await.0, "54000");
    // The durable path never stores a message of an ephemeral queue.
    assert_eq!(
        direct
            .query_one("SELECT count(*) FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'e'", &[])
            .await
            .unwrap()
            .get::<_, i64>(0),
        0
    );
    let r = c.simple_query("SELECT 1").await.unwrap();
    assert!(!r.is_empty());
}

/// Two queenwires on one database: one owner, elected once; the other
/// refuses with 55006 naming it; both racing to be first elect one; after
/// the owner stops, the other becomes the owner of an empty queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owner_across_two_queenwires_and_a_new_one_after_it_stops() {
    let a = Proxy::start("eph_two").await;
    let b = Proxy::start_on(a.direct.clone(), |_| {}).await;
    let ca = a.connect().await;
    ca.batch_execute("CREATE QUEUE shared WITH (class = ephemeral)")
        .await
        .unwrap();
    // Let b learn the class (names are re-read every second).
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Both race to push first, many times: every accepted push went to one
    // owner, every refusal names that owner.
    let mut racers = Vec::new();
    for proxy in [&a, &b] {
        for n in 0..3 {
            let cfg = proxy.client_config();
            let addr = proxy.addr.to_string();
            racers.push(tokio::spawn(async move {
                let client = connect(&cfg).await;
                let mut accepted = Vec::new();
                let mut refused = HashSet::new();
                for i in 0..20 {
                    let txn = format!("{addr}-{n}-{i}");
                    match client
                        .simple_query(&format!(
                            "PUSH INTO shared (payload, transaction_id) VALUES ('{{}}', '{txn}')"
                        ))
                        .await
                    {
                        Ok(_) => accepted.push(txn),
                        Err(e) => {
                            let db = e.as_db_error().expect("a server error");
                            match db.code().code() {
                                "55006" => {
                                    refused.insert(db.message().to_string());
                                }
                                // A queenwire that has not learnt the class
                                // yet (a busy machine): refused, nothing
                                // stored.
                                "55000" => {}
                                other => panic!("{other}: {}", db.message()),
                            }
                        }
                    }
                }
                (addr, accepted, refused)
            }));
        }
    }
    let mut accepted_by: HashMap<String, Vec<String>> = HashMap::new();
    let mut refusals = HashSet::new();
    for r in racers {
        let (addr, accepted, refused) = r.await.unwrap();
        accepted_by.entry(addr).or_default().extend(accepted);
        refusals.extend(refused);
    }
    let owners: Vec<&String> = accepted_by
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, _)| k)
        .collect();
    assert_eq!(owners.len(), 1, "one owner: {accepted_by:?}");
    let owner_addr = owners[0].clone();
    let (owner, other) = if owner_addr == a.addr.to_string() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    // All 60 of the owner's, but for any refused before it learnt the class.
    assert!(!accepted_by[&owner_addr].is_empty());
    for message in &refusals {
        assert!(message.contains(&owner_addr), "{message}");
    }
    // The other refuses POP too; the owner delivers every message once.
    let co = owner.connect().await;
    let cx = other.connect().await;
    assert_eq!(error(&cx, "POP FROM shared").await.0, "55006");
    let got = rows(&co, "POP FROM shared LIMIT 100").await;
    let delivered: HashSet<String> = got.iter().map(|r| col(r, "transaction_id")).collect();
    let sent: HashSet<String> = accepted_by[&owner_addr].iter().cloned().collect();
    assert_eq!(delivered, sent);
    // ACK through the other: 55006 (it does not forward).
    let receipt = col(&got[0], "receipt");
    assert_eq!(error(&cx, &format!("ACK '{receipt}'")).await.0, "55006");
    rows(&co, "PUSH INTO shared VALUES ('\"lost\"')").await;

    // The owner stops: its lease runs out and the other takes over, with
    // an empty queue (the messages were only in the stopped process).
    drop(co);
    let (stopped, survivor) = if owner_addr == a.addr.to_string() {
        (a, b)
    } else {
        (b, a)
    };
    drop(cx);
    tokio::time::timeout(Duration::from_secs(60), stopped.server.shutdown())
        .await
        .expect("the owner stops");
    let cs = survivor.connect().await;
    let began = Instant::now();
    loop {
        match cs.simple_query("PUSH INTO shared VALUES ('\"new\"')").await {
            Ok(_) => break,
            Err(e) => {
                assert_eq!(e.as_db_error().unwrap().code().code(), "55006");
                assert!(began.elapsed() < Duration::from_secs(30), "no new owner");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    let payloads: Vec<String> = rows(&cs, "POP FROM shared LIMIT 100 AUTO ACK")
        .await
        .iter()
        .map(|r| col(r, "payload"))
        .collect();
    assert_eq!(payloads, ["\"new\""]);
}

/// A producer and four consumers of one group on the owner, concurrently:
/// every accepted message acknowledged exactly once, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_consumers_of_an_ephemeral_queue_get_each_message_once() {
    const MESSAGES: usize = 400;
    let proxy = Proxy::start_with("eph_ledger", |c| c.pool_size = 8).await;
    let c = proxy.connect().await;
    c.batch_execute("CREATE QUEUE ledger WITH (class = ephemeral, max_length = 100000)")
        .await
        .unwrap();
    let cfg = proxy.client_config();
    let producer = tokio::spawn(async move {
        let client = connect(&cfg).await;
        let mut sent = Vec::new();
        for batch in 0..MESSAGES / 20 {
            let mut values = Vec::new();
            for i in 0..20 {
                let txn = format!("m{}", batch * 20 + i);
                values.push(format!("('{{}}', 'p{}', '{txn}')", i % 8));
                sent.push(txn);
            }
            rows(
                &client,
                &format!(
                    "PUSH INTO ledger (payload, partition, transaction_id) VALUES {}",
                    values.join(", ")
                ),
            )
            .await;
        }
        sent
    });
    let mut consumers = Vec::new();
    for _ in 0..4 {
        let cfg = proxy.client_config();
        consumers.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            let mut acked = Vec::new();
            let mut empty = 0;
            while empty < 4 {
                let got = rows(&client, "POP FROM ledger LIMIT 5 PARTITIONS 2 WAIT '300ms'").await;
                if got.is_empty() {
                    empty += 1;
                    continue;
                }
                empty = 0;
                let receipts: Vec<String> = got.iter().map(|r| col(r, "receipt")).collect();
                for (row, status) in got.iter().zip(ack(&client, &receipts).await) {
                    if status == "acked" {
                        acked.push(col(row, "transaction_id"));
                    }
                }
            }
            acked
        }));
    }
    let sent: HashSet<String> = producer.await.unwrap().into_iter().collect();
    let mut received: HashMap<String, usize> = HashMap::new();
    for consumer in consumers {
        for txn in tokio::time::timeout(Duration::from_secs(120), consumer)
            .await
            .expect("consumers finish")
            .unwrap()
        {
            *received.entry(txn).or_default() += 1;
        }
    }
    let twice: Vec<_> = received.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "acknowledged twice: {twice:?}");
    let lost: Vec<_> = sent.iter().filter(|t| !received.contains_key(*t)).collect();
    assert!(lost.is_empty(), "lost {} of {}", lost.len(), sent.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenant_neither_sees_nor_acknowledges_an_ephemeral_queue() {
    use queenwire::users::{Passthrough, User, Users, Verifier};
    let mut users = Users::default();
    for (name, tenant) in [
        ("a", uuid::Uuid::from_u128(0xa)),
        ("b", uuid::Uuid::from_u128(0xb)),
    ] {
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
    let proxy = Proxy::start_with("eph_tenants", |c| c.users = Some(users.clone())).await;
    let login = |name: &str| {
        let mut cfg = proxy.client_config();
        cfg.user(name).password("pw");
        cfg
    };
    let a = connect(&login("a")).await;
    let b = connect(&login("b")).await;
    a.batch_execute("CREATE QUEUE mine WITH (class = ephemeral)")
        .await
        .unwrap();
    rows(&a, "PUSH INTO mine VALUES ('1')").await;
    let receipt = receipts_of(&a, "POP FROM mine LEASE '1m'").await;
    // b's `mine` is b's own (durable, empty) queue.
    assert!(rows(&b, "POP FROM mine").await.is_empty());
    assert_eq!(ack(&b, &receipt).await, ["stale"]);
    let renewed = rows(&b, &format!("RENEW '{}'", receipt[0])).await;
    assert_eq!(col(&renewed[0], "lease_expires_at"), "");
    let shown = rows(&b, "SHOW QUEUES").await;
    assert!(
        shown.iter().all(|r| col(r, "storage") == "durable"),
        "{shown:?}"
    );
    // a's lease was not touched by b.
    assert_eq!(ack(&a, &receipt).await, ["acked"]);
}

/// Figures, not a pass/fail check (`cargo test --test ephemeral -- --ignored
/// --nocapture figures`): PUSH + POP AUTO ACK round trips on an ephemeral
/// and a durable queue, and the partition guard trigger's cost on
/// provisioning partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn figures() {
    let proxy = Proxy::start("eph_figures").await;
    let c = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    c.batch_execute("CREATE QUEUE e WITH (class = ephemeral); CREATE QUEUE d")
        .await
        .unwrap();
    for queue in ["e", "d"] {
        let mut took = Vec::new();
        for i in 0..400 {
            let began = Instant::now();
            rows(&c, &format!("PUSH INTO {queue} VALUES ('{{\"i\":{i}}}')")).await;
            let got = rows(&c, &format!("POP FROM {queue} AUTO ACK")).await;
            assert_eq!(got.len(), 1);
            took.push(began.elapsed());
        }
        took.sort();
        println!(
            "{queue}: PUSH+POP median {:?}, p90 {:?}",
            took[took.len() / 2],
            took[took.len() * 9 / 10]
        );
    }
    // Alternating, so warm-up does not favour either.
    for (round, guarded) in [true, false, true, false].into_iter().enumerate() {
        let ddl = if guarded {
            "CREATE TRIGGER trg_partitions_ephemeral_guard BEFORE INSERT ON queen.log_partitions \
             FOR EACH ROW EXECUTE FUNCTION queen.ephemeral_guard_partition_v1()"
        } else {
            "DROP TRIGGER trg_partitions_ephemeral_guard ON queen.log_partitions"
        };
        if round > 0 {
            direct.batch_execute(ddl).await.unwrap();
        }
        let queue = format!("prov_{round}");
        let values: Vec<String> = (0..5000).map(|i| format!("('{{}}', 'p{i}')")).collect();
        let began = Instant::now();
        for chunk in values.chunks(1000) {
            rows(
                &c,
                &format!(
                    "PUSH INTO {queue} (payload, partition) VALUES {}",
                    chunk.join(", ")
                ),
            )
            .await;
        }
        let label = if guarded {
            "with guard"
        } else {
            "without guard"
        };
        println!("5,000 new partitions {label}: {:?}", began.elapsed());
    }
}
