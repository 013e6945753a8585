//! Frontend messages: the parsers for those the proxy must look into, and
//! the builders for those it sends PostgreSQL itself.

use super::backend::{build, empty, put_cstr};
use super::framing::{Malformed, Message};
use super::tags::{frontend as tag, Target};
use bytes::BufMut;

pub struct Parse<'a> {
    pub name: &'a str,
    /// The statement's text in the client's encoding.
    pub query: &'a [u8],
    pub param_types: Vec<u32>,
    /// Bytes after the last field: PostgreSQL refuses such a message
    /// ("invalid message format") before it runs anything of it.
    pub trailing: bool,
}

pub fn parse(msg: &Message) -> Result<Parse<'_>, Malformed> {
    let mut r = msg.reader();
    let name = r.cstr()?;
    let query = r.cbytes()?;
    // Counts are unsigned 16-bit, as PostgreSQL reads them.
    let n = r.i16()? as u16;
    let mut param_types = Vec::with_capacity(n as usize);
    for _ in 0..n {
        param_types.push(r.i32()? as u32);
    }
    Ok(Parse {
        name,
        query,
        param_types,
        trailing: !r.is_empty(),
    })
}

/// A Parse of `query` (text in the client's encoding).
pub fn build_parse(name: &str, query: impl AsRef<[u8]>, param_types: &[u32]) -> Message {
    build(tag::PARSE, |b| {
        put_cstr(b, name);
        b.put_slice(query.as_ref());
        b.put_u8(0);
        b.put_i16(param_types.len() as i16);
        for t in param_types {
            b.put_u32(*t);
        }
    })
}

pub struct Bind<'a> {
    pub portal: &'a str,
    pub statement: &'a str,
    pub param_formats: Vec<i16>,
    pub params: Vec<Option<&'a [u8]>>,
    pub result_formats: Vec<i16>,
    /// Byte offset in the body where the statement name ends, so the
    /// name can be replaced without re-encoding the rest.
    pub after_statement: usize,
    /// Bytes after the last field (see [`Parse::trailing`]).
    pub trailing: bool,
}

pub fn bind(msg: &Message) -> Result<Bind<'_>, Malformed> {
    let mut r = msg.reader();
    let portal = r.cstr()?;
    let statement = r.cstr()?;
    let after_statement = r.position();
    let nf = r.i16()? as u16;
    let mut param_formats = Vec::with_capacity(nf as usize);
    for _ in 0..nf {
        param_formats.push(r.i16()?);
    }
    let np = r.i16()? as u16;
    let mut params = Vec::with_capacity(np as usize);
    for _ in 0..np {
        let len = r.i32()?;
        if len == -1 {
            params.push(None);
        } else if len < -1 {
            return Err(Malformed("invalid parameter length"));
        } else {
            params.push(Some(r.bytes(len as usize)?));
        }
    }
    let nr = r.i16()? as u16;
    let mut result_formats = Vec::with_capacity(nr as usize);
    for _ in 0..nr {
        result_formats.push(r.i16()?);
    }
    Ok(Bind {
        portal,
        statement,
        param_formats,
        params,
        result_formats,
        after_statement,
        trailing: !r.is_empty(),
    })
}

/// The same Bind, naming a different prepared statement.
pub fn rebind(msg: &Message, bind: &Bind<'_>, statement: &str) -> Message {
    build(tag::BIND, |b| {
        put_cstr(b, bind.portal);
        put_cstr(b, statement);
        b.put_slice(&msg.body[bind.after_statement..]);
    })
}

/// Describe or Close: a kind byte (`S` statement, `P` portal) and a name.
pub fn target(msg: &Message) -> Result<(Target, &str), Malformed> {
    let mut r = msg.reader();
    let kind = Target::from_byte(r.u8()?).ok_or(Malformed("expected 'S' or 'P'"))?;
    Ok((kind, r.cstr()?))
}

/// Whether a Describe, Execute or Close (read whole otherwise) has bytes
/// after its last field, which PostgreSQL refuses ("invalid message
/// format") before acting on it.
pub fn has_trailing(msg: &Message) -> bool {
    let mut r = msg.reader();
    let fields = match msg.tag {
        tag::DESCRIBE | tag::CLOSE => r.u8().is_ok() && r.cstr().is_ok(),
        tag::EXECUTE => r.cstr().is_ok() && r.i32().is_ok(),
        _ => false,
    };
    fields && !r.is_empty()
}

pub fn build_describe(kind: Target, name: &str) -> Message {
    build(tag::DESCRIBE, |b| {
        b.put_u8(kind.as_byte());
        put_cstr(b, name);
    })
}

pub fn build_close(kind: Target, name: &str) -> Message {
    build(tag::CLOSE, |b| {
        b.put_u8(kind.as_byte());
        put_cstr(b, name);
    })
}

pub fn execute(msg: &Message) -> Result<(&str, i32), Malformed> {
    let mut r = msg.reader();
    Ok((r.cstr()?, r.i32()?))
}

/// A Query's text, in the client's encoding.
pub fn query(msg: &Message) -> Result<&[u8], Malformed> {
    msg.reader().cbytes()
}

/// Whether a Query has bytes after its text's NUL (an embedded NUL):
/// PostgreSQL refuses it ("invalid message format") and runs none of it.
pub fn query_has_trailing(msg: &Message) -> bool {
    let mut r = msg.reader();
    r.cbytes().is_ok() && !r.is_empty()
}

/// A Query of `sql` (text in the client's encoding).
pub fn build_query(sql: impl AsRef<[u8]>) -> Message {
    build(tag::QUERY, |b| {
        b.put_slice(sql.as_ref());
        b.put_u8(0);
    })
}

pub fn sync() -> Message {
    empty(tag::SYNC)
}

pub fn flush() -> Message {
    empty(tag::FLUSH)
}

pub fn terminate() -> Message {
    empty(tag::TERMINATE)
}

/// Execute `portal`, returning at most `max_rows` rows (0: all).
pub fn build_execute(portal: &str, max_rows: i32) -> Message {
    build(tag::EXECUTE, |b| {
        put_cstr(b, portal);
        b.put_i32(max_rows);
    })
}

/// A Bind of `portal` to `statement` with every parameter in text format
/// (`None`: NULL) and results in text.
pub fn build_bind_text(portal: &str, statement: &str, params: &[Option<&str>]) -> Message {
    build(tag::BIND, |b| {
        put_cstr(b, portal);
        put_cstr(b, statement);
        b.put_i16(0);
        b.put_i16(params.len() as i16);
        for p in params {
            match p {
                None => b.put_i32(-1),
                Some(v) => {
                    b.put_i32(v.len() as i32);
                    b.put_slice(v.as_bytes());
                }
            }
        }
        b.put_i16(0);
    })
}
