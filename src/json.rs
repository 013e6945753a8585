//! The one JSON writer: the documents the procedures take (a queue's
//! options, a KV batch, the metrics flush), the rows streams emit and the
//! `--log-format json` lines. Strings are escaped here, once; numbers and
//! booleans are written by type; a value already checked as JSON (a payload
//! the client sent) goes in verbatim. The reader is the dialect's validator
//! (`rewrite/dialect/json.rs`), which follows PostgreSQL's refusals.

/// Appends `s` as a JSON string literal.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(HEX[(c as usize) >> 4] as char);
                out.push(HEX[(c as usize) & 0xf] as char);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `s` as a JSON string literal, on its own.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_string(&mut out, s);
    out
}

/// One JSON value, as the writer knows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum JsonValue<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u128),
    Str(&'a str),
    /// Text already checked to be one JSON value.
    Raw(&'a str),
}

impl JsonValue<'_> {
    fn write(&self, out: &mut String) {
        match self {
            JsonValue::Null => out.push_str("null"),
            JsonValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            JsonValue::Int(i) => out.push_str(&i.to_string()),
            JsonValue::Uint(u) => out.push_str(&u.to_string()),
            JsonValue::Str(s) => write_string(out, s),
            JsonValue::Raw(json) => out.push_str(json),
        }
    }
}

impl<'a> From<Option<&'a str>> for JsonValue<'a> {
    fn from(s: Option<&'a str>) -> JsonValue<'a> {
        s.map_or(JsonValue::Null, JsonValue::Str)
    }
}

impl From<Option<i64>> for JsonValue<'_> {
    fn from(i: Option<i64>) -> Self {
        i.map_or(JsonValue::Null, JsonValue::Int)
    }
}

/// A JSON object, written member by member in order.
#[derive(Debug)]
pub struct Object {
    out: String,
}

impl Default for Object {
    fn default() -> Self {
        Object::new()
    }
}

impl Object {
    pub fn new() -> Object {
        Object {
            out: String::from("{"),
        }
    }

    pub fn member(mut self, key: &str, value: JsonValue<'_>) -> Object {
        if self.out.len() > 1 {
            self.out.push(',');
        }
        write_string(&mut self.out, key);
        self.out.push(':');
        value.write(&mut self.out);
        self
    }

    pub fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// A JSON array of already written JSON values.
pub fn array<I: IntoIterator<Item = String>>(values: I) -> String {
    let mut out = String::from("[");
    for (i, v) in values.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&v);
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::dialect::validate_json;

    #[test]
    fn strings_are_escaped() {
        let mut out = String::new();
        write_string(&mut out, "a\"b\\c\u{1}\n\r\té\u{1f}");
        assert_eq!(out, r#""a\"b\\c\u0001\n\r\té\u001f""#);
        assert!(validate_json(&out).is_ok());
        assert_eq!(string("a\"b\\\n\u{1}"), "\"a\\\"b\\\\\\n\\u0001\"");
    }

    #[test]
    fn objects_and_arrays_are_valid_json() {
        let object = Object::new()
            .member("s", JsonValue::Str("x"))
            .member("n", JsonValue::Int(-3))
            .member("u", JsonValue::Uint(7))
            .member("b", JsonValue::Bool(false))
            .member("z", JsonValue::Null)
            .member("raw", JsonValue::Raw(r#"{"k":[1,2]}"#))
            .finish();
        assert_eq!(
            object,
            r#"{"s":"x","n":-3,"u":7,"b":false,"z":null,"raw":{"k":[1,2]}}"#
        );
        let list = array([object.clone(), Object::new().finish()]);
        assert_eq!(list, format!("[{object},{{}}]"));
        assert!(validate_json(&list).is_ok());
        assert_eq!(array(Vec::new()), "[]");
    }
}
