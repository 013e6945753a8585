//! Result rows of dialect statements on the wire: RowDescription from the
//! grammar's columns, DataRows in the formats the client asked for.

use crate::engine::values::Cell;
use crate::frontend::encoding::ClientEncoding;
use crate::frontend::params::result_format;
use crate::protocol::{self, oid, FieldDescription, Message, SqlError, SqlState};
use crate::rewrite::dialect::Column;

pub fn row_description(columns: &[Column], formats: &[i16]) -> Message {
    let fields: Vec<FieldDescription<'_>> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| FieldDescription {
            name: c.name,
            type_oid: c.type_oid,
            type_size: oid::type_size(c.type_oid),
            format: result_format(formats, i),
        })
        .collect();
    protocol::row_description(&fields)
}

/// RowDescription, or NoData for a statement without columns.
pub fn describe_columns(columns: &[Column], formats: &[i16]) -> Message {
    if columns.is_empty() {
        protocol::no_data()
    } else {
        row_description(columns, formats)
    }
}

/// One DataRow per row, each cell in its column's format; text in the
/// client's encoding, as PostgreSQL converts it.
pub fn data_rows<'r>(
    rows: impl Iterator<Item = &'r Vec<Cell>> + 'r,
    formats: &'r [i16],
    encoding: &'r ClientEncoding,
) -> impl Iterator<Item = Result<Message, SqlError>> + 'r {
    rows.map(move |row| {
        let encoded = row
            .iter()
            .enumerate()
            .map(|(i, cell)| encode_cell(cell, result_format(formats, i), encoding))
            .collect::<Result<Vec<Option<Vec<u8>>>, SqlError>>()?;
        Ok(protocol::data_row(encoded.iter().map(|v| v.as_deref())))
    })
}

fn encode_cell(
    cell: &Cell,
    format: i16,
    encoding: &ClientEncoding,
) -> Result<Option<Vec<u8>>, SqlError> {
    if format == 1 {
        return Ok(cell.to_binary());
    }
    let Some(text) = cell.to_text() else {
        return Ok(None);
    };
    if text.is_ascii() {
        return Ok(Some(text.into_bytes()));
    }
    match encoding {
        ClientEncoding::Utf8 | ClientEncoding::SqlAscii => Ok(Some(text.into_bytes())),
        ClientEncoding::Latin1 => text
            .chars()
            .map(|c| u8::try_from(u32::from(c)).map_err(|_| untranslatable(c, "LATIN1")))
            .collect::<Result<Vec<u8>, SqlError>>()
            .map(Some),
        ClientEncoding::Other(name) => {
            let c = text.chars().find(|c| !c.is_ascii()).unwrap_or('?');
            Err(untranslatable(c, name))
        }
    }
}

/// PostgreSQL's error for text a client encoding cannot carry (queenwire
/// converts its own results to UTF8, SQL_ASCII and LATIN1 only).
fn untranslatable(c: char, encoding: &str) -> SqlError {
    let mut err = SqlError::error(
        SqlState::UNTRANSLATABLE_CHARACTER,
        format!(
            "character {c:?} of a queenwire result has no equivalent in encoding \"{encoding}\""
        ),
    );
    err.hint = Some("use client_encoding UTF8 for queenwire statements".into());
    err
}
