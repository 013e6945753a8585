//! Plain SQL behaves as on PostgreSQL itself in the places a pooling proxy
//! most easily gets wrong: the fast-path protocol, statements the dialect
//! must not capture, notifications to idle listeners, pipelines after an
//! error, client encodings.

mod common;

use common::proxy::Proxy;
use std::time::Duration;

/// psql against the proxy, failing the test instead of hanging it.
async fn psql(proxy: &Proxy, args: &[&str]) -> (bool, String, String) {
    tokio::time::timeout(Duration::from_secs(60), proxy.psql(args))
        .await
        .expect("psql finished within 60 s (a hang is a failure)")
}

#[tokio::test]
async fn large_objects_over_the_fastpath_protocol_work_with_psql() {
    let proxy = Proxy::start("fastpath").await;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bin");
    let output = dir.path().join("out.bin");
    let body: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&input, &body).unwrap();
    let script = format!(
        "\\lo_import '{}'\n\
         \\lo_export :LASTOID '{}'\n\
         SELECT count(*) > 0 FROM pg_largeobject_metadata WHERE oid = :LASTOID;\n\
         \\lo_unlink :LASTOID\n\
         SELECT count(*) FROM pg_largeobject_metadata WHERE oid = :LASTOID;\n\
         SELECT 'after';\n",
        input.display(),
        output.display()
    );
    let file = dir.path().join("lo.sql");
    std::fs::write(&file, script).unwrap();
    let (ok, out, err) = psql(&proxy, &["-At", "-f", file.to_str().unwrap()]).await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with("lo_")).collect();
    assert_eq!(lines, ["t", "0", "after"], "{out}");
    assert_eq!(std::fs::read(&output).unwrap(), body);
}

#[tokio::test]
async fn postgresql_s_drop_group_reaches_postgresql() {
    let proxy = Proxy::start("drop_group").await;
    let (ok, out, err) = psql(
        &proxy,
        &[
            "-At",
            "-c",
            "CREATE GROUP qw_staff",
            "-c",
            "SELECT count(*) FROM pg_roles WHERE rolname = 'qw_staff'",
            "-c",
            "DROP GROUP qw_staff",
            "-c",
            "DROP GROUP IF EXISTS qw_nobody, qw_staff",
            "-c",
            "SELECT count(*) FROM pg_roles WHERE rolname = 'qw_staff'",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "CREATE ROLE\n1\nDROP ROLE\nDROP ROLE\n0\n", "{err}");
    // PostgreSQL's own notices for the roles that did not exist.
    assert!(err.contains("qw_nobody"), "{err}");
    // The dialect's DROP GROUP still works.
    let client = proxy.connect().await;
    client.batch_execute("CREATE QUEUE dg_orders").await.unwrap();
    let err = client
        .batch_execute("DROP GROUP billing ON dg_orders")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&tokio_postgres::error::SqlState::UNDEFINED_OBJECT));
    assert!(format!("{err:?}").contains("consumer group"), "{err:?}");
}
