//! ALTER GROUP grp ON queue SUBSCRIBE FROM …: the subscription update of
//! the consumer-groups surface (014). Partitions the group has not met
//! start where the new subscription says; cursors it has keep their place;
//! a group can be registered before its first POP; both protocols, with
//! Describe before Execute; and PostgreSQL's own ALTER GROUP (roles) still
//! reaches PostgreSQL.

mod common;

use common::proxy::Proxy;
use common::sql::rows;
use std::time::Duration;
use tokio_postgres::types::Type;
use tokio_postgres::Client;

async fn code(client: &Client, sql: &str) -> String {
    match client.simple_query(sql).await {
        Ok(_) => panic!("{sql}: succeeded, an error was expected"),
        Err(e) => e
            .code()
            .map(|c| c.code().to_string())
            .unwrap_or_else(|| panic!("{sql}: {e}")),
    }
}

/// (partition, payload) of what a POP of the group returns, acknowledged.
async fn take(client: &Client, queue: &str, group: &str) -> Vec<(String, String)> {
    let got = rows(
        client,
        &format!("POP FROM {queue} GROUP {group} LIMIT 100 PARTITIONS 10 AUTO ACK"),
    )
    .await;
    let mut out: Vec<(String, String)> = got
        .iter()
        .map(|r| {
            (
                r["partition"].clone().unwrap(),
                r["payload"].clone().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn pair(partition: &str, n: u32) -> (String, String) {
    (partition.to_string(), format!("{{\"n\": {n}}}"))
}

/// Lets the database clock pass the messages written so far, so a
/// subscription FROM NOW is strictly after them (ordering, not timing:
/// nothing passes or fails on how long this takes).
async fn tick() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

#[tokio::test]
async fn a_new_subscription_moves_unmet_partitions_and_keeps_met_cursors() {
    let proxy = Proxy::start("sub_move").await;
    let client = proxy.connect().await;
    client
        .batch_execute(
            "PUSH INTO q PARTITION p1 VALUES ('{\"n\": 1}');
             PUSH INTO q PARTITION p1 VALUES ('{\"n\": 2}');
             PUSH INTO q PARTITION p2 VALUES ('{\"n\": 3}');",
        )
        .await
        .unwrap();
    // The group meets p1 only: its cursor there passes message 1.
    let first = rows(&client, "POP FROM q PARTITION p1 GROUP g AUTO ACK").await;
    assert_eq!(first[0]["payload"].as_deref(), Some("{\"n\": 1}"));
    tick().await;
    client
        .batch_execute("ALTER GROUP g ON q SUBSCRIBE FROM NOW")
        .await
        .unwrap();
    tick().await;
    client
        .batch_execute(
            "PUSH INTO q PARTITION p2 VALUES ('{\"n\": 4}');
             PUSH INTO q PARTITION p3 VALUES ('{\"n\": 5}');",
        )
        .await
        .unwrap();
    // p1 keeps its cursor (message 2 is still due); p2, never met, starts
    // at the new subscription (message 3 is older: skipped); p3 is new.
    assert_eq!(
        take(&client, "q", "g").await,
        vec![pair("p1", 2), pair("p2", 4), pair("p3", 5)]
    );
    // Back to BEGINNING: a partition met from now on starts at its start.
    client
        .batch_execute(
            "PUSH INTO q PARTITION p4 VALUES ('{\"n\": 6}');
             ALTER GROUP g ON q SUBSCRIBE FROM BEGINNING;",
        )
        .await
        .unwrap();
    assert_eq!(take(&client, "q", "g").await, vec![pair("p4", 6)]);
    // Other groups are untouched.
    assert_eq!(take(&client, "q", "other").await.len(), 6);
}

#[tokio::test]
async fn a_group_registered_before_its_first_pop_keeps_that_subscription() {
    let proxy = Proxy::start("sub_early").await;
    let client = proxy.connect().await;
    client
        .batch_execute("PUSH INTO q VALUES ('{\"n\": 1}')")
        .await
        .unwrap();
    tick().await;
    client
        .batch_execute("ALTER GROUP late ON q SUBSCRIBE FROM NOW")
        .await
        .unwrap();
    tick().await;
    client
        .batch_execute("PUSH INTO q VALUES ('{\"n\": 2}')")
        .await
        .unwrap();
    // The first POP's own SUBSCRIBE FROM BEGINNING does not apply: the group
    // was seen first by the ALTER.
    let got = rows(
        &client,
        "POP FROM q GROUP late LIMIT 10 SUBSCRIBE FROM BEGINNING",
    )
    .await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["payload"].as_deref(), Some("{\"n\": 2}"));
    // A timestamp, through the extended protocol with parameters.
    let untyped = client
        .prepare("ALTER GROUP $1 ON $2 SUBSCRIBE FROM $3")
        .await
        .unwrap();
    assert_eq!(
        untyped.params(),
        &[Type::TEXT, Type::TEXT, Type::TIMESTAMPTZ]
    );
    assert!(untyped.columns().is_empty());
    let typed = client
        .prepare_typed(
            "ALTER GROUP $1 ON $2 SUBSCRIBE FROM TIMESTAMP $3",
            &[Type::TEXT, Type::TEXT, Type::TEXT],
        )
        .await
        .unwrap();
    client
        .execute(&typed, &[&"ts", &"q", &"2000-01-01 00:00:00+00"])
        .await
        .unwrap();
    assert_eq!(take(&client, "q", "ts").await.len(), 2);
    // The simple protocol's tag.
    let done = client
        .simple_query("ALTER GROUP ts ON q SUBSCRIBE FROM '2100-01-01T00:00:00Z'")
        .await
        .unwrap();
    assert!(done
        .iter()
        .any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::CommandComplete(0))));
}

#[tokio::test]
async fn bad_subscriptions_are_refused_and_change_nothing() {
    let proxy = Proxy::start("sub_bad").await;
    let client = proxy.connect().await;
    client
        .batch_execute("PUSH INTO q VALUES ('{}')")
        .await
        .unwrap();
    assert_eq!(
        code(&client, "ALTER GROUP g ON missing SUBSCRIBE FROM NOW").await,
        "42704"
    );
    assert_eq!(
        code(&client, "ALTER GROUP g ON q SUBSCRIBE FROM later").await,
        "42601"
    );
    assert_eq!(code(&client, "ALTER GROUP g ON q").await, "42601");
    assert_eq!(
        code(&client, "ALTER GROUP g ON q SUBSCRIBE FROM 'not a time'").await,
        "22007"
    );
    // Inside a block, a refused ALTER GROUP fails the block.
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        code(&client, "ALTER GROUP g ON missing SUBSCRIBE FROM NOW").await,
        "42704"
    );
    assert_eq!(code(&client, "SELECT 1").await, "25P02");
    client.batch_execute("ROLLBACK").await.unwrap();
    // g was never registered: its first POP subscribes FROM BEGINNING.
    assert_eq!(take(&client, "q", "g").await.len(), 1);
    // A POP's SUBSCRIBE FROM text that is no time is refused, whether the
    // group is new or known, and the queue has messages or none.
    for (queue, group) in [("q", "g"), ("q", "fresh"), ("nothing", "g")] {
        let sql = format!("POP FROM {queue} GROUP {group} SUBSCRIBE FROM 'not a time'");
        assert_eq!(code(&client, &sql).await, "22007", "{sql}");
    }
}

#[tokio::test]
async fn postgresqls_alter_group_on_roles_still_reaches_postgresql() {
    let proxy = Proxy::start("sub_roles").await;
    let client = proxy.connect().await;
    let direct = proxy.connect_direct().await;
    // Roles are the cluster's: names of this test's own.
    direct
        .batch_execute(
            "DROP ROLE IF EXISTS qw_sub_staff, qw_sub_crew, qw_sub_alice;
             CREATE ROLE qw_sub_staff; CREATE ROLE qw_sub_alice;",
        )
        .await
        .unwrap();
    let member = |role: &'static str| {
        let direct = &direct;
        async move {
            direct
                .query_one(
                    "SELECT count(*) FROM pg_auth_members m WHERE m.roleid = to_regrole($1) AND m.member = to_regrole('qw_sub_alice')",
                    &[&role],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    client
        .batch_execute("ALTER GROUP qw_sub_staff ADD USER qw_sub_alice")
        .await
        .unwrap();
    assert_eq!(member("qw_sub_staff").await, 1);
    // The extended protocol too.
    client
        .execute("ALTER GROUP qw_sub_staff DROP USER qw_sub_alice", &[])
        .await
        .unwrap();
    assert_eq!(member("qw_sub_staff").await, 0);
    client
        .batch_execute("ALTER GROUP qw_sub_staff RENAME TO qw_sub_crew")
        .await
        .unwrap();
    let renamed: bool = direct
        .query_one("SELECT to_regrole('qw_sub_crew') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(renamed);
    // The dialect's form is a syntax error in PostgreSQL itself, so the
    // dialect takes nothing PostgreSQL would run.
    for sql in [
        "ALTER GROUP g ON q SUBSCRIBE FROM NOW",
        "ALTER GROUP qw_sub_crew ON q SUBSCRIBE FROM BEGINNING",
    ] {
        let err = direct.simple_query(sql).await.unwrap_err();
        assert_eq!(err.code().unwrap().code(), "42601", "{sql} in PostgreSQL");
    }
    // PostgreSQL's own error, in its own words.
    let err = client
        .simple_query("ALTER GROUP qw_sub_nobody ADD USER qw_sub_alice")
        .await
        .unwrap_err();
    let db = err.as_db_error().expect("PostgreSQL's error");
    assert_eq!(db.code().code(), "42704");
    assert!(db.message().contains("qw_sub_nobody"), "{}", db.message());
    direct
        .batch_execute("DROP ROLE qw_sub_crew, qw_sub_alice")
        .await
        .unwrap();
}

#[tokio::test]
async fn another_tenants_queue_is_unknown_to_alter_group() {
    use queenwire::users::{Passthrough, User, Users, Verifier};
    let a_tenant = uuid::Uuid::from_u128(0x5ab1);
    let b_tenant = uuid::Uuid::from_u128(0x5ab2);
    let mut users = Users::default();
    for (name, tenant) in [("a", a_tenant), ("b", b_tenant)] {
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
    let users = std::sync::Arc::new(users);
    let proxy = Proxy::start_with("sub_tenants", |c| c.users = Some(users)).await;
    let login = |name: &'static str| {
        let mut cfg = proxy.client_config();
        cfg.user(name).password("pw");
        async move { common::proxy::connect(&cfg).await }
    };
    let a = login("a").await;
    let b = login("b").await;
    a.batch_execute("PUSH INTO shared_name VALUES ('{}')")
        .await
        .unwrap();
    assert_eq!(
        code(&b, "ALTER GROUP g ON shared_name SUBSCRIBE FROM NOW").await,
        "42704"
    );
    // Calling the procedure for a's tenant from b's role: PostgreSQL says no.
    assert_eq!(
        code(
            &b,
            &format!(
                "SELECT queen.consumer_group_subscribe_v1('shared_name', 'g', 'now', NULL, '{a_tenant}'::uuid)"
            )
        )
        .await,
        "42501"
    );
    let direct = proxy.connect_direct().await;
    let groups: i64 = direct
        .query_one("SELECT count(*) FROM queen.consumer_groups_metadata", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(groups, 0, "nothing registered");
    assert_eq!(take(&a, "shared_name", "g").await.len(), 1);
}
