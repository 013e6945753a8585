//! JSON text as a tokio-postgres parameter and result, without serde: the
//! payload travels as the same bytes to every system (binary `jsonb` is a
//! version byte then the text; binary `json` is the text).

use bytes::{BufMut, BytesMut};
use std::error::Error;
use tokio_postgres::types::{to_sql_checked, FromSql, IsNull, ToSql, Type};

#[derive(Debug, Clone, Copy)]
pub struct Json<'a>(pub &'a str);

impl ToSql for Json<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        if *ty == Type::JSONB {
            out.put_u8(1);
        }
        out.put_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSONB || *ty == Type::JSON
    }

    to_sql_checked!();
}

/// A `json` or `jsonb` result column as its text.
#[derive(Debug)]
pub struct JsonText<'a>(pub &'a str);

impl<'a> FromSql<'a> for JsonText<'a> {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        let raw = if *ty == Type::JSONB {
            match raw.split_first() {
                Some((1, rest)) => rest,
                _ => return Err("unknown jsonb binary version".into()),
            }
        } else {
            raw
        };
        Ok(JsonText(std::str::from_utf8(raw)?))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSONB || *ty == Type::JSON
    }
}
