//! The admin view, `SHOW QUEENWIRE POOLS|CLIENTS|SERVERS|STATS`: over the
//! simple and the extended protocol (Describe before Execute), what each
//! shows of live sessions, who sees which clients, and that PostgreSQL
//! itself refuses every form (so the dialect takes nothing it accepts).

mod common;

use common::proxy::{connect, Proxy};
use common::sql::rows;
use std::time::SystemTime;
use uuid::Uuid;

const FORMS: [&str; 4] = [
    "SHOW QUEENWIRE POOLS",
    "SHOW QUEENWIRE CLIENTS",
    "SHOW QUEENWIRE SERVERS",
    "SHOW QUEENWIRE STATS",
];

#[tokio::test]
async fn postgresql_refuses_every_form_as_a_syntax_error() {
    let db = common::cluster::fresh_database("admin_pg");
    let direct = connect(&db).await;
    for form in FORMS {
        let err = direct.simple_query(form).await.unwrap_err();
        assert_eq!(err.code().map(|c| c.code()), Some("42601"), "{form}: {err}");
    }
    // What PostgreSQL does accept still reaches it: a parameter lookup.
    let proxy = Proxy::start_on(db, |_| {}).await;
    let client = proxy.connect().await;
    let err = client.simple_query("SHOW queenwire").await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42704"), "{err}");
    let err = client
        .simple_query("SHOW QUEENWIRE TABLES")
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42601"), "{err}");
}

#[tokio::test]
async fn the_views_answer_over_both_protocols() {
    let proxy = Proxy::start("admin_views").await;
    let mut cfg = proxy.client_config();
    cfg.application_name("admin-test");
    let client = connect(&cfg).await;

    // Extended protocol: the columns are known at Describe.
    let pools = client.prepare("SHOW QUEENWIRE POOLS").await.unwrap();
    let names: Vec<&str> = pools.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["role", "active", "idle", "waiting", "max"]);
    let rows_ext = client.query(&pools, &[]).await.unwrap();
    let engine = rows_ext
        .iter()
        .find(|r| r.get::<_, String>("role") == "engine")
        .expect("the engine's pool");
    assert_eq!(engine.get::<_, i64>("max"), 4);
    assert!(rows_ext
        .iter()
        .any(|r| r.get::<_, String>("role") == "clients"));

    let me = client.query("SHOW QUEENWIRE CLIENTS", &[]).await.unwrap();
    assert_eq!(me.len(), 1);
    let me = &me[0];
    assert_eq!(me.get::<_, String>("user"), "tester");
    assert_eq!(me.get::<_, Uuid>("tenant"), Uuid::from_u128(1));
    assert_eq!(me.get::<_, String>("application_name"), "admin-test");
    assert_eq!(me.get::<_, String>("state"), "active");
    assert!(!me.get::<_, bool>("pinned"));
    assert!(me.get::<_, String>("client_addr").starts_with("127.0.0.1:"));
    assert!(me.get::<_, SystemTime>("since") <= SystemTime::now());
    let my_session: i64 = me.get("session");

    // A second session, idle inside a transaction, holds a connection.
    let other = proxy.connect().await;
    other.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let other_pid: i32 = other
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    // The session goes idle just after its client has the answer (and
    // the Close of the dropped statement follows it): wait for that.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let theirs = loop {
        let listed = rows(&client, "SHOW QUEENWIRE CLIENTS").await;
        assert_eq!(listed.len(), 2);
        let theirs = listed
            .into_iter()
            .find(|r| r["session"].as_deref() != Some(my_session.to_string().as_str()))
            .unwrap();
        if theirs["state"].as_deref() == Some("idle in transaction") {
            break theirs;
        }
        assert!(std::time::Instant::now() < deadline, "{theirs:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(
        theirs["backend_pid"].as_deref(),
        Some(other_pid.to_string().as_str())
    );
    let servers = rows(&client, "SHOW QUEENWIRE SERVERS").await;
    let held = servers
        .iter()
        .find(|r| r["backend_pid"].as_deref() == Some(other_pid.to_string().as_str()))
        .expect("the held connection is listed");
    assert_eq!(held["held_by"], theirs["session"]);
    assert_eq!(held["state"].as_deref(), Some("idle in transaction"));
    other.batch_execute("COMMIT").await.unwrap();
    let servers = rows(&client, "SHOW QUEENWIRE SERVERS").await;
    assert!(servers
        .iter()
        .all(|r| r["backend_pid"].as_deref() != Some(other_pid.to_string().as_str())));

    // The statement counters, by kind.
    rows(&client, "PUSH INTO admin_q VALUES ('{}')").await;
    let stats = rows(&client, "SHOW QUEENWIRE STATS").await;
    let kind = |k: &str| {
        stats
            .iter()
            .find(|r| r["kind"].as_deref() == Some(k))
            .unwrap_or_else(|| panic!("no {k} row"))
            .clone()
    };
    assert_eq!(kind("push")["statements"].as_deref(), Some("1"));
    assert!(kind("console")["statements"]
        .as_deref()
        .is_some_and(|n| n.parse::<i64>().unwrap() >= 5));

    // Inside a failed block it is refused like any statement there.
    client.batch_execute("BEGIN").await.unwrap();
    assert!(client.simple_query("SELECT 1/0").await.is_err());
    let err = client
        .simple_query("SHOW QUEENWIRE STATS")
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("25P02"));
    client.batch_execute("ROLLBACK").await.unwrap();
    // And inside a good one it answers.
    client.batch_execute("BEGIN").await.unwrap();
    assert!(!rows(&client, "SHOW QUEENWIRE POOLS").await.is_empty());
    client.batch_execute("COMMIT").await.unwrap();
}

#[tokio::test]
async fn a_tenant_sees_its_own_clients_only() {
    use queenwire::users::{Passthrough, User, Users, Verifier};
    let mut users = Users::default();
    for (name, tenant) in [("a", Uuid::from_u128(0xa)), ("b", Uuid::from_u128(0xb))] {
        users.users.insert(
            name.into(),
            User {
                name: name.into(),
                tenant,
                passthrough: Passthrough::None,
                verifier: Verifier::new("pw"),
            },
        );
    }
    let users = std::sync::Arc::new(users);
    let proxy = Proxy::start_with("admin_tenants", |c| c.users = Some(users.clone())).await;
    let login = |name: &'static str| {
        let mut cfg = proxy.client_config();
        cfg.user(name).password("pw");
        cfg
    };
    let a = connect(&login("a")).await;
    let a2 = connect(&login("a")).await;
    let b = connect(&login("b")).await;
    let seen_by_a = rows(&a, "SHOW QUEENWIRE CLIENTS").await;
    assert_eq!(seen_by_a.len(), 2, "{seen_by_a:?}");
    assert!(seen_by_a.iter().all(|r| r["user"].as_deref() == Some("a")));
    let seen_by_b = rows(&b, "SHOW QUEENWIRE CLIENTS").await;
    assert_eq!(seen_by_b.len(), 1);
    assert_eq!(seen_by_b[0]["user"].as_deref(), Some("b"));
    // Pools and statement counters are the same for everyone.
    assert_eq!(
        rows(&a, "SHOW QUEENWIRE POOLS").await.len(),
        rows(&b, "SHOW QUEENWIRE POOLS").await.len()
    );
    assert!(!rows(&b, "SHOW QUEENWIRE STATS").await.is_empty());
    drop(a2);
}

#[tokio::test]
async fn a_pinned_session_shows_as_pinned() {
    let proxy = Proxy::start_with("admin_pinned", |c| {
        c.pool_mode = queenwire::frontend::PoolMode::Session;
    })
    .await;
    let client = proxy.connect().await;
    rows(&client, "SELECT 1").await;
    let me = rows(&client, "SHOW QUEENWIRE CLIENTS").await;
    assert_eq!(me.len(), 1);
    assert_eq!(me[0]["pinned"].as_deref(), Some("t"));
    assert!(
        me[0]["backend_pid"].is_some(),
        "a session-mode session keeps its connection"
    );
}
