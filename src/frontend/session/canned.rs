//! Answers the proxy gives on its own, kept apart from the handlers: the
//! errors for bounds, refusals and missing objects, as PostgreSQL words
//! them where it has an equivalent.

use crate::protocol::SqlError;
use crate::protocol::SqlState;

/// `54000` for a per-session bound of the proxy's memory.
pub fn session_limit(what: &str, count: usize, bytes: usize, of: &str, hint: &str) -> SqlError {
    let mut err = SqlError::error(
        SqlState::PROGRAM_LIMIT_EXCEEDED,
        format!(
            "too many {what} in this session (at most {count}, {} MiB {of})",
            bytes >> 20
        ),
    );
    err.hint = Some(hint.into());
    err
}

/// A user whose policy is `none` may run dialect statements only.
pub fn passthrough_refused() -> SqlError {
    SqlError::error(
        SqlState::INSUFFICIENT_PRIVILEGE,
        "plain SQL is not allowed for this user (passthrough policy none): only queenwire statements",
    )
}

pub fn missing_statement(name: &str) -> SqlError {
    let message = if name.is_empty() {
        "unnamed prepared statement does not exist".to_string()
    } else {
        format!("prepared statement \"{name}\" does not exist")
    };
    SqlError::error(SqlState::INVALID_SQL_STATEMENT_NAME, message)
}

/// A Bind whose parameter count is not its statement's, worded as
/// PostgreSQL words it.
pub fn bind_count(supplied: usize, name: &str, required: usize) -> SqlError {
    SqlError::error(
        SqlState::PROTOCOL_VIOLATION,
        format!(
            "bind message supplies {supplied} parameters, but prepared statement \"{name}\" requires {required}"
        ),
    )
}

/// `PREPARE` of a name the proxy gives clients' protocol-level statements
/// on its backend connections, worded as PostgreSQL refuses a reserved
/// role name.
pub fn reserved_statement_name(name: &str) -> SqlError {
    let mut err = SqlError::error(
        SqlState::RESERVED_NAME,
        format!("prepared statement name \"{name}\" is reserved"),
    );
    err.detail = Some(
        "queenwire gives names with this prefix to clients' protocol-level statements on its backend connections."
            .into(),
    );
    err
}

pub fn missing_portal(name: &str) -> SqlError {
    SqlError::error(
        SqlState::INVALID_CURSOR_NAME,
        format!("portal \"{name}\" does not exist"),
    )
}

/// A portal that ran to completion, executed again.
pub fn portal_cannot_run(name: &str) -> SqlError {
    SqlError::error(
        SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("portal \"{name}\" cannot be run"),
    )
}

pub fn idle_in_transaction_timeout() -> SqlError {
    SqlError::fatal(
        SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
        "terminating connection due to idle-in-transaction timeout",
    )
}

/// The rest of an oversized message cannot be skipped safely: the session
/// says why and closes, as PostgreSQL does (whose limit is 1 GB: a client
/// PostgreSQL serves can meet this one, so the operator hears of it too).
pub fn message_too_large(len: usize, max: usize) -> SqlError {
    tracing::warn!(
        len,
        max,
        "a client's message exceeds --max-message-size; its session is closed"
    );
    let mut err = SqlError::fatal(
        SqlState::PROGRAM_LIMIT_EXCEEDED,
        format!("message of {len} bytes exceeds the limit of {max} bytes"),
    );
    err.hint = Some("queenwire's --max-message-size sets the limit".into());
    err
}

pub fn protocol_violation(what: impl Into<String>) -> SqlError {
    SqlError::fatal(SqlState::PROTOCOL_VIOLATION, what)
}

/// An extended-protocol message with bytes after its last field, in
/// PostgreSQL's words
/// (an error, not the end of the session).
pub fn invalid_message_format() -> SqlError {
    SqlError::error(SqlState::PROTOCOL_VIOLATION, "invalid message format")
}

/// A session closed by the shutdown drain, in PostgreSQL's words.
pub fn admin_shutdown() -> SqlError {
    SqlError::fatal(
        SqlState::ADMIN_SHUTDOWN,
        "terminating connection due to administrator command",
    )
}
