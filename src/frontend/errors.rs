//! The frontend's edge: every layer's error becomes the error a client
//! sees here.

use crate::backend::BackendError;
use crate::engine::StatementError;
use crate::protocol::ErrorFields;

/// The error a client sees when the backend could not serve it.
pub fn backend_unavailable(e: &BackendError) -> ErrorFields {
    match e {
        BackendError::Server(fields) => fields.clone(),
        other => ErrorFields::error("08006", format!("backend unavailable: {other}")),
    }
}

/// What a failed dialect statement tells the client; `None`: the session's
/// connection was lost, which ends the session.
pub fn statement_error(e: &StatementError) -> Option<ErrorFields> {
    match e {
        StatementError::Failed(fields) => Some(fields.clone()),
        StatementError::Unavailable(e) => Some(backend_unavailable(e)),
        StatementError::Lost(_) => None,
    }
}
