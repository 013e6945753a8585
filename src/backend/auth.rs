//! Authenticating a backend connection, as rust-postgres's `connect_raw`
//! does it: the backend names a method, one function answers each
//! (cleartext, MD5, SCRAM-SHA-256), then AuthenticationOk is expected.
//! Kerberos, GSSAPI and SSPI are not spoken.

use super::conn::{BackendConn, BackendError};
use super::target::BackendTarget;
use crate::protocol::tags::backend as tag;
use crate::protocol::{Malformed, Message, SqlError};
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::frontend as pp;

/// What the backend asks for in an Authentication message.
#[derive(Debug, PartialEq, Eq)]
enum AuthRequest {
    Ok,
    Cleartext,
    Md5 { salt: [u8; 4] },
    Sasl { mechanisms: Vec<u8> },
    SaslContinue(Vec<u8>),
    SaslFinal(Vec<u8>),
    Unsupported(i32),
}

impl AuthRequest {
    fn parse(msg: &Message) -> Result<AuthRequest, BackendError> {
        let mut r = msg.reader();
        Ok(match r.i32().map_err(malformed)? {
            0 => AuthRequest::Ok,
            3 => AuthRequest::Cleartext,
            5 => {
                let salt = r.bytes(4).map_err(malformed)?;
                AuthRequest::Md5 {
                    salt: [salt[0], salt[1], salt[2], salt[3]],
                }
            }
            10 => AuthRequest::Sasl {
                mechanisms: r.remaining().to_vec(),
            },
            11 => AuthRequest::SaslContinue(r.remaining().to_vec()),
            12 => AuthRequest::SaslFinal(r.remaining().to_vec()),
            other => AuthRequest::Unsupported(other),
        })
    }
}

fn malformed(e: Malformed) -> BackendError {
    BackendError::Protocol(e.to_string())
}

/// Answers the method the backend asks for, then expects AuthenticationOk.
pub(super) async fn authenticate(
    conn: &mut BackendConn,
    target: &BackendTarget,
) -> Result<(), BackendError> {
    match auth_request(conn).await? {
        AuthRequest::Ok => return Ok(()),
        AuthRequest::Cleartext => authenticate_cleartext(conn, target).await?,
        AuthRequest::Md5 { salt } => authenticate_md5(conn, target, salt).await?,
        AuthRequest::Sasl { mechanisms } => authenticate_sasl(conn, target, &mechanisms).await?,
        AuthRequest::SaslContinue(_) | AuthRequest::SaslFinal(_) => {
            return Err(BackendError::Auth("SASL exchange without a start".into()))
        }
        AuthRequest::Unsupported(code) => {
            return Err(BackendError::Auth(format!(
                "unsupported backend authentication method {code}"
            )))
        }
    }
    match auth_request(conn).await? {
        AuthRequest::Ok => Ok(()),
        _ => Err(BackendError::Auth(
            "the backend asked for more after the password".into(),
        )),
    }
}

async fn authenticate_cleartext(
    conn: &mut BackendConn,
    target: &BackendTarget,
) -> Result<(), BackendError> {
    send_password_message(conn, password(target)?).await
}

async fn authenticate_md5(
    conn: &mut BackendConn,
    target: &BackendTarget,
    salt: [u8; 4],
) -> Result<(), BackendError> {
    let hash = md5_hash(target.user.as_bytes(), password(target)?, salt);
    send_password_message(conn, hash.as_bytes()).await
}

/// SCRAM-SHA-256 without channel binding: SASLInitialResponse, the
/// server's challenge (SASLContinue) answered with our proof, then the
/// server's signature (SASLFinal) checked.
async fn authenticate_sasl(
    conn: &mut BackendConn,
    target: &BackendTarget,
    mechanisms: &[u8],
) -> Result<(), BackendError> {
    if !mechanisms
        .split(|b| *b == 0)
        .any(|m| m == sasl::SCRAM_SHA_256.as_bytes())
    {
        return Err(BackendError::Auth(
            "backend offers no supported SASL mechanism".into(),
        ));
    }
    let mut scram = sasl::ScramSha256::new(password(target)?, sasl::ChannelBinding::unsupported());
    let first = scram.message();
    conn.write(|b| pp::sasl_initial_response(sasl::SCRAM_SHA_256, first, b))?;
    conn.flush().await?;

    let AuthRequest::SaslContinue(challenge) = auth_request(conn).await? else {
        return Err(BackendError::Auth("expected SASLContinue".into()));
    };
    scram
        .update(&challenge)
        .map_err(|e| BackendError::Auth(format!("SCRAM: {e}")))?;
    conn.write(|b| pp::sasl_response(scram.message(), b))?;
    conn.flush().await?;

    let AuthRequest::SaslFinal(signature) = auth_request(conn).await? else {
        return Err(BackendError::Auth("expected SASLFinal".into()));
    };
    scram
        .finish(&signature)
        .map_err(|e| BackendError::Auth(format!("SCRAM: {e}")))
}

async fn send_password_message(
    conn: &mut BackendConn,
    password: &[u8],
) -> Result<(), BackendError> {
    conn.write(|b| pp::password_message(password, b))?;
    conn.flush().await
}

/// The next authentication request; notices and parameter statuses on
/// the way are taken in, an ErrorResponse (a refused password, say) ends
/// the startup with the backend's own error.
async fn auth_request(conn: &mut BackendConn) -> Result<AuthRequest, BackendError> {
    loop {
        let msg = conn.recv().await?;
        match msg.tag {
            tag::AUTHENTICATION => return AuthRequest::parse(&msg),
            tag::PARAMETER_STATUS => conn.note_parameter_status(&msg),
            tag::NOTICE_RESPONSE => {}
            tag::ERROR_RESPONSE => return Err(BackendError::Server(SqlError::parse(&msg.body))),
            other => {
                return Err(BackendError::Protocol(format!(
                    "unexpected message '{}' during authentication",
                    other as char
                )))
            }
        }
    }
}

fn password(target: &BackendTarget) -> Result<&[u8], BackendError> {
    target.password.as_deref().ok_or_else(|| {
        BackendError::Config("the backend asks for a password and none is configured".into())
    })
}

/// Each method against a scripted backend on the other end of an in-memory
/// stream.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::conn::BackendKey;
    use crate::backend::target::BackendAddress;
    use crate::protocol::{self, read_message};
    use bytes::BytesMut;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    fn target(password: Option<&str>) -> BackendTarget {
        BackendTarget {
            addresses: vec![BackendAddress::Tcp("unused".into(), 0)],
            read_write: false,
            user: "alice".into(),
            password: password.map(|p| p.as_bytes().to_vec()),
            database: "db".into(),
            application_name: None,
        }
    }

    /// The server's side of the exchange.
    struct FakeBackend {
        stream: DuplexStream,
        buf: BytesMut,
    }

    impl FakeBackend {
        async fn read_startup_packet(&mut self) -> Vec<u8> {
            let len = self.stream.read_i32().await.unwrap();
            let mut body = vec![0; len as usize - 4];
            self.stream.read_exact(&mut body).await.unwrap();
            body
        }

        async fn send(&mut self, msg: Message) {
            let mut out = BytesMut::new();
            msg.encode(&mut out);
            self.stream.write_all(&out).await.unwrap();
        }

        /// The client's next message, which must be a password message.
        async fn password_message(&mut self) -> Vec<u8> {
            let msg = read_message(&mut self.stream, &mut self.buf, 1 << 20)
                .await
                .unwrap();
            assert_eq!(msg.tag, crate::protocol::tags::frontend::PASSWORD);
            msg.body.to_vec()
        }

        async fn accept(&mut self) {
            self.send(protocol::authentication(0, &[])).await;
            self.send(protocol::parameter_status("server_version", "17.0"))
                .await;
            self.send(protocol::backend_key_data(7, 9)).await;
            self.send(protocol::ready_for_query(protocol::TxStatus::Idle))
                .await;
        }
    }

    /// Runs `backend` against a connection starting up as `target`.
    async fn start<F, Fut>(target: BackendTarget, backend: F) -> Result<BackendConn, BackendError>
    where
        F: FnOnce(FakeBackend) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(backend(FakeBackend {
            stream: theirs,
            buf: BytesMut::new(),
        }));
        let conn = BackendConn::start(Box::new(ours), &target).await;
        server.await.unwrap();
        conn
    }

    fn started(conn: Result<BackendConn, BackendError>) -> BackendConn {
        let conn = conn.unwrap_or_else(|e| panic!("startup failed: {e}"));
        assert_eq!(
            conn.key,
            BackendKey {
                pid: 7,
                secret: 9,
                host: 0
            }
        );
        assert_eq!(conn.reported["server_version"], "17.0");
        conn
    }

    #[tokio::test]
    async fn trust_needs_no_password() {
        started(
            start(target(None), |mut b| async move {
                let packet = b.read_startup_packet().await;
                assert!(packet.windows(6).any(|w| w == b"alice\0"));
                b.accept().await;
            })
            .await,
        );
    }

    #[tokio::test]
    async fn cleartext_sends_the_password() {
        started(
            start(target(Some("pw")), |mut b| async move {
                b.read_startup_packet().await;
                b.send(protocol::authentication(3, &[])).await;
                assert_eq!(b.password_message().await, b"pw\0");
                b.accept().await;
            })
            .await,
        );
    }

    #[tokio::test]
    async fn md5_sends_the_salted_hash() {
        started(
            start(target(Some("pw")), |mut b| async move {
                b.read_startup_packet().await;
                b.send(protocol::authentication(5, &[1, 2, 3, 4])).await;
                let expected = format!("{}\0", md5_hash(b"alice", b"pw", [1, 2, 3, 4]));
                assert_eq!(b.password_message().await, expected.as_bytes());
                b.accept().await;
            })
            .await,
        );
    }

    /// The backend's side is the frontend's own SCRAM server.
    async fn scram_backend(mut b: FakeBackend, password_on_file: &'static str) {
        use crate::frontend::scram::{decoy_verifier, Exchange};
        b.read_startup_packet().await;
        b.send(protocol::authentication(10, b"SCRAM-SHA-256\0\0"))
            .await;
        let initial = b.password_message().await;
        let mut r = protocol::BodyReader::from_slice(&initial);
        assert_eq!(r.cstr().unwrap(), "SCRAM-SHA-256");
        let len = r.i32().unwrap() as usize;
        let client_first = std::str::from_utf8(r.bytes(len).unwrap()).unwrap();
        let verifier = crate::users::Verifier::new(password_on_file);
        let (exchange, server_first) =
            Exchange::start(Some(verifier), decoy_verifier("alice", b"k"), client_first).unwrap();
        b.send(protocol::authentication(11, server_first.as_bytes()))
            .await;
        let client_final = String::from_utf8(b.password_message().await).unwrap();
        match exchange.finish(&client_final) {
            Ok(server_final) => {
                b.send(protocol::authentication(12, server_final.as_bytes()))
                    .await;
                b.accept().await;
            }
            Err(_) => {
                b.send(
                    SqlError::fatal(
                        crate::protocol::SqlState::INVALID_PASSWORD,
                        "password authentication failed",
                    )
                    .to_message(),
                )
                .await
            }
        }
    }

    #[tokio::test]
    async fn scram_proves_the_password_and_checks_the_server() {
        started(start(target(Some("pw")), |b| scram_backend(b, "pw")).await);
    }

    #[tokio::test]
    async fn a_refused_password_is_the_backends_own_error() {
        match start(target(Some("wrong")), |b| scram_backend(b, "pw")).await {
            Err(BackendError::Server(e)) => assert_eq!(e.code(), "28P01"),
            other => panic!("expected 28P01, got {:?}", other.err()),
        }
    }

    #[tokio::test]
    async fn methods_we_do_not_speak_are_named() {
        let err = start(target(Some("pw")), |mut b| async move {
            b.read_startup_packet().await;
            b.send(protocol::authentication(7, &[])).await;
        })
        .await
        .err()
        .expect("GSSAPI refused");
        assert!(matches!(err, BackendError::Auth(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "backend authentication: unsupported backend authentication method 7"
        );
    }

    #[tokio::test]
    async fn a_password_request_without_a_password_configured_is_a_config_error() {
        let err = start(target(None), |mut b| async move {
            b.read_startup_packet().await;
            b.send(protocol::authentication(3, &[])).await;
        })
        .await
        .err()
        .expect("no password");
        assert!(matches!(err, BackendError::Config(_)), "{err:?}");
    }

    #[tokio::test]
    async fn a_backend_that_hangs_up_is_a_closed_connection() {
        let err = start(target(None), |mut b| async move {
            b.read_startup_packet().await;
            drop(b);
        })
        .await
        .err()
        .expect("hung up");
        assert!(matches!(err, BackendError::Closed), "{err:?}");
    }
}
