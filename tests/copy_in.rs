//! COPY FROM STDIN over the extended protocol, as libpq's `PQexecParams`
//! sends it (Parse, Bind, Describe, Execute, Sync; then the data,
//! CopyDone or CopyFail, and a Sync of its own), is answered exactly as
//! PostgreSQL answers it; a client that leaves in the middle of the data
//! leaves no backend connection behind.

mod common;

use common::proxy::Proxy;
use common::raw::{bind_text, execute, sync, Raw};
use queenwire::protocol::frontend::{build_describe, build_parse};
use queenwire::protocol::tags::{frontend as tag, Target};
use queenwire::protocol::Message;
use std::time::Duration;

const WITHIN: Duration = Duration::from_secs(20);

/// Messages sent, then the replies read up to and including a tag (or
/// ReadyForQuery).
type Step = (Vec<Message>, u8);

fn copy_data(line: &str) -> Message {
    Message::new(tag::COPY_DATA, bytes::Bytes::from(line.as_bytes().to_vec()))
}

fn copy_done() -> Message {
    queenwire::protocol::empty(tag::COPY_DONE)
}

fn copy_fail(reason: &str) -> Message {
    let mut body = reason.as_bytes().to_vec();
    body.push(0);
    Message::new(tag::COPY_FAIL, bytes::Bytes::from(body))
}

/// What `PQexecParams("copy ct from stdin")` writes.
fn copy_statement() -> Vec<Message> {
    vec![
        build_parse("", "copy ct from stdin", &[]),
        bind_text("", "", &[]),
        build_describe(Target::Portal, ""),
        execute("", 0),
        sync(),
    ]
}

/// The tags (and command tags, SQLSTATEs) the client gets up to and
/// including a message with tag `until`, or up to ReadyForQuery.
async fn read_through(raw: &mut Raw, until: u8, out: &mut Vec<String>) {
    loop {
        let Some(msg) = raw.next_within(WITHIN).await else {
            panic!("the exchange is answered (a hang is a failure); so far {out:?}");
        };
        out.push(match msg.tag {
            b'C' => format!("C {}", msg.reader().cstr().unwrap_or("?")),
            b'E' => format!(
                "E {}",
                queenwire::protocol::SqlError::parse(&msg.body).code()
            ),
            b'Z' => format!("Z {}", msg.body[0] as char),
            t => (t as char).to_string(),
        });
        if msg.tag == until || msg.tag == b'Z' {
            return;
        }
    }
}

/// The replies to each step, then a count of the table.
async fn transcript(raw: &mut Raw, steps: &[Step]) -> Vec<String> {
    let mut out = Vec::new();
    for (messages, until) in steps {
        raw.send(messages).await;
        read_through(raw, *until, &mut out).await;
    }
    let r = raw.simple("SELECT count(*) FROM ct").await;
    out.push(format!("{:?} {:?}", r.completions, r.rows));
    out
}

/// `PQexecParams` of the COPY, then these messages once the server asks
/// for the data, read up to ReadyForQuery.
fn copy_with(data: Vec<Message>) -> Vec<Step> {
    vec![(copy_statement(), b'G'), (data, b'Z')]
}

#[tokio::test]
async fn extended_protocol_copy_from_stdin_is_answered_as_postgresql_answers_it() {
    let proxy = Proxy::start("copy_in_extended").await;
    let setup = proxy.connect_direct().await;
    setup
        .batch_execute("CREATE TABLE ct (a int, b text)")
        .await
        .unwrap();
    let flush = queenwire::protocol::frontend::flush;
    let query = queenwire::protocol::frontend::build_query;
    let cases: Vec<(&str, Vec<Step>)> = vec![
        (
            "rows",
            copy_with(vec![
                copy_data("202\tx\n"),
                copy_data("203\ty\n"),
                copy_done(),
                sync(),
            ]),
        ),
        (
            "fail",
            copy_with(vec![
                copy_data("204\tz\n"),
                copy_fail("client gave up"),
                sync(),
            ]),
        ),
        (
            "bad data",
            copy_with(vec![copy_data("not a number\tx\n"), copy_done(), sync()]),
        ),
        // A Flush during the data is ignored, as the first Sync is.
        (
            "flush during the data",
            copy_with(vec![copy_data("205\tw\n"), flush(), copy_done(), sync()]),
        ),
        // The client asks for the COPY's result before its Sync.
        (
            "flush after CopyDone",
            vec![
                (copy_statement(), b'G'),
                (vec![copy_data("206\tv\n"), copy_done(), flush()], b'C'),
                (vec![sync()], b'Z'),
            ],
        ),
        // In a transaction block, committed after.
        (
            "in a block",
            vec![
                (vec![query("BEGIN")], b'Z'),
                (copy_statement(), b'G'),
                (vec![copy_data("207\tu\n"), copy_done(), sync()], b'Z'),
                (vec![query("COMMIT")], b'Z'),
            ],
        ),
        // Another statement pipelined behind the COPY's Sync.
        (
            "a statement after CopyDone",
            vec![
                (copy_statement(), b'G'),
                (
                    [
                        vec![copy_data("208\tt\n"), copy_done()],
                        common::raw::pipeline(&["SELECT 1"]),
                    ]
                    .concat(),
                    b'Z',
                ),
            ],
        ),
    ];
    let mut answers = Vec::new();
    for direct in [true, false] {
        setup.batch_execute("TRUNCATE ct").await.unwrap();
        let mut raw = if direct {
            Raw::connect_direct(&proxy.direct).await
        } else {
            Raw::connect(proxy.addr).await
        };
        let mut exchanges = Vec::new();
        for (name, steps) in &cases {
            exchanges.push((*name, transcript(&mut raw, steps).await));
        }
        answers.push(exchanges);
    }
    assert_eq!(
        answers[0], answers[1],
        "direct (left) vs through queenwire (right)"
    );
    // The rows of the successful COPYs are committed.
    let n: i64 = setup
        .query_one("SELECT count(*) FROM ct", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 6);
}

/// The backends of the test's database still running `query_like`.
async fn backends_running(direct: &tokio_postgres::Client, query_like: &str) -> i64 {
    direct
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND query ILIKE $1",
            &[&query_like],
        )
        .await
        .unwrap()
        .get(0)
}

/// A client leaves in the middle of the data, after CopyDone without a
/// Sync, or with the Sync sent and nothing read: each time, with a pool of
/// one connection, a new client's `SELECT 1` still gets that connection,
/// and nothing of the abandoned COPY stays running or committed (whether
/// the one completed by its Sync commits depends on whether it did before
/// the client's leaving was noticed).
#[tokio::test]
async fn a_client_gone_during_copy_from_stdin_gives_its_connection_back() {
    let proxy = Proxy::start_with("copy_in_gone", |c| c.pool_size = 1).await;
    let setup = proxy.connect_direct().await;
    setup
        .batch_execute("CREATE TABLE ct (a int, b text)")
        .await
        .unwrap();
    let leavings: [(&str, Vec<Message>, Option<i64>); 3] = [
        ("in the data", vec![copy_data("1\ta\n")], Some(0)),
        (
            "after CopyDone",
            vec![copy_data("2\tb\n"), copy_done()],
            Some(0),
        ),
        (
            "after CopyDone and Sync",
            vec![copy_data("3\tc\n"), copy_done(), sync()],
            None,
        ),
    ];
    for (how, data, committed) in leavings {
        setup.batch_execute("TRUNCATE ct").await.unwrap();
        let mut raw = Raw::connect(proxy.addr).await;
        let mut out = Vec::new();
        raw.send(&copy_statement()).await;
        read_through(&mut raw, b'G', &mut out).await;
        raw.send(&data).await;
        drop(raw);
        let select_1 = async {
            let client = proxy.connect().await;
            client
                .query_one("SELECT 1", &[])
                .await
                .unwrap()
                .get::<_, i32>(0)
        };
        let one = tokio::time::timeout(Duration::from_secs(10), select_1)
            .await
            .unwrap_or_else(|_| panic!("{how}: a new client's SELECT 1 waited for good"));
        assert_eq!(one, 1);
        if let Some(committed) = committed {
            let n: i64 = setup
                .query_one("SELECT count(*) FROM ct", &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(n, committed, "{how}");
        }
        assert_eq!(backends_running(&setup, "copy ct%").await, 0, "{how}");
    }
}
