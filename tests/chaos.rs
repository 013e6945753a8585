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
//! looks for its effect row.
//!
//! `the_checker_sees_a_lost_effect` proves the checker can fail: a consumer
//! that drops one acknowledged message (as a client told `stale` for an ACK
//! that had in fact committed would undo it, the bug of issue #17) makes it
//! report lost = 1.

mod common;

use queenwire::embedded::EmbeddedPostgres;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres::{Client, SimpleQueryMessage};

const PRODUCERS: usize = 3;
const PARTITIONS_PER_PRODUCER: usize = 4;
const GROUP_CONSUMERS: usize = 3;
const ROWS_PER_PUSH: usize = 4;
/// Short, so a lease whose POP reply was lost comes back within the run.
const LEASE: &str = "3s";
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(20);

/// One delivery whose ACK answered `acked`.
#[derive(Clone, Debug)]
struct Acked {
    txn: String,
    partition: String,
    offset: i64,
    consumer: usize,
    /// When the POP's reply arrived and when the first ACK was sent: inside
    /// the lease, so two of these for one partition must not overlap.
    popped: Instant,
    ack_sent: Instant,
}

#[derive(Default)]
struct Ledgers {
    /// Transaction ids a PUSH confirmed (`queued` or `duplicate`).
    pushed: Mutex<Vec<String>>,
    acked: Mutex<Vec<Acked>>,
    /// Transaction ids the transactional consumer committed with an effect.
    effects_committed: Mutex<Vec<String>>,
}

/// Statements answered 08006, with an unknown outcome (08007, a dropped
/// connection) and with another error, for the record (both tests of the
/// binary add to them).
static NOT_SENT: AtomicUsize = AtomicUsize::new(0);
static UNKNOWN: AtomicUsize = AtomicUsize::new(0);
static FAILED: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Default, PartialEq, Eq)]
struct Report {
    pushed: usize,
    acknowledged: usize,
    lost: usize,
    acked_twice: usize,
    unknown_acked: usize,
    effects_wrong: usize,
    out_of_order: usize,
    overlapping_leases: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// One group consumer forgets one message it acknowledged.
    DropOneAcked,
}

/// PostgreSQL of the test's own, which it may shut down.
struct Cluster {
    dir: PathBuf,
    postgres: Mutex<Option<EmbeddedPostgres>>,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        std::fs::create_dir_all(dir).unwrap();
        // Run as root, the cluster's unprivileged user must enter it.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let postgres = EmbeddedPostgres::start(dir).expect("the chaos cluster starts");
        Cluster {
            dir: dir.to_path_buf(),
            postgres: Mutex::new(Some(postgres)),
        }
    }

    fn config(&self) -> tokio_postgres::Config {
        self.postgres
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .client_config()
    }

    /// Immediate shutdown (no checkpoint: crash recovery at the next start)
    /// and a start at once.
    fn restart_immediate(&self) -> Duration {
        let mut slot = self.postgres.lock().unwrap();
        let mut old = slot.take().unwrap();
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(old.pid() as libc::pid_t, libc::SIGQUIT) };
        // Reaps the postmaster (already exiting: the SIGINT finds it gone).
        old.stop().unwrap();
        let began = Instant::now();
        *slot = Some(EmbeddedPostgres::start(&self.dir).expect("the chaos cluster restarts"));
        began.elapsed()
    }
}

/// The real binary, as an operator runs it.
struct Queenwire {
    backend: String,
    port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl Queenwire {
    fn start(cluster: &Cluster, dir: &Path) -> Queenwire {
        let cfg = cluster.config();
        let socket_dir = match &cfg.get_hosts()[0] {
            tokio_postgres::config::Host::Unix(dir) => dir.clone(),
            other => panic!("{other:?}"),
        };
        let backend = format!(
            "host={} port={} user={} dbname={}",
            socket_dir.display(),
            cfg.get_ports()[0],
            cfg.get_user().unwrap(),
            cfg.get_dbname().unwrap()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut qw = Queenwire {
            backend,
            port,
            log: dir.join("queenwire.log"),
            child: None,
        };
        qw.spawn();
        qw
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        self.child = Some(
            Command::new(env!("CARGO_BIN_EXE_queenwire"))
                .args([
                    "--backend",
                    &self.backend,
                    "--listen",
                    &format!("127.0.0.1:{}", self.port),
                ])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
    }

    /// SIGKILL, then a new process on the same port at once.
    fn kill_9_and_restart(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        self.spawn();
    }

    fn client_config(&self) -> tokio_postgres::Config {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host("127.0.0.1")
            .port(self.port)
            .user("chaos")
            .dbname("chaos");
        cfg
    }
}

impl Drop for Queenwire {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What a failed statement means for a client following the retry rules.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// 08006: not sent.
    NotSent,
    /// 08007, a dropped connection, or no answer in time.
    Unknown,
    /// Any other error (the statement failed and changed nothing).
    Failed(String),
}

fn classify(e: &tokio_postgres::Error) -> Failure {
    match e.as_db_error().map(|d| d.code().code()) {
        Some("08006") => Failure::NotSent,
        Some("08007") | None => Failure::Unknown,
        Some(code) => Failure::Failed(format!("{code}: {e}")),
    }
}

type Row = HashMap<String, Option<String>>;

/// A client that reconnects whenever its connection is gone.
struct Conn {
    cfg: tokio_postgres::Config,
    client: Option<Client>,
}

impl Conn {
    fn new(cfg: tokio_postgres::Config) -> Conn {
        Conn { cfg, client: None }
    }

    async fn client(&mut self) -> &Client {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = None;
            loop {
                if let Ok(Ok((client, connection))) = tokio::time::timeout(
                    Duration::from_secs(5),
                    self.cfg.connect(tokio_postgres::NoTls),
                )
                .await
                {
                    tokio::spawn(connection);
                    self.client = Some(client);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        self.client.as_ref().unwrap()
    }

    async fn query(&mut self, sql: &str) -> Result<Vec<Row>, Failure> {
        let client = self.client().await;
        let result = tokio::time::timeout(STATEMENT_TIMEOUT, client.simple_query(sql)).await;
        let failure = match result {
            Ok(Ok(messages)) => {
                return Ok(messages
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
            Ok(Err(e)) => classify(&e),
            Err(_) => Failure::Unknown,
        };
        match failure {
            Failure::NotSent => NOT_SENT.fetch_add(1, Ordering::Relaxed),
            Failure::Unknown => UNKNOWN.fetch_add(1, Ordering::Relaxed),
            Failure::Failed(_) => FAILED.fetch_add(1, Ordering::Relaxed),
        };
        // The session may be gone, or inside a failed block: start afresh
        // (a block is rolled back with it).
        self.client = None;
        Err(failure)
    }
}

fn col(row: &Row, name: &str) -> String {
    row.get(name).cloned().flatten().unwrap_or_default()
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

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
            Err(Failure::Unknown) => {
                // Did the block commit? Its effect row says.
                let check = format!(
                    "SELECT count(*) AS n FROM chaos_effects WHERE txn = {}",
                    quote(&txn)
                );
                loop {
                    if let Ok(r) = conn.query(&check).await {
                        break col(&r[0], "n") != "0";
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Err(_) => false,
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

fn check(ledgers: &Ledgers, effect_rows: &[String]) -> Report {
    let pushed: HashSet<String> = ledgers.pushed.lock().unwrap().iter().cloned().collect();
    let acked = ledgers.acked.lock().unwrap().clone();
    let mut times: HashMap<&str, usize> = HashMap::new();
    for a in &acked {
        *times.entry(a.txn.as_str()).or_default() += 1;
    }
    let mut report = Report {
        pushed: pushed.len(),
        acknowledged: times.len(),
        lost: pushed
            .iter()
            .filter(|t| !times.contains_key(t.as_str()))
            .count(),
        acked_twice: times.values().filter(|n| **n > 1).count(),
        unknown_acked: times.keys().filter(|t| !pushed.contains(**t)).count(),
        ..Report::default()
    };
    // Effects: exactly one row per message the transactional consumer
    // acknowledged, and none for anything else.
    let mut rows: HashMap<&str, usize> = HashMap::new();
    for t in effect_rows {
        *rows.entry(t.as_str()).or_default() += 1;
    }
    let committed: HashSet<String> = ledgers
        .effects_committed
        .lock()
        .unwrap()
        .iter()
        .cloned()
        .collect();
    report.effects_wrong = committed
        .iter()
        .filter(|t| rows.get(t.as_str()) != Some(&1))
        .count()
        + rows.keys().filter(|t| !committed.contains(**t)).count();
    // Order: within a partition, acknowledged deliveries come in offset
    // order, and offset order is the producer's order.
    let mut by_partition: BTreeMap<&str, Vec<&Acked>> = BTreeMap::new();
    for a in &acked {
        by_partition
            .entry(a.partition.as_str())
            .or_default()
            .push(a);
    }
    let seq = |txn: &str| -> usize { txn.rsplit('-').next().unwrap().parse().unwrap() };
    for deliveries in by_partition.values_mut() {
        deliveries.sort_by_key(|a| (a.popped, a.offset));
        report.out_of_order += deliveries
            .windows(2)
            .filter(|w| w[0].offset >= w[1].offset)
            .count();
        let mut by_offset = deliveries.clone();
        by_offset.sort_by_key(|a| a.offset);
        report.out_of_order += by_offset
            .windows(2)
            .filter(|w| seq(&w[0].txn) >= seq(&w[1].txn))
            .count();
        // Leases of one partition never overlap across consumers.
        for (i, a) in deliveries.iter().enumerate() {
            for b in &deliveries[i + 1..] {
                if a.consumer != b.consumer && b.popped < a.ack_sent && a.popped < b.ack_sent {
                    report.overlapping_leases += 1;
                }
            }
        }
    }
    report
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
    let qw = Arc::new(Mutex::new(Queenwire::start(&cluster, &dir)));
    let cfg = qw.lock().unwrap().client_config();
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
