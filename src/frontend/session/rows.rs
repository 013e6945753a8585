//! Result rows of dialect statements on the wire: RowDescription from the
//! grammar's columns, DataRows in the formats the client asked for.

use crate::engine::values::Cell;
use crate::frontend::encoding::ClientEncoding;
use crate::frontend::params::result_format;
use crate::protocol::{self, oid, tags, FieldDescription, Message, SqlError, SqlState};
use crate::rewrite::dialect::Column;
use bytes::{BufMut, BytesMut};

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

/// Appends one DataRow per row to `out`, each cell in its column's
/// format; text in the client's encoding, as PostgreSQL converts it. The
/// cells are written in place (no buffer per row or cell: a PUSH of 100
/// messages answers 100 rows). On an error the rows before the failing one
/// stay written and the failing one is not.
pub fn write_data_rows(
    rows: &[Vec<Cell>],
    formats: &[i16],
    encoding: &ClientEncoding,
    out: &mut BytesMut,
) -> Result<(), SqlError> {
    for row in rows {
        let start = out.len();
        out.put_u8(tags::backend::DATA_ROW);
        out.put_i32(0);
        out.put_i16(row.len() as i16);
        for (i, cell) in row.iter().enumerate() {
            if let Err(e) = write_cell(cell, result_format(formats, i), encoding, out) {
                out.truncate(start);
                return Err(e);
            }
        }
        let len = (out.len() - start - 1) as i32;
        out[start + 1..start + 5].copy_from_slice(&len.to_be_bytes());
    }
    Ok(())
}

/// One cell: its length, then its value (-1 and nothing for NULL).
fn write_cell(
    cell: &Cell,
    format: i16,
    encoding: &ClientEncoding,
    out: &mut BytesMut,
) -> Result<(), SqlError> {
    let start = out.len();
    out.put_i32(0);
    let written = match cell {
        _ if format == 1 => cell.write_binary(out),
        Cell::Text(s) | Cell::Jsonb(s) if !s.is_ascii() => {
            write_encoded(s, encoding, out)?;
            true
        }
        Cell::Shared(s) if !s.is_ascii() => {
            write_encoded(s, encoding, out)?;
            true
        }
        _ => cell.write_text(out),
    };
    let len = if written {
        (out.len() - start - 4) as i32
    } else {
        -1
    };
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// Non-ASCII text in the client's encoding.
fn write_encoded(
    text: &str,
    encoding: &ClientEncoding,
    out: &mut BytesMut,
) -> Result<(), SqlError> {
    match encoding {
        ClientEncoding::Utf8 | ClientEncoding::SqlAscii => out.extend_from_slice(text.as_bytes()),
        ClientEncoding::Latin1 => {
            for c in text.chars() {
                out.put_u8(u8::try_from(u32::from(c)).map_err(|_| untranslatable(c, "LATIN1"))?);
            }
        }
        ClientEncoding::Other(name) => {
            let c = text.chars().find(|c| !c.is_ascii()).unwrap_or('?');
            return Err(untranslatable(c, name));
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(rows: &[Vec<Cell>], formats: &[i16], encoding: &ClientEncoding) -> Vec<u8> {
        let mut out = BytesMut::new();
        write_data_rows(rows, formats, encoding, &mut out).expect("rows encode");
        out.to_vec()
    }

    /// The DataRow PostgreSQL would send for these values.
    fn expected(values: &[Option<&[u8]>]) -> Vec<u8> {
        let mut out = BytesMut::new();
        protocol::data_row(values.iter().copied()).encode(&mut out);
        out.to_vec()
    }

    #[test]
    fn rows_are_framed_as_data_rows_in_text_and_binary() {
        let id = uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let row = vec![
            Cell::Uuid(id),
            Cell::Text("orders".into()),
            Cell::Null,
            Cell::Int8(-42),
            Cell::Int4(7),
            Cell::Bool(true),
            Cell::Jsonb(r#"{"a":1}"#.into()),
            Cell::unix_micros(0),
        ];
        let text = framed(&[row.clone(), row.clone()], &[], &ClientEncoding::Utf8);
        let one = expected(&[
            Some(b"01234567-89ab-cdef-0123-456789abcdef"),
            Some(b"orders"),
            None,
            Some(b"-42"),
            Some(b"7"),
            Some(b"t"),
            Some(br#"{"a":1}"#),
            Some(b"1970-01-01 00:00:00+00"),
        ]);
        assert_eq!(text, [one.clone(), one].concat());

        let binary = framed(&[row], &[1], &ClientEncoding::Utf8);
        let epoch = (-crate::engine::values::PG_EPOCH_OFFSET_MICROS).to_be_bytes();
        assert_eq!(
            binary,
            expected(&[
                Some(id.as_bytes()),
                Some(b"orders"),
                None,
                Some(&(-42i64).to_be_bytes()),
                Some(&7i32.to_be_bytes()),
                Some(&[1]),
                Some(b"\x01{\"a\":1}"),
                Some(&epoch),
            ])
        );
    }

    #[test]
    fn text_is_converted_to_the_client_encoding_or_refused_whole_row() {
        let rows = vec![
            vec![Cell::Text("ok".into())],
            vec![Cell::Text("café €".into())],
        ];
        let utf8 = framed(&rows, &[], &ClientEncoding::Utf8);
        assert!(utf8.ends_with("café €".as_bytes()));

        let latin1 = framed(&rows[..1], &[], &ClientEncoding::Latin1);
        assert_eq!(latin1, expected(&[Some(b"ok")]));
        let cafe = vec![vec![Cell::Text("café".into())]];
        assert_eq!(
            framed(&cafe, &[], &ClientEncoding::Latin1),
            expected(&[Some(b"caf\xe9")])
        );

        // The euro sign has no LATIN1 byte: the first row stays written,
        // nothing of the second.
        let mut out = BytesMut::new();
        let err = write_data_rows(&rows, &[], &ClientEncoding::Latin1, &mut out)
            .expect_err("untranslatable");
        assert_eq!(err.code(), SqlState::UNTRANSLATABLE_CHARACTER.code());
        assert_eq!(out.to_vec(), expected(&[Some(b"ok")]));
    }
}
