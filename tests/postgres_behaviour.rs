//! Plain SQL behaves as on PostgreSQL itself in the places a pooling proxy
//! most easily gets wrong: the fast-path protocol, statements the dialect
//! must not capture, notifications to idle listeners, pipelines after an
//! error, client encodings.

mod common;

use common::proxy::Proxy;
use std::time::Duration;

/// A simple-query message of `sql`'s bytes as they are (not UTF-8 ones
/// included).
fn query(sql: &[u8]) -> queenwire::protocol::Message {
    let mut body = sql.to_vec();
    body.push(0);
    queenwire::protocol::Message::new(b'Q', body)
}

/// psql against the proxy, failing the test instead of hanging it.
async fn psql(proxy: &Proxy, args: &[&str]) -> (bool, String, String) {
    tokio::time::timeout(Duration::from_secs(60), proxy.psql(args))
        .await
        .expect("psql finished within 60 s (a hang is a failure)")
}

#[tokio::test]
async fn large_objects_over_the_fastpath_protocol_work_with_psql() {
    let proxy = Proxy::start("fastpath").await;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bin");
    let output = dir.path().join("out.bin");
    let body: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&input, &body).unwrap();
    let script = format!(
        "\\lo_import '{}'\n\
         \\lo_export :LASTOID '{}'\n\
         SELECT count(*) > 0 FROM pg_largeobject_metadata WHERE oid = :LASTOID;\n\
         \\lo_unlink :LASTOID\n\
         SELECT count(*) FROM pg_largeobject_metadata WHERE oid = :LASTOID;\n\
         SELECT 'after';\n",
        input.display(),
        output.display()
    );
    let file = dir.path().join("lo.sql");
    std::fs::write(&file, script).unwrap();
    let (ok, out, err) = psql(&proxy, &["-At", "-f", file.to_str().unwrap()]).await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with("lo_")).collect();
    assert_eq!(lines, ["t", "0", "after"], "{out}");
    assert_eq!(std::fs::read(&output).unwrap(), body);
}

/// A fast-path call of `set_config` (or any function but the large-object
/// ones) keeps its state with its session: with one pooled connection, the
/// next client finds PostgreSQL's default `search_path`, not the one the
/// call set, and the caller keeps its own.
#[tokio::test]
async fn a_fast_path_call_s_session_state_stays_with_its_session() {
    use bytes::{BufMut, BytesMut};
    use queenwire::protocol::Message;
    let proxy = Proxy::start_with("fastpath_pins", |c| c.pool_size = 1).await;
    let mut a = common::raw::Raw::connect(proxy.addr).await;
    // FunctionCall: set_config (oid 2078), three text arguments, text result.
    let mut body = BytesMut::new();
    body.put_u32(2078);
    body.put_i16(1);
    body.put_i16(0);
    body.put_i16(3);
    for arg in ["search_path", "fp_leaked", "false"] {
        body.put_i32(arg.len() as i32);
        body.put_slice(arg.as_bytes());
    }
    body.put_i16(0);
    a.send(&[Message::new(b'F', body.freeze())]).await;
    let r = a.read_until_ready().await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(
        a.simple("SHOW search_path").await.rows,
        [[Some("fp_leaked".to_string())]]
    );
    drop(a);
    let b = proxy.connect().await;
    let shown: String = b.query_one("SHOW search_path", &[]).await.unwrap().get(0);
    assert_eq!(shown, "\"$user\", public");
}

#[tokio::test]
async fn postgresql_s_drop_group_reaches_postgresql() {
    let proxy = Proxy::start("drop_group").await;
    let (ok, out, err) = psql(
        &proxy,
        &[
            "-At",
            "-c",
            "CREATE GROUP qw_staff",
            "-c",
            "SELECT count(*) FROM pg_roles WHERE rolname = 'qw_staff'",
            "-c",
            "DROP GROUP qw_staff",
            "-c",
            "DROP GROUP IF EXISTS qw_nobody, qw_staff",
            "-c",
            "SELECT count(*) FROM pg_roles WHERE rolname = 'qw_staff'",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "CREATE ROLE\n1\nDROP ROLE\nDROP ROLE\n0\n", "{err}");
    // PostgreSQL's own notices for the roles that did not exist.
    assert!(err.contains("qw_nobody"), "{err}");
    // The dialect's DROP GROUP still works.
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE QUEUE dg_orders")
        .await
        .unwrap();
    let err = client
        .batch_execute("DROP GROUP billing ON dg_orders")
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::UNDEFINED_OBJECT)
    );
    assert!(format!("{err:?}").contains("consumer group"), "{err:?}");
}

#[tokio::test]
async fn an_unterminated_quoted_name_gets_postgresql_s_syntax_error_and_the_session_goes_on() {
    let proxy = Proxy::start("deallocate_unterminated").await;
    let client = proxy.connect().await;
    for sql in [
        "DEALLOCATE \"",
        "DEALLOCATE PREPARE \"abc",
        // An unterminated name ending inside a two-byte character.
        "SET\"<,receiLI\u{0572}",
        "RESET \"abc\u{0572}",
    ] {
        let err = client.simple_query(sql).await.unwrap_err();
        assert_eq!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::SYNTAX_ERROR),
            "{sql}: {err:?}"
        );
    }
    let one: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

/// One pipeline of every extended-protocol message kind, named and
/// unnamed, with errors in the middle and several Syncs, as libpq's
/// pipeline mode sends it: everything written at once, then read.
fn pipeline_with_errors() -> (Vec<queenwire::protocol::Message>, usize) {
    use common::raw::{bind_text, execute, sync};
    use queenwire::protocol::frontend::{build_close, build_describe, build_parse, flush};
    use queenwire::protocol::tags::Target;
    let messages = vec![
        build_parse("s_ins", "INSERT INTO pp VALUES ($1)", &[]),
        bind_text("", "s_ins", &[Some("1")]),
        execute("", 0),
        bind_text("p1", "s_ins", &[Some("1")]),
        build_describe(Target::Portal, "p1"),
        // A unique violation: everything up to the Sync is skipped.
        execute("p1", 0),
        build_parse("", "SELECT 2", &[]),
        bind_text("", "", &[]),
        build_describe(Target::Statement, ""),
        execute("", 0),
        build_close(Target::Statement, "s_ins"),
        flush(),
        sync(),
        build_parse("", "SELECT $1::int", &[]),
        bind_text("", "", &[Some("5")]),
        build_describe(Target::Portal, ""),
        execute("", 0),
        sync(),
        // A syntax error at Parse.
        build_parse("s_bad", "SELEC 1", &[]),
        bind_text("", "s_bad", &[]),
        execute("", 0),
        sync(),
        // The skipped Close left s_ins in place, as on PostgreSQL.
        bind_text("", "s_ins", &[Some("2")]),
        execute("", 0),
        build_close(Target::Portal, ""),
        sync(),
        build_describe(Target::Statement, "s_missing"),
        sync(),
        build_parse("", "SELECT 1/0", &[]),
        bind_text("", "", &[]),
        execute("", 0),
        flush(),
        sync(),
    ];
    (messages, 6)
}

#[tokio::test]
async fn a_pipeline_with_errors_is_answered_exactly_as_postgresql_answers_it() {
    use common::raw::Raw;
    let proxy = Proxy::start("pipeline_errors").await;
    let setup = proxy.connect_direct().await;
    setup
        .batch_execute("CREATE TABLE pp (id int PRIMARY KEY)")
        .await
        .unwrap();
    let (messages, syncs) = pipeline_with_errors();
    let mut answers = Vec::new();
    for direct in [true, false] {
        setup.batch_execute("TRUNCATE pp").await.unwrap();
        let mut raw = if direct {
            Raw::connect_direct(&proxy.direct).await
        } else {
            Raw::connect(proxy.addr).await
        };
        raw.send(&messages).await;
        let mut exchanges = Vec::new();
        for _ in 0..syncs {
            let r = tokio::time::timeout(Duration::from_secs(20), raw.read_until_ready())
                .await
                .expect("every Sync is answered (a hang is a failure)");
            let codes: Vec<String> = r.errors.iter().map(|e| e.code().to_string()).collect();
            exchanges.push((
                String::from_utf8_lossy(&r.tags).into_owned(),
                codes,
                r.status,
            ));
        }
        // The session goes on.
        let r = raw.simple("SELECT count(*) FROM pp").await;
        exchanges.push((
            String::from_utf8_lossy(&r.tags).into_owned(),
            vec![],
            r.status,
        ));
        answers.push(exchanges);
    }
    assert_eq!(
        answers[0], answers[1],
        "direct (left) vs through queenwire (right)"
    );
    // And the effects are PostgreSQL's: the first group rolled back, the
    // statement its skipped Close left in place inserted 2.
    let rows = setup
        .query("SELECT id FROM pp ORDER BY id", &[])
        .await
        .unwrap();
    let ids: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(ids, [2]);
}

/// How a libpq pipeline of INSERTs through one prepared statement
/// (`PQsendQueryPrepared`) ending in `PQsendQueryParams("commit")` is
/// shaped.
#[derive(Debug, Clone, Copy)]
struct InsertPipeline {
    /// Prepared (`PQsendPrepare`) in a pipeline of its own before, so the
    /// proxy may parse it again on another connection; else in the same
    /// pipeline.
    prepared_before: bool,
    named: bool,
    begin: Begin,
    /// `INSERT … RETURNING` (results with rows).
    returning: bool,
    /// `PQsendFlushRequest` after each INSERT.
    flush_each: bool,
}

#[derive(Debug, Clone, Copy)]
enum Begin {
    None,
    /// `PQsendQueryParams("BEGIN")` first in the pipeline.
    InPipeline,
    /// `PQexec("BEGIN")` before it (the simple protocol).
    Simple,
}

impl InsertPipeline {
    /// The exchanges the client sends, each answered up to ReadyForQuery:
    /// what libpq writes for each call, as it writes it.
    fn exchanges(&self) -> Vec<Vec<queenwire::protocol::Message>> {
        use common::raw::{bind_text, execute, sync};
        use queenwire::protocol::frontend::{build_describe, build_parse, build_query, flush};
        use queenwire::protocol::tags::Target;
        let name = if self.named { "ins" } else { "" };
        let sql = if self.returning {
            "insert into pipe_ins values ($1) returning id"
        } else {
            "insert into pipe_ins values ($1)"
        };
        let query_params = |sql: &str| {
            vec![
                build_parse("", sql, &[]),
                bind_text("", "", &[]),
                build_describe(Target::Portal, ""),
                execute("", 0),
            ]
        };
        let mut exchanges = Vec::new();
        if let Begin::Simple = self.begin {
            exchanges.push(vec![build_query("BEGIN")]);
        }
        let mut pipeline = Vec::new();
        if self.prepared_before {
            exchanges.push(vec![build_parse(name, sql, &[]), sync()]);
        }
        if let Begin::InPipeline = self.begin {
            pipeline.extend(query_params("BEGIN"));
        }
        if !self.prepared_before {
            pipeline.push(build_parse(name, sql, &[]));
        }
        for id in ["1", "2", "3", "4", "5"] {
            pipeline.push(bind_text("", name, &[Some(id)]));
            pipeline.push(build_describe(Target::Portal, ""));
            pipeline.push(execute("", 0));
            if self.flush_each {
                pipeline.push(flush());
            }
        }
        pipeline.extend(query_params("commit"));
        pipeline.push(sync());
        exchanges.push(pipeline);
        // The session goes on, out of the block a failed one left.
        exchanges.push(vec![build_query("ROLLBACK")]);
        exchanges.push(vec![build_query(
            "SELECT string_agg(id::text, ',' ORDER BY id) FROM pipe_ins",
        )]);
        exchanges
    }
}

/// Each exchange's replies (tags, SQLSTATEs, rows, status), one line each.
/// Between the exchanges `between` runs (another client taking a
/// connection, so that the proxy lands this session on another one).
async fn transcript(
    raw: &mut common::raw::Raw,
    exchanges: &[Vec<queenwire::protocol::Message>],
    between: &tokio_postgres::Client,
) -> Vec<String> {
    let mut out = Vec::new();
    for messages in exchanges {
        raw.send(messages).await;
        let r = tokio::time::timeout(Duration::from_secs(20), raw.read_until_ready())
            .await
            .expect("every Sync is answered (a hang is a failure)");
        let codes: Vec<String> = r.errors.iter().map(|e| e.code().to_string()).collect();
        out.push(format!(
            "{} errors {codes:?} rows {:?} status {}",
            String::from_utf8_lossy(&r.tags),
            r.rows,
            r.status as char
        ));
        between
            .batch_execute("COMMIT; BEGIN; SELECT 1")
            .await
            .unwrap();
    }
    between.batch_execute("COMMIT").await.unwrap();
    out
}

/// psycopg 3 / libpq pipeline mode: five INSERTs through one prepared
/// statement, the third a unique violation, then `commit` and a Sync.
/// PostgreSQL answers the first two, the error, skips the rest up to the
/// Sync; so does queenwire in either pool mode, whether the statement was
/// prepared in the pipeline or before it (and parsed again on another
/// connection), named or unnamed, in a block or not.
#[tokio::test]
async fn a_libpq_pipeline_of_prepared_inserts_with_a_violation_is_answered_as_postgresql_answers_it(
) {
    use common::raw::Raw;
    let proxy = Proxy::start_with("pipeline_inserts", |c| c.pool_size = 3).await;
    let session_mode = Proxy::start_on(proxy.direct.clone(), |c| {
        c.pool_size = 3;
        c.pool_mode = queenwire::frontend::PoolMode::Session;
    })
    .await;
    let setup = proxy.connect_direct().await;
    setup
        .batch_execute("CREATE TABLE pipe_ins (id int PRIMARY KEY)")
        .await
        .unwrap();
    let direct_holder = proxy.connect_direct().await;
    let holder = proxy.connect().await;
    let session_holder = session_mode.connect().await;
    let mut shapes = Vec::new();
    for prepared_before in [false, true] {
        for named in [true, false] {
            for begin in [Begin::None, Begin::InPipeline, Begin::Simple] {
                for returning in [false, true] {
                    for flush_each in [false, true] {
                        shapes.push(InsertPipeline {
                            prepared_before,
                            named,
                            begin,
                            returning,
                            flush_each,
                        });
                    }
                }
            }
        }
    }
    for shape in shapes {
        let exchanges = shape.exchanges();
        let mut answers = Vec::new();
        for target in 0..3 {
            setup
                .batch_execute("TRUNCATE pipe_ins; INSERT INTO pipe_ins VALUES (3)")
                .await
                .unwrap();
            let (mut raw, between) = match target {
                0 => (Raw::connect_direct(&proxy.direct).await, &direct_holder),
                1 => (Raw::connect(proxy.addr).await, &holder),
                _ => (Raw::connect(session_mode.addr).await, &session_holder),
            };
            answers.push(transcript(&mut raw, &exchanges, between).await);
        }
        assert_eq!(
            answers[0], answers[1],
            "{shape:?}: PostgreSQL (left) vs queenwire (right)"
        );
        assert_eq!(
            answers[0], answers[2],
            "{shape:?}: PostgreSQL (left) vs queenwire in session mode (right)"
        );
        // An unnamed statement prepared before is replaced by the
        // pipeline's BEGIN: the INSERTs fail at their Bind instead.
        let replaced = !shape.named && shape.prepared_before;
        let code = match shape.begin {
            Begin::InPipeline if replaced => "08P01",
            _ => "23505",
        };
        let pipeline = &answers[0][answers[0].len() - 3];
        assert!(pipeline.contains(code), "{shape:?}: {pipeline}");
        let rows = &answers[0][answers[0].len() - 1];
        assert!(rows.contains("[[Some(\"3\")]]"), "{shape:?}: {rows}");
    }
}

/// libpq's `PQdescribePrepared` and `PQexecPrepared` take a statement of
/// SQL `PREPARE` too: over the protocol it is described and bound as on
/// PostgreSQL (the `PREPARE` pinned the session to the connection that
/// has it); an unknown name gets PostgreSQL's 26000.
#[tokio::test]
async fn a_statement_of_sql_prepare_is_bound_over_the_protocol() {
    use common::raw::{bind_text, execute, sync, Raw};
    use queenwire::protocol::frontend::build_describe;
    use queenwire::protocol::tags::Target;
    let proxy = Proxy::start_with("sql_prepare_bind", |c| c.pool_size = 2).await;
    let pipeline = [
        build_describe(Target::Statement, "plus_one"),
        bind_text("", "plus_one", &[Some("41")]),
        execute("", 0),
        sync(),
        bind_text("", "never_prepared", &[]),
        execute("", 0),
        sync(),
    ];
    let mut answers = Vec::new();
    for direct in [true, false] {
        let mut raw = if direct {
            Raw::connect_direct(&proxy.direct).await
        } else {
            Raw::connect(proxy.addr).await
        };
        let mut out = Vec::new();
        let r = raw.simple("PREPARE plus_one(int) AS SELECT $1 + 1").await;
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        raw.send(&pipeline).await;
        for _ in 0..2 {
            let r = tokio::time::timeout(Duration::from_secs(20), raw.read_until_ready())
                .await
                .expect("every Sync is answered");
            let codes: Vec<String> = r.errors.iter().map(|e| e.code().to_string()).collect();
            out.push(format!(
                "{} {codes:?} {:?}",
                String::from_utf8_lossy(&r.tags),
                r.rows
            ));
        }
        answers.push(out);
    }
    assert_eq!(
        answers[0], answers[1],
        "PostgreSQL (left) vs queenwire (right)"
    );
    assert!(answers[0][0].contains("Some(\"42\")"), "{:?}", answers[0]);
    assert!(answers[0][1].contains("26000"), "{:?}", answers[0]);
}

#[tokio::test]
async fn temp_objects_are_visible_to_their_session_alone() {
    // Two backend connections: every other session lands on the one the
    // creating session used, if it was given back.
    let proxy = Proxy::start_with("temp_isolation", |c| c.pool_size = 2).await;
    let creations = [
        (
            "CREATE TABLE pg_temp.t_qualified (x int)",
            "SELECT count(*) FROM pg_temp.t_qualified",
        ),
        (
            "CREATE TEMP TABLE t_keyword (x int)",
            "SELECT count(*) FROM t_keyword",
        ),
        (
            "CREATE TEMPORARY SEQUENCE s_temp",
            "SELECT nextval('s_temp')::int",
        ),
        (
            "CREATE TEMP VIEW v_temp AS SELECT 1 AS one",
            "SELECT one FROM v_temp",
        ),
        (
            "SELECT 1 AS x INTO TEMP t_into",
            "SELECT count(*) FROM t_into",
        ),
        (
            "CREATE FUNCTION pg_temp.f_temp() RETURNS int LANGUAGE sql AS 'SELECT 7'",
            "SELECT pg_temp.f_temp()",
        ),
        (
            "DO $$ BEGIN EXECUTE 'CREATE TEMP TABLE t_do (x int)'; END $$",
            "SELECT count(*) FROM t_do",
        ),
    ];
    for (create, check) in creations {
        let owner = proxy.connect().await;
        owner
            .batch_execute(create)
            .await
            .unwrap_or_else(|e| panic!("{create}: {e:?}"));
        // Other clients of the same role, one after another, never see it.
        for _ in 0..4 {
            let other = proxy.connect().await;
            let seen = other.simple_query(check).await;
            assert!(
                seen.is_err(),
                "another session saw the temp object of: {create}"
            );
            // Nor does a temp object of the other's own live on.
            other.batch_execute("SELECT 1").await.unwrap();
        }
        // Its own session still sees it, statement after statement.
        for _ in 0..3 {
            owner.simple_query(check).await.unwrap_or_else(|e| {
                panic!("the creating session lost its temp object ({create}): {e:?}")
            });
        }
    }
}

/// A startup `search_path` that lists `pg_temp` first makes a plain
/// `CREATE TABLE` a temp table, text without `TEMP`: such a session keeps
/// its connection, so the table is its alone and stays its own.
#[tokio::test]
async fn a_startup_search_path_with_pg_temp_keeps_temp_tables_with_their_session() {
    let proxy = Proxy::start_with("temp_by_path", |c| c.pool_size = 2).await;
    let mut cfg = proxy.client_config();
    cfg.options("-c search_path=pg_temp,public");
    let owner = common::proxy::connect(&cfg).await;
    owner
        .batch_execute(
            "CREATE TABLE secret_notes (t text); INSERT INTO secret_notes VALUES ('mine')",
        )
        .await
        .unwrap();
    for _ in 0..4 {
        let other = proxy.connect().await;
        let seen = other.simple_query("SELECT t FROM secret_notes").await;
        assert!(seen.is_err(), "another session read the temp table");
        for _ in 0..2 {
            let n: i64 = owner
                .query_one("SELECT count(*) FROM secret_notes", &[])
                .await
                .expect("its own session still has the table")
                .get(0);
            assert_eq!(n, 1);
        }
    }
}

/// RESET of a startup role or custom setting goes back to the startup
/// value, as on PostgreSQL (not to the pooled connection's own).
#[tokio::test]
async fn reset_returns_to_a_startup_role_and_custom_setting() {
    let proxy = Proxy::start("reset_startup_role").await;
    let direct = proxy.connect_direct().await;
    direct
        .batch_execute("DROP ROLE IF EXISTS qw_startup_reader; CREATE ROLE qw_startup_reader")
        .await
        .unwrap();
    let script = "SET ROLE NONE; SET my_app.tenant = 'other'; \
                  RESET ROLE; RESET my_app.tenant";
    let check = "SELECT current_user::text, current_setting('my_app.tenant')";
    let mut seen = Vec::new();
    for mut cfg in [proxy.direct.clone(), proxy.client_config()] {
        cfg.options("-c role=qw_startup_reader -c my_app.tenant=t1");
        let client = common::proxy::connect(&cfg).await;
        client.batch_execute(script).await.unwrap();
        let row = client.query_one(check, &[]).await.unwrap();
        seen.push((row.get::<_, String>(0), row.get::<_, String>(1)));
    }
    assert_eq!(seen[0], ("qw_startup_reader".to_string(), "t1".to_string()));
    assert_eq!(seen[1], seen[0], "through queenwire, then directly");
}

/// A connection pool's reset on release (asyncpg's `RESET ALL` among
/// others) keeps its session poolable: sessions that ran it hold no
/// backend connection while idle, and still see their startup settings.
#[tokio::test]
async fn a_pool_s_reset_on_release_does_not_pin_the_session() {
    let proxy = Proxy::start_with("reset_unpinned", |c| {
        c.pool_size = 1;
        c.pool_wait_timeout = Some(std::time::Duration::from_secs(5));
    })
    .await;
    let mut cfg = proxy.client_config();
    cfg.application_name("pooled-app");
    let mut idle = Vec::new();
    for reset in [
        "SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;",
        "RESET application_name",
        "SET application_name TO DEFAULT",
    ] {
        let a = common::proxy::connect(&cfg).await;
        a.batch_execute(reset).await.unwrap();
        let name: String = a
            .query_one("SHOW application_name", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(name, "pooled-app", "{reset}");
        idle.push(a);
        // With one backend connection, another client runs only if the
        // idle session gave it back.
        let b = proxy.connect().await;
        let one: i32 = b
            .query_one("SELECT 1", &[])
            .await
            .unwrap_or_else(|e| panic!("after {reset}: {e}"))
            .get(0);
        assert_eq!(one, 1);
    }
}

#[tokio::test]
async fn reset_returns_to_the_client_s_startup_settings() {
    let proxy = Proxy::start("startup_defaults").await;
    let show = "SHOW DateStyle";
    let (ok, out, err) = proxy
        .psql_env(
            &[
                "-At",
                "-c",
                show,
                "-c",
                "SET DateStyle = 'German'",
                "-c",
                show,
                "-c",
                "RESET DateStyle",
                "-c",
                show,
                "-c",
                "SET DateStyle TO 'Postgres'",
                "-c",
                "RESET ALL",
                "-c",
                show,
                "-c",
                "SET DateStyle = 'German'",
                "-c",
                "SET DateStyle TO DEFAULT",
                "-c",
                show,
                "-c",
                "SHOW TimeZone",
                "-c",
                "DISCARD ALL",
                "-c",
                show,
                "-c",
                // Set again after the reset in the same exchange: kept.
                "RESET ALL; SET DateStyle = 'German'; SELECT 1",
                "-c",
                show,
            ],
            &[("PGOPTIONS", "-c DateStyle=SQL,DMY -c TimeZone=Asia/Tokyo")],
        )
        .await;
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "SQL, DMY\nSET\nGerman, DMY\nRESET\nSQL, DMY\nSET\nRESET\nSQL, DMY\nSET\nSET\nSQL, DMY\nAsia/Tokyo\nDISCARD ALL\nSQL, DMY\nRESET\nSET\n1\nGerman, DMY\n",
        "{err}"
    );

    // The same through the extended protocol, with RESET inside a block.
    let mut cfg = proxy.client_config();
    cfg.options("-c DateStyle=SQL,DMY");
    let client = common::proxy::connect(&cfg).await;
    client
        .execute("SET DateStyle = 'German'", &[])
        .await
        .unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    client.execute("RESET DateStyle", &[]).await.unwrap();
    let row = client.query_one(show, &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "SQL, DMY");
    client.batch_execute("ROLLBACK").await.unwrap();
    let row = client.query_one(show, &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "German, DMY");

    // A reset PostgreSQL refused or rolled back resets nothing: DISCARD
    // ALL in a block, RESET ALL in an exchange an error ends.
    for refused in [
        "BEGIN; DISCARD ALL",
        "SELECT 1; DISCARD ALL",
        "RESET ALL; SELECT 1/0",
        "SELECT 1/0; RESET ALL",
    ] {
        assert!(client.batch_execute(refused).await.is_err(), "{refused}");
        client.batch_execute("ROLLBACK").await.ok();
        let row = client.query_one(show, &[]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), "German, DMY", "{refused}");
    }
}

#[tokio::test]
async fn client_encodings_other_than_utf8_keep_the_session() {
    let proxy = Proxy::start("encodings").await;
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_string()
    };
    // LATIN9 bytes: é is 0xE9, € is 0xA4.
    let plain = file(
        "plain.sql",
        b"SELECT 'caf\xe9 \xa4' AS t;\nSELECT length('caf\xe9');\nCREATE QUEUE enc_q;\nPUSH INTO enc_q VALUES ('{\"a\":\"plain\"}');\nSELECT 'after';\n",
    );
    let latin9 = [("PGCLIENTENCODING", "LATIN9")];
    let (ok, out, err) = proxy.psql_env(&["-At", "-f", &plain], &latin9).await;
    assert!(ok, "{err}");
    assert!(out.contains("after"), "{out}");
    // A queenwire statement with LATIN9 text it cannot read: a clear
    // error, and the session goes on.
    let unreadable = file(
        "unreadable.sql",
        b"\\set ON_ERROR_STOP 0\nPUSH INTO enc_q VALUES ('{\"a\":\"caf\xe9\"}');\nSELECT 'goes on';\n",
    );
    let (_, out, err) = proxy.psql_env(&["-At", "-f", &unreadable], &latin9).await;
    assert!(err.contains("client encoding LATIN9"), "{err}");
    assert!(out.contains("goes on"), "{out}");

    // LATIN1 is read exactly, both ways.
    let pushed = file(
        "latin1.sql",
        b"PUSH INTO enc_q VALUES ('{\"a\":\"caf\xe9\"}');\nPOP FROM enc_q LIMIT 5 AUTO ACK;\n",
    );
    let out = tokio::task::spawn_blocking({
        let port = proxy.addr.port().to_string();
        move || {
            std::process::Command::new("psql")
                .args(["-h", "127.0.0.1", "-p", &port, "-U", "tester", "-X", "-At"])
                .args(["-v", "ON_ERROR_STOP=1", "-f", &pushed])
                .env("PGCLIENTENCODING", "LATIN1")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = out.stdout;
    // The popped payload comes back in LATIN1: é as one byte.
    assert!(
        stdout.windows(4).any(|w| w == b"caf\xe9"),
        "{}",
        String::from_utf8_lossy(&stdout)
    );
}

#[tokio::test]
async fn an_idle_listener_gets_notifications_at_once_with_its_own_pid() {
    use common::raw::Raw;
    let proxy = Proxy::start("listen_idle").await;
    let mut listener = Raw::connect(proxy.addr).await;
    let r = listener.simple("LISTEN qw_jobs").await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    // Another client notifies; the listener sends nothing and waits on its
    // socket, as psycopg's notifies() and JDBC's getNotifications do.
    let other = proxy.connect().await;
    other
        .batch_execute("NOTIFY qw_jobs, 'from another'")
        .await
        .unwrap();
    let msg = listener
        .next_within(Duration::from_secs(10))
        .await
        .expect("the notification reached the idle listener");
    assert_eq!(msg.tag, b'A');
    let mut r = msg.reader();
    let pid = r.i32().unwrap();
    assert_eq!(r.cstr().unwrap(), "qw_jobs");
    assert_eq!(r.cstr().unwrap(), "from another");
    assert_ne!(pid, listener.backend_pid, "another session's notification");
    // Its own notification carries the pid it was given. (Through the
    // shared listening connection it comes just after the NOTIFY's
    // ReadyForQuery, not before it as from PostgreSQL.)
    let r = listener.simple("NOTIFY qw_jobs, 'mine'").await;
    let own = match r.messages.iter().find(|m| m.tag == b'A') {
        Some(m) => m.clone(),
        None => listener
            .next_within(Duration::from_secs(10))
            .await
            .expect("own notification"),
    };
    assert_eq!(own.tag, b'A');
    assert_eq!(own.reader().i32().unwrap(), listener.backend_pid);
}

/// A flood of notifications never holds back a listener's own queries:
/// waiting between two messages, the session reads the client first, and
/// delivers notifications while it is idle, as PostgreSQL does.
#[tokio::test]
async fn a_flood_of_notifications_does_not_hold_back_the_listener_s_queries() {
    use common::raw::Raw;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let proxy = Proxy::start("listen_flood").await;
    let mut listener = Raw::connect(proxy.addr).await;
    let r = listener.simple("LISTEN flood").await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    for _ in 0..2 {
        let client = proxy.connect().await;
        let stop = stop.clone();
        senders.push(tokio::spawn(async move {
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                client
                    .batch_execute("SELECT pg_notify('flood', 'x') FROM generate_series(1, 5000)")
                    .await
                    .unwrap();
                sent += 5000;
            }
            sent
        }));
    }
    // The flood is flowing before the listener asks anything.
    listener
        .next_within(Duration::from_secs(10))
        .await
        .expect("notifications arrive");
    let mut notified = 0usize;
    for i in 0..50 {
        let r = tokio::time::timeout(
            Duration::from_secs(20),
            listener.simple(&format!("SELECT {i}")),
        )
        .await
        .expect("the listener's query was answered during the flood");
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        notified += r.messages.iter().filter(|m| m.tag == b'A').count();
    }
    stop.store(true, Ordering::Relaxed);
    let mut sent = 0;
    for s in senders {
        sent += s.await.unwrap();
    }
    assert!(sent >= 5000 && notified > 0, "sent {sent}, seen {notified}");
}

/// LISTEN costs no backend connection: with a pool of two, ten idle
/// listeners and clients running SQL coexist, every listener gets every
/// notification, the sender's pid is the proxy pid of the sending session,
/// UNLISTEN stops delivery, a notification sent while a listener's
/// transaction block is open arrives after it ends, and a statement
/// PostgreSQL refuses gets PostgreSQL's error.
#[tokio::test]
async fn listeners_share_one_listening_connection() {
    use common::raw::Raw;
    let proxy = Proxy::start_with("listen_shared", |c| c.pool_size = 2).await;
    let mut listeners = Vec::new();
    for _ in 0..10 {
        let mut l = Raw::connect(proxy.addr).await;
        let r = l.simple("LISTEN \"Shared Jobs\"").await;
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        listeners.push(l);
    }
    // The pooled connections are free: a client's SQL runs.
    let mut sender = Raw::connect(proxy.addr).await;
    let r = sender
        .simple("SELECT pg_notify('Shared Jobs', 'one')")
        .await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    for l in listeners.iter_mut() {
        let msg = l
            .next_within(Duration::from_secs(10))
            .await
            .expect("every listener is notified");
        let mut r = msg.reader();
        assert_eq!(
            r.i32().unwrap(),
            sender.backend_pid,
            "the sending session's pid"
        );
        assert_eq!(r.cstr().unwrap(), "Shared Jobs");
        assert_eq!(r.cstr().unwrap(), "one");
    }
    // UNLISTEN: the first listener hears nothing more; a listener inside a
    // transaction block gets the notification only after COMMIT.
    let r = listeners[0].simple("UNLISTEN *").await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let r = listeners[1].simple("BEGIN").await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    sender.simple("NOTIFY \"Shared Jobs\", 'two'").await;
    let got = listeners[2]
        .next_within(Duration::from_secs(10))
        .await
        .expect("an idle listener is notified");
    assert_eq!(got.tag, b'A');
    assert!(
        listeners[0]
            .next_within(Duration::from_millis(300))
            .await
            .is_none(),
        "nothing after UNLISTEN"
    );
    let early = listeners[1].next_within(Duration::from_millis(300)).await;
    assert!(
        early.is_none(),
        "nothing while the block is open: {:?}",
        early.map(|m| (m.tag as char, String::from_utf8_lossy(&m.body).to_string()))
    );
    let r = listeners[1].simple("COMMIT").await;
    let after = match r.messages.iter().find(|m| m.tag == b'A') {
        Some(m) => m.clone(),
        None => listeners[1]
            .next_within(Duration::from_secs(10))
            .await
            .expect("delivered once the block ended"),
    };
    let mut rd = after.reader();
    rd.i32().unwrap();
    rd.cstr().unwrap();
    assert_eq!(rd.cstr().unwrap(), "two");
    // PostgreSQL's own verdict on a bad statement.
    let r = listeners[3].simple("LISTEN select").await;
    assert_eq!(r.errors.len(), 1, "{:?}", r.messages);
    assert_eq!(r.errors[0].code(), "42601");
    // The listeners still hold no connection: a pooled connection serves
    // a client statement at once.
    let client = proxy.connect().await;
    let one: i32 = tokio::time::timeout(
        Duration::from_secs(10),
        client.query_one("SELECT 1::int4", &[]),
    )
    .await
    .expect("not blocked by listeners")
    .unwrap()
    .get(0);
    assert_eq!(one, 1);
}

#[tokio::test]
async fn background_work_never_runs_on_a_client_s_connection() {
    let proxy = Proxy::start_with("own_state", |c| c.pool_size = 1).await;
    let client = proxy.connect().await;
    client
        .batch_execute("SCHEDULE INTO own_q KEY 'k1' AFTER '0s' VALUES ('{\"n\":1}')")
        .await
        .unwrap();
    // The timer fires on connections of its own.
    let fired = client
        .simple_query("POP FROM own_q LIMIT 1 WAIT 10 AUTO ACK")
        .await
        .unwrap();
    assert!(
        fired
            .iter()
            .any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_))),
        "the timer fired"
    );
    // The one client-visible connection shows none of the fire loop's
    // statements, and a client may prepare their names itself.
    use queenwire::calls::timers::{CLAIM_DUE, DELETE_FIRED, POSTPONE};
    let background = [CLAIM_DUE.name, DELETE_FIRED.name, POSTPONE.name];
    let rows = client
        .query("SELECT name FROM pg_prepared_statements", &[])
        .await
        .unwrap();
    let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert!(
        names.iter().all(|n| !background.contains(&n.as_str())),
        "background statements on a client's connection: {names:?}"
    );
    for name in background {
        client
            .batch_execute(&format!("PREPARE {name} AS SELECT 1; DEALLOCATE {name}"))
            .await
            .unwrap_or_else(|e| panic!("PREPARE {name}: {e:?}"));
    }
    // Dialect statements outside a transaction run on the engine's own
    // connections too: none of queenwire's statements is left on the
    // client's, and the client may use their names.
    client
        .batch_execute("PUSH INTO own_q VALUES ('{\"n\":2}')")
        .await
        .unwrap();
    client
        .simple_query("POP FROM own_q LIMIT 1 AUTO ACK")
        .await
        .unwrap();
    let rows = client
        .query("SELECT name FROM pg_prepared_statements", &[])
        .await
        .unwrap();
    let left: Vec<String> = rows
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|n| queenwire::calls::ALL.iter().any(|s| s.name == n))
        .collect();
    assert!(
        left.is_empty(),
        "queenwire statements on a client's connection: {left:?}"
    );
    for spec in queenwire::calls::ALL {
        let name = spec.name;
        client
            .batch_execute(&format!("PREPARE {name} AS SELECT 1; DEALLOCATE {name}"))
            .await
            .unwrap_or_else(|e| panic!("PREPARE {name}: {e:?}"));
    }

    // Inside a transaction block the dialect runs on the client's own
    // connection: still nothing of queenwire's is left under a name there,
    // and a client statement prepared before (named, and the unnamed one)
    // still runs after.
    use queenwire::calls::acks::{ACK, ACK_RUNS};
    use queenwire::calls::queues::{POP, PUSH};
    let own = client.prepare("SELECT $1::int4 + 1").await.unwrap();
    client
        .batch_execute(&format!(
            "BEGIN; PREPARE {0} AS SELECT 41; PUSH INTO own_q VALUES ('{{\"n\":3}}')",
            PUSH.name
        ))
        .await
        .unwrap();
    let popped = client.query("POP FROM own_q LIMIT 1", &[]).await.unwrap();
    let receipt: String = popped[0].get("receipt");
    client
        .query(&format!("ACK '{receipt}'"), &[])
        .await
        .unwrap();
    let rows = client
        .query("SELECT name FROM pg_prepared_statements", &[])
        .await
        .unwrap();
    let left: Vec<String> = rows
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|n| [PUSH.name, POP.name, ACK.name, ACK_RUNS.name].contains(&n.as_str()))
        .collect();
    assert_eq!(left, vec![PUSH.name.to_string()], "only the client's own");
    let got: i32 = client.query_one(&own, &[&1i32]).await.unwrap().get(0);
    assert_eq!(got, 2);
    let mine: i32 = client
        .query_one(&format!("EXECUTE {}", PUSH.name), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(mine, 41);
    client.batch_execute("COMMIT").await.unwrap();
}

async fn pid(c: &tokio_postgres::Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn session_pool_mode_keeps_backend_local_state_for_the_whole_session() {
    let proxy = Proxy::start_with("session_mode", |c| {
        c.pool_size = 3;
        c.pool_mode = queenwire::frontend::PoolMode::Session;
    })
    .await;
    let a = proxy.connect().await;
    let b = proxy.connect().await;
    a.batch_execute("CREATE SEQUENCE sm_seq").await.unwrap();
    let (a_pid, b_pid) = (pid(&a).await, pid(&b).await);
    assert_ne!(a_pid, b_pid, "each session has a connection of its own");
    a.query_one("SELECT nextval('sm_seq')", &[]).await.unwrap();
    b.query_one("SELECT nextval('sm_seq')", &[]).await.unwrap();
    // Later transactions of the same session see its own backend-local state.
    let current: i64 = a
        .query_one("SELECT currval('sm_seq')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(current, 1);
    let last: i64 = b.query_one("SELECT lastval()", &[]).await.unwrap().get(0);
    assert_eq!(last, 2);
    assert_eq!(pid(&a).await, a_pid);
    // Dialect statements work on the session's connection.
    a.batch_execute("PUSH INTO sm_q VALUES ('{\"n\":1}')")
        .await
        .unwrap();
    let popped = b
        .simple_query("POP FROM sm_q LIMIT 1 WAIT 5 AUTO ACK")
        .await
        .unwrap();
    assert!(popped
        .iter()
        .any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_))));
    assert_eq!(pid(&b).await, b_pid);
}

#[tokio::test]
async fn a_prepared_statement_never_outlives_the_ddl_its_parse_saw() {
    // One backend connection: both sessions land on it.
    let proxy = Proxy::start_with("stale_statements", |c| c.pool_size = 1).await;
    let a = proxy.connect().await;
    a.batch_execute("BEGIN; CREATE TYPE qw_mood AS ENUM ('x')")
        .await
        .unwrap();
    a.prepare("SELECT $1::qw_mood::text").await.unwrap();
    a.batch_execute("ROLLBACK").await.unwrap();
    drop(a);
    // The type is gone: PostgreSQL answers the same statement's Parse
    // with 42704, as it would for any session parsing it now.
    let b = proxy.connect().await;
    let err = b
        .prepare("SELECT $1::qw_mood::text")
        .await
        .expect_err("the type was rolled back");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::UNDEFINED_OBJECT),
        "{err:?}"
    );
    // After DROP and CREATE of a type, a new Parse sees the new one.
    b.batch_execute("CREATE TYPE qw_mood AS ENUM ('y')")
        .await
        .unwrap();
    let s1 = b.prepare("SELECT 'y'::qw_mood::text AS m").await.unwrap();
    assert_eq!(
        b.query_one(&s1, &[]).await.unwrap().get::<_, String>(0),
        "y"
    );
    b.batch_execute("DROP TYPE qw_mood; CREATE TYPE qw_mood AS ENUM ('y', 'z')")
        .await
        .unwrap();
    let c = proxy.connect().await;
    let s2 = c.prepare("SELECT 'y'::qw_mood::text AS m").await.unwrap();
    assert_eq!(
        c.query_one(&s2, &[]).await.unwrap().get::<_, String>(0),
        "y"
    );
}

/// LISTEN over the extended protocol (what drivers that prepare every
/// statement send: Parse, Bind, Execute, Sync) is served by the shared
/// listening connection too: the session pins no backend connection, and
/// the notifications reach it while idle. A LISTEN in a pipeline that then
/// fails is undone, as PostgreSQL rolls it back with the implicit
/// transaction; an UNLISTEN takes effect at the Sync.
#[tokio::test]
async fn extended_protocol_listen_is_served_by_the_shared_connection() {
    use common::raw::{bind_text, execute, sync, Raw};
    use queenwire::protocol::frontend::build_parse;
    let proxy = Proxy::start_with("listen_extended", |c| c.pool_size = 1).await;
    let statement = |sql: &str| {
        vec![
            build_parse("", sql, &[]),
            bind_text("", "", &[]),
            execute("", 0),
            sync(),
        ]
    };
    let mut listener = Raw::connect(proxy.addr).await;
    listener.send(&statement("LISTEN jobs")).await;
    let r = listener.read_until_ready().await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.completions, vec!["LISTEN".to_string()]);
    // With a pool of one, a pinned listener would leave no connection for
    // anybody else.
    let client = proxy.connect().await;
    tokio::time::timeout(
        Duration::from_secs(10),
        client.batch_execute("NOTIFY jobs, 'one'"),
    )
    .await
    .expect("the listener pins no connection")
    .unwrap();
    let got = listener
        .next_within(Duration::from_secs(10))
        .await
        .expect("notified while idle");
    let mut rd = got.reader();
    rd.i32().unwrap();
    assert_eq!(rd.cstr().unwrap(), "jobs");
    assert_eq!(rd.cstr().unwrap(), "one");

    // A pipeline whose LISTEN is followed by a failing statement: the
    // LISTEN is rolled back.
    let mut msgs = statement("LISTEN undone");
    msgs.pop();
    msgs.extend(statement("SELECT 1/0"));
    listener.send(&msgs).await;
    let r = listener.read_until_ready().await;
    assert_eq!(r.errors.len(), 1, "{:?}", r.messages);
    assert_eq!(r.errors[0].code(), "22012");
    client.batch_execute("NOTIFY undone, 'x'").await.unwrap();
    assert!(
        listener
            .next_within(Duration::from_millis(500))
            .await
            .is_none(),
        "a rolled-back LISTEN hears nothing"
    );

    // UNLISTEN over the extended protocol: nothing more after its Sync.
    listener.send(&statement("UNLISTEN jobs")).await;
    let r = listener.read_until_ready().await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.completions, vec!["UNLISTEN".to_string()]);
    client.batch_execute("NOTIFY jobs, 'two'").await.unwrap();
    assert!(
        listener
            .next_within(Duration::from_millis(500))
            .await
            .is_none(),
        "nothing after UNLISTEN"
    );

    // Inside a transaction block too (tests/listen_blocks.rs follows the
    // block's rules): after COMMIT it listens and pins nothing.
    let r = listener.simple("BEGIN").await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    listener.send(&statement("LISTEN inblock")).await;
    let r = listener.read_until_ready().await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let r = listener.simple("COMMIT").await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    tokio::time::timeout(
        Duration::from_secs(10),
        client.batch_execute("NOTIFY inblock, 'three'"),
    )
    .await
    .expect("the listener pins no connection after its block")
    .unwrap();
    let got = listener
        .next_within(Duration::from_secs(10))
        .await
        .expect("notified after the block committed");
    let mut rd = got.reader();
    rd.i32().unwrap();
    assert_eq!(rd.cstr().unwrap(), "inblock");
}

/// A client's SQL-level DEALLOCATE or EXECUTE on a pooled connection cannot
/// reach another session's prepared statement there: the proxy's names for
/// them carry a random prefix, not a counter one could guess.
#[tokio::test]
async fn another_session_s_prepared_statement_cannot_be_named() {
    let proxy = Proxy::start_with("statement_names", |c| c.pool_size = 1).await;
    let a = proxy.connect().await;
    let b = proxy.connect().await;
    let stmt = a.prepare("SELECT $1::int4 + 1").await.unwrap();
    for guess in ["qw_s0", "qw_s1", "qw_s2", "qw_s3"] {
        let e = b
            .batch_execute(&format!("DEALLOCATE {guess}"))
            .await
            .expect_err("no such statement on the pooled connection");
        assert_eq!(e.code().map(|c| c.code()), Some("26000"), "{guess}: {e}");
    }
    let held: Vec<String> = b
        .simple_query("SELECT name FROM pg_prepared_statements")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .collect();
    assert!(
        held.iter().all(|n| n.len() > 20 && n.starts_with("qw_")),
        "the proxy's names are long and random: {held:?}"
    );
    let two: i32 = a.query_one(&stmt, &[&1i32]).await.unwrap().get(0);
    assert_eq!(two, 2);
}

/// Bytes that are not UTF-8 anywhere in a UTF8 client's message, a comment
/// included, fail the message with 22021 as PostgreSQL fails it: a queue
/// statement in it does not run.
#[tokio::test]
async fn invalid_utf8_anywhere_in_a_message_refuses_its_queue_statements() {
    let proxy = Proxy::start("utf8_comment").await;
    for sql in [
        &b"/* \xff */ PUSH INTO bad_bytes VALUES ('1')"[..],
        &b"PUSH INTO bad_bytes VALUES ('1') -- \xe2\x82"[..],
        &b"PUSH INTO bad_bytes VALUES ('1'); SELECT '\xff'"[..],
    ] {
        let mut direct = common::raw::Raw::connect_direct(&proxy.direct).await;
        direct.send(&[query(&b"SELECT 1 /* \xff */"[..])]).await;
        let r = direct.read_until_ready().await;
        assert_eq!(
            r.errors.first().map(|e| e.code()),
            Some("22021"),
            "PostgreSQL"
        );
        let mut raw = common::raw::Raw::connect(proxy.addr).await;
        raw.send(&[query(sql)]).await;
        let r = raw.read_until_ready().await;
        assert_eq!(
            r.errors.first().map(|e| e.code()),
            Some("22021"),
            "{}",
            String::from_utf8_lossy(sql)
        );
        assert_eq!(raw.simple("SELECT 1").await.rows.len(), 1);
    }
    let client = proxy.connect().await;
    assert!(
        common::sql::rows(&client, "POP FROM bad_bytes AUTO ACK")
            .await
            .is_empty(),
        "a refused message pushed nothing"
    );
}

/// A script is cut into statements where PostgreSQL cuts it, with the
/// settings that change how it reads literals: `standard_conforming_strings`
/// off (a backslash escapes in `'…'`) and a client encoding whose
/// characters can end in a backslash byte (SJIS: 表 is 0x95 0x5C).
/// PostgreSQL reads a whole message before running any of it, so a queue
/// statement with a syntax error runs nothing before it.
#[tokio::test]
async fn scripts_are_cut_where_postgresql_cuts_them_under_legacy_settings() {
    let proxy = Proxy::start("legacy_reading").await;
    let mut direct = common::raw::Raw::connect_direct(&proxy.direct).await;
    let mut raw = common::raw::Raw::connect(proxy.addr).await;

    // standard_conforming_strings off: the PUSH is inside the literal.
    let script = "SELECT 'a\\'; PUSH INTO legacy_q VALUES (''{}'')' AS c; SELECT 2";
    for side in [&mut direct, &mut raw] {
        side.simple("SET standard_conforming_strings = off").await;
        let r = side.simple(script).await;
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(
            r.rows,
            vec![
                vec![Some("a'; PUSH INTO legacy_q VALUES ('{}')".to_string())],
                vec![Some("2".to_string())]
            ]
        );
    }
    // A queue statement whose literal PostgreSQL would read otherwise is
    // refused, not read by the other rule; dollar quotes mean one thing.
    let r = raw
        .simple("PUSH INTO legacy_q VALUES ('{\"a\":\"x\\\\y\"}')")
        .await;
    assert_eq!(r.errors.first().map(|e| e.code()), Some("0A000"));
    let r = raw
        .simple("PUSH INTO legacy_q VALUES ($${\"a\":\"x\\\\y\"}$$)")
        .await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    raw.simple("SET standard_conforming_strings = on").await;
    let r = raw.simple("POP FROM legacy_q LIMIT 5 AUTO ACK").await;
    assert_eq!(r.rows.len(), 1, "only the dollar-quoted PUSH ran");

    // SJIS: E'表' ends at its quote, and the PUSH after it is a statement.
    for side in [&mut direct, &mut raw] {
        side.simple("SET client_encoding = 'SJIS'").await;
    }
    direct
        .send(&[query(b"SELECT E'\x95\x5c' AS a; SELECT 2")])
        .await;
    let r = direct.read_until_ready().await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.rows.len(), 2);
    raw.send(&[query(
        b"SELECT E'\x95\x5c' AS a; PUSH INTO legacy_q VALUES ('{}')",
    )])
    .await;
    let r = raw.read_until_ready().await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.rows.len(), 2, "the SELECT's row and the PUSH's");

    // A syntax error anywhere: nothing of the message runs.
    for side in [&mut direct, &mut raw] {
        side.simple("SET client_encoding = 'UTF8'").await;
    }
    let r = direct.simple("SELECT 1 AS a; SELEC 2").await;
    assert!(r.rows.is_empty());
    assert_eq!(r.errors.first().map(|e| e.code()), Some("42601"));
    let r = raw
        .simple("SELECT 1 AS a; PUSH INTO legacy_q VALUE ('{}'); SELECT 2")
        .await;
    assert!(r.rows.is_empty(), "{:?}", r.rows);
    assert_eq!(r.errors.first().map(|e| e.code()), Some("42601"));
    assert_eq!(raw.simple("SELECT 1").await.rows.len(), 1);
}

/// A replication connection (pg_basebackup, pg_receivewal, a logical
/// replication client) is refused at startup, readably, rather than
/// served as a session that then fails at IDENTIFY_SYSTEM; a startup
/// packet that says `replication=false` is an ordinary session.
#[tokio::test]
async fn a_replication_connection_is_refused_readably_at_startup() {
    let proxy = Proxy::start("replication_refused").await;
    for mode in ["database", "true", "on"] {
        let (ok, _, err) = psql(
            &proxy,
            &[
                "-d",
                &format!("dbname=postgres replication={mode}"),
                "-c",
                "IDENTIFY_SYSTEM",
            ],
        )
        .await;
        assert!(!ok);
        assert!(
            err.contains("does not serve replication connections"),
            "{mode}: {err}"
        );
    }
    let (ok, out, err) = psql(
        &proxy,
        &[
            "-d",
            "dbname=postgres replication=false",
            "-At",
            "-c",
            "SELECT 1",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "1");
}

/// A client that LISTENs and stops reading its socket does not make
/// queenwire hold its notifications without end: past a bound its session
/// stops receiving them and, once the client reads again and has taken
/// what was held, is closed with 53200. A listener that reads gets every
/// notification meanwhile.
#[tokio::test]
async fn a_listener_that_does_not_read_is_closed_past_a_bound_and_others_get_everything() {
    use common::raw::Raw;
    let proxy = Proxy::start("listen_not_reading").await;
    let mut stalled = Raw::connect(proxy.addr).await;
    assert!(stalled.simple("LISTEN flood").await.errors.is_empty());
    let mut reading = Raw::connect(proxy.addr).await;
    assert!(reading.simple("LISTEN flood").await.errors.is_empty());
    let sender = proxy.connect().await;
    const SENT: usize = 3_000;
    let payload = "n".repeat(7_900);
    let send = async {
        for _ in 0..SENT {
            sender
                .execute("SELECT pg_notify('flood', $1)", &[&payload])
                .await
                .unwrap();
        }
    };
    let read = async {
        let mut got = 0;
        while got < SENT {
            let msg = reading
                .next_within(Duration::from_secs(30))
                .await
                .expect("the reading listener gets every notification");
            if msg.tag == b'A' {
                got += 1;
            }
        }
        got
    };
    let ((), got) = tokio::join!(send, read);
    assert_eq!(got, SENT);
    // The stalled client reads now: what was held, then the close.
    let (mut notified, mut closed) = (0, None);
    while let Some(msg) = stalled.next_within(Duration::from_secs(10)).await {
        match msg.tag {
            b'A' => notified += 1,
            b'E' => {
                closed = Some(
                    queenwire::protocol::SqlError::parse(&msg.body)
                        .code()
                        .to_string(),
                );
                break;
            }
            _ => {}
        }
    }
    assert!(
        notified < SENT,
        "{notified} notifications held for a client not reading"
    );
    assert_eq!(closed.as_deref(), Some("53200"));
    // The others go on.
    assert_eq!(reading.simple("SELECT 1").await.rows.len(), 1);
}

/// A session whose transactions are read-only by default
/// (`default_transaction_read_only`, `SET SESSION CHARACTERISTICS AS
/// TRANSACTION READ ONLY`) is refused queue statements that write, with
/// PostgreSQL's 25006, as PostgreSQL refuses its INSERT; reading ones run,
/// and a block opened READ WRITE may write, as PostgreSQL's may.
#[tokio::test]
async fn a_read_only_session_is_refused_queue_writes_as_postgresql_refuses_an_insert() {
    let proxy = Proxy::start("read_only_session").await;
    let writer = proxy.connect().await;
    writer
        .batch_execute("CREATE TABLE ro_t (x int); CREATE QUEUE ro_q")
        .await
        .unwrap();
    writer
        .batch_execute("PUSH INTO ro_q VALUES ('{\"n\":0}')")
        .await
        .unwrap();

    let mut direct = common::raw::Raw::connect_direct(&proxy.direct).await;
    let mut raw = common::raw::Raw::connect(proxy.addr).await;
    for side in [&mut direct, &mut raw] {
        side.simple("SET default_transaction_read_only = on").await;
        let r = side.simple("INSERT INTO ro_t VALUES (1)").await;
        assert_eq!(r.errors.first().map(|e| e.code()), Some("25006"));
    }
    for sql in [
        "PUSH INTO ro_q VALUES ('{\"n\":1}')",
        "POP FROM ro_q LIMIT 1",
        "POP FROM ro_q LIMIT 1 AUTO ACK",
        "CREATE QUEUE ro_other",
        "KV PUT ro_ns 'k' '1' FOREVER",
        "SCHEDULE INTO ro_q KEY t1 AFTER '1 hour' VALUES ('{}')",
        "PUSH INTO ro_q VALUES ('{\"n\":2}'); SELECT 1",
    ] {
        let r = raw.simple(sql).await;
        assert_eq!(r.errors.first().map(|e| e.code()), Some("25006"), "{sql}");
        assert!(
            r.errors[0].message.contains("read-only transaction"),
            "{sql}: {:?}",
            r.errors
        );
    }
    for sql in ["SHOW QUEUES", "KV GET ro_ns 'k'", "SHOW MESSAGES FROM ro_q"] {
        let r = raw.simple(sql).await;
        assert!(r.errors.is_empty(), "{sql}: {:?}", r.errors);
    }
    // A block opened READ WRITE may write, in one message or several.
    let r = raw
        .simple("BEGIN READ WRITE; PUSH INTO ro_q VALUES ('{\"n\":3}'); COMMIT")
        .await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    raw.simple("BEGIN READ WRITE").await;
    let r = raw.simple("PUSH INTO ro_q VALUES ('{\"n\":4}')").await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    raw.simple("COMMIT").await;
    // A block that is read-only fails the statement, as it fails an INSERT.
    raw.simple("BEGIN").await;
    let r = raw.simple("PUSH INTO ro_q VALUES ('{\"n\":5}')").await;
    assert_eq!(r.errors.first().map(|e| e.code()), Some("25006"));
    raw.simple("ROLLBACK").await;

    // The extended protocol is refused alike; READ WRITE again lets it write.
    let reader = proxy.connect().await;
    reader
        .batch_execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        .await
        .unwrap();
    let push = reader
        .prepare_typed(
            "PUSH INTO ro_q VALUES ($1)",
            &[tokio_postgres::types::Type::TEXT],
        )
        .await
        .unwrap();
    let err = reader.query(&push, &[&"{\"n\":6}"]).await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("25006"), "{err}");
    reader
        .batch_execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
        .await
        .unwrap();
    reader.query(&push, &[&"{\"n\":7}"]).await.unwrap();

    // Only what was allowed was written.
    let mut seen: Vec<String> = common::sql::rows(&writer, "POP FROM ro_q LIMIT 10 AUTO ACK")
        .await
        .iter()
        .filter_map(|r| r.get("payload").cloned().flatten())
        .collect();
    seen.sort();
    assert_eq!(seen, ["{\"n\":0}", "{\"n\":3}", "{\"n\":4}", "{\"n\":7}"]);
}

/// A Bind's result formats for a queue statement are checked as PostgreSQL
/// checks a SELECT's: one per column or one for all (else `08P01`), each
/// text or binary (else `22023`); a POP so refused takes nothing.
#[tokio::test]
async fn a_queue_statement_s_result_formats_are_checked_as_postgresql_checks_them() {
    use bytes::BufMut;
    let proxy = Proxy::start("result_formats").await;
    let bind = |formats: &[i16]| {
        let mut b = bytes::BytesMut::new();
        b.put_slice(b"\0\0"); // unnamed portal and statement
        b.put_i16(0);
        b.put_i16(0);
        b.put_i16(formats.len() as i16);
        for f in formats {
            b.put_i16(*f);
        }
        queenwire::protocol::Message::new(b'B', b.freeze())
    };
    let exchange = |sql: &'static str, formats: Vec<i16>| {
        let bind = bind(&formats);
        vec![
            queenwire::protocol::frontend::build_parse("", sql, &[]),
            bind,
            common::raw::execute("", 0),
            common::raw::sync(),
        ]
    };
    let mut direct = common::raw::Raw::connect_direct(&proxy.direct).await;
    let mut raw = common::raw::Raw::connect(proxy.addr).await;
    raw.simple("PUSH INTO formats_q VALUES ('{}')").await;
    for (formats, code) in [
        (vec![0, 1], "08P01"),
        (vec![1; 20], "08P01"),
        (vec![7], "22023"),
    ] {
        direct
            .send(&exchange("SELECT 1 AS a, 2 AS b, 3 AS c", formats.clone()))
            .await;
        let pg = direct.read_until_ready().await;
        assert_eq!(
            pg.errors.first().map(|e| e.code()),
            Some(code),
            "PostgreSQL"
        );
        for (sql, columns) in [
            ("POP FROM formats_q LIMIT 1", "11 columns"),
            ("SHOW QUEUES", "7 columns"),
            ("KV GET ns 'k'", "5 columns"),
        ] {
            raw.send(&exchange(sql, formats.clone())).await;
            let r = raw.read_until_ready().await;
            assert_eq!(r.errors.first().map(|e| e.code()), Some(code), "{sql}");
            let expected = pg.errors[0].message.replace("3 columns", columns);
            assert_eq!(r.errors[0].message, expected, "{sql}");
        }
    }
    // Formats a statement without columns takes any; the POPs took nothing.
    raw.send(&exchange("CREATE QUEUE formats_other", vec![0, 1, 1]))
        .await;
    assert!(raw.read_until_ready().await.errors.is_empty());
    let r = raw.simple("POP FROM formats_q LIMIT 10").await;
    assert_eq!(r.rows.len(), 1);
}

/// What a client saw of one exchange, in terms both sides share: each
/// message's type, an error's SQLSTATE, a command tag, ReadyForQuery's
/// status, rows.
fn seen(r: &common::raw::Replies) -> String {
    let mut out = String::new();
    let mut errors = r.errors.iter();
    let mut completions = r.completions.iter();
    for msg in &r.messages {
        match msg.tag {
            b'E' => out.push_str(&format!(
                "E{} ",
                errors.next().map(|e| e.code()).unwrap_or("?")
            )),
            b'C' => out.push_str(&format!(
                "C[{}] ",
                completions.next().map(String::as_str).unwrap_or("?")
            )),
            b'Z' => out.push_str(&format!("Z{} ", msg.body[0] as char)),
            // Startup-time and asynchronous messages are not the exchange's.
            b'S' | b'N' | b'A' => {}
            t => out.push_str(&format!("{} ", t as char)),
        }
    }
    out.push_str(&format!("{:?}", r.rows));
    out
}

/// One exchange: the messages, then the replies up to ReadyForQuery; and
/// anything more that comes within a moment after it (PostgreSQL sends
/// nothing more).
async fn exchange(raw: &mut common::raw::Raw, msgs: &[queenwire::protocol::Message]) -> String {
    raw.send(msgs).await;
    let replies = tokio::time::timeout(Duration::from_secs(20), raw.read_until_ready())
        .await
        .expect("ReadyForQuery within 20 s");
    let mut out = seen(&replies);
    if let Some(extra) = raw.next_within(Duration::from_millis(200)).await {
        out.push_str(&format!(" then {}", extra.tag as char));
    }
    out
}

/// Pipelines in which the proxy itself finds the error (a statement name
/// taken or unknown, a portal unknown), a simple Query sent after an error
/// and before Sync, a Parse of the unnamed statement that fails, and COPY
/// data sent before CopyInResponse: the client sees what PostgreSQL's own
/// clients see, message for message, and the same rows are committed.
#[tokio::test]
async fn pipelines_with_errors_the_proxy_finds_end_as_postgresql_ends_them() {
    use common::raw::{bind_text, execute, sync};
    use queenwire::protocol::frontend::{build_describe, build_parse, build_query};
    use queenwire::protocol::tags::Target;
    use queenwire::protocol::Message;
    let proxy = Proxy::start("proxy_found_errors").await;
    let direct = common::raw::Raw::connect_direct(&proxy.direct).await;
    let through = common::raw::Raw::connect(proxy.addr).await;
    let mut transcripts = Vec::new();
    for (mut raw, t) in [(direct, "pf_direct"), (through, "pf_proxy")] {
        let mut log = Vec::new();
        let count = format!("SELECT count(*) FROM {t}");
        let insert = format!("INSERT INTO {t} VALUES (1)");
        raw.simple(&format!("CREATE TABLE {t} (a int)")).await;

        // A statement name taken, inside a block: the block fails.
        log.push(exchange(&mut raw, &[build_query("BEGIN")]).await);
        log.push(exchange(&mut raw, &[build_parse("s1", "SELECT 1", &[]), sync()]).await);
        log.push(exchange(&mut raw, &[build_query(&insert)]).await);
        log.push(exchange(&mut raw, &[build_parse("s1", "SELECT 2", &[]), sync()]).await);
        // In the failed block the name is looked at first for a statement
        // that ends the block, the block's state first for any other.
        log.push(exchange(&mut raw, &[build_parse("s1", "ROLLBACK", &[]), sync()]).await);
        log.push(exchange(&mut raw, &[build_parse("s1", "SELECT 3", &[]), sync()]).await);
        log.push(exchange(&mut raw, &[build_query("COMMIT")]).await);
        log.push(exchange(&mut raw, &[build_query(&count)]).await);

        // An unknown statement in a pipeline: its implicit transaction
        // rolls back the INSERT before it.
        let pipeline = [
            build_parse("", &insert, &[]),
            bind_text("", "", &[]),
            execute("", 0),
            bind_text("", "nosuch", &[]),
            execute("", 0),
            sync(),
        ];
        log.push(exchange(&mut raw, &pipeline).await);
        log.push(exchange(&mut raw, &[build_query(&count)]).await);
        // An unknown portal, described, in a block.
        log.push(exchange(&mut raw, &[build_query(format!("BEGIN; {insert}"))]).await);
        log.push(
            exchange(
                &mut raw,
                &[build_describe(Target::Portal, "nosuch"), sync()],
            )
            .await,
        );
        log.push(exchange(&mut raw, &[build_query("COMMIT")]).await);
        log.push(exchange(&mut raw, &[build_query(&count)]).await);

        // A simple Query after an error and before Sync is skipped.
        let pipeline = [
            build_parse("", "SELECT 1/0", &[]),
            bind_text("", "", &[]),
            execute("", 0),
            build_query("SELECT 1"),
            build_query(&insert),
            sync(),
        ];
        log.push(exchange(&mut raw, &pipeline).await);
        log.push(exchange(&mut raw, &[build_query(&count)]).await);
        // So too on a session a SET keeps on its connection, which then
        // goes on answering.
        log.push(exchange(&mut raw, &[build_query("SET work_mem = '5MB'")]).await);
        let pipeline = [
            execute("", 1),
            build_query("SELECT 2"),
            build_describe(Target::Portal, "p2"),
            sync(),
        ];
        log.push(exchange(&mut raw, &pipeline).await);
        log.push(exchange(&mut raw, &[sync()]).await);
        log.push(exchange(&mut raw, &[build_query("RESET work_mem")]).await);

        // A failed Parse of the unnamed statement drops the one before.
        let pipeline = [
            build_parse("", &insert, &[]),
            bind_text("", "", &[]),
            execute("", 0),
            sync(),
        ];
        log.push(exchange(&mut raw, &pipeline).await);
        let failing = [build_parse("", "SELECT * FROM nosuch_table", &[]), sync()];
        log.push(exchange(&mut raw, &failing).await);
        log.push(exchange(&mut raw, &[bind_text("", "", &[]), execute("", 0), sync()]).await);
        log.push(exchange(&mut raw, &[build_query(&count)]).await);

        // An error names the client's statement, closed later in the
        // pipeline or not.
        let pipeline = [
            build_parse("s9", "SELECT 1", &[]),
            bind_text("", "s9", &[Some("x")]),
            queenwire::protocol::frontend::build_close(Target::Statement, "s9"),
            sync(),
        ];
        raw.send(&pipeline).await;
        let r = raw.read_until_ready().await;
        assert_eq!(
            r.errors[0].message,
            "bind message supplies 1 parameters, but prepared statement \"s9\" requires 0",
            "{t}"
        );
        log.push(seen(&r));
        raw.simple("DEALLOCATE ALL").await;

        // A LISTEN portal runs once, as any utility statement's.
        let pipeline = [
            build_parse("", "LISTEN pf_channel", &[]),
            bind_text("p1", "", &[]),
            execute("p1", 0),
            execute("p1", 0),
            sync(),
        ];
        log.push(exchange(&mut raw, &pipeline).await);
        log.push(exchange(&mut raw, &[build_query("UNLISTEN pf_channel")]).await);

        // COPY FROM STDIN with its data in the same write as its Execute.
        let pipeline = [
            build_parse("", format!("COPY {t} FROM STDIN"), &[]),
            bind_text("", "", &[]),
            execute("", 0),
            Message::new(b'd', &b"5\n"[..]),
            Message::new(b'c', &b""[..]),
            sync(),
        ];
        log.push(exchange(&mut raw, &pipeline).await);
        log.push(exchange(&mut raw, &[build_query(&count)]).await);

        // A Close, Describe or Execute with bytes after its last field is
        // refused before it acts, and fails the block.
        let with_junk = |msg: Message| {
            let mut body = msg.body.to_vec();
            body.extend_from_slice(b"JUNK");
            Message::new(msg.tag, body)
        };
        let close = queenwire::protocol::frontend::build_close(Target::Statement, "sx");
        let junk_messages = [
            with_junk(close),
            with_junk(build_describe(Target::Statement, "sx")),
            with_junk(execute("", 0)),
        ];
        for junk in junk_messages {
            log.push(exchange(&mut raw, &[build_query(format!("BEGIN; {insert}"))]).await);
            let pipeline = [
                build_parse("sx", "SELECT 1", &[]),
                bind_text("", "sx", &[]),
                junk,
                sync(),
            ];
            log.push(exchange(&mut raw, &pipeline).await);
            log.push(exchange(&mut raw, &[build_query("COMMIT")]).await);
            log.push(exchange(&mut raw, &[build_query(&count)]).await);
            log.push(exchange(&mut raw, &[build_query("DEALLOCATE ALL")]).await);
        }
        // A Flush with a body fails the pipeline; a Sync with one still
        // ends it, after the error.
        let flush = Message::new(b'H', &b"JUNK"[..]);
        let pipeline = [
            build_parse("", "SELECT 1", &[]),
            flush,
            bind_text("", "", &[]),
            execute("", 0),
            sync(),
        ];
        log.push(exchange(&mut raw, &pipeline).await);
        let sync_with_body = Message::new(b'S', &b"JUNK"[..]);
        log.push(exchange(&mut raw, &[build_query(format!("BEGIN; {insert}"))]).await);
        log.push(
            exchange(
                &mut raw,
                &[build_parse("", "SELECT 1", &[]), sync_with_body],
            )
            .await,
        );
        log.push(exchange(&mut raw, &[build_query("COMMIT")]).await);
        log.push(exchange(&mut raw, &[build_query(&count)]).await);
        transcripts.push(log);
    }
    for (i, (pg, qw)) in transcripts[0].iter().zip(&transcripts[1]).enumerate() {
        assert_eq!(qw, pg, "exchange {i}");
    }

    // A message other than copy data sent behind a COPY's Execute, before
    // its answer: PostgreSQL fails the COPY and ends the connection, and
    // so the client's does, rather than wait for data.
    let direct = common::raw::Raw::connect_direct(&proxy.direct).await;
    let through = common::raw::Raw::connect(proxy.addr).await;
    for (mut raw, t) in [(direct, "pf_direct"), (through, "pf_proxy")] {
        let pipeline = [
            build_parse("", format!("COPY {t} FROM STDIN"), &[]),
            bind_text("", "", &[]),
            execute("", 0),
            build_describe(Target::Statement, ""),
            sync(),
        ];
        raw.send(&pipeline).await;
        let got = raw
            .until_closed(Duration::from_secs(20))
            .await
            .expect("the connection ends");
        let errors: Vec<String> = got
            .iter()
            .filter(|m| m.tag == b'E')
            .map(|m| {
                queenwire::protocol::SqlError::parse(&m.body)
                    .code()
                    .to_string()
            })
            .collect();
        assert_eq!(errors[..2], ["08P01", "08P01"], "{t}");
    }
}

/// An Execute of the unnamed portal with no Bind of it since the last
/// simple Query is answered `34000`, as PostgreSQL answers it, without
/// reaching PostgreSQL: PostgreSQL 15.18 crashes (and restarts every
/// backend) on one after this failed block, so any client could restart
/// the shared server.
#[tokio::test]
async fn an_unbound_unnamed_portal_never_reaches_postgresql() {
    use common::raw::{execute, sync};
    let proxy = Proxy::start("unbound_unnamed_portal").await;
    let direct = proxy.connect_direct().await;
    let before = postmaster_started(&direct).await;
    let mut raw = common::raw::Raw::connect(proxy.addr).await;
    raw.simple("START TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .await;
    raw.simple("ROLLBACK TO SAVEPOINT sp").await;
    raw.simple("RESET statement_timeout; CREATE TEMP TABLE tt(a int); SELECT 1; SELECT 2")
        .await;
    raw.send(&[execute("", 0), sync()]).await;
    let r = tokio::time::timeout(Duration::from_secs(20), raw.read_until_ready())
        .await
        .expect("an answer");
    assert_eq!(r.errors.first().map(|e| e.code()), Some("34000"));
    assert_eq!(r.status, b'E');
    raw.simple("ROLLBACK").await;
    assert_eq!(raw.simple("SELECT 1").await.rows.len(), 1);
    // Outside a block too; the server never restarted.
    raw.send(&[execute("", 0), sync()]).await;
    let r = raw.read_until_ready().await;
    assert_eq!(r.errors.first().map(|e| e.code()), Some("34000"));
    let direct = proxy.connect_direct().await;
    assert_eq!(postmaster_started(&direct).await, before);
}

async fn postmaster_started(c: &tokio_postgres::Client) -> String {
    c.query_one("SELECT pg_postmaster_start_time()::text", &[])
        .await
        .unwrap()
        .get(0)
}

/// The FATAL with which PostgreSQL ends the connection of a session idle
/// in a block — past `idle_in_transaction_session_timeout`, or terminated
/// by another session — reaches the client at once, through queenwire as
/// straight from PostgreSQL: the same error, then the end of the stream,
/// with nothing of queenwire's own after it. A backend ended in the middle
/// of a statement adds queenwire's 08007 after PostgreSQL's error: the
/// reply was lost (a COMMIT may have taken effect).
#[tokio::test]
async fn a_connection_postgresql_ends_with_a_fatal_ends_as_it_does() {
    use queenwire::protocol::frontend::build_query;
    let proxy = Proxy::start("backend_fatal").await;
    let cases: [(&str, &[&str]); 4] = [
        (
            "idle in a block past its timeout",
            &["SET idle_in_transaction_session_timeout = '300ms'; BEGIN; SELECT 1"],
        ),
        (
            "terminated during a statement in a block",
            &[
                "BEGIN; SELECT 1",
                "SELECT pg_terminate_backend(pg_backend_pid())",
            ],
        ),
        (
            "terminated during a statement",
            &["SELECT pg_terminate_backend(pg_backend_pid())"],
        ),
        // Terminated by another session while idle in a block (a block
        // holds its connection, unpinned, in transaction pooling).
        (
            "terminated by another session",
            &["BEGIN; SELECT 'ended-idle-in-block'", ""],
        ),
    ];
    for (case, statements) in cases {
        let mut ends = Vec::new();
        for through in [false, true] {
            let mut raw = if through {
                common::raw::Raw::connect(proxy.addr).await
            } else {
                common::raw::Raw::connect_direct(&proxy.direct).await
            };
            let (last, before) = statements.split_last().expect("a statement");
            for sql in before {
                raw.simple(sql).await;
            }
            if last.is_empty() {
                let other = proxy.connect_direct().await;
                let ended = other
                    .query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE state = 'idle in transaction' \
                         AND query LIKE '%ended-idle-in-block%' AND pid <> pg_backend_pid()",
                        &[],
                    )
                    .await
                    .expect("terminated");
                assert_eq!(ended.len(), 1, "{case}: one session idle in a block");
            } else {
                raw.send(&[build_query(last)]).await;
            }
            let rest = raw
                .until_closed(Duration::from_secs(20))
                .await
                .expect("the connection ends within 20 s");
            let end: Vec<String> = rest
                .iter()
                .filter(|m| !matches!(m.tag, b'S' | b'N' | b'A'))
                .map(|m| match m.tag {
                    b'E' => format!("E{}", queenwire::protocol::SqlError::parse(&m.body).code()),
                    t => (t as char).to_string(),
                })
                .collect();
            ends.push(end);
        }
        assert!(
            ends[0].last().is_some_and(|e| e.starts_with('E')),
            "{case}: PostgreSQL ends with its error: {:?}",
            ends[0]
        );
        let mut expected = ends[0].clone();
        if case.starts_with("terminated during a statement") {
            expected.push("E08007".into());
        }
        assert_eq!(
            ends[1], expected,
            "{case}: through queenwire, then straight"
        );
    }
}

/// A simple query of several statements with a LISTEN among them, which
/// queenwire runs statement by statement: a syntax error anywhere in it
/// fails it before any statement runs, and an error of a later statement
/// has its position counted from the start of the whole text, as
/// PostgreSQL, which parses the whole text first, reports them.
#[tokio::test]
async fn a_script_with_a_listen_fails_where_and_as_postgresql_fails_it() {
    let proxy = Proxy::start("listen_script_errors").await;
    let scripts = [
        "UNLISTEN *; SELECT 'é'; SELEC 1; SELECT 2",
        "LISTEN ls_a; SELECT 1; SELECT 'x",
        "BEGIN; LISTEN ls_b; SELEC 1; COMMIT",
        "LISTEN ls_c; SELECT 'é' AS e; SELECT * FROM ls_no_such_table",
        "LISTEN ls_d; SELECT 1",
    ];
    let mut transcripts = Vec::new();
    for through in [false, true] {
        let mut raw = if through {
            common::raw::Raw::connect(proxy.addr).await
        } else {
            common::raw::Raw::connect_direct(&proxy.direct).await
        };
        let mut log = Vec::new();
        for sql in scripts {
            let r = raw.simple(sql).await;
            let errors: Vec<(String, Option<usize>)> = r
                .errors
                .iter()
                .map(|e| (e.code().to_string(), e.position))
                .collect();
            log.push(format!(
                "{sql}: {:?} {errors:?} {}",
                r.completions, r.status as char
            ));
            if r.status != b'I' {
                raw.simple("ROLLBACK").await;
            }
        }
        transcripts.push(log);
    }
    assert_eq!(
        transcripts[1], transcripts[0],
        "through queenwire, then straight"
    );
    assert!(
        transcripts[0][0].contains("[] [(\"42601\", Some(25))]"),
        "{:?}",
        transcripts[0]
    );
}
