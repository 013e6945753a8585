//! Ephemeral queues (030): declared in PostgreSQL, messages only in the
//! memory of the one queenwire that owns the queue (elected through 029's
//! lease table). PUSH/POP/ACK as for durable queues on the owner, quota
//! and overflow, ttl, leases and redelivery, PUSH at COMMIT, bad
//! declarations refused with nothing changed; and with two queenwires on
//! one database: statements through the non-owner forwarded to the owner
//! (PUSH, POP, ACK, RENEW, blocks, POP … WAIT and its cancel, a concurrent
//! ledger), the internal channel refusing callers without the secret, and
//! a new owner (and an empty queue) after the owner stops or is killed.

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
         CREATE QUEUE leased WITH (class = ephemeral, retry_limit = 5, retry_delay = 0)",
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

/// A transaction_id pushed again within the queue's dedup_window is a
/// duplicate, as on a durable queue: nothing is stored for it, and its row
/// names the first message's id and offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_transaction_id_is_a_duplicate() {
    let proxy = Proxy::start("eph_dedup").await;
    let c = proxy.connect().await;
    c.batch_execute("CREATE QUEUE once WITH (class = ephemeral)")
        .await
        .unwrap();
    let first = rows(
        &c,
        "PUSH INTO once (payload, transaction_id) VALUES ('{\"n\":1}', 'order-1')",
    )
    .await;
    assert_eq!(col(&first[0], "status"), "queued");
    let again = rows(
        &c,
        "PUSH INTO once (payload, transaction_id) VALUES ('{\"n\":2}', 'order-1'), ('{\"n\":3}', 'order-2'), ('{\"n\":4}', 'order-2')",
    )
    .await;
    let statuses: Vec<String> = again.iter().map(|r| col(r, "status")).collect();
    assert_eq!(statuses, ["duplicate", "queued", "duplicate"]);
    assert_eq!(col(&again[0], "message_id"), col(&first[0], "message_id"));
    assert_eq!(col(&again[0], "offset"), col(&first[0], "offset"));
    assert_eq!(col(&again[2], "message_id"), col(&again[1], "message_id"));
    let got: Vec<String> = rows(&c, "POP FROM once LIMIT 10 AUTO ACK")
        .await
        .iter()
        .map(|r| col(r, "payload"))
        .collect();
    assert_eq!(got, ["{\"n\":1}", "{\"n\":3}"]);
}

/// The queue's time-based delivery options hold as for durable queues:
/// retry_delay after ACK … FAILED, delayed_processing, window_buffer (the
/// owner reads them when it claims the queue, and again at each renewal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_delay_delayed_processing_and_window_buffer_apply() {
    let proxy = Proxy::start("eph_delays").await;
    let c = proxy.connect().await;
    c.batch_execute(
        "CREATE QUEUE held WITH (class = ephemeral, retry_delay = '3s');
         CREATE QUEUE later WITH (class = ephemeral, delayed_processing = '2s');
         CREATE QUEUE settled WITH (class = ephemeral, window_buffer = '2s')",
    )
    .await
    .unwrap();

    rows(&c, "PUSH INTO held VALUES ('1')").await;
    let r = receipts_of(&c, "POP FROM held").await;
    let failed = rows(&c, &format!("ACK '{}' FAILED", r[0])).await;
    assert_eq!(col(&failed[0], "status"), "retry");
    let failed_at = Instant::now();
    assert!(
        rows(&c, "POP FROM held").await.is_empty(),
        "held back by retry_delay"
    );
    let again = rows(&c, "POP FROM held WAIT '10s'").await;
    assert_eq!(col(&again[0], "retry_count"), "1");
    assert!(failed_at.elapsed() >= Duration::from_millis(2900));

    let pushed_at = Instant::now();
    rows(&c, "PUSH INTO later VALUES ('1')").await;
    assert!(
        rows(&c, "POP FROM later").await.is_empty(),
        "invisible until 2 s old"
    );
    let got = rows(&c, "POP FROM later WAIT '10s' AUTO ACK").await;
    assert_eq!(col(&got[0], "payload"), "1");
    assert!(pushed_at.elapsed() >= Duration::from_millis(1900));

    let pushed_at = Instant::now();
    rows(&c, "PUSH INTO settled VALUES ('1')").await;
    assert!(
        rows(&c, "POP FROM settled").await.is_empty(),
        "the partition is invisible within its window"
    );
    let got = rows(&c, "POP FROM settled WAIT '10s' AUTO ACK").await;
    assert_eq!(col(&got[0], "payload"), "1");
    assert!(pushed_at.elapsed() >= Duration::from_millis(1900));
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

/// The holder of an ephemeral queue's lease, straight from the database.
async fn holder_of(direct: &Client, queue: &str) -> Option<String> {
    direct
        .query_opt(
            "SELECT l.holder FROM queen.maintenance_leases l
             JOIN queen.ephemeral_queues e ON l.task = 'ephemeral:' || e.ref
             JOIN queen.queues q ON q.id = e.queue_id
             WHERE q.name = $1 AND l.expires_at > clock_timestamp()",
            &[&queue],
        )
        .await
        .unwrap()
        .map(|r| r.get(0))
}

/// Two queenwires on one database: one owner, elected once; statements
/// through the other are forwarded to it and answered as the owner
/// answers them: PUSH through either, POP through either, a receipt
/// acknowledged or renewed through either; after the owner stops, the
/// other becomes the owner of an empty queue at its next statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_through_either_queenwire_reach_the_one_owner() {
    let a = Proxy::start("eph_two").await;
    let b = Proxy::start_on(a.direct.clone(), |_| {}).await;
    let direct = a.connect_direct().await;
    let ca = a.connect().await;
    ca.batch_execute("CREATE QUEUE shared WITH (class = ephemeral)")
        .await
        .unwrap();
    // Let b learn the class (names are re-read every second).
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Both race to push first, many times: one owner is elected, and every
    // PUSH, through either, is accepted with its offset.
    let mut racers = Vec::new();
    for proxy in [&a, &b] {
        for n in 0..3 {
            let cfg = proxy.client_config();
            let addr = proxy.addr.to_string();
            racers.push(tokio::spawn(async move {
                let client = connect(&cfg).await;
                let mut accepted = Vec::new();
                for i in 0..20 {
                    let txn = format!("{addr}-{n}-{i}");
                    let got = rows(
                        &client,
                        &format!(
                            "PUSH INTO shared (payload, transaction_id) VALUES ('{{}}', '{txn}')"
                        ),
                    )
                    .await;
                    assert!(!col(&got[0], "offset").is_empty(), "{got:?}");
                    accepted.push(txn);
                }
                accepted
            }));
        }
    }
    let mut sent = HashSet::new();
    for r in racers {
        sent.extend(r.await.unwrap());
    }
    assert_eq!(sent.len(), 120);
    let holder = holder_of(&direct, "shared").await.expect("an owner");
    let (owner, other) = if holder.contains(&a.addr.to_string()) {
        (&a, &b)
    } else {
        (&b, &a)
    };
    // Both say where the messages are and how many (the other asks the
    // owner).
    for proxy in [owner, other] {
        let shown = rows(&proxy.connect().await, "SHOW QUEUES").await;
        let row = shown.iter().find(|r| col(r, "queue") == "shared").unwrap();
        assert!(col(row, "storage").contains(&holder), "{row:?}");
        assert_eq!(col(row, "messages"), "120", "{row:?}");
        assert_eq!(col(row, "pending"), "120", "{row:?}");
    }
    let co = owner.connect().await;
    let cx = other.connect().await;
    // POP through the one that does not own the queue, in both protocols:
    // every message once, with its receipt; a forwarded receipt renews and
    // acknowledges through either process.
    let got = cx
        .query("POP FROM shared LIMIT $1", &[&100i32])
        .await
        .unwrap();
    let mut delivered: Vec<String> = got.iter().map(|r| r.get("transaction_id")).collect();
    let receipts: Vec<String> = got.iter().map(|r| r.get("receipt")).collect();
    assert_eq!(receipts.len(), 100);
    // The partition is leased to that POP.
    assert!(rows(&cx, "POP FROM shared").await.is_empty(), "leased");
    let renewed = rows(&co, &format!("RENEW '{}' FOR '1m'", receipts[0])).await;
    assert!(!col(&renewed[0], "lease_expires_at").is_empty());
    let renewed = rows(&cx, &format!("RENEW '{}'", receipts[1])).await;
    assert!(!col(&renewed[0], "lease_expires_at").is_empty());
    let (half, rest) = receipts.split_at(50);
    assert!(ack(&co, half).await.iter().all(|s| s == "acked"));
    assert!(ack(&cx, rest).await.iter().all(|s| s == "acked"));
    assert_eq!(ack(&cx, &receipts[..1]).await, ["stale"]);
    let got = rows(&cx, "POP FROM shared LIMIT 100").await;
    delivered.extend(got.iter().map(|r| col(r, "transaction_id")));
    let receipts: Vec<String> = got.iter().map(|r| col(r, "receipt")).collect();
    assert!(ack(&co, &receipts).await.iter().all(|s| s == "acked"));
    assert_eq!(delivered.len(), 120, "each message once");
    assert_eq!(delivered.into_iter().collect::<HashSet<_>>(), sent);
    assert!(rows(&cx, "POP FROM shared").await.is_empty());
    // And the other way round: pushed through the non-owner, popped and
    // acknowledged through the owner.
    rows(&cx, "PUSH INTO shared VALUES ('\"via other\"')").await;
    let got = rows(&co, "POP FROM shared").await;
    assert_eq!(col(&got[0], "payload"), "\"via other\"");
    assert_eq!(ack(&cx, &[col(&got[0], "receipt")]).await, ["acked"]);
    // Errors come back as the owner raises them.
    rows(&co, "PUSH INTO shared VALUES ('\"lost\"')").await;
    assert_eq!(
        holder_of(&direct, "shared").await.as_deref(),
        Some(&*holder)
    );

    // The owner stops: its lease runs out and the other takes over at its
    // next statement (which waits for that), with an empty queue.
    drop(co);
    drop(cx);
    let (stopped, survivor) = if holder.contains(&a.addr.to_string()) {
        (a, b)
    } else {
        (b, a)
    };
    tokio::time::timeout(Duration::from_secs(60), stopped.server.shutdown())
        .await
        .expect("the owner stops");
    // A stopped owner hands its queues over: its lease has ended and its
    // internal address is gone.
    assert_eq!(holder_of(&direct, "shared").await, None);
    let published: i64 = direct
        .query_one(
            "SELECT count(*) FROM queen.ephemeral_peers WHERE holder = $1",
            &[&holder],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(published, 0);
    let cs = survivor.connect().await;
    let began = Instant::now();
    loop {
        match cs.simple_query("PUSH INTO shared VALUES ('\"new\"')").await {
            Ok(_) => break,
            Err(e) => {
                let db = e.as_db_error().unwrap();
                assert_eq!(db.code().code(), "55000", "{}", db.message());
                assert!(began.elapsed() < Duration::from_secs(30), "no new owner");
            }
        }
    }
    let payloads: Vec<String> = rows(&cs, "POP FROM shared LIMIT 100 AUTO ACK")
        .await
        .iter()
        .map(|r| col(r, "payload"))
        .collect();
    assert_eq!(payloads, ["\"new\""]);
    assert!(holder_of(&direct, "shared")
        .await
        .unwrap()
        .contains(&survivor.addr.to_string()));
}

/// A queenwire binary on `direct`'s database, killed with the test.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `kill -9` of the owner: the other queenwire's next statement waits
/// for the dead owner's lease to run out, elects a new owner (itself) and
/// works, on an empty queue (the messages were only in the killed process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_9_of_the_owner_the_next_statement_elects_a_new_one() {
    let b = Proxy::start("eph_kill").await;
    let direct = b.connect_direct().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = match b.direct.get_hosts().first() {
        Some(tokio_postgres::config::Host::Unix(dir)) => dir.display().to_string(),
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        None => panic!("no host"),
    };
    let backend = format!(
        "host={host} port={} user={} dbname={}",
        b.direct.get_ports().first().copied().unwrap_or(5432),
        b.direct.get_user().unwrap(),
        b.direct.get_dbname().unwrap()
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("queenwire.log");
    let mut child = Child(
        std::process::Command::new(env!("CARGO_BIN_EXE_queenwire"))
            .args([
                "--backend",
                &backend,
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .args(["--pool-size", "4"])
            .env_remove("DATABASE_URL")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1").port(port).user("tester").dbname("x");
    let began = Instant::now();
    let ca = loop {
        if let Ok((client, conn)) = cfg.connect(tokio_postgres::NoTls).await {
            tokio::spawn(conn);
            break client;
        }
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "exited: {}",
            logged()
        );
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "never served: {}",
            logged()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    ca.batch_execute("CREATE QUEUE k WITH (class = ephemeral)")
        .await
        .unwrap();
    rows(&ca, "POP FROM k GROUP warmup").await;
    let holder = holder_of(&direct, "k").await.unwrap();
    assert!(holder.contains(&format!(":{port} ")), "{holder}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let cb = b.connect().await;
    rows(&cb, "PUSH INTO k VALUES ('\"forwarded\"')").await;
    let got = rows(&ca, "POP FROM k AUTO ACK").await;
    assert_eq!(col(&got[0], "payload"), "\"forwarded\"");
    rows(&cb, "PUSH INTO k VALUES ('\"lost with it\"')").await;

    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();
    let began = Instant::now();
    loop {
        match cb.simple_query("PUSH INTO k VALUES ('\"after\"')").await {
            Ok(_) => break,
            Err(e) => {
                let db = e.as_db_error().expect("a server error");
                assert_eq!(db.code().code(), "55000", "{}", db.message());
                assert!(began.elapsed() < Duration::from_secs(60), "no new owner");
            }
        }
    }
    let took = began.elapsed();
    eprintln!("the first PUSH after the kill returned after {took:?}");
    assert!(holder_of(&direct, "k")
        .await
        .unwrap()
        .contains(&b.addr.to_string()));
    let payloads: Vec<String> = rows(&cb, "POP FROM k LIMIT 10 AUTO ACK")
        .await
        .iter()
        .map(|r| col(r, "payload"))
        .collect();
    assert_eq!(payloads, ["\"after\""], "took over after {took:?}");
}

/// Makes `proxy` the owner of `queue` (its first statement on a queue no
/// one owns elects it).
async fn own(proxy: &Proxy, queue: &str) {
    let c = proxy.connect().await;
    rows(&c, &format!("POP FROM {queue} GROUP warmup")).await;
    let holder = holder_of(&proxy.connect_direct().await, queue).await;
    assert!(holder.unwrap().contains(&proxy.addr.to_string()));
}

/// A PUSH inside a block through the non-owner takes effect at COMMIT, at
/// the owner: nothing before, nothing after ROLLBACK, everything as soon
/// as COMMIT (or a pipeline's Sync) has returned; the quota is checked by
/// the owner at the PUSH.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_in_a_block_through_the_non_owner_takes_effect_at_commit() {
    let a = Proxy::start("eph_fwd_txn").await;
    let b = Proxy::start_on(a.direct.clone(), |_| {}).await;
    let ca = a.connect().await;
    ca.batch_execute("CREATE QUEUE tx WITH (class = ephemeral); CREATE QUEUE one WITH (class = ephemeral, max_length = 1)")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    own(&a, "tx").await;
    own(&a, "one").await;
    let cb = b.connect().await;
    cb.batch_execute("BEGIN").await.unwrap();
    let pushed = rows(&cb, "PUSH INTO tx VALUES ('\"dropped\"')").await;
    assert_eq!(col(&pushed[0], "status"), "queued");
    assert!(
        rows(&ca, "POP FROM tx").await.is_empty(),
        "not before COMMIT"
    );
    cb.batch_execute("ROLLBACK").await.unwrap();
    cb.batch_execute("BEGIN").await.unwrap();
    rows(&cb, "PUSH INTO tx VALUES ('\"kept\"'), ('\"too\"')").await;
    assert!(
        rows(&ca, "POP FROM tx").await.is_empty(),
        "not before COMMIT"
    );
    cb.batch_execute("COMMIT").await.unwrap();
    // Once COMMIT returned through b, the owner has the messages.
    let got: Vec<String> = rows(&ca, "POP FROM tx LIMIT 10 AUTO ACK")
        .await
        .iter()
        .map(|r| col(r, "payload"))
        .collect();
    assert_eq!(got, ["\"kept\"", "\"too\""]);
    // A pipeline's implicit transaction: applied at its Sync.
    let push = cb
        .prepare_typed(
            "PUSH INTO tx VALUES ($1)",
            &[tokio_postgres::types::Type::TEXT],
        )
        .await
        .unwrap();
    assert_eq!(cb.query(&push, &[&"\"extended\""]).await.unwrap().len(), 1);
    let got = rows(&ca, "POP FROM tx AUTO ACK").await;
    assert_eq!(col(&got[0], "payload"), "\"extended\"");
    // A savepoint rolled back takes its PUSH with it.
    cb.batch_execute(
        "BEGIN; SAVEPOINT s; PUSH INTO tx VALUES ('\"undone\"'); ROLLBACK TO s;
         PUSH INTO tx VALUES ('\"saved\"'); COMMIT",
    )
    .await
    .unwrap();
    let got: Vec<String> = rows(&ca, "POP FROM tx LIMIT 10 AUTO ACK")
        .await
        .iter()
        .map(|r| col(r, "payload"))
        .collect();
    assert_eq!(got, ["\"saved\""]);
    // The owner's quota, checked at the PUSH: the block fails there.
    rows(&ca, "PUSH INTO one VALUES ('1')").await;
    cb.batch_execute("BEGIN").await.unwrap();
    assert_eq!(error(&cb, "PUSH INTO one VALUES ('2')").await.0, "54000");
    assert_eq!(error(&cb, "SELECT 1").await.0, "25P02");
    cb.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(rows(&ca, "POP FROM one LIMIT 10").await.len(), 1);
    assert!(rows(&ca, "POP FROM tx").await.is_empty());
}

/// Many blocks at once through the non-owner, some committed, some rolled
/// back, while consumers pop through the owner: every committed message is
/// delivered exactly once, no rolled-back one ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_blocks_through_the_non_owner_deliver_exactly_the_committed() {
    let a = Proxy::start_with("eph_fwd_blocks", |c| c.pool_size = 8).await;
    let b = Proxy::start_on(a.direct.clone(), |c| c.pool_size = 8).await;
    a.connect()
        .await
        .batch_execute("CREATE QUEUE blocks WITH (class = ephemeral, lease_time = '5m')")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    own(&a, "blocks").await;
    let mut writers = Vec::new();
    for w in 0..4 {
        let cfg = b.client_config();
        writers.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            let (mut committed, mut rolled_back) = (Vec::new(), Vec::new());
            for n in 0..25 {
                let txns: Vec<String> = (0..3).map(|i| format!("w{w}-{n}-{i}")).collect();
                let values: Vec<String> = txns
                    .iter()
                    .map(|t| format!("('{{}}', 'p{w}', '{t}')"))
                    .collect();
                let commit = (n + w) % 3 != 0;
                client
                    .batch_execute(&format!(
                        "BEGIN; PUSH INTO blocks (payload, partition, transaction_id) VALUES {}; {}",
                        values.join(", "),
                        if commit { "COMMIT" } else { "ROLLBACK" }
                    ))
                    .await
                    .unwrap();
                match commit {
                    true => committed.extend(txns),
                    false => rolled_back.extend(txns),
                }
            }
            (committed, rolled_back)
        }));
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..3 {
        let cfg = a.client_config();
        let done = done.clone();
        readers.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            let mut got = Vec::new();
            let mut empty_after_done = 0;
            while empty_after_done < 4 {
                let rows = rows(
                    &client,
                    "POP FROM blocks LIMIT 10 PARTITIONS 4 WAIT '200ms'",
                )
                .await;
                if rows.is_empty() && done.load(std::sync::atomic::Ordering::SeqCst) {
                    empty_after_done += 1;
                }
                let receipts: Vec<String> = rows.iter().map(|r| col(r, "receipt")).collect();
                if !receipts.is_empty() {
                    assert!(ack(&client, &receipts).await.iter().all(|s| s == "acked"));
                }
                got.extend(rows.iter().map(|r| col(r, "transaction_id")));
            }
            got
        }));
    }
    let (mut committed, mut rolled_back) = (HashSet::new(), HashSet::new());
    for w in writers {
        let (c, r) = w.await.unwrap();
        committed.extend(c);
        rolled_back.extend(r);
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut seen: HashMap<String, usize> = HashMap::new();
    for r in readers {
        for t in tokio::time::timeout(Duration::from_secs(120), r)
            .await
            .expect("readers finish")
            .unwrap()
        {
            *seen.entry(t).or_default() += 1;
        }
    }
    assert!(!rolled_back.is_empty() && !committed.is_empty());
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "twice: {twice:?}");
    let leaked: Vec<_> = seen.keys().filter(|t| rolled_back.contains(*t)).collect();
    assert!(leaked.is_empty(), "rolled back but delivered: {leaked:?}");
    let delivered: HashSet<String> = seen.into_keys().collect();
    assert_eq!(delivered, committed);
}

/// A POP … WAIT through the non-owner waits at the owner: woken by a PUSH
/// through either process, cancelled by its client (57014), and ended by
/// the non-owner's drain (no rows), neither taking a message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_pop_waits_at_the_owner_and_can_be_cancelled() {
    let a = Proxy::start("eph_fwd_wait").await;
    let b = Proxy::start_on(a.direct.clone(), |_| {}).await;
    a.connect()
        .await
        .batch_execute("CREATE QUEUE w WITH (class = ephemeral)")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    own(&a, "w").await;
    for pusher in [&a, &b] {
        let cfg = b.client_config();
        let waiter = tokio::spawn(async move {
            let client = connect(&cfg).await;
            let began = Instant::now();
            let got = rows(&client, "POP FROM w WAIT 60 AUTO ACK").await;
            (got.len(), began.elapsed())
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        rows(&pusher.connect().await, "PUSH INTO w VALUES ('1')").await;
        let (n, took) = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("the waiting POP returns")
            .unwrap();
        assert_eq!(n, 1);
        assert!(took < Duration::from_secs(30), "{took:?}");
    }
    let (client, connection) = b
        .client_config()
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let cancel = client.cancel_token();
    let waiting = tokio::spawn(async move { client.simple_query("POP FROM w WAIT 60").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    cancel.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the cancelled POP returns")
        .unwrap()
        .expect_err("cancelled");
    assert_eq!(err.as_db_error().unwrap().code().code(), "57014");
    // The cancelled wait took nothing.
    rows(&b.connect().await, "PUSH INTO w VALUES ('2')").await;
    let got = rows(&a.connect().await, "POP FROM w AUTO ACK").await;
    assert_eq!(col(&got[0], "payload"), "2");
    // b drains: its forwarded wait ends at once with no rows.
    let cfg = b.client_config();
    let waiter = tokio::spawn(async move {
        let client = connect(&cfg).await;
        let began = Instant::now();
        let got = client.simple_query("POP FROM w WAIT 60").await;
        let rows = got.map(|m| {
            m.iter()
                .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
                .count()
        });
        (rows, began.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = tokio::time::timeout(Duration::from_secs(30), b.server.shutdown())
        .await
        .expect("b drains");
    let (got, took) = waiter.await.unwrap();
    assert_eq!(got.unwrap(), 0, "{report:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    rows(&a.connect().await, "PUSH INTO w VALUES ('3')").await;
    let got = rows(&a.connect().await, "POP FROM w AUTO ACK").await;
    assert_eq!(
        col(&got[0], "payload"),
        "3",
        "the drained wait took nothing"
    );
}

/// One frame of the internal channel: a big-endian u32 length, the body.
async fn frame(stream: &mut tokio::net::TcpStream) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let len = stream.read_u32().await? as usize;
    let mut body = vec![0; len];
    stream.read_exact(&mut body).await?;
    Ok(body)
}

async fn send(stream: &mut tokio::net::TcpStream, body: &[u8]) {
    use tokio::io::AsyncWriteExt;
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    // The other end may have closed already: that is what is tested.
    let _ = stream.write_all(&out).await;
}

/// The caller's side of the handshake with `secret`; the owner's answer.
async fn handshake(address: &str, secret: &[u8]) -> (tokio::net::TcpStream, Option<Vec<u8>>) {
    let mut s = tokio::net::TcpStream::connect(address).await.unwrap();
    let hello = frame(&mut s).await.unwrap();
    assert_eq!((hello[0], hello.len()), (b'H', 34));
    let nonce_c = [7u8; 32];
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let mut msg = b"caller".to_vec();
    msg.extend_from_slice(&hello[2..]);
    msg.extend_from_slice(&nonce_c);
    let mut proof = vec![b'A'];
    proof.extend_from_slice(&nonce_c);
    proof.extend_from_slice(ring::hmac::sign(&key, &msg).as_ref());
    send(&mut s, &proof).await;
    let answer = frame(&mut s).await.ok();
    (s, answer)
}

/// A PUSH of one message, as a forwarding queenwire frames it.
fn push_frame(tenant: uuid::Uuid, ref_: i64) -> Vec<u8> {
    let mut f = vec![b'r'];
    f.extend_from_slice(&1u64.to_be_bytes());
    f.extend_from_slice(tenant.as_bytes());
    f.extend_from_slice(&ref_.to_be_bytes());
    f.push(b'P');
    f.extend_from_slice(&1u64.to_be_bytes());
    f.extend_from_slice(uuid::Uuid::now_v7().as_bytes());
    for text in ["Default", "\"forged\""] {
        f.extend_from_slice(&(text.len() as u64).to_be_bytes());
        f.extend_from_slice(text.as_bytes());
    }
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&0i64.to_be_bytes());
    f
}

/// The internal channel takes no statement from a caller that cannot
/// prove it knows the owner's secret (which no tenant role can read): a
/// wrong proof is refused and the connection closed, a request without the
/// handshake, or an oversized frame, closes it; the queue is unchanged.
/// With the right secret the same PUSH frame is served (the control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_internal_channel_refuses_a_caller_without_the_secret() {
    let a = Proxy::start("eph_channel").await;
    let c = a.connect().await;
    c.batch_execute("CREATE QUEUE guarded WITH (class = ephemeral)")
        .await
        .unwrap();
    own(&a, "guarded").await;
    let direct = a.connect_direct().await;
    let peer = direct
        .query_one(
            "SELECT p.address, p.secret, e.ref, q.tenant_id FROM queen.ephemeral_peers p,
                    queen.ephemeral_queues e JOIN queen.queues q ON q.id = e.queue_id
             WHERE p.holder LIKE '%' || $1 || '%' AND q.name = 'guarded'",
            &[&a.addr.to_string()],
        )
        .await
        .unwrap();
    let (address, secret, ref_, tenant): (String, Vec<u8>, i64, uuid::Uuid) =
        (peer.get(0), peer.get(1), peer.get(2), peer.get(3));
    assert_eq!(secret.len(), 32);
    // A wrong secret: refused, then closed, even if a request follows.
    let mut wrong = secret.clone();
    wrong[0] ^= 1;
    let (mut s, answer) = handshake(&address, &wrong).await;
    assert_eq!(answer.as_deref(), Some(&b"X"[..]));
    send(&mut s, &push_frame(tenant, ref_)).await;
    assert!(closed(&mut s).await, "closed after a wrong proof");
    // No handshake at all: a request instead of the proof.
    let mut s = tokio::net::TcpStream::connect(&address).await.unwrap();
    frame(&mut s).await.unwrap();
    send(&mut s, &push_frame(tenant, ref_)).await;
    assert!(closed(&mut s).await, "closed without a proof");
    // A huge frame before the handshake: closed without reading it.
    let mut s = tokio::net::TcpStream::connect(&address).await.unwrap();
    frame(&mut s).await.unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let _ = s.write_all(&u32::MAX.to_be_bytes()).await;
    }
    assert!(closed(&mut s).await, "closed at an oversized frame");
    assert!(
        rows(&c, "POP FROM guarded").await.is_empty(),
        "nothing changed"
    );
    // The control: the right secret is welcomed and its PUSH served.
    let (mut s, answer) = handshake(&address, &secret).await;
    assert_eq!(answer.map(|w| w[0]), Some(b'W'));
    send(&mut s, &push_frame(tenant, ref_)).await;
    let reply = frame(&mut s).await.unwrap();
    assert_eq!(reply[0], b'V', "{reply:?}");
    let got = rows(&c, "POP FROM guarded AUTO ACK").await;
    assert_eq!(col(&got[0], "payload"), "\"forged\"");
}

/// The other end closed the connection (without sending anything more).
async fn closed(s: &mut tokio::net::TcpStream) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(10), frame(s)).await,
        Ok(Err(_))
    )
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

/// Puts `holder` in the lease of `queue` for `ttl_ms` and publishes it at
/// `address` with `secret`, as a queenwire owning the queue would.
async fn fake_owner(direct: &Client, queue: &str, holder: &str, address: &str, ttl_ms: i64) {
    direct
        .batch_execute(&format!(
            "INSERT INTO queen.maintenance_leases (task, holder, expires_at)
             SELECT 'ephemeral:' || e.ref, '{holder}', clock_timestamp() + {ttl_ms} * INTERVAL '1 millisecond'
             FROM queen.ephemeral_queues e JOIN queen.queues q ON q.id = e.queue_id WHERE q.name = '{queue}'
             ON CONFLICT (task) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at;
             INSERT INTO queen.ephemeral_peers (holder, address, secret)
             VALUES ('{holder}', '{address}', '\\x{}')",
            "ab".repeat(32)
        ))
        .await
        .unwrap();
}

/// The retry rule of forwarding, against a fake owner: a request the owner
/// received but did not answer is `08007` and is not sent again; an owner
/// that cannot be reached is retried until its lease runs out, and the
/// statement then runs on the new owner (the queenwire it reached).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_08007_and_an_unreachable_owner_is_retried() {
    use tokio::io::AsyncWriteExt;
    let b = Proxy::start("eph_fwd_retry").await;
    let direct = b.connect_direct().await;
    let cb = b.connect().await;
    cb.batch_execute("CREATE QUEUE fq WITH (class = ephemeral)")
        .await
        .unwrap();
    // The fake owner: shakes hands, reads requests, never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = received.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut hello = vec![b'H', 1];
            hello.extend_from_slice(&[9u8; 32]);
            send(&mut s, &hello).await;
            let proof = frame(&mut s).await.unwrap();
            let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &[0xab; 32]);
            let mut msg = b"owner".to_vec();
            msg.extend_from_slice(&[9u8; 32]);
            msg.extend_from_slice(&proof[1..33]);
            let mut welcome = vec![b'W'];
            welcome.extend_from_slice(ring::hmac::sign(&key, &msg).as_ref());
            send(&mut s, &welcome).await;
            if frame(&mut s).await.is_ok() {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            let _ = s.shutdown().await;
        }
    });
    fake_owner(&direct, "fq", "fake owner", &address, 60_000).await;
    let (code, message) = error(&cb, "PUSH INTO fq VALUES ('\"unknown\"')").await;
    assert_eq!(code, "08007", "{message}");
    assert!(message.contains("fake owner"), "{message}");
    assert_eq!(
        received.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "sent once"
    );

    // An owner that closes every connection at once (no handshake: the
    // request is never sent), whose lease ends in 2 s.
    let broken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nowhere = broken.local_addr().unwrap().to_string();
    let tried = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = tried.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = broken.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(s);
        }
    });
    fake_owner(&direct, "fq", "gone owner", &nowhere, 2_000).await;
    rows(&cb, "PUSH INTO fq VALUES ('\"after\"')").await;
    assert!(
        tried.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "the owner was tried first"
    );
    assert!(holder_of(&direct, "fq")
        .await
        .unwrap()
        .contains(&b.addr.to_string()));
    let payloads: Vec<String> = rows(&cb, "POP FROM fq LIMIT 10 AUTO ACK")
        .await
        .iter()
        .map(|r| col(r, "payload"))
        .collect();
    assert_eq!(payloads, ["\"after\""]);
    assert_eq!(received.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// The lease moves to the other queenwire while both run: the old owner
/// drops the queue at its next renewal and answers "not the owner"; the
/// forwarding queenwire follows the lease (here: to itself), and the old
/// owner forwards to the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_lease_is_followed_by_both_queenwires() {
    let a = Proxy::start("eph_fwd_moved").await;
    let b = Proxy::start_on(a.direct.clone(), |_| {}).await;
    let direct = a.connect_direct().await;
    let (ca, cb) = (a.connect().await, b.connect().await);
    ca.batch_execute("CREATE QUEUE mv WITH (class = ephemeral)")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    own(&a, "mv").await;
    rows(&cb, "PUSH INTO mv VALUES ('\"at a\"')").await;
    assert_eq!(rows(&ca, "POP FROM mv GROUP check").await.len(), 1);
    let b_holder: String = direct
        .query_one(
            "SELECT holder FROM queen.ephemeral_peers WHERE holder LIKE '%' || $1 || '%'",
            &[&b.addr.to_string()],
        )
        .await
        .unwrap()
        .get(0);
    direct
        .execute(
            "UPDATE queen.maintenance_leases SET holder = $1, expires_at = clock_timestamp() + INTERVAL '1 minute'
             WHERE task LIKE 'ephemeral:%'",
            &[&b_holder],
        )
        .await
        .unwrap();
    // a's renewals cannot win while b's lease runs: a stops serving the
    // queue at the latest 3.5 s after its last successful renewal (its
    // next renewal, within a second, finds b and drops the store).
    tokio::time::sleep(Duration::from_millis(4000)).await;
    rows(&cb, "PUSH INTO mv VALUES ('\"at b\"')").await;
    let got: Vec<String> = rows(&ca, "POP FROM mv GROUP check LIMIT 10")
        .await
        .iter()
        .map(|r| col(r, "payload"))
        .collect();
    assert_eq!(got, ["\"at b\""], "a forwards to b, whose queue is new");
    assert_eq!(holder_of(&direct, "mv").await.as_deref(), Some(&*b_holder));
}

/// Producers and consumers of two groups on both queenwires at once, on
/// one ephemeral queue of four partitions, acknowledging through either
/// process: every message is delivered exactly once per group (none twice,
/// none lost; no lease expires, so a second delivery would be one while
/// the first was leased), each partition's messages in push order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_on_two_queenwires_get_each_message_once_per_group_in_order() {
    const PER_PRODUCER: usize = 120;
    let a = Proxy::start_with("eph_fwd_ledger", |c| c.pool_size = 8).await;
    let b = Proxy::start_on(a.direct.clone(), |c| c.pool_size = 8).await;
    a.connect()
        .await
        .batch_execute(
            "CREATE QUEUE busy WITH (class = ephemeral, max_length = 100000, lease_time = '5m')",
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Both groups are known before the first message: a group first seen
    // later starts at the oldest message still held (those every known
    // group acknowledged are gone).
    let cb = b.connect().await;
    for group in ["g1", "g2"] {
        rows(&cb, &format!("POP FROM busy GROUP {group}")).await;
    }
    let configs = [a.client_config(), b.client_config()];
    let mut producers = Vec::new();
    for p in 0..4 {
        let cfg = configs[p % 2].clone();
        producers.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            let mut sent = Vec::new();
            for batch in 0..PER_PRODUCER / 6 {
                let mut values = Vec::new();
                for i in 0..6 {
                    let n = batch * 6 + i;
                    let txn = format!("p{p}-{n:04}");
                    values.push(format!("('{{\"n\":{n}}}', 'part{}', '{txn}')", n % 4));
                    sent.push(txn);
                }
                rows(
                    &client,
                    &format!(
                        "PUSH INTO busy (payload, partition, transaction_id) VALUES {}",
                        values.join(", ")
                    ),
                )
                .await;
            }
            sent
        }));
    }
    let clock = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut consumers = Vec::new();
    for group in ["g1", "g2"] {
        for c in 0..4 {
            let (pop_cfg, ack_cfg) = (configs[c % 2].clone(), configs[(c / 2) % 2].clone());
            let clock = clock.clone();
            consumers.push(tokio::spawn(async move {
                let popper = connect(&pop_cfg).await;
                let acker = connect(&ack_cfg).await;
                // (group, partition, offset, transaction id, delivery order)
                let mut seen = Vec::new();
                let mut empty = 0;
                while empty < 6 {
                    let got = rows(
                        &popper,
                        &format!("POP FROM busy GROUP {group} LIMIT 4 PARTITIONS 2 WAIT '300ms'"),
                    )
                    .await;
                    if got.is_empty() {
                        empty += 1;
                        continue;
                    }
                    empty = 0;
                    for r in &got {
                        let at = clock.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let offset: i64 = col(r, "offset").parse().unwrap();
                        seen.push((
                            group.to_string(),
                            col(r, "partition"),
                            offset,
                            col(r, "transaction_id"),
                            at,
                        ));
                    }
                    let receipts: Vec<String> = got.iter().map(|r| col(r, "receipt")).collect();
                    let statuses = ack(&acker, &receipts).await;
                    assert!(statuses.iter().all(|s| s == "acked"), "{statuses:?}");
                }
                seen
            }));
        }
    }
    let mut sent = HashSet::new();
    for p in producers {
        sent.extend(p.await.unwrap());
    }
    let mut seen = Vec::new();
    for c in consumers {
        seen.extend(
            tokio::time::timeout(Duration::from_secs(180), c)
                .await
                .expect("consumers finish")
                .unwrap(),
        );
    }
    assert_eq!(sent.len(), 4 * PER_PRODUCER);
    for group in ["g1", "g2"] {
        let mine: Vec<_> = seen.iter().filter(|s| s.0 == group).collect();
        let mut count: HashMap<&str, usize> = HashMap::new();
        for s in &mine {
            *count.entry(s.3.as_str()).or_default() += 1;
        }
        let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "{group}: delivered twice: {twice:?}");
        let lost: Vec<_> = sent
            .iter()
            .filter(|t| !count.contains_key(t.as_str()))
            .collect();
        assert!(
            lost.is_empty(),
            "{group}: lost {} of {}",
            lost.len(),
            sent.len()
        );
        // Per partition, in delivery order: offsets rise, and so does each
        // producer's own sequence.
        for part in 0..4 {
            let mut of_part: Vec<_> = mine
                .iter()
                .filter(|s| s.1 == format!("part{part}"))
                .collect();
            of_part.sort_by_key(|s| s.4);
            for w in of_part.windows(2) {
                assert!(
                    w[0].2 < w[1].2,
                    "{group} part{part}: {:?} then {:?}",
                    w[0],
                    w[1]
                );
            }
            let mut last: HashMap<&str, &str> = HashMap::new();
            for s in &of_part {
                let (producer, n) = s.3.split_once('-').unwrap();
                if let Some(before) = last.insert(producer, n) {
                    assert!(before < n, "{group} part{part}: {before} then {n}");
                }
            }
        }
    }
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

/// A block that pushed to an ephemeral queue cannot be prepared for two-phase
/// commit (its messages wait in queenwire's memory for the block's commit,
/// which a later COMMIT PREPARED is not): 0A000 and the block rolled back,
/// as PostgreSQL refuses to prepare a block that ran NOTIFY, over the simple
/// and the extended protocol. The session goes on; a block that commits
/// still delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_with_ephemeral_pushes_cannot_be_prepared() {
    let proxy = Proxy::start("eph_prepare").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE e2pc WITH (class = ephemeral)")
        .await
        .unwrap();
    client
        .batch_execute("BEGIN; PUSH INTO e2pc VALUES ('\"simple\"')")
        .await
        .unwrap();
    let (code, message) = error(&client, "PREPARE TRANSACTION 'g1'").await;
    assert_eq!(code, "0A000", "{message}");
    client
        .batch_execute("BEGIN; PUSH INTO e2pc VALUES ('\"extended\"')")
        .await
        .unwrap();
    let err = client
        .execute("PREPARE TRANSACTION 'g2'", &[])
        .await
        .expect_err("prepared over the extended protocol");
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err}");
    // Both blocks rolled back: the session is outside a block again.
    let (code, _) = error(&client, "COMMIT PREPARED 'g1'").await;
    assert_eq!(code, "42704");
    assert!(rows(&client, "POP FROM e2pc AUTO ACK").await.is_empty());
    client
        .batch_execute("BEGIN; PUSH INTO e2pc VALUES ('\"committed\"'); COMMIT")
        .await
        .unwrap();
    let got = rows(&client, "POP FROM e2pc LIMIT 5 AUTO ACK").await;
    assert_eq!(got.len(), 1);
    assert_eq!(col(&got[0], "payload"), "\"committed\"");
}
