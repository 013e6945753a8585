//! Tenancy and passthrough policy enforced by PostgreSQL itself: plain SQL
//! runs as a per-tenant backend role with no privilege on `queen` tables,
//! the `queen.*` entry points check the caller's tenant, and the `queen`
//! views show a tenant role its own rows only.

mod common;

use common::proxy::Proxy;
use common::sql::rows;
use queenwire::users::{Passthrough, User, Users, Verifier};
use std::sync::Arc;
use tokio_postgres::Client;
use uuid::Uuid;

const TENANT_A: Uuid = Uuid::from_u128(0x0a11ce);
const TENANT_B: Uuid = Uuid::from_u128(0x0b0b);

fn users() -> Arc<Users> {
    let mut users = Users::default();
    for (name, tenant, passthrough) in [
        ("none_a", TENANT_A, Passthrough::None),
        ("ro_a", TENANT_A, Passthrough::ReadOnly),
        ("full_a", TENANT_A, Passthrough::Full),
        ("full_b", TENANT_B, Passthrough::Full),
    ] {
        users.users.insert(
            name.into(),
            User {
                name: name.into(),
                tenant,
                passthrough,
                verifier: Verifier::new("pw"),
            },
        );
    }
    Arc::new(users)
}

async fn login(proxy: &Proxy, name: &str) -> Client {
    let mut cfg = proxy.client_config();
    cfg.user(name).password("pw");
    common::proxy::connect(&cfg).await
}

/// The SQLSTATE of a statement that must fail.
async fn code(client: &Client, sql: &str) -> String {
    match client.simple_query(sql).await {
        Ok(_) => panic!("{sql}: succeeded, an error was expected"),
        Err(e) => e
            .code()
            .map(|c| c.code().to_string())
            .unwrap_or_else(|| panic!("{sql}: {e}")),
    }
}

/// Whether the error came from PostgreSQL rather than the proxy: the
/// backend's errors carry its source file.
async fn backend_error(client: &Client, sql: &str) -> (String, String) {
    let e = client.simple_query(sql).await.unwrap_err();
    let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e}"));
    (
        db.code().code().to_string(),
        db.file().unwrap_or("").to_string(),
    )
}

async fn role_of(direct: &Client, tenant: Uuid, read_only: bool) -> String {
    direct
        .query_one(
            "SELECT role_name::TEXT FROM queen.tenant_roles WHERE tenant_id = $1 AND read_only = $2",
            &[&tenant, &read_only],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn passthrough_policy_matrix_is_enforced_by_postgresql() {
    let proxy = Proxy::start_with("policy_matrix", |c| c.users = Some(users())).await;
    let direct = proxy.connect_direct().await;
    let role_full = role_of(&direct, TENANT_A, false).await;
    let role_ro = role_of(&direct, TENANT_A, true).await;
    // The name `queenwire user list` shows the operator is PostgreSQL's.
    let listed = users();
    assert_eq!(
        listed.users["full_a"].backend_role(),
        Some(role_full.clone())
    );
    assert_eq!(listed.users["ro_a"].backend_role(), Some(role_ro.clone()));
    assert_eq!(listed.users["none_a"].backend_role(), None);
    // The operator's grants on the user's own table.
    direct
        .batch_execute(&format!(
            "CREATE TABLE my_table (id INT PRIMARY KEY, note TEXT);
             INSERT INTO my_table VALUES (0, 'seed');
             GRANT SELECT, INSERT ON my_table TO {role_full};
             GRANT SELECT ON my_table TO {role_ro};"
        ))
        .await
        .unwrap();
    let none = login(&proxy, "none_a").await;
    let ro = login(&proxy, "ro_a").await;
    let full = login(&proxy, "full_a").await;

    // none: only dialect statements; the proxy refuses plain SQL.
    for sql in [
        "SELECT * FROM my_table",
        "INSERT INTO my_table VALUES (1, 'none')",
        "DELETE FROM queen.log_segments",
    ] {
        assert_eq!(code(&none, sql).await, "42501", "none: {sql}");
    }
    rows(&none, "PUSH INTO q_a VALUES ('{\"by\":\"none\"}')").await;

    // read_only: reads pass, PostgreSQL refuses writes: the transaction is
    // read-only, and with read-write forced the role still lacks privileges.
    assert_eq!(rows(&ro, "SELECT note FROM my_table").await.len(), 1);
    assert_eq!(
        backend_error(&ro, "INSERT INTO my_table VALUES (2, 'ro')").await,
        ("25006".to_string(), "utility.c".to_string())
    );
    assert_eq!(code(&ro, "DELETE FROM queen.log_segments").await, "25006");
    // Its role's read-only start is for plain SQL: queue statements outside
    // its blocks still write.
    rows(&ro, "PUSH INTO q_a VALUES ('{\"by\":\"ro default\"}')").await;
    ro.batch_execute("SET default_transaction_read_only = off")
        .await
        .unwrap();
    assert_eq!(
        code(&ro, "INSERT INTO my_table VALUES (3, 'ro')").await,
        "42501"
    );
    let (c, file) = backend_error(&ro, "DELETE FROM queen.log_segments").await;
    assert_eq!((c.as_str(), file.as_str()), ("42501", "aclchk.c"));
    // Dialect statements still run outside the user's transactions, even on
    // a session pinned by that SET.
    rows(&ro, "PUSH INTO q_a VALUES ('{\"by\":\"ro\"}')").await;

    // full: writes to what the role was granted, nothing in queen.
    assert_eq!(rows(&full, "SELECT note FROM my_table").await.len(), 1);
    full.batch_execute("INSERT INTO my_table VALUES (4, 'full')")
        .await
        .unwrap();
    let (c, file) = backend_error(&full, "DELETE FROM queen.log_segments").await;
    assert_eq!((c.as_str(), file.as_str()), ("42501", "aclchk.c"));
    for sql in [
        "SELECT * FROM queen.log_segments",
        "SELECT * FROM queen.queues",
        "SELECT * FROM queen.kv",
        "SELECT * FROM queen.tenant_roles",
        "SELECT * FROM queen.proxy_secrets",
        "SELECT * FROM queen.ephemeral_peers",
        "SELECT * FROM queen.ephemeral_peer_v1('anyone')",
        "SELECT queen.ephemeral_peer_publish_v1('me', '127.0.0.1:1', '\\x00112233445566778899aabbccddeeff')",
        "UPDATE queen.log_partitions SET last_offset = 0",
        "SELECT queen.receipt_secret_v1('\\x00')",
        "SELECT queen.tenant_role_ensure_v1(gen_random_uuid(), false, NULL)",
        "SELECT queen.log_expire_pending_v1(10)",
        "CREATE TABLE queen.mine (x INT)",
    ] {
        assert_eq!(code(&full, sql).await, "42501", "full: {sql}");
    }

    // The user's transaction: POP, a write to its own table and ACK commit
    // or roll back together, on the tenant role's connection.
    let popped = full
        .simple_query("BEGIN; POP FROM q_a LIMIT 1")
        .await
        .unwrap();
    let receipt = popped
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get("receipt").map(str::to_string),
            _ => None,
        })
        .expect("a message");
    full.batch_execute(&format!(
        "INSERT INTO my_table VALUES (5, 'in txn'); ACK '{receipt}'; COMMIT"
    ))
    .await
    .unwrap();
    let who: String = rows(&full, "SELECT session_user::TEXT AS who").await[0]["who"]
        .clone()
        .unwrap();
    assert_eq!(who, role_full);
    let notes = direct
        .query("SELECT note FROM my_table ORDER BY id", &[])
        .await
        .unwrap();
    let notes: Vec<String> = notes.iter().map(|r| r.get(0)).collect();
    assert_eq!(notes, ["seed", "full", "in txn"]);
    // Two messages left of the three pushed: the acked one is gone.
    assert_eq!(rows(&full, "POP FROM q_a LIMIT 10").await.len(), 2);
}

#[tokio::test]
async fn a_tenant_role_cannot_act_for_another_tenant_or_escape_its_role() {
    let proxy = Proxy::start_with("tenant_roles", |c| c.users = Some(users())).await;
    let direct = proxy.connect_direct().await;
    let role_b = role_of(&direct, TENANT_B, false).await;
    let superuser: String = direct
        .query_one("SELECT current_user::TEXT", &[])
        .await
        .unwrap()
        .get(0);
    let a = login(&proxy, "full_a").await;
    let b = login(&proxy, "full_b").await;
    rows(&a, "PUSH INTO q_a VALUES ('{\"n\":1}')").await;
    rows(&b, "PUSH INTO q_b VALUES ('{\"n\":1}')").await;
    rows(&b, "KV PUT secrets k '\"b-only\"' FOREVER").await;

    // Calling the entry points directly with the other tenant's id.
    let other = format!("'{TENANT_B}'::uuid");
    for sql in [
        format!("SELECT * FROM queen.log_show_queues_v1({other})"),
        format!("SELECT * FROM queen.log_show_groups_v1(NULL, {other})"),
        format!("SELECT * FROM queen.timer_list_v1(NULL, {other})"),
        format!("SELECT * FROM queen.timer_list_v2(NULL, {other})"),
        format!(
            "SELECT queen.timer_schedule_v2('q_b', 'k', NULL, '1', now(), 60000, p_tenant => {other})"
        ),
        format!("SELECT * FROM queen.delete_queue_v1('q_b', {other})"),
        format!(
            "SELECT * FROM queen.kv_apply_v1('[{{\"op\":\"get\",\"namespace\":\"secrets\",\"key\":\"k\"}}]'::jsonb, {other})"
        ),
    ] {
        let (c, _) = backend_error(&a, &sql).await;
        assert_eq!(c, "42501", "{sql}");
    }
    // The same entry point for its own tenant works.
    let own = rows(
        &a,
        &format!("SELECT queue FROM queen.log_show_queues_v1('{TENANT_A}'::uuid)"),
    )
    .await;
    assert_eq!(own.len(), 1);
    assert_eq!(own[0]["queue"].as_deref(), Some("q_a"));

    // Changing identity: no role but its own is reachable.
    for sql in [
        format!("SET ROLE {role_b}"),
        format!("SET ROLE {superuser}"),
        format!("SELECT set_config('role', '{role_b}', false)"),
        format!("SET SESSION AUTHORIZATION {superuser}"),
    ] {
        assert_eq!(code(&a, &sql).await, "42501", "{sql}");
    }
    // A GUC that looks like a tenant setting changes nothing.
    a.batch_execute(&format!(
        "SET queen.tenant = '{TENANT_B}'; SET search_path = pg_temp, queen, public"
    ))
    .await
    .unwrap();
    let (c, _) = backend_error(&a, "SELECT count(*) FROM queen.log_segments").await;
    assert_eq!(c, "42501");

    // The views: each tenant role sees its own rows; the owner sees all.
    let depth = rows(
        &a,
        "SELECT tenant_id::TEXT AS t, queue FROM queen.queue_depth",
    )
    .await;
    assert_eq!(depth.len(), 1, "{depth:?}");
    assert_eq!(depth[0]["queue"].as_deref(), Some("q_a"));
    let depth = rows(&b, "SELECT queue FROM queen.queue_depth").await;
    assert_eq!(depth.len(), 1);
    assert_eq!(depth[0]["queue"].as_deref(), Some("q_b"));
    let tput = rows(&a, "SELECT queue, pushed_last_hour FROM queen.throughput").await;
    assert_eq!(tput.len(), 1);
    assert_eq!(tput[0]["queue"].as_deref(), Some("q_a"));
    assert_eq!(tput[0]["pushed_last_hour"].as_deref(), Some("1"));
    rows(&b, "POP FROM q_b GROUP g LIMIT 1").await;
    assert!(rows(&a, "SELECT * FROM queen.group_lag").await.is_empty());
    assert_eq!(rows(&b, "SELECT * FROM queen.group_lag").await.len(), 1);
    assert!(rows(&a, "SELECT * FROM queen.dlq_counts").await.is_empty());
    let all = direct
        .query("SELECT queue FROM queen.queue_depth ORDER BY queue", &[])
        .await
        .unwrap();
    assert_eq!(all.len(), 2);

    // b's data is intact after all of a's attempts.
    let kv = rows(&b, "KV GET secrets k").await;
    assert_eq!(kv[0]["value"].as_deref(), Some("\"b-only\""));
    assert_eq!(rows(&b, "SHOW QUEUES").await.len(), 1);
}

#[tokio::test]
async fn without_a_tenant_role_plain_sql_is_refused() {
    // A role a database administrator made by hand, mapped to no tenant,
    // gets nothing from the entry points.
    let proxy = Proxy::start("unmapped_role").await;
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute(
            "DO $$ BEGIN
                 IF to_regrole('queen_stranger') IS NULL THEN
                     CREATE ROLE queen_stranger LOGIN;
                 END IF;
             END $$;
             GRANT queen_client TO queen_stranger;",
        )
        .await
        .unwrap();
    let mut cfg = proxy.direct.clone();
    cfg.user("queen_stranger");
    let stranger = common::proxy::connect(&cfg).await;
    let (c, _) = backend_error(
        &stranger,
        &format!(
            "SELECT * FROM queen.log_show_queues_v1('{}'::uuid)",
            queenwire::engine::DEFAULT_TENANT
        ),
    )
    .await;
    assert_eq!(c, "42501");
    assert!(rows(&stranger, "SELECT * FROM queen.queue_depth")
        .await
        .is_empty());
}

#[tokio::test]
async fn queenwire_runs_as_a_low_privilege_role_on_a_pre_applied_schema() {
    // A privileged role applies the schema (the first proxy), then queenwire
    // runs as a role that is only a member of queen_engine.
    let first = Proxy::start("low_privilege").await;
    let direct = first.connect_direct().await;
    direct
        .batch_execute(
            "DO $$ BEGIN
                 IF to_regrole('queen_app') IS NULL THEN
                     CREATE ROLE queen_app LOGIN;
                 END IF;
             END $$;
             GRANT queen_engine TO queen_app;",
        )
        .await
        .unwrap();
    let mut app = first.direct.clone();
    app.user("queen_app");
    // The engine role itself has no privilege on the tables either.
    let as_app = common::proxy::connect(&app).await;
    let (c, _) = backend_error(&as_app, "DELETE FROM queen.log_segments").await;
    assert_eq!(c, "42501");
    let proxy = Proxy::start_on(app, |c| {
        c.apply_schema = false;
        c.users = Some(users());
    })
    .await;
    let a = login(&proxy, "full_a").await;
    rows(&a, "CREATE QUEUE lp WITH (retry_limit = 1)").await;
    rows(&a, "PUSH INTO lp VALUES ('{\"n\":1}'), ('{\"n\":2}')").await;
    let popped = rows(&a, "POP FROM lp LIMIT 2").await;
    assert_eq!(popped.len(), 2);
    for m in &popped {
        let receipt = m["receipt"].clone().unwrap();
        let acked = rows(&a, &format!("ACK '{receipt}'")).await;
        assert_eq!(acked[0]["status"].as_deref(), Some("acked"));
    }
    rows(&a, "KV PUT ns k '1' FOREVER").await;
    assert_eq!(
        rows(&a, "KV INCR ns k BY 2").await[0]["value"].as_deref(),
        Some("3")
    );
    rows(&a, "SCHEDULE INTO lp KEY t AFTER 600 VALUES ('1')").await;
    assert_eq!(rows(&a, "SHOW SCHEDULES").await.len(), 1);
    assert_eq!(rows(&a, "SHOW QUEUES").await.len(), 1);
    let (c, _) = backend_error(&a, "DELETE FROM queen.log_segments").await;
    assert_eq!(c, "42501");
    proxy.server.shutdown().await;
    first.server.shutdown().await;
}

#[tokio::test]
async fn dialect_statements_of_a_role_session_commit_before_they_are_answered() {
    let proxy = Proxy::start_with("role_commit", |c| c.users = Some(users())).await;
    let direct = proxy.connect_direct().await;
    for user in ["full_a", "ro_a"] {
        let client = login(&proxy, user).await;
        // Pinned by a SET, as drivers often are.
        client
            .batch_execute("SET application_name = 'pinned'")
            .await
            .unwrap();
        for i in 0..20 {
            let queue = format!("vis_{user}_{i}");
            // The extended protocol (tokio-postgres' query), where the
            // statement's Sync comes from the client.
            let pushed = client
                .query(&format!("PUSH INTO {queue} VALUES ('{{}}')"), &[])
                .await
                .unwrap();
            assert_eq!(pushed.len(), 1);
            let seen: i64 = direct
                .query_one(
                    "SELECT count(*) FROM queen.queues WHERE name = $1",
                    &[&queue],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(seen, 1, "{user}: PUSH answered before it committed");
        }
        // A script mixing a dialect statement and plain SQL: the plain SQL
        // still runs as the tenant role.
        let err = client
            .simple_query("PUSH INTO mixed VALUES ('{}'); DELETE FROM queen.log_segments")
            .await
            .unwrap_err();
        assert_eq!(
            err.code().map(|c| c.code()),
            Some(if user == "ro_a" { "25006" } else { "42501" })
        );
        let who = rows(&client, "SELECT session_user::TEXT AS who").await;
        assert!(
            who[0]["who"].as_deref().unwrap().starts_with("queen_t_"),
            "{who:?}"
        );
    }
}

#[tokio::test]
async fn a_full_users_transaction_over_the_extended_protocol_commits_or_rolls_back_whole() {
    let proxy = Proxy::start_with("role_txn_ext", |c| c.users = Some(users())).await;
    let direct = proxy.connect_direct().await;
    let role_full = role_of(&direct, TENANT_A, false).await;
    direct
        .batch_execute(&format!(
            "CREATE TABLE done (id INT PRIMARY KEY);
             GRANT SELECT, INSERT ON done TO {role_full};"
        ))
        .await
        .unwrap();
    let mut client = login(&proxy, "full_a").await;
    rows(
        &client,
        "PUSH INTO jobs VALUES ('{\"id\":1}'), ('{\"id\":2}')",
    )
    .await;
    for commit in [false, true] {
        let txn = client.transaction().await.unwrap();
        let popped = txn
            .query("POP FROM jobs LIMIT 1 LEASE 60", &[])
            .await
            .unwrap();
        assert_eq!(popped.len(), 1);
        let receipt: String = popped[0].get("receipt");
        txn.execute("INSERT INTO done VALUES ($1)", &[&(commit as i32)])
            .await
            .unwrap();
        let acked = txn.query("ACK $1", &[&receipt]).await.unwrap();
        assert_eq!(acked[0].get::<_, String>("status"), "acked");
        if commit {
            txn.commit().await.unwrap();
        } else {
            txn.rollback().await.unwrap();
        }
    }
    // The rolled-back transaction left neither its row nor its ACK: the
    // first message came back (its lease was rolled back too).
    let ids: Vec<i32> = direct
        .query("SELECT id FROM done", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, [1]);
    let left = rows(&client, "POP FROM jobs LIMIT 10").await;
    assert_eq!(left.len(), 1, "{left:?}");
}

#[tokio::test]
async fn wake_up_notifications_name_no_tenant_and_no_queue() {
    use futures::StreamExt;
    let proxy = Proxy::start_with("wake_digest", |c| c.users = Some(users())).await;
    // A tenant role listening on queenwire's channel, straight on the
    // database (through the proxy it could do the same on a pinned session).
    let direct = proxy.connect_direct().await;
    let role_a = role_of(&direct, TENANT_A, false).await;
    let mut cfg = proxy.direct.clone();
    cfg.user(&role_a);
    let (listener, mut connection) = cfg.connect(tokio_postgres::NoTls).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_string());
            }
        }
    });
    listener
        .batch_execute("LISTEN queenwire_push")
        .await
        .unwrap();
    let b = login(&proxy, "full_b").await;
    rows(&b, "PUSH INTO secret_queue_name VALUES ('{}')").await;
    let payload = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
        .await
        .expect("a wake-up notification within 10 s")
        .unwrap();
    assert!(!payload.contains("secret_queue_name"), "{payload}");
    assert!(!payload.contains(&TENANT_B.to_string()), "{payload}");
    assert_eq!(payload.len(), 32, "{payload}");
    // A waiting POP of b is still woken across the digest.
    let b2 = login(&proxy, "full_b").await;
    rows(&b2, "POP FROM secret_queue_name LIMIT 1 AUTO ACK").await;
    let started = std::time::Instant::now();
    let waiting =
        tokio::spawn(async move { rows(&b2, "POP FROM secret_queue_name LIMIT 1 WAIT 20").await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    rows(&b, "PUSH INTO secret_queue_name VALUES ('{\"n\":2}')").await;
    let got = waiting.await.unwrap();
    assert_eq!(got.len(), 1);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}
