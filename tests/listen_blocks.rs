//! LISTEN / UNLISTEN inside transaction blocks (psycopg's default, JDBC
//! with autocommit off) are served by the shared listening connection and
//! pin no backend connection, yet behave as PostgreSQL's: they take effect
//! at COMMIT, not after ROLLBACK or a failed block, not when a ROLLBACK TO
//! undoes them, and PREPARE TRANSACTION refuses the block. Each scenario
//! runs straight against PostgreSQL and through queenwire, and the two
//! transcripts must be equal.

mod common;

use common::proxy::Proxy;
use common::raw::{bind_text, execute, sync, Raw};
use queenwire::protocol::frontend::build_parse;
use queenwire::protocol::Message;
use std::time::Duration;

/// What the listener saw of one step: its replies' tags and SQLSTATEs,
/// its final status, and the payloads of the notifications that reached
/// it during the step or within a moment after it.
async fn step(
    listener: &mut Raw,
    label: &str,
    replies: common::raw::Replies,
    out: &mut Vec<String>,
) {
    let mut heard: Vec<String> = replies
        .messages
        .iter()
        .filter(|m| m.tag == b'A')
        .map(payload)
        .collect();
    while let Some(m) = listener.next_within(Duration::from_millis(400)).await {
        if m.tag == b'A' {
            heard.push(payload(&m));
        }
    }
    let codes: Vec<String> = replies
        .errors
        .iter()
        .map(|e| e.code().to_string())
        .collect();
    out.push(format!(
        "{label}: {:?} errors {:?} status {} heard {:?}",
        replies.completions, codes, replies.status as char, heard
    ));
}

fn payload(m: &Message) -> String {
    let mut r = m.reader();
    r.i32().expect("pid");
    let channel = r.cstr().expect("channel").to_string();
    let payload = r.cstr().expect("payload").to_string();
    format!("{channel}:{payload}")
}

/// The simple-protocol scenario; `p` prefixes the channels, so that runs
/// against one database do not hear each other.
async fn simple_scenario(
    listener: &mut Raw,
    notifier: &tokio_postgres::Client,
    p: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    let notify = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(c, v)| format!("NOTIFY {p}{c}, '{v}'"))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let script: Vec<String> = [
        "BEGIN",
        "LISTEN {p}a",
        "SAVEPOINT s",
        "LISTEN {p}b",
        "ROLLBACK TO s",
        "SAVEPOINT t",
        "LISTEN {p}c",
        "RELEASE t",
        "COMMIT",
    ]
    .iter()
    .map(|s| s.replace("{p}", p))
    .collect();
    for sql in &script {
        let r = listener.simple(sql).await;
        step(listener, sql, r, &mut out).await;
    }
    notifier
        .batch_execute(&notify(&[("a", "a1"), ("b", "b1"), ("c", "c1")]))
        .await
        .unwrap();
    step(listener, "after first commit", Default::default(), &mut out).await;

    // Undone: a ROLLBACK, a failed block's COMMIT, ROLLBACK AND CHAIN.
    for sql in [
        "BEGIN",
        "LISTEN {p}d",
        "ROLLBACK",
        "BEGIN",
        "LISTEN {p}e",
        "SELECT 1/0",
        "COMMIT",
        "START TRANSACTION",
        "LISTEN {p}g",
        "ROLLBACK AND CHAIN",
        "LISTEN {p}h",
        "END",
    ] {
        let sql = sql.replace("{p}", p);
        let r = listener.simple(&sql).await;
        step(listener, &sql, r, &mut out).await;
    }
    notifier
        .batch_execute(&notify(&[
            ("d", "d1"),
            ("e", "e1"),
            ("g", "g1"),
            ("h", "h1"),
            ("a", "a2"),
        ]))
        .await
        .unwrap();
    step(
        listener,
        "after the undone ones",
        Default::default(),
        &mut out,
    )
    .await;

    // UNLISTEN in a block: what came for the channel while the block was
    // open is not delivered after its COMMIT; the other channel's is.
    let r = listener.simple("BEGIN").await;
    step(listener, "BEGIN", r, &mut out).await;
    let r = listener.simple(&format!("UNLISTEN {p}a")).await;
    step(listener, "UNLISTEN a", r, &mut out).await;
    notifier
        .batch_execute(&notify(&[("a", "a3"), ("c", "c2")]))
        .await
        .unwrap();
    step(
        listener,
        "notified while open",
        Default::default(),
        &mut out,
    )
    .await;
    let r = listener.simple("COMMIT").await;
    step(listener, "COMMIT", r, &mut out).await;
    notifier
        .batch_execute(&notify(&[("a", "a4"), ("c", "c3")]))
        .await
        .unwrap();
    step(
        listener,
        "after UNLISTEN committed",
        Default::default(),
        &mut out,
    )
    .await;

    // PREPARE TRANSACTION of a block that ran LISTEN: PostgreSQL's verdict
    // (with prepared transactions disabled, that one comes first), the
    // block rolled back, the LISTEN gone.
    for sql in [
        "BEGIN",
        "LISTEN {p}f",
        "PREPARE TRANSACTION 'qw_listen_block'",
        "SELECT 1",
    ] {
        let sql = sql.replace("{p}", p);
        let r = listener.simple(&sql).await;
        step(listener, &sql, r, &mut out).await;
    }
    notifier
        .batch_execute(&notify(&[("f", "f1")]))
        .await
        .unwrap();
    step(listener, "after PREPARE", Default::default(), &mut out).await;
    out.iter().map(|l| l.replace(p, "")).collect()
}

/// Several statements in one simple query (`psql -c "…; …"`).
async fn script_scenario(
    listener: &mut Raw,
    notifier: &tokio_postgres::Client,
    p: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for sql in [
        "BEGIN; LISTEN {p}s1; SAVEPOINT x; LISTEN {p}s2; ROLLBACK TO x; COMMIT",
        "LISTEN {p}s3; LISTEN {p}s4",
        "LISTEN {p}s5; SELECT 1/0; LISTEN {p}s6",
        "UNLISTEN {p}s3; SELECT 1",
        "BEGIN; LISTEN {p}s7",
        "LISTEN {p}s8; ROLLBACK",
    ] {
        let sql = sql.replace("{p}", p);
        let r = listener.simple(&sql).await;
        step(listener, &sql, r, &mut out).await;
    }
    let notify: Vec<String> = (1..=8).map(|i| format!("NOTIFY {p}s{i}, '{i}'")).collect();
    notifier.batch_execute(&notify.join("; ")).await.unwrap();
    step(listener, "after the scripts", Default::default(), &mut out).await;
    out.iter().map(|l| l.replace(p, "")).collect()
}

/// A LISTEN and a NOTIFY on its channel committed together: PostgreSQL
/// delivers the notification to the listener (its LISTEN takes effect
/// with the commit that sends it), in a block of statements, in one
/// query, in a pipeline's COMMIT and in an implicit transaction; a COMMIT
/// that fails leaves nothing listening.
async fn own_notify_scenario(
    listener: &mut Raw,
    notifier: &tokio_postgres::Client,
    p: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    let scripts = [
        "BEGIN",
        "LISTEN {p}o1",
        "NOTIFY {p}o1, 'statements'",
        "COMMIT",
        "BEGIN; LISTEN {p}o2; NOTIFY {p}o2, 'one query'; COMMIT",
        "LISTEN {p}o3; NOTIFY {p}o3, 'implicit'",
        "CREATE TABLE {p}once (a int UNIQUE DEFERRABLE INITIALLY DEFERRED)",
        "BEGIN",
        "LISTEN {p}o4",
        "INSERT INTO {p}once VALUES (1), (1)",
        "COMMIT",
    ];
    for sql in scripts {
        let sql = sql.replace("{p}", p);
        let r = listener.simple(&sql).await;
        step(listener, &sql, r, &mut out).await;
    }
    listener.simple("BEGIN").await;
    listener.simple(&format!("LISTEN {p}o5")).await;
    let mut pipeline = statement(&format!("NOTIFY {p}o5, 'pipeline'"));
    pipeline.extend(statement("COMMIT"));
    pipeline.push(sync());
    listener.send(&pipeline).await;
    let r = listener.read_until_ready().await;
    step(listener, "pipeline's COMMIT", r, &mut out).await;
    notifier
        .batch_execute(&format!("NOTIFY {p}o4, 'after a failed commit'"))
        .await
        .unwrap();
    step(
        listener,
        "after the failed commit",
        Default::default(),
        &mut out,
    )
    .await;
    listener.simple(&format!("DROP TABLE {p}once")).await;
    out.iter().map(|l| l.replace(p, "")).collect()
}

fn statement(sql: &str) -> Vec<Message> {
    vec![
        build_parse("", sql, &[]),
        bind_text("", "", &[]),
        execute("", 0),
    ]
}

/// What JDBC with autocommit off sends: BEGIN in the pipeline of the first
/// statement, COMMIT in one of its own.
async fn extended_scenario(
    listener: &mut Raw,
    notifier: &tokio_postgres::Client,
    p: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    let pipeline = |sqls: &[String]| {
        let mut m: Vec<Message> = sqls.iter().flat_map(|s| statement(s)).collect();
        m.push(sync());
        m
    };
    let steps: Vec<Vec<String>> = vec![
        vec!["BEGIN".into(), format!("LISTEN {p}x")],
        vec![
            format!("LISTEN {p}y"),
            "SAVEPOINT s".into(),
            format!("LISTEN {p}z"),
        ],
        vec!["ROLLBACK TO SAVEPOINT s".into()],
        vec!["COMMIT".into()],
    ];
    for (i, sqls) in steps.iter().enumerate() {
        listener.send(&pipeline(sqls)).await;
        let r = listener.read_until_ready().await;
        step(listener, &format!("pipeline {i}"), r, &mut out).await;
    }
    notifier
        .batch_execute(&format!(
            "NOTIFY {p}x, 'x1'; NOTIFY {p}y, 'y1'; NOTIFY {p}z, 'z1'"
        ))
        .await
        .unwrap();
    step(listener, "after commit", Default::default(), &mut out).await;
    // A pipeline that prepares a block that ran LISTEN, then goes on.
    listener
        .send(&pipeline(&[
            "BEGIN".into(),
            format!("LISTEN {p}w"),
            "PREPARE TRANSACTION 'qw_listen_pipe'".into(),
            "SELECT 1".into(),
        ]))
        .await;
    let r = listener.read_until_ready().await;
    step(listener, "prepare pipeline", r, &mut out).await;
    listener.send(&pipeline(&["SELECT 2".into()])).await;
    let r = listener.read_until_ready().await;
    step(listener, "after it", r, &mut out).await;
    notifier
        .batch_execute(&format!("NOTIFY {p}w, 'w1'"))
        .await
        .unwrap();
    step(listener, "after prepare", Default::default(), &mut out).await;
    // An error before the PREPARE in its pipeline: PostgreSQL skips the
    // PREPARE with the rest, up to the Sync.
    listener
        .send(&pipeline(&["BEGIN".into(), format!("LISTEN {p}v")]))
        .await;
    let r = listener.read_until_ready().await;
    step(listener, "block with a LISTEN", r, &mut out).await;
    listener
        .send(&pipeline(&[
            "SELECT 1/0".into(),
            "PREPARE TRANSACTION 'qw_listen_failed'".into(),
        ]))
        .await;
    let r = tokio::time::timeout(Duration::from_secs(20), listener.read_until_ready())
        .await
        .expect("the failed pipeline's Sync is answered (a hang is a failure)");
    step(listener, "prepare after an error", r, &mut out).await;
    listener.send(&pipeline(&["ROLLBACK".into()])).await;
    let r = listener.read_until_ready().await;
    step(listener, "rolled back", r, &mut out).await;
    notifier
        .batch_execute(&format!("NOTIFY {p}v, 'v1'"))
        .await
        .unwrap();
    step(listener, "after the rollback", Default::default(), &mut out).await;
    out.iter().map(|l| l.replace(p, "")).collect()
}

#[tokio::test]
async fn listen_in_blocks_behaves_as_postgresql_s_and_pins_nothing() {
    // Two connections: a pinned listener would leave one.
    let proxy = Proxy::start_with("listen_blocks", |c| c.pool_size = 2).await;
    let direct_notifier = proxy.connect_direct().await;
    let mut direct = Raw::connect_direct(&proxy.direct).await;
    let want = simple_scenario(&mut direct, &direct_notifier, "dd7_").await;
    let want_ext = extended_scenario(&mut direct, &direct_notifier, "dd7_").await;
    let want_scripts = script_scenario(&mut direct, &direct_notifier, "dd7_").await;
    let want_own = own_notify_scenario(&mut direct, &direct_notifier, "dd7_").await;
    drop(direct);

    let notifier = proxy.connect().await;
    let mut listener = Raw::connect(proxy.addr).await;
    let got = simple_scenario(&mut listener, &notifier, "qq7_").await;
    assert_eq!(
        got, want,
        "simple protocol: through queenwire vs PostgreSQL"
    );
    let got_ext = extended_scenario(&mut listener, &notifier, "qq7_").await;
    assert_eq!(
        got_ext, want_ext,
        "extended protocol: through queenwire vs PostgreSQL"
    );
    let got_scripts = script_scenario(&mut listener, &notifier, "qq7_").await;
    assert_eq!(
        got_scripts, want_scripts,
        "scripts: through queenwire vs PostgreSQL"
    );
    let got_own = own_notify_scenario(&mut listener, &notifier, "qq7_").await;
    assert_eq!(
        got_own, want_own,
        "a block's own NOTIFY: through queenwire vs PostgreSQL"
    );
    assert_eq!(
        want_own.iter().filter(|l| l.contains("heard [\"o")).count(),
        4,
        "{want_own:#?}"
    );
    assert!(
        want_scripts
            .last()
            .is_some_and(|l| l.contains("[\"s1:1\", \"s4:4\"]")),
        "{want_scripts:#?}"
    );
    // A script with a queenwire statement and no transaction control runs
    // in a block of queenwire's own: its LISTEN listens at the commit.
    let r = listener
        .simple("PUSH INTO qq7_queue VALUES ('{}'); LISTEN qq7_mixed")
        .await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    notifier
        .batch_execute("NOTIFY qq7_mixed, 'm'")
        .await
        .unwrap();
    let m = listener
        .next_within(Duration::from_secs(10))
        .await
        .expect("the mixed script's LISTEN listens");
    assert_eq!(payload(&m), "qq7_mixed:m");
    // The scenarios heard something at all (they can fail).
    assert!(want.iter().any(|l| l.contains("\"c:c3\"")), "{want:#?}");
    assert!(
        want_ext.iter().any(|l| l.contains("\"x:x1\"")),
        "{want_ext:#?}"
    );
    assert!(
        want.iter()
            .any(|l| l.starts_with("PREPARE") && l.contains("errors [\"")),
        "{want:#?}"
    );

    // The listener holds no connection: two other clients each hold one
    // in a transaction block at once.
    let a = proxy.connect().await;
    let b = proxy.connect().await;
    let both = async {
        a.batch_execute("BEGIN; SELECT 1").await.unwrap();
        b.batch_execute("BEGIN; SELECT 1").await.unwrap();
    };
    tokio::time::timeout(Duration::from_secs(10), both)
        .await
        .expect("the listener pinned a connection");
    a.batch_execute("COMMIT").await.unwrap();
    b.batch_execute("COMMIT").await.unwrap();
    // And still hears what it listens on.
    notifier.batch_execute("NOTIFY qq7_x, 'x2'").await.unwrap();
    let m = listener
        .next_within(Duration::from_secs(10))
        .await
        .expect("still listening");
    assert_eq!(payload(&m), "qq7_x:x2");
}
