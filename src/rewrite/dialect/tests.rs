//! The grammar's recognition and parse tests, statement family by family.

use super::*;

#[test]
fn postgresql_statements_that_share_the_dialect_s_first_words_are_not_ours() {
    // Each is valid PostgreSQL (DROP GROUP is DROP ROLE's alias; SHOW of a
    // setting): the dialect must never take it.
    for sql in [
        "DROP GROUP role_name",
        "DROP GROUP IF EXISTS a, b",
        "DROP GROUP a, b",
        "drop group \"Mixed Case\"",
        "ALTER GROUP staff ADD USER alice",
        "ALTER GROUP staff RENAME TO crew",
        "CREATE GROUP staff",
        "SHOW search_path",
        "SHOW ALL",
        "SHOW TIME ZONE",
        "SHOW TRANSACTION ISOLATION LEVEL",
        // `SHOW word` alone is a parameter lookup in PostgreSQL: the
        // catalogue statements need something after their second word.
        "SHOW messages",
        "SHOW message;",
        "SHOW trace",
        "SHOW lagging",
        "show lagging -- comment",
        "REPLAY",
        "CANCEL",
        "SHOW stream",
        "CREATE OR REPLACE VIEW stream AS SELECT 1",
        "CREATE OR REPLACE FUNCTION stream() RETURNS int LANGUAGE sql AS 'select 1'",
        "CREATE OR",
        "DROP TABLE stream",
        // A qualified custom setting, however spaced.
        "SHOW queues . x",
        "SHOW queues/**/.x",
        "SHOW groups\n.x",
        "SHOW dlq .x",
        "SHOW messages . x",
        "SHOW lagging . x",
        "SHOW status . x",
        "SHOW schedules . x",
        "SHOW queenwire . x",
    ] {
        assert!(parse(sql).is_none(), "{sql} was taken by the dialect");
    }
}

#[test]
fn ordinary_sql_is_not_ours() {
    for sql in [
        "",
        "   ",
        "-- just a comment",
        "SELECT 1",
        "select 'PUSH'",
        "SHOW search_path",
        "show transaction_isolation",
        "SHOW ALL",
        "CREATE TABLE queue(id int)",
        "CREATE TABLE queues (id int)",
        "CREATE QUEUE_x",
        "create queue.x",
        "DROP TABLE orders",
        "DROP ROLE someone",
        "ALTER TABLE q ADD COLUMN x int",
        "CREATE GROUP g",
        "INSERT INTO push VALUES (1)",
        "WITH x AS (SELECT 1) SELECT * FROM x",
        "(SELECT 1)",
        "BEGIN",
        "COMMIT",
        "SET search_path = queen",
        "EXPLAIN POP FROM q",
        "\"PUSH\" INTO q VALUES ('1')",
        "'PUSH' INTO q",
        "PUSHX INTO q",
        "push.into q",
        "SELECT 'unterminated",
        "SHOW 'unterminated",
        "SEEK 5",
        "CANCEL",
        "CANCEL QUERY",
        "/* unterminated PUSH",
        "DECLARE c CURSOR FOR SELECT 1",
        "COPY t FROM STDIN",
        "$1",
    ] {
        assert_eq!(parse(sql), None, "{sql:?}");
    }
}

#[test]
fn leading_whitespace_and_comments_are_skipped() {
    for sql in [
        "  \n\tSHOW QUEUES",
        "-- list them\nSHOW QUEUES",
        "/* a /* nested */ comment */ show queues",
        "SHOW /* between */ QUEUES",
        "SHOW QUEUES -- trailing",
        "SHOW QUEUES; /* done */ ",
        "SHOW QUEUES ;\n-- end\n",
    ] {
        assert_eq!(parse(sql), Some(Ok(Statement::ShowQueues)), "{sql:?}");
    }
}

#[test]
fn every_family_is_recognised_case_insensitively() {
    for sql in [
        "Push Into q Values ('1')",
        "pOp FROM q",
        "ack 'r'",
        "renew 'r'",
        "kv get ns k",
        "schedule into q key k after 5 values ('1')",
        "cancel schedule k on q",
        "create queue q",
        "alter queue q set (priority = 1)",
        "drop queue q",
        "seek group g on q to end",
        "drop group g on q",
        "show queues",
        "show partitions from q",
        "show groups",
        "show dlq from q",
        "show schedules",
        "show messages from q",
        "show message '01a231a6-75b0-75c8-9018-e7c53a8139da' from q",
        "show group g on q",
        "show lagging partitions on q",
        "show trace 't'",
        "show status",
        "replay dlq from q",
    ] {
        assert!(
            matches!(parse(sql), Some(Ok(_))),
            "{sql:?}: {:?}",
            parse(sql)
        );
    }
}

#[test]
fn trailing_junk_is_42601_at_its_position() {
    let err = parse("SHOW QUEUES please").unwrap().unwrap_err();
    assert_eq!((err.sqlstate.code(), err.position), ("42601", Some(13)));
    assert!(err.message.contains("\"please\""), "{}", err.message);
    let err = parse("SHOW QUEUES;;").unwrap().unwrap_err();
    assert_eq!(err.position, Some(13));
    let err = parse("SHOW QUEUES; SHOW QUEUES").unwrap().unwrap_err();
    assert_eq!(err.position, Some(14));
}

#[test]
fn lexical_errors_inside_a_dialect_statement_are_reported() {
    let err = parse("POP FROM q GROUP 'abc").unwrap().unwrap_err();
    assert_eq!((err.sqlstate.code(), err.position), ("42601", Some(18)));
    assert!(err.message.starts_with("unterminated quoted string"));
    let err = parse("SHOW QUEUES /* open").unwrap().unwrap_err();
    assert_eq!((err.sqlstate.code(), err.position), ("42601", Some(13)));
    // An earlier grammar error wins over a later lexical one.
    let err = parse("POP FROM q BOGUS 'abc").unwrap().unwrap_err();
    assert_eq!(err.position, Some(12));
    assert_eq!(
        parse("PUSH INTO q VALUES ($0)")
            .unwrap()
            .unwrap_err()
            .sqlstate
            .code(),
        "42P02"
    );
}

#[test]
fn positions_count_characters() {
    let err = parse("POP FROM \"ñandú\" LIMT 1").unwrap().unwrap_err();
    assert_eq!(err.position, Some(18));
}

#[test]
fn names_are_taken_exactly_as_written() {
    let Some(Ok(Statement::ShowPartitions { queue })) = parse("SHOW PARTITIONS FROM Orders-EU")
    else {
        panic!()
    };
    assert_eq!(queue, Value::Literal("Orders-EU".to_string()));
    for (sql, expected) in [
        ("POP FROM \"we\"\"ird\"", "we\"ird"),
        ("POP FROM 'it''s'", "it's"),
        ("POP FROM $$dollar$$", "dollar"),
        ("POP FROM billing.invoices:v2", "billing.invoices:v2"),
        ("POP FROM 42", "42"),
    ] {
        let Some(Ok(Statement::Pop(pop))) = parse(sql) else {
            panic!("{sql}")
        };
        assert_eq!(
            pop.queue(),
            Some(&Value::Literal(expected.to_string())),
            "{sql}"
        );
    }
}

#[test]
fn command_tags() {
    let tag = |sql: &str, rows| parse(sql).unwrap().unwrap().command_tag(rows);
    assert_eq!(tag("PUSH INTO q VALUES ('1'), ('2')", 2), "SELECT 2");
    assert_eq!(tag("POP FROM q", 0), "SELECT 0");
    assert_eq!(tag("KV PUT ns k '1' FOREVER", 1), "SELECT 1");
    assert_eq!(tag("CANCEL SCHEDULE k ON q", 1), "SELECT 1");
    assert_eq!(tag("CREATE QUEUE q", 0), "CREATE QUEUE");
    assert_eq!(tag("DROP GROUP g ON q", 0), "DROP GROUP");
}

#[test]
fn columns_follow_the_dialect() {
    let names = |sql: &str| -> Vec<(&str, Oid)> {
        parse(sql)
            .unwrap()
            .unwrap()
            .columns()
            .iter()
            .map(|c| (c.name, c.type_oid))
            .collect()
    };
    assert_eq!(
        names("PUSH INTO q VALUES ('1')"),
        vec![
            ("message_id", oid::UUID),
            ("queue", oid::TEXT),
            ("partition", oid::TEXT),
            ("offset", oid::INT8),
            ("transaction_id", oid::TEXT),
            ("status", oid::TEXT)
        ]
    );
    assert_eq!(
        names("POP FROM q")
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>(),
        [
            "receipt",
            "message_id",
            "queue",
            "partition",
            "offset",
            "payload",
            "transaction_id",
            "trace_id",
            "retry_count",
            "created_at",
            "lease_expires_at"
        ]
    );
    assert_eq!(
        names("ACK 'r'"),
        vec![("receipt", oid::TEXT), ("status", oid::TEXT)]
    );
    assert_eq!(
        names("RENEW 'r'"),
        vec![
            ("receipt", oid::TEXT),
            ("lease_expires_at", oid::TIMESTAMPTZ)
        ]
    );
    assert_eq!(
        names("KV LIST ns"),
        vec![
            ("namespace", oid::TEXT),
            ("key", oid::TEXT),
            ("value", oid::JSONB),
            ("version", oid::INT8),
            ("expires_at", oid::TIMESTAMPTZ)
        ]
    );
    assert_eq!(
        names("SHOW PARTITIONS FROM q"),
        vec![
            ("partition", oid::TEXT),
            ("messages", oid::INT8),
            ("last_offset", oid::INT8),
            ("last_write_at", oid::TIMESTAMPTZ)
        ]
    );
    assert!(names("DROP QUEUE q").is_empty());
}

const SAMPLES: &[&str] = &[
    "PUSH INTO \"q\" PARTITION 'p' (payload, transaction_id) VALUES ('{\"a\":[1,2]}', $1), ($2, NULL);",
    "POP FROM q GROUP g LIMIT 5 PARTITIONS 2 WAIT '1 minute' LEASE 30 AUTO ACK SUBSCRIBE FROM '2024-01-01'",
    "ACK 'r1', $1 FAILED REASON 'it''s broken'",
    "RENEW 'r' FOR '00:00:30'",
    "CREATE QUEUE IF NOT EXISTS q WITH (lease_time = '5m', retry_limit = 3, dead_letter_queue = on)",
    "ALTER QUEUE q SET (namespace = $1)",
    "SEEK GROUP g ON q PARTITION p TO TIMESTAMP '2024-01-01'",
    "KV PUT ns k $$[\"x\"]$$ TTL 'PT1H' EXPECT 3 /* c */",
    "KV LIST ns PREFIX 'a' AFTER 'b' LIMIT 10 -- c",
    "SCHEDULE INTO q KEY k AT '2030-01-01' VALUES ('{}')",
    "SHOW MESSAGES FROM q PARTITION p GROUP g FROM OFFSET 10 LIMIT 3",
    "SHOW MESSAGES FROM q FROM TIMESTAMP '2024-01-01 00:00:00+00'",
    "SHOW MESSAGE $1 FROM \"q\" GROUP 'g'",
    "SHOW LAGGING PARTITIONS ON q GROUP g OVER '5m'",
    "SHOW TRACE $$checkout-7$$",
    "REPLAY DLQ FROM q PARTITION p GROUP g WHERE REASON LIKE 'up%' LIMIT 50",
    "CREATE OR REPLACE STREAM s FROM q GROUP g WHERE (payload->>'a')::int > 1 KEY BY payload->>'k' WINDOW SLIDING '1m' EVERY 10 EVENT TIME (payload->>'t')::timestamptz ALLOWED LATENESS 5 ON LATE INCLUDE GRACE 1 IDLE FLUSH '5s' AGGREGATE (count(*) AS n, sum((payload->>'x')::numeric), first(payload)) INTO o PARTITION BY KEY RESET",
    "DROP STREAM IF EXISTS \"s\"",
    "ALTER STREAM $1 RESUME",
    "SHOW STREAM s",
];

#[test]
fn every_prefix_of_a_statement_parses_or_fails_without_panicking() {
    for sample in SAMPLES {
        assert!(matches!(parse(sample), Some(Ok(_))), "{sample}");
        for (end, _) in sample.char_indices() {
            let prefix = &sample[..end];
            if let Some(Err(err)) = parse(prefix) {
                let position = err.position.unwrap_or(1);
                assert!(position >= 1 && position <= prefix.chars().count() + 1);
            }
        }
    }
}

#[test]
fn arbitrary_input_never_panics() {
    const PIECES: &[&str] = &[
        "PUSH",
        "POP",
        "KV",
        "PUT",
        "GET",
        "SHOW",
        "QUEUES",
        "INTO",
        "FROM",
        "VALUES",
        "(",
        ")",
        ",",
        ";",
        "=",
        "'",
        "''",
        "\"",
        "$",
        "$1",
        "$$",
        "--",
        "/*",
        "*/",
        " ",
        "\n",
        "{",
        "}",
        "[",
        "]",
        "\\u",
        "é",
        "0",
        "-1",
        "99999999999999999999",
        "TTL",
        "FOREVER",
        "LIMIT",
        "WAIT",
        "'5s'",
        "'{\"a\":'",
        "NULL",
        "AUTO",
        "ACK",
        "CREATE",
        "QUEUE",
        "WITH",
        "lease_time",
        "SCHEDULE",
        "KEY",
        "AT",
        "AFTER",
        "\u{0}",
        ":",
        ".",
        "x",
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let length = next() % 12;
        let mut sql = String::new();
        for _ in 0..length {
            sql.push_str(PIECES[(next() % PIECES.len() as u64) as usize]);
            if next() % 2 == 0 {
                sql.push(' ');
            }
        }
        let _ = parse(&sql);
    }
}

#[test]
fn param_count_and_types() {
    let statement = parse("PUSH INTO q VALUES ($2)").unwrap().unwrap();
    assert_eq!(statement.param_count(), 2);
    assert_eq!(statement.param_type(1), oid::TEXT);
    assert_eq!(statement.param_type(2), oid::JSONB);
    assert_eq!(statement.param_type(3), oid::TEXT);
    assert_eq!(statement.param_type(0), oid::TEXT);
    let statement = parse("SHOW QUEUES").unwrap().unwrap();
    assert_eq!(statement.param_count(), 0);
    let statement = parse("PUSH INTO $1 VALUES ($1)").unwrap().unwrap();
    assert_eq!(statement.param_types(), vec![oid::TEXT]);
}
