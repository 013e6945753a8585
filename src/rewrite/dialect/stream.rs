//! Streams: `CREATE [OR REPLACE] STREAM … [RESET]`, `DROP STREAM`,
//! `ALTER STREAM … PAUSE | RESUME`, `SHOW STREAMS`, `SHOW STREAM name`
//! (docs/streams.md). PostgreSQL 15 has no STREAM object, so none of these
//! texts is a statement it accepts (`CREATE STREAM` is a syntax error
//! there; `SHOW streams` alone would be an unknown parameter).
//!
//! The user's expressions (WHERE, KEY BY, EVENT TIME, aggregate arguments)
//! are PostgreSQL expressions over `payload`, `partition`, `created_at` and
//! `transaction_id`. This parser never interprets them: it only finds
//! where each ends (balanced parentheses, quotes and comments by the
//! lexer, and the next clause keyword at depth 0) and keeps the text as
//! written. PostgreSQL validates them at CREATE (`engine/streams`).

use super::cursor::{Cursor, Result};
use super::error::{ParseError, SqlState};
use super::lexer::TokenKind;
use super::value::ParamTypes;
use super::{oid, Column, Name, Statement, Value};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Window {
    Tumbling(Value<Duration>),
    Sliding {
        size: Value<Duration>,
        every: Value<Duration>,
    },
    Session {
        gap: Value<Duration>,
    },
}

/// An aggregate as stored. `Min`/`Max` are numeric; the engine turns them
/// into `MinText`, `MinTime`, … at CREATE by the argument's type, which
/// PostgreSQL tells it (those are never written by a user).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFn {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    First,
    Last,
    /// `reduce(fn, init)`: a fold of the payloads over a user function.
    Reduce,
    MinText,
    MaxText,
    MinTime,
    MaxTime,
}

impl AggFn {
    pub fn name(self) -> &'static str {
        match self {
            AggFn::Count => "count",
            AggFn::Sum => "sum",
            AggFn::Min => "min",
            AggFn::Max => "max",
            AggFn::Avg => "avg",
            AggFn::First => "first",
            AggFn::Last => "last",
            AggFn::Reduce => "reduce",
            AggFn::MinText => "min_text",
            AggFn::MaxText => "max_text",
            AggFn::MinTime => "min_timestamptz",
            AggFn::MaxTime => "max_timestamptz",
        }
    }

    /// A stored name (`queen.streams.agg_fns`).
    pub fn from_name(name: &str) -> Option<AggFn> {
        Some(match name.to_ascii_lowercase().as_str() {
            "min_text" => AggFn::MinText,
            "max_text" => AggFn::MaxText,
            "min_timestamptz" => AggFn::MinTime,
            "max_timestamptz" => AggFn::MaxTime,
            other => return AggFn::from_keyword(other),
        })
    }

    /// What a user may write in AGGREGATE (…).
    pub fn from_keyword(name: &str) -> Option<AggFn> {
        Some(match name.to_ascii_lowercase().as_str() {
            "count" => AggFn::Count,
            "sum" => AggFn::Sum,
            "min" => AggFn::Min,
            "max" => AggFn::Max,
            "avg" => AggFn::Avg,
            "first" => AggFn::First,
            "last" => AggFn::Last,
            "reduce" => AggFn::Reduce,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregate {
    pub func: AggFn,
    /// `None` for `count(*)`; for `reduce` the function's name as written.
    pub arg: Option<String>,
    /// `reduce`'s initial state: a PostgreSQL expression (cast to jsonb).
    pub init: Option<String>,
    /// The member of the emitted JSON object.
    pub alias: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTime {
    pub expr: String,
    pub lateness: Option<Value<Duration>>,
    /// `ON LATE INCLUDE` (default `DROP`).
    pub include_late: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateStream {
    pub or_replace: bool,
    pub reset: bool,
    pub name: Name,
    pub source: Name,
    pub group: Option<Name>,
    /// Where the stream's group starts when it is first seen (`None`: from
    /// the beginning), as for POP.
    pub subscribe: Option<super::pop::SubscribeFrom>,
    pub where_expr: Option<String>,
    pub key_expr: Option<String>,
    pub window: Window,
    pub event_time: Option<EventTime>,
    pub grace: Option<Value<Duration>>,
    pub idle_flush: Option<Value<Duration>>,
    pub aggregates: Vec<Aggregate>,
    pub sink: Name,
    pub partition_by_key: bool,
}

/// `SHOW STREAMS`: one row per stream of the tenant.
pub const LIST_COLUMNS: &[Column] = &[
    Column::new("stream", oid::TEXT),
    Column::new("source", oid::TEXT),
    Column::new("consumer_group", oid::TEXT),
    Column::new("sink", oid::TEXT),
    Column::new("window", oid::TEXT),
    Column::new("paused", oid::BOOL),
    Column::new("partitions", oid::INT8),
    Column::new("open_windows", oid::INT8),
    Column::new("messages", oid::INT8),
    Column::new("windows_emitted", oid::INT8),
    Column::new("late_dropped", oid::INT8),
    Column::new("lag", oid::INT8),
    Column::new("last_error", oid::TEXT),
    Column::new("definition", oid::TEXT),
];

/// `SHOW STREAM name`: one row per window open now.
pub const SHOW_COLUMNS: &[Column] = &[
    Column::new("partition", oid::TEXT),
    Column::new("key", oid::TEXT),
    Column::new("window_start", oid::TIMESTAMPTZ),
    Column::new("window_end", oid::TIMESTAMPTZ),
    Column::new("state", oid::JSONB),
    Column::new("late", oid::BOOL),
    Column::new("stream_time", oid::TIMESTAMPTZ),
    Column::new("lag", oid::INT8),
];

/// Members every emitted window has; an aggregate may not take their names.
pub const RESERVED_MEMBERS: &[&str] = &["key", "window_start", "window_end", "late"];

/// Where an expression ends: a clause keyword at depth 0 (two words where
/// one alone could be a column or function name).
fn clause_starts(cursor: &Cursor<'_>) -> bool {
    let t = cursor.peek();
    let next = cursor.peek_ahead(1);
    (t.is_keyword("KEY") && next.is_keyword("BY"))
        || t.is_keyword("WINDOW")
        || (t.is_keyword("EVENT") && next.is_keyword("TIME"))
        || (t.is_keyword("ALLOWED") && next.is_keyword("LATENESS"))
        || (t.is_keyword("ON") && next.is_keyword("LATE"))
        || t.is_keyword("GRACE")
        || (t.is_keyword("IDLE") && next.is_keyword("FLUSH"))
        || t.is_keyword("AGGREGATE")
        || t.is_keyword("INTO")
}

/// An expression's text: tokens up to the next clause keyword at depth 0
/// (`in_parens`: up to the `)` or `,` that closes it), balanced.
fn expression(cursor: &mut Cursor<'_>, what: &str, in_parens: bool) -> Result<String> {
    let first = cursor.peek().clone();
    let mut depth = 0usize;
    let mut end = first.start;
    loop {
        let token = cursor.peek().clone();
        match &token.kind {
            TokenKind::Eof | TokenKind::Semicolon => break,
            TokenKind::RightParen | TokenKind::Comma if depth == 0 && in_parens => break,
            TokenKind::RightParen if depth == 0 => return Err(cursor.unexpected(what)),
            TokenKind::RightParen => depth -= 1,
            TokenKind::LeftParen => depth += 1,
            TokenKind::Param(_) => {
                return Err(ParseError::new(
                    SqlState::SYNTAX_ERROR,
                    format!(
                    "a parameter cannot stand in {what}: the expression is stored with the stream"
                ),
                )
                .at(cursor.position(&token)))
            }
            _ if depth == 0 && !in_parens && clause_starts(cursor) => break,
            _ => {}
        }
        end = token.end;
        cursor.advance();
    }
    if depth != 0 {
        return Err(cursor.unexpected("')'"));
    }
    let text = cursor.slice(first.start, end).trim();
    if text.is_empty() {
        return Err(cursor.unexpected(what));
    }
    Ok(text.to_string())
}

fn alias(cursor: &mut Cursor<'_>) -> Result<String> {
    let token = cursor.peek().clone();
    let text = match &token.kind {
        TokenKind::Word(w) => (*w).to_string(),
        TokenKind::QuotedIdent(t) => t.clone(),
        _ => return Err(cursor.unexpected("an aggregate's name after AS")),
    };
    cursor.advance();
    Ok(text)
}

/// `reduce`'s function: a (schema-qualified) name, as written; PostgreSQL
/// resolves it. Anything else is refused here, as it is pasted before an
/// argument list.
fn function_name(cursor: &mut Cursor<'_>) -> Result<String> {
    let first = cursor.peek().clone();
    let mut end = first.start;
    while matches!(
        cursor.peek().kind,
        TokenKind::Word(_) | TokenKind::QuotedIdent(_) | TokenKind::Symbol('.')
    ) {
        end = cursor.peek().end;
        cursor.advance();
    }
    let text = cursor.slice(first.start, end).trim().to_string();
    if !qualified_name(&text) {
        return Err(ParseError::new(
            SqlState::SYNTAX_ERROR,
            "reduce takes a function's name, then ',' and the initial state: reduce(my_fn, '{}')",
        )
        .at(cursor.position(&first)));
    }
    Ok(text)
}

/// `name` or `"quoted name"`, joined by dots.
fn qualified_name(text: &str) -> bool {
    let mut chars = text.chars().peekable();
    loop {
        match chars.next() {
            Some('"') => {
                let mut empty = true;
                loop {
                    match chars.next() {
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                        }
                        Some('"') => break,
                        Some(_) => {}
                        None => return false,
                    }
                    empty = false;
                }
                if empty {
                    return false;
                }
            }
            Some(c) if c.is_alphabetic() || c == '_' => {
                while chars
                    .peek()
                    .is_some_and(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                {
                    chars.next();
                }
            }
            _ => return false,
        }
        match chars.next() {
            None => return true,
            Some('.') => {}
            Some(_) => return false,
        }
    }
}

fn aggregates(cursor: &mut Cursor<'_>) -> Result<Vec<Aggregate>> {
    cursor.expect(&TokenKind::LeftParen, "'(' after AGGREGATE")?;
    let mut out: Vec<Aggregate> = Vec::new();
    loop {
        let at = cursor.peek().clone();
        let func = match &at.kind {
            TokenKind::Word(w) => AggFn::from_keyword(w),
            _ => None,
        }
        .ok_or_else(|| {
            cursor.unexpected("an aggregate: count, sum, min, max, avg, first, last or reduce")
        })?;
        cursor.advance();
        cursor.expect(&TokenKind::LeftParen, "'('")?;
        let mut init = None;
        let arg = if func == AggFn::Reduce {
            let name = function_name(cursor)?;
            cursor.expect(&TokenKind::Comma, "',' and reduce's initial state")?;
            init = Some(expression(cursor, "reduce's initial state", true)?);
            Some(name)
        } else if cursor.peek().kind == TokenKind::Symbol('*') {
            if func != AggFn::Count {
                return Err(cursor.unexpected("an expression (only count takes *)"));
            }
            cursor.advance();
            None
        } else {
            Some(expression(cursor, "an aggregate's argument", true)?)
        };
        cursor.expect(&TokenKind::RightParen, "')'")?;
        let alias = if cursor.eat_keyword("AS") {
            alias(cursor)?
        } else {
            func.name().to_string()
        };
        if RESERVED_MEMBERS.contains(&alias.as_str()) || out.iter().any(|a| a.alias == alias) {
            return Err(ParseError::new(
                SqlState::DUPLICATE_COLUMN,
                format!("aggregate name \"{alias}\" is used twice or is one of key, window_start, window_end, late: give it another with AS"),
            )
            .at(cursor.position(&at)));
        }
        out.push(Aggregate {
            func,
            arg,
            init,
            alias,
        });
        if !cursor.eat(&TokenKind::Comma) {
            break;
        }
    }
    cursor.expect(&TokenKind::RightParen, "')' or ','")?;
    Ok(out)
}

fn window(cursor: &mut Cursor<'_>) -> Result<Window> {
    cursor.expect_keyword("WINDOW")?;
    if cursor.eat_keyword("TUMBLING") {
        return Ok(Window::Tumbling(cursor.duration("TUMBLING")?));
    }
    if cursor.eat_keyword("SLIDING") {
        let size = cursor.duration("SLIDING")?;
        cursor.expect_keyword("EVERY")?;
        let every = cursor.duration("EVERY")?;
        return Ok(Window::Sliding { size, every });
    }
    if cursor.eat_keyword("SESSION") {
        cursor.expect_keyword("GAP")?;
        return Ok(Window::Session {
            gap: cursor.duration("GAP")?,
        });
    }
    Err(cursor.unexpected("TUMBLING, SLIDING or SESSION"))
}

impl CreateStream {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<Statement> {
        cursor.expect_keyword("CREATE")?;
        let or_replace = cursor.eat_keyword("OR");
        if or_replace {
            cursor.expect_keyword("REPLACE")?;
        }
        cursor.expect_keyword("STREAM")?;
        let name = cursor.name("stream")?;
        cursor.expect_keyword("FROM")?;
        let source = cursor.name("queue")?;
        let group = if cursor.eat_keyword("GROUP") {
            Some(cursor.name("group")?)
        } else {
            None
        };
        let subscribe = if cursor.eat_keyword("SUBSCRIBE") {
            cursor.expect_keyword("FROM")?;
            Some(super::pop::parse_subscribe_from(cursor)?)
        } else {
            None
        };
        let where_expr = if cursor.eat_keyword("WHERE") {
            Some(expression(cursor, "a WHERE predicate", false)?)
        } else {
            None
        };
        let key_expr = if cursor.peek_keyword("KEY") {
            cursor.advance();
            cursor.expect_keyword("BY")?;
            Some(expression(cursor, "a KEY BY expression", false)?)
        } else {
            None
        };
        let window = window(cursor)?;
        let event_time = if cursor.peek_keyword("EVENT") {
            cursor.advance();
            cursor.expect_keyword("TIME")?;
            let expr = expression(cursor, "an EVENT TIME expression", false)?;
            let lateness = if cursor.eat_keyword("ALLOWED") {
                cursor.expect_keyword("LATENESS")?;
                Some(cursor.duration("ALLOWED LATENESS")?)
            } else {
                None
            };
            let mut include_late = false;
            if cursor.eat_keyword("ON") {
                cursor.expect_keyword("LATE")?;
                if cursor.eat_keyword("INCLUDE") {
                    include_late = true;
                } else {
                    cursor.expect_keyword("DROP")?;
                }
            }
            Some(EventTime {
                expr,
                lateness,
                include_late,
            })
        } else {
            None
        };
        let grace = if cursor.eat_keyword("GRACE") {
            Some(cursor.duration("GRACE")?)
        } else {
            None
        };
        let idle_flush = if cursor.eat_keyword("IDLE") {
            cursor.expect_keyword("FLUSH")?;
            Some(cursor.duration("IDLE FLUSH")?)
        } else {
            None
        };
        cursor.expect_keyword("AGGREGATE")?;
        let aggregates = aggregates(cursor)?;
        cursor.expect_keyword("INTO")?;
        let sink = cursor.name("queue")?;
        let mut partition_by_key = false;
        if cursor.eat_keyword("PARTITION") {
            cursor.expect_keyword("BY")?;
            cursor.expect_keyword("KEY")?;
            partition_by_key = true;
        }
        let reset_at = cursor.peek().clone();
        let reset = cursor.eat_keyword("RESET");
        if reset && !or_replace {
            return Err(ParseError::new(
                SqlState::SYNTAX_ERROR,
                "RESET goes with CREATE OR REPLACE STREAM",
            )
            .at(cursor.position(&reset_at)));
        }
        Ok(Statement::CreateStream(Box::new(CreateStream {
            or_replace,
            reset,
            name,
            source,
            group,
            subscribe,
            where_expr,
            key_expr,
            window,
            event_time,
            grace,
            idle_flush,
            aggregates,
            sink,
            partition_by_key,
        })))
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.name, oid::TEXT);
        params.note(&self.source, oid::TEXT);
        params.note_all(&self.group, oid::TEXT);
        if let Some(super::pop::SubscribeFrom::Timestamp(ts)) = &self.subscribe {
            params.note(ts, oid::TIMESTAMPTZ);
        }
        match &self.window {
            Window::Tumbling(size) => params.note(size, oid::TEXT),
            Window::Sliding { size, every } => {
                params.note(size, oid::TEXT);
                params.note(every, oid::TEXT);
            }
            Window::Session { gap } => params.note(gap, oid::TEXT),
        }
        if let Some(et) = &self.event_time {
            params.note_all(&et.lateness, oid::TEXT);
        }
        params.note_all(&self.grace, oid::TEXT);
        params.note_all(&self.idle_flush, oid::TEXT);
        params.note(&self.sink, oid::TEXT);
    }
}

/// `DROP STREAM [IF EXISTS] name`.
pub(crate) fn parse_drop(cursor: &mut Cursor<'_>) -> Result<Statement> {
    cursor.expect_keyword("DROP")?;
    cursor.expect_keyword("STREAM")?;
    let if_exists = cursor.eat_keyword("IF");
    if if_exists {
        cursor.expect_keyword("EXISTS")?;
    }
    let name = cursor.name("stream")?;
    Ok(Statement::DropStream { name, if_exists })
}

/// `ALTER STREAM name PAUSE | RESUME`.
pub(crate) fn parse_alter(cursor: &mut Cursor<'_>) -> Result<Statement> {
    cursor.expect_keyword("ALTER")?;
    cursor.expect_keyword("STREAM")?;
    let name = cursor.name("stream")?;
    let paused = if cursor.eat_keyword("PAUSE") {
        true
    } else if cursor.eat_keyword("RESUME") {
        false
    } else {
        return Err(cursor.unexpected("PAUSE or RESUME"));
    };
    Ok(Statement::AlterStream { name, paused })
}

/// `SHOW STREAMS`, `SHOW STREAM name`.
pub(crate) fn parse_show(cursor: &mut Cursor<'_>) -> Result<Statement> {
    cursor.expect_keyword("SHOW")?;
    if cursor.eat_keyword("STREAMS") {
        return Ok(Statement::ShowStreams);
    }
    cursor.expect_keyword("STREAM")?;
    let name = cursor.name("stream")?;
    Ok(Statement::ShowStream { name })
}

#[cfg(test)]
mod tests;
