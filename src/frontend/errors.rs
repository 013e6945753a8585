//! The frontend's edge: every layer's error becomes the error a client
//! sees here.

use crate::backend::BackendError;
use crate::engine::StatementError;
use crate::protocol::SqlError;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// How long a refused client gets to take its FATAL error.
const FATAL_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// The one way a connection ends with an error: the FATAL ErrorResponse
/// written (within a second: a client that reads nothing cannot hold the
/// task), then the caller closes the connection.
pub async fn send_fatal(stream: &mut (impl AsyncWrite + Unpin), err: &SqlError) {
    let mut fatal = err.clone();
    fatal.severity = "FATAL";
    let mut buf = bytes::BytesMut::new();
    fatal.to_message().encode(&mut buf);
    let _ = tokio::time::timeout(FATAL_WRITE_TIMEOUT, async {
        stream.write_all(&buf).await?;
        stream.flush().await
    })
    .await;
}
use crate::protocol::SqlState;

/// The error a client sees when the backend could not serve it: nothing
/// of its request was sent (08006; 53300 when every connection of the
/// pool stayed held past `--pool-wait-timeout`, the session itself being
/// fine).
pub fn backend_unavailable(e: &BackendError) -> SqlError {
    match e.cause() {
        BackendError::Server(fields) => fields.clone(),
        BackendError::PoolTimeout(crate::backend::pool::TimeoutType::Wait) => SqlError::error(
            SqlState::TOO_MANY_CONNECTIONS,
            "no backend connection became free in time: every connection of the pool is held \
             by other sessions (see --pool-size and --pool-wait-timeout)",
        ),
        other => SqlError::error(
            SqlState::CONNECTION_FAILURE,
            format!("backend unavailable: {other}"),
        ),
    }
}

/// The error a client sees when its request reached PostgreSQL and the
/// reply was lost (08007): it may or may not have taken effect.
pub fn outcome_unknown(e: &BackendError) -> SqlError {
    SqlError::error(
        SqlState::TRANSACTION_RESOLUTION_UNKNOWN,
        format!(
            "the backend connection broke before the reply: the outcome of the statement is unknown \
             (it may have been committed); {}",
            e.cause()
        ),
    )
}

/// What ends a session whose backend connection broke: 08007 when a
/// request was in flight on it, else 08006.
pub fn lost_backend(e: &BackendError) -> SqlError {
    let mut err = if e.outcome_unknown() {
        outcome_unknown(e)
    } else {
        SqlError::error(
            SqlState::CONNECTION_FAILURE,
            format!("lost the backend connection: {e}"),
        )
    };
    err.severity = "FATAL";
    err
}

/// What ends a session whose `BEGIN` the proxy answered ahead when
/// PostgreSQL then did not begin the block (it cannot fail outside one, so
/// this is a broken backend): the statements sent since ran outside the
/// block the client believes in, so their outcome is not what it expects.
pub fn block_not_begun() -> SqlError {
    SqlError::error(
        SqlState::TRANSACTION_RESOLUTION_UNKNOWN,
        "the backend did not begin the transaction block whose BEGIN was answered: \
         the statements sent since may have been committed one by one",
    )
}

/// What a failed dialect statement tells the client; `None`: the session's
/// connection was lost, which ends the session.
pub fn statement_error(e: &StatementError) -> Option<SqlError> {
    match e {
        StatementError::Failed(fields) => Some(fields.clone()),
        StatementError::Unavailable(e) => Some(backend_unavailable(e)),
        StatementError::OutcomeUnknown(e) => Some(outcome_unknown(e)),
        StatementError::Lost(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::pool::TimeoutType;

    #[test]
    fn a_pool_that_stays_full_is_53300_and_a_failed_connect_08006() {
        let full = backend_unavailable(&BackendError::PoolTimeout(TimeoutType::Wait));
        assert_eq!(full.code(), "53300");
        let create = backend_unavailable(&BackendError::PoolTimeout(TimeoutType::Create));
        assert_eq!(create.code(), "08006");
        assert_eq!(backend_unavailable(&BackendError::Closed).code(), "08006");
    }
}
