//! Every call the proxy makes, Parsed and Described against the applied
//! schema: a renamed or retyped procedure argument, or a renamed or retyped
//! result column, fails here rather than in front of a user.

mod common;

use common::proxy::connect;
use queenwire::calls::{CallSpec, ALL};
use queenwire::engine::schema;
use tokio_postgres::types::Type;

/// The `$n` that are passed straight to a named argument (`p_x => $n`
/// followed by `,` or `)`), as opposed to `$n` inside an expression.
fn direct_arguments(sql: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for (at, _) in sql.match_indices("=> $") {
        let rest = &sql[at + 4..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let after = rest[digits.len()..].chars().next();
        if matches!(after, Some(',' | ')')) {
            out.push(digits.parse().expect("a parameter number"));
        }
    }
    out
}

/// The types a Parse declares: the spec's own, except for the parameters
/// passed straight to an argument, which are left for PostgreSQL to infer
/// from the procedure's declaration (so that a retyped argument shows).
fn declared_types(spec: &CallSpec) -> Vec<Type> {
    let direct = direct_arguments(spec.sql);
    spec.params
        .iter()
        .enumerate()
        .map(|(i, ty)| {
            if direct.contains(&(i + 1)) {
                Type::UNKNOWN
            } else {
                ty.clone()
            }
        })
        .collect()
}

#[tokio::test]
async fn every_call_parses_and_describes_as_its_spec_says() {
    let db = common::cluster::fresh_database("calls");
    let client = connect(&db).await;
    schema::apply(&client).await.unwrap();
    let mut mismatches = Vec::new();
    for spec in ALL {
        let statement = match client.prepare_typed(spec.sql, &declared_types(spec)).await {
            Ok(s) => s,
            Err(e) => {
                let why = e
                    .as_db_error()
                    .map_or(e.to_string(), |d| d.message().to_string());
                mismatches.push(format!("{}: Parse failed: {why}", spec.name));
                continue;
            }
        };
        if statement.params() != spec.params {
            mismatches.push(format!(
                "{}: parameters {:?}, spec says {:?}",
                spec.name,
                statement.params(),
                spec.params
            ));
        }
        let columns: Vec<(&str, &Type)> = statement
            .columns()
            .iter()
            .map(|c| (c.name(), c.type_()))
            .collect();
        let expected: Vec<(&str, &Type)> = spec.columns.iter().map(|c| (c.name, &c.ty)).collect();
        if columns != expected {
            mismatches.push(format!(
                "{}: columns {columns:?}, spec says {expected:?}",
                spec.name
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn direct_arguments_are_told_from_expressions() {
    assert_eq!(
        direct_arguments(
            "SELECT f(p_a => $1, p_b => $2::jsonb, p_c => COALESCE($3, 1), p_d => $4)"
        ),
        vec![1, 4]
    );
}

/// A Sync that ends an implicit transaction whose commit fails (here a
/// deferred unique constraint) reports the commit's error: the proxy's
/// writers that commit with a bare Sync (the POP lane's ACKs, timers,
/// streams, REPLAY) must not take a rolled-back transaction for committed.
#[tokio::test]
async fn a_commit_that_fails_at_sync_is_reported() {
    use queenwire::backend::call::CallEnd;
    use queenwire::backend::{BackendConn, BackendError, BackendTarget};
    use queenwire::protocol::TxStatus;

    static INSERT: CallSpec = CallSpec {
        name: "test_deferred_insert",
        sql: "INSERT INTO deferred_unique VALUES (1)",
        params: &[],
        columns: &[],
    };
    let db = common::cluster::fresh_database("sync_commit_fails");
    let admin = connect(&db).await;
    admin
        .batch_execute(
            "CREATE TABLE deferred_unique (k int UNIQUE DEFERRABLE INITIALLY DEFERRED);
             INSERT INTO deferred_unique VALUES (1)",
        )
        .await
        .unwrap();
    let target = BackendTarget::from_config(&db).unwrap();
    let mut conn = BackendConn::connect(&target).await.unwrap();
    // The duplicate is found only at commit.
    conn.call(&INSERT, &[], CallEnd::Flush).await.unwrap();
    match conn.sync().await {
        Err(BackendError::Server(e)) => assert_eq!(e.code(), "23505", "{}", e.message),
        other => panic!("the failed commit was not reported: {other:?}"),
    }
    assert_eq!(conn.status(), TxStatus::Idle);
    let rows: i64 = admin
        .query_one("SELECT count(*) FROM deferred_unique", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1, "rolled back");
    // The connection goes on: the same call, then a clean Sync.
    admin
        .batch_execute("DELETE FROM deferred_unique")
        .await
        .unwrap();
    conn.call(&INSERT, &[], CallEnd::Flush).await.unwrap();
    assert_eq!(conn.sync().await.unwrap(), TxStatus::Idle);
}

/// A reply the proxy cannot read (a procedure changed under it returns a
/// NULL where its call declares none) fails that statement with XX000,
/// inside a block the block as well, and the session goes on: the
/// connection is in step, nothing was lost.
#[tokio::test]
async fn a_reply_that_cannot_be_read_fails_the_statement_not_the_session() {
    use common::proxy::Proxy;
    let proxy = Proxy::start("unreadable_reply").await;
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute(
            "CREATE OR REPLACE FUNCTION queen.get_dlq_messages_v1(
                 p_queue TEXT, p_limit INTEGER DEFAULT 100,
                 p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
             RETURNS TABLE (message_offset BIGINT, partition_name TEXT,
                 consumer_group TEXT, reason TEXT, retry_count INTEGER,
                 failed_at TIMESTAMPTZ, base_offset BIGINT, blob BYTEA)
             LANGUAGE sql AS $$
                 SELECT NULL::bigint, NULL::text, NULL::text, 'x'::text, 0,
                        now(), NULL::bigint, NULL::bytea $$",
        )
        .await
        .unwrap();
    let client = proxy.connect().await;
    let failed = client
        .simple_query("SHOW DLQ FROM anything")
        .await
        .expect_err("an unreadable row cannot be answered");
    let code = failed.code().map(|c| c.code().to_string());
    assert_eq!(code.as_deref(), Some("XX000"), "{failed:?}");
    let one = client
        .query_one("SELECT 1", &[])
        .await
        .expect("the session goes on");
    assert_eq!(one.get::<_, i32>(0), 1);

    // Inside a block the block fails, as for PostgreSQL's own error.
    client.batch_execute("BEGIN").await.unwrap();
    client
        .simple_query("SHOW DLQ FROM anything")
        .await
        .unwrap_err();
    let after = client.simple_query("SELECT 1").await.unwrap_err();
    let code = after.code().map(|c| c.code().to_string());
    assert_eq!(code.as_deref(), Some("25P02"), "{after:?}");
    client.batch_execute("ROLLBACK").await.unwrap();
    let one = client.query_one("SELECT 1", &[]).await.unwrap();
    assert_eq!(one.get::<_, i32>(0), 1);
}
