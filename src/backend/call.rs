//! Executing the proxy's own calls (`crate::calls`): on a backend
//! connection (prepared once per connection, binary parameters and
//! results), or on a background task's tokio-postgres client. Rows are
//! decoded by column name into each call's row struct.

use super::conn::{BackendConn, BackendError};
use crate::protocol::tags::backend as tag;
use crate::protocol::{self, Message, SqlError, SqlState, TxStatus};
use postgres_protocol::message::frontend as pp;

/// Parameters and results of the proxy's own calls travel in binary.
const BINARY: i16 = 1;
use crate::calls::{Call, CallSpec, DecodeError, RawRow, Row};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};

/// A DataRow's cells, as ranges into its body.
fn data_row(msg: Message) -> Result<RawRow, BackendError> {
    let mut r = msg.reader();
    let bad = |e: protocol::Malformed| BackendError::Protocol(e.to_string());
    let n = r.i16().map_err(bad)?;
    let mut cells = Vec::with_capacity(n.max(0) as usize);
    for _ in 0..n {
        let len = r.i32().map_err(bad)?;
        if len < 0 {
            cells.push(None);
        } else {
            let start = r.position();
            r.bytes(len as usize).map_err(bad)?;
            cells.push(Some(start..start + len as usize));
        }
    }
    Ok(RawRow::new(msg.body, cells))
}

/// How the proxy's calls end on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEnd {
    /// With Flush: the calls join whatever transaction the connection is in
    /// and the borrower ends it later (a pipeline, a transaction block).
    Flush,
    /// With Sync: the call is a transaction of its own and is committed in
    /// the same round trip (inside a block a Sync ends nothing).
    Sync,
}

/// A backend connection lent for calls that end one way: the engine's
/// functions take this, so how their calls end is an argument, not a flag
/// left on the connection. Everything else of the connection is reached
/// through it.
pub struct Calls<'c> {
    conn: &'c mut BackendConn,
    end: CallEnd,
}

impl<'c> Calls<'c> {
    pub fn new(conn: &'c mut BackendConn, end: CallEnd) -> Calls<'c> {
        Calls { conn, end }
    }

    pub fn end(&self) -> CallEnd {
        self.end
    }

    /// Runs a call and decodes its rows.
    pub async fn run<C: Call>(&mut self, call: &C) -> Result<Vec<C::Row>, BackendError> {
        self.conn.run(call, self.end).await
    }

    /// Runs the statement of `spec` (see [`BackendConn::call`]).
    pub async fn call(
        &mut self,
        spec: &CallSpec,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<RawRow>, BackendError> {
        self.conn.call(spec, params, self.end).await
    }
}

impl std::ops::Deref for Calls<'_> {
    type Target = BackendConn;
    fn deref(&self) -> &BackendConn {
        self.conn
    }
}

impl std::ops::DerefMut for Calls<'_> {
    fn deref_mut(&mut self) -> &mut BackendConn {
        self.conn
    }
}

impl BackendConn {
    /// Runs a call and decodes its rows.
    pub async fn run<C: Call>(
        &mut self,
        call: &C,
        end: CallEnd,
    ) -> Result<Vec<C::Row>, BackendError> {
        let raw = self.call(C::SPEC, &call.params(), end).await?;
        raw.iter()
            .map(|r| Row::decode(C::SPEC, r).map_err(BackendError::from))
            .collect()
    }

    /// Runs the statement of `spec` with these parameter values: Parse
    /// (first time on this connection only), Bind, Execute, then Flush or
    /// Sync as `end` says.
    ///
    /// With Flush it joins whatever implicit or explicit transaction the
    /// connection is in and the caller decides where that ends; after an
    /// error the backend skips to the next Sync, which the caller must
    /// send. With Sync the call ends its implicit transaction (commits, or
    /// rolls back on error) in the same round trip; inside a transaction
    /// block a Sync ends nothing.
    ///
    /// SQL a function runs (`EXECUTE 'DEALLOCATE ALL'` in PL/pgSQL) can
    /// take the statement away unseen: the backend then refuses the Bind
    /// with 26000, which the call returns, and the proxy forgets what it
    /// prepared here, so the next call parses again.
    pub async fn call(
        &mut self,
        spec: &CallSpec,
        params: &[&(dyn ToSql + Sync)],
        end: CallEnd,
    ) -> Result<Vec<RawRow>, BackendError> {
        if params.len() != spec.params.len() {
            return Err(BackendError::Protocol(format!(
                "{}: {} parameters for {}",
                spec.name,
                params.len(),
                spec.params.len()
            )));
        }
        let parsed_before = self.internal_prepared.contains(spec.name);
        let done = self.call_once(spec, params, end).await;
        if let Err(BackendError::Server(e)) = &done {
            if parsed_before && e.state == SqlState::INVALID_SQL_STATEMENT_NAME {
                self.internal_prepared.clear();
            }
        }
        done
    }

    async fn call_once(
        &mut self,
        spec: &CallSpec,
        params: &[&(dyn ToSql + Sync)],
        end: CallEnd,
    ) -> Result<Vec<RawRow>, BackendError> {
        // On a client's connection, under the prefix no client's SQL can
        // name; prepared once per connection either way.
        let prefixed;
        let statement = match &self.client_facing {
            Some(prefix) => {
                prefixed = format!("{prefix}{}", spec.name);
                prefixed.as_str()
            }
            None => spec.name,
        };
        if !self.internal_prepared.contains(spec.name) {
            self.write(|b| pp::parse(statement, spec.sql, spec.params.iter().map(Type::oid), b))?;
        }
        let bound = self.write(|b| {
            pp::bind(
                "",
                statement,
                [BINARY],
                params.iter().zip(spec.params),
                |(p, ty), out| match p.to_sql_checked(ty, out)? {
                    IsNull::Yes => Ok(postgres_protocol::IsNull::Yes),
                    IsNull::No => Ok(postgres_protocol::IsNull::No),
                },
                [BINARY],
                b,
            )
        });
        if let Err(e) = bound {
            let why = match e {
                pp::BindError::Conversion(e) => e.to_string(),
                pp::BindError::Serialization(e) => e.to_string(),
            };
            return Err(BackendError::Protocol(format!(
                "{}: encoding parameters: {why}",
                spec.name
            )));
        }
        self.write(|b| pp::execute("", 0, b))?;
        let ends_with_sync = end == CallEnd::Sync;
        self.write(|b| {
            if ends_with_sync {
                pp::sync(b)
            } else {
                pp::flush(b)
            }
            Ok::<(), BackendError>(())
        })?;
        self.flush().await?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            let msg = self.recv().await?;
            match msg.tag {
                tag::PARSE_COMPLETE => {
                    self.internal_prepared.insert(spec.name);
                }
                tag::BIND_COMPLETE | tag::NOTICE_RESPONSE => {}
                tag::PARAMETER_STATUS => self.note_parameter_status(&msg),
                tag::DATA_ROW => rows.push(data_row(msg)?),
                tag::COMMAND_COMPLETE if !ends_with_sync => return Ok(rows),
                tag::COMMAND_COMPLETE => {}
                tag::ERROR_RESPONSE if !ends_with_sync => {
                    return Err(BackendError::Server(SqlError::parse(&msg.body)))
                }
                tag::ERROR_RESPONSE => error = Some(SqlError::parse(&msg.body)),
                tag::READY_FOR_QUERY if ends_with_sync => {
                    return match error {
                        Some(e) => Err(BackendError::Server(e)),
                        None => Ok(rows),
                    };
                }
                other => {
                    self.broken = true;
                    return Err(BackendError::Protocol(format!(
                        "unexpected message '{}' in reply to {}",
                        other as char, spec.name
                    )));
                }
            }
        }
    }
}

impl BackendConn {
    /// Ends the current extended-protocol exchange: Sync, then everything up
    /// to ReadyForQuery; returns the transaction status. An error before
    /// the ReadyForQuery is returned once it has come (the status is then
    /// updated too): the implicit transaction the Sync ended failed to
    /// commit (a deferred constraint, a serialization failure), or a
    /// message sent before the Sync failed and its error was not read.
    pub async fn sync(&mut self) -> Result<TxStatus, BackendError> {
        self.write(|b| {
            pp::sync(b);
            Ok::<(), BackendError>(())
        })?;
        self.flush().await?;
        let mut error = None;
        loop {
            let msg = self.recv().await?;
            match msg.tag {
                tag::PARAMETER_STATUS => self.note_parameter_status(&msg),
                tag::ERROR_RESPONSE => error = Some(SqlError::parse(&msg.body)),
                tag::READY_FOR_QUERY => {
                    return match error {
                        Some(e) => Err(BackendError::Server(e)),
                        None => Ok(self.status()),
                    };
                }
                _ => {}
            }
        }
    }
}

/// A call on a tokio-postgres client failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientCallError {
    #[error(transparent)]
    Db(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// Any cell's bytes, undecoded.
struct AnyCell(Option<Vec<u8>>);

impl<'a> FromSql<'a> for AnyCell {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(AnyCell(Some(raw.to_vec())))
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(AnyCell(None))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Runs a call on a background task's client and decodes its rows. The
/// client describes each statement, so its columns are checked against the
/// spec by name and type here as well.
pub async fn query<C: Call>(
    client: &tokio_postgres::Client,
    call: &C,
) -> Result<Vec<C::Row>, ClientCallError> {
    let spec = C::SPEC;
    let rows = client.query(spec.sql, &call.params()).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut cells = Vec::with_capacity(spec.columns.len());
        for column in spec.columns {
            let Some(index) = row.columns().iter().position(|c| c.name() == column.name) else {
                return Err(DecodeError::NoColumn {
                    call: spec.name,
                    column: column.name.to_string(),
                }
                .into());
            };
            if *row.columns()[index].type_() != column.ty {
                return Err(DecodeError::WrongType {
                    call: spec.name,
                    column: column.name,
                    ty: row.columns()[index].type_().clone(),
                    rust: "the spec's type",
                }
                .into());
            }
            cells.push(row.try_get::<_, AnyCell>(index)?.0);
        }
        out.push(Row::decode(spec, &RawRow::from_cells(cells))?);
    }
    Ok(out)
}

/// Runs a call whose rows nobody reads on a background task's client.
/// The statement is parsed, described and closed again each time: for a
/// call run once in a while; a frequent one is [`prepare`]d.
pub async fn execute<C: Call<Row = ()>>(
    client: &tokio_postgres::Client,
    call: &C,
) -> Result<u64, tokio_postgres::Error> {
    client.execute(C::SPEC.sql, &call.params()).await
}

/// A call's statement prepared once on a background task's client, for a
/// call that client runs often (by text, each run costs PostgreSQL a parse
/// and two more messages: 0.18 ms against 0.01 ms for the NOTIFY of
/// `engine::wake`, measured).
pub struct Prepared {
    spec: &'static CallSpec,
    statement: tokio_postgres::Statement,
}

/// Prepares `C`'s statement on `client` (its parameter types as the spec
/// says).
pub async fn prepare<C: Call>(
    client: &tokio_postgres::Client,
) -> Result<Prepared, tokio_postgres::Error> {
    let statement = client.prepare_typed(C::SPEC.sql, C::SPEC.params).await?;
    Ok(Prepared {
        spec: C::SPEC,
        statement,
    })
}

impl Prepared {
    /// Runs `call` (of the spec prepared) on the client it was prepared
    /// on; rows nobody reads.
    pub async fn execute<C: Call<Row = ()>>(
        &self,
        client: &tokio_postgres::Client,
        call: &C,
    ) -> Result<u64, tokio_postgres::Error> {
        debug_assert_eq!(
            self.spec.name,
            C::SPEC.name,
            "a call run on another's statement"
        );
        client.execute(&self.statement, &call.params()).await
    }
}
