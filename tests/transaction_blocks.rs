//! Dialect statements inside the client's transaction blocks: the lock
//! order holds within one block only, and a failed block refuses every
//! dialect statement as PostgreSQL refuses any statement there.

mod common;

use common::proxy::Proxy;
use common::sql::rows;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;

async fn code(client: &Client, sql: &str) -> String {
    let err = client.simple_query(sql).await.expect_err(sql);
    err.code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| panic!("{sql}: {err}"))
}

/// The code of an extended-protocol statement with text parameters.
async fn extended_code(client: &Client, sql: &str, params: &[&str]) -> String {
    let types = vec![Type::TEXT; params.len()];
    let statement = client.prepare_typed(sql, &types).await.unwrap();
    let params: Vec<&(dyn ToSql + Sync)> =
        params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
    let err = client.query(&statement, &params).await.expect_err(sql);
    err.code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| panic!("{sql}: {err}"))
}

#[tokio::test]
async fn the_lock_order_holds_within_the_block_that_ran_a_queue_statement() {
    let proxy = Proxy::start("blocks_lock_order").await;
    let client = proxy.connect().await;
    rows(
        &client,
        "PUSH INTO orders VALUES ('1'), ('2'), ('3'), ('4')",
    )
    .await;
    // The idempotent consumer of the docs, block after block, over the
    // extended protocol as drivers send it.
    for i in 0..3 {
        client.batch_execute("BEGIN").await.unwrap();
        let key = format!("order-{i}");
        client
            .query("KV PUT dedup $1 'true' FOREVER IF ABSENT", &[&key])
            .await
            .unwrap_or_else(|e| panic!("block {i}: {e}"));
        let popped = client.query("POP FROM orders", &[]).await.unwrap();
        let receipt: String = popped[0].get("receipt");
        client
            .query("PUSH INTO invoices VALUES ('{}')", &[])
            .await
            .unwrap();
        client.query("ACK $1", &[&receipt]).await.unwrap();
        client.batch_execute("COMMIT").await.unwrap();
    }
    // A block that ends in any way takes its locks with it: ROLLBACK, a
    // failed block's ROLLBACK or COMMIT, a script's own blocks.
    for (end, fail) in [("ROLLBACK", false), ("ROLLBACK", true), ("COMMIT", true)] {
        client.batch_execute("BEGIN").await.unwrap();
        rows(&client, "POP FROM orders").await;
        if fail {
            assert_eq!(code(&client, "SELECT 1/0").await, "22012");
        }
        client.batch_execute(end).await.unwrap();
        client.batch_execute("BEGIN").await.unwrap();
        rows(&client, "KV PUT s k '1' FOREVER").await;
        client.batch_execute("ROLLBACK").await.unwrap();
    }
    client
        .simple_query(
            "BEGIN; POP FROM orders; COMMIT; BEGIN; SCHEDULE INTO t KEY k AFTER 60 VALUES ('1'); COMMIT",
        )
        .await
        .unwrap();
    // A queue statement that failed took nothing the block keeps.
    client.batch_execute("BEGIN; SAVEPOINT a").await.unwrap();
    assert_eq!(
        code(&client, "POP FROM orders GROUP g SUBSCRIBE FROM 'garbage'").await,
        "22007"
    );
    client.batch_execute("ROLLBACK TO a").await.unwrap();
    rows(&client, "KV PUT s k '1' FOREVER").await;
    // Within the block the rule stands, a ROLLBACK TO included: the proxy
    // does not follow which savepoint a queue statement came after.
    rows(&client, "POP FROM orders").await;
    client.batch_execute("SAVEPOINT b").await.unwrap();
    assert_eq!(code(&client, "KV INCR s n FOREVER").await, "25000");
    client.batch_execute("ROLLBACK TO b").await.unwrap();
    assert_eq!(code(&client, "KV DELETE s k").await, "25000");
    client.batch_execute("ROLLBACK").await.unwrap();
    rows(&client, "SELECT 1").await;
}

#[tokio::test]
async fn a_failed_block_refuses_every_dialect_statement_with_25p02() {
    let proxy = Proxy::start("blocks_failed").await;
    let client = proxy.connect().await;
    rows(&client, "PUSH INTO q VALUES ('1')").await;
    rows(&client, "CREATE QUEUE eph WITH (class = 'ephemeral')").await;
    let statements = [
        "PUSH INTO q VALUES ('1')",
        "PUSH INTO q VALUES ('not json')",
        "PUSH INTO eph VALUES ('1')",
        "POP FROM q",
        "POP FROM eph",
        "POP FROM q GROUP g SUBSCRIBE FROM 'garbage'",
        "ACK 'garbage'",
        "ACK 'garbage' FAILED",
        "RENEW 'garbage' FOR 30",
        "KV PUT s k '1' FOREVER",
        "KV PUT s k 'not json' FOREVER",
        "KV GET s k",
        "KV INCR s n FOREVER",
        "KV DELETE s k",
        "KV LIST s",
        "SCHEDULE INTO q KEY k AFTER 60 VALUES ('1')",
        "SCHEDULE INTO q KEY k AT 'garbage' VALUES ('1')",
        "CANCEL SCHEDULE k ON q",
        "SHOW SCHEDULES",
        "SHOW QUEUES",
        "SHOW GROUPS ON q",
        "SHOW QUEENWIRE CLIENTS",
        "CREATE QUEUE other",
        "CREATE QUEUE other WITH (retry_limit = 'x')",
        "SEEK GROUP g ON q TO END",
        "PURGE TENANT '00000000-0000-0000-0000-000000000001'",
    ];
    for sql in statements {
        client.batch_execute("BEGIN").await.unwrap();
        assert_eq!(code(&client, "SELECT 1/0").await, "22012");
        assert_eq!(code(&client, sql).await, "25P02", "{sql}");
        assert_eq!(code(&client, sql).await, "25P02", "{sql}, again");
        client.batch_execute("ROLLBACK").await.unwrap();
    }
    // Over the extended protocol, with arguments bound to parameters.
    let bound: [(&str, &[&str]); 4] = [
        ("ACK $1", &["garbage"]),
        ("KV PUT s $1 $2 FOREVER", &["k", "not json"]),
        ("SCHEDULE INTO q KEY k AT $1 VALUES ('1')", &["garbage"]),
        ("PUSH INTO $1 VALUES ('1')", &[""]),
    ];
    for (sql, params) in bound {
        client.batch_execute("BEGIN").await.unwrap();
        assert_eq!(code(&client, "SELECT 1/0").await, "22012");
        assert_eq!(extended_code(&client, sql, params).await, "25P02", "{sql}");
        client.batch_execute("ROLLBACK").await.unwrap();
    }
    // A syntax error is still one, as in PostgreSQL.
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(code(&client, "SELECT 1/0").await, "22012");
    assert_eq!(code(&client, "KV PUT s").await, "42601");
    client.batch_execute("ROLLBACK").await.unwrap();
    rows(&client, "KV PUT s k '1' FOREVER").await;
}

/// One extended-protocol pipeline that opens and ends blocks around
/// dialect statements before its Sync: each POP commits or rolls back
/// with the table row written beside it, so the two agree on what
/// PostgreSQL committed (statements after a COMMIT and before the next
/// BEGIN of the same pipeline join that BEGIN's block, as PostgreSQL has
/// it).
#[tokio::test]
async fn dialect_statements_in_one_pipeline_follow_the_blocks_it_opens_and_ends() {
    use common::raw::{pipeline, Raw};
    let proxy = Proxy::start("blocks_pipeline").await;
    let client = proxy.connect().await;
    rows(
        &client,
        "PUSH INTO pj VALUES ('1'), ('2'), ('3'), ('4'), ('5')",
    )
    .await;
    client
        .batch_execute("CREATE TABLE pj_done (n int)")
        .await
        .unwrap();
    let mut raw = Raw::connect(proxy.addr).await;
    let pop = "POP FROM pj AUTO ACK";
    let mark = "INSERT INTO pj_done VALUES (1)";
    let exchanges: [&[&str]; 3] = [
        &["BEGIN", pop, mark, "ROLLBACK"],
        &["BEGIN", pop, mark, "COMMIT", pop, mark, "BEGIN", pop, mark],
        &[pop, mark, "SELECT 1/0"],
    ];
    // Five messages, and the pipeline with the error runs twice.
    for (i, statements) in exchanges.iter().enumerate() {
        raw.send(&pipeline(statements)).await;
        if i == 2 {
            // The same as one simple query: one implicit transaction.
            let r = raw.read_until_ready().await;
            assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
            raw.send(&[queenwire::protocol::frontend::build_query(
                statements.join("; "),
            )])
            .await;
        }
        let r = raw.read_until_ready().await;
        if r.status != b'I' {
            let end = raw.simple("ROLLBACK").await;
            assert!(end.errors.is_empty(), "{:?}", end.errors);
        }
        let done: i64 = client
            .query_one("SELECT count(*) FROM pj_done", &[])
            .await
            .unwrap()
            .get(0);
        let left = rows(&client, "SHOW MESSAGES FROM pj")
            .await
            .iter()
            .filter(|m| m.get("state").cloned().flatten().as_deref() == Some("pending"))
            .count() as i64;
        assert_eq!(
            left,
            5 - done,
            "pipeline {i}: {statements:?}: {:?}",
            r.errors
        );
    }
    // The lock order of a block ends with it, within the pipeline too: a
    // KV write after the COMMIT of a block that popped is not refused.
    raw.send(&pipeline(&[
        "BEGIN",
        pop,
        "COMMIT",
        "KV PUT pj_seen 'k' '1' FOREVER",
        "BEGIN",
        "KV PUT pj_seen 'k2' '1' FOREVER",
        pop,
        "COMMIT",
    ]))
    .await;
    let r = raw.read_until_ready().await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.status, b'I');
    let kv = raw.simple("KV GET pj_seen 'k', 'k2'").await;
    assert_eq!(kv.rows.len(), 2, "{:?}", kv.errors);
}

/// One job in a block: POP, ACK, and the names prepared on the connection.
async fn bp_work(client: &Client) -> Vec<String> {
    client.batch_execute("BEGIN").await.unwrap();
    let popped = client.query("POP FROM bp_jobs", &[]).await.unwrap();
    let receipt: String = popped[0].get("receipt");
    let acked = client.query("ACK $1", &[&receipt]).await.unwrap();
    assert_eq!(acked[0].get::<_, String>("status"), "acked");
    let names = rows(
        client,
        "SELECT name FROM pg_prepared_statements ORDER BY name",
    )
    .await;
    client.batch_execute("COMMIT").await.unwrap();
    names
        .into_iter()
        .filter_map(|r| r.get("name").cloned().flatten())
        .collect()
}

/// Queue statements in blocks are prepared once on the client's connection,
/// under the prefix no client's SQL can name; SQL that drops them unseen
/// (`DEALLOCATE ALL` run by a function) costs the one statement that next
/// needs one of them there, as it costs a client's own statement.
#[tokio::test]
async fn queue_statements_in_blocks_are_prepared_once_under_the_reserved_prefix() {
    let proxy = Proxy::start_with("blocks_prepared", |c| c.pool_size = 1).await;
    let client = proxy.connect().await;
    let pushed: Vec<String> = (0..12).map(|i| format!("('{i}')")).collect();
    rows(
        &client,
        &format!("PUSH INTO bp_jobs VALUES {}", pushed.join(", ")),
    )
    .await;
    client
        .batch_execute("CREATE FUNCTION bp_forget() RETURNS void LANGUAGE sql AS 'DEALLOCATE ALL'")
        .await
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen = bp_work(&client).await;
    }
    // The pop and the ACK, each prepared once under the reserved prefix.
    let pop: Vec<&String> = seen.iter().filter(|n| n.ends_with("_qw_pop_v2")).collect();
    assert_eq!(pop.len(), 1, "{seen:?}");
    let reserved = pop[0].strip_suffix("qw_pop_v2").unwrap();
    assert!(
        reserved.len() == "qw_0123456789abcdef_".len() && reserved.starts_with("qw_"),
        "{seen:?}"
    );
    assert_eq!(
        code(&client, &format!("PREPARE {} AS SELECT 1", pop[0])).await,
        "42939"
    );
    assert_eq!(
        code(&client, &format!("DEALLOCATE {}", pop[0])).await,
        "26000"
    );
    // The statement that meets the loss fails as PostgreSQL fails a Bind of
    // a statement that is gone; the next block parses again and runs.
    client.batch_execute("BEGIN").await.unwrap();
    rows(&client, "SELECT bp_forget()").await;
    assert_eq!(code(&client, "POP FROM bp_jobs").await, "26000");
    client.batch_execute("ROLLBACK").await.unwrap();
    let names = bp_work(&client).await;
    assert!(names.iter().any(|n| n.ends_with("_qw_pop_v2")), "{names:?}");
}

/// A simple query of several statements with queue statements among them
/// is one transaction, as PostgreSQL runs a multi-statement query: an error
/// rolls back the queue statements before it too, and without one
/// everything commits and the session is outside a block again.
#[tokio::test]
async fn a_multi_statement_query_with_queue_statements_is_one_transaction() {
    let proxy = Proxy::start("script_implicit").await;
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE TABLE script_done (x int)")
        .await
        .unwrap();
    let failed = "PUSH INTO sq VALUES ('1'); INSERT INTO script_done VALUES (1); SELECT 1/0";
    assert_eq!(code(&client, failed).await, "22012");
    let count = "SELECT count(*)::int FROM script_done";
    let n: i32 = client.query_one(count, &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "the INSERT went with the failed transaction");
    assert!(
        rows(&client, "POP FROM sq AUTO ACK").await.is_empty(),
        "the PUSH went with the failed transaction"
    );
    client
        .simple_query("PUSH INTO sq VALUES ('2'); INSERT INTO script_done VALUES (2)")
        .await
        .unwrap();
    let n: i32 = client.query_one(count, &[]).await.unwrap().get(0);
    assert_eq!(n, 1);
    let got = rows(&client, "POP FROM sq AUTO ACK").await;
    assert_eq!(got.len(), 1);
    // Outside a block again: a ROLLBACK has nothing to roll back.
    let warned = client.simple_query("ROLLBACK").await;
    assert!(warned.is_ok());
    let n: i32 = client.query_one(count, &[]).await.unwrap().get(0);
    assert_eq!(n, 1, "the committed script stays");
    // A KV write after a queue statement cannot share a block with it (the
    // lock order): such a script runs statement by statement.
    client
        .simple_query("PUSH INTO sq VALUES ('3'); KV PUT cfg k '1' FOREVER")
        .await
        .unwrap();
    assert_eq!(rows(&client, "KV GET cfg 'k'").await.len(), 1);
}
