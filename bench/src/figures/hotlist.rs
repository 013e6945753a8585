//! POP against the number of a queue's partitions (docs/internals/hotlist.md):
//! its latency at 10 to 100,000 partitions beside the whole-queue scan the
//! hot list replaced, where its time goes (auto_explain through psql), and
//! how many procedure calls it costs.

use super::{check, Proxy, Site};
use crate::setup::BoxError;
use std::time::{Duration, Instant};

/// Writes `per_partition` messages into each of `partitions` partitions
/// (`p0`, `p1`, …) of `queue` with one direct call of `queen.log_push_v1`
/// per round, reusing the segment of one message pushed through the proxy
/// (every copy decodes to that message).
async fn provision(
    proxy: &Proxy,
    queue: &str,
    partitions: usize,
    per_partition: usize,
) -> Result<(), BoxError> {
    let client = proxy.connect().await?;
    client
        .simple_query(&format!(
            "PUSH INTO tpl_{queue} PARTITION 'template' VALUES ('{{\"x\":1}}')"
        ))
        .await?;
    let direct = proxy.connect_direct().await?;
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
            .await?;
    }
    Ok(())
}

/// As [`provision`], but with plain INSERTs into the log tables (seconds
/// for 100,000 partitions instead of minutes through the push procedure;
/// the rows have the same shape).
async fn provision_bulk(
    proxy: &Proxy,
    queue: &str,
    partitions: usize,
    per_partition: usize,
) -> Result<(), BoxError> {
    let client = proxy.connect().await?;
    client
        .simple_query(&format!(
            "PUSH INTO tpl_{queue} PARTITION 'template' VALUES ('{{\"x\":1}}'); CREATE QUEUE {queue}"
        ))
        .await?;
    let direct = proxy.connect_direct().await?;
    direct
        .batch_execute(&format!(
            "CREATE TEMP TABLE tpl AS SELECT s.blob FROM queen.log_segments s
               JOIN queen.log_partitions p ON p.id = s.partition_id
               JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'tpl_{queue}';
             INSERT INTO queen.log_partitions (queue_id, name, last_offset, last_write_at)
               SELECT q.id, 'p' || g, {m} - 1, clock_timestamp()
               FROM queen.queues q, generate_series(0, {n} - 1) g WHERE q.name = '{queue}';
             INSERT INTO queen.log_segments
                 (partition_id, base_offset, min_created_at, max_created_at, message_count, byte_size, blob)
               SELECT p.id, o, now(), now(), 1, length(t.blob), t.blob
               FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id, tpl t,
                    generate_series(0, {m} - 1) o
               WHERE q.name = '{queue}';
             INSERT INTO queen.log_txns (partition_id, base_offset, created_at, txn_hashes, message_ids)
               SELECT s.partition_id, s.base_offset, now(), NULL, ARRAY[gen_random_uuid()]
               FROM queen.log_segments s JOIN queen.log_partitions p ON p.id = s.partition_id
               JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '{queue}';
             DROP TABLE tpl;
             -- QW_WARM: the queue-mode group has seen every partition
             -- before (its cursor rows exist), as on a queue whose
             -- partitions get message after message; without it every POP
             -- of the measurement also pays a partition's first sight.
             INSERT INTO queen.log_consumers (partition_id, consumer_group, cursor_offset)
               SELECT p.id, '__QUEUE_MODE__', -1
               FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
               WHERE q.name = '{queue}' AND {warm};
             ANALYZE queen.log_partitions; ANALYZE queen.log_segments; ANALYZE queen.log_consumers;",
            n = partitions,
            m = per_partition,
            warm = std::env::var("QW_WARM").is_ok()
        ))
        .await?;
    // QW_VACUUM: as a table autovacuum has been through (hint bits and the
    // visibility map set), instead of rows nobody has read yet.
    if std::env::var("QW_VACUUM").is_ok() {
        for sql in [
            "VACUUM queen.log_partitions, queen.log_segments, queen.log_txns, queen.log_consumers",
            "CHECKPOINT",
        ] {
            direct.batch_execute(sql).await?;
        }
    }
    Ok(())
}

/// Partitions written through the push procedure (`QW_PROVISION=push`)
/// or with plain INSERTs.
async fn provision_as_asked(
    proxy: &Proxy,
    queue: &str,
    partitions: usize,
    per_partition: usize,
) -> Result<(), BoxError> {
    if std::env::var("QW_PROVISION").as_deref() == Ok("push") {
        provision(proxy, queue, partitions, per_partition).await
    } else {
        provision_bulk(proxy, queue, partitions, per_partition).await
    }
}

/// Median and mean POP latency (LIMIT 1 AUTO ACK, simple protocol, one
/// client) at 10, 1,000, 10,000 and 100,000 partitions, and the
/// whole-queue scan (`log_pop_v1` called directly) on the same data.
pub async fn pop_latency_by_partitions(site: &Site, quick: bool) -> Result<(), BoxError> {
    let proxy = Proxy::start(site, "hotlist_latency").await?;
    let client = proxy.connect().await?;
    let only: Option<usize> = std::env::var("QW_PARTITIONS")
        .ok()
        .and_then(|v| v.parse().ok());
    let scales: &[(usize, usize)] = if quick {
        &[(10, 100), (1_000, 50)]
    } else {
        &[(10, 400), (1_000, 400), (10_000, 200), (100_000, 100)]
    };
    for &(n, pops) in scales {
        let per_scan = 25;
        if only.is_some_and(|o| o != n) {
            continue;
        }
        let queue = format!("lat{n}");
        let per = (pops + 20 + per_scan).div_ceil(n).max(1);
        let t = Instant::now();
        provision_as_asked(&proxy, &queue, n, per).await?;
        let provision_s = t.elapsed().as_secs_f64();
        let sql = format!("POP FROM {queue} LIMIT 1 AUTO ACK");
        let t = Instant::now();
        let first = client.simple_query(&sql).await?;
        let first_ms = t.elapsed().as_secs_f64() * 1000.0;
        check(first.len() > 1, || {
            format!("the first POP at {n} partitions found nothing")
        })?;
        for _ in 0..5 {
            client.simple_query(&sql).await?;
        }
        let mut lat = Vec::with_capacity(pops);
        for _ in 0..pops {
            let t = Instant::now();
            let r = client.simple_query(&sql).await?;
            lat.push(t.elapsed().as_secs_f64() * 1000.0);
            check(r.len() > 1, || {
                format!("a POP at {n} partitions found nothing")
            })?;
        }
        lat.sort_by(|a, b| a.total_cmp(b));
        let mean = lat.iter().sum::<f64>() / lat.len() as f64;
        println!(
            "partitions={n} pops={pops} first_ms={first_ms:.2} median_ms={:.3} mean_ms={mean:.3} p95_ms={:.3} max_ms={:.3} (provisioned in {provision_s:.1} s)",
            lat[lat.len() / 2],
            lat[lat.len() * 95 / 100],
            lat[lat.len() - 1]
        );
        // The whole-queue scan the hot list replaced, on the same data:
        // log_pop_v1 called directly (no proxy), 20 times.
        let direct = proxy.connect_direct().await?;
        let scan = format!(
            "SELECT count(*) FROM queen.log_pop_v1('{queue}', NULL, '__QUEUE_MODE__', 1, 1, NULL, 'beginning', NULL, true)"
        );
        let mut scans = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            direct.simple_query(&scan).await?;
            scans.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        scans.sort_by(|a, b| a.total_cmp(b));
        println!(
            "partitions={n} whole-queue scan (log_pop_v1, direct) median_ms={:.3}",
            scans[scans.len() / 2]
        );
    }
    Ok(())
}

/// Where a POP's time goes at many partitions: nested plans slower than
/// 1 ms under a generic plan, through psql.
pub async fn explain_pop(site: &Site, quick: bool) -> Result<(), BoxError> {
    let proxy = Proxy::start(site, "hotlist_explain").await?;
    let n = std::env::var("QW_PARTITIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 1_000 } else { 100_000 });
    provision_as_asked(&proxy, "ex", n, 1).await?;
    let client = proxy.connect().await?;
    for _ in 0..20 {
        client.simple_query("POP FROM ex LIMIT 1 AUTO ACK").await?;
    }
    let mut each = Vec::new();
    let t = Instant::now();
    for _ in 0..50 {
        let t = Instant::now();
        client.simple_query("POP FROM ex LIMIT 1 AUTO ACK").await?;
        each.push(t.elapsed().as_micros());
    }
    println!("50 pops in {:?}: {each:?} µs", t.elapsed());
    let host = match proxy.direct.get_hosts().first() {
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        None => return Err("the cluster's configuration names no host".into()),
    };
    let port = proxy
        .direct
        .get_ports()
        .first()
        .ok_or("the cluster's configuration names no port")?
        .to_string();
    let user = proxy.direct.get_user().unwrap_or("postgres").to_string();
    let db = proxy.direct.get_dbname().unwrap_or("postgres").to_string();
    let script = "LOAD 'auto_explain';
SET auto_explain.log_min_duration = 1;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_analyze = on;
SET auto_explain.log_level = notice;
SET plan_cache_mode = force_generic_plan;
\\timing on
SELECT count(*) FROM queen.log_pop_v2('ex', NULL, '__QUEUE_MODE__', 1, 1, NULL, 'beginning', NULL, true, '00000000-0000-0000-0000-000000000001', (SELECT array_agg(p.id) FROM (SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'ex' ORDER BY p.id DESC LIMIT 17) p));
SELECT count(*) FROM queen.log_pop_v2('ex', NULL, '__QUEUE_MODE__', 1, 1, NULL, 'beginning', NULL, true, '00000000-0000-0000-0000-000000000001', (SELECT array_agg(p.id) FROM (SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'ex' ORDER BY p.id DESC LIMIT 17) p));
SELECT count(*) FROM queen.log_hotlist_seed_v1('ex', '__QUEUE_MODE__', now() - interval '1 s', 10000);
";
    let psql = "psql";
    let args = ["-h", &host, "-p", &port, "-U", &user, "-d", &db, "-X"];
    let out = tokio::process::Command::new(psql)
        .args(args)
        .args(["-c", "SELECT 1"])
        .output()
        .await?;
    check(out.status.success(), || {
        String::from_utf8_lossy(&out.stderr).into_owned()
    })?;
    let mut child = tokio::process::Command::new(psql)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        use tokio::io::AsyncWriteExt;
        stdin.write_all(script.as_bytes()).await?;
    }
    let out = child.wait_with_output().await?;
    println!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// How many procedure calls a POP costs, from `pg_stat_user_functions`
/// before and after 100 POPs.
pub async fn calls_per_pop(site: &Site, quick: bool) -> Result<(), BoxError> {
    let proxy = Proxy::start(site, "hotlist_calls").await?;
    let direct = proxy.connect_direct().await?;
    direct
        .batch_execute("SELECT set_config('track_functions', 'all', false)")
        .await?;
    let db: String = direct
        .query_one("SELECT current_database()", &[])
        .await?
        .get(0);
    direct
        .batch_execute(&format!("ALTER DATABASE {db} SET track_functions = 'all'"))
        .await?;
    let partitions = if quick { 200 } else { 2_000 };
    provision(&proxy, "calls", partitions, 1).await?;
    let client = proxy.connect().await?;
    for _ in 0..20 {
        client
            .simple_query("POP FROM calls LIMIT 1 AUTO ACK")
            .await?;
    }
    let stats = "SELECT funcname, calls, round(total_time::numeric, 2)::text FROM pg_stat_user_functions WHERE funcname LIKE 'log_%' ORDER BY 1";
    direct
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let before = direct.query(stats, &[]).await?;
    let t = Instant::now();
    for _ in 0..100 {
        client
            .simple_query("POP FROM calls LIMIT 1 AUTO ACK")
            .await?;
    }
    println!("100 pops in {:?}", t.elapsed());
    tokio::time::sleep(Duration::from_millis(600)).await;
    direct
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await?;
    let after = direct.query(stats, &[]).await?;
    for r in before.iter().chain(after.iter()) {
        let (f, c, t): (String, i64, String) = (r.get(0), r.get(1), r.get(2));
        println!("{f} {c} {t} ms");
    }
    Ok(())
}
