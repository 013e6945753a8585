//! The hot list (docs/internals/hotlist.md): POP claims among the partitions
//! a broker believes pending, by id, and the database still decides. Proved
//! with two queenwire processes on one database and a delivery ledger; the
//! latency figures come from `queenwire-bench --figures pop_latency`.

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

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Writes `per_partition` messages into each of `partitions` partitions
/// (`p0`, `p1`, …) of `queue` with one direct call of `queen.log_push_v1`
/// per round, reusing the segment of one message pushed through the proxy
/// (every copy decodes to that message; the ledger tests push for real).
async fn provision(proxy: &Proxy, queue: &str, partitions: usize, per_partition: usize) {
    let client = proxy.connect().await;
    client
        .simple_query(&format!(
            "PUSH INTO tpl_{queue} PARTITION 'template' VALUES ('{{\"x\":1}}')"
        ))
        .await
        .unwrap();
    let direct = proxy.connect_direct().await;
    for _ in 0..per_partition {
        direct
            .batch_execute(&format!(
                "SELECT count(*) FROM queen.log_push_v1(
                   p_queue => '{queue}',
                   p_partitions => (SELECT array_agg('p' || g) FROM generate_series(0, {n} - 1) g),
                   p_counts => array_fill(1, ARRAY[{n}]),
                   p_blobs => array_fill((SELECT s.blob FROM queen.log_segments s
                                          JOIN queen.log_partitions p ON p.id = s.partition_id
                                          JOIN queen.queues q ON q.id = p.queue_id
                                          WHERE q.name = 'tpl_{queue}' LIMIT 1), ARRAY[{n}]),
                   p_txn_hashes => NULL,
                   p_message_ids => (SELECT array_agg(gen_random_uuid()) FROM generate_series(1, {n})),
                   p_min_created_at => array_fill(now(), ARRAY[{n}]),
                   p_max_created_at => array_fill(now(), ARRAY[{n}]))",
                n = partitions
            ))
            .await
            .unwrap();
    }
}

async fn pop_rows(client: &Client, sql: &str) -> Vec<HashMap<String, Option<String>>> {
    rows(client, sql).await
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

/// Two queenwire processes on one database.
async fn two_proxies(prefix: &str) -> (Proxy, Proxy) {
    let a = Proxy::start_with(prefix, |c| c.pool_size = 8).await;
    let b = Proxy::start_on(a.direct.clone(), |c| c.pool_size = 8).await;
    (a, b)
}

/// Parses a payload `{"p": partition, "s": seq}` (as jsonb prints it).
fn partition_seq(payload: &str) -> (u32, u32) {
    let field = |name: &str| -> u32 {
        let at = payload
            .find(&format!("\"{name}\":"))
            .unwrap_or_else(|| panic!("{payload}"))
            + name.len()
            + 3;
        let digits: String = payload[at..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap_or_else(|_| panic!("{payload}"))
    };
    (field("p"), field("s"))
}

/// POPs a group's messages AUTO ACK until none is left; returns how many.
async fn drain(client: &Client, sql: &str) -> usize {
    let mut n = 0;
    loop {
        let r = pop_rows(client, sql).await;
        if r.is_empty() {
            return n;
        }
        n += r.len();
    }
}

#[tokio::test]
async fn two_queenwires_deliver_20000_partitions_exactly_once_in_order() {
    const PARTITIONS: u32 = 20_000;
    /// Partitions 0..DEEP get DEPTH messages, the rest one.
    const DEEP: u32 = 100;
    const DEPTH: u32 = 10;
    const PER_PROXY_CONSUMERS: usize = 3;
    let (a, b) = two_proxies("hot_two").await;
    a.connect()
        .await
        .batch_execute("CREATE QUEUE wide")
        .await
        .unwrap();

    // Every (partition, seq) once, written half through each proxy, while
    // the consumers run: a partition is pushed in seq order by one producer.
    let mut plan: Vec<(u32, u32)> = Vec::new();
    for s in 0..DEPTH {
        for p in 0..DEEP {
            plan.push((p, s));
        }
    }
    for p in DEEP..PARTITIONS {
        plan.push((p, 0));
    }
    let total = plan.len();
    let mut producers = Vec::new();
    for (half, proxy) in [&a, &b].into_iter().enumerate() {
        let cfg = proxy.client_config();
        let mine: Vec<(u32, u32)> = plan
            .iter()
            .copied()
            .filter(|(p, _)| (*p as usize) % 2 == half)
            .collect();
        producers.push(tokio::spawn(async move {
            let client = connect(&cfg).await;
            for chunk in mine.chunks(500) {
                let values: Vec<String> = chunk
                    .iter()
                    .map(|(p, s)| format!("('{{\"p\":{p},\"s\":{s}}}', 'p{p}')"))
                    .collect();
                client
                    .simple_query(&format!(
                        "PUSH INTO wide (payload, partition) VALUES {}",
                        values.join(", ")
                    ))
                    .await
                    .unwrap();
            }
        }));
    }

    // (partition, seq, delivered at) per delivery, acknowledged.
    type Delivery = (u32, u32, Instant);
    let ledger: Arc<Mutex<Vec<Delivery>>> = Arc::default();
    let acked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut consumers = Vec::new();
    for proxy in [&a, &b] {
        for _ in 0..PER_PROXY_CONSUMERS {
            let cfg = proxy.client_config();
            let ledger = ledger.clone();
            let acked = acked.clone();
            consumers.push(tokio::spawn(async move {
                let client = connect(&cfg).await;
                let deadline = Instant::now() + Duration::from_secs(600);
                while acked.load(std::sync::atomic::Ordering::SeqCst) < total {
                    assert!(Instant::now() < deadline, "consumers did not finish");
                    let popped =
                        pop_rows(&client, "POP FROM wide LIMIT 5 LEASE '5min' WAIT '300ms'").await;
                    let at = Instant::now();
                    if popped.is_empty() {
                        continue;
                    }
                    let mut receipts = Vec::new();
                    {
                        let mut ledger = ledger.lock().unwrap();
                        for r in &popped {
                            let (p, s) = partition_seq(&col(r, "payload"));
                            assert_eq!(col(r, "partition"), format!("p{p}"));
                            ledger.push((p, s, at));
                            receipts.push(col(r, "receipt"));
                        }
                    }
                    let statuses = ack_all(&client, &receipts).await;
                    assert!(statuses.iter().all(|s| s == "acked"), "{statuses:?}");
                    acked.fetch_add(receipts.len(), std::sync::atomic::Ordering::SeqCst);
                }
            }));
        }
    }
    for p in producers {
        p.await.unwrap();
    }
    for c in consumers {
        c.await.unwrap();
    }

    let ledger = ledger.lock().unwrap();
    let mut seen: HashMap<(u32, u32), usize> = HashMap::new();
    let mut by_partition: BTreeMap<u32, Vec<(Instant, u32)>> = BTreeMap::new();
    for (p, s, at) in ledger.iter() {
        *seen.entry((*p, *s)).or_default() += 1;
        by_partition.entry(*p).or_default().push((*at, *s));
    }
    let duplicated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicated.is_empty(), "delivered twice: {duplicated:?}");
    let expected: HashSet<(u32, u32)> = plan.iter().copied().collect();
    let lost: Vec<_> = expected.iter().filter(|k| !seen.contains_key(*k)).collect();
    assert!(
        lost.is_empty(),
        "never delivered: {:?}",
        &lost[..lost.len().min(10)]
    );
    assert_eq!(
        seen.len(),
        expected.len(),
        "delivered something never pushed"
    );
    // Per partition, deliveries in time order carry seqs in order (one
    // batch at a time per partition, so the times order them).
    for (p, mut ds) in by_partition {
        ds.sort_by_key(|d| d.0);
        for w in ds.windows(2) {
            assert!(
                w[0].1 < w[1].1,
                "p{p}: seq {} delivered after {}",
                w[1].1,
                w[0].1
            );
        }
    }
}

/// POPs `sql` on `client` until it returns rows or `within` passes.
async fn pop_until(
    client: &Client,
    sql: &str,
    within: Duration,
) -> Vec<HashMap<String, Option<String>>> {
    let deadline = Instant::now() + within;
    loop {
        let r = pop_rows(client, sql).await;
        if !r.is_empty() || Instant::now() > deadline {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn pushes_through_the_other_queenwire_or_plain_sql_are_found() {
    let (a, b) = two_proxies("hot_found").await;
    let ca = a.connect().await;
    let cb = b.connect().await;
    // A's ring is seeded on a queue with many partitions, all consumed.
    provision(&a, "found", 2_000, 1).await;
    loop {
        if pop_rows(&ca, "POP FROM found LIMIT 100 PARTITIONS 100 AUTO ACK")
            .await
            .is_empty()
        {
            break;
        }
    }
    assert!(pop_rows(&ca, "POP FROM found AUTO ACK").await.is_empty());

    // A push through B: a wake-up reaches A, whose ring catches up.
    cb.simple_query("PUSH INTO found PARTITION 'p1234' VALUES ('{\"via\":\"b\"}')")
        .await
        .unwrap();
    let got = pop_until(&ca, "POP FROM found AUTO ACK", Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1, "A never found B's push");
    assert_eq!(col(&got[0], "partition"), "p1234");

    // A waiting POP on A is woken by a push through B to a new partition.
    let waiter = {
        let cfg = a.client_config();
        tokio::spawn(async move {
            let c = connect(&cfg).await;
            let t = Instant::now();
            let r = pop_rows(&c, "POP FROM found AUTO ACK WAIT '20s'").await;
            (r, t.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    cb.simple_query("PUSH INTO found PARTITION 'brand-new' VALUES ('{\"via\":\"b\"}')")
        .await
        .unwrap();
    let (r, waited) = waiter.await.unwrap();
    assert_eq!(r.len(), 1, "the waiting POP got nothing");
    assert_eq!(col(&r[0], "partition"), "brand-new");
    assert!(waited < Duration::from_secs(15), "woken late: {waited:?}");

    // A write no queenwire announced (plain SQL into the push procedure):
    // found by the periodic windowed reseed.
    assert!(pop_rows(&ca, "POP FROM found AUTO ACK").await.is_empty());
    provision(&b, "found", 3, 1).await;
    let mut partitions = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while partitions.len() < 3 && Instant::now() < deadline {
        for r in pop_rows(&ca, "POP FROM found AUTO ACK").await {
            partitions.insert(col(&r, "partition"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let want: HashSet<String> = ["p0", "p1", "p2"].iter().map(|s| s.to_string()).collect();
    assert_eq!(partitions, want);
}

#[tokio::test]
async fn expired_leases_are_redelivered_and_seek_and_drop_group_are_honoured() {
    let (a, b) = two_proxies("hot_repair").await;
    let ca = a.connect().await;
    let cb = b.connect().await;

    // Two partitions leased through A and never acknowledged.
    provision(&a, "lease", 2, 1).await;
    let mut leased = HashSet::new();
    for _ in 0..2 {
        let r = pop_rows(&ca, "POP FROM lease LEASE '1s'").await;
        assert_eq!(r.len(), 1);
        leased.insert(col(&r[0], "partition"));
    }
    assert!(pop_rows(&ca, "POP FROM lease").await.is_empty());
    assert!(pop_rows(&cb, "POP FROM lease").await.is_empty());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut again = HashSet::new();
    for c in [&ca, &cb] {
        let r = pop_until(c, "POP FROM lease LEASE '1min'", Duration::from_secs(10)).await;
        assert_eq!(r.len(), 1, "an expired lease was not redelivered");
        assert_eq!(col(&r[0], "retry_count"), "1");
        again.insert(col(&r[0], "partition"));
    }
    assert_eq!(again, leased);

    // A group drains a queue through A; a SEEK through B sends it back to
    // the beginning, which A's ring learns from queen.hotlist_repairs.
    provision(&a, "seek", 20, 2).await;
    const DRAIN: &str = "POP FROM seek GROUP g LIMIT 10 AUTO ACK";
    assert_eq!(drain(&ca, DRAIN).await, 40);
    assert!(pop_rows(&ca, "POP FROM seek GROUP g AUTO ACK")
        .await
        .is_empty());
    cb.batch_execute("SEEK GROUP g ON seek TO BEGINNING")
        .await
        .unwrap();
    let first = pop_until(
        &ca,
        "POP FROM seek GROUP g LIMIT 10 AUTO ACK",
        Duration::from_secs(10),
    )
    .await;
    assert!(!first.is_empty(), "A never saw B's SEEK");
    assert_eq!(first.len() + drain(&ca, DRAIN).await, 40);

    // DROP GROUP through A: the group subscribes afresh from the beginning.
    ca.batch_execute("DROP GROUP g ON seek").await.unwrap();
    assert_eq!(drain(&ca, DRAIN).await, 40);

    // POP … PARTITION still claims the one partition it names.
    cb.simple_query("PUSH INTO seek PARTITION 'p3' VALUES ('{\"x\":2}')")
        .await
        .unwrap();
    let r = pop_rows(&ca, "POP FROM seek PARTITION 'p3' LIMIT 10 AUTO ACK").await;
    assert_eq!(r.len(), 3, "queue mode sees the partition's three messages");
}

/// The calls each procedure has had on this database (`track_functions`
/// must be on for the connections that made them).
async fn calls_of(direct: &Client) -> HashMap<String, i64> {
    // An idle backend flushes its function counters within 10 s
    // (PostgreSQL 15's PGSTAT_IDLE_INTERVAL).
    tokio::time::sleep(Duration::from_millis(11_500)).await;
    direct
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await
        .unwrap();
    direct
        .query(
            "SELECT funcname::text, calls FROM pg_stat_user_functions WHERE schemaname = 'queen'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// A queenwire on a fresh database whose function calls are counted
/// (`track_functions`), and a direct client to read them with [`calls_of`].
async fn counted_proxy(prefix: &str) -> (Client, Proxy) {
    proxy_on_a_database_with(prefix, "track_functions = 'all'").await
}

/// A queenwire on a fresh database with `setting` (`name = value`) as the
/// database's default, which its connections start with; and a direct
/// client of that database.
async fn proxy_on_a_database_with(prefix: &str, setting: &str) -> (Client, Proxy) {
    let db = common::cluster::fresh_database(prefix);
    let admin = connect(&db).await;
    let name: String = admin
        .query_one("SELECT current_database()", &[])
        .await
        .unwrap()
        .get(0);
    admin
        .batch_execute(&format!("ALTER DATABASE {name} SET {setting}"))
        .await
        .unwrap();
    (admin, Proxy::start_on(db, |_| {}).await)
}

#[tokio::test]
async fn an_empty_pop_on_a_queue_known_empty_makes_no_call() {
    let (admin, proxy) = counted_proxy("hot_quiet").await;
    let client = proxy.connect().await;
    provision(&proxy, "quiet", 500, 1).await;
    assert_eq!(
        drain(&client, "POP FROM quiet LIMIT 50 PARTITIONS 50 AUTO ACK").await,
        500
    );
    let before = calls_of(&admin).await;
    let t = Instant::now();
    for _ in 0..50 {
        assert!(pop_rows(&client, "POP FROM quiet AUTO ACK")
            .await
            .is_empty());
    }
    let took = t.elapsed();
    let after = calls_of(&admin).await;
    let delta = |f: &str| after.get(f).copied().unwrap_or(0) - before.get(f).copied().unwrap_or(0);
    assert_eq!(
        delta("log_pop_v2"),
        0,
        "an empty POP called the pop procedure"
    );
    // At most the once-a-second windowed reseed (and a reconcile, 10 s).
    let allowed = 2 + took.as_secs() as i64 * 2;
    assert!(
        delta("log_hotlist_seed_v1") <= allowed,
        "{} seeds for 50 empty POPs in {took:?}",
        delta("log_hotlist_seed_v1")
    );
    // And the queue still answers at once when something comes.
    client
        .simple_query("PUSH INTO quiet PARTITION 'p7' VALUES ('{}')")
        .await
        .unwrap();
    assert_eq!(pop_rows(&client, "POP FROM quiet AUTO ACK").await.len(), 1);
}

/// A block's own uncommitted PUSH is announced only at its COMMIT, but the
/// block's POP sees it, as on PostgreSQL — also when the ring already knew
/// the queue as empty.
#[tokio::test]
async fn a_block_pops_what_it_pushed_itself_on_a_queue_the_ring_knows_empty() {
    let proxy = Proxy::start("hotlist_own_push").await;
    let client = proxy.connect().await;
    client.batch_execute("CREATE QUEUE own").await.unwrap();
    for _ in 0..3 {
        let rows = client
            .query("POP FROM own LIMIT 5 AUTO ACK", &[])
            .await
            .unwrap();
        assert!(rows.is_empty());
    }
    client
        .batch_execute("BEGIN; PUSH INTO own VALUES ('1'), ('2'), ('3')")
        .await
        .unwrap();
    let payloads: Vec<String> = client
        .simple_query("POP FROM own LIMIT 5")
        .await
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get("payload").map(str::to_string),
            _ => None,
        })
        .collect();
    assert_eq!(payloads, ["1", "2", "3"]);
    client.batch_execute("COMMIT").await.unwrap();
}

/// A consumer that has emptied a partition and ACKed it is not sent back to
/// look at it: POP, ACK, POP costs one call of the pop procedure, not two
/// (the claim reports the partition drained, its ACK leaves it quiet). And
/// what is written meanwhile, or what a partial ACK leaves behind when its
/// lease expires, is still delivered.
#[tokio::test]
async fn the_pop_after_acking_an_emptied_partition_makes_no_call() {
    let (admin, proxy) = counted_proxy("hot_drained").await;
    let client = proxy.connect().await;
    let into = |q: &str, p: usize, s: usize| {
        format!("PUSH INTO {q} PARTITION 'p{p}' VALUES ('{{\"p\":{p},\"s\":{s}}}')")
    };
    let push = |p: usize, s: usize| into("dq", p, s);
    client.simple_query(&push(0, 0)).await.unwrap();
    let r = pop_rows(&client, "POP FROM dq LIMIT 10").await;
    assert_eq!(ack_all(&client, &[col(&r[0], "receipt")]).await, ["acked"]);
    client.simple_query(&into("da", 0, 0)).await.unwrap();
    assert_eq!(
        pop_rows(&client, "POP FROM da LIMIT 10 AUTO ACK")
            .await
            .len(),
        1
    );

    const ROUNDS: i64 = 20;
    let before = calls_of(&admin).await;
    let started = Instant::now();
    for i in 0..ROUNDS as usize {
        client.simple_query(&push(i % 4, i + 1)).await.unwrap();
        let r = pop_rows(&client, "POP FROM dq LIMIT 10").await;
        assert_eq!(r.len(), 1, "round {i}");
        assert_eq!(ack_all(&client, &[col(&r[0], "receipt")]).await, ["acked"]);
        assert!(pop_rows(&client, "POP FROM dq LIMIT 10").await.is_empty());
        // AUTO ACK: the claim alone tells.
        client
            .simple_query(&into("da", i % 4, i + 1))
            .await
            .unwrap();
        assert_eq!(
            pop_rows(&client, "POP FROM da LIMIT 10 AUTO ACK")
                .await
                .len(),
            1
        );
        assert!(pop_rows(&client, "POP FROM da LIMIT 10 AUTO ACK")
            .await
            .is_empty());
    }
    let after = calls_of(&admin).await;
    let delta = |f: &str| after.get(f).copied().unwrap_or(0) - before.get(f).copied().unwrap_or(0);
    // One claiming call per delivery; a few more allowed (a pass of the
    // ring racing a reconcile: each ACK's write passes it too, for the
    // claim held for the session's next POP). Looking again after each
    // ACK made it 4 per round.
    let pops = delta("log_pop_v2");
    assert!(
        pops <= 2 * ROUNDS + 8,
        "{pops} pop calls for {} deliveries",
        2 * ROUNDS
    );
    // The pushes went through this queenwire, which hands the rings the
    // partitions it wrote: no reseed to find them, only the periodic one
    // (once a second per ring, here two) and a reconcile.
    let seeds = delta("log_hotlist_seed_v1");
    let allowed = 4 + 2 * started.elapsed().as_secs() as i64;
    assert!(
        seeds <= allowed,
        "{seeds} seeds for {} pushes in {:?}",
        2 * ROUNDS,
        started.elapsed()
    );

    // Written to while leased: its ACK brings the partition back.
    client.simple_query(&push(9, 1)).await.unwrap();
    let r = pop_rows(&client, "POP FROM dq LIMIT 10").await;
    assert_eq!(r.len(), 1);
    client.simple_query(&push(9, 2)).await.unwrap();
    assert!(
        pop_rows(&client, "POP FROM dq LIMIT 10").await.is_empty(),
        "leased"
    );
    assert_eq!(ack_all(&client, &[col(&r[0], "receipt")]).await, ["acked"]);
    let r = pop_rows(&client, "POP FROM dq LIMIT 10").await;
    assert_eq!(r.len(), 1, "the message pushed during the lease");
    assert_eq!(ack_all(&client, &[col(&r[0], "receipt")]).await, ["acked"]);

    // A partial ACK: the lease expires with one message unacknowledged,
    // which comes again (within the lease's end, not a reconcile later).
    client.simple_query(&push(8, 1)).await.unwrap();
    client.simple_query(&push(8, 2)).await.unwrap();
    let r = pop_rows(&client, "POP FROM dq LIMIT 10 LEASE '1s'").await;
    assert_eq!(r.len(), 2);
    assert_eq!(ack_all(&client, &[col(&r[0], "receipt")]).await, ["acked"]);
    assert!(pop_rows(&client, "POP FROM dq LIMIT 10").await.is_empty());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let t = Instant::now();
    let again = pop_until(&client, "POP FROM dq LIMIT 10", Duration::from_secs(30)).await;
    assert_eq!(again.len(), 1, "the unacknowledged message came back");
    assert_eq!(col(&again[0], "offset"), col(&r[1], "offset"));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "redelivered only after {:?}",
        t.elapsed()
    );
    assert_eq!(
        ack_all(&client, &[col(&again[0], "receipt")]).await,
        ["acked"]
    );

    // A partial ACK, then the rest FAILED: it comes again, not only at the
    // lease's end (that a FAILED ACK brings a quiet partition back at once
    // is the ring's unit test; here a reseed may find it first).
    client.simple_query(&push(7, 1)).await.unwrap();
    client.simple_query(&push(7, 2)).await.unwrap();
    let r = pop_rows(&client, "POP FROM dq LIMIT 10 LEASE '5min'").await;
    assert_eq!(r.len(), 2);
    assert_eq!(ack_all(&client, &[col(&r[0], "receipt")]).await, ["acked"]);
    let failed = rows(
        &client,
        &format!("ACK {} FAILED", quote(&col(&r[1], "receipt"))),
    )
    .await;
    assert_eq!(col(&failed[0], "status"), "retry");
    let t = Instant::now();
    let again = pop_until(&client, "POP FROM dq LIMIT 10", Duration::from_secs(30)).await;
    assert_eq!(again.len(), 1, "the failed message came back");
    assert_eq!(col(&again[0], "offset"), col(&r[1], "offset"));
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "redelivered only after {:?}",
        t.elapsed()
    );
}

/// A lease taken through one queenwire and acknowledged through another
/// (a client pool spanning both): the partition's next message is still
/// delivered through the first long before the lease would have expired.
#[tokio::test]
async fn an_ack_through_the_other_queenwire_releases_a_partition_leased_here() {
    let (a, b) = two_proxies("hot_cross_ack").await;
    let ca = a.connect().await;
    let cb = b.connect().await;
    for s in 0..2 {
        ca.simple_query(&format!(
            "PUSH INTO xa PARTITION 'p' VALUES ('{{\"s\":{s}}}')"
        ))
        .await
        .unwrap();
    }
    let first = pop_rows(&ca, "POP FROM xa LEASE '5min'").await;
    assert_eq!(first.len(), 1);
    assert!(pop_rows(&ca, "POP FROM xa").await.is_empty(), "leased");
    assert_eq!(ack_all(&cb, &[col(&first[0], "receipt")]).await, ["acked"]);
    let next = pop_until(&ca, "POP FROM xa LEASE '5min'", Duration::from_secs(20)).await;
    assert_eq!(next.len(), 1, "the partition stayed parked for its lease");
    assert_ne!(col(&next[0], "offset"), col(&first[0], "offset"));
}

/// POPs of one partition each, sent by many sessions at once, are claimed
/// together (fusion: fewer `log_pop_v2` calls than POPs), and still each
/// session gets one partition's messages, at most its LIMIT; no partition
/// is held by two sessions at once; every message is delivered once, in
/// partition order. Two POP shapes (LIMIT 1 and LIMIT 2) take from the
/// same group through two lanes at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pops_are_claimed_together_one_partition_per_session() {
    const PARTITIONS: usize = 48;
    const PER_PARTITION: usize = 5;
    const SESSIONS: usize = 16;
    let (admin, proxy) = counted_proxy("hot_fused_pops").await;
    provision(&proxy, "fz", PARTITIONS, PER_PARTITION).await;
    let mut clients = Vec::new();
    for _ in 0..SESSIONS {
        clients.push(proxy.connect().await);
    }
    let before = calls_of(&admin).await;
    let mut pops = 0;
    let mut seen: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for round in 0.. {
        assert!(round < 200, "the queue never drained: {seen:?}");
        let results = futures::future::join_all(clients.iter().enumerate().map(|(i, c)| {
            let limit = 1 + i % 2;
            async move {
                (
                    limit,
                    pop_rows(c, &format!("POP FROM fz LIMIT {limit}")).await,
                )
            }
        }))
        .await;
        pops += SESSIONS;
        let mut held = HashSet::new();
        let mut receipts = Vec::new();
        for (limit, got) in &results {
            let Some(first) = got.first() else {
                continue;
            };
            assert!(got.len() <= *limit, "LIMIT {limit} gave {got:?}");
            let partition = col(first, "partition");
            assert!(
                got.iter().all(|r| col(r, "partition") == partition),
                "one POP got several partitions: {got:?}"
            );
            assert!(
                held.insert(partition.clone()),
                "partition {partition} went to two sessions at once"
            );
            for r in got {
                let offset: i64 = col(r, "offset").parse().unwrap();
                seen.entry(partition.clone()).or_default().push(offset);
                receipts.push(col(r, "receipt"));
            }
        }
        if receipts.is_empty() {
            break;
        }
        let status = ack_all(&clients[0], &receipts).await;
        assert!(status.iter().all(|s| s == "acked"), "{status:?}");
    }
    assert_eq!(seen.len(), PARTITIONS);
    let want: Vec<i64> = (0..PER_PARTITION as i64).collect();
    for (partition, offsets) in &seen {
        assert_eq!(offsets, &want, "partition {partition}: once each, in order");
    }
    let after = calls_of(&admin).await;
    let calls = after.get("log_pop_v2").copied().unwrap_or(0)
        - before.get("log_pop_v2").copied().unwrap_or(0);
    eprintln!("{calls} log_pop_v2 calls for {pops} POPs");
    assert!(
        calls * 2 <= pops as i64,
        "{calls} log_pop_v2 calls for {pops} POPs: not claimed together"
    );
}

/// The consumer row of partition `name` of `queue`, as the direct client
/// reads it: (xmin, cursor, lease token).
/// A direct transaction holding the consumer rows of these partitions
/// (FOR UPDATE) until it ends: an ACK of one of them waits for it.
async fn hold_consumer_rows(proxy: &Proxy, partitions: &[&str]) -> Client {
    let holder = proxy.connect_direct().await;
    let names: Vec<String> = partitions.iter().map(|p| quote(p)).collect();
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .batch_execute(&format!(
            "SELECT 1 FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
             WHERE p.name IN ({}) FOR UPDATE OF c",
            names.join(", ")
        ))
        .await
        .unwrap();
    holder
}

/// Returns once some backend of the database waits for a lock (`what`'s).
async fn wait_for_a_lock_wait(direct: &Client, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = direct
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{what} never waited for the row");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn consumer_row(direct: &Client, queue: &str, name: &str) -> (String, i64, Option<String>) {
    let row = direct
        .query_one(
            "SELECT c.xmin::text, c.cursor_offset, c.lease_token::text
             FROM queen.log_consumers c
             JOIN queen.log_partitions p ON p.id = c.partition_id
             JOIN queen.queues q ON q.id = p.queue_id
             WHERE q.name = $1 AND p.name = $2",
            &[&queue, &name],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// A session's ACK after its fused POP goes to that POP's lane: written
/// with the POPs waiting there, in their transaction (one commit for both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_after_a_fused_pop_commits_with_the_next_pops() {
    let proxy = Proxy::start("hot_ack_with_pops").await;
    provision(&proxy, "pa", 4, 1).await;
    let direct = proxy.connect_direct().await;
    let (a, b, c) = (
        proxy.connect().await,
        proxy.connect().await,
        proxy.connect().await,
    );
    let got_a = pop_rows(&a, "POP FROM pa").await;
    let got_b = pop_rows(&b, "POP FROM pa").await;
    let (x, y) = (col(&got_a[0], "partition"), col(&got_b[0], "partition"));
    assert_ne!(x, y);
    // A's ACK leads a write of the lane and waits for X's consumer row,
    // held here; B's ACK and C's POP queue behind it.
    let holder = hold_consumer_rows(&proxy, &[&x]).await;
    let receipt_a = col(&got_a[0], "receipt");
    let ack_a = tokio::spawn(async move { ack_all(&a, &[receipt_a]).await });
    wait_for_a_lock_wait(&direct, "A's ACK").await;
    let receipt_b = col(&got_b[0], "receipt");
    let ack_b = tokio::spawn(async move { ack_all(&b, &[receipt_b]).await });
    let pop_c = tokio::spawn(async move { pop_rows(&c, "POP FROM pa").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !ack_b.is_finished() && !pop_c.is_finished(),
        "B and C were not held up"
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(ack_a.await.unwrap(), ["acked"]);
    assert_eq!(ack_b.await.unwrap(), ["acked"]);
    let got_c = pop_c.await.unwrap();
    assert_eq!(got_c.len(), 1, "{got_c:?}");
    let z = col(&got_c[0], "partition");
    assert!(z != x && z != y, "C got {z}, which had nothing left");
    let (xmin_y, cursor_y, lease_y) = consumer_row(&direct, "pa", &y).await;
    let (xmin_z, cursor_z, lease_z) = consumer_row(&direct, "pa", &z).await;
    assert_eq!((cursor_y, lease_y), (0, None), "B's ACK moved Y's cursor");
    assert_eq!(cursor_z, -1);
    assert!(lease_z.is_some(), "C's POP leased Z");
    assert_eq!(xmin_y, xmin_z, "B's ACK and C's POP were one transaction");
}

/// An ACK written with a POP that has nothing to ask the database (every
/// partition the ring knows is drained and acknowledged) is committed all
/// the same: it is answered "acked" only once it is, and the lane's
/// connection is not left inside its transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_written_with_a_pop_that_makes_no_call_is_committed() {
    let proxy = Proxy::start("hot_ack_no_call").await;
    provision(&proxy, "po", 1, 1).await;
    let direct = proxy.connect_direct().await;
    let (a, c, e) = (
        proxy.connect().await,
        proxy.connect().await,
        proxy.connect().await,
    );
    let push = |p: &str| format!("PUSH INTO pn PARTITION '{p}' VALUES ('{{\"p\":\"{p}\"}}')");
    e.simple_query(&push("old")).await.unwrap();
    let old = pop_rows(&e, "POP FROM pn LIMIT 10").await;
    assert_eq!(ack_all(&e, &[col(&old[0], "receipt")]).await, ["acked"]);
    // A holds W of another queue; its last POP (empty) went to pn's lane,
    // where its ACK then goes.
    let got_a = pop_rows(&a, "POP FROM po LIMIT 10").await;
    let w = col(&got_a[0], "partition");
    assert!(pop_rows(&a, "POP FROM pn LIMIT 10").await.is_empty());
    // E holds pn's new partition X, drained.
    e.simple_query(&push("x")).await.unwrap();
    let got_e = pop_rows(&e, "POP FROM pn LIMIT 10").await;
    let x = col(&got_e[0], "partition");
    // E's ACK leads a write of pn's lane and waits for X's consumer row,
    // held here; A's ACK and C's POP queue behind it, to be written
    // together once E's ACK has made X quiet: C's POP makes no call.
    let holder = hold_consumer_rows(&proxy, &[&x]).await;
    let receipt_e = col(&got_e[0], "receipt");
    let ack_e = tokio::spawn(async move { ack_all(&e, &[receipt_e]).await });
    wait_for_a_lock_wait(&direct, "E's ACK").await;
    let receipt_a = col(&got_a[0], "receipt");
    let ack_a = tokio::spawn(async move { ack_all(&a, &[receipt_a]).await });
    let pop_c = tokio::spawn(async move { pop_rows(&c, "POP FROM pn LIMIT 10").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(ack_e.await.unwrap(), ["acked"]);
    assert_eq!(ack_a.await.unwrap(), ["acked"]);
    assert!(pop_c.await.unwrap().is_empty());
    let (_, cursor_w, lease_w) = consumer_row(&direct, "po", &w).await;
    assert_eq!(
        (cursor_w, lease_w),
        (0, None),
        "A's ACK was answered but not committed"
    );
    // Left open, the lane's connection would sit there indefinitely; a
    // background task's transaction is idle inside only for moments.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let open: i64 = direct
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND state LIKE 'idle in transaction%'
               AND state_change < now() - interval '250 ms'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(open, 0, "a connection was left inside its transaction");
}

/// An ACK that fails inside a write shared with POPs (here: it waits past
/// `lock_timeout` for a row held elsewhere) fails alone, with its own
/// error; the POPs written with it are claimed all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_that_fails_with_pops_fails_alone() {
    let (_, proxy) = proxy_on_a_database_with("hot_ack_fails", "lock_timeout = '300ms'").await;
    provision(&proxy, "pf", 3, 1).await;
    let direct = proxy.connect_direct().await;
    let (a, c, e) = (
        proxy.connect().await,
        proxy.connect().await,
        proxy.connect().await,
    );
    let got_e = pop_rows(&e, "POP FROM pf LIMIT 10").await;
    let got_a = pop_rows(&a, "POP FROM pf LIMIT 10").await;
    let (v, x) = (col(&got_e[0], "partition"), col(&got_a[0], "partition"));
    // Both rows held: E's ACK leads a write and fails after 300 ms; A's
    // ACK and C's POP, queued behind it, are written together and A's
    // fails the same way.
    let holder = hold_consumer_rows(&proxy, &[&v, &x]).await;
    let ack = |client: Client, receipt: String| async move {
        let r = client
            .simple_query(&format!("ACK {}", quote(&receipt)))
            .await;
        (
            client,
            r.err().and_then(|e| e.code().map(|c| c.code().to_string())),
        )
    };
    let ack_e = tokio::spawn(ack(e, col(&got_e[0], "receipt")));
    wait_for_a_lock_wait(&direct, "E's ACK").await;
    let receipt_a = col(&got_a[0], "receipt");
    let ack_a = tokio::spawn(ack(a, receipt_a.clone()));
    let pop_c = tokio::spawn(async move { pop_rows(&c, "POP FROM pf LIMIT 10").await });
    let (_, e_error) = ack_e.await.unwrap();
    assert_eq!(e_error.as_deref(), Some("55P03"), "E's ACK: lock timeout");
    let (a, a_error) = ack_a.await.unwrap();
    assert_eq!(a_error.as_deref(), Some("55P03"), "A's ACK: its own error");
    let got_c = pop_c.await.unwrap();
    assert_eq!(got_c.len(), 1, "C's POP was claimed: {got_c:?}");
    let y = col(&got_c[0], "partition");
    assert!(y != v && y != x, "C got {y}, which is leased");
    holder.batch_execute("ROLLBACK").await.unwrap();
    // Nothing of the failed ACK stayed: A acks again, and its partition
    // is acknowledged.
    assert_eq!(ack_all(&a, &[receipt_a]).await, ["acked"]);
    let (_, cursor_x, lease_x) = consumer_row(&direct, "pf", &x).await;
    assert_eq!((cursor_x, lease_x), (0, None));
}

/// Consumers that pop one message and ack it, in a loop, over many
/// partitions (their ACKs written with the next POPs): every message once,
/// each partition in order, never one partition in two sessions' hands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_popping_and_acking_one_at_a_time_get_each_message_once_in_order() {
    const PARTITIONS: usize = 40;
    const PER_PARTITION: usize = 10;
    const SESSIONS: usize = 8;
    let proxy = Proxy::start_with("hot_popack1", |c| c.pool_size = 8).await;
    provision(&proxy, "pk", PARTITIONS, PER_PARTITION).await;
    // (partition, offset, session, held from, held until)
    type Held = (String, i64, usize, Instant, Instant);
    let mut sessions = Vec::new();
    for s in 0..SESSIONS {
        let client = proxy.connect().await;
        sessions.push(tokio::spawn(async move {
            let mut held: Vec<Held> = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut empty = 0;
            while empty < 3 {
                assert!(Instant::now() < deadline, "the queue never drained");
                let got = pop_rows(&client, "POP FROM pk LIMIT 1").await;
                let from = Instant::now();
                let Some(r) = got.first() else {
                    empty += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                empty = 0;
                let until = Instant::now();
                let status = ack_all(&client, &[col(r, "receipt")]).await;
                assert_eq!(status, ["acked"]);
                held.push((
                    col(r, "partition"),
                    col(r, "offset").parse().unwrap(),
                    s,
                    from,
                    until,
                ));
            }
            held
        }));
    }
    let mut all: Vec<Held> = Vec::new();
    for s in sessions {
        all.extend(s.await.unwrap());
    }
    all.sort_by_key(|h| h.3);
    let mut by_partition: BTreeMap<String, Vec<&Held>> = BTreeMap::new();
    for h in &all {
        by_partition.entry(h.0.clone()).or_default().push(h);
    }
    assert_eq!(by_partition.len(), PARTITIONS);
    let want: Vec<i64> = (0..PER_PARTITION as i64).collect();
    for (p, held) in &by_partition {
        let offsets: Vec<i64> = held.iter().map(|h| h.1).collect();
        assert_eq!(offsets, want, "{p}: each message once, in order");
        for w in held.windows(2) {
            assert!(
                w[0].2 == w[1].2 || w[1].3 >= w[0].4,
                "{p}: sessions {} and {} held it at once",
                w[0].2,
                w[1].2
            );
        }
    }
}

/// A consumer that acks what its POP got has, in the same write, a claim
/// made for its next POP and held for it (src/engine/fusion/hold.rs): its
/// next POP gets the next message. A claim its session does not come back
/// for is given back (`log_unclaim_v1`): another consumer then gets that
/// message within its WAIT, with no failure counted, where an expired
/// lease would have kept it for the lease time and counted one.
#[tokio::test]
async fn a_claim_held_for_an_acking_consumer_is_its_next_pop_or_given_back() {
    let (direct, proxy) = counted_proxy("held_claims").await;
    let a = proxy.connect().await;
    let b = proxy.connect().await;
    a.batch_execute(r#"PUSH INTO held VALUES ('{"n":1}'), ('{"n":2}'), ('{"n":3}')"#)
        .await
        .unwrap();
    let payload = |r: &HashMap<String, Option<String>>| col(r, "payload");

    let got = pop_rows(&a, "POP FROM held LIMIT 1").await;
    assert_eq!(payload(&got[0]), r#"{"n":1}"#);
    assert_eq!(ack_all(&a, &[col(&got[0], "receipt")]).await, ["acked"]);
    let got = pop_rows(&a, "POP FROM held LIMIT 1").await;
    assert_eq!(payload(&got[0]), r#"{"n":2}"#, "the next message, in order");
    // The ACK's write claims message 3 for a, which never pops again.
    assert_eq!(ack_all(&a, &[col(&got[0], "receipt")]).await, ["acked"]);

    let got = pop_rows(&b, "POP FROM held LIMIT 1 LEASE '1min' WAIT '10s'").await;
    assert_eq!(got.len(), 1, "message 3 stayed held past the WAIT");
    assert_eq!(payload(&got[0]), r#"{"n":3}"#);
    assert_eq!(
        col(&got[0], "retry_count"),
        "0",
        "a give-back counts no failure"
    );
    assert_eq!(ack_all(&b, &[col(&got[0], "receipt")]).await, ["acked"]);
    assert!(pop_rows(&a, "POP FROM held LIMIT 1").await.is_empty());
    let calls = calls_of(&direct).await;
    assert!(
        calls.get("log_unclaim_v1").copied().unwrap_or(0) >= 1,
        "the held claim was given back: {calls:?}"
    );
}

/// A session's POP that cannot take a claim held for it (here inside a
/// transaction block) gives it back first, so it does not find the
/// partition leased to its own session.
#[tokio::test]
async fn a_pop_in_a_block_after_an_ack_gets_what_was_held_for_its_session() {
    let proxy = Proxy::start("held_then_block").await;
    let a = proxy.connect().await;
    a.batch_execute(r#"PUSH INTO heldb VALUES ('{"n":1}'), ('{"n":2}')"#)
        .await
        .unwrap();
    let got = pop_rows(&a, "POP FROM heldb LIMIT 1").await;
    assert_eq!(col(&got[0], "payload"), r#"{"n":1}"#);
    assert_eq!(ack_all(&a, &[col(&got[0], "receipt")]).await, ["acked"]);
    a.batch_execute("BEGIN").await.unwrap();
    let got = pop_rows(&a, "POP FROM heldb LIMIT 1").await;
    assert_eq!(got.len(), 1, "the block's POP found the partition held");
    assert_eq!(col(&got[0], "payload"), r#"{"n":2}"#);
    assert_eq!(col(&got[0], "retry_count"), "0");
    a.batch_execute("COMMIT").await.unwrap();
}

/// A consumer that works between its ACK and its next POP (longer than a
/// held claim waits) is served every partition in turn: the claim its ACK
/// made for it on the next partition, given back unused, keeps that
/// partition's turn. (It used to go to the back of the rotation, so such a
/// consumer was served every other partition only, the rest never.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_slower_than_the_hold_is_served_every_partition() {
    let proxy = Proxy::start("hotlist_held_turns").await;
    let client = proxy.connect().await;
    for p in 0..4 {
        for i in 0..3 {
            client
                .simple_query(&format!("PUSH INTO turns PARTITION 'p{p}' VALUES ('{i}')"))
                .await
                .unwrap();
        }
    }
    let mut served = BTreeMap::<String, usize>::new();
    for _ in 0..8 {
        let got = pop_rows(&client, "POP FROM turns LIMIT 1").await;
        assert_eq!(got.len(), 1, "every partition has messages left");
        *served.entry(col(&got[0], "partition")).or_default() += 1;
        assert_eq!(
            ack_all(&client, &[col(&got[0], "receipt")]).await,
            ["acked"]
        );
        // Longer than a held claim waits for its session's next POP.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(served.len(), 4, "partitions served: {served:?}");
}

/// A POP … WAIT finds a message whose lease expired when it expires, not at
/// its next poll (250 ms, then doubling to 2 s: a 4 s lease would be found
/// after 5.75 s), in an ordered and in a shared group. The bound is the
/// poll schedule's, 1.4 s above the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_pop_takes_a_message_as_its_lease_expires() {
    let proxy = Proxy::start("hotlist_lease_wakes").await;
    let holder = proxy.connect().await;
    let mut waiters = Vec::new();
    for ordered in ["true", "false"] {
        let queue = format!("expiring_{ordered}");
        holder
            .batch_execute(&format!(
                "CREATE QUEUE {queue} WITH (ordered = {ordered}); \
                 PUSH INTO {queue} VALUES ('{{\"x\":1}}')"
            ))
            .await
            .unwrap();
        let held = pop_rows(&holder, &format!("POP FROM {queue} LEASE '4s'")).await;
        assert_eq!(held.len(), 1);
        let waiter = proxy.connect().await;
        waiters.push(tokio::spawn(async move {
            let start = Instant::now();
            let got = pop_rows(&waiter, &format!("POP FROM {queue} WAIT 20")).await;
            (ordered, got.len(), start.elapsed())
        }));
    }
    for w in waiters {
        let (ordered, got, took) = w.await.unwrap();
        assert_eq!(got, 1, "ordered = {ordered}: the expired lease's message");
        assert!(
            took < Duration::from_millis(5400),
            "ordered = {ordered}: found {took:?} after the POP began, the lease was 4 s"
        );
        assert!(
            took > Duration::from_millis(3500),
            "ordered = {ordered}: taken {took:?} after the POP began, before the lease ended"
        );
    }
}
