//! Following a failover: queenwire is given both hosts of a primary and its
//! streaming standby (`pg_basebackup -R`) with
//! `target_session_attrs=read-write`; the primary is shut down immediately
//! and the standby promoted; the same queenwire process serves again from
//! the new primary, its pool and background loops included, and nothing
//! acknowledged before the switch is lost (the standby had replayed it:
//! under asynchronous replication that is the operator's to ensure, see
//! docs/running.md).

mod common;

use common::proxy::{connect, Proxy};
use common::sql::rows;
use queenwire::embedded::EmbeddedPostgres;
use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn socket_dir(cluster: &EmbeddedPostgres) -> String {
    cluster.socket_dir().display().to_string()
}

fn open_dir(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    // Run as root, the clusters' unprivileged user must enter it.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_and_background_loops_follow_a_promoted_standby() {
    let dir = std::env::temp_dir().join(format!("qw-failover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    open_dir(&dir);
    open_dir(&dir.join("primary"));
    open_dir(&dir.join("standby"));
    let mut primary = tokio::task::block_in_place(|| {
        EmbeddedPostgres::start(&dir.join("primary")).expect("the primary starts")
    });
    let bin = queenwire::embedded::find_server_binaries().unwrap();
    let backup = Command::new(bin.join("pg_basebackup"))
        .arg("-D")
        .arg(dir.join("standby").join("pgdata"))
        .args(["-R", "-X", "stream", "-h", &socket_dir(&primary), "-p"])
        .arg(primary.port().to_string())
        .args(["-U", primary.user()])
        .output()
        .unwrap();
    assert!(
        backup.status.success(),
        "pg_basebackup: {}",
        String::from_utf8_lossy(&backup.stderr)
    );
    let standby = tokio::task::block_in_place(|| {
        EmbeddedPostgres::start(&dir.join("standby")).expect("the standby starts")
    });

    let backend: tokio_postgres::Config = format!(
        "host={},{} port={} user={} dbname={} target_session_attrs=read-write",
        socket_dir(&primary),
        socket_dir(&standby),
        primary.port(),
        primary.user(),
        primary.database()
    )
    .parse()
    .unwrap();
    let proxy = Proxy::start_on(backend, |_| {}).await;
    let client = proxy.connect().await;
    // A short lease: the ACK below also claims the next ten for this
    // session's next POP (src/engine/fusion/hold.rs), and that claim, if
    // the primary dies before it is given back, stays leased on the
    // promoted standby until its lease expires.
    rows(&client, "CREATE QUEUE jobs WITH (lease_time = '2s')").await;
    let values: Vec<String> = (0..50).map(|i| format!("('{i}', 'before-{i}')")).collect();
    rows(
        &client,
        &format!(
            "PUSH INTO jobs (payload, transaction_id) VALUES {}",
            values.join(", ")
        ),
    )
    .await;
    let first = rows(&client, "POP FROM jobs LIMIT 10").await;
    let receipts: Vec<String> = first
        .iter()
        .map(|r| format!("'{}'", r["receipt"].clone().unwrap()))
        .collect();
    let acked = rows(&client, &format!("ACK {}", receipts.join(", "))).await;
    assert!(acked
        .iter()
        .all(|r| r["status"].as_deref() == Some("acked")));

    // The standby has replayed everything acknowledged so far.
    let on_primary = connect(&primary.client_config()).await;
    let lsn: String = on_primary
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let on_standby = connect(&standby.client_config()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let caught_up: bool = on_standby
            .query_one(
                "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                &[&lsn],
            )
            .await
            .unwrap()
            .get(0);
        if caught_up {
            break;
        }
        assert!(Instant::now() < deadline, "the standby does not catch up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The primary dies; the standby is promoted.
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(primary.pid() as libc::pid_t, libc::SIGQUIT) };
    tokio::task::block_in_place(|| primary.stop()).unwrap();
    let promoted: bool = on_standby
        .query_one("SELECT pg_promote(true, 30)", &[])
        .await
        .unwrap()
        .get(0);
    assert!(promoted);
    let promoted_at = Instant::now();

    // The same queenwire serves again, from the new primary.
    let client = loop {
        let client = proxy.connect().await;
        if client
            .simple_query("PUSH INTO jobs (payload, transaction_id) VALUES ('50', 'after-0')")
            .await
            .is_ok()
        {
            break client;
        }
        assert!(
            promoted_at.elapsed() < Duration::from_secs(20),
            "queenwire does not follow the promoted standby"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "failover: serving a PUSH {:?} after the promotion",
        promoted_at.elapsed()
    );
    // Nothing acknowledged before the switch was lost, nothing acked came
    // back (a claim held when the primary died comes back with its lease's
    // expiry).
    let expected: HashSet<String> = (10..50)
        .map(|i| format!("before-{i}"))
        .chain(["after-0".to_string()])
        .collect();
    let mut ids: HashSet<String> = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while ids.len() < expected.len() && Instant::now() < deadline {
        let got = rows(&client, "POP FROM jobs LIMIT 100 PARTITIONS 10 WAIT '1s'").await;
        let mut receipts = Vec::new();
        for r in &got {
            let id = r["transaction_id"].clone().unwrap();
            assert!(ids.insert(id.clone()), "{id} delivered twice");
            receipts.push(format!("'{}'", r["receipt"].clone().unwrap()));
        }
        if !receipts.is_empty() {
            rows(&client, &format!("ACK {}", receipts.join(", "))).await;
        }
    }
    assert_eq!(ids, expected);
    // The timer loop follows too: a timer due now fires on the new primary.
    rows(
        &client,
        "SCHEDULE INTO timed KEY k AFTER 0 VALUES ('{\"t\":1}')",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while rows(&client, "POP FROM timed").await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the timer did not fire after the failover"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(client);
    drop(proxy);
    drop(standby);
    let _ = std::fs::remove_dir_all(&dir);
}
