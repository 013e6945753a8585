//! A minimal client for the cells that have a pgbench twin: one prepared
//! statement executed over and over, written and read by the worker's own
//! task. tokio-postgres hands every query to a connection task and back
//! over channels, which cost the load generator more CPU per call than
//! pgbench spends (27 against 18 µs for one pgmq send): on a machine whose
//! cores the systems under test share with the load generator, that
//! starved the CPU-bound systems more than the others and the native ratios
//! disagreed with pgbench's. This client does what pgbench's `-M prepared`
//! does on the wire: Parse once, then Bind, Describe, Execute and Sync a
//! call, one write and the reads up to ReadyForQuery.
//!
//! Trust authentication only (every cluster of the benchmark uses it).

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::{self, Message};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_postgres::config::Host;
use tokio_postgres::types::{IsNull, ToSql, Type};
use tokio_postgres::Config;

use crate::setup::BoxError;

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

pub struct RawConn {
    stream: Box<dyn Stream>,
    inbuf: BytesMut,
    out: BytesMut,
    next_name: usize,
}

/// A statement prepared on one connection, with its parameter types.
#[derive(Clone)]
pub struct RawStmt {
    name: String,
    types: Vec<Type>,
}

impl RawConn {
    pub async fn connect(cfg: &Config) -> Result<RawConn, BoxError> {
        let port = cfg.get_ports().first().copied().unwrap_or(5432);
        let stream: Box<dyn Stream> = match cfg.get_hosts().first() {
            Some(Host::Tcp(host)) => {
                let s = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
                s.set_nodelay(true)?;
                Box::new(s)
            }
            Some(Host::Unix(dir)) => Box::new(
                tokio::net::UnixStream::connect(dir.join(format!(".s.PGSQL.{port}"))).await?,
            ),
            None => return Err("raw client: no host".into()),
        };
        let mut conn = RawConn {
            stream,
            inbuf: BytesMut::with_capacity(16 * 1024),
            out: BytesMut::with_capacity(16 * 1024),
            next_name: 0,
        };
        let user = cfg.get_user().unwrap_or("postgres");
        let db = cfg.get_dbname().unwrap_or(user);
        frontend::startup_message([("user", user), ("database", db)], &mut conn.out)?;
        conn.flush().await?;
        loop {
            match conn.read_message().await? {
                Message::AuthenticationOk => {}
                Message::ReadyForQuery(_) => return Ok(conn),
                Message::ErrorResponse(e) => return Err(error_text(e).into()),
                Message::AuthenticationCleartextPassword
                | Message::AuthenticationMd5Password(_)
                | Message::AuthenticationSasl(_) => {
                    return Err("raw client: only trust authentication".into())
                }
                _ => {}
            }
        }
    }

    /// Parse, Describe and Sync: the statement with the parameter types
    /// the server settled on (`types` given for the first ones).
    pub async fn prepare(&mut self, sql: &str, types: &[Type]) -> Result<RawStmt, BoxError> {
        let name = format!("raw{}", self.next_name);
        self.next_name += 1;
        frontend::parse(&name, sql, types.iter().map(Type::oid), &mut self.out)?;
        frontend::describe(b'S', &name, &mut self.out)?;
        frontend::sync(&mut self.out);
        self.flush().await?;
        let mut params = Vec::new();
        let mut failed = None;
        loop {
            match self.read_message().await? {
                Message::ParameterDescription(d) => {
                    let mut it = d.parameters();
                    while let Some(oid) = it.next()? {
                        params.push(Type::from_oid(oid).unwrap_or(Type::TEXT));
                    }
                }
                Message::ErrorResponse(e) => failed = Some(error_text(e)),
                Message::ReadyForQuery(_) => break,
                _ => {}
            }
        }
        match failed {
            Some(e) => Err(format!("prepare {sql:.80}: {e}").into()),
            None => Ok(RawStmt {
                name,
                types: params,
            }),
        }
    }

    /// Bind (binary parameters and results), Execute and Sync; the count
    /// of the command tag (rows for a SELECT).
    pub async fn execute(
        &mut self,
        stmt: &RawStmt,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, BoxError> {
        if params.len() != stmt.types.len() {
            return Err(format!(
                "{} parameters for a statement of {}",
                params.len(),
                stmt.types.len()
            )
            .into());
        }
        let bound = frontend::bind(
            "",
            &stmt.name,
            Some(1),
            params.iter().zip(&stmt.types),
            |(p, ty), buf| match p.to_sql_checked(ty, buf) {
                Ok(IsNull::No) => Ok(postgres_protocol::IsNull::No),
                Ok(IsNull::Yes) => Ok(postgres_protocol::IsNull::Yes),
                Err(e) => Err(e),
            },
            None, // text results, as pgbench asks for
            &mut self.out,
        );
        if let Err(e) = bound {
            self.out.clear();
            return Err(match e {
                frontend::BindError::Conversion(e) => e,
                frontend::BindError::Serialization(e) => e.into(),
            });
        }
        // libpq's PQsendQueryPrepared, which pgbench -M prepared calls,
        // describes the portal before executing it.
        frontend::describe(b'P', "", &mut self.out)?;
        frontend::execute("", 0, &mut self.out)?;
        frontend::sync(&mut self.out);
        self.flush().await?;
        let mut count = 0u64;
        let mut failed = None;
        loop {
            match self.read_message().await? {
                Message::CommandComplete(c) => {
                    let tag = c.tag().map_err(|e| e.to_string())?;
                    count = tag
                        .rsplit(' ')
                        .next()
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                }
                Message::ErrorResponse(e) => failed = Some(error_text(e)),
                Message::ReadyForQuery(_) => break,
                _ => {}
            }
        }
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(count),
        }
    }

    async fn flush(&mut self) -> Result<(), BoxError> {
        self.stream.write_all(&self.out).await?;
        self.out.clear();
        Ok(())
    }

    async fn read_message(&mut self) -> Result<Message, BoxError> {
        loop {
            if let Some(m) = Message::parse(&mut self.inbuf)? {
                return Ok(m);
            }
            if self.inbuf.capacity() - self.inbuf.len() < 4096 {
                self.inbuf.reserve(16 * 1024);
            }
            if self.stream.read_buf(&mut self.inbuf).await? == 0 {
                return Err("raw client: the server closed the connection".into());
            }
        }
    }
}

/// "SQLSTATE: message" of an ErrorResponse.
fn error_text(e: backend::ErrorResponseBody) -> String {
    let mut fields = e.fields();
    let (mut code, mut message) = (String::new(), String::new());
    while let Ok(Some(f)) = fields.next() {
        let value = String::from_utf8_lossy(f.value_bytes()).into_owned();
        match f.type_() {
            b'C' => code = value,
            b'M' => message = value,
            _ => {}
        }
    }
    format!("{code}: {message}")
}
