//! Shared consumer groups end to end: each message leased on its own, so
//! several consumers work one partition at once and a failing message holds
//! back only itself. The ledgers run the real binary (killed with SIGKILL
//! mid-run, and two processes on one database) and check, from what every
//! consumer saw: every message acknowledged exactly once or dead-lettered
//! per its failures, none lost, no message held by two consumers at once,
//! and the retry counts.

mod common;

use common::binary::Queenwire;
use common::proxy::{connect, Proxy};
use common::sql::rows;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio_postgres::{Client, SimpleQueryMessage};

type Row = HashMap<String, Option<String>>;

fn col(row: &Row, name: &str) -> String {
    row.get(name).cloned().flatten().unwrap_or_default()
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

async fn sql_error(client: &Client, sql: &str) -> String {
    let err = client.simple_query(sql).await.expect_err(sql);
    err.as_db_error()
        .map(|e| e.code().code().to_string())
        .unwrap_or_else(|| panic!("{sql}: {err}"))
}

/// ACK of one POP row's receipt (`suffix`: `""`, `" FAILED"`, …): its status.
async fn ack(client: &Client, row: &Row, suffix: &str) -> String {
    let sql = format!("ACK {}{suffix}", quote(&col(row, "receipt")));
    col(&rows(client, &sql).await[0], "status")
}

/// The payload number of a POP row (`{"n": 17}`).
fn number(row: &Row) -> u64 {
    let payload = col(row, "payload");
    payload
        .trim_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap_or_else(|_| panic!("payload {payload}"))
}

async fn push_numbers(
    client: &Client,
    queue: &str,
    partition: &str,
    numbers: std::ops::Range<u64>,
) {
    let all: Vec<u64> = numbers.collect();
    for chunk in all.chunks(500) {
        let values: Vec<String> = chunk
            .iter()
            .map(|n| format!("('{{\"n\": {n}}}')"))
            .collect();
        rows(
            client,
            &format!(
                "PUSH INTO {queue} PARTITION {} VALUES {}",
                quote(partition),
                values.join(", ")
            ),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_message_does_not_hold_back_the_messages_behind_it_in_a_shared_group_and_does_in_an_ordered_one(
) {
    let proxy = Proxy::start("shared_hol").await;
    let client = proxy.connect().await;
    for (queue, ordered) in [("hol_shared", false), ("hol_ordered", true)] {
        client
            .batch_execute(&format!(
                "CREATE QUEUE {queue} WITH (ordered = {ordered}, retry_delay = '30s')"
            ))
            .await
            .unwrap();
        push_numbers(&client, queue, "Default", 0..3).await;
        let first = rows(&client, &format!("POP FROM {queue}")).await;
        assert_eq!(number(&first[0]), 0);
        let failed = ack(&client, &first[0], " FAILED REASON 'boom'").await;
        assert_eq!(failed, "retry");
        let next = rows(&client, &format!("POP FROM {queue} LIMIT 10")).await;
        let got: Vec<u64> = next.iter().map(number).collect();
        if ordered {
            // The partition waits out retry_delay for the failed message.
            assert!(got.is_empty(), "{queue}: {got:?}");
        } else {
            assert_eq!(got, [1, 2], "{queue}");
        }
    }
    let groups = rows(&client, "SHOW GROUPS").await;
    let types: BTreeMap<String, String> = groups
        .iter()
        .map(|r| (col(r, "queue"), col(r, "type")))
        .collect();
    assert_eq!(types["hol_shared"], "shared");
    assert_eq!(types["hol_ordered"], "ordered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_of_one_shared_partition_hold_distinct_messages_at_once() {
    let proxy = Proxy::start("shared_parallel").await;
    let admin = proxy.connect().await;
    admin
        .batch_execute("CREATE QUEUE par WITH (ordered = false)")
        .await
        .unwrap();
    push_numbers(&admin, "par", "Default", 0..8).await;
    let mut clients = Vec::new();
    let mut held = Vec::new();
    for _ in 0..4 {
        let c = proxy.connect().await;
        let r = rows(&c, "POP FROM par LIMIT 2").await;
        assert_eq!(r.len(), 2);
        held.extend(r.iter().map(number));
        clients.push((c, r));
    }
    held.sort_unstable();
    assert_eq!(held, (0..8).collect::<Vec<u64>>());
    // Nothing left to a fifth consumer while the four hold them.
    assert!(rows(&admin, "POP FROM par").await.is_empty());
    // RENEW and ACK act on one message alone.
    let (c0, r0) = &clients[0];
    let renewed = rows(
        c0,
        &format!("RENEW {} FOR '5m'", quote(&col(&r0[0], "receipt"))),
    )
    .await;
    assert!(!col(&renewed[0], "lease_expires_at").is_empty());
    let acked = ack(c0, &r0[0], "").await;
    assert_eq!(acked, "acked");
    // Repeated with the same receipt: acked again, nothing changes.
    let again = ack(c0, &r0[0], "").await;
    assert_eq!(again, "acked");
    // The type cannot change while messages are in flight.
    assert_eq!(
        sql_error(&admin, "ALTER QUEUE par SET (ordered = true)").await,
        "55000"
    );
    for (c, r) in &clients {
        let receipts: Vec<String> = r.iter().map(|x| quote(&col(x, "receipt"))).collect();
        rows(c, &format!("ACK {}", receipts.join(", "))).await;
    }
    admin
        .batch_execute("ALTER QUEUE par SET (ordered = true)")
        .await
        .unwrap();
    push_numbers(&admin, "par", "Default", 8..10).await;
    let after = rows(&admin, "POP FROM par LIMIT 10").await;
    assert_eq!(after.iter().map(number).collect::<Vec<_>>(), [8, 9]);
    let groups = rows(&admin, "SHOW GROUPS ON par").await;
    assert_eq!(col(&groups[0], "type"), "ordered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_queue_feeds_an_ordered_group_and_a_shared_group_at_once() {
    let proxy = Proxy::start("shared_mixed").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE mixed; ALTER GROUP workers ON mixed SET (ordered = false)")
        .await
        .unwrap();
    push_numbers(&client, "mixed", "Default", 0..4).await;
    let a = rows(&client, "POP FROM mixed GROUP workers LIMIT 1").await;
    let b = rows(&client, "POP FROM mixed GROUP workers LIMIT 1").await;
    assert_eq!((number(&a[0]), number(&b[0])), (0, 1));
    // The ordered audit group leases the whole partition and sees all four.
    let audit = rows(&client, "POP FROM mixed GROUP audit LIMIT 10").await;
    assert_eq!(audit.iter().map(number).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert!(rows(&client, "POP FROM mixed GROUP audit").await.is_empty());
    let groups = rows(&client, "SHOW GROUPS ON mixed").await;
    let types: BTreeMap<String, String> = groups
        .iter()
        .map(|r| (col(r, "group"), col(r, "type")))
        .collect();
    assert_eq!(types["workers"], "shared");
    assert_eq!(types["audit"], "ordered");
    // PostgreSQL's own ALTER GROUP (roles) still reaches PostgreSQL.
    let err = sql_error(&client, "ALTER GROUP no_such_role ADD USER nobody").await;
    assert_eq!(err, "42704");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_ack_in_a_transaction_block_holds_only_its_own_message() {
    let proxy = Proxy::start("shared_block").await;
    let admin = proxy.connect().await;
    admin
        .batch_execute("CREATE QUEUE blk WITH (ordered = false)")
        .await
        .unwrap();
    push_numbers(&admin, "blk", "Default", 0..3).await;
    let worker = proxy.connect().await;
    worker.batch_execute("BEGIN").await.unwrap();
    let mine = rows(&worker, "POP FROM blk").await;
    assert_eq!(number(&mine[0]), 0);
    // Another worker is served at once, never waiting for the open block.
    let other = proxy.connect().await;
    let started = Instant::now();
    let theirs = rows(&other, "POP FROM blk").await;
    assert_eq!(number(&theirs[0]), 1);
    assert!(started.elapsed() < Duration::from_secs(5));
    ack(&worker, &mine[0], "").await;
    worker.batch_execute("ROLLBACK").await.unwrap();
    // Rolled back: the POP and the ACK never happened, message 0 is there.
    let again = rows(&admin, "POP FROM blk LIMIT 5").await;
    assert_eq!(again.iter().map(number).collect::<Vec<_>>(), [0, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_a_rolled_back_claim_come_back_after_the_messages_behind_them_finished() {
    let proxy = Proxy::start("shared_rollback_gap").await;
    let admin = proxy.connect().await;
    admin
        .batch_execute("CREATE QUEUE gap WITH (ordered = false)")
        .await
        .unwrap();
    push_numbers(&admin, "gap", "Default", 0..6).await;
    let other = proxy.connect().await;
    let first = rows(&other, "POP FROM gap").await;
    assert_eq!(ack(&other, &first[0], "").await, "acked");
    // What that POP claimed beyond its one message is held for the
    // session's next POP for 100 ms, then given back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A worker's block claims 1 and 2; another worker takes and finishes
    // 3, 4 and 5 while that claim is open (one ACK each: every ACK may
    // move the start), then the block rolls back.
    let worker = proxy.connect().await;
    worker.batch_execute("BEGIN").await.unwrap();
    let held = rows(&worker, "POP FROM gap LIMIT 2").await;
    assert_eq!(held.iter().map(number).collect::<Vec<_>>(), [1, 2]);
    let behind = rows(&other, "POP FROM gap LIMIT 3").await;
    assert_eq!(behind.iter().map(number).collect::<Vec<_>>(), [3, 4, 5]);
    for row in &behind {
        assert_eq!(ack(&other, row, "").await, "acked");
    }
    worker.batch_execute("ROLLBACK").await.unwrap();
    // 1 and 2 were never acknowledged: both come back, and only they.
    let mut again = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while again.len() < 2 && Instant::now() < deadline {
        for row in rows(&other, "POP FROM gap LIMIT 10 WAIT '200ms'").await {
            again.push(number(&row));
            assert_eq!(ack(&other, &row, "").await, "acked");
        }
    }
    again.sort_unstable();
    assert_eq!(again, [1, 2]);
    assert!(rows(&other, "POP FROM gap LIMIT 10").await.is_empty());
    let group = rows(&admin, "SHOW GROUPS ON gap").await;
    assert_eq!(col(&group[0], "lag"), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_change_refused_counts_the_messages_not_finished() {
    let proxy = Proxy::start("shared_refusal_count").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE rc WITH (ordered = false, retry_delay = '30s')")
        .await
        .unwrap();
    push_numbers(&client, "rc", "Default", 0..4).await;
    let got = rows(&client, "POP FROM rc LIMIT 4").await;
    assert_eq!(got.iter().map(number).collect::<Vec<_>>(), [0, 1, 2, 3]);
    // 0 waits for its retry, 1 is leased, 2 and 3 are finished.
    assert_eq!(ack(&client, &got[0], " FAILED").await, "retry");
    assert_eq!(ack(&client, &got[2], "").await, "acked");
    assert_eq!(ack(&client, &got[3], "").await, "acked");
    let err = client
        .simple_query("ALTER QUEUE rc SET (ordered = true)")
        .await
        .expect_err("a type change with messages in flight");
    let db = err.as_db_error().expect("an ErrorResponse");
    assert_eq!(db.code().code(), "55000");
    assert!(
        db.message().contains("has 2 message(s)"),
        "{}",
        db.message()
    );
}

/// A type change racing the POPs that wait on the group: each round, six
/// consumers wait in `POP … WAIT` on an empty shared group, and one message
/// is pushed as the group turns ordered (then shared again). The message
/// goes to one consumer at most: a POP that read the old type claims
/// nothing once the change has committed, and the change waits for the
/// POPs that claimed under the old type, then counts what they hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_change_racing_waiting_pops_never_gives_a_message_twice() {
    let proxy = Proxy::start("shared_type_race").await;
    let admin = proxy.connect().await;
    admin
        .batch_execute("CREATE QUEUE tr WITH (lease_time = '30s')")
        .await
        .unwrap();
    let pusher = proxy.connect().await;
    let mut consumers = Vec::new();
    for _ in 0..6 {
        consumers.push(Arc::new(proxy.connect().await));
    }
    let mut twice = Vec::new();
    for round in 0..12 {
        let (from, to) = if round % 2 == 0 {
            ("false", "true")
        } else {
            ("true", "false")
        };
        // Every message of the last round was acknowledged: this succeeds.
        admin
            .batch_execute(&format!("ALTER GROUP g ON tr SET (ordered = {from})"))
            .await
            .unwrap();
        let waiting: Vec<_> = consumers
            .iter()
            .map(|c| {
                let c = c.clone();
                tokio::spawn(async move {
                    let got = rows(&c, "POP FROM tr GROUP g WAIT '1500ms'").await;
                    for row in &got {
                        ack(&c, row, "").await;
                    }
                    got.iter()
                        .map(|row| col(row, "partition") + "/" + &col(row, "offset"))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let alter = format!("ALTER GROUP g ON tr SET (ordered = {to})");
        let push = format!("PUSH INTO tr VALUES ('{round}')");
        let (pushed, _) = tokio::join!(pusher.simple_query(&push), admin.simple_query(&alter));
        pushed.unwrap();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for w in waiting {
            for message in w.await.unwrap() {
                *seen.entry(message).or_default() += 1;
            }
        }
        twice.extend(seen.into_iter().filter(|(_, n)| *n > 1));
        // The round's message, if no waiting POP took it, goes now.
        for row in rows(&admin, "POP FROM tr GROUP g LIMIT 10").await {
            ack(&admin, &row, "").await;
        }
    }
    assert!(
        twice.is_empty(),
        "given to several consumers at once: {twice:?}"
    );
}

/// A shared group that works slowly through a queue (its start has not
/// moved for longer than ten lease times, since it moves every 64 finished
/// messages or so) is not judged Dead while its consumers claim: SHOW
/// GROUPS reads its latest claim from its message leases. A queue with the
/// longest lease_time still shows its groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_group_claiming_slowly_is_not_judged_dead() {
    let proxy = Proxy::start("shared_slow_not_dead").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE slow WITH (ordered = false, lease_time = 1)")
        .await
        .unwrap();
    push_numbers(&client, "slow", "Default", 0..10).await;
    let got = rows(&client, "POP FROM slow").await;
    assert_eq!(ack(&client, &got[0], "").await, "acked");
    // As if the group had been created, and its start last moved, an hour ago.
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute(
            "UPDATE queen.consumer_groups_metadata m SET created_at = now() - interval '1 hour' \
               FROM queen.queues q WHERE m.queue_id = q.id AND q.name = 'slow'; \
             UPDATE queen.log_consumers c SET last_claimed_at = now() - interval '1 hour' \
               FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id \
               WHERE c.partition_id = p.id AND q.name = 'slow'",
        )
        .await
        .unwrap();
    assert_eq!(rows(&client, "POP FROM slow").await.len(), 1);
    let groups = rows(&client, "SHOW GROUPS ON slow").await;
    assert_eq!(col(&groups[0], "type"), "shared");
    assert_ne!(col(&groups[0], "state"), "Dead", "{groups:?}");
    let recent: bool = direct
        .query_one(
            "SELECT $1::text::timestamptz > now() - interval '1 minute'",
            &[&col(&groups[0], "last_claimed_at")],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        recent,
        "last_claimed_at {:?}",
        col(&groups[0], "last_claimed_at")
    );

    client
        .batch_execute("CREATE QUEUE longest WITH (lease_time = 2147483647)")
        .await
        .unwrap();
    push_numbers(&client, "longest", "Default", 0..2).await;
    assert_eq!(rows(&client, "POP FROM longest").await.len(), 1);
    assert_eq!(rows(&client, "SHOW GROUPS ON longest").await.len(), 1);
    assert!(!rows(&client, "SHOW GROUPS").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_messages_gives_each_message_of_a_shared_group_its_own_state() {
    let proxy = Proxy::start("shared_browse").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE sb WITH (ordered = false, retry_delay = '30s')")
        .await
        .unwrap();
    push_numbers(&client, "sb", "Default", 0..5).await;
    let got = rows(&client, "POP FROM sb LIMIT 4").await;
    assert_eq!(got.iter().map(number).collect::<Vec<_>>(), [0, 1, 2, 3]);
    // 0 finished, 1 failed (waiting for its retry), 2 acked behind it,
    // 3 still leased, 4 never delivered.
    assert_eq!(ack(&client, &got[0], "").await, "acked");
    assert_eq!(ack(&client, &got[1], " FAILED").await, "retry");
    assert_eq!(ack(&client, &got[2], "").await, "acked");
    // Past the 100 ms a POP's extra claim is held for the session's next.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let browse = rows(&client, "SHOW MESSAGES FROM sb").await;
    let states: Vec<(u64, String)> = browse
        .iter()
        .map(|r| (number(r), col(r, "state")))
        .collect();
    let want: Vec<(u64, String)> = [
        (0, "consumed"),
        (1, "pending"),
        (2, "consumed"),
        (3, "leased"),
        (4, "pending"),
    ]
    .iter()
    .map(|(n, s)| (*n, s.to_string()))
    .collect();
    assert_eq!(states, want);
    // SHOW MESSAGE says the same of one message.
    let id = col(&browse[3], "message_id");
    let one = rows(&client, &format!("SHOW MESSAGE {} FROM sb", quote(&id))).await;
    assert_eq!(col(&one[0], "state"), "leased");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_pushed_behind_leased_ones_is_popped_at_once() {
    let proxy = Proxy::start("shared_fed").await;
    let client = proxy.connect().await;
    let holder = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE fed WITH (ordered = false)")
        .await
        .unwrap();
    push_numbers(&client, "fed", "Default", 0..1).await;
    assert_eq!(rows(&holder, "POP FROM fed").await.len(), 1);
    for n in 1..11 {
        // Everything there is leased: nothing to give, and the partition
        // waits for a lease to end ...
        assert!(rows(&client, "POP FROM fed").await.is_empty());
        // ... until a push puts a new message there.
        push_numbers(&client, "fed", "Default", n..n + 1).await;
        let got = rows(&client, "POP FROM fed").await;
        assert_eq!(got.iter().map(number).collect::<Vec<_>>(), [n], "push {n}");
        assert_eq!(ack(&client, &got[0], "").await, "acked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_queue_refuses_shared_groups() {
    let proxy = Proxy::start("shared_ephemeral").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE eph WITH (class = 'ephemeral')")
        .await
        .unwrap();
    assert_eq!(
        sql_error(&client, "ALTER QUEUE eph SET (ordered = false)").await,
        "0A000"
    );
    assert_eq!(
        sql_error(&client, "ALTER GROUP g ON eph SET (ordered = false)").await,
        "0A000"
    );
    assert_eq!(
        sql_error(
            &client,
            "CREATE QUEUE eph2 WITH (class = 'ephemeral', ordered = false)"
        )
        .await,
        "0A000"
    );
    // Refused whole: the queue was not made.
    assert_eq!(
        sql_error(&client, "ALTER QUEUE eph2 SET (retry_limit = 1)").await,
        "42704"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_of_a_shared_partition_is_max_in_flight_wide() {
    let proxy = Proxy::start("shared_window").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE win WITH (ordered = false, max_in_flight = 2)")
        .await
        .unwrap();
    push_numbers(&client, "win", "Default", 0..5).await;
    let first = rows(&client, "POP FROM win LIMIT 10").await;
    assert_eq!(first.iter().map(number).collect::<Vec<_>>(), [0, 1]);
    assert!(rows(&client, "POP FROM win").await.is_empty());
    // Finishing the second does not free the window: the first still holds
    // the start.
    ack(&client, &first[1], "").await;
    assert!(rows(&client, "POP FROM win").await.is_empty());
    ack(&client, &first[0], "").await;
    let next = rows(&client, "POP FROM win LIMIT 10").await;
    assert_eq!(next.iter().map(number).collect::<Vec<_>>(), [2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_and_drop_group_start_a_shared_group_afresh() {
    let proxy = Proxy::start("shared_seek").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE sk WITH (ordered = false)")
        .await
        .unwrap();
    push_numbers(&client, "sk", "Default", 0..4).await;
    let held = rows(&client, "POP FROM sk GROUP g LIMIT 2").await;
    ack(&client, &held[1], "").await;
    client
        .batch_execute("SEEK GROUP g ON sk TO BEGINNING")
        .await
        .unwrap();
    // The lease went with the move: its receipt is stale.
    let stale = ack(&client, &held[0], "").await;
    assert_eq!(stale, "stale");
    let all = rows(&client, "POP FROM sk GROUP g LIMIT 10").await;
    assert_eq!(all.iter().map(number).collect::<Vec<_>>(), [0, 1, 2, 3]);
    client.batch_execute("DROP GROUP g ON sk").await.unwrap();
    let direct = connect(&proxy.direct).await;
    let left: i64 = direct
        .query_one(
            "SELECT count(*) FROM queen.log_shared_records WHERE consumer_group = 'g'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    let again = rows(&client, "POP FROM sk GROUP g LIMIT 10").await;
    assert_eq!(again.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_pop_gets_a_failed_message_back_once_its_retry_delay_passed() {
    let proxy = Proxy::start("shared_wait").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE wt WITH (ordered = false, retry_delay = '300ms')")
        .await
        .unwrap();
    push_numbers(&client, "wt", "Default", 0..1).await;
    let first = rows(&client, "POP FROM wt").await;
    ack(&client, &first[0], " FAILED").await;
    let started = Instant::now();
    let again = rows(&client, "POP FROM wt WAIT '10s'").await;
    assert_eq!(again.len(), 1);
    assert_eq!(number(&again[0]), 0);
    assert_eq!(col(&again[0], "retry_count"), "1");
    // Generous: the retry delay is 0.3 s; the bound catches a wait that
    // only the timeout ends.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

/// The state of one message of a shared group: (state, retry count).
async fn record_state(
    direct: &impl tokio_postgres::GenericClient,
    key: &(i64, String, i64),
) -> (i16, i32) {
    let row = direct
        .query_one(
            "SELECT state, retry_count FROM queen.log_shared_records \
             WHERE partition_id = $1 AND consumer_group = $2 AND message_offset = $3",
            &[&key.0, &key.1, &key.2],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// `log_ack_shared_v1` of one receipt, and of the same receipt named twice
/// (the general path, every receipt a batch of its own), each in a
/// transaction rolled back: (its answer, the row after it) for both.
async fn ack_one_and_twice(
    direct: &mut Client,
    key: &(i64, String, i64),
    token: uuid::Uuid,
    tenant: uuid::Uuid,
) -> [(String, (i16, i32)); 2] {
    let mut out = Vec::new();
    for times in [1usize, 2] {
        let tx = direct.transaction().await.unwrap();
        let rows = tx
            .query(
                "SELECT status FROM queen.log_ack_shared_v1($1, $2, $3, $4, false, NULL, $5) \
                 ORDER BY idx",
                &[
                    &vec![key.0; times],
                    &vec![key.2; times],
                    &vec![key.1.clone(); times],
                    &vec![token; times],
                    &tenant,
                ],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), times);
        let status: String = rows[0].get(0);
        let state = record_state(&tx, key).await;
        tx.rollback().await.unwrap();
        out.push((status, state));
    }
    [out[0].clone(), out[1].clone()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_of_one_receipt_answers_and_settles_as_a_batch_of_it_does() {
    let proxy = Proxy::start("shared_one_ack").await;
    let client = proxy.connect().await;
    let mut direct = proxy.connect_direct().await;
    client
        .batch_execute("CREATE QUEUE one_ack WITH (ordered = false, retry_delay = '1h')")
        .await
        .unwrap();
    push_numbers(&client, "one_ack", "Default", 0..6).await;
    let popped = rows(&client, "POP FROM one_ack LIMIT 6").await;
    assert_eq!(popped.len(), 6);
    let leased: Vec<((i64, String, i64), uuid::Uuid)> = direct
        .query(
            "SELECT partition_id, consumer_group::TEXT, message_offset, lease_token \
             FROM queen.log_shared_records WHERE state = 0 ORDER BY message_offset",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| ((r.get(0), r.get(1), r.get(2)), r.get(3)))
        .collect();
    assert_eq!(leased.len(), 6);
    let tenant = queenwire::engine::DEFAULT_TENANT;
    // Message 1 acknowledged, message 2 failed (waits out an hour), message
    // 3's lease expired: each through the proxy or as time would leave it.
    assert_eq!(ack(&client, &popped[1], "").await, "acked");
    assert_eq!(ack(&client, &popped[2], " FAILED").await, "retry");
    direct
        .execute(
            "UPDATE queen.log_shared_records SET lease_expires_at = now() - interval '1 second' \
             WHERE partition_id = $1 AND consumer_group = $2 AND message_offset = $3",
            &[&leased[3].0 .0, &leased[3].0 .1, &leased[3].0 .2],
        )
        .await
        .unwrap();
    let other = uuid::Uuid::now_v7();
    let cases = [
        ("a live lease", &leased[0].0, leased[0].1, tenant, "acked"),
        (
            "acknowledged before",
            &leased[1].0,
            leased[1].1,
            tenant,
            "acked",
        ),
        (
            "failed, waiting to retry",
            &leased[2].0,
            leased[2].1,
            tenant,
            "stale",
        ),
        (
            "an expired lease",
            &leased[3].0,
            leased[3].1,
            tenant,
            "stale",
        ),
        ("another token", &leased[4].0, other, tenant, "stale"),
        ("another tenant", &leased[5].0, leased[5].1, other, "stale"),
    ];
    for (what, key, token, tenant, want) in cases {
        let [one, twice] = ack_one_and_twice(&mut direct, key, token, tenant).await;
        assert_eq!(one.0, want, "{what}: one receipt");
        assert_eq!(
            one, twice,
            "{what}: one receipt against the same named twice"
        );
    }
    // An offset never delivered has no row: stale either way.
    let missing = (leased[0].0 .0, leased[0].0 .1.clone(), 1_000_000i64);
    for times in [1usize, 2] {
        let rows = direct
            .query(
                "SELECT status FROM queen.log_ack_shared_v1($1, $2, $3, $4) ORDER BY idx",
                &[
                    &vec![missing.0; times],
                    &vec![missing.2; times],
                    &vec![missing.1.clone(); times],
                    &vec![leased[0].1; times],
                ],
            )
            .await
            .unwrap();
        let status: String = rows[0].get(0);
        assert_eq!(status, "stale");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_pop_serves_shared_queues_of_its_namespace() {
    let proxy = Proxy::start("shared_namespace").await;
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE QUEUE ns_a WITH (ordered = false, namespace = 'work'); \
             CREATE QUEUE ns_b WITH (ordered = false, namespace = 'work')",
        )
        .await
        .unwrap();
    push_numbers(&client, "ns_a", "Default", 0..2).await;
    push_numbers(&client, "ns_b", "Default", 10..12).await;
    let mut seen = Vec::new();
    let other = proxy.connect().await;
    for c in [&client, &other, &client, &other] {
        let r = rows(c, "POP FROM NAMESPACE work").await;
        assert_eq!(r.len(), 1);
        seen.push(number(&r[0]));
    }
    seen.sort_unstable();
    assert_eq!(seen, [0, 1, 10, 11]);
}

// ---------------------------------------------------------------------------
// The ledger through the real binary.

const MESSAGES: u64 = 20_000;
const CONSUMERS: usize = 16;
/// retry_limit 3: a message failed every time is delivered 4 times.
const RETRY_LIMIT: i64 = 3;

/// Failed on every delivery: dead-lettered after RETRY_LIMIT + 1.
fn always_fails(n: u64) -> bool {
    n % 997 == 5
}
/// Failed on its first delivery only.
fn fails_once(n: u64) -> bool {
    n % 53 == 7
}
/// Its first lease is left to expire.
fn abandoned_once(n: u64) -> bool {
    n % 331 == 11
}

/// One delivery as its consumer saw it.
#[derive(Debug, Clone)]
struct Delivery {
    start: SystemTime,
    end: SystemTime,
    retry_count: i64,
}

#[derive(Default)]
struct Ledger {
    deliveries: Mutex<HashMap<u64, Vec<Delivery>>>,
    /// The receipts answered `acked`, per message.
    acked: Mutex<HashMap<u64, HashSet<String>>>,
    dead: Mutex<HashSet<u64>>,
    /// Failures each message is known to have had (FAILED answered retry
    /// or dead_lettered, leases left to expire).
    failures: Mutex<HashMap<u64, i64>>,
    finished: AtomicUsize,
    lost_replies: AtomicUsize,
}

async fn connect_retrying(cfg: &tokio_postgres::Config) -> Client {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match cfg.connect(tokio_postgres::NoTls).await {
            Ok((client, conn)) => {
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                return client;
            }
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("cannot reach queenwire: {e}"),
        }
    }
}

async fn query(client: &Client, sql: &str) -> Result<Vec<Row>, tokio_postgres::Error> {
    let messages = client.simple_query(sql).await?;
    Ok(messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                r.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.name().to_string(), r.get(i).map(str::to_string)))
                    .collect(),
            ),
            _ => None,
        })
        .collect())
}

fn parse_time(text: &str) -> SystemTime {
    // `2026-12-06 07:05:35.007081+00` (or `-05:30`): PostgreSQL's ISO output.
    let (date, rest) = text.split_once(' ').expect("a timestamp");
    let sign_at = rest.rfind(['+', '-']).expect("a UTC offset");
    let (time, offset) = rest.split_at(sign_at);
    let mut o = offset[1..].split(':').map(|x| x.parse::<i64>().unwrap());
    let offset_secs = (o.next().unwrap() * 3600 + o.next().unwrap_or(0) * 60)
        * if offset.starts_with('-') { -1 } else { 1 };
    let mut d = date.split('-').map(|x| x.parse::<i64>().unwrap());
    let (y, m, day) = (d.next().unwrap(), d.next().unwrap(), d.next().unwrap());
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|x| x.parse::<i64>().unwrap());
    let (h, mi, s) = (t.next().unwrap(), t.next().unwrap(), t.next().unwrap());
    // Days from the civil date (Howard Hinnant's algorithm).
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let micros: i64 = format!("{frac:0<6}")[..6].parse().unwrap();
    SystemTime::UNIX_EPOCH
        + Duration::from_secs((days * 86_400 + h * 3600 + mi * 60 + s - offset_secs) as u64)
        + Duration::from_micros(micros as u64)
}

/// A consumer: POP LIMIT 1, a little work, ACK (or FAILED, or nothing),
/// reconnecting and retrying its ACK across a killed queenwire.
async fn consumer(
    id: usize,
    cfg: tokio_postgres::Config,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (id as u64 + 1);
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut client = connect_retrying(&cfg).await;
    while !stop.load(Ordering::SeqCst) {
        // One POP in 16 runs in a block that rolls back: its claim never
        // happened, and the message must come again (the start of the
        // group stops at the offset it leaves without a row).
        if next() % 16 == 0 {
            let pop = "POP FROM ledger LIMIT 1 WAIT '300ms' LEASE '2s'";
            let rolled_back = async {
                client.batch_execute("BEGIN").await?;
                query(&client, pop).await?;
                client.batch_execute("ROLLBACK").await
            };
            if rolled_back.await.is_err() {
                tokio::time::sleep(Duration::from_millis(50)).await;
                client = connect_retrying(&cfg).await;
            }
            continue;
        }
        let popped = match query(&client, "POP FROM ledger LIMIT 1 WAIT '300ms' LEASE '2s'").await {
            Ok(r) => r,
            Err(_) => {
                ledger.lost_replies.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                client = connect_retrying(&cfg).await;
                continue;
            }
        };
        let Some(row) = popped.first() else { continue };
        let start = SystemTime::now();
        let n = number(row);
        let retry_count: i64 = col(row, "retry_count").parse().unwrap();
        let expires = parse_time(&col(row, "lease_expires_at"));
        let receipt = col(row, "receipt");
        let fail = always_fails(n) || (fails_once(n) && retry_count == 0);
        if abandoned_once(n) && retry_count == 0 && !always_fails(n) && !fails_once(n) {
            ledger
                .deliveries
                .lock()
                .unwrap()
                .entry(n)
                .or_default()
                .push(Delivery {
                    start,
                    end: expires,
                    retry_count,
                });
            *ledger.failures.lock().unwrap().entry(n).or_default() += 1;
            continue;
        }
        tokio::time::sleep(Duration::from_micros(next() % 2_000)).await;
        let sql = if fail {
            format!("ACK {} FAILED REASON 'ledger'", quote(&receipt))
        } else {
            format!("ACK {}", quote(&receipt))
        };
        let sent = SystemTime::now();
        let status = loop {
            match query(&client, &sql).await {
                Ok(r) => break col(&r[0], "status"),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    client = connect_retrying(&cfg).await;
                }
            }
        };
        let end = if status == "stale" {
            sent.min(expires)
        } else {
            sent
        };
        ledger
            .deliveries
            .lock()
            .unwrap()
            .entry(n)
            .or_default()
            .push(Delivery {
                start,
                end,
                retry_count,
            });
        match status.as_str() {
            "acked" => {
                let mut acked = ledger.acked.lock().unwrap();
                let receipts = acked.entry(n).or_default();
                if receipts.is_empty() {
                    ledger.finished.fetch_add(1, Ordering::SeqCst);
                }
                receipts.insert(receipt);
            }
            "retry" => *ledger.failures.lock().unwrap().entry(n).or_default() += 1,
            "dead_lettered" => {
                *ledger.failures.lock().unwrap().entry(n).or_default() += 1;
                if ledger.dead.lock().unwrap().insert(n) {
                    ledger.finished.fetch_add(1, Ordering::SeqCst);
                }
            }
            "stale" => {}
            other => panic!("ACK answered {other}"),
        }
    }
}

/// Runs the ledger over `processes` queenwire binaries on one database,
/// killing the first with SIGKILL `kills` times mid-run, then checks it.
async fn shared_ledger(name: &str, processes: usize, kills: usize) {
    let direct = common::cluster::fresh_database(name);
    let dir = tempfile::tempdir().unwrap();
    let binaries: Vec<Arc<Mutex<Queenwire>>> = (0..processes)
        .map(|i| {
            let name = format!("qw{i}");
            let qw = Queenwire::start(&direct, dir.path(), &name, &["--pool-size", "8"]);
            Arc::new(Mutex::new(qw))
        })
        .collect();
    let configs: Vec<tokio_postgres::Config> = binaries
        .iter()
        .map(|b| b.lock().unwrap().client_config("ledger"))
        .collect();
    let admin = connect_retrying(&configs[0]).await;
    admin
        .batch_execute(&format!(
            "CREATE QUEUE ledger WITH (ordered = false, retry_delay = '50ms', retry_limit = {RETRY_LIMIT})"
        ))
        .await
        .unwrap();
    push_numbers(&admin, "ledger", "Default", 0..MESSAGES).await;
    drop(admin);

    let ledger = Arc::new(Ledger::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for id in 0..CONSUMERS {
        let cfg = configs[id % processes].clone();
        tasks.push(tokio::spawn(consumer(
            id,
            cfg,
            ledger.clone(),
            stop.clone(),
        )));
    }
    let started = Instant::now();
    let mut killed = 0;
    let deadline = Duration::from_secs(600);
    let mut progress = (0, Instant::now());
    while ledger.finished.load(Ordering::SeqCst) < MESSAGES as usize {
        let finished = ledger.finished.load(Ordering::SeqCst);
        if finished != progress.0 {
            progress = (finished, Instant::now());
        }
        // Nothing finished for 30 s (leases are 2 s, retries 50 ms): what
        // is left will never come.
        if started.elapsed() >= deadline || progress.1.elapsed() > Duration::from_secs(30) {
            let acked = ledger.acked.lock().unwrap();
            let dead = ledger.dead.lock().unwrap();
            let missing: Vec<u64> = (0..MESSAGES)
                .filter(|n| !acked.contains_key(n) && !dead.contains(n))
                .take(20)
                .collect();
            panic!(
                "{name}: {finished} of {MESSAGES} finished after {:?}; not finished: {missing:?}",
                started.elapsed()
            );
        }
        let done = ledger.finished.load(Ordering::SeqCst) as u64;
        if killed < kills && done >= MESSAGES * (killed as u64 + 1) / (kills as u64 + 1) {
            binaries[0].lock().unwrap().kill_9_and_restart();
            killed += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }

    // Every message finished exactly once: acked by one receipt, or
    // dead-lettered, never both.
    let acked = ledger.acked.lock().unwrap().clone();
    let dead = ledger.dead.lock().unwrap().clone();
    for n in 0..MESSAGES {
        let receipts = acked.get(&n).map_or(0, HashSet::len);
        if always_fails(n) {
            assert!(
                dead.contains(&n) && receipts == 0,
                "{name}: {n} not dead-lettered"
            );
        } else {
            assert_eq!(
                receipts, 1,
                "{name}: message {n} acked by {receipts} receipts"
            );
            assert!(!dead.contains(&n), "{name}: {n} dead-lettered");
        }
    }
    // No message held by two consumers at once.
    let deliveries = ledger.deliveries.lock().unwrap().clone();
    for (n, list) in deliveries.iter() {
        let mut list = list.clone();
        list.sort_by_key(|d| d.start);
        for pair in list.windows(2) {
            assert!(
                pair[1].start >= pair[0].end,
                "{name}: message {n} held twice at once: {pair:?}"
            );
        }
    }
    // Retry counts: every delivery counts at least the failures seen before
    // it; without a kill (no reply lost) exactly those.
    let failures = ledger.failures.lock().unwrap().clone();
    let lost = ledger.lost_replies.load(Ordering::SeqCst);
    for (n, list) in deliveries.iter() {
        let mut list = list.clone();
        list.sort_by_key(|d| d.start);
        for (i, d) in list.iter().enumerate() {
            if kills == 0 && lost == 0 {
                assert_eq!(d.retry_count, i as i64, "{name}: message {n}, delivery {i}");
            } else {
                assert!(
                    d.retry_count >= i as i64,
                    "{name}: message {n}, delivery {i}"
                );
            }
        }
        if always_fails(*n) {
            assert_eq!(failures[n], RETRY_LIMIT + 1, "{name}: {n}");
        }
    }
    // The DLQ holds exactly the messages failed every time, each once.
    let direct_client = connect(&direct).await;
    let dlq = direct_client
        .query_one(
            "SELECT count(*), count(DISTINCT message_offset), min(retry_count), max(retry_count) FROM queen.log_dlq",
            &[],
        )
        .await
        .unwrap();
    let expected_dead = (0..MESSAGES).filter(|&n| always_fails(n)).count() as i64;
    assert_eq!(dlq.get::<_, i64>(0), expected_dead, "{name}: DLQ rows");
    assert_eq!(dlq.get::<_, i64>(1), expected_dead, "{name}: DLQ messages");
    if kills == 0 {
        assert_eq!(dlq.get::<_, Option<i32>>(2), Some(RETRY_LIMIT as i32 + 1));
    }
    // The start moved over everything: nothing is left unfinished.
    let left = direct_client
        .query_one(
            "SELECT count(*) FROM queen.log_shared_records r JOIN queen.log_consumers c USING (partition_id, consumer_group) WHERE r.message_offset > c.cursor_offset AND r.state < 2",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(left.get::<_, i64>(0), 0, "{name}: unfinished rows left");
    eprintln!(
        "{name}: {MESSAGES} messages, {CONSUMERS} consumers over {processes} queenwire(s), {kills} kill(s), {lost} lost POP replies, {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_consumers_of_one_shared_partition_finish_every_message_once_across_kill_9() {
    shared_ledger("shared_ledger_kill", 1, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_queenwire_processes_share_one_shared_group_and_finish_every_message_once() {
    shared_ledger("shared_ledger_two", 2, 0).await;
}

/// What a claim returned, the lease's token and expiry left out (each call
/// draws its own): (partition, state, retry_count, from, to, base, blob).
type Claim = (i64, String, i32, i64, i64, i64, Vec<u8>);

/// `log_pop_shared_new_v1` and then `log_pop_shared_v1` on the same state,
/// each in a transaction rolled back.
async fn claim_both_ways(
    direct: &mut Client,
    queue_id: uuid::Uuid,
    partition_id: i64,
    (limit, max_partitions, partition_limit): (i32, i32, Option<i32>),
) -> [Vec<Claim>; 2] {
    let one = "SELECT partition_id, state, retry_count, from_offset, to_offset, base_offset, blob \
               FROM queen.log_pop_shared_new_v1($1, '__QUEUE_MODE__', $2, $3, \
                    make_interval(secs => 30), false, $4, 10000, $5)";
    let whole =
        "SELECT partition_id, state, retry_count, from_offset, to_offset, base_offset, blob \
                 FROM queen.log_pop_shared_v1($1, NULL, '__QUEUE_MODE__', $2, $3, \
                      make_interval(secs => 30), NULL, false, $6, ARRAY[$4]::BIGINT[], $5)";
    let tenant = queenwire::engine::DEFAULT_TENANT;
    let mut out = Vec::new();
    for sql in [one, whole] {
        let tx = direct.transaction().await.unwrap();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
            &queue_id,
            &limit,
            &max_partitions,
            &partition_id,
            &partition_limit,
            &tenant,
        ];
        let n = if sql == one { 5 } else { 6 };
        let claims: Vec<Claim> = tx
            .query(sql, &params[..n])
            .await
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r.get(0),
                    r.get(1),
                    r.get(2),
                    r.get(3),
                    r.get(4),
                    r.get(5),
                    r.get(6),
                )
            })
            .collect();
        tx.rollback().await.unwrap();
        out.push(claims);
    }
    [out[0].clone(), out[1].clone()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_new_offsets_in_one_statement_answers_as_the_whole_judgement_does() {
    let proxy = Proxy::start("shared_one_claim").await;
    let client = proxy.connect().await;
    let mut direct = proxy.connect_direct().await;
    client
        .batch_execute("CREATE QUEUE one_claim WITH (ordered = false, retry_delay = 0)")
        .await
        .unwrap();
    // Three segments of five messages.
    for part in 0..3 {
        push_numbers(&client, "one_claim", "Default", part * 5..part * 5 + 5).await;
    }
    // The group's consumer row, and a lease at the head.
    let head = rows(&client, "POP FROM one_claim").await;
    assert_eq!(number(&head[0]), 0);
    let ids = direct
        .query_one(
            "SELECT q.id, p.id FROM queen.queues q JOIN queen.log_partitions p ON p.queue_id = q.id \
             WHERE q.name = 'one_claim'",
            &[],
        )
        .await
        .unwrap();
    let (queue_id, partition_id): (uuid::Uuid, i64) = (ids.get(0), ids.get(1));
    let shapes = [
        ("one message", (1, 1, None)),
        ("across segments", (7, 1, None)),
        ("claims of three for a fused POP", (8, 3, Some(3))),
    ];
    for (what, shape) in shapes {
        let [one, whole] = claim_both_ways(&mut direct, queue_id, partition_id, shape).await;
        assert!(!one.is_empty(), "{what}: claimed nothing");
        assert_eq!(one, whole, "{what}");
    }
    // An offset another transaction is claiming is skipped: two runs.
    let holder = proxy.connect_direct().await;
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock(hashtextextended('__QUEUE_MODE__:{partition_id}', 3))"
        ))
        .await
        .unwrap();
    let [one, whole] = claim_both_ways(&mut direct, queue_id, partition_id, (4, 1, None)).await;
    // Rows: a run cut where offset 5 begins a segment.
    let runs: Vec<(i64, i64)> = one.iter().map(|c| (c.3, c.4)).collect();
    assert_eq!(
        runs,
        [(1, 2), (4, 4), (5, 5)],
        "around the offset being claimed"
    );
    assert_eq!(one, whole, "around the offset being claimed");
    holder.batch_execute("ROLLBACK").await.unwrap();
    // A message due again: left to the whole judgement, which redelivers it.
    assert_eq!(ack(&client, &head[0], " FAILED").await, "retry");
    let [one, whole] = claim_both_ways(&mut direct, queue_id, partition_id, (2, 1, None)).await;
    assert!(one.is_empty(), "claimed past a message due again: {one:?}");
    assert_eq!(
        whole.iter().map(|c| (c.2, c.3, c.4)).collect::<Vec<_>>(),
        [(1, 0, 0), (0, 1, 1)]
    );
    // Through the proxy, the same: the retry first, then new offsets.
    let popped = rows(&client, "POP FROM one_claim LIMIT 3").await;
    assert_eq!(popped.iter().map(number).collect::<Vec<_>>(), [0, 1, 2]);
}

/// A worker's POP … ACK loop leaves a claim held for its next POP for a
/// moment: a type change right after it gives that claim back first, for
/// the group alone and for the queue, instead of counting it unfinished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_change_right_after_a_worker_s_ack_is_not_refused() {
    let proxy = Proxy::start("shared_change_after_ack").await;
    let client = proxy.connect().await;
    client.batch_execute("CREATE QUEUE ta").await.unwrap();
    push_numbers(&client, "ta", "Default", 0..20).await;
    for change in [
        "ALTER GROUP workers ON ta SET (ordered = false)",
        "ALTER GROUP workers ON ta SET (ordered = true)",
        "ALTER QUEUE ta SET (ordered = false)",
        "ALTER QUEUE ta SET (ordered = true)",
    ] {
        let queue_wide = change.starts_with("ALTER QUEUE");
        let group = if queue_wide { "" } else { " GROUP workers" };
        let got = rows(&client, &format!("POP FROM ta{group}")).await;
        assert_eq!(got.len(), 1, "{change}");
        assert_eq!(ack(&client, &got[0], "").await, "acked");
        client
            .batch_execute(change)
            .await
            .unwrap_or_else(|e| panic!("{change}: {e:?}"));
    }
}

/// A claim held for a worker's next POP (made by the write that carried
/// its ACK) is given back by SEEK, DROP GROUP and DROP QUEUE, and a stale
/// ACK makes none: the next POP never returns a message from before the
/// reset or of a dropped queue, and nothing dropped comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_and_drops_right_after_a_worker_s_ack_give_its_held_claim_back() {
    let proxy = Proxy::start("shared_reset_after_ack").await;
    let worker = proxy.connect().await;
    let admin = proxy.connect().await;
    for ordered in [false, true] {
        for action in ["SEEK", "DROP GROUP", "DROP QUEUE", "stale ACK"] {
            let queue = format!(
                "hr_{}_{}",
                if ordered { "o" } else { "s" },
                action.replace(' ', "_").to_lowercase()
            );
            admin
                .batch_execute(&format!("CREATE QUEUE {queue} WITH (ordered = {ordered})"))
                .await
                .unwrap();
            push_numbers(&admin, &queue, "Default", 0..4).await;
            let got = rows(&worker, &format!("POP FROM {queue} GROUP g LIMIT 1")).await;
            assert_eq!(got.len(), 1, "{queue}");
            if action == "stale ACK" {
                admin
                    .batch_execute(&format!("DROP QUEUE {queue}"))
                    .await
                    .unwrap();
                assert_eq!(ack(&worker, &got[0], "").await, "stale", "{queue}");
            } else {
                assert_eq!(ack(&worker, &got[0], "").await, "acked", "{queue}");
                let sql = match action {
                    "SEEK" => format!("SEEK GROUP g ON {queue} TO END"),
                    "DROP GROUP" => format!("DROP GROUP g ON {queue}"),
                    _ => format!("DROP QUEUE {queue}"),
                };
                admin.batch_execute(&sql).await.unwrap();
            }
            // Before the next POP (a POP with a group recreates a queue that
            // does not exist, by the seed's rule).
            let exists = rows(&admin, "SHOW QUEUES")
                .await
                .iter()
                .any(|r| col(r, "queue") == queue);
            let next = worker
                .simple_query(&format!("POP FROM {queue} GROUP g LIMIT 1"))
                .await;
            let next: Vec<u64> = match next {
                Ok(messages) => messages
                    .iter()
                    .filter_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(r) => r.get("payload").map(|p| {
                            p.trim_matches(|c: char| !c.is_ascii_digit())
                                .parse()
                                .unwrap()
                        }),
                        _ => None,
                    })
                    .collect(),
                Err(_) => Vec::new(),
            };
            match action {
                // Past the end: nothing to deliver.
                "SEEK" => assert_eq!(next, Vec::<u64>::new(), "{queue}"),
                // A new group of the same name, not the old one's claim.
                "DROP GROUP" => assert_ne!(next, [1], "{queue}"),
                _ => {
                    assert_eq!(next, Vec::<u64>::new(), "{queue}");
                    assert!(!exists, "{queue} came back");
                }
            }
        }
    }
}

/// The offsets of POP rows.
fn offsets(popped: &[Row]) -> Vec<i64> {
    popped
        .iter()
        .map(|r| col(r, "offset").parse().unwrap())
        .collect()
}

/// Oldest first is by offset: a failed message due again comes before
/// messages of a claim given back later (a worker's held claim it did not
/// take), though those fell due first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_retry_comes_before_later_messages_given_back() {
    let proxy = Proxy::start("shared_retry_order").await;
    let worker = proxy.connect().await;
    worker
        .batch_execute("CREATE QUEUE ro WITH (ordered = false, retry_delay = '1s')")
        .await
        .unwrap();
    push_numbers(&worker, "ro", "Default", 0..6).await;
    let got = rows(&worker, "POP FROM ro LIMIT 3").await;
    assert_eq!(offsets(&got), [0, 1, 2]);
    assert_eq!(ack(&worker, &got[1], " FAILED").await, "retry");
    // Acked in a write that claims 3..5 for this worker's next POP; not
    // taken, that claim is given back after 100 ms.
    let sql = format!(
        "ACK {}, {}",
        quote(&col(&got[0], "receipt")),
        quote(&col(&got[2], "receipt"))
    );
    rows(&worker, &sql).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let other = proxy.connect().await;
    let mut order = Vec::new();
    for _ in 0..4 {
        let got = rows(&other, "POP FROM ro LIMIT 1").await;
        order.extend(offsets(&got));
    }
    assert_eq!(order, [1, 3, 4, 5]);
}

/// A message a POP dead-letters (its lease expired past retry_limit) is
/// finished: the group's lag and the queue's pending drop at once.
#[tokio::test]
async fn a_message_dead_lettered_by_a_pop_leaves_no_lag() {
    let proxy = Proxy::start("shared_dead_lag").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE dl WITH (ordered = false, retry_limit = 0)")
        .await
        .unwrap();
    rows(&client, "PUSH INTO dl VALUES ('1')").await;
    assert_eq!(rows(&client, "POP FROM dl LEASE '200ms'").await.len(), 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(rows(&client, "POP FROM dl").await.is_empty());
    assert_eq!(rows(&client, "SHOW DLQ FROM dl").await.len(), 1);
    let groups = rows(&client, "SHOW GROUPS ON dl").await;
    assert_eq!(col(&groups[0], "lag"), "0", "{groups:?}");
    let queues = rows(&client, "SHOW QUEUES").await;
    let dl = queues.iter().find(|r| col(r, "queue") == "dl").unwrap();
    assert_eq!(col(dl, "pending"), "0", "{dl:?}");
}

/// max_wait_time_seconds dead-letters a shared group's pending messages
/// only: one under a live lease stays its holder's, whose ACK then acks it
/// alone.
#[tokio::test]
async fn max_wait_spares_a_leased_shared_message() {
    let proxy = Proxy::start("shared_max_wait").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE mw WITH (ordered = false, max_wait_time_seconds = 1)")
        .await
        .unwrap();
    push_numbers(&client, "mw", "Default", 0..3).await;
    let held = rows(&client, "POP FROM mw LIMIT 1 LEASE '5m'").await;
    assert_eq!(offsets(&held), [0]);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let direct = proxy.connect_direct().await;
    // The maintenance step, run now rather than on its own schedule.
    let moved: i32 = direct
        .query_one("SELECT queen.log_expire_pending_v1(1000)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(moved, 2, "the two pending messages");
    let mut dlq: Vec<String> = rows(&client, "SHOW DLQ FROM mw")
        .await
        .iter()
        .map(|r| col(r, "offset"))
        .collect();
    dlq.sort();
    assert_eq!(dlq, ["1", "2"]);
    assert_eq!(ack(&client, &held[0], "").await, "acked");
    assert!(rows(&client, "POP FROM mw").await.is_empty());
    let groups = rows(&client, "SHOW GROUPS ON mw").await;
    assert_eq!(col(&groups[0], "lag"), "0", "{groups:?}");
}

/// What a shared group finished counts as finished in its lag, the queue's
/// pending and max_queue_size at once, though its start moves over it only
/// later: a drained queue shows no lag and no pending, a queue whose first
/// message was acknowledged shows the rest.
#[tokio::test]
async fn finished_messages_leave_lag_and_pending_at_once() {
    let proxy = Proxy::start("shared_lag_now").await;
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE QUEUE drained WITH (ordered = false);
             CREATE QUEUE head WITH (ordered = false, max_queue_size = 3)",
        )
        .await
        .unwrap();
    push_numbers(&client, "drained", "Default", 0..2).await;
    assert_eq!(
        rows(&client, "POP FROM drained LIMIT 2 AUTO ACK")
            .await
            .len(),
        2
    );
    push_numbers(&client, "head", "Default", 0..3).await;
    let first = rows(&client, "POP FROM head").await;
    assert_eq!(ack(&client, &first[0], "").await, "acked");
    // A second message is leased, not finished: it stays in the lag.
    assert_eq!(rows(&client, "POP FROM head LEASE '5m'").await.len(), 1);

    let groups = rows(&client, "SHOW GROUPS").await;
    let group = |queue: &str| groups.iter().find(|r| col(r, "queue") == queue).unwrap();
    assert_eq!(col(group("drained"), "lag"), "0", "{groups:?}");
    assert_eq!(col(group("drained"), "state"), "Stable");
    assert_eq!(group("drained").get("oldest_pending_at"), Some(&None));
    assert_eq!(col(group("head"), "lag"), "2", "{groups:?}");
    assert_eq!(col(group("head"), "leased_partitions"), "1", "{groups:?}");
    let detail = rows(&client, "SHOW GROUP __QUEUE_MODE__ ON drained").await;
    assert_eq!(col(&detail[0], "lag"), "0", "{detail:?}");
    let queues = rows(&client, "SHOW QUEUES").await;
    let queue = |name: &str| queues.iter().find(|r| col(r, "queue") == name).unwrap();
    assert_eq!(col(queue("drained"), "pending"), "0", "{queues:?}");
    assert_eq!(col(queue("head"), "pending"), "2", "{queues:?}");
    // max_queue_size 3 with 2 pending takes one more message, not two.
    rows(&client, "PUSH INTO head VALUES ('3')").await;
    let full = client
        .simple_query("PUSH INTO head VALUES ('4')")
        .await
        .expect_err("the queue is full");
    assert_eq!(full.code().map(|c| c.code()), Some("54000"), "{full:?}");
}
