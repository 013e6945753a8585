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
