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
