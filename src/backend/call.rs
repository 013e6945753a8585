//! Executing the proxy's own calls (`crate::rewrite::calls`): on a backend
//! connection (prepared once per connection, binary parameters and
//! results), or on a background task's tokio-postgres client. Rows are
//! decoded by column name into each call's row struct.

use super::conn::{BackendConn, BackendError};
use crate::protocol::{self, ErrorFields, Message, TxStatus};
use crate::rewrite::calls::{Call, CallSpec, DecodeError, RawRow, Row};
use bytes::BufMut;
use bytes::BytesMut;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};

impl From<DecodeError> for BackendError {
    fn from(e: DecodeError) -> Self {
        BackendError::Protocol(e.to_string())
    }
}

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

impl BackendConn {
    /// Runs a call and decodes its rows.
    pub async fn run<C: Call>(&mut self, call: &C) -> Result<Vec<C::Row>, BackendError> {
        let raw = self.call(C::SPEC, &call.params()).await?;
        raw.iter()
            .map(|r| Row::decode(C::SPEC, r).map_err(BackendError::from))
            .collect()
    }

    /// Runs the statement of `spec` with these parameter values: Parse
    /// (first time on this connection only), Bind, Execute, then Flush or,
    /// with `autosync`, Sync.
    ///
    /// Without `autosync` it joins whatever implicit or explicit
    /// transaction the connection is in and the caller decides where that
    /// ends; after an error the backend skips to the next Sync, which the
    /// caller must send. With `autosync` the call ends its implicit
    /// transaction (commits, or rolls back on error) in the same round trip;
    /// inside a transaction block a Sync ends nothing.
    pub async fn call(
        &mut self,
        spec: &CallSpec,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<RawRow>, BackendError> {
        if params.len() != spec.params.len() {
            return Err(BackendError::Protocol(format!(
                "{}: {} parameters for {}",
                spec.name,
                params.len(),
                spec.params.len()
            )));
        }
        let parse_sent = !self.internal_prepared.contains(spec.name);
        if parse_sent {
            let oids: Vec<u32> = spec.params.iter().map(Type::oid).collect();
            self.send(&protocol::frontend::build_parse(spec.name, spec.sql, &oids));
        }
        let mut values = BytesMut::new();
        for (i, (p, ty)) in params.iter().zip(spec.params).enumerate() {
            let len_at = values.len();
            values.put_i32(0);
            match p.to_sql_checked(ty, &mut values) {
                Ok(IsNull::Yes) => {
                    values.truncate(len_at);
                    values.put_i32(-1);
                }
                Ok(IsNull::No) => {
                    let len = (values.len() - len_at - 4) as i32;
                    values[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
                }
                Err(e) => {
                    return Err(BackendError::Protocol(format!(
                        "{}: encoding parameter {}: {e}",
                        spec.name,
                        i + 1
                    )))
                }
            }
        }
        self.send(&protocol::build(b'B', |b| {
            b.put_u8(0);
            b.put_slice(spec.name.as_bytes());
            b.put_u8(0);
            b.put_i16(1);
            b.put_i16(1);
            b.put_i16(params.len() as i16);
            b.put_slice(&values);
            b.put_i16(1);
            b.put_i16(1);
        }));
        self.send(&protocol::build(b'E', |b| {
            b.put_u8(0);
            b.put_i32(0);
        }));
        let autosync = self.autosync;
        self.send(&protocol::empty(if autosync { b'S' } else { b'H' }));
        self.flush().await?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            let msg = self.recv().await?;
            match msg.tag {
                b'1' => {
                    self.internal_prepared.insert(spec.name);
                }
                b'2' | b'N' => {}
                b'S' => self.note_parameter_status(&msg),
                b'D' => rows.push(data_row(msg)?),
                b'C' if !autosync => return Ok(rows),
                b'C' => {}
                b'E' if !autosync => {
                    return Err(BackendError::Server(ErrorFields::parse(&msg.body)))
                }
                b'E' => error = Some(ErrorFields::parse(&msg.body)),
                b'Z' if autosync => {
                    self.status = TxStatus::from_ready_body(&msg.body);
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
pub async fn execute<C: Call<Row = ()>>(
    client: &tokio_postgres::Client,
    call: &C,
) -> Result<u64, tokio_postgres::Error> {
    client.execute(C::SPEC.sql, &call.params()).await
}
