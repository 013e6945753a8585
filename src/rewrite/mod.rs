//! Text → a typed command → typed calls: one of the dialect's statements,
//! or plain SQL to pass through; `$n` bound to typed values ([`bind`]); and
//! the `queen.*` calls that carry a statement out ([`build`], filling the
//! declarations of [`crate::calls`]). Owns the grammar and every
//! statement's result columns (for Describe).
//!
//! Pure: no I/O, no connection, nothing of the engine's state (receipt
//! keys, framing, fusion) or of the wire. A statement that is valid
//! PostgreSQL is never taken by the dialect.

pub mod bind;
pub mod build;
pub mod dialect;
pub mod effect;
pub mod passthrough;
mod scan;
pub mod split;
pub mod statement_names;

pub use passthrough::SessionEffect;
use std::sync::Arc;

/// What one statement is.
#[derive(Debug, Clone)]
pub enum Command {
    /// Plain SQL for PostgreSQL, and what it does to the session.
    Passthrough(SessionEffect),
    /// A queue or KV statement for the engine.
    Dialect(Arc<dialect::Statement>),
    /// A dialect statement that does not parse.
    Invalid(dialect::ParseError),
}

/// Classifies one statement's text.
pub fn classify(sql: &str) -> Command {
    match dialect::parse(sql) {
        None => Command::Passthrough(passthrough::session_effect(sql)),
        Some(Ok(stmt)) => Command::Dialect(Arc::new(stmt)),
        Some(Err(e)) => Command::Invalid(e),
    }
}

/// Classifies every statement of a simple-query message. Error positions
/// are made relative to the whole message.
pub fn classify_script(sql: &str) -> Vec<(std::ops::Range<usize>, Command)> {
    // Character offsets are counted incrementally: a script of many
    // statements must cost time in proportion to its length.
    let mut counted_bytes = 0;
    let mut counted_chars = 0;
    split::split_statements(sql)
        .into_iter()
        .map(|r| {
            let mut c = classify(&sql[r.clone()]);
            if let Command::Invalid(e) = &mut c {
                counted_chars += sql[counted_bytes..r.start].chars().count();
                counted_bytes = r.start;
                e.position = e.position.map(|p| p + counted_chars);
            }
            (r, c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_mix_dialect_and_plain_sql() {
        let cmds = classify_script("BEGIN; PUSH INTO q VALUES ('1'); SELECT 1; POP FROM");
        assert!(matches!(
            cmds[0].1,
            Command::Passthrough(SessionEffect::None)
        ));
        assert!(matches!(cmds[1].1, Command::Dialect(_)));
        assert!(matches!(cmds[2].1, Command::Passthrough(_)));
        let Command::Invalid(e) = &cmds[3].1 else {
            panic!("{:?}", cmds[3].1)
        };
        // POP starts at character 43; the error is past its end.
        assert!(e.position.unwrap() > 43, "{e:?}");
    }
}
