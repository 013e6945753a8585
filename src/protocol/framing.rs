//! Framing: a message is `tag:u8, len:i32 (includes itself), body`; the
//! startup phase sends untagged `len:i32, body` packets. Messages stay raw
//! bytes so passthrough is forwarded exactly as it arrived; `BodyReader`
//! decodes the few fields the proxy must look at.

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

    /// A NUL-terminated string's bytes, in whatever encoding the client
    /// uses.
    pub fn cbytes(&mut self) -> Result<&'a [u8], Malformed> {
        let rest = &self.buf[self.pos.min(self.buf.len())..];
        let nul = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(Malformed("unterminated string"))?;
        self.pos += nul + 1;
        Ok(&rest[..nul])
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
