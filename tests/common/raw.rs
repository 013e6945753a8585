//! A bare protocol client for the cases drivers hide: text-format
//! parameters, pipelines with an error in the middle, ReadyForQuery status.

use bytes::BytesMut;
use queenwire::protocol::{frontend, read_message, Message, SqlError};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

pub struct Raw {
    pub stream: TcpStream,
    buf: BytesMut,
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
        let mut stream = TcpStream::connect(addr).await.expect("tcp connect");
        let mut packet = BytesMut::new();
        postgres_protocol::message::frontend::startup_message(
            [("user", "raw"), ("database", "raw")],
            &mut packet,
        )
        .expect("startup packet");
        stream.write_all(&packet).await.expect("startup");
        let mut raw = Raw {
            stream,
            buf: BytesMut::new(),
        };
        let r = raw.read_until_ready().await;
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
