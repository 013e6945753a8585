//! Result rows of calls, decoded by column name.
//!
//! A row arrives as binary cells in the order of its spec's columns (the
//! backend sends no RowDescription for a statement prepared once and
//! executed many times; `tests/calls.rs` proves the spec's columns are what
//! Describe reports). A row struct asks for each of its fields by name; a
//! missing column, a wrong number of cells, a type the field cannot hold or
//! a NULL in a field that cannot be NULL is a [`DecodeError`], never a panic.

use super::CallSpec;
use bytes::Bytes;
use std::ops::Range;
use tokio_postgres::types::{FromSql, Type};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{call}: a row of {found} columns, expected {expected}")]
    Shape {
        call: &'static str,
        found: usize,
        expected: usize,
    },
    #[error("{call}: no result column \"{column}\"")]
    NoColumn { call: &'static str, column: String },
    #[error("{call}: column \"{column}\" of type {ty} cannot be read as {rust}")]
    WrongType {
        call: &'static str,
        column: &'static str,
        ty: Type,
        rust: &'static str,
    },
    #[error("{call}: decoding column \"{column}\": {reason}")]
    Value {
        call: &'static str,
        column: &'static str,
        reason: String,
    },
}

/// A row struct of a call.
pub trait FromRow: Sized {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError>;
}

/// For calls whose rows nobody reads (their effect is the point).
impl FromRow for () {
    fn from_row(_: &Row<'_>) -> Result<(), DecodeError> {
        Ok(())
    }
}

/// One row's binary cells: ranges into the DataRow body (`None` = NULL).
#[derive(Debug, Clone)]
pub struct RawRow {
    body: Bytes,
    cells: Vec<Option<Range<usize>>>,
}

impl RawRow {
    /// `cells` are ranges into `body`; one out of bounds reads as an error.
    pub fn new(body: Bytes, cells: Vec<Option<Range<usize>>>) -> RawRow {
        RawRow { body, cells }
    }

    /// A row from separate cell values (rows that did not come as one
    /// DataRow body, and tests).
    pub fn from_cells(values: Vec<Option<Vec<u8>>>) -> RawRow {
        let mut body = Vec::new();
        let cells = values
            .into_iter()
            .map(|v| {
                v.map(|v| {
                    let start = body.len();
                    body.extend_from_slice(&v);
                    start..body.len()
                })
            })
            .collect();
        RawRow {
            body: body.into(),
            cells,
        }
    }

    pub fn len(&self) -> usize {
        self.cells.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }
}

/// A row read through its call's spec.
pub struct Row<'a> {
    spec: &'static CallSpec,
    raw: &'a RawRow,
}

impl<'a> Row<'a> {
    /// Checks that the row has the spec's number of columns.
    pub fn new(spec: &'static CallSpec, raw: &'a RawRow) -> Result<Row<'a>, DecodeError> {
        if raw.len() != spec.columns.len() {
            return Err(DecodeError::Shape {
                call: spec.name,
                found: raw.len(),
                expected: spec.columns.len(),
            });
        }
        Ok(Row { spec, raw })
    }

    /// Decodes a whole row into its struct.
    pub fn decode<T: FromRow>(spec: &'static CallSpec, raw: &RawRow) -> Result<T, DecodeError> {
        T::from_row(&Row::new(spec, raw)?)
    }

    /// The cell of column `name` and its spec'd type.
    fn cell(
        &self,
        name: &str,
    ) -> Result<(&'static super::ResultColumn, Option<Range<usize>>), DecodeError> {
        let index = self
            .spec
            .column_index(name)
            .ok_or_else(|| DecodeError::NoColumn {
                call: self.spec.name,
                column: name.to_string(),
            })?;
        let column = &self.spec.columns[index];
        let range = self.raw.cells[index].clone();
        if let Some(r) = &range {
            if r.end > self.raw.body.len() || r.start > r.end {
                return Err(DecodeError::Value {
                    call: self.spec.name,
                    column: column.name,
                    reason: "cell out of bounds".into(),
                });
            }
        }
        Ok((column, range))
    }

    /// Column `name` as `T` (an `Option` for a column that may be NULL).
    pub fn get<T: FromSql<'a>>(&self, name: &str) -> Result<T, DecodeError> {
        let (column, range) = self.cell(name)?;
        if !T::accepts(&column.ty) {
            return Err(DecodeError::WrongType {
                call: self.spec.name,
                column: column.name,
                ty: column.ty.clone(),
                rust: std::any::type_name::<T>(),
            });
        }
        let raw: &'a RawRow = self.raw;
        let bytes = range.map(|r| &raw.body[r]);
        T::from_sql_nullable(&column.ty, bytes).map_err(|e| DecodeError::Value {
            call: self.spec.name,
            column: column.name,
            reason: e.to_string(),
        })
    }

    /// A `bytea` column that may be NULL, as no bytes.
    pub fn bytes_or_empty(&self, name: &str) -> Result<Bytes, DecodeError> {
        match self.cell(name)? {
            (_, None) => Ok(Bytes::new()),
            _ => self.bytes(name),
        }
    }

    /// A `bytea` column, sharing the row's buffer (no copy).
    pub fn bytes(&self, name: &str) -> Result<Bytes, DecodeError> {
        let (column, range) = self.cell(name)?;
        if column.ty != Type::BYTEA {
            return Err(DecodeError::WrongType {
                call: self.spec.name,
                column: column.name,
                ty: column.ty.clone(),
                rust: "Bytes",
            });
        }
        match range {
            Some(r) => Ok(self.raw.body.slice(r)),
            None => Err(DecodeError::Value {
                call: self.spec.name,
                column: column.name,
                reason: "unexpected NULL".into(),
            }),
        }
    }
}

/// A `jsonb` value as its JSON text (binary format: a version byte, 1,
/// then the text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jsonb(pub String);

impl<'a> FromSql<'a> for Jsonb {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        match raw.split_first() {
            Some((1, text)) => Ok(Jsonb(std::str::from_utf8(text)?.to_string())),
            _ => Err("unknown jsonb format".into()),
        }
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSONB
    }
}

#[cfg(test)]
mod tests {
    use super::super::{column, CallSpec};
    use super::*;
    use bytes::BytesMut;
    use std::time::SystemTime;
    use tokio_postgres::types::ToSql;

    const SPEC: CallSpec = CallSpec {
        name: "qw_test",
        sql: "SELECT n, t, j, at, b FROM queen.test_v1()",
        params: &[],
        columns: &[
            column("n", Type::INT4),
            column("t", Type::TEXT),
            column("j", Type::JSONB),
            column("at", Type::TIMESTAMPTZ),
            column("b", Type::BYTEA),
        ],
    };

    fn encode(v: &(dyn ToSql + Sync), ty: &Type) -> Option<Vec<u8>> {
        let mut buf = BytesMut::new();
        match v.to_sql_checked(ty, &mut buf).unwrap() {
            tokio_postgres::types::IsNull::Yes => None,
            tokio_postgres::types::IsNull::No => Some(buf.to_vec()),
        }
    }

    fn sample() -> RawRow {
        let mut json = vec![1u8];
        json.extend_from_slice(br#"{"a":1}"#);
        RawRow::from_cells(vec![
            encode(&7i32, &Type::INT4),
            None,
            Some(json),
            encode(&SystemTime::UNIX_EPOCH, &Type::TIMESTAMPTZ),
            Some(b"blob".to_vec()),
        ])
    }

    #[test]
    fn columns_are_found_by_name_whatever_the_order_of_reading() {
        let raw = sample();
        let row = Row::new(&SPEC, &raw).unwrap();
        assert_eq!(row.bytes("b").unwrap(), Bytes::from_static(b"blob"));
        assert_eq!(row.get::<Option<String>>("t").unwrap(), None);
        assert_eq!(row.get::<i32>("n").unwrap(), 7);
        assert_eq!(
            row.get::<Option<Jsonb>>("j").unwrap(),
            Some(Jsonb(r#"{"a":1}"#.into()))
        );
        assert_eq!(row.get::<SystemTime>("at").unwrap(), SystemTime::UNIX_EPOCH);
    }

    #[test]
    fn a_missing_column_a_wrong_type_or_a_null_is_an_error() {
        let raw = sample();
        let row = Row::new(&SPEC, &raw).unwrap();
        assert!(matches!(
            row.get::<i32>("nope"),
            Err(DecodeError::NoColumn { .. })
        ));
        assert!(matches!(
            row.get::<i64>("n"),
            Err(DecodeError::WrongType { column: "n", .. })
        ));
        assert!(matches!(
            row.get::<String>("t"),
            Err(DecodeError::Value { column: "t", .. })
        ));
        assert!(matches!(row.bytes("t"), Err(DecodeError::WrongType { .. })));
    }

    #[test]
    fn a_row_of_another_width_is_refused() {
        let raw = RawRow::from_cells(vec![None, None]);
        assert!(matches!(
            Row::new(&SPEC, &raw),
            Err(DecodeError::Shape {
                found: 2,
                expected: 5,
                ..
            })
        ));
    }

    #[test]
    fn a_cell_outside_the_body_is_an_error() {
        let raw = RawRow::new(
            Bytes::from_static(b"ab"),
            vec![Some(0..4), None, None, None, None],
        );
        let row = Row::new(&SPEC, &raw).unwrap();
        assert!(matches!(
            row.get::<i32>("n"),
            Err(DecodeError::Value { .. })
        ));
    }
}
