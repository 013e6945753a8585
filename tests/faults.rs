//! Honest outcomes under faults: a statement whose request reached
//! PostgreSQL and whose reply was lost gets 08007 (its outcome is unknown),
//! one that was never sent gets 08006, and the retries the dialect page
//! calls safe tell the truth afterwards (PUSH with a transaction id:
//! `duplicate` when the first one committed; ACK: `acked` again).
//!
//! The connection is broken by `common::cut`, a relay between queenwire
//! and PostgreSQL: a statement is held in flight by a row lock taken on a
//! direct connection, the relay is cut, then the lock is released.

mod common;

use common::cut::Cutter;
use common::proxy::{connect, Proxy};
use common::sql::rows;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn code(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.code().code().to_string())
        .unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

struct Setup {
    cutter: Cutter,
    proxy: Proxy,
    /// Straight to the proxy's database, not through the relay.
    direct: Client,
    database: String,
    /// The proxy's database, for more direct connections.
    db: tokio_postgres::Config,
}

async fn setup(prefix: &str) -> Setup {
    let db = common::cluster::fresh_database(prefix);
    let cutter = Cutter::start().await;
    let proxy = Proxy::start_on(cutter.config(&db), |_| {}).await;
    let direct = connect(&db).await;
    Setup {
        cutter,
        proxy,
        direct,
        database: db.get_dbname().unwrap().to_string(),
        db,
    }
}

impl Setup {
    /// Holds `lock_sql`'s rows on the direct connection until `release`.
    async fn hold(&self, lock_sql: &str) {
        self.direct.batch_execute("BEGIN").await.unwrap();
        self.direct.batch_execute(lock_sql).await.unwrap();
    }

    async fn release(&self) {
        self.direct.batch_execute("ROLLBACK").await.unwrap();
    }

    /// Waits until a backend of the proxy waits for a lock.
    async fn until_blocked(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let n: i64 = self
                .direct
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE datname = $1 AND wait_event_type = 'Lock'",
                    &[&self.database],
                )
                .await
                .unwrap()
                .get(0);
            if n > 0 {
                return;
            }
            assert!(Instant::now() < deadline, "no statement became blocked");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends `sql[i]` on `clients[i]`, the first until it waits on the held
    /// lock, cuts the relay, and checks that the first (the lead of the
    /// fused write) gets 08007 and that the others, queued behind it, are
    /// written by the next write once the lock is released: they neither
    /// hang nor fail.
    async fn cut_the_lead(&self, clients: &[Arc<Client>], sql: &[String]) {
        let mut waits = Vec::new();
        for (i, (c, sql)) in clients.iter().zip(sql).enumerate() {
            let (c, sql) = (c.clone(), sql.clone());
            waits.push(tokio::spawn(async move {
                c.simple_query(&sql).await.map(|_| ())
            }));
            if i == 0 {
                self.until_blocked().await;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.cutter.cut();
        let mut waits = waits.into_iter();
        let lead = waits.next().unwrap().await.unwrap();
        assert_eq!(code(&lead.expect_err("the lead's reply was lost")), "08007");
        self.release().await;
        for w in waits {
            let done = tokio::time::timeout(Duration::from_secs(20), w).await;
            let result = done
                .expect("a statement queued behind the cut write hung")
                .unwrap();
            assert!(result.is_ok(), "{result:?}");
        }
    }

    /// Transaction ids stored in `queue`, one entry per stored message.
    async fn stored_transaction_ids(&self, queue: &str) -> Vec<String> {
        let client = self.proxy.connect().await;
        let mut ids: Vec<String> = rows(
            &client,
            &format!("POP FROM {queue} GROUP audit LIMIT 1000 PARTITIONS 100 AUTO ACK"),
        )
        .await
        .iter()
        .filter_map(|r| r.get("transaction_id").cloned().flatten())
        .collect();
        ids.sort();
        ids
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_in_a_block_whose_reply_is_lost_gets_08007_then_the_session_ends() {
    let s = setup("faults_block").await;
    let client = s.proxy.connect().await;
    rows(
        &client,
        "PUSH INTO jobs (payload, transaction_id) VALUES ('1', 't1')",
    )
    .await;
    s.hold("SELECT 1 FROM queen.log_partitions FOR UPDATE")
        .await;
    client.batch_execute("BEGIN").await.unwrap();
    let push = tokio::spawn(async move {
        let r = client
            .simple_query("PUSH INTO jobs (payload, transaction_id) VALUES ('2', 't2')")
            .await;
        (r.map(|_| ()), client)
    });
    s.until_blocked().await;
    s.cutter.cut();
    let (result, client) = push.await.unwrap();
    let e = result.expect_err("the PUSH's reply was lost");
    assert_eq!(code(&e), "08007", "{e:?}");
    assert!(
        e.as_db_error().unwrap().message().contains("outcome"),
        "{e:?}"
    );
    assert!(client.is_closed() || client.simple_query("SELECT 1").await.is_err());
    s.release().await;
    // The block never committed; its retry is stored once.
    let again = s.proxy.connect().await;
    let retried = rows(
        &again,
        "PUSH INTO jobs (payload, transaction_id) VALUES ('2', 't2')",
    )
    .await;
    assert_eq!(
        retried[0].get("status").cloned().flatten().unwrap(),
        "queued"
    );
    assert_eq!(s.stored_transaction_ids("jobs").await, ["t1", "t2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fused_push_whose_reply_is_lost_gets_08007_and_its_retry_is_a_duplicate() {
    let s = setup("faults_fused").await;
    let client = s.proxy.connect().await;
    rows(
        &client,
        "PUSH INTO jobs (payload, transaction_id) VALUES ('1', 't1')",
    )
    .await;
    s.hold("SELECT 1 FROM queen.log_partitions FOR UPDATE")
        .await;
    let pusher = s.proxy.connect().await;
    let push = tokio::spawn(async move {
        let r = pusher
            .simple_query("PUSH INTO jobs (payload, transaction_id) VALUES ('2', 't2')")
            .await;
        (r.map(|_| ()), pusher)
    });
    s.until_blocked().await;
    s.cutter.cut();
    let (result, pusher) = push.await.unwrap();
    let e = result.expect_err("the writer's reply was lost");
    assert_eq!(code(&e), "08007", "{e:?}");
    // The writer's connection broke, not the session's: it goes on. The cut
    // also broke the pool's idle connections; a checkout sees one dead once
    // its end of the relay has closed (the relay's tasks are aborted, not
    // yet gone, when `cut` returns), as in
    // `pooled_connections_a_restart_broke_are_not_handed_out`. Without the
    // wait the SELECT could be sent on one of them and be lost (08007).
    tokio::time::sleep(Duration::from_millis(200)).await;
    rows(&pusher, "SELECT 1").await;
    // The request was on its way: once the lock goes, PostgreSQL runs and
    // commits it, and the retry finds it.
    s.release().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let committed: i64 = s
            .direct
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'",
                &[&s.database],
            )
            .await
            .unwrap()
            .get(0);
        if committed == 0 {
            break;
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let retried = rows(
        &pusher,
        "PUSH INTO jobs (payload, transaction_id) VALUES ('2', 't2')",
    )
    .await;
    let status = retried[0].get("status").cloned().flatten().unwrap();
    assert!(status == "duplicate" || status == "queued", "{status}");
    assert_eq!(s.stored_transaction_ids("jobs").await, ["t1", "t2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_whose_reply_is_lost_gets_08007_and_its_retry_answers_acked() {
    let s = setup("faults_ack").await;
    let client = s.proxy.connect().await;
    rows(&client, "PUSH INTO jobs VALUES ('1'), ('2')").await;
    let popped = rows(&client, "POP FROM jobs LIMIT 2").await;
    let receipts: Vec<String> = popped
        .iter()
        .map(|r| r.get("receipt").cloned().flatten().unwrap())
        .collect();
    s.hold("SELECT 1 FROM queen.log_consumers FOR UPDATE").await;
    let ack_sql = format!("ACK {}, {}", quote(&receipts[0]), quote(&receipts[1]));
    let sql = ack_sql.clone();
    let ack = tokio::spawn(async move { client.simple_query(&sql).await.map(|_| ()) });
    s.until_blocked().await;
    s.cutter.cut();
    let e = ack.await.unwrap().expect_err("the ACK's reply was lost");
    assert_eq!(code(&e), "08007", "{e:?}");
    s.release().await;
    let again = s.proxy.connect().await;
    let statuses: Vec<String> = rows(&again, &ack_sql)
        .await
        .iter()
        .map(|r| r.get("status").cloned().flatten().unwrap())
        .collect();
    assert_eq!(statuses, ["acked", "acked"]);
    assert!(rows(&again, "POP FROM jobs").await.is_empty());
}

/// One message pushed into each of partitions a, b and c of `jobs`, each
/// popped by a session of its own: the sessions, and per session the
/// partition it holds and the ACK of its receipt.
async fn three_sessions_holding_a_message_each(s: &Setup) -> (Vec<Client>, Vec<(String, String)>) {
    let setup_client = s.proxy.connect().await;
    for p in ["a", "b", "c"] {
        rows(
            &setup_client,
            &format!("PUSH INTO jobs PARTITION {p} VALUES ('\"{p}\"')"),
        )
        .await;
    }
    let mut clients = Vec::new();
    let mut acks = Vec::new();
    for _ in 0..3 {
        let c = s.proxy.connect().await;
        let popped = rows(&c, "POP FROM jobs").await;
        let r = popped[0].get("receipt").cloned().flatten().unwrap();
        let p = popped[0].get("partition").cloned().flatten().unwrap();
        acks.push((p, format!("ACK {}", quote(&r))));
        clients.push(c);
    }
    (clients, acks)
}

/// Locks the consumer row of partition `p` (run inside a block).
fn consumer_row(p: &str) -> String {
    format!(
        "SELECT 1 FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
         WHERE p.name = '{p}' FOR UPDATE OF c"
    )
}

/// ACKs of different sessions fused into one write share its outcome: when
/// its reply is lost, each gets 08007, and each retry answers `acked`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fused_acks_whose_reply_is_lost_all_get_08007_and_their_retries_answer_acked() {
    let s = setup("faults_fused_ack").await;
    let (clients, acks) = three_sessions_holding_a_message_each(&s).await;
    // The first ACK's consumer row held here, the others' on a second
    // connection: the first leads a write and blocks in it, the others
    // queue behind it, and once it is let go they are written together
    // and block in their turn.
    let others = connect(&s.db).await;
    others.batch_execute("BEGIN").await.unwrap();
    for (p, _) in &acks[1..] {
        others.batch_execute(&consumer_row(p)).await.unwrap();
    }
    s.hold(&consumer_row(&acks[0].0)).await;
    let mut waits = Vec::new();
    for (i, (c, (_, sql))) in clients.into_iter().zip(acks.clone()).enumerate() {
        waits.push(tokio::spawn(async move {
            c.simple_query(&sql).await.map(|_| ())
        }));
        if i == 0 {
            s.until_blocked().await;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.release().await;
    let mut waits = waits.into_iter();
    let lead = waits.next().unwrap().await.unwrap();
    assert!(lead.is_ok(), "the first write committed: {lead:?}");
    // The next write (the other two ACKs) blocks on the second connection's
    // rows (it may be on the first write's connection again).
    s.until_blocked().await;
    s.cutter.cut();
    for w in waits {
        let e = w.await.unwrap().expect_err("the ACK's reply was lost");
        assert_eq!(code(&e), "08007", "{e:?}");
    }
    others.batch_execute("ROLLBACK").await.unwrap();
    let again = s.proxy.connect().await;
    for (_, sql) in &acks {
        let status = rows(&again, sql).await[0].get("status").cloned().flatten();
        assert_eq!(status.as_deref(), Some("acked"), "{sql}");
    }
    assert!(rows(&again, "POP FROM jobs").await.is_empty());
}

/// A session's ACK after its fused POP is written with the next POPs of
/// that lane, in one transaction (`fusion/pop.rs`), and shares its outcome:
/// when the write's reply is lost the ACK gets 08007 and its retry answers
/// `acked`; the POP fails, its session goes on, and its message is still
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_written_with_pops_whose_reply_is_lost_gets_08007() {
    let s = setup("faults_ack_pop").await;
    let (mut clients, acks) = three_sessions_holding_a_message_each(&s).await;
    let popper = Arc::new(s.proxy.connect().await);
    rows(&popper, "PUSH INTO jobs PARTITION d VALUES ('\"d\"')").await;
    // A's ACK leads a write of the lane and waits for A's row, held here;
    // B's ACK and the POP queue behind it, then wait for B's row, held on
    // a second connection, in the next write.
    let others = connect(&s.db).await;
    others.batch_execute("BEGIN").await.unwrap();
    others
        .batch_execute(&consumer_row(&acks[1].0))
        .await
        .unwrap();
    s.hold(&consumer_row(&acks[0].0)).await;
    let b = clients.remove(1);
    let a = clients.remove(0);
    let sql_a = acks[0].1.clone();
    let ack_a = tokio::spawn(async move { a.simple_query(&sql_a).await.map(|_| ()) });
    s.until_blocked().await;
    let sql_b = acks[1].1.clone();
    let ack_b = tokio::spawn(async move { b.simple_query(&sql_b).await.map(|_| ()) });
    let c = popper.clone();
    let pop = tokio::spawn(async move { c.simple_query("POP FROM jobs").await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.release().await;
    assert!(ack_a.await.unwrap().is_ok(), "the first write committed");
    s.until_blocked().await;
    s.cutter.cut();
    let e = ack_b.await.unwrap().expect_err("the ACK's reply was lost");
    assert_eq!(code(&e), "08007", "{e:?}");
    let e = pop.await.unwrap().expect_err("the POP's write was lost");
    assert!(["08006", "08007"].contains(&code(&e).as_str()), "{e:?}");
    others.batch_execute("ROLLBACK").await.unwrap();
    // The ACK's retry finds it committed or commits it; the POP's session
    // goes on, and the message it did not get is still there.
    let again = s.proxy.connect().await;
    let status = rows(&again, &acks[1].1).await[0]
        .get("status")
        .cloned()
        .flatten();
    assert_eq!(status.as_deref(), Some("acked"));
    // The first write also claimed d for A's next POP (held claims,
    // src/engine/fusion/hold.rs); A never pops, so the claim is given
    // back within moments: the WAIT covers that, not the lease's 60 s.
    let next = rows(&popper, "POP FROM jobs PARTITION d WAIT '10s'").await;
    assert_eq!(next.len(), 1, "{next:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_on_a_connection_that_broke_before_it_was_sent_gets_08006() {
    let s = setup("faults_unsent").await;
    // The BEGIN is answered at once and sent with the next statement, or
    // alone a moment later: the connection breaks before it was sent, or
    // after PostgreSQL began the block. Either way nothing of the next
    // statement reached PostgreSQL.
    for begin_sent in [false, true] {
        for statement in ["PUSH INTO jobs VALUES ('1')", "SELECT 1"] {
            let client = s.proxy.connect().await;
            client.batch_execute("BEGIN").await.unwrap();
            if begin_sent {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            s.cutter.cut();
            tokio::time::sleep(Duration::from_millis(200)).await;
            let e = client
                .simple_query(statement)
                .await
                .expect_err("the connection is gone");
            assert_eq!(
                code(&e),
                "08006",
                "{statement} (BEGIN sent: {begin_sent}): {e:?}"
            );
        }
    }
    // A new session is served on a new connection.
    let again = s.proxy.connect().await;
    rows(&again, "SELECT 1").await;
}

#[tokio::test]
async fn pooled_connections_a_restart_broke_are_not_handed_out() {
    let s = setup("faults_pool").await;
    let client = s.proxy.connect().await;
    rows(&client, "PUSH INTO jobs VALUES ('1')").await;
    s.cutter.cut();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The pool's idle connections are dead; the next statements get fresh ones.
    for _ in 0..4 {
        rows(&client, "SELECT 1").await;
        rows(&client, "PUSH INTO jobs VALUES ('2')").await;
    }
}

fn statuses(rs: &[common::sql::Row]) -> Vec<String> {
    rs.iter()
        .map(|r| r.get("status").cloned().flatten().unwrap())
        .collect()
}

fn receipt(r: &common::sql::Row) -> String {
    r.get("receipt").cloned().flatten().unwrap()
}

#[tokio::test]
async fn a_repeated_ack_answers_acked_for_its_own_lease_only() {
    let proxy = Proxy::start("ack_twice").await;
    let c = proxy.connect().await;
    rows(&c, "PUSH INTO jobs VALUES ('0'), ('1'), ('2')").await;
    let batch = rows(&c, "POP FROM jobs LIMIT 2").await;
    let (r0, r1) = (receipt(&batch[0]), receipt(&batch[1]));
    let ack = |list: Vec<&String>| {
        let list: Vec<String> = list.into_iter().map(|r| quote(r)).collect();
        format!("ACK {}", list.join(", "))
    };
    assert_eq!(statuses(&rows(&c, &ack(vec![&r0])).await), ["acked"]);
    // Live lease: again acked.
    assert_eq!(statuses(&rows(&c, &ack(vec![&r0])).await), ["acked"]);
    // The whole batch: the lease is released.
    assert_eq!(statuses(&rows(&c, &ack(vec![&r1])).await), ["acked"]);
    // Released lease: still acked, and nothing moves.
    assert_eq!(
        statuses(&rows(&c, &ack(vec![&r0, &r1])).await),
        ["acked", "acked"]
    );
    let next = rows(&c, "POP FROM jobs LEASE 1").await;
    assert_eq!(next[0].get("offset").cloned().flatten().unwrap(), "2");

    // A lease lost before its ACK stays stale, also after another lease
    // acknowledged the same message.
    let lost = receipt(&next[0]);
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let redelivered = rows(&c, "POP FROM jobs").await;
    assert_eq!(
        redelivered[0]
            .get("retry_count")
            .cloned()
            .flatten()
            .unwrap(),
        "1"
    );
    let taken_over = receipt(&redelivered[0]);
    assert_eq!(
        statuses(&rows(&c, &ack(vec![&taken_over])).await),
        ["acked"]
    );
    assert_eq!(statuses(&rows(&c, &ack(vec![&lost])).await), ["stale"]);
    assert_eq!(
        statuses(&rows(&c, &ack(vec![&taken_over])).await),
        ["acked"]
    );

    // A lease that expired after acknowledging part of its batch: its
    // acknowledged message answers acked, the other stale and comes again.
    rows(&c, "PUSH INTO jobs VALUES ('3'), ('4')").await;
    let part = rows(&c, "POP FROM jobs LIMIT 2 LEASE 1").await;
    let (r3, r4) = (receipt(&part[0]), receipt(&part[1]));
    assert_eq!(statuses(&rows(&c, &ack(vec![&r3])).await), ["acked"]);
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert_eq!(
        statuses(&rows(&c, &ack(vec![&r3, &r4])).await),
        ["acked", "stale"]
    );
    let again = rows(&c, "POP FROM jobs LIMIT 2").await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].get("offset").cloned().flatten().unwrap(), "4");
    assert_eq!(
        statuses(&rows(&c, &ack(vec![&receipt(&again[0])])).await),
        ["acked"]
    );
    // FAILED is not repeated as a success: a failed message comes again.
    assert_eq!(
        statuses(&rows(&c, &format!("ACK {} FAILED", quote(&r0))).await),
        ["stale"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_sql_whose_reply_is_lost_gets_08007() {
    let s = setup("faults_plain").await;
    s.direct
        .batch_execute("CREATE TABLE counter (n int); INSERT INTO counter VALUES (0); GRANT ALL ON counter TO PUBLIC")
        .await
        .unwrap();
    s.hold("SELECT 1 FROM counter FOR UPDATE").await;
    let client = s.proxy.connect().await;
    let update =
        tokio::spawn(async move { client.simple_query("UPDATE counter SET n = n + 1").await });
    s.until_blocked().await;
    s.cutter.cut();
    let e = update
        .await
        .unwrap()
        .expect_err("the UPDATE's reply was lost");
    assert_eq!(code(&e), "08007", "{e:?}");
    s.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_reply_is_lost_gets_08007_and_its_retry_finds_it_committed() {
    let s = setup("faults_commit").await;
    // A deferred unique check makes the COMMIT wait for a direct session
    // that inserted the same key first.
    s.direct
        .batch_execute(
            "CREATE TABLE claims (k int UNIQUE DEFERRABLE INITIALLY DEFERRED);
             GRANT ALL ON claims TO PUBLIC",
        )
        .await
        .unwrap();
    s.hold("INSERT INTO claims VALUES (1)").await;
    let client = s.proxy.connect().await;
    client.batch_execute("BEGIN").await.unwrap();
    rows(
        &client,
        "PUSH INTO jobs (payload, transaction_id) VALUES ('1', 't1')",
    )
    .await;
    client
        .batch_execute("INSERT INTO claims VALUES (1)")
        .await
        .unwrap();
    let commit = tokio::spawn(async move { client.simple_query("COMMIT").await });
    s.until_blocked().await;
    s.cutter.cut();
    let e = commit
        .await
        .unwrap()
        .expect_err("the COMMIT's reply was lost");
    assert_eq!(code(&e), "08007", "{e:?}");
    // PostgreSQL had the COMMIT: once the direct session gives way, it
    // commits, and the retry of the PUSH says so.
    s.release().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = s
            .direct
            .query_one("SELECT count(*) FROM claims", &[])
            .await
            .unwrap()
            .get(0);
        if n == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the COMMIT did not complete");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let retried = rows(
        &s.proxy.connect().await,
        "PUSH INTO jobs (payload, transaction_id) VALUES ('1', 't1')",
    )
    .await;
    assert_eq!(
        retried[0].get("status").cloned().flatten().unwrap(),
        "duplicate"
    );
    assert_eq!(s.stored_transaction_ids("jobs").await, ["t1"]);
}

/// ACKs waiting behind a fused write whose connection was cut are written
/// by the next write, on a sound connection: they neither hang nor fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_queued_behind_a_cut_write_are_written_next() {
    let s = setup("faults_ack_after_cut").await;
    let (clients, acks) = three_sessions_holding_a_message_each(&s).await;
    let acks: Vec<String> = acks.into_iter().map(|(_, sql)| sql).collect();
    s.hold("SELECT 1 FROM queen.log_consumers FOR UPDATE").await;
    let clients: Vec<Arc<Client>> = clients.into_iter().map(Arc::new).collect();
    s.cut_the_lead(&clients, &acks).await;
}

/// A fused POP whose reply is lost gets 08007 and its session goes on (the
/// connection was the fuser's, not the session's); POPs queued behind the
/// cut call are claimed by the next one. A POP waits on a lock in one case
/// here: the first sight of a partition by its group inserts the group's
/// cursor row, and waits for another transaction inserting the same row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fused_pop_whose_reply_is_lost_gets_08007_and_the_session_goes_on() {
    let s = setup("faults_fused_pop").await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(Arc::new(s.proxy.connect().await));
    }
    rows(&clients[0], "PUSH INTO fresh VALUES ('1')").await;
    s.hold(
        "INSERT INTO queen.log_consumers (partition_id, consumer_group, cursor_offset)
         SELECT p.id, '__QUEUE_MODE__', -1 FROM queen.log_partitions p
         JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'fresh'",
    )
    .await;
    s.cut_the_lead(&clients, &vec!["POP FROM fresh".to_string(); 3])
        .await;
    // Every session, the lead's too, still works, fused POPs included.
    for c in &clients {
        rows(c, "PUSH INTO after VALUES ('1')").await;
        assert_eq!(rows(c, "POP FROM after AUTO ACK").await.len(), 1);
    }
}
