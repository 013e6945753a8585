//! pgbench's built-in TPC-B through queenwire: `pgbench -i` (DROP/CREATE,
//! COPY of 100 000 rows, VACUUM, primary keys), then a bounded run with
//! several clients in each query mode, which must end with every transaction
//! processed and none failed, as it does on PostgreSQL itself.
//!
//! Each mode is its own test on its own database, so a mode that fails is
//! reported by name with pgbench's own error text.

mod common;

use common::proxy::Proxy;
use std::process::Command;

/// Clients × transactions per client: a few hundred transactions, about a
/// second per mode on a 2-core machine with a debug build.
const CLIENTS: &str = "4";
const TRANSACTIONS_PER_CLIENT: &str = "100";
const EXPECTED_TRANSACTIONS: &str = "400/400";
/// One pgbench thread per client. With fewer threads, `-M prepared` can
/// stall (until `--pool-wait-timeout`, then fail with 53300) on any
/// transaction pool smaller than the clients:
/// pgbench prepares a client's statements with a blocking PQprepare on the
/// thread that also drives its other clients, so a client waiting for a
/// backend connection stops the clients of its thread that hold the
/// connections inside their transactions (seen with 8 clients, 2 threads
/// and a pool of 2: every thread stuck preparing, both connections idle in
/// transaction after BEGIN).
const THREADS: &str = CLIENTS;
/// Fewer backend connections than clients, so the clients' transactions (and,
/// with `-M prepared`, their named statements) move between connections.
const POOL_SIZE: usize = 2;
/// Seconds one pgbench invocation may take before it is stopped (`timeout`),
/// so a hang fails the test instead of the whole suite.
const PGBENCH_TIMEOUT_SECONDS: &str = "180";

/// Runs `pgbench` against the proxy on a blocking thread (the proxy is served
/// from the test's runtime); returns (success, stdout, stderr).
async fn pgbench(proxy: &Proxy, args: &[&str]) -> (bool, String, String) {
    let port = proxy.addr.port().to_string();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("timeout")
            .args([PGBENCH_TIMEOUT_SECONDS, "pgbench"])
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "tester"])
            .args(&args)
            .arg("anything")
            .env_remove("PGPASSWORD")
            .env_remove("PGOPTIONS")
            .output()
            .expect("pgbench runs (apt-get install postgresql-client)")
    })
    .await
    .expect("pgbench thread");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `pgbench -i -s 1`, then a TPC-B run in `mode`; asserts exit status 0,
/// every transaction processed and 0 failed.
async fn tpcb_in_mode(mode: &str) {
    let proxy = Proxy::start_with(&format!("pgbench_{mode}"), |config| {
        config.pool_size = POOL_SIZE
    })
    .await;
    let (ok, out, err) = pgbench(&proxy, &["-i", "-s", "1", "-q"]).await;
    assert!(
        ok,
        "pgbench -i -s 1 through queenwire failed:\n{out}\n{err}"
    );

    let (ok, out, err) = pgbench(
        &proxy,
        &[
            "-M",
            mode,
            "-c",
            CLIENTS,
            "-j",
            THREADS,
            "-t",
            TRANSACTIONS_PER_CLIENT,
        ],
    )
    .await;
    assert!(
        ok,
        "pgbench -M {mode} through queenwire failed:\n{out}\n{err}"
    );
    let processed = format!("number of transactions actually processed: {EXPECTED_TRANSACTIONS}");
    assert!(
        out.contains(&processed),
        "pgbench -M {mode}: not {processed}:\n{out}\n{err}"
    );
    assert!(
        out.contains("number of failed transactions: 0 "),
        "pgbench -M {mode}: failed transactions:\n{out}\n{err}"
    );
    // The throughput, for the record (cargo test -- --nocapture shows it).
    if let Some(tps) = out.lines().find(|line| line.starts_with("tps =")) {
        println!("pgbench -M {mode} through queenwire: {tps}");
    }
}

#[tokio::test]
async fn pgbench_tpcb_simple_protocol_runs_without_failed_transactions() {
    tpcb_in_mode("simple").await;
}

#[tokio::test]
async fn pgbench_tpcb_extended_protocol_runs_without_failed_transactions() {
    tpcb_in_mode("extended").await;
}

#[tokio::test]
async fn pgbench_tpcb_prepared_statements_run_without_failed_transactions() {
    tpcb_in_mode("prepared").await;
}
