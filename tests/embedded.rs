//! The embedded PostgreSQL launcher and the shared test cluster built on it.

mod common;

use std::path::Path;

use common::cluster::{cluster, fresh_database};
use queenwire::embedded::{find_server_binaries, EmbeddedPostgres};

async fn connect(config: &tokio_postgres::Config) -> tokio_postgres::Client {
    let (client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connect over the cluster's socket");
    tokio::spawn(connection);
    client
}

/// For the synchronous tests, which have no runtime of their own.
fn select_one(config: &tokio_postgres::Config) -> i32 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build a runtime");
    runtime.block_on(async {
        let client = connect(config).await;
        let row = client.query_one("SELECT 1", &[]).await.expect("SELECT 1");
        row.get(0)
    })
}

/// A zombie counts as gone: it has exited, only its exit status is left.
fn process_is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

#[test]
fn server_binaries_found_hold_initdb_and_postgres() {
    let bin_dir = find_server_binaries().expect("PostgreSQL 15+ server binaries");
    assert!(bin_dir.join("initdb").is_file());
    assert!(bin_dir.join("postgres").is_file());
}

#[tokio::test]
async fn shared_cluster_answers_select_1() {
    let client = connect(&cluster().client_config()).await;
    let row = client.query_one("SELECT 1", &[]).await.expect("SELECT 1");
    assert_eq!(row.get::<_, i32>(0), 1);
}

#[tokio::test]
async fn fresh_databases_are_distinct_and_each_usable() {
    let first = fresh_database("embedded");
    let second = fresh_database("embedded");
    assert_ne!(first.get_dbname(), second.get_dbname());

    let first_client = connect(&first).await;
    let second_client = connect(&second).await;
    first_client
        .batch_execute("CREATE TABLE only_in_first (id int); INSERT INTO only_in_first VALUES (7)")
        .await
        .expect("create a table in the first database");

    let row = first_client
        .query_one(
            "SELECT current_database(), (SELECT id FROM only_in_first)",
            &[],
        )
        .await
        .expect("query the first database");
    assert_eq!(Some(row.get::<_, &str>(0)), first.get_dbname());
    assert_eq!(row.get::<_, i32>(1), 7);

    let row = second_client
        .query_one(
            "SELECT current_database(), to_regclass('only_in_first') IS NULL",
            &[],
        )
        .await
        .expect("query the second database");
    assert_eq!(Some(row.get::<_, &str>(0)), second.get_dbname());
    assert!(
        row.get::<_, bool>(1),
        "the first database's table leaked into the second"
    );
}

#[test]
fn standalone_cluster_stops_and_starts_again_on_the_same_directory() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut postgres = EmbeddedPostgres::start(dir.path()).expect("first start");
    assert_eq!(select_one(&postgres.client_config()), 1);
    assert!(postgres.socket_dir().join(".s.PGSQL.5432").exists());

    let pid = postgres.pid();
    postgres.stop().expect("stop");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "postmaster {pid} outlived stop()"
    );
    postgres.stop().expect("a second stop does nothing");

    let restarted = EmbeddedPostgres::start(dir.path()).expect("start again on the same directory");
    assert_eq!(select_one(&restarted.client_config()), 1);
}

#[test]
fn postmaster_left_running_by_a_killed_run_is_stopped_and_replaced() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let leftover = EmbeddedPostgres::start(dir.path()).expect("first start");
    // As if queenwire had been killed with SIGKILL: nothing stops postgres.
    let leftover_pid = leftover.abandon();
    assert!(process_is_running(leftover_pid));

    let recovered = EmbeddedPostgres::start(dir.path()).expect("start over the leftover");
    assert!(
        !process_is_running(leftover_pid),
        "the leftover postmaster is still running"
    );
    assert_ne!(recovered.pid(), leftover_pid);
    assert_eq!(select_one(&recovered.client_config()), 1);

    // The forgotten handle will never reap its child; do it here.
    // SAFETY: a null status pointer is allowed.
    unsafe { libc::waitpid(leftover_pid as libc::pid_t, std::ptr::null_mut(), 0) };
}

/// A second start on a data directory in use is refused, and the running
/// cluster is left alone (it used to be stopped as a leftover).
#[test]
fn a_second_start_on_a_directory_in_use_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let running = EmbeddedPostgres::start(dir.path()).expect("first start");
    let refused = EmbeddedPostgres::start(dir.path()).expect_err("the directory is in use");
    assert!(
        refused.to_string().contains("another queenwire is using"),
        "{refused}"
    );
    assert!(process_is_running(running.pid()));
    assert_eq!(select_one(&running.client_config()), 1);
    drop(running);
    let again = EmbeddedPostgres::start(dir.path()).expect("free once the first stopped");
    assert_eq!(select_one(&again.client_config()), 1);
}
