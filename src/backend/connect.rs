//! Opening a backend connection, as rust-postgres's `connect_raw` does it:
//! the startup packet, authentication (`auth.rs`, one function per
//! method), then the parameter statuses and the cancel key up to the first
//! ReadyForQuery.

use super::conn::{BackendConn, BackendError, BackendKey, BackendTarget, Stream};
use crate::protocol::tags::backend as tag;
use crate::protocol::{self, SqlError, TxStatus};
use postgres_protocol::message::frontend as pp;

impl BackendConn {
    pub async fn connect(target: &BackendTarget, id: u64) -> Result<BackendConn, BackendError> {
        let stream = target.open_stream().await?;
        BackendConn::start(stream, target, id).await
    }

    /// The startup exchange on a stream already open to the backend.
    pub(super) async fn start(
        stream: Box<dyn Stream>,
        target: &BackendTarget,
        id: u64,
    ) -> Result<BackendConn, BackendError> {
        let mut conn = BackendConn::new(stream, id);
        send_startup_packet(&mut conn, target).await?;
        super::auth::authenticate(&mut conn, target).await?;
        read_startup_info(&mut conn).await?;
        Ok(conn)
    }
}

async fn send_startup_packet(
    conn: &mut BackendConn,
    target: &BackendTarget,
) -> Result<(), BackendError> {
    let mut params = vec![
        ("user", target.user.as_str()),
        ("database", target.database.as_str()),
    ];
    if let Some(name) = &target.application_name {
        params.push(("application_name", name.as_str()));
    }
    conn.write(|b| pp::startup_message(params.iter().copied(), b))?;
    conn.flush().await
}

/// After AuthenticationOk: parameter statuses and the cancel key, up to
/// ReadyForQuery.
async fn read_startup_info(conn: &mut BackendConn) -> Result<(), BackendError> {
    loop {
        let msg = conn.recv().await?;
        match msg.tag {
            tag::PARAMETER_STATUS => conn.note_parameter_status(&msg),
            tag::BACKEND_KEY_DATA => {
                let mut r = msg.reader();
                let malformed = |e: protocol::Malformed| BackendError::Protocol(e.to_string());
                let pid = r.i32().map_err(malformed)?;
                let secret = r.i32().map_err(malformed)?;
                conn.key = BackendKey { pid, secret };
            }
            tag::ERROR_RESPONSE => return Err(BackendError::Server(SqlError::parse(&msg.body))),
            tag::NOTICE_RESPONSE => {}
            tag::READY_FOR_QUERY => {
                conn.status = TxStatus::from_ready_body(&msg.body);
                return Ok(());
            }
            other => {
                return Err(BackendError::Protocol(format!(
                    "unexpected message '{}' during startup",
                    other as char
                )))
            }
        }
    }
}
