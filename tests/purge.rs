//! PURGE TENANT (031): three tenants with queues, partitions, messages,
//! DLQ rows, consumer cursors, KV keys and timers each; the middle one is
//! purged; the other two are unchanged row for row, the purged one has no
//! row left anywhere. Also: a purge stopped halfway is finished by running
//! it again, pushes racing the purge fail cleanly or are purged, and a
//! non-administrator is refused with 42501.

mod common;

use common::proxy::Proxy;
use queenwire::users::{Passthrough, User, Users, Verifier};
use std::sync::Arc;
use tokio_postgres::{Client, SimpleQueryMessage};
use uuid::Uuid;

const TENANT_A: Uuid = Uuid::from_u128(0xa);
const TENANT_B: Uuid = Uuid::from_u128(0xb);
const TENANT_C: Uuid = Uuid::from_u128(0xc);

fn users() -> Arc<Users> {
    let mut users = Users::default();
    for (name, tenant) in [
        ("a", TENANT_A),
        ("b", TENANT_B),
        ("c", TENANT_C),
        ("root", TENANT_A),
    ] {
        users.users.insert(
            name.into(),
            User {
                name: name.into(),
                tenant,
                passthrough: Passthrough::Full,
                verifier: Verifier::new("pw"),
            },
        );
    }
    users.admins.insert("root".into());
    Arc::new(users)
}

async fn login(proxy: &Proxy, name: &str) -> Client {
    let mut cfg = proxy.client_config();
    cfg.user(name).password("pw");
    common::proxy::connect(&cfg).await
}

fn first_row(messages: Vec<SimpleQueryMessage>) -> Vec<Option<String>> {
    messages
        .into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .unwrap_or_default()
}

async fn code(client: &Client, sql: &str) -> String {
    match client.simple_query(sql).await {
        Ok(_) => panic!("{sql}: succeeded, an error was expected"),
        Err(e) => e
            .code()
            .map(|c| c.code().to_string())
            .unwrap_or_else(|| panic!("{sql}: {e}")),
    }
}

/// Queues with two partitions of messages, a consumer cursor, a DLQ row,
/// KV keys and timers, all in the client's tenant.
async fn seed(client: &Client) {
    client
        .batch_execute(
            "CREATE QUEUE jobs WITH (retry_limit = 0);
             PUSH INTO jobs PARTITION p1 VALUES ('{\"n\": 1}'), ('{\"n\": 2}');
             PUSH INTO jobs PARTITION p2 VALUES ('{\"n\": 3}');
             PUSH INTO events VALUES ('{\"e\": 1}'), ('{\"e\": 2}'), ('{\"e\": 3}');
             KV PUT cfg k1 '{\"v\": 1}' FOREVER;
             KV PUT cfg k2 '[1, 2]' FOREVER;
             KV PUT other k3 '3' FOREVER;
             SCHEDULE INTO jobs KEY later AT '2099-01-01 00:00:00+00' VALUES ('{\"t\": 1}');
             SCHEDULE INTO events KEY tick EVERY '1h' VALUES ('{\"t\": 2}');",
        )
        .await
        .unwrap();
    // One message dead-lettered (retry_limit 0: the first failure), one
    // acknowledged (a cursor).
    let popped = first_row(
        client
            .simple_query("POP FROM jobs PARTITION p1 GROUP workers LIMIT 1")
            .await
            .unwrap(),
    );
    let receipt = popped[0].clone().expect("a receipt");
    client
        .simple_query(&format!("ACK '{receipt}' FAILED REASON 'boom'"))
        .await
        .unwrap();
    client
        .simple_query("POP FROM events GROUP readers LIMIT 2 AUTO ACK")
        .await
        .unwrap();
}

/// Per table, the tenant's rows: their count and a checksum of their text.
/// queue_ops_metrics and queue_retained_bytes are written by background
/// tasks on their own clock, so they are counted for the purged tenant
/// only (`leftover`), not compared byte for byte.
const TABLES: &[(&str, &str)] = &[
    ("queues", "SELECT q.* FROM queen.queues q WHERE q.tenant_id = $1"),
    (
        "log_partitions",
        "SELECT p.* FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1",
    ),
    (
        "log_segments",
        "SELECT s.* FROM queen.log_segments s JOIN queen.log_partitions p ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1",
    ),
    (
        "log_txns",
        "SELECT t.* FROM queen.log_txns t JOIN queen.log_partitions p ON p.id = t.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1",
    ),
    (
        "log_dlq",
        "SELECT d.* FROM queen.log_dlq d JOIN queen.log_partitions p ON p.id = d.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1",
    ),
    (
        "log_consumers",
        "SELECT c.* FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1",
    ),
    (
        "consumer_groups_metadata",
        "SELECT m.* FROM queen.consumer_groups_metadata m JOIN queen.queues q ON q.id = m.queue_id WHERE q.tenant_id = $1",
    ),
    ("kv", "SELECT k.* FROM queen.kv k WHERE k.tenant_id = $1"),
    ("log_timers", "SELECT t.* FROM queen.log_timers t WHERE t.tenant_id = $1"),
    ("hotlist_repairs", "SELECT h.* FROM queen.hotlist_repairs h WHERE h.tenant_id = $1"),
    ("kv_usage", "SELECT u.* FROM queen.kv_usage u WHERE u.tenant_id = $1"),
    ("kv_quota", "SELECT u.* FROM queen.kv_quota u WHERE u.tenant_id = $1"),
    ("tenant_roles", "SELECT r.role_name, r.tenant_id, r.read_only FROM queen.tenant_roles r WHERE r.tenant_id = $1"),
];

async fn snapshot(direct: &Client, tenant: Uuid) -> Vec<(String, i64, String)> {
    let mut out = Vec::new();
    for (table, select) in TABLES {
        let sql = format!(
            "SELECT count(*), coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM ({select}) t"
        );
        let row = direct.query_one(&sql, &[&tenant]).await.unwrap();
        out.push((table.to_string(), row.get(0), row.get(1)));
    }
    out
}

/// Rows of the tenant left anywhere, including the metrics tables and the
/// FK-less leaves whose partitions might already be gone.
async fn leftover(direct: &Client, tenant: Uuid) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = snapshot(direct, tenant)
        .await
        .into_iter()
        .map(|(t, n, _)| (t, n))
        .collect();
    for table in ["queue_ops_metrics", "queue_retained_bytes"] {
        let sql = format!(
            "SELECT count(*) FROM queen.{table} m WHERE NOT EXISTS (SELECT 1 FROM queen.queues q WHERE q.id = m.queue_id)"
        );
        let n: i64 = direct.query_one(&sql, &[]).await.unwrap().get(0);
        out.push((format!("{table} (orphans)"), n));
    }
    for table in ["log_txns", "log_dlq", "log_segments", "log_consumers"] {
        let sql = format!(
            "SELECT count(*) FROM queen.{table} x WHERE NOT EXISTS (SELECT 1 FROM queen.log_partitions p WHERE p.id = x.partition_id)"
        );
        let n: i64 = direct.query_one(&sql, &[]).await.unwrap().get(0);
        out.push((format!("{table} (orphans)"), n));
    }
    out.retain(|(_, n)| *n > 0);
    out
}

async fn start(prefix: &str) -> (Proxy, Client) {
    let proxy = Proxy::start_with(prefix, |c| c.users = Some(users())).await;
    let direct = common::proxy::connect(&proxy.direct).await;
    for name in ["a", "b", "c"] {
        seed(&login(&proxy, name).await).await;
    }
    (proxy, direct)
}

#[tokio::test]
async fn purging_the_middle_tenant_leaves_the_other_two_unchanged_row_for_row() {
    let (proxy, direct) = start("purge_three").await;
    direct
        .batch_execute(&format!(
            "INSERT INTO queen.kv_quota (tenant_id, max_keys) VALUES ('{TENANT_A}', 10), ('{TENANT_B}', 10), ('{TENANT_C}', 10)"
        ))
        .await
        .unwrap();
    let before_a = snapshot(&direct, TENANT_A).await;
    let before_c = snapshot(&direct, TENANT_C).await;
    let before_b = snapshot(&direct, TENANT_B).await;
    for (table, n, _) in &before_b {
        if !matches!(table.as_str(), "hotlist_repairs" | "kv_usage") {
            assert!(*n > 0, "tenant B was seeded with no {table} rows");
        }
    }

    let root = login(&proxy, "root").await;
    let row = first_row(
        root.simple_query(&format!("PURGE TENANT '{TENANT_B}'"))
            .await
            .unwrap(),
    );
    let counts: Vec<&str> = row.iter().map(|c| c.as_deref().unwrap_or("")).collect();
    // tenant, queues, partitions, segments, messages, dlq, kv_keys, timers
    assert_eq!(counts[0], TENANT_B.to_string());
    assert_eq!(&counts[1..], ["2", "3", "3", "6", "1", "3", "2"], "{row:?}");

    assert_eq!(
        leftover(&direct, TENANT_B).await,
        Vec::<(String, i64)>::new()
    );
    assert_eq!(snapshot(&direct, TENANT_A).await, before_a);
    assert_eq!(snapshot(&direct, TENANT_C).await, before_c);

    // Purging an empty tenant is a no-op that still answers one row.
    let again = first_row(
        root.simple_query(&format!("PURGE TENANT '{TENANT_B}'"))
            .await
            .unwrap(),
    );
    assert_eq!(again[1].as_deref(), Some("0"));
    // The other tenants still work through the proxy.
    let a = login(&proxy, "a").await;
    a.simple_query("PUSH INTO jobs VALUES ('{}')")
        .await
        .unwrap();
}

#[tokio::test]
async fn a_purge_stopped_halfway_is_finished_by_running_it_again() {
    let (proxy, direct) = start("purge_resume").await;
    let before_a = snapshot(&direct, TENANT_A).await;
    // A few steps of one row each, then "the crash": nothing more.
    for _ in 0..4 {
        let row = direct
            .query_one(
                "SELECT done FROM queen.tenant_purge_step_v1($1, 1)",
                &[&TENANT_B],
            )
            .await
            .unwrap();
        assert!(!row.get::<_, bool>(0));
    }
    assert!(!leftover(&direct, TENANT_B).await.is_empty());
    // Steps until done, each its own transaction, a small batch.
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps < 1000, "the purge does not end");
        let done: bool = direct
            .query_one(
                "SELECT done FROM queen.tenant_purge_step_v1($1, 2)",
                &[&TENANT_B],
            )
            .await
            .unwrap()
            .get(0);
        if done {
            break;
        }
    }
    assert_eq!(
        leftover(&direct, TENANT_B).await,
        Vec::<(String, i64)>::new()
    );
    assert_eq!(snapshot(&direct, TENANT_A).await, before_a);
    // The statement over the extended protocol too, on what is left (nothing).
    let root = login(&proxy, "root").await;
    let described = root.prepare("PURGE TENANT $1").await.unwrap();
    let names: Vec<&str> = described.columns().iter().map(|c| c.name()).collect();
    assert_eq!(
        names,
        [
            "tenant",
            "queues",
            "partitions",
            "segments",
            "messages",
            "dlq",
            "kv_keys",
            "timers"
        ]
    );
    let rows = root
        .query("PURGE TENANT $1", &[&TENANT_B.to_string()])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, Uuid>("tenant"), TENANT_B);
    assert_eq!(rows[0].get::<_, i64>("queues"), 0);
}

#[tokio::test]
async fn pushes_racing_a_purge_fail_cleanly_or_are_purged() {
    let (proxy, direct) = start("purge_race").await;
    let before_a = snapshot(&direct, TENANT_A).await;
    let b = login(&proxy, "b").await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let b_pushed = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let pusher = {
        let stop = stop.clone();
        let b_pushed = b_pushed.clone();
        tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match b
                    .simple_query("PUSH INTO jobs VALUES ('{\"race\": 1}')")
                    .await
                {
                    Ok(_) => {
                        ok += 1;
                        b_pushed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) => {
                        assert!(e.code().is_some(), "a push failed without a SQLSTATE: {e}");
                        failed += 1;
                    }
                }
            }
            (ok, failed)
        })
    };
    while b_pushed.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let root = login(&proxy, "root").await;
    for _ in 0..3 {
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            root.simple_query(&format!("PURGE TENANT '{TENANT_B}'")),
        )
        .await
        .expect("the purge does not hang")
        .unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = pusher.await.unwrap();
    eprintln!("pushes during the purges: {ok} committed, {failed} failed cleanly");
    assert!(ok > 0, "no push ran during the purge");
    // Every push that committed during a purge is gone with it; the last
    // pushes may have re-provisioned the queue after it: one more purge, with
    // no pusher, leaves nothing.
    root.simple_query(&format!("PURGE TENANT '{TENANT_B}'"))
        .await
        .unwrap();
    assert_eq!(
        leftover(&direct, TENANT_B).await,
        Vec::<(String, i64)>::new()
    );
    assert_eq!(snapshot(&direct, TENANT_A).await, before_a);
}

/// A producer that keeps pushing while its tenant is purged re-creates its
/// queue after the step that deleted it; the purge leaves that new queue
/// alone: it removes the queues that existed when it began (the count it
/// answers), and of the pushes, what survives is everything from some
/// point on, never a gap after a push that survived.
#[tokio::test]
async fn a_queue_re_created_during_a_purge_keeps_every_push_made_into_it() {
    let (proxy, direct) = start("purge_recreated").await;
    let queues_before: i64 = direct
        .query_one(
            "SELECT count(*) FROM queen.queues WHERE tenant_id = $1",
            &[&TENANT_B],
        )
        .await
        .unwrap()
        .get(0);
    let b = Arc::new(login(&proxy, "b").await);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pushed = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let pusher = {
        let (b, stop, pushed) = (b.clone(), stop.clone(), pushed.clone());
        tokio::spawn(async move {
            let (mut n, mut queued) = (0u32, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let sql = format!("PUSH INTO racing{} VALUES ('{{\"n\": {n}}}')", n % 8);
                if b.simple_query(&sql).await.is_ok() {
                    queued.push(n);
                    pushed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                n += 1;
            }
            queued
        })
    };
    while pushed.load(std::sync::atomic::Ordering::Relaxed) < 40 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let root = login(&proxy, "root").await;
    let answer = first_row(
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            root.simple_query(&format!("PURGE TENANT '{TENANT_B}'")),
        )
        .await
        .expect("the purge does not hang")
        .unwrap(),
    );
    // Pushes go on after the purge, into the queue they re-created.
    let after = pushed.load(std::sync::atomic::Ordering::Relaxed);
    while pushed.load(std::sync::atomic::Ordering::Relaxed) < after + 20 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = pusher.await.unwrap();
    // The queues that existed when it began, the racing ones among them.
    assert_eq!(
        answer.get(1).cloned().flatten(),
        Some((queues_before + 8).to_string()),
        "queues removed: {answer:?}"
    );
    for queue in 0..8u32 {
        let mut kept: Vec<u32> = Vec::new();
        loop {
            let pop = format!("POP FROM racing{queue} LIMIT 10000 AUTO ACK");
            let got = common::sql::rows(&b, &pop).await;
            if got.is_empty() {
                break;
            }
            kept.extend(got.iter().map(|row| {
                let payload = row.get("payload").cloned().flatten().unwrap_or_default();
                let digits: String = payload.chars().filter(char::is_ascii_digit).collect();
                digits
                    .parse::<u32>()
                    .unwrap_or_else(|e| panic!("{payload}: {e}"))
            }));
        }
        kept.sort_unstable();
        let first = *kept.first().expect("the pushes after the purge are kept");
        let missing: Vec<u32> = sent
            .iter()
            .copied()
            .filter(|n| n % 8 == queue && *n > first && kept.binary_search(n).is_err())
            .collect();
        assert!(
            missing.is_empty(),
            "racing{queue}: pushes after its first kept one, lost: {missing:?}"
        );
    }
}

#[tokio::test]
async fn a_non_administrator_is_refused_and_nothing_changes() {
    let (proxy, direct) = start("purge_refused").await;
    let before_b = snapshot(&direct, TENANT_B).await;
    // Not a statement PostgreSQL accepts: the dialect takes nothing of its.
    assert_eq!(
        code(&direct, &format!("PURGE TENANT '{TENANT_B}'")).await,
        "42601"
    );
    let a = login(&proxy, "a").await;
    assert_eq!(
        code(&a, &format!("PURGE TENANT '{TENANT_B}'")).await,
        "42501"
    );
    assert_eq!(
        code(&a, &format!("PURGE TENANT '{TENANT_A}'")).await,
        "42501"
    );
    // A tenant role cannot call the step procedure either.
    assert_eq!(
        code(
            &a,
            &format!("SELECT * FROM queen.tenant_purge_step_v1('{TENANT_B}', 10)")
        )
        .await,
        "42501"
    );
    assert_eq!(snapshot(&direct, TENANT_B).await, before_b);
    // The session goes on.
    a.simple_query("SELECT 1").await.unwrap();

    let root = login(&proxy, "root").await;
    assert_eq!(code(&root, "PURGE TENANT 'not-a-uuid'").await, "22P02");
    root.batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        code(&root, &format!("PURGE TENANT '{TENANT_B}'")).await,
        "25001"
    );
    root.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(snapshot(&direct, TENANT_B).await, before_b);
}

/// Messages of the tenant's queue `jobs`, counted from the partitions'
/// offset allocators (retention deletes nothing this young).
async fn jobs_messages(direct: &Client, tenant: Uuid) -> i64 {
    direct
        .query_one(
            "SELECT coalesce(sum(p.last_offset + 1), 0)::BIGINT FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1 AND q.name = 'jobs'",
            &[&tenant],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn two_purges_from_two_queenwires_at_once_finish_while_other_tenants_push_on() {
    let (proxy, direct) = start("purge_two").await;
    let second = Proxy::start_on(proxy.direct.clone(), |c| c.users = Some(users())).await;
    let before_a = jobs_messages(&direct, TENANT_A).await;
    let before_c = jobs_messages(&direct, TENANT_C).await;
    // Tenants A and C push through the second queenwire meanwhile; every
    // push they were told succeeded must be there afterwards (a ledger).
    let mut pushers = Vec::new();
    for name in ["a", "c"] {
        let client = login(&second, name).await;
        pushers.push(tokio::spawn(async move {
            let mut ok = 0i64;
            for _ in 0..200 {
                client
                    .simple_query("PUSH INTO jobs VALUES ('{\"other\": 1}')")
                    .await
                    .unwrap();
                ok += 1;
            }
            ok
        }));
    }
    let root_1 = login(&proxy, "root").await;
    let root_2 = login(&second, "root").await;
    let purge = format!("PURGE TENANT '{TENANT_B}'");
    let (one, two) = tokio::time::timeout(std::time::Duration::from_secs(120), async {
        tokio::join!(root_1.simple_query(&purge), root_2.simple_query(&purge))
    })
    .await
    .expect("two purges at once do not hang");
    let (one, two) = (first_row(one.unwrap()), first_row(two.unwrap()));
    // Between them they removed each queue once.
    let queues = |row: &[Option<String>]| -> i64 { row[1].as_deref().unwrap().parse().unwrap() };
    assert_eq!(queues(&one) + queues(&two), 2, "{one:?} {two:?}");
    let mut pushed = Vec::new();
    for p in pushers {
        pushed.push(p.await.unwrap());
    }
    assert_eq!(
        leftover(&direct, TENANT_B).await,
        Vec::<(String, i64)>::new()
    );
    assert_eq!(jobs_messages(&direct, TENANT_A).await, before_a + pushed[0]);
    assert_eq!(jobs_messages(&direct, TENANT_C).await, before_c + pushed[1]);
}

#[tokio::test]
async fn without_a_users_file_the_loopback_user_purges_with_psql() {
    let proxy = Proxy::start("purge_psql").await;
    let direct = common::proxy::connect(&proxy.direct).await;
    let default_tenant = Uuid::from_u128(1);
    seed(&proxy.connect().await).await;
    let (ok, out, err) = proxy
        .psql(&[
            "-A",
            "-t",
            "-c",
            &format!("PURGE TENANT '{default_tenant}'"),
        ])
        .await;
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        format!("{default_tenant}|2|3|3|6|1|3|2"),
        "{out}"
    );
    assert_eq!(
        leftover(&direct, default_tenant).await,
        Vec::<(String, i64)>::new()
    );
    let (ok, _, err) = proxy.psql(&["-c", "PURGE TENANT 'x'"]).await;
    assert!(
        !ok && err.contains("invalid input syntax for type uuid"),
        "{err}"
    );
}

#[test]
fn user_add_admin_writes_admin_true_and_user_list_shows_it() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let file = std::env::temp_dir().join(format!("qw-purge-users-{}.toml", std::process::id()));
    for args in [&["root", "--admin"][..], &["plain"][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_queenwire"))
            .args(["user", "add"])
            .args(args)
            .args(["--file", file.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        child.stdin.as_mut().unwrap().write_all(b"pw\n").unwrap();
        assert!(child.wait().unwrap().success());
    }
    let users = Users::load(&file).unwrap();
    let listed = Command::new(env!("CARGO_BIN_EXE_queenwire"))
        .args(["user", "list", "--file", file.to_str().unwrap()])
        .output()
        .unwrap();
    std::fs::remove_file(&file).unwrap();
    assert_eq!(users.admins.iter().collect::<Vec<_>>(), ["root"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("root\t") && l.ends_with("\tadmin")),
        "{listed}"
    );
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("plain\t") && !l.ends_with("\tadmin")),
        "{listed}"
    );
}
