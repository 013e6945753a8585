//! The frontend's edge: every layer's error becomes the error a client
//! sees here.

use crate::backend::BackendError;
use crate::engine::StatementError;
use crate::protocol::SqlError;
use crate::protocol::SqlState;

/// The error a client sees when the backend could not serve it.
pub fn backend_unavailable(e: &BackendError) -> SqlError {
    match e {
        BackendError::Server(fields) => fields.clone(),
        other => SqlError::error(
            SqlState::CONNECTION_FAILURE,
            format!("backend unavailable: {other}"),
        ),
    }
}

/// What a failed dialect statement tells the client; `None`: the session's
/// connection was lost, which ends the session.
pub fn statement_error(e: &StatementError) -> Option<SqlError> {
    match e {
        StatementError::Failed(fields) => Some(fields.clone()),
        StatementError::Unavailable(e) => Some(backend_unavailable(e)),
        StatementError::Lost(_) => None,
    }
}
