//! Text → a typed command: one of the dialect's statements, or plain SQL to
//! pass through. Pure: no I/O.

pub mod dialect;
pub mod passthrough;
pub mod split;

pub use passthrough::SessionEffect;

/// What one statement is.
#[derive(Debug)]
pub enum Command {
    /// Plain SQL for PostgreSQL, and what it does to the session.
    Passthrough(SessionEffect),
}

/// Classifies one statement's text.
pub fn classify(sql: &str) -> Command {
    Command::Passthrough(passthrough::session_effect(sql))
}

/// Classifies every statement of a simple-query message.
pub fn classify_script(sql: &str) -> Vec<(std::ops::Range<usize>, Command)> {
    split::split_statements(sql)
        .into_iter()
        .map(|r| {
            let c = classify(&sql[r.clone()]);
            (r, c)
        })
        .collect()
}
