//! The channel between queenwire processes that forwards ephemeral
//! statements to a queue's owner (docs/internals/ephemeral.md, "Forwarding
//! to the owner"): frames, the typed requests and replies, and the
//! handshake that proves both ends know the owner's secret.
//!
//! A frame is a big-endian `u32` length and that many bytes; its first
//! byte says what it is. Before the handshake has succeeded a frame is at
//! most [`HANDSHAKE_FRAME`] bytes, so an unauthenticated peer cannot make
//! the owner allocate. The handshake, with the secret the owner published
//! in `queen.ephemeral_peers`:
//!
//! 1. owner → caller: `H`, version, nonce_o (32 random bytes);
//! 2. caller → owner: `A`, nonce_c, HMAC-SHA256(secret, "caller" ‖ nonce_o ‖ nonce_c);
//! 3. owner → caller: `W`, HMAC-SHA256(secret, "owner" ‖ nonce_o ‖ nonce_c),
//!    or `X` and the connection closes when the caller's HMAC is wrong.
//!
//! The secret never travels, a recorded handshake cannot be replayed (the
//! owner's nonce is fresh), and the caller knows it reached the owner, not
//! whoever listens on the address now. The channel is not encrypted.

use super::store::{Delivered, NewMessage, Pushed, Start};
use crate::protocol::tags::internal as tag;
use crate::protocol::SqlError;
use ring::hmac;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use uuid::Uuid;

const VERSION: u8 = 1;
pub const NONCE: usize = 32;
/// The largest frame before the handshake has succeeded.
pub const HANDSHAKE_FRAME: usize = 256;
/// The largest frame after it (a PUSH of many large payloads).
pub const MAX_FRAME: usize = 1 << 30;

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    #[error("the other queenwire refused the secret")]
    Refused,
    #[error("the other end does not prove it knows the owner's secret")]
    Impostor,
}

pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max: usize) -> Result<Vec<u8>, WireError> {
    let len = r.read_u32().await? as usize;
    if len == 0 || len > max {
        return Err(WireError::Malformed("frame length"));
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).await?;
    Ok(body)
}

pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, body: &[u8]) -> Result<(), WireError> {
    let len = u32::try_from(body.len()).map_err(|_| WireError::Malformed("frame too long"))?;
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(body);
    w.write_all(&out).await?;
    w.flush().await?;
    Ok(())
}

fn mac(secret: &[u8], who: &[u8], nonce_o: &[u8], nonce_c: &[u8]) -> hmac::Tag {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(who);
    ctx.update(nonce_o);
    ctx.update(nonce_c);
    ctx.sign()
}

fn verify(secret: &[u8], who: &[u8], nonce_o: &[u8], nonce_c: &[u8], tag: &[u8]) -> bool {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut msg = Vec::with_capacity(who.len() + 2 * NONCE);
    msg.extend_from_slice(who);
    msg.extend_from_slice(nonce_o);
    msg.extend_from_slice(nonce_c);
    hmac::verify(&key, &msg, tag).is_ok()
}

fn nonce() -> [u8; NONCE] {
    rand::random()
}

/// The owner's side: `Ok` once the caller proved it knows `secret`.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &[u8],
) -> Result<(), WireError> {
    let nonce_o = nonce();
    let mut hello = vec![tag::HELLO, VERSION];
    hello.extend_from_slice(&nonce_o);
    write_frame(s, &hello).await?;
    let auth = read_frame(s, HANDSHAKE_FRAME).await?;
    if auth.len() < 1 + NONCE || auth[0] != tag::PROOF {
        return Err(WireError::Malformed("expected the caller's proof"));
    }
    let (nonce_c, tag) = auth[1..].split_at(NONCE);
    if !verify(secret, b"caller", &nonce_o, nonce_c, tag) {
        let _ = write_frame(s, &[tag::REFUSED]).await;
        return Err(WireError::Refused);
    }
    let mut welcome = vec![tag::WELCOME];
    welcome.extend_from_slice(mac(secret, b"owner", &nonce_o, nonce_c).as_ref());
    write_frame(s, &welcome).await
}

/// The caller's side: `Ok` once both ends proved they know `secret`.
pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &[u8],
) -> Result<(), WireError> {
    let hello = read_frame(s, HANDSHAKE_FRAME).await?;
    if hello.len() != 2 + NONCE || hello[0] != tag::HELLO || hello[1] != VERSION {
        return Err(WireError::Malformed("expected the owner's hello"));
    }
    let nonce_o = &hello[2..];
    let nonce_c = nonce();
    let mut auth = vec![tag::PROOF];
    auth.extend_from_slice(&nonce_c);
    auth.extend_from_slice(mac(secret, b"caller", nonce_o, &nonce_c).as_ref());
    write_frame(s, &auth).await?;
    let welcome = read_frame(s, HANDSHAKE_FRAME).await?;
    match welcome.first().copied() {
        Some(tag::WELCOME) if verify(secret, b"owner", nonce_o, &nonce_c, &welcome[1..]) => Ok(()),
        Some(tag::WELCOME) => Err(WireError::Impostor),
        _ => Err(WireError::Refused),
    }
}

/// A POP's clauses, as the owner applies them.
#[derive(Debug, Clone, PartialEq)]
pub struct PopSpec {
    pub group: String,
    pub start: Start,
    pub limit: u32,
    pub partitions: u32,
    pub lease: Option<Duration>,
    pub auto_ack: bool,
}

/// One receipt of an ACK or RENEW, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub group: String,
    pub seq: i64,
    pub token: Uuid,
}

/// What a forwarding queenwire asks the owner of queue `ref_` of `tenant`.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// PUSH outside a transaction block: the sequence numbers.
    Push(Vec<NewMessage>),
    /// PUSH inside a block: would this many messages and bytes fit now?
    Fit {
        count: u64,
        bytes: u64,
    },
    /// The messages of a block found committed: apply them.
    Apply(Vec<NewMessage>),
    /// POP, waiting at most `wait` (none: one look).
    Pop {
        spec: PopSpec,
        wait: Option<Duration>,
    },
    Ack {
        failed: bool,
        items: Vec<Item>,
    },
    Renew {
        extend: Option<Duration>,
        items: Vec<Item>,
    },
    /// SHOW QUEUES: (messages, pending), as `Reply::Seqs`.
    Counts,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Names the request in a later Cancel or Stop.
    pub id: u64,
    pub tenant: Uuid,
    pub ref_: i64,
    pub op: Op,
}

/// What comes back.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Nothing was done: this process does not own the queue (now).
    NotOwner,
    Error(SqlError),
    Done,
    Seqs(Vec<i64>),
    /// What became of each message of a PUSH.
    Pushed(Vec<Pushed>),
    Delivered(Vec<Delivered>),
    Statuses(Vec<String>),
    Until(Vec<Option<SystemTime>>),
}

/// A frame from the forwarding side.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    Request(Request),
    /// The client cancelled request `id` (a waiting POP ends with 57014).
    Cancel(u64),
    /// The forwarding queenwire drains: a waiting POP `id` returns now.
    Stop(u64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_handshake_needs_the_secret_on_both_sides() {
        for (owner, caller, ok) in [
            (&b"0123456789abcdef"[..], &b"0123456789abcdef"[..], true),
            (b"0123456789abcdef", b"0123456789abcdeX", false),
        ] {
            let (mut a, mut b) = tokio::io::duplex(4096);
            let (o, c) = tokio::join!(accept(&mut a, owner), connect(&mut b, caller));
            assert_eq!(o.is_ok(), ok, "{o:?}");
            assert_eq!(c.is_ok(), ok, "{c:?}");
        }
    }
}
