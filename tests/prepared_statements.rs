//! Prepared statements through queenwire behave as on PostgreSQL itself:
//! each exchange runs straight against PostgreSQL and through the proxy,
//! and the two outcomes (SQLSTATEs, messages, rows) are compared. The
//! proxy renames a client's protocol-level statements and parses them
//! again on whichever pooled connection runs them; none of that may show.

mod common;

use common::proxy::Proxy;
use common::raw::{bind_text, execute, sync, Raw, Replies};
use queenwire::protocol::frontend::build_parse;
use queenwire::protocol::Message;
use std::time::Duration;

/// A client straight to PostgreSQL (`direct`) or through the proxy.
async fn client(proxy: &Proxy, direct: bool) -> Raw {
    if direct {
        Raw::connect_direct(&proxy.direct).await
    } else {
        Raw::connect(proxy.addr).await
    }
}

async fn exchange(raw: &mut Raw, msgs: &[Message]) -> Replies {
    raw.send(msgs).await;
    tokio::time::timeout(Duration::from_secs(20), raw.read_until_ready())
        .await
        .expect("the exchange is answered")
}

async fn simple(raw: &mut Raw, sql: &str) -> Replies {
    exchange(raw, &[queenwire::protocol::frontend::build_query(sql)]).await
}

/// What a test compares of one exchange: its SQLSTATEs and messages, its
/// command tags and its rows.
fn outcome(r: &Replies) -> String {
    let errors: Vec<String> = r
        .errors
        .iter()
        .map(|e| format!("{} {}", e.code(), e.message))
        .collect();
    format!("{errors:?} {:?} {:?}", r.completions, r.rows)
}

fn parse(name: &str, sql: &str) -> Message {
    build_parse(name, sql, &[])
}

/// Binds and executes statement `name` (no parameters), then Sync.
fn run(name: &str) -> [Message; 3] {
    [bind_text("", name, &[]), execute("", 0), sync()]
}

/// A simple Query destroys the unnamed statement, as PostgreSQL's does.
#[tokio::test]
async fn a_simple_query_destroys_the_unnamed_statement() {
    let proxy = Proxy::start_with("prep_unnamed", |c| c.pool_size = 2).await;
    let mut answers = Vec::new();
    for direct in [true, false] {
        let mut out = Vec::new();
        for between in ["select 5", "", "begin; commit"] {
            let mut raw = client(&proxy, direct).await;
            exchange(&mut raw, &[parse("", "select 4"), sync()]).await;
            simple(&mut raw, between).await;
            let r = exchange(&mut raw, &run("")).await;
            out.push(format!("after {between:?}: {}", outcome(&r)));
        }
        answers.push(out);
    }
    assert_eq!(
        answers[0], answers[1],
        "PostgreSQL (left) vs queenwire (right)"
    );
    assert!(answers[0][0].contains("26000"), "{:?}", answers[0]);
}

/// A DEALLOCATE ALL or DISCARD ALL that PostgreSQL refused leaves the
/// session's statements as they were; one that ran drops them; DISCARD
/// PLANS drops none.
#[tokio::test]
async fn a_refused_deallocate_all_or_discard_all_keeps_the_statements() {
    let proxy = Proxy::start_with("prep_refused_discard", |c| c.pool_size = 2).await;
    let scripts: [&[&str]; 7] = [
        &["begin", "select 1/0", "deallocate all", "rollback"],
        &["select 1; discard all"],
        &["begin", "discard all", "rollback"],
        &[
            "begin",
            "select 1",
            "deallocate all",
            "select 1/0",
            "rollback",
        ],
        &["discard plans"],
        &["deallocate all"],
        &["select 1; deallocate all"],
    ];
    let mut answers = Vec::new();
    for direct in [true, false] {
        let mut out = Vec::new();
        for script in scripts {
            let mut raw = client(&proxy, direct).await;
            let parsed = exchange(
                &mut raw,
                &[parse("k1", "select generate_series(1, 11)"), sync()],
            )
            .await;
            assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
            for sql in script {
                let r = simple(&mut raw, sql).await;
                out.push(format!("{sql}: {}", outcome(&r)));
            }
            let r = exchange(&mut raw, &run("k1")).await;
            out.push(format!("k1 after {script:?}: {}", outcome(&r)));
        }
        // In a pipeline: a statement parsed after the DEALLOCATE ALL stays.
        let mut raw = client(&proxy, direct).await;
        exchange(&mut raw, &[parse("k1", "select 1"), sync()]).await;
        let pipeline = [
            parse("", "deallocate all"),
            bind_text("", "", &[]),
            execute("", 0),
            parse("k2", "select 2"),
            bind_text("", "k2", &[]),
            execute("", 0),
            sync(),
        ];
        out.push(format!(
            "pipeline: {}",
            outcome(&exchange(&mut raw, &pipeline).await)
        ));
        for name in ["k1", "k2"] {
            let r = exchange(&mut raw, &run(name)).await;
            out.push(format!("{name} after the pipeline: {}", outcome(&r)));
        }
        answers.push(out);
    }
    assert_eq!(
        answers[0], answers[1],
        "PostgreSQL (left) vs queenwire (right)"
    );
    assert!(answers[0][4].contains("\"11\""), "{:?}", answers[0]);
}

/// SQL naming the proxy's name of another session's statement fails as
/// for a statement the client never prepared, and never reaches
/// PostgreSQL: the statement stays, and its session still runs it.
#[tokio::test]
async fn another_session_s_statement_cannot_be_dropped_or_run_through_its_proxy_name() {
    // One backend connection: the second session lands on the first one's.
    let proxy = Proxy::start_with("prep_other_session", |c| c.pool_size = 1).await;
    let setup = proxy.connect_direct().await;
    setup
        .batch_execute("CREATE TABLE prep_t (x int)")
        .await
        .unwrap();
    // The proxy's name for the first session's statement, as the second
    // one sees it in pg_prepared_statements.
    let name = {
        let mut a = client(&proxy, false).await;
        exchange(
            &mut a,
            &[parse("secret_stmt", "select 'password' = $1::text"), sync()],
        )
        .await;
        let mut b = client(&proxy, false).await;
        let r = simple(&mut b, "select name from pg_prepared_statements").await;
        let names: Vec<String> = r.rows.iter().filter_map(|row| row[0].clone()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
        names[0].clone()
    };
    let upper = name.to_uppercase();
    let quoted = format!("\"{name}\"");
    let unicode = format!("U&\"!0071{}\" UESCAPE '!'", name.strip_prefix('q').unwrap());
    let statements = [
        format!("deallocate {name}"),
        format!("deallocate prepare {upper}"),
        format!("deallocate {quoted}"),
        format!("deallocate {unicode}"),
        format!("execute {name}('password')"),
        format!("explain (costs off) execute {upper}('password')"),
        format!("create table prep_copy as execute {name}('password')"),
        format!("insert into prep_t values (1); execute {name}('password')"),
        "select count(*) from prep_t".to_string(),
    ];
    // After these the second session is pinned to the one connection: a
    // name of its own that only looks like the proxy's, and a Bind of the
    // proxy's name.
    let pinning = [
        "prepare qw_0123456789abcdef_1 as select 7",
        "execute qw_0123456789abcdef_1",
        "deallocate qw_0123456789abcdef_1",
    ];
    let mut answers = Vec::new();
    for direct in [true, false] {
        let mut a = client(&proxy, direct).await;
        exchange(
            &mut a,
            &[parse("secret_stmt", "select 'password' = $1::text"), sync()],
        )
        .await;
        let mut b = client(&proxy, direct).await;
        let mut out = Vec::new();
        for sql in &statements {
            out.push(format!("{sql}: {}", outcome(&simple(&mut b, sql).await)));
        }
        // Over the extended protocol: PostgreSQL fails it at Execute, the
        // proxy at Parse, with the same error.
        let sql = format!("execute {name}('password')");
        let pipeline = [
            parse("", &sql),
            bind_text("", "", &[]),
            execute("", 0),
            sync(),
        ];
        let r = exchange(&mut b, &pipeline).await;
        out.push(format!("extended: {}", outcome(&r)));
        let mut bind = vec![
            bind_text("", "secret_stmt", &[Some("password")]),
            execute("", 0),
            sync(),
        ];
        let r = exchange(&mut a, &bind).await;
        out.push(format!("owner: {}", outcome(&r)));
        for sql in pinning {
            out.push(format!("{sql}: {}", outcome(&simple(&mut b, sql).await)));
        }
        bind[0] = bind_text("", &name, &[Some("x")]);
        out.push(format!("bind: {}", outcome(&exchange(&mut b, &bind).await)));
        answers.push(out);
    }
    assert_eq!(
        answers[0], answers[1],
        "PostgreSQL (left) vs queenwire (right)"
    );
    assert!(answers[1][0].contains("26000"), "{:?}", answers[1]);
    let owner = answers[1].iter().find(|a| a.starts_with("owner"));
    assert!(
        owner.is_some_and(|o| o.contains("Some(\"t\")")),
        "{:?}",
        answers[1]
    );
    // PREPARE of a name the proxy gives its statements is refused: it
    // would be the name of one of them.
    let mut b = client(&proxy, false).await;
    let r = simple(&mut b, &format!("prepare {name} as select 1")).await;
    assert_eq!(
        r.errors.first().map(|e| e.code()),
        Some("42939"),
        "{:?}",
        r.errors
    );
}

/// PostgreSQL's errors about a statement being bound name it as the
/// client does, not by the proxy's name for it.
#[tokio::test]
async fn errors_about_a_statement_name_the_client_s_statement() {
    let proxy = Proxy::start("prep_error_names").await;
    let mut answers = Vec::new();
    for direct in [true, false] {
        let mut raw = client(&proxy, direct).await;
        exchange(
            &mut raw,
            &[parse("two", "select $1::int + $2::int"), sync()],
        )
        .await;
        let r = exchange(
            &mut raw,
            &[bind_text("", "two", &[Some("1")]), execute("", 0), sync()],
        )
        .await;
        answers.push(outcome(&r));
    }
    assert_eq!(
        answers[0], answers[1],
        "PostgreSQL (left) vs queenwire (right)"
    );
    assert!(
        answers[0].contains("statement \\\"two\\\""),
        "{}",
        answers[0]
    );
}

/// A Bind that supplies more or fewer parameters than its statement takes
/// is refused with PostgreSQL's own 08P01 and words, for a dialect
/// statement as for plain SQL; a simple query naming `$1` gets 42P02.
#[tokio::test]
async fn a_wrong_parameter_count_is_refused_as_postgresql_refuses_it() {
    let proxy = Proxy::start("prep_param_count").await;
    let mut direct = client(&proxy, true).await;
    let mut through = client(&proxy, false).await;
    for supplied in [vec![], vec![Some("a"), Some("b")]] {
        let bind = |sql: &str| {
            [
                parse("", sql),
                bind_text("", "", &supplied),
                execute("", 0),
                sync(),
            ]
        };
        let want = outcome(&exchange(&mut direct, &bind("SELECT $1::text")).await);
        assert!(want.contains("08P01"), "{want}");
        for sql in ["SELECT $1::text", "POP FROM jobs GROUP $1", "KV GET s $1"] {
            let got = outcome(&exchange(&mut through, &bind(sql)).await);
            assert_eq!(got, want, "{sql} with {} parameters", supplied.len());
        }
    }
    let want = outcome(&simple(&mut direct, "SELECT $1").await);
    assert!(want.contains("42P02"), "{want}");
    for sql in ["PUSH INTO jobs VALUES ($1)", "KV GET s $1"] {
        assert_eq!(outcome(&simple(&mut through, sql).await), want, "{sql}");
    }
    // The session goes on.
    let after = simple(&mut through, "SELECT 'next'").await;
    assert_eq!(after.rows, vec![vec![Some("next".to_string())]]);
}

/// A Query with an embedded NUL, and a Parse or Bind with bytes after its
/// last field, are refused as PostgreSQL refuses them (08P01 "invalid
/// message format") and none of it runs, a queue statement included.
#[tokio::test]
async fn a_message_with_bytes_after_its_fields_runs_nothing() {
    let proxy = Proxy::start("trailing_bytes").await;
    let with_junk = |m: Message| {
        let mut body = m.body.to_vec();
        body.extend_from_slice(b"JUNK");
        Message::new(m.tag, body)
    };
    let mut outcomes = Vec::new();
    for direct in [true, false] {
        let mut raw = client(&proxy, direct).await;
        let mut got = Vec::new();
        for sql in ["SELECT 1", "PUSH INTO junk_q VALUES ('1')"] {
            let query = queenwire::protocol::frontend::build_query(format!("{sql}\0DROP TABLE x"));
            got.push(outcome(&exchange(&mut raw, &[query]).await));
            let parse = with_junk(parse("", sql));
            got.push(outcome(&exchange(&mut raw, &[parse, sync()]).await));
            let [bind, exec, end] = run("");
            let bound = exchange(&mut raw, &[parse_plain(sql), with_junk(bind), exec, end]).await;
            got.push(outcome(&bound));
        }
        outcomes.push(got);
    }
    // The PUSH never reached the proxy's engine: no such queue directly,
    // and through the proxy it is the same.
    assert_eq!(outcomes[0][..3], outcomes[1][..3]);
    for o in &outcomes[1] {
        assert!(o.contains("08P01 invalid message format"), "{o}");
    }
    let mut raw = client(&proxy, false).await;
    let shown = simple(&mut raw, "SHOW QUEUES").await;
    assert!(
        !format!("{:?}", shown.rows).contains("junk_q"),
        "{:?}",
        shown.rows
    );
}

fn parse_plain(sql: &str) -> Message {
    parse("", sql)
}
