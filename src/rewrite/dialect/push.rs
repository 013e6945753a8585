//! `PUSH INTO queue [PARTITION part] [(column, ...)] VALUES (expr, ...) [, (expr, ...) ...]`

use super::cursor::{Cursor, Result};
use super::error::{quoted, ParseError, SqlState};
use super::lexer::{Token, TokenKind};
use super::value::{Json, Name, ParamTypes, Value, MAX_BATCH};
use super::{oid, Column};

/// One row per message, in input order.
pub const COLUMNS: &[Column] = &[
    Column::new("message_id", oid::UUID),
    Column::new("queue", oid::TEXT),
    Column::new("partition", oid::TEXT),
    Column::new("offset", oid::INT8),
    Column::new("transaction_id", oid::TEXT),
    Column::new("status", oid::TEXT),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Push {
    pub queue: Name,
    /// The statement's `PARTITION` clause, already folded into each row.
    pub partition: Option<Name>,
    /// At least one, at most 10,000.
    pub rows: Vec<PushRow>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushRow {
    /// JSON text; a literal is valid JSON.
    pub payload: Json,
    /// The row's `partition` column when given and not NULL, else the
    /// statement's `PARTITION` clause; `None` means partition `Default`.
    pub partition: Option<Name>,
    /// `None`: absent or NULL (no deduplication for this message).
    pub transaction_id: Option<Value<String>>,
    pub trace_id: Option<Value<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PushColumn {
    Payload,
    Partition,
    TransactionId,
    TraceId,
}

impl PushColumn {
    const ALL: [(PushColumn, &'static str); 4] = [
        (PushColumn::Payload, "payload"),
        (PushColumn::Partition, "partition"),
        (PushColumn::TransactionId, "transaction_id"),
        (PushColumn::TraceId, "trace_id"),
    ];
}

impl Push {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<Push> {
        cursor.expect_keyword("PUSH")?;
        cursor.expect_keyword("INTO")?;
        let queue = cursor.name("queue")?;
        let partition = if cursor.eat_keyword("PARTITION") {
            Some(cursor.name("partition")?)
        } else {
            None
        };
        let columns = if cursor.peek().kind == TokenKind::LeftParen {
            parse_columns(cursor)?
        } else {
            vec![PushColumn::Payload]
        };
        cursor.expect_keyword("VALUES")?;
        let mut rows = Vec::new();
        loop {
            if rows.len() >= MAX_BATCH as usize {
                return Err(ParseError::new(
                    SqlState::PROGRAM_LIMIT_EXCEEDED,
                    format!("too many rows in one PUSH: at most {MAX_BATCH}"),
                )
                .at(cursor.position(cursor.peek())));
            }
            rows.push(parse_row(cursor, &columns, partition.as_ref())?);
            if !cursor.eat(&TokenKind::Comma) {
                break;
            }
        }
        Ok(Push {
            queue,
            partition,
            rows,
        })
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.queue, oid::TEXT);
        params.note_all(&self.partition, oid::TEXT);
        for row in &self.rows {
            params.note(&row.payload, oid::JSONB);
            params.note_all(&row.partition, oid::TEXT);
            params.note_all(&row.transaction_id, oid::TEXT);
            params.note_all(&row.trace_id, oid::TEXT);
        }
    }
}

fn parse_columns(cursor: &mut Cursor<'_>) -> Result<Vec<PushColumn>> {
    cursor.expect(&TokenKind::LeftParen, "\"(\"")?;
    let mut columns = Vec::new();
    loop {
        let token = cursor.peek().clone();
        // Unquoted column names fold like PostgreSQL's; quoted ones must match exactly.
        let column = match &token.kind {
            TokenKind::Word(word) => PushColumn::ALL
                .iter()
                .find(|(_, name)| name.eq_ignore_ascii_case(word)),
            TokenKind::QuotedIdent(text) => PushColumn::ALL.iter().find(|(_, name)| name == text),
            _ => return Err(cursor.unexpected("a column name")),
        };
        let Some(&(column, name)) = column else {
            return Err(ParseError::new(
                SqlState::UNDEFINED_COLUMN,
                format!(
                    "column {} does not exist; PUSH columns are payload, partition, transaction_id, trace_id",
                    quoted(cursor.text(&token))
                ),
            )
            .at(cursor.position(&token)));
        };
        if columns.contains(&column) {
            return Err(ParseError::new(
                SqlState::DUPLICATE_COLUMN,
                format!("column \"{name}\" specified more than once"),
            )
            .at(cursor.position(&token)));
        }
        columns.push(column);
        cursor.advance();
        if !cursor.eat(&TokenKind::Comma) {
            break;
        }
    }
    cursor.expect(&TokenKind::RightParen, "\",\" or \")\"")?;
    if !columns.contains(&PushColumn::Payload) {
        return Err(ParseError::new(
            SqlState::SYNTAX_ERROR,
            "the PUSH column list must include payload",
        )
        .at(cursor.position(cursor.peek())));
    }
    Ok(columns)
}

/// `$n`, a string literal, or NULL (`None`).
fn nullable_text(cursor: &mut Cursor<'_>, column: &str) -> Result<Option<Value<String>>> {
    if cursor.eat_keyword("NULL") {
        return Ok(None);
    }
    cursor
        .text_value(&format!("a string literal, parameter or NULL for {column}"))
        .map(Some)
}

fn parse_row(
    cursor: &mut Cursor<'_>,
    columns: &[PushColumn],
    statement_partition: Option<&Name>,
) -> Result<PushRow> {
    let open = cursor.peek().clone();
    cursor.expect(&TokenKind::LeftParen, "\"(\" before a row of VALUES")?;
    let mut payload = None;
    let mut partition = None;
    let mut transaction_id = None;
    let mut trace_id = None;
    for (index, column) in columns.iter().enumerate() {
        if index > 0 && !cursor.eat(&TokenKind::Comma) {
            return Err(arity_error(cursor, &open, columns.len()));
        }
        if cursor.peek().kind == TokenKind::RightParen {
            return Err(arity_error(cursor, &open, columns.len()));
        }
        match column {
            PushColumn::Payload => {
                if cursor.peek_keyword("NULL") {
                    return Err(ParseError::new(
                        SqlState::INVALID_PARAMETER_VALUE,
                        "payload must not be NULL (the JSON value 'null' is allowed)",
                    )
                    .at(cursor.position(cursor.peek())));
                }
                payload = Some(cursor.json("payload")?);
            }
            PushColumn::Partition => {
                if !cursor.eat_keyword("NULL") {
                    partition = Some(cursor.name("partition")?);
                }
            }
            PushColumn::TransactionId => transaction_id = nullable_text(cursor, "transaction_id")?,
            PushColumn::TraceId => trace_id = nullable_text(cursor, "trace_id")?,
        }
    }
    if cursor.peek().kind == TokenKind::Comma {
        return Err(arity_error(cursor, &open, columns.len()));
    }
    cursor.expect(&TokenKind::RightParen, "\")\" after a row of VALUES")?;
    let Some(payload) = payload else {
        return Err(arity_error(cursor, &open, columns.len()));
    };
    Ok(PushRow {
        payload,
        partition: partition.or_else(|| statement_partition.cloned()),
        transaction_id,
        trace_id,
    })
}

fn arity_error(cursor: &Cursor<'_>, open: &Token<'_>, expected: usize) -> ParseError {
    ParseError::new(
        SqlState::SYNTAX_ERROR,
        format!("each VALUES row must have {expected} expression(s), one per column"),
    )
    .at(cursor.position(open))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, lit};
    use super::super::{parse, Statement};
    use super::*;

    fn push(sql: &str) -> Push {
        match parse(sql) {
            Some(Ok(Statement::Push(push))) => push,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn single_payload() {
        let push = push(r#"PUSH INTO orders VALUES ('{"id": 1}')"#);
        assert_eq!(push.queue, lit("orders"));
        assert_eq!(push.partition, None);
        assert_eq!(
            push.rows,
            vec![PushRow {
                payload: lit(r#"{"id": 1}"#),
                partition: None,
                transaction_id: None,
                trace_id: None,
            }]
        );
    }

    #[test]
    fn partition_clause_applies_to_every_row() {
        let push = push("push into orders-eu partition 42 values ('1'), ('2');");
        assert_eq!(push.queue, lit("orders-eu"));
        assert_eq!(push.partition, Some(lit("42")));
        assert_eq!(push.rows.len(), 2);
        assert!(push.rows.iter().all(|row| row.partition == Some(lit("42"))));
    }

    #[test]
    fn column_list_in_any_order_with_nulls() {
        let push = push(
            "PUSH INTO q PARTITION p (transaction_id, payload, partition, trace_id) \
             VALUES ('tx-1', '{}', 'eu', NULL), (NULL, 'null', NULL, 'tr')",
        );
        assert_eq!(push.rows[0].transaction_id, Some(lit("tx-1")));
        assert_eq!(push.rows[0].payload, lit("{}"));
        assert_eq!(push.rows[0].partition, Some(lit("eu")));
        assert_eq!(push.rows[0].trace_id, None);
        assert_eq!(push.rows[1].transaction_id, None);
        assert_eq!(push.rows[1].payload, lit("null"));
        assert_eq!(push.rows[1].partition, Some(lit("p")));
        assert_eq!(push.rows[1].trace_id, Some(lit("tr")));
    }

    #[test]
    fn parameters_everywhere() {
        let sql = "PUSH INTO $1 PARTITION $2 (payload, transaction_id) VALUES ($3, $4)";
        let push = push(sql);
        assert_eq!(push.queue, Value::Param(1));
        assert_eq!(push.rows[0].payload, Value::Param(3));
        let Some(Ok(statement)) = parse(sql) else {
            panic!()
        };
        assert_eq!(statement.param_count(), 4);
        assert_eq!(
            statement.param_types(),
            vec![oid::TEXT, oid::TEXT, oid::JSONB, oid::TEXT]
        );
    }

    #[test]
    fn bad_json_is_22p02_at_the_literal() {
        assert_eq!(
            error("PUSH INTO q VALUES ('{}'), ('{bad')"),
            ("22P02", Some(29))
        );
        let Some(Err(err)) = parse("PUSH INTO q VALUES ('[1,]')") else {
            panic!()
        };
        assert!(err
            .message
            .starts_with("invalid input syntax for type json"));
    }

    #[test]
    fn payload_must_be_a_string_or_parameter() {
        assert_eq!(error("PUSH INTO q VALUES (NULL)"), ("22023", Some(21)));
        assert_eq!(error("PUSH INTO q VALUES (42)"), ("42601", Some(21)));
        assert_eq!(error("PUSH INTO q VALUES ()"), ("42601", Some(20)));
    }

    #[test]
    fn row_arity_must_match_the_columns() {
        assert_eq!(error("PUSH INTO q VALUES ('1', '2')"), ("42601", Some(20)));
        assert_eq!(
            error("PUSH INTO q (payload, trace_id) VALUES ('1'), ('2', 't')"),
            ("42601", Some(40))
        );
    }

    #[test]
    fn column_list_errors() {
        assert_eq!(
            error("PUSH INTO q (payload, body) VALUES ('1', '2')"),
            ("42703", Some(23))
        );
        assert_eq!(
            error("PUSH INTO q (payload, PAYLOAD) VALUES ('1', '2')"),
            ("42701", Some(23))
        );
        assert_eq!(
            error("PUSH INTO q (trace_id) VALUES ('1')"),
            ("42601", Some(24))
        );
    }

    #[test]
    fn at_most_10000_rows() {
        let rows = vec!["('1')"; 10_000].join(",");
        assert_eq!(
            push(&format!("PUSH INTO q VALUES {rows}")).rows.len(),
            10_000
        );
        let over = format!("PUSH INTO q VALUES {rows},('1')");
        assert_eq!(error(&over).0, "54000");
    }

    #[test]
    fn missing_pieces_are_syntax_errors() {
        assert_eq!(error("PUSH"), ("42601", Some(5)));
        assert_eq!(error("PUSH q VALUES ('1')"), ("42601", Some(6)));
        assert_eq!(error("PUSH INTO q"), ("42601", Some(12)));
        assert_eq!(error("PUSH INTO q VALUES ('1') extra"), ("42601", Some(26)));
        assert_eq!(
            error("PUSH INTO q VALUES ('1'); SELECT 1"),
            ("42601", Some(27))
        );
    }
}
