//! Bound parameters of dialect statements, from the client's wire formats
//! to text, and result format codes.

use crate::engine::values::format_timestamptz;
use crate::protocol::SqlState;
use crate::protocol::{oid, SqlError};

/// The format code of parameter or column `i` under PostgreSQL's rule:
/// no codes = all text, one code = all of that format, else one each.
pub fn result_format(formats: &[i16], i: usize) -> i16 {
    match formats.len() {
        0 => 0,
        1 => formats[0],
        _ => formats.get(i).copied().unwrap_or(0),
    }
}

/// Converts bound values to text, reading binary ones by their type OID.
pub fn bind_params_as_text(
    params: &[Option<&[u8]>],
    formats: &[i16],
    types: &[u32],
) -> Result<Vec<Option<String>>, SqlError> {
    if formats.len() > 1 && formats.len() != params.len() {
        return Err(SqlError::error(
            SqlState::PROTOCOL_VIOLATION,
            format!(
                "bind message has {} parameter formats but {} parameters",
                formats.len(),
                params.len()
            ),
        ));
    }
    params
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let Some(bytes) = value else { return Ok(None) };
            let oid = types.get(i).copied().unwrap_or(0);
            match result_format(formats, i) {
                0 if oid == oid::BOOL => text_bool(bytes, i).map(Some),
                0 => text(bytes, i).map(Some),
                1 => binary(bytes, oid, i).map(Some),
                other => Err(SqlError::error(
                    SqlState::PROTOCOL_VIOLATION,
                    format!("unsupported format code: {other}"),
                )),
            }
        })
        .collect()
}

fn text(bytes: &[u8], i: usize) -> Result<String, SqlError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| {
        SqlError::error(
            SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            format!("parameter ${} is not valid UTF-8", i + 1),
        )
    })
}

/// A text value declared `bool`, read as PostgreSQL reads boolean input
/// (`TRUE`, `t`, `yes`, `on`, `1`, unique prefixes, any case, spaces
/// around), as `true` or `false`: pgjdbc's setBoolean sends `TRUE`.
fn text_bool(bytes: &[u8], i: usize) -> Result<String, SqlError> {
    let raw = text(bytes, i)?;
    let word = raw.trim().to_ascii_lowercase();
    let prefix_of = |full: &str, min: usize| word.len() >= min && full.starts_with(word.as_str());
    let value = if prefix_of("true", 1) || prefix_of("yes", 1) || word == "on" || word == "1" {
        "true"
    } else if prefix_of("false", 1) || prefix_of("no", 1) || prefix_of("off", 2) || word == "0" {
        "false"
    } else {
        return Err(SqlError::error(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type boolean: \"{raw}\""),
        ));
    };
    Ok(value.to_string())
}

fn binary(bytes: &[u8], oid: u32, i: usize) -> Result<String, SqlError> {
    let bad = || {
        SqlError::error(
            SqlState::INVALID_BINARY_REPRESENTATION,
            format!("incorrect binary data format in bind parameter {}", i + 1),
        )
    };
    let fixed = |n: usize| -> Result<&[u8], SqlError> {
        if bytes.len() == n {
            Ok(bytes)
        } else {
            Err(bad())
        }
    };
    Ok(match oid {
        oid::TEXT
        | oid::VARCHAR
        | oid::BPCHAR
        | oid::NAME
        | oid::UNKNOWN
        | oid::JSON
        | oid::UNSPECIFIED => text(bytes, i)?,
        // jsonb: a version byte, then the text
        oid::JSONB => match bytes.split_first() {
            Some((1, rest)) => text(rest, i)?,
            _ => return Err(bad()),
        },
        oid::INT2 => {
            let b = fixed(2)?;
            i16::from_be_bytes([b[0], b[1]]).to_string()
        }
        oid::INT4 => {
            let b = fixed(4)?;
            i32::from_be_bytes([b[0], b[1], b[2], b[3]]).to_string()
        }
        oid::INT8 => {
            let b = fixed(8)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            i64::from_be_bytes(a).to_string()
        }
        oid::BOOL => match fixed(1)?[0] {
            0 => "false".to_string(),
            _ => "true".to_string(),
        },
        oid::UUID => {
            let b = fixed(16)?;
            let mut a = [0u8; 16];
            a.copy_from_slice(b);
            uuid::Uuid::from_bytes(a).to_string()
        }
        oid::TIMESTAMPTZ | oid::TIMESTAMP => {
            let b = fixed(8)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            format_timestamptz(i64::from_be_bytes(a))
        }
        other => {
            return Err(SqlError::error(
                SqlState::DATATYPE_MISMATCH,
                format!(
                    "parameter ${} of type OID {other} is not accepted here: send it as text",
                    i + 1
                ),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_declared_bool_is_read_as_postgresql_reads_booleans() {
        let read = |v: &str| {
            bind_params_as_text(&[Some(v.as_bytes())], &[0], &[oid::BOOL])
                .map(|mut out| out.remove(0).unwrap())
                .map_err(|e| e.code().to_string())
        };
        for t in ["TRUE", "t", "tr", "yes", "Y", "on", "1", " true "] {
            assert_eq!(read(t), Ok("true".to_string()), "{t}");
        }
        for f in ["FALSE", "f", "no", "N", "off", "0"] {
            assert_eq!(read(f), Ok("false".to_string()), "{f}");
        }
        for bad in ["o", "", "2", "maybe", "{}"] {
            assert_eq!(read(bad), Err("22P02".to_string()), "{bad}");
        }
    }

    #[test]
    fn binary_parameters_become_text() {
        let int4 = 42i32.to_be_bytes();
        let jsonb = [1u8, b'{', b'}'];
        let params: Vec<Option<&[u8]>> = vec![Some(&int4), Some(&jsonb), None, Some(b"abc")];
        let out = bind_params_as_text(&params, &[1, 1, 1, 1], &[23, 3802, 25, 25]).unwrap();
        assert_eq!(
            out,
            vec![
                Some("42".into()),
                Some("{}".into()),
                None,
                Some("abc".into())
            ]
        );
    }

    #[test]
    fn binary_timestamps_become_postgresql_text_at_both_ends() {
        let cases: [(i64, &str); 3] = [
            (0, "2000-01-01 00:00:00+00"),
            (i64::MAX, "infinity"),
            (i64::MIN, "-infinity"),
        ];
        for (since_2000, text) in cases {
            let bytes = since_2000.to_be_bytes();
            let params: Vec<Option<&[u8]>> = vec![Some(&bytes)];
            let out = bind_params_as_text(&params, &[1], &[oid::TIMESTAMPTZ]).unwrap();
            assert_eq!(out, vec![Some(text.to_string())]);
        }
    }

    #[test]
    fn malformed_binary_is_an_error() {
        let params: Vec<Option<&[u8]>> = vec![Some(&[1, 2, 3])];
        assert_eq!(
            bind_params_as_text(&params, &[1], &[23])
                .unwrap_err()
                .code(),
            "22P03"
        );
        let wrong_version: Vec<Option<&[u8]>> = vec![Some(&[2, b'{', b'}'])];
        assert_eq!(
            bind_params_as_text(&wrong_version, &[1], &[3802])
                .unwrap_err()
                .code(),
            "22P03"
        );
        assert_eq!(
            bind_params_as_text(&params, &[1, 0], &[23])
                .unwrap_err()
                .code(),
            "08P01"
        );
    }

    #[test]
    fn result_formats_follow_postgresql_rules() {
        assert_eq!(result_format(&[], 3), 0);
        assert_eq!(result_format(&[1], 3), 1);
        assert_eq!(result_format(&[0, 1], 1), 1);
    }
}
