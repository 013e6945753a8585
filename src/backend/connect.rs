//! Opening a backend connection, as rust-postgres's `connect_raw` does it:
//! the startup packet, authentication (`auth.rs`, one function per
//! method), then the parameter statuses and the cancel key up to the first
//! ReadyForQuery.

use super::conn::{BackendConn, BackendError, BackendKey, Stream};
use super::target::BackendTarget;
use crate::protocol::tags::backend as tag;
use crate::protocol::{self, SqlError};
use postgres_protocol::message::frontend as pp;

impl BackendConn {
    /// A connection to the first of the target's hosts that takes it (and
    /// is writable, with `read_write`); else the last host's error.
    pub async fn connect(target: &BackendTarget) -> Result<BackendConn, BackendError> {
        let mut last = BackendError::Config("no backend host".into());
        for (host, address) in target.addresses.iter().enumerate() {
            let started = match BackendTarget::open_stream(address).await {
                Ok(stream) => BackendConn::start(stream, target).await,
                Err(e) => Err(e.into()),
            };
            match started {
                Ok(conn) if target.read_write && conn.read_only() => {
                    last = BackendError::Config(format!(
                        "{address} is read-only (target_session_attrs=read-write)"
                    ));
                }
                Ok(mut conn) => {
                    conn.key.host = host;
                    return Ok(conn);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Whether the server said, at startup, that it takes no writes (a hot
    /// standby, or `default_transaction_read_only`; PostgreSQL 14 and newer
    /// report both).
    pub fn read_only(&self) -> bool {
        ["in_hot_standby", "default_transaction_read_only"]
            .iter()
            .any(|name| self.reported.get(*name).map(String::as_str) == Some("on"))
    }

    /// The startup exchange on a stream already open to the backend.
    pub(super) async fn start(
        stream: Box<dyn Stream>,
        target: &BackendTarget,
    ) -> Result<BackendConn, BackendError> {
        let mut conn = BackendConn::new(stream);
        let started = async {
            send_startup_packet(&mut conn, target).await?;
            super::auth::authenticate(&mut conn, target).await?;
            read_startup_info(&mut conn).await
        };
        // Nothing of a client's was sent yet: a failure here has no
        // unknown outcome, only its cause.
        match started.await {
            Ok(()) => Ok(conn),
            Err(e) => Err(e.into_cause()),
        }
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
                conn.key = BackendKey {
                    pid,
                    secret,
                    host: conn.key.host,
                };
            }
            tag::ERROR_RESPONSE => return Err(BackendError::Server(SqlError::parse(&msg.body))),
            tag::NOTICE_RESPONSE => {}
            tag::READY_FOR_QUERY => return Ok(()),
            other => {
                return Err(BackendError::Protocol(format!(
                    "unexpected message '{}' during startup",
                    other as char
                )))
            }
        }
    }
}
