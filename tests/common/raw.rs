//! A bare protocol client for the cases drivers hide: text-format
//! parameters, pipelines with an error in the middle, ReadyForQuery status.

use bytes::BytesMut;
use queenwire::protocol::{frontend, read_message, Message, SqlError};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

pub struct Raw {
    pub stream: Box<dyn Stream>,
    buf: BytesMut,
    /// The pid BackendKeyData gave this client.
    pub backend_pid: i32,
}

/// What came back for one exchange, up to ReadyForQuery.
#[derive(Debug, Default)]
pub struct Replies {
    pub tags: Vec<u8>,
    pub rows: Vec<Vec<Option<String>>>,
    pub errors: Vec<SqlError>,
    pub completions: Vec<String>,
    pub status: u8,
    pub messages: Vec<Message>,
}

impl Raw {
    pub async fn connect(addr: std::net::SocketAddr) -> Raw {
        let stream = TcpStream::connect(addr).await.expect("tcp connect");
        Raw::start(Box::new(stream), "raw", "raw").await
    }

    /// Straight to PostgreSQL (the test cluster's Unix socket), as `cfg`
    /// says: to compare its answers with the proxy's.
    pub async fn connect_direct(cfg: &tokio_postgres::Config) -> Raw {
        let port = cfg.get_ports().first().copied().unwrap_or(5432);
        let stream: Box<dyn Stream> = match cfg.get_hosts().first() {
            Some(tokio_postgres::config::Host::Unix(dir)) => Box::new(
                tokio::net::UnixStream::connect(dir.join(format!(".s.PGSQL.{port}")))
                    .await
                    .expect("unix connect"),
            ),
            Some(tokio_postgres::config::Host::Tcp(host)) => Box::new(
                TcpStream::connect((host.as_str(), port))
                    .await
                    .expect("tcp connect"),
            ),
            None => panic!("no host in the direct configuration"),
        };
        let user = cfg.get_user().expect("a user");
        let database = cfg.get_dbname().unwrap_or(user);
        Raw::start(stream, user, database).await
    }

    async fn start(mut stream: Box<dyn Stream>, user: &str, database: &str) -> Raw {
        let mut packet = BytesMut::new();
        postgres_protocol::message::frontend::startup_message(
            [("user", user), ("database", database)],
            &mut packet,
        )
        .expect("startup packet");
        stream.write_all(&packet).await.expect("startup");
        let mut raw = Raw {
            stream,
            buf: BytesMut::new(),
            backend_pid: 0,
        };
        let r = raw.read_until_ready().await;
        if let Some(key) = r.messages.iter().find(|m| m.tag == b'K') {
            raw.backend_pid = key.reader().i32().expect("BackendKeyData");
        }
        assert!(r.errors.is_empty(), "startup failed: {:?}", r.errors);
        raw
    }

    pub async fn send(&mut self, msgs: &[Message]) {
        let mut out = BytesMut::new();
        for m in msgs {
            m.encode(&mut out);
        }
        self.stream.write_all(&out).await.expect("send");
    }

    pub async fn read_until_ready(&mut self) -> Replies {
        let mut r = Replies::default();
        loop {
            let msg = read_message(&mut self.stream, &mut self.buf, 1 << 30)
                .await
                .expect("reply");
            r.tags.push(msg.tag);
            match msg.tag {
                b'D' => {
                    let mut rd = msg.reader();
                    let n = rd.i16().unwrap();
                    let mut row = Vec::new();
                    for _ in 0..n {
                        let len = rd.i32().unwrap();
                        if len < 0 {
                            row.push(None);
                        } else {
                            let bytes = rd.bytes(len as usize).unwrap();
                            row.push(Some(String::from_utf8_lossy(bytes).into_owned()));
                        }
                    }
                    r.rows.push(row);
                }
                b'E' => r.errors.push(SqlError::parse(&msg.body)),
                b'C' => r.completions.push(msg.reader().cstr().unwrap().to_string()),
                b'Z' => {
                    r.status = msg.body[0];
                    r.messages.push(msg);
                    return r;
                }
                _ => {}
            }
            r.messages.push(msg);
        }
    }

    /// The next message, waiting at most `within` (`None`: nothing came).
    pub async fn next_within(&mut self, within: std::time::Duration) -> Option<Message> {
        tokio::time::timeout(
            within,
            read_message(&mut self.stream, &mut self.buf, 1 << 30),
        )
        .await
        .ok()
        .map(|m| m.expect("a message"))
    }

    /// Every message up to the connection's end (`None`: it did not end
    /// within `within`).
    #[allow(dead_code)]
    pub async fn until_closed(&mut self, within: std::time::Duration) -> Option<Vec<Message>> {
        let mut got = Vec::new();
        tokio::time::timeout(within, async {
            while let Ok(msg) = read_message(&mut self.stream, &mut self.buf, 1 << 30).await {
                got.push(msg);
            }
        })
        .await
        .ok()?;
        Some(got)
    }

    pub async fn simple(&mut self, sql: &str) -> Replies {
        self.send(&[frontend::build_query(sql)]).await;
        self.read_until_ready().await
    }
}

pub fn bind_text(portal: &str, statement: &str, params: &[Option<&str>]) -> Message {
    frontend::build_bind_text(portal, statement, params)
}

pub fn execute(portal: &str, max_rows: i32) -> Message {
    frontend::build_execute(portal, max_rows)
}

pub fn sync() -> Message {
    frontend::sync()
}

/// An extended-protocol pipeline of these statements, then Sync: each
/// one Parse, Bind and Execute of the unnamed statement and portal, every
/// row at once.
pub fn pipeline(statements: &[&str]) -> Vec<Message> {
    let mut msgs = Vec::with_capacity(statements.len() * 3 + 1);
    for sql in statements {
        msgs.push(frontend::build_parse("", sql, &[]));
        msgs.push(bind_text("", "", &[]));
        msgs.push(execute("", 0));
    }
    msgs.push(sync());
    msgs
}
