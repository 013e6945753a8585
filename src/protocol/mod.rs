//! PostgreSQL protocol v3 framing, shared by both sides of the proxy.
//!
//! Every message after startup is `tag:u8, len:i32 (includes itself), body`.
//! We keep messages as raw bytes (`Message`) so passthrough traffic is
//! forwarded exactly as it arrived; only the few fields the proxy must look
//! at are decoded, through `BodyReader`. Messages the proxy produces itself
//! are built by the `build_*` functions.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt};

/// One protocol message: its tag and its body (without the length word).
#[derive(Debug, Clone)]
pub struct Message {
    pub tag: u8,
    pub body: Bytes,
}

impl Message {
    pub fn new(tag: u8, body: impl Into<Bytes>) -> Message {
        Message {
            tag,
            body: body.into(),
        }
    }

    /// Appends the framed message to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(5 + self.body.len());
        out.put_u8(self.tag);
        out.put_i32(self.body.len() as i32 + 4);
        out.put_slice(&self.body);
    }

    pub fn reader(&self) -> BodyReader<'_> {
        BodyReader {
            buf: &self.body,
            pos: 0,
        }
    }
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("invalid message length {0}")]
    BadLength(i64),
    #[error("message of {0} bytes exceeds the limit of {1} bytes")]
    TooLarge(usize, usize),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Reads one tagged message, buffering in `buf`. `Closed` on a clean EOF
/// between messages.
pub async fn read_message<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    max_len: usize,
) -> Result<Message, FrameError> {
    loop {
        if buf.len() >= 5 {
            let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as i64;
            if len < 4 {
                return Err(FrameError::BadLength(len));
            }
            let len = len as usize;
            if len > max_len {
                return Err(FrameError::TooLarge(len, max_len));
            }
            if buf.len() > len {
                let tag = buf[0];
                buf.advance(5);
                let body = buf.split_to(len - 4).freeze();
                return Ok(Message { tag, body });
            }
            // Grow with the data, not with the claimed length: a header that
            // announces a huge message must not allocate it up front.
            buf.reserve((len + 1 - buf.len()).min(1 << 20));
        }
        if reader.read_buf(buf).await? == 0 {
            if buf.is_empty() {
                return Err(FrameError::Closed);
            }
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "truncated message").into());
        }
    }
}

/// Reads an untagged startup-phase packet (`len:i32, body`).
pub async fn read_startup_packet<R: AsyncRead + Unpin>(
    reader: &mut R,
    max_len: usize,
) -> Result<Bytes, FrameError> {
    let mut len_buf = [0u8; 4];
    match reader.read_exact(&mut len_buf).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = i32::from_be_bytes(len_buf) as i64;
    if !(8..=max_len as i64).contains(&len) {
        return Err(FrameError::BadLength(len));
    }
    let mut body = vec![0u8; len as usize - 4];
    reader.read_exact(&mut body).await?;
    Ok(Bytes::from(body))
}

/// A cursor over a message body. Every accessor fails cleanly on short or
/// malformed input: bodies come from clients and are never trusted.
pub struct BodyReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

#[derive(Debug, thiserror::Error)]
#[error("malformed protocol message: {0}")]
pub struct Malformed(pub &'static str);

impl<'a> BodyReader<'a> {
    pub fn from_slice(buf: &'a [u8]) -> BodyReader<'a> {
        BodyReader { buf, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub fn u8(&mut self) -> Result<u8, Malformed> {
        let b = *self.buf.get(self.pos).ok_or(Malformed("truncated byte"))?;
        self.pos += 1;
        Ok(b)
    }

    pub fn i16(&mut self) -> Result<i16, Malformed> {
        let s = self.bytes(2)?;
        Ok(i16::from_be_bytes([s[0], s[1]]))
    }

    pub fn i32(&mut self) -> Result<i32, Malformed> {
        let s = self.bytes(4)?;
        Ok(i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(Malformed("length overflow"))?;
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or(Malformed("truncated field"))?;
        self.pos = end;
        Ok(s)
    }

    /// A NUL-terminated string, decoded as UTF-8.
    pub fn cstr(&mut self) -> Result<&'a str, Malformed> {
        let rest = &self.buf[self.pos.min(self.buf.len())..];
        let nul = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(Malformed("unterminated string"))?;
        let s = std::str::from_utf8(&rest[..nul]).map_err(|_| Malformed("invalid UTF-8"))?;
        self.pos += nul + 1;
        Ok(s)
    }
}

fn put_cstr(out: &mut BytesMut, s: &str) {
    out.put_slice(s.as_bytes());
    out.put_u8(0);
}

pub fn build(tag: u8, f: impl FnOnce(&mut BytesMut)) -> Message {
    let mut body = BytesMut::new();
    f(&mut body);
    Message::new(tag, body.freeze())
}

pub fn empty(tag: u8) -> Message {
    Message::new(tag, Bytes::new())
}

pub fn ready_for_query(status: u8) -> Message {
    Message::new(b'Z', Bytes::copy_from_slice(&[status]))
}

pub fn parameter_status(name: &str, value: &str) -> Message {
    build(b'S', |b| {
        put_cstr(b, name);
        put_cstr(b, value);
    })
}

pub fn backend_key_data(pid: i32, secret: i32) -> Message {
    build(b'K', |b| {
        b.put_i32(pid);
        b.put_i32(secret);
    })
}

pub fn authentication(code: i32, extra: &[u8]) -> Message {
    build(b'R', |b| {
        b.put_i32(code);
        b.put_slice(extra);
    })
}

pub fn command_complete(tag: &str) -> Message {
    build(b'C', |b| put_cstr(b, tag))
}

pub fn parameter_description(oids: &[u32]) -> Message {
    build(b't', |b| {
        b.put_i16(oids.len() as i16);
        for oid in oids {
            b.put_u32(*oid);
        }
    })
}

/// A column of a RowDescription: name, type OID and the format code the
/// client will receive it in.
pub struct FieldDescription<'a> {
    pub name: &'a str,
    pub type_oid: u32,
    pub type_size: i16,
    pub format: i16,
}

pub fn row_description(fields: &[FieldDescription<'_>]) -> Message {
    build(b'T', |b| {
        b.put_i16(fields.len() as i16);
        for f in fields {
            put_cstr(b, f.name);
            b.put_u32(0); // table oid
            b.put_i16(0); // column attribute number
            b.put_u32(f.type_oid);
            b.put_i16(f.type_size);
            b.put_i32(-1); // type modifier
            b.put_i16(f.format);
        }
    })
}

/// One DataRow; `None` is SQL NULL.
pub fn data_row<'a>(values: impl ExactSizeIterator<Item = Option<&'a [u8]>>) -> Message {
    build(b'D', |b| {
        b.put_i16(values.len() as i16);
        for v in values {
            match v {
                None => b.put_i32(-1),
                Some(bytes) => {
                    b.put_i32(bytes.len() as i32);
                    b.put_slice(bytes);
                }
            }
        }
    })
}

/// Severity and fields of an ErrorResponse or NoticeResponse we produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorFields {
    pub severity: &'static str,
    pub code: String,
    pub message: String,
    pub position: Option<usize>,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl ErrorFields {
    pub fn error(code: &str, message: impl Into<String>) -> ErrorFields {
        ErrorFields {
            severity: "ERROR",
            code: code.to_string(),
            message: message.into(),
            position: None,
            detail: None,
            hint: None,
        }
    }

    pub fn fatal(code: &str, message: impl Into<String>) -> ErrorFields {
        ErrorFields {
            severity: "FATAL",
            ..ErrorFields::error(code, message)
        }
    }

    pub fn with_position(mut self, position: Option<usize>) -> ErrorFields {
        self.position = position;
        self
    }

    pub fn to_message(&self) -> Message {
        build(b'E', |b| {
            b.put_u8(b'S');
            put_cstr(b, self.severity);
            b.put_u8(b'V');
            put_cstr(b, self.severity);
            b.put_u8(b'C');
            put_cstr(b, &self.code);
            b.put_u8(b'M');
            put_cstr(b, &self.message);
            if let Some(d) = &self.detail {
                b.put_u8(b'D');
                put_cstr(b, d);
            }
            if let Some(h) = &self.hint {
                b.put_u8(b'H');
                put_cstr(b, h);
            }
            if let Some(p) = self.position {
                b.put_u8(b'P');
                put_cstr(b, &p.to_string());
            }
            b.put_u8(0);
        })
    }

    /// Decodes the fields of a backend ErrorResponse/NoticeResponse body.
    pub fn parse(body: &[u8]) -> ErrorFields {
        let mut fields = ErrorFields::error("XX000", "");
        let mut r = BodyReader::from_slice(body);
        while let Ok(kind) = r.u8() {
            if kind == 0 {
                break;
            }
            let Ok(value) = r.cstr() else { break };
            match kind {
                b'C' => fields.code = value.to_string(),
                b'M' => fields.message = value.to_string(),
                b'D' => fields.detail = Some(value.to_string()),
                b'H' => fields.hint = Some(value.to_string()),
                b'P' => fields.position = value.parse().ok(),
                b'V' if value == "FATAL" => fields.severity = "FATAL",
                _ => {}
            }
        }
        fields
    }
}

/// Frontend messages the proxy must look into.
pub mod frontend {
    use super::*;

    pub struct Parse<'a> {
        pub name: &'a str,
        pub query: &'a str,
        pub param_types: Vec<u32>,
    }

    pub fn parse(msg: &Message) -> Result<Parse<'_>, Malformed> {
        let mut r = msg.reader();
        let name = r.cstr()?;
        let query = r.cstr()?;
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
        })
    }

    pub fn build_parse(name: &str, query: &str, param_types: &[u32]) -> Message {
        build(b'P', |b| {
            put_cstr(b, name);
            put_cstr(b, query);
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
        })
    }

    /// The same Bind, naming a different prepared statement.
    pub fn rebind(msg: &Message, bind: &Bind<'_>, statement: &str) -> Message {
        build(b'B', |b| {
            put_cstr(b, bind.portal);
            put_cstr(b, statement);
            b.put_slice(&msg.body[bind.after_statement..]);
        })
    }

    /// Describe or Close: a kind byte (`S` statement, `P` portal) and a name.
    pub fn target(msg: &Message) -> Result<(u8, &str), Malformed> {
        let mut r = msg.reader();
        let kind = r.u8()?;
        if kind != b'S' && kind != b'P' {
            return Err(Malformed("expected 'S' or 'P'"));
        }
        Ok((kind, r.cstr()?))
    }

    pub fn build_target(tag: u8, kind: u8, name: &str) -> Message {
        build(tag, |b| {
            b.put_u8(kind);
            put_cstr(b, name);
        })
    }

    pub fn execute(msg: &Message) -> Result<(&str, i32), Malformed> {
        let mut r = msg.reader();
        Ok((r.cstr()?, r.i32()?))
    }

    pub fn query(msg: &Message) -> Result<&str, Malformed> {
        msg.reader().cstr()
    }

    pub fn build_query(sql: &str) -> Message {
        build(b'Q', |b| put_cstr(b, sql))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_frames_split_across_reads() {
        let mut wire = BytesMut::new();
        frontend::build_query("SELECT 1").encode(&mut wire);
        empty(b'S').encode(&mut wire);
        let bytes = wire.freeze();
        let (a, b) = bytes.split_at(3);
        let mut stream = tokio_test_stream(vec![a.to_vec(), b.to_vec()]);
        let mut buf = BytesMut::new();
        let m = read_message(&mut stream, &mut buf, 1 << 20).await.unwrap();
        assert_eq!(m.tag, b'Q');
        assert_eq!(frontend::query(&m).unwrap(), "SELECT 1");
        let m = read_message(&mut stream, &mut buf, 1 << 20).await.unwrap();
        assert_eq!(m.tag, b'S');
        assert!(matches!(
            read_message(&mut stream, &mut buf, 1 << 20).await,
            Err(FrameError::Closed)
        ));
    }

    #[tokio::test]
    async fn rejects_absurd_lengths() {
        let mut stream = tokio_test_stream(vec![vec![b'Q', 0x7f, 0xff, 0xff, 0xff]]);
        let mut buf = BytesMut::new();
        assert!(matches!(
            read_message(&mut stream, &mut buf, 1 << 20).await,
            Err(FrameError::TooLarge(..))
        ));
        let mut stream = tokio_test_stream(vec![vec![b'Q', 0, 0, 0, 1]]);
        assert!(matches!(
            read_message(&mut stream, &mut BytesMut::new(), 1 << 20).await,
            Err(FrameError::BadLength(1))
        ));
    }

    #[test]
    fn malformed_bind_is_an_error_not_a_panic() {
        let msg = Message::new(b'B', Bytes::from_static(b"p\0s\0\x00\x01\x00"));
        assert!(frontend::bind(&msg).is_err());
        let msg = Message::new(
            b'B',
            Bytes::from_static(b"p\0s\0\x00\x00\x00\x01\x7f\xff\xff\xff"),
        );
        assert!(frontend::bind(&msg).is_err());
    }

    #[test]
    fn rebind_replaces_only_the_statement_name() {
        let original = build(b'B', |b| {
            put_cstr(b, "");
            put_cstr(b, "s1");
            b.put_i16(0);
            b.put_i16(1);
            b.put_i32(2);
            b.put_slice(b"42");
            b.put_i16(0);
        });
        let parsed = frontend::bind(&original).unwrap();
        let rewritten = frontend::rebind(&original, &parsed, "qw_7");
        let again = frontend::bind(&rewritten).unwrap();
        assert_eq!(again.statement, "qw_7");
        assert_eq!(again.params, vec![Some(&b"42"[..])]);
    }

    fn tokio_test_stream(chunks: Vec<Vec<u8>>) -> impl AsyncRead + Unpin {
        let data: Vec<u8> = chunks.concat();
        std::io::Cursor::new(data)
    }
}
