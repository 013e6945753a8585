//! Answers the proxy gives on its own, kept apart from the handlers: the
//! errors for bounds, refusals and missing objects, as PostgreSQL words
//! them where it has an equivalent.

use crate::protocol::ErrorFields;

/// `54000` for a per-session bound of the proxy's memory.
pub fn session_limit(what: &str, count: usize, bytes: usize, of: &str, hint: &str) -> ErrorFields {
    let mut err = ErrorFields::error(
        "54000",
        format!(
            "too many {what} in this session (at most {count}, {} MiB {of})",
            bytes >> 20
        ),
    );
    err.hint = Some(hint.into());
    err
}

/// A user whose policy is `none` may run dialect statements only.
pub fn passthrough_refused() -> ErrorFields {
    ErrorFields::error(
        "42501",
        "plain SQL is not allowed for this user (passthrough policy none): only queenwire statements",
    )
}

pub fn missing_statement(name: &str) -> ErrorFields {
    ErrorFields::error(
        "26000",
        format!("prepared statement \"{name}\" does not exist"),
    )
}

pub fn missing_portal(name: &str) -> ErrorFields {
    ErrorFields::error("34000", format!("portal \"{name}\" does not exist"))
}

pub fn idle_in_transaction_timeout() -> ErrorFields {
    ErrorFields::fatal(
        "25P03",
        "terminating connection due to idle-in-transaction timeout",
    )
}

/// The rest of an oversized message cannot be skipped safely: the session
/// says why and closes, as PostgreSQL does.
pub fn message_too_large(len: usize, max: usize) -> ErrorFields {
    ErrorFields::fatal(
        "54000",
        format!("message of {len} bytes exceeds the limit of {max} bytes"),
    )
}

pub fn protocol_violation(what: impl Into<String>) -> ErrorFields {
    ErrorFields::fatal("08P01", what)
}

pub fn lost_backend(e: &impl std::fmt::Display) -> ErrorFields {
    ErrorFields::fatal("08006", format!("lost the backend connection: {e}"))
}
