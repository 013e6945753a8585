//! Result rows of dialect statements on the wire: RowDescription from the
//! grammar's columns, DataRows in the formats the client asked for.

use crate::engine::values::Cell;
use crate::frontend::params::result_format;
use crate::protocol::{self, oid, FieldDescription, Message};
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

/// One DataRow per row, each cell in its column's format.
pub fn data_rows<'r>(
    rows: impl Iterator<Item = &'r Vec<Cell>> + 'r,
    formats: &'r [i16],
) -> impl Iterator<Item = Message> + 'r {
    rows.map(move |row| {
        let encoded: Vec<Option<Vec<u8>>> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| encode_cell(cell, result_format(formats, i)))
            .collect();
        protocol::data_row(encoded.iter().map(|v| v.as_deref()))
    })
}

fn encode_cell(cell: &Cell, format: i16) -> Option<Vec<u8>> {
    if format == 1 {
        cell.to_binary()
    } else {
        cell.to_text().map(String::into_bytes)
    }
}
