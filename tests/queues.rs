//! The queue statements end to end, through queenwire, against a real
//! PostgreSQL: the guarantees of SEMANTICS.md, proved concurrently where
//! they are about concurrency.

mod common;

use common::proxy::{connect, Proxy};
use common::sql::rows;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

fn col(row: &HashMap<String, Option<String>>, name: &str) -> String {
    row.get(name).cloned().flatten().unwrap_or_default()
}

async fn sql_error(client: &Client, sql: &str) -> tokio_postgres::error::DbError {
    let err = client.simple_query(sql).await.expect_err(sql);
    err.as_db_error()
        .cloned()
        .unwrap_or_else(|| panic!("{sql}: {err}"))
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

async fn ack_all(client: &Client, receipts: &[String]) -> Vec<String> {
    if receipts.is_empty() {
        return Vec::new();
    }
    let list: Vec<String> = receipts.iter().map(|r| quote(r)).collect();
    rows(client, &format!("ACK {}", list.join(", ")))
        .await
        .iter()
        .map(|r| col(r, "status"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_producers_and_consumers_lose_nothing_duplicate_nothing_and_keep_order() {
    ledgered_consumers("ordering", 4, 20).await;
}

/// The same ledger with eight consumers of 100 messages a POP: such POPs
/// are split by session over two lanes of their queue and group, so two
/// of their writes are in flight at once (engine/fusion/pop.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_of_many_messages_in_two_lanes_lose_nothing_duplicate_nothing_and_keep_order() {
    ledgered_consumers("ordering_split", 8, 100).await;
}

/// Two producers push 5,000 messages over 50 partitions while
/// `consumer_count` consumers POP up to `limit` messages (waiting) and ACK
/// them: every message is acknowledged exactly once, each consumer sees a
/// partition's offsets increase, and no two consumers ever hold one
/// partition at once.
async fn ledgered_consumers(name: &str, consumer_count: usize, limit: usize) {
    const PRODUCERS: usize = 2;
    const PER_PRODUCER: usize = 2_500;
    const PARTITIONS: usize = 50;
    let proxy = Proxy::start_with(name, |c| c.pool_size = 8).await;
    let admin = proxy.connect().await;
    admin.batch_execute("CREATE QUEUE work").await.unwrap();

    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let cfg = proxy.client_config();
        producers.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            let mut sent = Vec::new();
            for batch in 0..PER_PRODUCER / 50 {
                let mut values = Vec::new();
                for i in 0..50 {
                    let n = batch * 50 + i;
                    let txn = format!("p{p}-{n}");
                    let partition = format!("part-{}", (n * 7 + p) % PARTITIONS);
                    values.push(format!("('{{\"n\":{n}}}', '{partition}', '{txn}')"));
                    sent.push(txn);
                }
                let result = rows(
                    &client,
                    &format!(
                        "PUSH INTO work (payload, partition, transaction_id) VALUES {}",
                        values.join(", ")
                    ),
                )
                .await;
                assert!(result.iter().all(|r| col(r, "status") == "queued"));
            }
            sent
        }));
    }

    // (partition, consumer, held from, held until): a partition's messages
    // are held from the POP's answer until the ACK is sent.
    type Hold = (String, usize, Instant, Instant);
    let holds: Arc<Mutex<Vec<Hold>>> = Arc::default();
    let consumed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let total = PRODUCERS * PER_PRODUCER;
    let mut consumers = Vec::new();
    for c in 0..consumer_count {
        let cfg = proxy.client_config();
        let holds = holds.clone();
        let consumed = consumed.clone();
        consumers.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            let mut ledger: Vec<(String, i64, String)> = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(240);
            while consumed.load(std::sync::atomic::Ordering::SeqCst) < total {
                assert!(Instant::now() < deadline, "consumers did not finish");
                let popped = rows(
                    &client,
                    &format!("POP FROM work LIMIT {limit} WAIT '500ms'"),
                )
                .await;
                let got_at = Instant::now();
                if popped.is_empty() {
                    continue;
                }
                let partition = col(&popped[0], "partition");
                let mut receipts = Vec::new();
                for r in &popped {
                    assert_eq!(
                        col(r, "partition"),
                        partition,
                        "one POP claimed two partitions"
                    );
                    ledger.push((
                        partition.clone(),
                        col(r, "offset").parse().unwrap(),
                        col(r, "transaction_id"),
                    ));
                    receipts.push(col(r, "receipt"));
                }
                let released_at = Instant::now();
                holds
                    .lock()
                    .unwrap()
                    .push((partition, c, got_at, released_at));
                let statuses = ack_all(&client, &receipts).await;
                assert!(statuses.iter().all(|s| s == "acked"), "{statuses:?}");
                consumed.fetch_add(receipts.len(), std::sync::atomic::Ordering::SeqCst);
            }
            ledger
        }));
    }

    let mut produced = HashSet::new();
    for p in producers {
        for txn in p.await.unwrap() {
            assert!(produced.insert(txn));
        }
    }
    let mut acknowledged: HashMap<String, usize> = HashMap::new();
    for c in consumers {
        let ledger = c.await.unwrap();
        // Per partition, this consumer saw strictly increasing offsets.
        let mut last: HashMap<String, i64> = HashMap::new();
        for (partition, offset, txn) in ledger {
            if let Some(prev) = last.insert(partition.clone(), offset) {
                assert!(offset > prev, "{partition}: offset {offset} after {prev}");
            }
            *acknowledged.entry(txn).or_default() += 1;
        }
    }
    let lost: Vec<_> = produced
        .iter()
        .filter(|t| !acknowledged.contains_key(*t))
        .collect();
    let duplicated: Vec<_> = acknowledged.iter().filter(|(_, n)| **n > 1).collect();
    let unknown: Vec<_> = acknowledged
        .keys()
        .filter(|t| !produced.contains(*t))
        .collect();
    assert!(lost.is_empty(), "lost: {:?}", &lost[..lost.len().min(10)]);
    assert!(duplicated.is_empty(), "acknowledged twice: {duplicated:?}");
    assert!(unknown.is_empty(), "never produced: {unknown:?}");

    // No two consumers ever held one partition at the same time.
    let holds = holds.lock().unwrap();
    let mut by_partition: BTreeMap<&str, Vec<(usize, Instant, Instant)>> = BTreeMap::new();
    for (p, c, from, to) in holds.iter() {
        by_partition.entry(p).or_default().push((*c, *from, *to));
    }
    for (p, mut spans) in by_partition {
        spans.sort_by_key(|s| s.1);
        for w in spans.windows(2) {
            assert!(
                w[0].0 == w[1].0 || w[1].1 >= w[0].2,
                "{p}: consumers {} and {} held it at once",
                w[0].0,
                w[1].0
            );
        }
    }
}

#[tokio::test]
async fn every_group_receives_every_message() {
    let proxy = Proxy::start("fanout").await;
    let client = proxy.connect().await;
    let values: Vec<String> = (0..30)
        .map(|n| format!("('{{\"n\":{n}}}', 'p{}')", n % 3))
        .collect();
    rows(
        &client,
        &format!(
            "PUSH INTO events (payload, partition) VALUES {}",
            values.join(",")
        ),
    )
    .await;
    for group in ["audit", "billing"] {
        let mut seen = Vec::new();
        loop {
            let got = rows(
                &client,
                &format!("POP FROM events GROUP {group} LIMIT 7 PARTITIONS 3"),
            )
            .await;
            if got.is_empty() {
                break;
            }
            let receipts: Vec<String> = got.iter().map(|r| col(r, "receipt")).collect();
            seen.extend(got.iter().map(|r| col(r, "payload")));
            assert!(ack_all(&client, &receipts)
                .await
                .iter()
                .all(|s| s == "acked"));
        }
        seen.sort();
        // Payloads come back as the text that was pushed.
        let mut expected: Vec<String> = (0..30).map(|n| format!("{{\"n\":{n}}}")).collect();
        expected.sort();
        assert_eq!(seen.len(), 30, "{group}");
        assert_eq!(seen, expected, "{group}");
    }
    // Queue mode is a group of its own and still has everything.
    let got = rows(&client, "POP FROM events LIMIT 100 PARTITIONS 3").await;
    assert_eq!(got.len(), 30);
    // The same facts through the plain views BI tools read.
    let depth = rows(
        &client,
        "SELECT messages FROM queen.queue_depth WHERE queue = 'events'",
    )
    .await;
    assert_eq!(col(&depth[0], "messages"), "30");
    let lag = rows(
        &client,
        "SELECT lag FROM queen.group_lag WHERE queue = 'events' AND consumer_group = 'audit'",
    )
    .await;
    assert_eq!(col(&lag[0], "lag"), "0");
    let rate = rows(
        &client,
        "SELECT pushed_last_minute FROM queen.throughput WHERE queue = 'events'",
    )
    .await;
    assert_eq!(col(&rate[0], "pushed_last_minute"), "30");
}

#[tokio::test]
async fn an_expired_lease_redelivers_and_its_receipt_goes_stale() {
    let proxy = Proxy::start("lease").await;
    let client = proxy.connect().await;
    rows(&client, "PUSH INTO jobs VALUES ('{\"job\":1}')").await;
    let first = rows(&client, "POP FROM jobs LEASE 1").await;
    assert_eq!(first.len(), 1);
    assert_eq!(col(&first[0], "retry_count"), "0");
    assert!(
        rows(&client, "POP FROM jobs").await.is_empty(),
        "leased message delivered twice"
    );
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let again = rows(&client, "POP FROM jobs LEASE 30").await;
    assert_eq!(again.len(), 1);
    assert_eq!(col(&again[0], "message_id"), col(&first[0], "message_id"));
    assert_eq!(col(&again[0], "retry_count"), "1");
    assert_eq!(
        ack_all(&client, &[col(&first[0], "receipt")]).await,
        vec!["stale"]
    );
    // RENEW of the live lease extends it; of the dead one says NULL.
    let renewed = rows(
        &client,
        &format!(
            "RENEW {}, {} FOR 120",
            quote(&col(&again[0], "receipt")),
            quote(&col(&first[0], "receipt"))
        ),
    )
    .await;
    assert!(!col(&renewed[0], "lease_expires_at").is_empty());
    assert_eq!(renewed[1].get("lease_expires_at").cloned().flatten(), None);
    assert_eq!(
        ack_all(&client, &[col(&again[0], "receipt")]).await,
        vec!["acked"]
    );
    assert!(rows(&client, "POP FROM jobs").await.is_empty());
}

#[tokio::test]
async fn failures_retry_in_order_then_dead_letter() {
    let proxy = Proxy::start("failures").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE flaky WITH (retry_limit = 2, retry_delay = '300ms')")
        .await
        .unwrap();
    rows(
        &client,
        "PUSH INTO flaky VALUES ('{\"n\":0}'), ('{\"n\":1}'), ('{\"n\":2}')",
    )
    .await;
    for attempt in 0..=2 {
        let got = rows(&client, "POP FROM flaky LIMIT 3 WAIT 5").await;
        let offsets: Vec<String> = got.iter().map(|r| col(r, "offset")).collect();
        assert_eq!(
            offsets,
            vec!["0", "1", "2"],
            "attempt {attempt}: redelivered in order"
        );
        assert!(got
            .iter()
            .all(|r| col(r, "retry_count") == attempt.to_string()));
        let started = Instant::now();
        let status = rows(
            &client,
            &format!(
                "ACK {} FAILED REASON 'boom {attempt}'",
                quote(&col(&got[0], "receipt"))
            ),
        )
        .await;
        let expected = if attempt < 2 {
            "retry"
        } else {
            "dead_lettered"
        };
        assert_eq!(col(&status[0], "status"), expected);
        if attempt < 2 {
            // Blocked for retry_delay.
            assert!(rows(&client, "POP FROM flaky LIMIT 3").await.is_empty());
            assert!(started.elapsed() < Duration::from_millis(300));
        }
    }
    // The dead letter is gone from the queue; the rest comes next.
    let rest = rows(&client, "POP FROM flaky LIMIT 3 WAIT 5").await;
    let offsets: Vec<String> = rest.iter().map(|r| col(r, "offset")).collect();
    assert_eq!(offsets, vec!["1", "2"]);
    let dlq = rows(&client, "SHOW DLQ FROM flaky").await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(col(&dlq[0], "offset"), "0");
    assert_eq!(col(&dlq[0], "reason"), "boom 2");
    assert_eq!(col(&dlq[0], "payload"), "{\"n\":0}");
    assert_eq!(col(&dlq[0], "retry_count"), "3");
    let queues = rows(&client, "SHOW QUEUES").await;
    let flaky = queues.iter().find(|r| col(r, "queue") == "flaky").unwrap();
    assert_eq!(col(flaky, "dead_lettered"), "1");
}

#[tokio::test]
async fn repeated_transaction_ids_are_duplicates() {
    let proxy = Proxy::start("dedup").await;
    let client = proxy.connect().await;
    let first = rows(
        &client,
        "PUSH INTO d (payload, transaction_id) VALUES ('1', 'a'), ('2', 'b'), ('3', 'a')",
    )
    .await;
    let statuses: Vec<String> = first.iter().map(|r| col(r, "status")).collect();
    assert_eq!(statuses, vec!["queued", "queued", "duplicate"]);
    assert_eq!(col(&first[2], "message_id"), col(&first[0], "message_id"));
    assert_eq!(col(&first[2], "offset"), col(&first[0], "offset"));

    let again = rows(
        &client,
        "PUSH INTO d (payload, transaction_id) VALUES ('4', 'b'), ('5', 'c')",
    )
    .await;
    assert_eq!(col(&again[0], "status"), "duplicate");
    assert_eq!(col(&again[0], "message_id"), col(&first[1], "message_id"));
    assert_eq!(col(&again[1], "status"), "queued");
    assert_eq!(col(&again[1], "offset"), "2");

    // Inside a transaction block: a duplicate does not abort it.
    client.batch_execute("BEGIN").await.unwrap();
    let inside = rows(
        &client,
        "PUSH INTO d (payload, transaction_id) VALUES ('6', 'c')",
    )
    .await;
    assert_eq!(col(&inside[0], "status"), "duplicate");
    let inside = rows(
        &client,
        "PUSH INTO d (payload, transaction_id) VALUES ('7', 'e')",
    )
    .await;
    assert_eq!(col(&inside[0], "status"), "queued");
    client.batch_execute("COMMIT").await.unwrap();

    let all = rows(&client, "POP FROM d LIMIT 100").await;
    let payloads: Vec<String> = all.iter().map(|r| col(r, "payload")).collect();
    assert_eq!(payloads, vec!["1", "2", "5", "7"]);
}

/// A partition created by a push that is then refused (a duplicate in
/// another partition, or the queue full) stays empty: its first message,
/// written later, has offset 0 and nothing is skipped before it. A push
/// with nothing to check creates its partitions with their offsets already
/// allocated, so this guards the paths that must not.
#[tokio::test]
async fn a_partition_created_by_a_refused_push_starts_at_offset_zero() {
    let proxy = Proxy::start("born_empty").await;
    let client = proxy.connect().await;
    rows(
        &client,
        "PUSH INTO bq (payload, partition, transaction_id) VALUES ('1', 'x', 'a')",
    )
    .await;
    // 'a' is a duplicate in x: the call writes nothing, creates y, and the
    // engine writes 'b' alone on its second call.
    let mixed = rows(
        &client,
        "PUSH INTO bq (payload, partition, transaction_id) VALUES ('2', 'x', 'a'), ('3', 'y', 'b'), ('4', 'z', NULL)",
    )
    .await;
    let got: Vec<(String, String)> = mixed
        .iter()
        .map(|r| (col(r, "status"), col(r, "offset")))
        .collect();
    assert_eq!(
        got,
        vec![
            ("duplicate".to_string(), "0".to_string()),
            ("queued".to_string(), "0".to_string()),
            ("queued".to_string(), "0".to_string()),
        ]
    );

    client
        .batch_execute("CREATE QUEUE full_q WITH (max_queue_size = 1)")
        .await
        .unwrap();
    let refused = client
        .simple_query("PUSH INTO full_q (payload, partition) VALUES ('1', 'p'), ('2', 'p')")
        .await
        .expect_err("two messages into a queue of one");
    assert_eq!(refused.code().map(|c| c.code()), Some("54000"));
    let one = rows(
        &client,
        "PUSH INTO full_q (payload, partition) VALUES ('1', 'p')",
    )
    .await;
    assert_eq!(col(&one[0], "offset"), "0");
    for (queue, partition, payload) in [("bq", "y", "3"), ("bq", "z", "4"), ("full_q", "p", "1")] {
        let popped = rows(
            &client,
            &format!("POP FROM {queue} PARTITION '{partition}' LIMIT 10 AUTO ACK"),
        )
        .await;
        let payloads: Vec<String> = popped.iter().map(|r| col(r, "payload")).collect();
        assert_eq!(payloads, vec![payload.to_string()], "{queue}/{partition}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_pop_wakes_on_a_push_through_this_or_another_queenwire() {
    let proxy = Proxy::start("longpoll").await;
    let other = Proxy::start_on(proxy.direct.clone(), |_| {}).await;
    for (pusher, label) in [(&proxy, "same"), (&other, "other")] {
        let waiter = proxy.connect().await;
        let push_client = pusher.connect().await;
        let queue = format!("lp_{label}");
        let started = Instant::now();
        let wait = tokio::spawn(async move {
            let got = rows(&waiter, &format!("POP FROM {queue} WAIT 10")).await;
            (got, Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pushed_at = Instant::now();
        rows(
            &push_client,
            &format!("PUSH INTO lp_{label} VALUES ('\"wake\"')"),
        )
        .await;
        let (got, woke_at) = wait.await.unwrap();
        assert_eq!(got.len(), 1, "{label}");
        assert!(
            woke_at.duration_since(pushed_at) < Duration::from_secs(1),
            "{label}: woke {:?} after the push",
            woke_at.duration_since(pushed_at)
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    // A wait with nothing to wake it returns no rows at its end.
    let client = proxy.connect().await;
    let started = Instant::now();
    assert!(rows(&client, "POP FROM lp_empty WAIT '700ms'")
        .await
        .is_empty());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(650) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
}

/// A wake-up wakes one waiting POP of each group, and each POP that finds
/// messages passes it on; POPs naming a partition are all woken. The
/// consumers have waited long enough that their safety-net poll is 2 s
/// apart, so a wake-up that never reached one shows as a delivery more than
/// a second after the push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_into_many_partitions_reaches_every_waiting_pop_of_every_group() {
    let proxy = Proxy::start("wake_chain").await;
    let setup = proxy.connect().await;
    // The queue and the groups exist before anyone waits (a group's first
    // POP subscribes it from the beginning).
    rows(
        &setup,
        "PUSH INTO wq (payload, partition) VALUES ('0', 'p0')",
    )
    .await;
    for group in ["ga", "gb"] {
        let got = rows(&setup, &format!("POP FROM wq GROUP {group} AUTO ACK")).await;
        assert_eq!(got.len(), 1);
    }
    rows(&setup, "POP FROM wq PARTITION p0 GROUP gn AUTO ACK").await;
    // A POP naming a partition nothing is pushed into, waiting first: were
    // the named POPs woken one at a time like a group's, the wake-up would
    // reach this one, which finds nothing and passes nothing on.
    let idle = {
        let client = proxy.connect().await;
        tokio::spawn(async move {
            rows(
                &client,
                "POP FROM wq PARTITION p9 GROUP gn LIMIT 10 WAIT 6 AUTO ACK",
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waits = [
        ("ga", ""),
        ("ga", ""),
        ("ga", ""),
        ("ga", ""),
        ("gb", ""),
        ("gb", ""),
        ("gn", "PARTITION p3 "),
        ("gn", "PARTITION p5 "),
    ];
    let mut consumers = Vec::new();
    for (group, partition) in waits {
        let client = proxy.connect().await;
        let sql = format!("POP FROM wq {partition}GROUP {group} LIMIT 10 WAIT 30 AUTO ACK");
        consumers.push(tokio::spawn(async move {
            let got = rows(&client, &sql).await;
            (group, got, Instant::now())
        }));
    }
    // Polls after 0.25, 0.75, 1.75 and 3.75 s, then every 2 s.
    tokio::time::sleep(Duration::from_millis(4_200)).await;
    let values: Vec<String> = (1..=6).map(|n| format!("('{n}', 'p{n}')")).collect();
    let pusher = proxy.connect().await;
    let pushed_at = Instant::now();
    rows(
        &pusher,
        &format!(
            "PUSH INTO wq (payload, partition) VALUES {}",
            values.join(",")
        ),
    )
    .await;
    let mut by_group: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for c in consumers {
        let (group, got, at) = c.await.unwrap();
        let after = at.duration_since(pushed_at);
        assert!(
            after < Duration::from_secs(1),
            "a POP of {group} returned {after:?} after the push: it was not woken"
        );
        assert!(!got.is_empty(), "{group} woke with nothing");
        for r in &got {
            by_group.entry(group).or_default().push(col(r, "partition"));
        }
    }
    // One partition per POP (PARTITIONS 1), never the same one twice in a
    // group: ga's four waiters got four of the six, gb's two got two, and
    // each named POP its own partition.
    for (group, want) in [("ga", 4), ("gb", 2), ("gn", 2)] {
        let parts = &by_group[group];
        let distinct: HashSet<&String> = parts.iter().collect();
        assert_eq!(distinct.len(), want, "{group}: {parts:?}");
        assert_eq!(parts.len(), want, "{group}: {parts:?}");
    }
    let mut named = by_group["gn"].clone();
    named.sort();
    assert_eq!(named, vec!["p3", "p5"]);
    assert!(idle.await.unwrap().is_empty());
}

#[tokio::test]
async fn a_waiting_pop_holds_no_backend_connection() {
    let proxy = Proxy::start_with("longpoll_pool", |c| c.pool_size = 1).await;
    let waiter = proxy.connect().await;
    let wait = tokio::spawn(async move { rows(&waiter, "POP FROM idle_q WAIT 5").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // With a pool of one, this works only if the waiter gave its connection back.
    let client = proxy.connect().await;
    let started = Instant::now();
    client.simple_query("SELECT 1").await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    rows(&client, "PUSH INTO idle_q VALUES ('1')").await;
    assert_eq!(wait.await.unwrap().len(), 1);
}

#[tokio::test]
async fn queue_work_joins_the_surrounding_transaction() {
    let proxy = Proxy::start("transactions").await;
    let client = proxy.connect().await;
    rows(&client, "PUSH INTO inbox VALUES ('{\"a\":1}')").await;
    let depth = |q: &'static str| {
        let client = &client;
        async move {
            let r = rows(client, "SHOW QUEUES").await;
            r.iter()
                .find(|row| col(row, "queue") == q)
                .map(|row| (col(row, "messages"), col(row, "pending")))
        }
    };
    let inbox_before = depth("inbox").await;

    for finish in ["ROLLBACK", "COMMIT"] {
        client.batch_execute("BEGIN").await.unwrap();
        let got = rows(&client, "POP FROM inbox").await;
        assert_eq!(got.len(), 1, "{finish}");
        rows(&client, "PUSH INTO outbox VALUES ('{\"b\":1}')").await;
        assert_eq!(
            ack_all(&client, &[col(&got[0], "receipt")]).await,
            vec!["acked"]
        );
        client.batch_execute(finish).await.unwrap();
        if finish == "ROLLBACK" {
            assert_eq!(depth("inbox").await, inbox_before);
            assert_eq!(depth("outbox").await, None);
            // The message is still there for the next consumer.
        } else {
            assert_eq!(depth("outbox").await, Some(("1".into(), "1".into())));
            assert!(rows(&client, "POP FROM inbox").await.is_empty());
        }
    }

    // A client killed mid-transaction leaves both queues as they were.
    rows(&client, "PUSH INTO inbox VALUES ('{\"a\":2}')").await;
    let before = (depth("inbox").await, depth("outbox").await);
    {
        let victim = proxy.connect().await;
        victim.batch_execute("BEGIN").await.unwrap();
        let got = rows(&victim, "POP FROM inbox").await;
        assert_eq!(got.len(), 1);
        rows(&victim, "PUSH INTO outbox VALUES ('{\"b\":2}')").await;
        ack_all(&victim, &[col(&got[0], "receipt")]).await;
    } // dropped: the socket closes mid-transaction
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((depth("inbox").await, depth("outbox").await), before);
    assert_eq!(rows(&client, "POP FROM inbox").await.len(), 1);
}

#[tokio::test]
async fn bad_input_gets_a_clear_error_and_the_session_goes_on() {
    let proxy = Proxy::start_with("bad_input", |c| c.max_payload = 1000).await;
    let client = proxy.connect().await;
    let e = sql_error(&client, "POP FROM").await;
    assert_eq!(e.code().code(), "42601");
    assert!(e.position().is_some());
    let e = sql_error(&client, "PUSH INTO q VALUES ('{not json')").await;
    assert_eq!(e.code().code(), "22P02");
    let big = format!("\"{}\"", "x".repeat(2000));
    let e = sql_error(&client, &format!("PUSH INTO q VALUES ('{big}')")).await;
    assert_eq!(e.code().code(), "54000");
    let e = sql_error(
        &client,
        "ACK 'AQAAAAAAAAABAAAAAAAAAAAFkKiIhvJAl4iGp295-F-gZzELHnYsD3ydqyqBrF4WN0we'",
    )
    .await;
    assert_eq!(e.code().code(), "22P02");
    let e = sql_error(&client, "ACK 'not a receipt at all'").await;
    assert_eq!(e.code().code(), "22P02");
    let e = sql_error(&client, "CREATE QUEUE q WITH (no_such_option = 1)").await;
    assert_eq!(e.code().code(), "22023");
    assert!(e.message().contains("lease_time"), "{}", e.message());
    let e = sql_error(&client, "SHOW PARTITIONS FROM missing").await;
    assert_eq!(e.code().code(), "42704");
    // A failed statement changed nothing and the session is fine.
    assert!(rows(&client, "SHOW QUEUES").await.is_empty());
    assert_eq!(rows(&client, "SELECT 1 AS one").await.len(), 1);
    // The same through the extended protocol, with a bad parameter.
    let stmt = client.prepare("ACK $1").await.unwrap();
    let e = client.query(&stmt, &[&"forged"]).await.unwrap_err();
    assert_eq!(e.code().unwrap().code(), "22P02");
    client.query_one("SELECT 1", &[]).await.unwrap();
}

#[tokio::test]
async fn describe_reports_the_dialect_columns_and_types() {
    use tokio_postgres::types::Type;
    let proxy = Proxy::start("describe").await;
    let client = proxy.connect().await;
    let cases: Vec<(&str, Vec<(&str, Type)>)> = vec![
        (
            "PUSH INTO q VALUES ($1)",
            vec![
                ("message_id", Type::UUID),
                ("queue", Type::TEXT),
                ("partition", Type::TEXT),
                ("offset", Type::INT8),
                ("transaction_id", Type::TEXT),
                ("status", Type::TEXT),
            ],
        ),
        (
            "POP FROM q GROUP g LIMIT $1 WAIT 1",
            vec![
                ("receipt", Type::TEXT),
                ("message_id", Type::UUID),
                ("queue", Type::TEXT),
                ("partition", Type::TEXT),
                ("offset", Type::INT8),
                ("payload", Type::JSONB),
                ("transaction_id", Type::TEXT),
                ("trace_id", Type::TEXT),
                ("retry_count", Type::INT4),
                ("created_at", Type::TIMESTAMPTZ),
                ("lease_expires_at", Type::TIMESTAMPTZ),
            ],
        ),
        (
            "ACK $1",
            vec![("receipt", Type::TEXT), ("status", Type::TEXT)],
        ),
        (
            "RENEW $1 FOR 30",
            vec![
                ("receipt", Type::TEXT),
                ("lease_expires_at", Type::TIMESTAMPTZ),
            ],
        ),
        ("CREATE QUEUE IF NOT EXISTS q", vec![]),
        (
            "SHOW QUEUES",
            vec![
                ("queue", Type::TEXT),
                ("partitions", Type::INT8),
                ("messages", Type::INT8),
                ("pending", Type::INT8),
                ("dead_lettered", Type::INT8),
                ("created_at", Type::TIMESTAMPTZ),
                ("storage", Type::TEXT),
            ],
        ),
    ];
    for (sql, expected) in cases {
        let stmt = client
            .prepare(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let got: Vec<(&str, Type)> = stmt
            .columns()
            .iter()
            .map(|c| (c.name(), c.type_().clone()))
            .collect();
        assert_eq!(got, expected, "{sql}");
    }
    let stmt = client.prepare("POP FROM q LIMIT $1 WAIT $2").await.unwrap();
    assert_eq!(stmt.params(), &[Type::INT4, Type::TEXT]);
    // And the prepared POP runs with binary parameters and results.
    client
        .batch_execute("PUSH INTO q VALUES ('{\"x\":1}')")
        .await
        .unwrap();
    let popped = client.query(&stmt, &[&5i32, &"1s"]).await.unwrap();
    assert_eq!(popped.len(), 1);
    let offset: i64 = popped[0].get("offset");
    assert_eq!(offset, 0);
    let receipt: String = popped[0].get("receipt");
    let ack = client.prepare("ACK $1").await.unwrap();
    let acked = client.query_one(&ack, &[&receipt]).await.unwrap();
    assert_eq!(acked.get::<_, String>("status"), "acked");
}

#[tokio::test]
async fn queue_administration() {
    let proxy = Proxy::start("admin").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE adm WITH (lease_time = 30, retry_limit = 1)")
        .await
        .unwrap();
    let e = sql_error(&client, "CREATE QUEUE adm").await;
    assert_eq!(e.code().code(), "42710");
    client
        .batch_execute("CREATE QUEUE IF NOT EXISTS adm WITH (lease_time = 99)")
        .await
        .unwrap();
    client
        .batch_execute("ALTER QUEUE adm SET (retry_delay = '2s')")
        .await
        .unwrap();
    let direct = proxy.connect_direct().await;
    let row = direct
        .query_one(
            "SELECT lease_time, retry_limit, retry_delay FROM queen.queues WHERE name = 'adm'",
            &[],
        )
        .await
        .unwrap();
    // IF NOT EXISTS changed nothing; ALTER changed only what it named.
    assert_eq!(
        (
            row.get::<_, i32>(0),
            row.get::<_, i32>(1),
            row.get::<_, i32>(2)
        ),
        (30, 1, 2000)
    );
    let e = sql_error(&client, "ALTER QUEUE nope SET (retry_limit = 1)").await;
    assert_eq!(e.code().code(), "42704");

    rows(
        &client,
        "PUSH INTO adm PARTITION a VALUES ('1'), ('2'), ('3')",
    )
    .await;
    // A group reads two, acks them, then seeks back to the beginning.
    let got = rows(&client, "POP FROM adm GROUP g LIMIT 2").await;
    let receipts: Vec<String> = got.iter().map(|r| col(r, "receipt")).collect();
    ack_all(&client, &receipts).await;
    let groups = rows(&client, "SHOW GROUPS ON adm").await;
    let g = groups.iter().find(|r| col(r, "group") == "g").unwrap();
    assert_eq!(col(g, "lag"), "1");
    client
        .batch_execute("SEEK GROUP g ON adm TO BEGINNING")
        .await
        .unwrap();
    let again = rows(&client, "POP FROM adm GROUP g LIMIT 10").await;
    assert_eq!(again.len(), 3);
    client
        .batch_execute("SEEK GROUP g ON adm PARTITION a TO END")
        .await
        .unwrap();
    assert!(rows(&client, "POP FROM adm GROUP g").await.is_empty());
    client.batch_execute("DROP GROUP g ON adm").await.unwrap();
    // A dropped group subscribes afresh (from the beginning).
    assert_eq!(
        rows(&client, "POP FROM adm GROUP g LIMIT 10").await.len(),
        3
    );
    // A group that subscribes FROM NOW sees only later messages.
    assert!(rows(&client, "POP FROM adm GROUP late SUBSCRIBE FROM NOW")
        .await
        .is_empty());
    rows(&client, "PUSH INTO adm PARTITION a VALUES ('4')").await;
    let late = rows(&client, "POP FROM adm GROUP late LIMIT 10").await;
    assert_eq!(
        late.iter().map(|r| col(r, "payload")).collect::<Vec<_>>(),
        vec!["4"]
    );

    let parts = rows(&client, "SHOW PARTITIONS FROM adm").await;
    assert_eq!(col(&parts[0], "partition"), "a");
    assert_eq!(col(&parts[0], "last_offset"), "3");

    client.batch_execute("DROP QUEUE adm").await.unwrap();
    assert!(rows(&client, "SHOW QUEUES").await.is_empty());
    let n: i64 = direct
        .query_one("SELECT count(*) FROM queen.log_partitions", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    let e = sql_error(&client, "DROP QUEUE adm").await;
    assert_eq!(e.code().code(), "42704");
    client
        .batch_execute("DROP QUEUE IF EXISTS adm")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_acknowledged_before_a_kill_9_survive_it() {
    use std::process::{Command, Stdio};
    let direct = common::cluster::fresh_database("durability");
    let cluster = common::cluster::cluster();
    let backend = format!(
        "host={} port={} user={} dbname={}",
        cluster.socket_dir().display(),
        cluster.port(),
        cluster.user(),
        direct.get_dbname().unwrap()
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_queenwire"))
            .args([
                "--backend",
                &backend,
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1").port(port).user("t").dbname("t");
    let connect_retrying = |cfg: tokio_postgres::Config| async move {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok((client, conn)) = cfg.connect(tokio_postgres::NoTls).await {
                tokio::spawn(conn);
                return client;
            }
            assert!(Instant::now() < deadline, "queenwire did not come up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };

    let mut child = spawn();
    let _ = connect_retrying(cfg.clone()).await;
    let acknowledged: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut pushers = Vec::new();
    for p in 0..4 {
        let client = connect_retrying(cfg.clone()).await;
        let acknowledged = acknowledged.clone();
        pushers.push(tokio::spawn(async move {
            for n in 0.. {
                let txn = format!("{p}-{n}");
                let sql =
                    format!("PUSH INTO durable (payload, transaction_id) VALUES ('{n}', '{txn}')");
                match client.simple_query(&sql).await {
                    Ok(_) => acknowledged.lock().unwrap().push(txn),
                    Err(_) => return,
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    for p in pushers {
        p.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() > 20,
        "only {} pushes before the kill",
        acknowledged.len()
    );

    let mut child = spawn();
    let client = connect_retrying(cfg.clone()).await;
    let mut popped = HashSet::new();
    loop {
        let got = rows(
            &client,
            "POP FROM durable GROUP check LIMIT 10000 PARTITIONS 10 AUTO ACK",
        )
        .await;
        if got.is_empty() {
            break;
        }
        popped.extend(got.iter().map(|r| col(r, "transaction_id")));
    }
    let missing: Vec<_> = acknowledged
        .iter()
        .filter(|t| !popped.contains(*t))
        .collect();
    assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fused_pushes_fail_alone_and_dedup_across_statements() {
    let proxy = Proxy::start_with("fusion", |c| c.pool_size = 4).await;
    let admin = proxy.connect().await;
    admin
        .batch_execute("CREATE QUEUE capped WITH (max_queue_size = 50)")
        .await
        .unwrap();
    // 16 clients race single-row pushes into a queue that takes 50.
    let mut tasks = Vec::new();
    for c in 0..16 {
        let cfg = proxy.client_config();
        tasks.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            let (mut queued, mut refused) = (Vec::new(), 0);
            for n in 0..10 {
                let sql = format!(
                    "PUSH INTO capped (payload, transaction_id) VALUES ('{n}', 'c{c}-{n}')"
                );
                match client.simple_query(&sql).await {
                    Ok(_) => queued.push(format!("c{c}-{n}")),
                    Err(e) => {
                        assert_eq!(e.code().unwrap().code(), "54000", "{e}");
                        refused += 1;
                    }
                }
            }
            (queued, refused)
        }));
    }
    let mut queued = HashSet::new();
    let mut refused = 0;
    for t in tasks {
        let (q, r) = t.await.unwrap();
        queued.extend(q);
        refused += r;
    }
    assert_eq!(queued.len(), 50, "{refused} refused");
    assert_eq!(refused, 110);
    let popped: HashSet<String> = rows(&admin, "POP FROM capped LIMIT 1000 AUTO ACK")
        .await
        .iter()
        .map(|r| col(r, "transaction_id"))
        .collect();
    assert_eq!(
        popped, queued,
        "the queue holds exactly the pushes that said queued"
    );

    // 8 clients push the same transaction id at once: one is queued.
    let mut tasks = Vec::new();
    for c in 0..8 {
        let cfg = proxy.client_config();
        tasks.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            let r = rows(
                &client,
                &format!("PUSH INTO once (payload, transaction_id) VALUES ('{c}', 'same')"),
            )
            .await;
            (
                col(&r[0], "status"),
                col(&r[0], "message_id"),
                col(&r[0], "offset"),
            )
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    assert_eq!(
        results.iter().filter(|r| r.0 == "queued").count(),
        1,
        "{results:?}"
    );
    let ids: HashSet<&String> = results.iter().map(|r| &r.1).collect();
    assert_eq!(
        ids.len(),
        1,
        "duplicates must name the original: {results:?}"
    );
    assert!(results.iter().all(|r| r.2 == "0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_single_pushes_keep_offsets_dense_and_unique() {
    let proxy = Proxy::start_with("fusion_offsets", |c| c.pool_size = 4).await;
    let mut tasks = Vec::new();
    for c in 0..12 {
        let cfg = proxy.client_config();
        tasks.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            let mut offsets = Vec::new();
            for n in 0..25 {
                let r = rows(
                    &client,
                    &format!("PUSH INTO dense VALUES ('{{\"c\":{c},\"n\":{n}}}')"),
                )
                .await;
                offsets.push(col(&r[0], "offset").parse::<i64>().unwrap());
            }
            // One client's pushes commit in its order.
            assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");
            offsets
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    assert_eq!(all, (0..300).collect::<Vec<i64>>());
    let direct = proxy.connect_direct().await;
    let segments: i64 = direct
        .query_one("SELECT count(*) FROM queen.log_segments", &[])
        .await
        .unwrap()
        .get(0);
    assert!(segments <= 300, "{segments} segments for 300 pushes");
}

/// A push into partitions this queenwire has written to names them by the
/// ids its earlier pushes were answered with (`log_push_ids_v1`, engine
/// `queues/placed.rs`). When the queue is no longer as that path needs it
/// (a size limit set since) or the ids are gone (the queue dropped and
/// made again), the statement is written by name instead: the limit holds,
/// and the new queue's partitions start at offset 0 and deliver in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_by_known_partition_ids_follow_the_queue_as_it_changes() {
    let proxy = Proxy::start("push_ids").await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    let push = |queue: &str, partition: &str, n: usize| {
        format!("PUSH INTO {queue} (partition, payload) VALUES ('{partition}', '{n}')")
    };
    for queue in ["kq", "dq"] {
        client
            .batch_execute(&format!("CREATE QUEUE {queue}"))
            .await
            .unwrap();
        for n in 0..2 {
            for partition in ["a", "b"] {
                let r = rows(&client, &push(queue, partition, n)).await;
                assert_eq!(col(&r[0], "offset"), n.to_string());
            }
        }
    }
    // The next pushes go by id: seen as a backend's last statement.
    let mut by_id = false;
    for n in 2..50 {
        let r = rows(&client, &push("kq", "a", n)).await;
        assert_eq!(col(&r[0], "offset"), n.to_string());
        let seen: i64 = direct
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE query LIKE '%queen.log\\_push\\_ids\\_v1(%' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if seen > 0 {
            by_id = true;
            break;
        }
    }
    assert!(by_id, "no push named its partition by id");
    // A size limit set since: the queue holds more than it allows.
    client
        .batch_execute("ALTER QUEUE kq SET (max_queue_size = 2)")
        .await
        .unwrap();
    let refused = client
        .simple_query(&push("kq", "b", 9))
        .await
        .expect_err("a push past the size limit");
    assert_eq!(refused.code().map(|c| c.code()), Some("54000"), "{refused}");
    // Ids gone: dq dropped and made again under the same name.
    client.batch_execute("DROP QUEUE dq").await.unwrap();
    client.batch_execute("CREATE QUEUE dq").await.unwrap();
    for n in 0..3 {
        let r = rows(&client, &push("dq", "a", n)).await;
        assert_eq!(col(&r[0], "status"), "queued");
        assert_eq!(col(&r[0], "offset"), n.to_string());
    }
    let popped = rows(&client, "POP FROM dq PARTITION 'a' LIMIT 10 AUTO ACK").await;
    let payloads: Vec<String> = popped.iter().map(|r| col(r, "payload")).collect();
    assert_eq!(payloads, vec!["0", "1", "2"]);
}

/// Pushes of many sessions into several queues of a tenant are fused into
/// one call and one commit (engine `fusion/push.rs`): each session's
/// statements keep their order per (queue, partition), every queued message
/// is in its queue once, offsets stay dense, a transaction id names a
/// duplicate only within its own queue and partition, and some commit
/// wrote segments of more than one queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_into_several_queues_share_commits_and_lose_nothing() {
    let proxy = Proxy::start_with("fusion_queues", |c| c.pool_size = 4).await;
    let mut tasks = Vec::new();
    for c in 0..8usize {
        let cfg = proxy.client_config();
        tasks.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            // (queue, partition, offset, payload) of each queued row.
            let mut queued = Vec::new();
            for n in 0..31usize {
                // The first 15 statements have transaction ids (2k and
                // 2k+1 share one but go to different queues); the others
                // none (log_push_many_v1's set-based path), but the last,
                // which repeats statement 0.
                let (q, txn) = if n == 30 {
                    (c % 4, 0)
                } else {
                    ((c + n) % 4, n / 2)
                };
                let partition = format!("p{}", c % 3);
                let payload = format!("{{\"c\":{c},\"n\":{n}}}");
                let txn = if n < 15 || n == 30 {
                    format!("'c{c}-{txn}'")
                } else {
                    "NULL".to_string()
                };
                let r = rows(
                    &client,
                    &format!(
                        "PUSH INTO mq{q} (partition, payload, transaction_id) \
                         VALUES ('{partition}', '{payload}', {txn})"
                    ),
                )
                .await;
                let status = col(&r[0], "status");
                if n == 30 {
                    assert_eq!(status, "duplicate", "a repeat within its queue: {r:?}");
                    continue;
                }
                assert_eq!(status, "queued", "statement {n} of client {c}: {r:?}");
                let offset: i64 = col(&r[0], "offset").parse().unwrap();
                queued.push((q, partition, offset, payload));
            }
            // One client's pushes commit in its order, per partition.
            let mut last: HashMap<(usize, String), i64> = HashMap::new();
            for (q, p, offset, _) in &queued {
                if let Some(before) = last.insert((*q, p.clone()), *offset) {
                    assert!(before < *offset, "mq{q}/{p}: {before} then {offset}");
                }
            }
            queued
        }));
    }
    let mut expected: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut per_partition: BTreeMap<(usize, String), Vec<i64>> = BTreeMap::new();
    for t in tasks {
        for (q, p, offset, payload) in t.await.unwrap() {
            expected.entry(q).or_default().push(payload);
            per_partition.entry((q, p)).or_default().push(offset);
        }
    }
    for ((q, p), mut offsets) in per_partition {
        offsets.sort();
        let n = offsets.len() as i64;
        assert_eq!(offsets, (0..n).collect::<Vec<i64>>(), "mq{q}/{p}");
    }
    let admin = proxy.connect().await;
    for (q, mut payloads) in expected {
        // A POP takes one partition: until one finds nothing.
        let mut popped: Vec<String> = Vec::new();
        loop {
            let got = rows(&admin, &format!("POP FROM mq{q} LIMIT 1000 AUTO ACK")).await;
            if got.is_empty() {
                break;
            }
            popped.extend(got.iter().map(|r| col(r, "payload").replace(' ', "")));
        }
        popped.sort();
        payloads.sort();
        assert_eq!(
            popped, payloads,
            "mq{q} holds exactly its queued pushes, once each"
        );
    }
    let direct = proxy.connect_direct().await;
    let shared: i64 = direct
        .query_one(
            "SELECT count(*) FROM (SELECT s.xmin::text FROM queen.log_segments s \
             JOIN queen.log_partitions p ON p.id = s.partition_id \
             GROUP BY 1 HAVING count(DISTINCT p.queue_id) > 1) x",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(shared > 0, "no commit wrote into more than one queue");
}

/// A fused push waits for a lock at most briefly: while a client's
/// transaction block holds a partition it pushed to, pushes into that
/// queue wait for it, and pushes into the tenant's other queues go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_waiting_for_a_lock_holds_up_its_queue_only() {
    let proxy = Proxy::start_with("fusion_held", |c| c.pool_size = 4).await;
    let holder = proxy.connect().await;
    for q in ["held", "free"] {
        rows(
            &holder,
            &format!("PUSH INTO {q} VALUES ('{{\"first\":true}}')"),
        )
        .await;
    }
    holder
        .batch_execute("BEGIN; PUSH INTO held VALUES ('{\"block\":true}')")
        .await
        .unwrap();
    let bound = Duration::from_secs(30);
    let mut waiting = Vec::new();
    for w in 0..3 {
        let cfg = proxy.client_config();
        waiting.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            let r = rows(&client, &format!("PUSH INTO held VALUES ('{{\"w\":{w}}}')")).await;
            col(&r[0], "offset").parse::<i64>().unwrap()
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let other = proxy.connect().await;
    for n in 0..5 {
        let sql = format!("PUSH INTO free VALUES ('{{\"n\":{n}}}')");
        let r = tokio::time::timeout(bound, rows(&other, &sql))
            .await
            .expect("a push into another queue waits for the held one");
        assert_eq!(col(&r[0], "offset"), (n + 1).to_string());
    }
    assert!(
        waiting.iter().all(|w| !w.is_finished()),
        "pushed past a held lock"
    );
    holder.batch_execute("COMMIT").await.unwrap();
    let mut offsets = Vec::new();
    for w in waiting {
        offsets.push(
            tokio::time::timeout(bound, w)
                .await
                .expect("held pushes end")
                .unwrap(),
        );
    }
    offsets.sort();
    assert_eq!(offsets, vec![2, 3, 4], "after the block's own at 1");
    let r = rows(&other, "PUSH INTO held VALUES ('{\"after\":true}')").await;
    assert_eq!(col(&r[0], "offset"), "5");
}

/// Statements of 16 rows or more for a partition are framed by their own
/// sessions and written as a segment each, fused with others (engine
/// `PreparedPush::pre_encode`); smaller ones share a segment. Every message
/// must be stored at the offset its PUSH reported, each client's in its
/// order, and no segment may mix a large statement with another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_fused_pushes_keep_a_segment_each_and_every_offset() {
    let proxy = Proxy::start_with("fusion_framed", |c| c.pool_size = 4).await;
    let mut tasks = Vec::new();
    for c in 0..8 {
        let cfg = proxy.client_config();
        tasks.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            let mut stored = Vec::new();
            for n in 0..12 {
                // Every third statement a single row, the others 20, two
                // of them into two partitions at once.
                let values: Vec<String> = match n % 3 {
                    0 => vec![format!("('{{\"c\":{c},\"n\":{n},\"i\":0}}')")],
                    1 => (0..20)
                        .map(|i| format!("('{{\"c\":{c},\"n\":{n},\"i\":{i}}}')"))
                        .collect(),
                    _ => (0..40)
                        .map(|i| {
                            let p = if i % 2 == 0 { "even" } else { "odd" };
                            format!("('{{\"c\":{c},\"n\":{n},\"i\":{i}}}', '{p}')")
                        })
                        .collect(),
                };
                let columns = if n % 3 == 2 {
                    " (payload, partition)"
                } else {
                    ""
                };
                let sql = format!("PUSH INTO framed{columns} VALUES {}", values.join(", "));
                for r in rows(&client, &sql).await {
                    assert_eq!(col(&r, "status"), "queued");
                    let offset: i64 = col(&r, "offset").parse().unwrap();
                    stored.push((col(&r, "partition"), offset, c, n));
                }
            }
            stored
        }));
    }
    let mut reported = Vec::new();
    for t in tasks {
        reported.extend(t.await.unwrap());
    }
    assert_eq!(reported.len(), 8 * (4 + 4 * 20 + 4 * 40));
    let client = proxy.connect().await;
    let popped = rows(&client, "POP FROM framed LIMIT 10000 PARTITIONS 3 AUTO ACK").await;
    assert_eq!(popped.len(), reported.len());
    let mut at: HashMap<(String, i64), String> = HashMap::new();
    for r in &popped {
        let key = (col(r, "partition"), col(r, "offset").parse().unwrap());
        assert!(at.insert(key, col(r, "payload")).is_none(), "offset twice");
    }
    // Each client's messages, by its own statement order and row order, sit
    // at increasing offsets of each partition.
    let mut last: HashMap<(String, i64), i64> = HashMap::new();
    for (partition, offset, c, n) in &reported {
        let payload = &at[&(partition.clone(), *offset)];
        assert!(
            payload.starts_with(&format!("{{\"c\":{c},\"n\":{n},")),
            "{partition}@{offset} holds {payload}, reported for client {c} statement {n}"
        );
        let prev = last.insert((partition.clone(), *c), *offset);
        assert!(prev.is_none_or(|p| p < *offset), "client {c} out of order");
    }
    let direct = proxy.connect_direct().await;
    let sizes: Vec<i32> = direct
        .query("SELECT message_count FROM queen.log_segments", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // A large statement's rows are one segment of exactly its rows for the
    // partition; single rows share segments of at most the 8 clients'.
    assert!(
        sizes.iter().all(|&n| n == 20 || n <= 8),
        "segment sizes {sizes:?}"
    );
    assert_eq!(sizes.iter().filter(|&&n| n == 20).count(), 8 * 4 * 3);
}

#[tokio::test]
async fn messages_pending_past_max_wait_time_go_to_the_dlq() {
    let proxy = Proxy::start("max_wait").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE slow WITH (max_wait_time_seconds = 1)")
        .await
        .unwrap();
    rows(
        &client,
        "PUSH INTO slow VALUES ('{\"n\":0}'), ('{\"n\":1}'), ('{\"n\":2}')",
    )
    .await;
    let first = rows(&client, "POP FROM slow GROUP g").await;
    ack_all(&client, &[col(&first[0], "receipt")]).await;
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    // The elected queenwire runs this step every few seconds; run it now.
    let direct = proxy.connect_direct().await;
    direct
        .query_one("SELECT queen.log_expire_pending_v1(100)", &[])
        .await
        .unwrap();
    let dlq = rows(&client, "SHOW DLQ FROM slow").await;
    let mut offsets: Vec<String> = dlq.iter().map(|r| col(r, "offset")).collect();
    offsets.sort();
    assert_eq!(offsets, vec!["1", "2"]);
    assert!(dlq
        .iter()
        .all(|r| col(r, "reason") == "max_wait_time exceeded" && col(r, "group") == "g"));
    assert!(dlq.iter().any(|r| col(r, "payload") == "{\"n\":2}"));
    assert!(rows(&client, "POP FROM slow GROUP g").await.is_empty());
}

#[tokio::test]
async fn delayed_processing_and_window_buffer_hold_messages_back() {
    let proxy = Proxy::start("delays").await;
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE QUEUE later WITH (delayed_processing = 1); CREATE QUEUE debounced WITH (window_buffer = 1)",
        )
        .await
        .unwrap();
    rows(&client, "PUSH INTO later VALUES ('1')").await;
    assert!(
        rows(&client, "POP FROM later").await.is_empty(),
        "delivered before it was 1 s old"
    );
    let started = Instant::now();
    let got = rows(&client, "POP FROM later WAIT 5").await;
    assert_eq!(got.len(), 1);
    assert!(started.elapsed() < Duration::from_secs(4));

    // window_buffer: a partition is invisible until its newest message is
    // that old, so a burst is delivered together.
    rows(&client, "PUSH INTO debounced VALUES ('1')").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    rows(&client, "PUSH INTO debounced VALUES ('2')").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        rows(&client, "POP FROM debounced LIMIT 10")
            .await
            .is_empty(),
        "the window was still open"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(rows(&client, "POP FROM debounced LIMIT 10").await.len(), 2);
}

#[tokio::test]
async fn a_busy_queue_serves_every_partition() {
    let proxy = Proxy::start("fairness").await;
    let client = proxy.connect().await;
    let values: Vec<String> = (0..10)
        .flat_map(|p| (0..20).map(move |n| format!("('{n}', 'p{p}')")))
        .collect();
    rows(
        &client,
        &format!(
            "PUSH INTO busy (payload, partition) VALUES {}",
            values.join(",")
        ),
    )
    .await;
    // Ten single-partition claims in queue mode, acked at once: each
    // partition is served once before any is served twice.
    let mut served = Vec::new();
    for _ in 0..10 {
        let got = rows(&client, "POP FROM busy LIMIT 1").await;
        served.push(col(&got[0], "partition"));
        ack_all(&client, &[col(&got[0], "receipt")]).await;
    }
    served.sort();
    served.dedup();
    assert_eq!(served.len(), 10, "{served:?}");
}

/// Plain ACKs of different sessions are fused into one call (engine
/// `fusion/ack.rs`); each receipt must still get the status it gets alone.
/// Sixteen sessions ACK at once, every receipt twice (by its consumer and by
/// a second session, whose ACK also carries a receipt whose lease expired):
/// every answer is `acked` but the expired one's, `stale`; every message is
/// delivered once, in partition order, and nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acks_answer_each_receipt_as_if_alone() {
    const PARTITIONS: usize = 40;
    const PER_PARTITION: usize = 10;
    let proxy = Proxy::start("fused_acks").await;
    let setup = proxy.connect().await;
    for p in 0..PARTITIONS {
        let values: Vec<String> = (0..PER_PARTITION)
            .map(|i| format!("('{{\"p\":{p},\"i\":{i}}}')"))
            .collect();
        rows(
            &setup,
            &format!("PUSH INTO fa PARTITION p{p} VALUES {}", values.join(", ")),
        )
        .await;
    }
    rows(&setup, "PUSH INTO fs VALUES ('1')").await;
    let expired = col(&rows(&setup, "POP FROM fs LEASE 1").await[0], "receipt");
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let delivered: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (consumer, echo) = (proxy.connect().await, proxy.connect().await);
        let delivered = delivered.clone();
        let expired = expired.clone();
        tasks.push(tokio::spawn(async move {
            let echo = Arc::new(echo);
            let mut empty = 0;
            while empty < 20 {
                assert!(Instant::now() < deadline, "the consumers hung");
                let batch = rows(&consumer, "POP FROM fa LIMIT 3").await;
                if batch.is_empty() {
                    empty += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                empty = 0;
                let receipts: Vec<String> = batch.iter().map(|r| col(r, "receipt")).collect();
                {
                    let mut d = delivered.lock().unwrap();
                    for r in &batch {
                        d.push((col(r, "partition"), col(r, "offset").parse().unwrap()));
                    }
                }
                // The expired receipt in the middle, the others reversed.
                let mut again: Vec<String> = receipts.iter().rev().cloned().collect();
                let at = again.len() / 2;
                again.insert(at, expired.clone());
                let second = echo.clone();
                let twice = tokio::spawn(async move { ack_all(&second, &again).await });
                let first = ack_all(&consumer, &receipts).await;
                let second = twice.await.unwrap();
                let mut want = vec!["acked"; receipts.len() + 1];
                want[at] = "stale";
                assert_eq!(first, vec!["acked"; receipts.len()], "the consumer's ACK");
                assert_eq!(second, want, "the second session's ACK");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let delivered = delivered.lock().unwrap().clone();
    assert_eq!(
        delivered.len(),
        PARTITIONS * PER_PARTITION,
        "each message once"
    );
    let mut by_partition: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (p, o) in delivered {
        by_partition.entry(p).or_default().push(o);
    }
    assert_eq!(by_partition.len(), PARTITIONS);
    for (p, offsets) in by_partition {
        let want: Vec<i64> = (0..PER_PARTITION as i64).collect();
        assert_eq!(offsets, want, "partition {p}: once each, in order");
    }
    assert!(rows(&setup, "POP FROM fa").await.is_empty());
}

/// One lease's batch acknowledged in pieces: out of order, with a receipt
/// repeated in one ACK, and all of it again (a client retrying after a lost
/// reply). The cursor moves over the acked prefix only, the lease ends when
/// the whole batch is acked, and every receipt of it answers `acked`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_acked_in_pieces_moves_the_cursor_over_its_acked_prefix_only() {
    let proxy = Proxy::start("ack_pieces").await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    let state = || async {
        let row = direct
            .query_one(
                "SELECT c.cursor_offset, c.batch_acked, c.lease_token IS NOT NULL \
                 FROM queen.log_consumers c \
                 JOIN queen.log_partitions p ON p.id = c.partition_id \
                 JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'pieces'",
                &[],
            )
            .await
            .unwrap();
        let acked: Option<Vec<i64>> = row.get(1);
        (row.get::<_, i64>(0), acked, row.get::<_, bool>(2))
    };
    let batch = push_then_pop(&client, 5).await;
    let r = |i: usize| batch[i].clone();
    // Offset 2 twice: acked twice, nothing before it, so the cursor stays.
    assert_eq!(ack_all(&client, &[r(2), r(2)]).await, ["acked", "acked"]);
    assert_eq!(state().await, (-1, Some(vec![2]), true));
    // 1 then 0 (out of order): the prefix reaches 2.
    assert_eq!(ack_all(&client, &[r(1), r(0)]).await, ["acked", "acked"]);
    assert_eq!(state().await, (2, None, true));
    // 4, 3: the whole batch, the lease ends.
    assert_eq!(ack_all(&client, &[r(4), r(3)]).await, ["acked", "acked"]);
    assert_eq!(state().await, (4, None, false));
    // The whole batch again: each receipt its lease acknowledged.
    assert_eq!(ack_all(&client, &batch).await, ["acked"; 5]);
    assert_eq!(state().await, (4, None, false));

    // Offsets 5, 6, 7: 5 twice and 7 is as many receipts as the batch,
    // ending where it ends, but 6 is missing: the cursor reaches 5 only.
    let batch = push_then_pop(&client, 3).await;
    let acks = [batch[0].clone(), batch[0].clone(), batch[2].clone()];
    assert_eq!(ack_all(&client, &acks).await, ["acked"; 3]);
    assert_eq!(state().await, (5, Some(vec![7]), true));
    assert_eq!(ack_all(&client, &batch[1..2]).await, ["acked"]);
    assert_eq!(state().await, (7, None, false));
    // In order with a repeat, a whole batch in one ACK.
    let batch = push_then_pop(&client, 3).await;
    let acks = [
        batch[0].clone(),
        batch[1].clone(),
        batch[1].clone(),
        batch[2].clone(),
    ];
    assert_eq!(ack_all(&client, &acks).await, ["acked"; 4]);
    assert_eq!(state().await, (10, None, false));
    assert!(rows(&client, "POP FROM pieces").await.is_empty());
}

/// A batch's receipts in one ACK make one run of offsets (log_ack_v2);
/// when the run is not its live lease's whole batch, each offset answers
/// on its own: after the lease expired, a retry of the whole batch is
/// acked where the lease acknowledged it and stale beyond, a repeat
/// included, and the messages beyond come again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_receipts_answers_each_offset_as_if_alone() {
    let proxy = Proxy::start("ack_runs").await;
    let client = proxy.connect().await;
    rows(
        &client,
        "PUSH INTO runs VALUES ('0'), ('1'), ('2'), ('3'), ('4')",
    )
    .await;
    let batch = receipts(&client, "POP FROM runs LIMIT 4 LEASE 1").await;
    assert_eq!(batch.len(), 4);
    assert_eq!(ack_all(&client, &batch[0..2]).await, ["acked"; 2]);
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let retry: Vec<String> = [3, 0, 1, 2, 1].iter().map(|&i| batch[i].clone()).collect();
    assert_eq!(
        ack_all(&client, &retry).await,
        ["stale", "acked", "acked", "stale", "acked"]
    );
    let next = rows(&client, "POP FROM runs LIMIT 3 AUTO ACK").await;
    let offsets: Vec<String> = next.iter().map(|r| col(r, "offset")).collect();
    assert_eq!(offsets, ["2", "3", "4"]);
}

/// One ACK of receipts of several partitions, each its own (partition,
/// group): the receipts that end their lease's batch are settled together
/// (log_ack_v1's set-based path), the others one by one; each answers as
/// it would alone, and the history the set-based path writes answers a
/// repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_across_partitions_answers_each_receipt_as_if_alone() {
    let proxy = Proxy::start("ack_across").await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    for p in ["a", "b", "c", "d", "e"] {
        rows(
            &client,
            &format!("PUSH INTO across PARTITION {p} VALUES ('1'), ('2'), ('3')"),
        )
        .await;
    }
    let pop = |sql: &'static str| receipts(&client, sql);
    let a = pop("POP FROM across PARTITION a").await;
    let b = pop("POP FROM across PARTITION b LIMIT 2").await;
    let c = pop("POP FROM across PARTITION c LEASE 1").await;
    let d = pop("POP FROM across PARTITION d").await;
    let e = pop("POP FROM across PARTITION e").await;
    assert_eq!(ack_all(&client, &d).await, ["acked"]);
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    // a and e end their batches; b's second of two leaves its first
    // pending; c's lease expired; d was acked before.
    let all = [&a[0], &b[1], &c[0], &d[0], &e[0]].map(|r| r.to_string());
    assert_eq!(
        ack_all(&client, &all).await,
        ["acked", "acked", "stale", "acked", "acked"]
    );
    let state = |p: &'static str| consumer_state(&direct, "across", p);
    assert_eq!(state("a").await, (0, None, false));
    assert_eq!(state("b").await, (-1, Some(vec![1]), true));
    assert_eq!(state("c").await, (-1, None, true));
    assert_eq!(state("d").await, (0, None, false));
    assert_eq!(state("e").await, (0, None, false));
    // Again, with b's first: every receipt its lease acknowledged is
    // acked again, and b's lease ends.
    let again = [&a[0], &b[0], &d[0], &e[0]].map(|r| r.to_string());
    assert_eq!(ack_all(&client, &again).await, ["acked"; 4]);
    assert_eq!(state("b").await, (1, None, false));
    for p in ["a", "b", "d", "e"] {
        let next = rows(&client, &format!("POP FROM across PARTITION {p} AUTO ACK")).await;
        let want = if p == "b" { "2" } else { "1" };
        assert_eq!(col(&next[0], "offset"), want, "partition {p}");
    }
}

/// One ACK of whole batches of several partitions: a batch acknowledged
/// entire (in any order, a receipt repeated) is settled with the others in
/// one statement (log_ack_v1's set-based path); a batch with a gap, one
/// partly acked before, one whose lease expired and one named with an
/// earlier lease's receipt each answer as they would alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_of_whole_batches_across_partitions_answers_each_receipt_as_if_alone() {
    let proxy = Proxy::start("ack_batches").await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    for p in ["f", "g", "h", "i", "j", "k", "m"] {
        rows(
            &client,
            &format!("PUSH INTO batches PARTITION {p} VALUES ('1'), ('2'), ('3'), ('4')"),
        )
        .await;
    }
    let pop = |sql: &'static str| receipts(&client, sql);
    let f = pop("POP FROM batches PARTITION f LIMIT 3").await;
    let g = pop("POP FROM batches PARTITION g LIMIT 3").await;
    let h = pop("POP FROM batches PARTITION h LIMIT 3").await;
    let i = pop("POP FROM batches PARTITION i LIMIT 2 LEASE 1").await;
    let m_old = pop("POP FROM batches PARTITION m LIMIT 2 LEASE 1").await;
    let j_old = pop("POP FROM batches PARTITION j").await;
    assert_eq!(ack_all(&client, &j_old).await, ["acked"]);
    let j = pop("POP FROM batches PARTITION j LIMIT 2").await;
    let k = pop("POP FROM batches PARTITION k LIMIT 2").await;
    assert_eq!(ack_all(&client, &h[1..2]).await, ["acked"]);
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    // The same two offsets of m again, under a new lease.
    let m = pop("POP FROM batches PARTITION m LIMIT 2").await;
    // f whole, reversed, its middle twice; g without its middle; h's rest
    // after its middle; i's lease expired; j's batch with the receipt of
    // j's earlier lease; k whole, in order; m's first with the expired
    // lease's receipt of its second (its offsets would make the batch).
    let all: Vec<String> = [
        &f[2], &g[0], &f[1], &h[0], &i[0], &j_old[0], &f[1], &g[2], &k[0], &j[0], &f[0], &h[2],
        &i[1], &j[1], &k[1], &m[0], &m_old[1],
    ]
    .iter()
    .map(|r| r.to_string())
    .collect();
    let mut want = vec!["acked"; all.len()];
    want[4] = "stale";
    want[12] = "stale";
    want[16] = "stale";
    assert_eq!(ack_all(&client, &all).await, want);
    let state = |p: &'static str| consumer_state(&direct, "batches", p);
    assert_eq!(state("f").await, (2, None, false));
    assert_eq!(state("g").await, (0, Some(vec![2]), true));
    assert_eq!(state("h").await, (2, None, false));
    assert_eq!(state("i").await, (-1, None, true));
    assert_eq!(state("j").await, (2, None, false));
    assert_eq!(state("k").await, (1, None, false));
    assert_eq!(state("m").await, (0, None, true));
    // The whole of f and k again (a retry after a lost reply): acked from
    // the history, nothing moves.
    let again: Vec<String> = f.iter().chain(k.iter()).cloned().collect();
    assert_eq!(ack_all(&client, &again).await, ["acked"; 5]);
    assert_eq!(state("f").await, (2, None, false));
    assert_eq!(state("k").await, (1, None, false));
    // g's lease holds its partition until its middle is acked.
    let held = rows(&client, "POP FROM batches PARTITION g AUTO ACK").await;
    assert!(held.is_empty(), "g is leased: {held:?}");
    assert_eq!(ack_all(&client, &g[1..2]).await, ["acked"]);
    assert_eq!(state("g").await, (2, None, false));
    for (p, want) in [("f", "3"), ("g", "3"), ("h", "3"), ("j", "3"), ("k", "2")] {
        let next = rows(&client, &format!("POP FROM batches PARTITION {p} AUTO ACK")).await;
        assert_eq!(next.len(), 1, "partition {p}");
        assert_eq!(col(&next[0], "offset"), want, "partition {p}");
    }
}

/// The receipts of a POP's rows.
async fn receipts(client: &Client, sql: &str) -> Vec<String> {
    rows(client, sql)
        .await
        .iter()
        .map(|r| col(r, "receipt"))
        .collect()
}

/// The default group's cursor, acked offsets beyond it and whether a lease
/// is held, for a partition of `queue`.
async fn consumer_state(
    direct: &Client,
    queue: &str,
    partition: &str,
) -> (i64, Option<Vec<i64>>, bool) {
    let row = direct
        .query_one(
            "SELECT c.cursor_offset, c.batch_acked, c.lease_token IS NOT NULL \
             FROM queen.log_consumers c \
             JOIN queen.log_partitions p ON p.id = c.partition_id \
             JOIN queen.queues q ON q.id = p.queue_id \
             WHERE q.name = $1 AND p.name = $2",
            &[&queue, &partition],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// Pushes `n` messages into `pieces` and pops them in one batch: their
/// receipts, in offset order.
async fn push_then_pop(client: &Client, n: usize) -> Vec<String> {
    let values: Vec<String> = (0..n).map(|i| format!("('{{\"n\":{i}}}')")).collect();
    rows(
        client,
        &format!("PUSH INTO pieces VALUES {}", values.join(", ")),
    )
    .await;
    let batch: Vec<String> = rows(client, &format!("POP FROM pieces LIMIT {n}"))
        .await
        .iter()
        .map(|r| col(r, "receipt"))
        .collect();
    assert_eq!(batch.len(), n);
    batch
}

/// A transaction or trace id is text as PostgreSQL's text is: one with a
/// NUL (possible only as a bound parameter) is refused with 22021, as
/// PostgreSQL refuses it, and nothing is stored.
#[tokio::test]
async fn ids_with_a_nul_are_refused_as_postgresql_refuses_them() {
    let proxy = Proxy::start("nul_ids").await;
    let client = proxy.connect().await;
    for column in ["transaction_id", "trace_id"] {
        let sql = format!("PUSH INTO nul_ids (payload, {column}) VALUES ('1', $1)");
        let err = client.query(&sql, &[&"a\0c"]).await.unwrap_err();
        assert_eq!(
            err.code().map(|c| c.code()),
            Some("22021"),
            "{column}: {err}"
        );
    }
    client.query_one("SELECT 1", &[]).await.unwrap();
    let popped = client.simple_query("POP FROM nul_ids").await.unwrap();
    assert!(!popped
        .iter()
        .any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_))));
}

/// A queue statement whose text ends inside an unterminated `/*` comment is
/// a syntax error, as any statement is on PostgreSQL, and does nothing.
#[tokio::test]
async fn a_queue_statement_ending_in_an_open_comment_is_a_syntax_error() {
    let proxy = Proxy::start("open_comment").await;
    let direct = proxy.connect_direct().await;
    let client = proxy.connect().await;
    let err = sql_error(&direct, "SELECT 1 /* never closed").await;
    assert_eq!(err.code().code(), "42601", "PostgreSQL: {err}");
    for sql in [
        "PUSH INTO uc VALUES ('1') /* never closed",
        "PUSH INTO uc VALUES ('1') -- fine\n/* never /* closed */",
    ] {
        let err = sql_error(&client, sql).await;
        assert_eq!(err.code().code(), "42601", "{sql}: {err}");
        assert!(err.message().contains("unterminated /* comment"), "{err}");
    }
    assert!(rows(&client, "POP FROM uc AUTO ACK").await.is_empty());
}

/// A payload whose number PostgreSQL's jsonb cannot hold is refused at
/// PUSH with jsonb's own 22003, not stored for every reader to fail on.
#[tokio::test]
async fn a_payload_number_jsonb_cannot_hold_is_refused() {
    let proxy = Proxy::start("json_numeric").await;
    let direct = proxy.connect_direct().await;
    let client = proxy.connect().await;
    for payload in ["1e999999", "{\"n\": 1e-16384}"] {
        let err = sql_error(&direct, &format!("SELECT {}::jsonb", quote(payload))).await;
        assert_eq!(err.code().code(), "22003", "PostgreSQL: {err}");
        let err = sql_error(
            &client,
            &format!("PUSH INTO nums VALUES ({})", quote(payload)),
        )
        .await;
        assert_eq!(err.code().code(), "22003", "{payload}: {err}");
    }
    client
        .batch_execute("PUSH INTO nums VALUES ('1e131071')")
        .await
        .unwrap();
    assert_eq!(rows(&client, "POP FROM nums AUTO ACK").await.len(), 1);
}
