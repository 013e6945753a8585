//! Our own chaos test: ledgered producers and consumers through the real
//! `queenwire` binary while it is killed with SIGKILL and PostgreSQL is
//! shut down immediately (SIGQUIT to the postmaster, what
//! `pg_ctl restart -m immediate` sends) and started again, on a cluster of
//! the test's own. Afterwards, from the ledgers (SEMANTICS.md, "Proving
//! it"): nothing acknowledged to a producer was lost, nothing was
//! acknowledged twice, every message the transactional consumer
//! acknowledged has exactly one effect row, each partition was consumed in
//! order, and no two consumers held one partition at once.
//!
//! Clients follow docs/dialect.md's retry rules: PUSH with transaction ids
//! and ACK are retried after 08006 / 08007 / a dropped connection; a POP
//! whose reply was lost is simply popped again (its lease expires); a
//! `BEGIN; POP; INSERT; ACK; COMMIT` whose COMMIT had an unknown outcome
//! (or was answered 08006) asks PostgreSQL what became of its transaction
//! (`txid_status`, once it is no longer in progress); a COMMIT answered
//! 08006 whose transaction committed fails the test.
//!
//! `the_checker_sees_a_lost_effect` proves the checker can fail: a consumer
//! that drops one acknowledged message (as a client told `stale` for an ACK
//! that had in fact committed would undo it) makes it report lost = 1.

mod client;
#[path = "../common/mod.rs"]
mod common;
mod ledger;
mod processes;

use client::{col, quote, Conn, Failure, FAILED, NOT_SENT, UNKNOWN};
use common::binary::Queenwire;
use ledger::{check, Acked, Fault, Ledgers, Report};
use processes::Cluster;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PRODUCERS: usize = 3;
const PARTITIONS_PER_PRODUCER: usize = 4;
const GROUP_CONSUMERS: usize = 3;
const ROWS_PER_PUSH: usize = 4;
/// Short, so a lease whose POP reply was lost comes back within the run.
const LEASE: &str = "3s";

async fn producer(
    id: usize,
    cfg: tokio_postgres::Config,
    ledgers: Arc<Ledgers>,
    stop: Arc<AtomicBool>,
) {
    let mut conn = Conn::new(cfg);
    let mut n = 0usize;
    while !stop.load(Ordering::SeqCst) {
        let partition = format!("p{id}-{}", (n / ROWS_PER_PUSH) % PARTITIONS_PER_PRODUCER);
        let txns: Vec<String> = (0..ROWS_PER_PUSH)
            .map(|i| format!("P{id}-{}", n + i))
            .collect();
        let values: Vec<String> = txns
            .iter()
            .enumerate()
            .map(|(i, t)| format!("('{{\"seq\":{}}}', {})", n + i, quote(t)))
            .collect();
        let sql = format!(
            "PUSH INTO chaos PARTITION {} (payload, transaction_id) VALUES {}",
            quote(&partition),
            values.join(", ")
        );
        // With transaction ids a PUSH is retried until it is confirmed.
        loop {
            match conn.query(&sql).await {
                Ok(rows) => {
                    assert_eq!(rows.len(), ROWS_PER_PUSH);
                    for r in &rows {
                        let status = col(r, "status");
                        assert!(status == "queued" || status == "duplicate", "{status}");
                    }
                    ledgers.pushed.lock().unwrap().extend(txns.iter().cloned());
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        n += ROWS_PER_PUSH;
    }
}

/// Retries an ACK until it is answered; statuses by receipt.
async fn ack_until_answered(conn: &mut Conn, receipts: &[String]) -> Vec<String> {
    let list: Vec<String> = receipts.iter().map(|r| quote(r)).collect();
    let sql = format!("ACK {}", list.join(", "));
    loop {
        match conn.query(&sql).await {
            Ok(rows) => return rows.iter().map(|r| col(r, "status")).collect(),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

async fn group_consumer(
    id: usize,
    cfg: tokio_postgres::Config,
    ledgers: Arc<Ledgers>,
    stop: Arc<AtomicBool>,
    fault: Fault,
) {
    let mut conn = Conn::new(cfg);
    let mut dropped = false;
    while !stop.load(Ordering::SeqCst) {
        let pop = format!("POP FROM chaos GROUP g LIMIT 5 LEASE '{LEASE}' WAIT '300ms'");
        let Ok(rows) = conn.query(&pop).await else {
            // Lost reply: a lease may be held by nobody now; it expires.
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        if rows.is_empty() {
            continue;
        }
        let popped = Instant::now();
        let receipts: Vec<String> = rows.iter().map(|r| col(r, "receipt")).collect();
        let ack_sent = Instant::now();
        let statuses = ack_until_answered(&mut conn, &receipts).await;
        let mut acked = ledgers.acked.lock().unwrap();
        for (row, status) in rows.iter().zip(statuses) {
            if status != "acked" {
                // stale: the lease was lost; the message comes again.
                continue;
            }
            if fault == Fault::DropOneAcked && id == 0 && !dropped {
                dropped = true;
                continue;
            }
            acked.push(Acked {
                txn: col(row, "transaction_id"),
                partition: col(row, "partition"),
                offset: col(row, "offset").parse().unwrap(),
                consumer: id,
                popped,
                ack_sent,
            });
        }
    }
}

/// `BEGIN; POP; INSERT effect; ACK; COMMIT` — the effect and the ACK commit
/// together or not at all.
async fn transactional_consumer(
    id: usize,
    cfg: tokio_postgres::Config,
    ledgers: Arc<Ledgers>,
    stop: Arc<AtomicBool>,
) {
    let mut conn = Conn::new(cfg);
    while !stop.load(Ordering::SeqCst) {
        if conn.query("BEGIN").await.is_err() {
            continue;
        }
        let pop = format!("POP FROM chaos GROUP g LIMIT 1 LEASE '{LEASE}'");
        let rows = match conn.query(&pop).await {
            Ok(rows) if !rows.is_empty() => rows,
            Ok(_) => {
                let _ = conn.query("ROLLBACK").await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(_) => continue, // the block is gone with the session
        };
        let popped = Instant::now();
        let row = &rows[0];
        let txn = col(row, "transaction_id");
        let insert = format!(
            "INSERT INTO chaos_effects (txn, message_id) VALUES ({}, {})",
            quote(&txn),
            quote(&col(row, "message_id"))
        );
        if conn.query(&insert).await.is_err() {
            continue;
        }
        // The block's transaction id: what became of a COMMIT whose answer
        // was lost is PostgreSQL's to say (txid_status), once it is no
        // longer in progress.
        let xid = match conn.query("SELECT txid_current() AS xid").await {
            Ok(r) => col(&r[0], "xid"),
            Err(_) => continue,
        };
        let ack_sent = Instant::now();
        match conn
            .query(&format!("ACK {}", quote(&col(row, "receipt"))))
            .await
        {
            Ok(r) if col(&r[0], "status") == "acked" => {}
            Ok(_) => {
                // stale: undo the effect; the message comes again.
                let _ = conn.query("ROLLBACK").await;
                continue;
            }
            Err(_) => continue,
        }
        let committed = match conn.query("COMMIT").await {
            Ok(_) => true,
            Err(Failure::Failed(_)) => false,
            Err(failure) => {
                // Unknown outcome, or 08006 (not sent): did the block
                // commit? A COMMIT told 08006 must not have.
                let committed = resolved(&mut conn, &xid).await;
                if committed && failure == Failure::NotSent {
                    COMMITTED_NOT_SENT.fetch_add(1, Ordering::Relaxed);
                }
                committed
            }
        };
        if committed {
            ledgers.effects_committed.lock().unwrap().push(txn.clone());
            ledgers.acked.lock().unwrap().push(Acked {
                txn,
                partition: col(row, "partition"),
                offset: col(row, "offset").parse().unwrap(),
                consumer: id,
                popped,
                ack_sent,
            });
        }
    }
}

/// COMMITs answered 08006 (not sent) whose transaction committed.
static COMMITTED_NOT_SENT: AtomicUsize = AtomicUsize::new(0);

/// Whether transaction `xid` committed, once it is no longer in progress.
/// After an immediate shutdown an id whose assignment never reached the
/// WAL is "in the future" (an error): that transaction did not commit, as a
/// commit record would have carried it. A lost connection is asked again.
async fn resolved(conn: &mut Conn, xid: &str) -> bool {
    let check = format!("SELECT txid_status({xid}) AS s");
    loop {
        match conn.query(&check).await {
            Ok(r) if col(&r[0], "s") == "in progress" => {}
            Ok(r) => break col(&r[0], "s") == "committed",
            Err(Failure::Failed(_)) => break false,
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs producers and consumers for `run`, with `chaos` events at their
/// offsets, then drains; returns the report.
async fn run(name: &str, run: Duration, chaos: bool, fault: Fault) -> Report {
    let dir = std::env::temp_dir().join(format!(
        "qw-chaos-{name}-{}-{}",
        std::process::id(),
        unsafe { libc::geteuid() }
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let cluster = Arc::new(tokio::task::block_in_place(|| Cluster::start(&dir)));
    let direct = common::proxy::connect(&cluster.config()).await;
    direct
        .batch_execute(
            "CREATE TABLE chaos_effects (txn text NOT NULL, message_id uuid NOT NULL);
             GRANT ALL ON chaos_effects TO PUBLIC",
        )
        .await
        .unwrap();
    let qw = Arc::new(Mutex::new(Queenwire::start(
        &cluster.config(),
        &dir,
        "queenwire",
        &[],
    )));
    let cfg = qw.lock().unwrap().client_config("chaos");
    // Up, schema applied, queue created.
    let mut admin = Conn::new(cfg.clone());
    let mut attempts = 0;
    while let Err(e) = admin
        .query("CREATE QUEUE IF NOT EXISTS chaos WITH (retry_limit = 1000)")
        .await
    {
        attempts += 1;
        assert!(attempts < 100, "CREATE QUEUE: {e:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let ledgers = Arc::new(Ledgers::default());
    let stop_producing = Arc::new(AtomicBool::new(false));
    let stop_consuming = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        producers.push(tokio::spawn(producer(
            p,
            cfg.clone(),
            ledgers.clone(),
            stop_producing.clone(),
        )));
    }
    let mut consumers = Vec::new();
    for c in 0..GROUP_CONSUMERS {
        consumers.push(tokio::spawn(group_consumer(
            c,
            cfg.clone(),
            ledgers.clone(),
            stop_consuming.clone(),
            fault,
        )));
    }
    consumers.push(tokio::spawn(transactional_consumer(
        GROUP_CONSUMERS,
        cfg.clone(),
        ledgers.clone(),
        stop_consuming.clone(),
    )));

    let began = Instant::now();
    if chaos {
        let at = |fraction: f64| began + run.mul_f64(fraction);
        tokio::time::sleep_until(at(0.25).into()).await;
        qw.lock().unwrap().kill_9_and_restart();
        eprintln!(
            "chaos: queenwire killed with SIGKILL and restarted; serving again after {:?}",
            serving_after(&cfg).await
        );
        tokio::time::sleep_until(at(0.5).into()).await;
        let c = cluster.clone();
        let took = tokio::task::spawn_blocking(move || c.restart_immediate())
            .await
            .unwrap();
        eprintln!(
            "chaos: PostgreSQL shut down immediately, accepting connections again after {took:?}; \
             queenwire serving a new client {:?} after that",
            serving_after(&cfg).await
        );
        tokio::time::sleep_until(at(0.75).into()).await;
        qw.lock().unwrap().kill_9_and_restart();
        eprintln!(
            "chaos: queenwire killed with SIGKILL and restarted; serving again after {:?}",
            serving_after(&cfg).await
        );
    }
    tokio::time::sleep_until((began + run).into()).await;
    stop_producing.store(true, Ordering::SeqCst);
    for p in producers {
        p.await.unwrap();
    }
    // Drain: until everything confirmed is acknowledged (or give up).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pushed: HashSet<String> = ledgers.pushed.lock().unwrap().iter().cloned().collect();
        let acked: HashSet<String> = ledgers
            .acked
            .lock()
            .unwrap()
            .iter()
            .map(|a| a.txn.clone())
            .collect();
        let missing = pushed.difference(&acked).count();
        let expected_missing = usize::from(fault == Fault::DropOneAcked);
        if missing <= expected_missing || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A little longer, so that a duplicate delivery would show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop_consuming.store(true, Ordering::SeqCst);
    for c in consumers {
        c.await.unwrap();
    }
    let direct = common::proxy::connect(&cluster.config()).await;
    let effect_rows: Vec<String> = direct
        .query("SELECT txn FROM chaos_effects", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let report = check(&ledgers, &effect_rows);
    eprintln!(
        "{name}: {report:?}; {} effect rows; so far 08006: {}, unknown outcome: {}, other errors: {}",
        effect_rows.len(),
        NOT_SENT.load(Ordering::Relaxed),
        UNKNOWN.load(Ordering::Relaxed),
        FAILED.load(Ordering::Relaxed)
    );
    drop(qw);
    let cluster = Arc::try_unwrap(cluster).ok().unwrap();
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    report
}

/// How long until a new client's `SELECT 1` and `PUSH` succeed.
async fn serving_after(cfg: &tokio_postgres::Config) -> Duration {
    let began = Instant::now();
    let mut conn = Conn::new(cfg.clone());
    while conn.query("SELECT 1").await.is_err()
        || conn.query("PUSH INTO probe VALUES ('1')").await.is_err()
    {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "queenwire does not serve again"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    began.elapsed()
}

fn assert_clean(report: &Report) {
    assert!(report.pushed > 100, "too little work: {report:?}");
    assert_eq!(
        COMMITTED_NOT_SENT.load(Ordering::Relaxed),
        0,
        "a COMMIT answered 08006 committed"
    );
    assert_eq!(
        (
            report.lost,
            report.acked_twice,
            report.unknown_acked,
            report.effects_wrong,
            report.out_of_order,
            report.overlapping_leases
        ),
        (0, 0, 0, 0, 0, 0),
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledgers_balance_through_kill_9_and_an_immediate_postgres_restart() {
    let report = run("faults", Duration::from_secs(24), true, Fault::None).await;
    assert_clean(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_sees_a_lost_effect() {
    let report = run(
        "checker",
        Duration::from_secs(4),
        false,
        Fault::DropOneAcked,
    )
    .await;
    assert_eq!(report.lost, 1, "{report:?}");
    assert_eq!(report.acked_twice, 0, "{report:?}");
}
