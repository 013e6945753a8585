//! Ephemeral queues: PUSH + POP AUTO ACK round trips on an ephemeral and a
//! durable queue, the partition guard trigger's cost on provisioning
//! partitions, and PUSH and POP through the queue's owner against through
//! the other queenwire (forwarded).

use super::{check, rows, Proxy, Site};
use crate::setup::{self, BoxError};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

pub async fn figures(site: &Site, quick: bool) -> Result<(), BoxError> {
    let proxy = Proxy::start(site, "eph_figures").await?;
    let c = proxy.connect().await?;
    let direct = proxy.connect_direct().await?;
    c.batch_execute("CREATE QUEUE e WITH (class = ephemeral); CREATE QUEUE d")
        .await?;
    let (round_trips, partitions) = if quick { (100, 1_000) } else { (400, 5_000) };
    for queue in ["e", "d"] {
        let mut took = Vec::new();
        for i in 0..round_trips {
            let began = Instant::now();
            rows(&c, &format!("PUSH INTO {queue} VALUES ('{{\"i\":{i}}}')")).await?;
            let got = rows(&c, &format!("POP FROM {queue} AUTO ACK")).await?;
            check(got.len() == 1, || {
                format!("POP FROM {queue}: {} rows", got.len())
            })?;
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
            "CREATE TRIGGER trg_partitions_ephemeral_guard AFTER INSERT ON queen.log_partitions \
             REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT \
             EXECUTE FUNCTION queen.ephemeral_guard_partitions_v2()"
        } else {
            "DROP TRIGGER trg_partitions_ephemeral_guard ON queen.log_partitions"
        };
        if round > 0 {
            direct.batch_execute(ddl).await?;
        }
        let queue = format!("prov_{round}");
        let values: Vec<String> = (0..partitions)
            .map(|i| format!("('{{}}', 'p{i}')"))
            .collect();
        let began = Instant::now();
        for chunk in values.chunks(1000) {
            rows(
                &c,
                &format!(
                    "PUSH INTO {queue} (payload, partition) VALUES {}",
                    chunk.join(", ")
                ),
            )
            .await?;
        }
        let label = if guarded {
            "with guard"
        } else {
            "without guard"
        };
        println!("{partitions} new partitions {label}: {:?}", began.elapsed());
    }
    Ok(())
}

/// The holder of the ephemeral queue's ownership lease.
async fn holder_of(direct: &Client, queue: &str) -> Result<Option<String>, BoxError> {
    Ok(direct
        .query_opt(
            "SELECT l.holder FROM queen.maintenance_leases l
             JOIN queen.ephemeral_queues e ON l.task = 'ephemeral:' || e.ref
             JOIN queen.queues q ON q.id = e.queue_id
             WHERE q.name = $1 AND l.expires_at > clock_timestamp()",
            &[&queue],
        )
        .await?
        .map(|r| r.get(0)))
}

/// Makes `proxy` the owner of `queue` (a POP there elects it).
async fn own(proxy: &Proxy, queue: &str) -> Result<(), BoxError> {
    let c = proxy.connect().await?;
    rows(&c, &format!("POP FROM {queue} GROUP warmup")).await?;
    let holder = holder_of(&proxy.connect_direct().await?, queue).await?;
    let addr = proxy.addr.to_string();
    check(holder.as_ref().is_some_and(|h| h.contains(&addr)), || {
        format!("{queue} is held by {holder:?}, not by {addr}")
    })
}

/// PUSH, POP … AUTO ACK and their sum through the owner and through the
/// other queenwire (forwarded), median and p90; then 8 clients pushing
/// single-message PUSHes through each.
pub async fn forwarded_figures(site: &Site, quick: bool) -> Result<(), BoxError> {
    let a = Proxy::start(site, "eph_fwd_figures").await?;
    let b = Proxy::start_on(a.direct.clone(), |_| {}).await?;
    a.connect()
        .await?
        .batch_execute("CREATE QUEUE f WITH (class = ephemeral)")
        .await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    own(&a, "f").await?;
    let (round_trips, pushes_each) = if quick { (100, 50) } else { (400, 250) };
    for (label, proxy) in [
        ("local (owner)", &a),
        ("forwarded", &b),
        ("local (owner)", &a),
        ("forwarded", &b),
    ] {
        let c = proxy.connect().await?;
        let (mut push, mut pop) = (Vec::new(), Vec::new());
        for i in 0..round_trips {
            let began = Instant::now();
            rows(&c, &format!("PUSH INTO f VALUES ('{{\"i\":{i}}}')")).await?;
            push.push(began.elapsed());
            let began = Instant::now();
            let got = rows(&c, "POP FROM f AUTO ACK").await?;
            check(got.len() == 1, || format!("POP FROM f: {} rows", got.len()))?;
            pop.push(began.elapsed());
        }
        let both: Vec<Duration> = push.iter().zip(&pop).map(|(a, b)| *a + *b).collect();
        for (what, mut v) in [("PUSH", push), ("POP", pop), ("PUSH+POP", both)] {
            v.sort();
            println!(
                "{label}: {what} median {:?}, p90 {:?}",
                v[v.len() / 2],
                v[v.len() * 9 / 10]
            );
        }
    }
    // Throughput: 8 clients pushing single-message PUSHes.
    for (label, proxy) in [("local (owner)", &a), ("forwarded", &b)] {
        let began = Instant::now();
        let mut clients = Vec::new();
        for _ in 0..8 {
            let cfg = proxy.client_config();
            clients.push(tokio::spawn(async move {
                let c = setup::connect(&cfg).await?;
                for _ in 0..pushes_each {
                    c.simple_query("PUSH INTO f VALUES ('{}')").await?;
                }
                Ok::<(), tokio_postgres::Error>(())
            }));
        }
        for c in clients {
            c.await??;
        }
        let took = began.elapsed();
        let total = 8 * pushes_each;
        println!(
            "{label}: {total} PUSHes from 8 clients in {took:?} ({:.0}/s)",
            total as f64 / took.as_secs_f64()
        );
    }
    Ok(())
}
