//! The hot list (docs/internals/hotlist.md): POP claims among the partitions
//! a broker believes pending, by id, and the database still decides. Proved
//! with two queenwire processes on one database and a delivery ledger; the
//! latency figures come from the ignored `pop_latency_by_partitions`.

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
            "PUSH INTO {queue} PARTITION 'template' VALUES ('{{\"x\":1}}')"
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
                                          WHERE p.name = 'template' LIMIT 1), ARRAY[{n}]),
                   p_txn_hashes => NULL,
                   p_message_ids => (SELECT array_agg(gen_random_uuid()) FROM generate_series(1, {n})),
                   p_min_created_at => array_fill(now(), ARRAY[{n}]),
                   p_max_created_at => array_fill(now(), ARRAY[{n}]))",
                n = partitions
            ))
            .await
            .unwrap();
    }
    // The template partition's message is consumed so it does not count.
    client
        .simple_query(&format!(
            "POP FROM {queue} PARTITION 'template' LIMIT 1 AUTO ACK"
        ))
        .await
        .unwrap();
}

/// Median and mean POP latency (LIMIT 1 AUTO ACK, simple protocol, one
/// client) at 10, 1,000, 10,000 and 100,000 partitions. A benchmark, not a
/// test: run with `cargo test --release --test hotlist -- --ignored --nocapture`.
#[tokio::test]
#[ignore]
async fn pop_latency_by_partitions() {
    let proxy = Proxy::start("hotlist_latency").await;
    let client = proxy.connect().await;
    for (n, pops) in [(10usize, 400usize), (1_000, 400), (10_000, 200), (100_000, 100)] {
        let queue = format!("lat{n}");
        let per = (pops + 20).div_ceil(n).max(1);
        let t = Instant::now();
        provision(&proxy, &queue, n, per).await;
        let provision_s = t.elapsed().as_secs_f64();
        let sql = format!("POP FROM {queue} LIMIT 1 AUTO ACK");
        let t = Instant::now();
        let first = client.simple_query(&sql).await.unwrap();
        let first_ms = t.elapsed().as_secs_f64() * 1000.0;
        assert!(first.len() > 1, "the first POP at {n} partitions found nothing");
        for _ in 0..5 {
            client.simple_query(&sql).await.unwrap();
        }
        let mut lat = Vec::with_capacity(pops);
        for _ in 0..pops {
            let t = Instant::now();
            let r = client.simple_query(&sql).await.unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1000.0);
            assert!(r.len() > 1, "a POP at {n} partitions found nothing");
        }
        lat.sort_by(|a, b| a.total_cmp(b));
        let mean = lat.iter().sum::<f64>() / lat.len() as f64;
        println!(
            "partitions={n} pops={pops} first_ms={first_ms:.2} median_ms={:.3} mean_ms={mean:.3} p95_ms={:.3} max_ms={:.3} (provisioned in {provision_s:.1} s)",
            lat[lat.len() / 2],
            lat[lat.len() * 95 / 100],
            lat[lat.len() - 1]
        );
    }
}
