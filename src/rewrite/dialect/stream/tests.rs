//! The stream statements' grammar.

use super::super::parse;
use super::super::test_support::{error, lit, ok};
use super::*;

fn create(sql: &str) -> CreateStream {
    match ok(sql) {
        Statement::CreateStream(c) => *c,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_issue_example_parses_with_its_expressions_kept_as_written() {
    let c = create(
        "CREATE STREAM order_totals FROM orders GROUP g
           WHERE (payload->>'amount')::numeric > 0 AND payload ? 'customer'
           KEY BY payload->>'customer'
           WINDOW TUMBLING '1m'
           EVENT TIME (payload->>'ts')::timestamptz ALLOWED LATENESS '10s' ON LATE INCLUDE
           GRACE '5s' IDLE FLUSH '5s'
           AGGREGATE (count(*) AS orders, sum((payload->>'amount')::numeric) AS total,
                      min((payload->>'amount')::numeric), last(payload->'status') AS \"last status\")
           INTO order_totals_sink PARTITION BY KEY;",
    );
    assert_eq!(c.name, lit("order_totals"));
    assert_eq!(
        c.where_expr.as_deref(),
        Some("(payload->>'amount')::numeric > 0 AND payload ? 'customer'")
    );
    assert_eq!(c.key_expr.as_deref(), Some("payload->>'customer'"));
    let et = c.event_time.unwrap();
    assert_eq!(et.expr, "(payload->>'ts')::timestamptz");
    assert!(et.include_late);
    assert_eq!(c.aggregates.len(), 4);
    assert_eq!(c.aggregates[0].arg, None);
    assert_eq!(
        c.aggregates[1].arg.as_deref(),
        Some("(payload->>'amount')::numeric")
    );
    assert_eq!(c.aggregates[2].alias, "min");
    assert_eq!(c.aggregates[3].alias, "last status");
    assert!(c.partition_by_key);
    assert!(!c.reset);
}

#[test]
fn keywords_inside_strings_and_parentheses_do_not_end_an_expression() {
    let c = create(
        "create stream s from q where payload->>'x' = 'INTO WINDOW' key by coalesce(payload->>'k', 'GRACE') window session gap 30 aggregate (sum((payload->'n')::int)) into out",
    );
    assert_eq!(
        c.where_expr.as_deref(),
        Some("payload->>'x' = 'INTO WINDOW'")
    );
    assert_eq!(
        c.key_expr.as_deref(),
        Some("coalesce(payload->>'k', 'GRACE')")
    );
    assert!(matches!(c.window, Window::Session { .. }));
}

#[test]
fn or_replace_reset_sliding_and_the_other_statements() {
    let c = create(
        "CREATE OR REPLACE STREAM s FROM q WINDOW SLIDING '10m' EVERY '1m' AGGREGATE (count(*)) INTO o RESET",
    );
    assert!(c.or_replace && c.reset);
    let c = create(
        "CREATE STREAM s FROM q SUBSCRIBE FROM '2026-01-01' WINDOW TUMBLING 5 AGGREGATE (count(*)) INTO o",
    );
    assert_eq!(
        c.subscribe,
        Some(super::super::pop::SubscribeFrom::Timestamp(lit(
            "2026-01-01"
        )))
    );
    assert_eq!(
        ok("DROP STREAM IF EXISTS s"),
        Statement::DropStream {
            name: lit("s"),
            if_exists: true
        }
    );
    assert_eq!(
        ok("ALTER STREAM s PAUSE"),
        Statement::AlterStream {
            name: lit("s"),
            paused: true
        }
    );
    assert_eq!(ok("SHOW STREAMS"), Statement::ShowStreams);
    assert_eq!(
        ok("SHOW STREAM s"),
        Statement::ShowStream { name: lit("s") }
    );
}

#[test]
fn reduce_takes_a_function_name_and_an_initial_state() {
    let c = create(
        "CREATE STREAM s FROM q WINDOW TUMBLING 5 AGGREGATE (reduce(app.\"Collect ids\", '[]') AS ids, reduce(f, jsonb_build_object('n', 0))) INTO o",
    );
    assert_eq!(c.aggregates[0].func, AggFn::Reduce);
    assert_eq!(c.aggregates[0].arg.as_deref(), Some("app.\"Collect ids\""));
    assert_eq!(c.aggregates[0].init.as_deref(), Some("'[]'"));
    assert_eq!(c.aggregates[0].alias, "ids");
    assert_eq!(c.aggregates[1].arg.as_deref(), Some("f"));
    assert_eq!(
        c.aggregates[1].init.as_deref(),
        Some("jsonb_build_object('n', 0)")
    );
    assert_eq!(c.aggregates[1].alias, "reduce");
    for bad in [
        "reduce(f)",
        "reduce(f(x), '{}')",
        "reduce('f', '{}')",
        "reduce(f, )",
        "reduce(*)",
        "min_text(payload)",
    ] {
        let sql = format!("CREATE STREAM s FROM q WINDOW TUMBLING 5 AGGREGATE ({bad}) INTO o");
        assert_eq!(error(&sql).0, "42601", "{bad}");
    }
}

#[test]
fn malformed_streams_are_syntax_errors() {
    assert_eq!(
        error("CREATE STREAM s FROM q WINDOW TUMBLING 5 AGGREGATE (count(*)) INTO o RESET").0,
        "42601"
    );
    assert_eq!(
        error("CREATE STREAM s FROM q WHERE WINDOW TUMBLING 5 AGGREGATE (count(*)) INTO o").0,
        "42601"
    );
    assert_eq!(
        error("CREATE STREAM s FROM q WHERE payload->>$1 = 'x' WINDOW TUMBLING 5 AGGREGATE (count(*)) INTO o").0,
        "42601"
    );
    assert_eq!(
        error("CREATE STREAM s FROM q WINDOW TUMBLING 5 AGGREGATE (median(x)) INTO o").0,
        "42601"
    );
    assert_eq!(
        error("CREATE STREAM s FROM q WINDOW TUMBLING 5 AGGREGATE (count(*), count(*)) INTO o").0,
        "42701"
    );
    assert_eq!(
        error("CREATE STREAM s FROM q WINDOW TUMBLING 5 AGGREGATE (sum(*)) INTO o").0,
        "42601"
    );
    assert_eq!(error("ALTER STREAM s").0, "42601");
}

#[test]
fn postgresql_statements_stay_postgresql_s() {
    assert_eq!(parse("SHOW stream"), None);
    assert_eq!(
        parse("CREATE OR REPLACE FUNCTION f() RETURNS int AS 'select 1' LANGUAGE sql"),
        None
    );
    assert_eq!(parse("CREATE TABLE stream (x int)"), None);
    assert_eq!(parse("DROP TABLE stream"), None);
}
