//! Segment blobs: the bytes of one `queen.log_segments.blob`.
//!
//! A blob holds `count` consecutive messages of one partition:
//!
//! ```text
//! blob    := version:u8 (= 1) zstd(frame*)
//! frame   := len:u32 body                      -- len = byte length of body
//! body    := message_id:[u8;16]                 -- UUIDv7
//!            created_at:i64                     -- microseconds since the Unix epoch
//!            txn_len:u16 txn:[u8;txn_len]       -- 0xFFFF = no transaction id
//!            trace_len:u16 trace:[u8;trace_len] -- 0xFFFF = no trace id
//!            payload:[u8]                       -- JSON text, the rest of the body
//! ```
//!
//! A queue with `encryption_enabled` stores version 2 instead, the same
//! compressed frames sealed with AES-256-GCM (`sealing.rs`):
//!
//! ```text
//! blob    := version:u8 (= 2) key_id_len:u8 key_id:[u8;key_id_len]
//!            nonce:[u8;12] aes256gcm(zstd(frame*)) tag:[u8;16]
//! ```
//!
//! The header (version, key id length, key id) is the associated data, so
//! it cannot be altered either; the key id says which key of the key file
//! opens the segment (rotation).
//!
//! All integers are big-endian. The version byte sits outside the
//! compressed part so a future format can change the compression too.
//! PostgreSQL stores the blob as is (`STORAGE EXTERNAL`: no second
//! compression). Decoding walks the length prefixes and parses only the
//! frames asked for.

use super::sealing::{KeyRing, SealError, SEALED_VERSION};
use bytes::{Buf, BufMut};

pub const FORMAT_VERSION: u8 = 1;
/// zstd level 1: the cheapest level still shrinks JSON well, and push
/// latency matters more than the last bytes (chosen, not measured).
const ZSTD_LEVEL: i32 = 1;
const ABSENT: u16 = u16::MAX;

/// One message as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub message_id: uuid::Uuid,
    pub created_at_micros: i64,
    pub transaction_id: Option<String>,
    pub trace_id: Option<String>,
    pub payload: String,
}

/// Why a segment blob could not be encoded or decoded (not to be confused
/// with the wire protocol's [`crate::protocol::FrameError`]).
#[derive(Debug, thiserror::Error)]
pub enum SegmentFrameError {
    #[error("segment blob is empty")]
    Empty,
    #[error("segment blob has unknown format version {0}")]
    Version(u8),
    #[error("segment blob does not decompress: {0}")]
    Decompress(std::io::Error),
    #[error("segment blob is corrupt: {0}")]
    Corrupt(&'static str),
    #[error("field too long to frame: {0}")]
    TooLong(&'static str),
    #[error("{0}")]
    Sealed(#[from] SealError),
}

/// Frames and compresses messages into one blob, sealed with the ring's
/// current key when `seal` is given.
pub fn encode<'a>(
    frames: impl IntoIterator<Item = &'a Frame> + Clone,
    seal: Option<&KeyRing>,
) -> Result<Vec<u8>, SegmentFrameError> {
    let mut raw = Vec::with_capacity(
        frames
            .clone()
            .into_iter()
            .map(|f| 40 + f.payload.len())
            .sum(),
    );
    for f in frames {
        let body_len =
            16 + 8 + 2 + opt_len(&f.transaction_id) + 2 + opt_len(&f.trace_id) + f.payload.len();
        raw.put_u32(u32::try_from(body_len).map_err(|_| SegmentFrameError::TooLong("message"))?);
        raw.put_slice(f.message_id.as_bytes());
        raw.put_i64(f.created_at_micros);
        put_opt(&mut raw, &f.transaction_id, "transaction_id")?;
        put_opt(&mut raw, &f.trace_id, "trace_id")?;
        raw.put_slice(f.payload.as_bytes());
    }
    let mut blob = Vec::with_capacity(zstd::zstd_safe::compress_bound(raw.len()) + 1);
    if raw.len() < STORE_BELOW {
        stored(&raw, &mut blob);
    } else {
        compress(&raw, &mut blob)?;
    }
    match seal {
        Some(ring) => Ok(ring.seal(&blob)?),
        None => {
            blob.insert(0, FORMAT_VERSION);
            Ok(blob)
        }
    }
}

/// Segments framed smaller than this are stored, not compressed: one
/// message of a few hundred bytes shrinks by little, and building zstd's
/// tables for it was 5 % of queenwire's CPU with one message per statement
/// into a queue per client (push1_nq, perf, 2026-12-02).
const STORE_BELOW: usize = 256;

/// A zstd frame holding `raw` as one raw (uncompressed) block, which any
/// zstd decoder reads (RFC 8878): the magic number, a header with the
/// single-segment flag and a one-byte content size, then the block header
/// (last block, type raw, its size) and the bytes. `raw` is under 256
/// bytes.
fn stored(raw: &[u8], out: &mut Vec<u8>) {
    debug_assert!(raw.len() < STORE_BELOW);
    out.extend_from_slice(&0xFD2F_B528u32.to_le_bytes());
    // Frame_Content_Size_flag 0 with Single_Segment_flag: a 1-byte size.
    out.push(0b0010_0000);
    out.push(raw.len() as u8);
    let block = 1 | ((raw.len() as u32) << 3);
    out.extend_from_slice(&block.to_le_bytes()[..3]);
    out.extend_from_slice(raw);
}

fn compress(raw: &[u8], blob: &mut Vec<u8>) -> Result<usize, SegmentFrameError> {
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        let compressor = match c.as_mut() {
            Some(compressor) => compressor,
            None => c.insert(
                zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(SegmentFrameError::Decompress)?,
            ),
        };
        // Within the capacity reserved: no reallocation.
        compressor
            .compress_to_buffer(raw, blob)
            .map_err(SegmentFrameError::Decompress)
    })
}

// A zstd context costs about as much to set up as compressing a hundred
// small messages (8 µs of 9 µs measured for one message): each thread keeps
// one of each.
thread_local! {
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// The largest decompressed segment accepted (a corrupt or hostile frame
/// header cannot make the proxy allocate more).
const MAX_RAW_SEGMENT: u64 = 1 << 30;

fn opt_len(s: &Option<String>) -> usize {
    s.as_ref().map_or(0, String::len)
}

fn put_opt(
    out: &mut Vec<u8>,
    s: &Option<String>,
    what: &'static str,
) -> Result<(), SegmentFrameError> {
    match s {
        None => out.put_u16(ABSENT),
        Some(s) => {
            let len = u16::try_from(s.len())
                .ok()
                .filter(|l| *l != ABSENT)
                .ok_or(SegmentFrameError::TooLong(what))?;
            out.put_u16(len);
            out.put_slice(s.as_bytes());
        }
    }
    Ok(())
}

/// Decompresses a blob (opened with `keys` when sealed) and returns the
/// frames at positions `skip .. skip + take` (positions relative to the
/// segment's base offset).
pub fn decode_range(
    blob: &[u8],
    skip: usize,
    take: usize,
    keys: &KeyRing,
) -> Result<Vec<Frame>, SegmentFrameError> {
    let opened;
    let compressed = match blob.first() {
        None => return Err(SegmentFrameError::Empty),
        Some(&FORMAT_VERSION) => &blob[1..],
        Some(&SEALED_VERSION) => {
            opened = keys.open(blob)?;
            &opened[..]
        }
        Some(&version) => return Err(SegmentFrameError::Version(version)),
    };
    let size = match zstd::zstd_safe::get_frame_content_size(compressed) {
        Ok(Some(size)) if size <= MAX_RAW_SEGMENT => size as usize,
        _ => {
            return Err(SegmentFrameError::Corrupt(
                "no valid content size in the zstd frame",
            ))
        }
    };
    let raw = DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        let decompressor = match d.as_mut() {
            Some(decompressor) => decompressor,
            None => {
                d.insert(zstd::bulk::Decompressor::new().map_err(SegmentFrameError::Decompress)?)
            }
        };
        decompressor
            .decompress(compressed, size)
            .map_err(SegmentFrameError::Decompress)
    })?;
    if raw.len() != size {
        return Err(SegmentFrameError::Corrupt(
            "decompressed size differs from the frame header",
        ));
    }
    let mut buf = &raw[..];
    let mut out = Vec::with_capacity(take.min(1024));
    let mut index = 0usize;
    while buf.has_remaining() && out.len() < take {
        if buf.remaining() < 4 {
            return Err(SegmentFrameError::Corrupt("truncated frame length"));
        }
        let len = buf.get_u32() as usize;
        if buf.remaining() < len {
            return Err(SegmentFrameError::Corrupt("truncated frame"));
        }
        let (body, rest) = buf.split_at(len);
        buf = rest;
        if index >= skip {
            out.push(decode_body(body)?);
        }
        index += 1;
    }
    Ok(out)
}

fn decode_body(mut body: &[u8]) -> Result<Frame, SegmentFrameError> {
    if body.remaining() < 16 + 8 + 2 {
        return Err(SegmentFrameError::Corrupt("short frame"));
    }
    let mut id = [0u8; 16];
    body.copy_to_slice(&mut id);
    let created_at_micros = body.get_i64();
    let transaction_id = get_opt(&mut body)?;
    if body.remaining() < 2 {
        return Err(SegmentFrameError::Corrupt("short frame"));
    }
    let trace_id = get_opt(&mut body)?;
    let payload = std::str::from_utf8(body)
        .map_err(|_| SegmentFrameError::Corrupt("payload is not UTF-8"))?
        .to_string();
    Ok(Frame {
        message_id: uuid::Uuid::from_bytes(id),
        created_at_micros,
        transaction_id,
        trace_id,
        payload,
    })
}

fn get_opt(body: &mut &[u8]) -> Result<Option<String>, SegmentFrameError> {
    let len = body.get_u16();
    if len == ABSENT {
        return Ok(None);
    }
    let len = len as usize;
    if body.remaining() < len {
        return Err(SegmentFrameError::Corrupt("truncated field"));
    }
    let (s, rest) = body.split_at(len);
    *body = rest;
    Ok(Some(
        std::str::from_utf8(s)
            .map_err(|_| SegmentFrameError::Corrupt("field is not UTF-8"))?
            .to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> KeyRing {
        KeyRing::default()
    }

    fn frame(n: u32, txn: Option<&str>) -> Frame {
        Frame {
            message_id: uuid::Uuid::now_v7(),
            created_at_micros: 1_700_000_000_000_000 + n as i64,
            transaction_id: txn.map(str::to_string),
            trace_id: None,
            payload: format!("{{\"n\":{n}}}"),
        }
    }

    #[test]
    fn a_zstd_frame_without_its_content_size_is_corrupt_not_a_panic() {
        let mut blob = vec![FORMAT_VERSION];
        blob.extend(zstd::stream::encode_all(&b"\0\0\0\x01x"[..], 1).unwrap());
        assert!(matches!(
            decode_range(&blob, 0, 1, &none()),
            Err(SegmentFrameError::Corrupt(_))
        ));
        // A blob encoded here round-trips through the reused contexts, on
        // this thread and on another.
        let frames: Vec<Frame> = (0..3).map(|n| frame(n, None)).collect();
        let blob = encode(frames.iter(), None).unwrap();
        assert_eq!(decode_range(&blob, 0, 3, &none()).unwrap(), frames);
        let again = blob.clone();
        let other = std::thread::spawn(move || decode_range(&again, 1, 1, &none()).unwrap());
        assert_eq!(other.join().unwrap(), frames[1..2]);
    }

    #[test]
    fn round_trips_and_decodes_only_the_requested_range() {
        let frames: Vec<Frame> = (0..10)
            .map(|n| frame(n, if n % 2 == 0 { Some("t") } else { None }))
            .collect();
        let blob = encode(&frames, None).unwrap();
        assert_eq!(blob[0], FORMAT_VERSION);
        assert_eq!(decode_range(&blob, 0, usize::MAX, &none()).unwrap(), frames);
        assert_eq!(
            decode_range(&blob, 3, 4, &none()).unwrap(),
            frames[3..7].to_vec()
        );
        assert_eq!(
            decode_range(&blob, 9, 10, &none()).unwrap(),
            frames[9..].to_vec()
        );
        assert!(decode_range(&blob, 10, 1, &none()).unwrap().is_empty());
    }

    #[test]
    fn small_segments_are_stored_in_a_frame_zstd_reads() {
        let ring = none();
        // Either side of the threshold, with payloads of every length
        // around it (a message frames to 32 bytes plus its payload).
        for len in 0..300 {
            let f = Frame {
                payload: "x".repeat(len),
                ..frame(7, None)
            };
            let blob = encode([&f], None).unwrap();
            let raw = 32 + len;
            if raw < STORE_BELOW {
                assert_eq!(blob.len(), 1 + 4 + 2 + 3 + raw, "stored at {len}");
            }
            let content = zstd::stream::decode_all(&blob[1..]).unwrap();
            assert_eq!(content.len(), raw);
            let got = decode_range(&blob, 0, 1, &ring).unwrap();
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].payload, f.payload);
        }
    }

    #[test]
    fn empty_strings_are_not_absent() {
        let mut f = frame(1, Some(""));
        f.trace_id = Some(String::new());
        let blob = encode(std::slice::from_ref(&f), None).unwrap();
        assert_eq!(decode_range(&blob, 0, 1, &none()).unwrap(), vec![f]);
    }

    #[test]
    fn corrupt_blobs_are_errors_not_panics() {
        assert!(matches!(
            decode_range(&[], 0, 1, &none()),
            Err(SegmentFrameError::Empty)
        ));
        assert!(matches!(
            decode_range(&[9, 1, 2], 0, 1, &none()),
            Err(SegmentFrameError::Version(9))
        ));
        assert!(decode_range(&[1, 1, 2, 3], 0, 1, &none()).is_err());
        let raw = [0u8, 0, 0, 200, 1, 2];
        let mut blob = vec![1u8];
        blob.extend(zstd::bulk::compress(&raw, 1).unwrap());
        assert!(matches!(
            decode_range(&blob, 0, 1, &none()),
            Err(SegmentFrameError::Corrupt(_))
        ));
    }

    #[test]
    fn a_sealed_blob_holds_no_plaintext_and_opens_only_with_its_key() {
        let ring =
            KeyRing::parse("k1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
                .unwrap();
        let mut f = frame(7, Some("txn-secret"));
        f.payload = "{\"card\":\"4111-1111-1111-1111\"}".into();
        let sealed = encode(std::slice::from_ref(&f), Some(&ring)).unwrap();
        assert_eq!(sealed[0], SEALED_VERSION);
        for needle in [&b"4111"[..], b"txn-secret"] {
            assert!(!sealed.windows(needle.len()).any(|w| w == needle));
        }
        assert_eq!(decode_range(&sealed, 0, 1, &ring).unwrap(), vec![f]);
        assert!(matches!(
            decode_range(&sealed, 0, 1, &none()),
            Err(SegmentFrameError::Sealed(SealError::UnknownKey(_)))
        ));
        let mut garbled = sealed.clone();
        let last = garbled.len() - 1;
        garbled[last] ^= 1;
        assert!(matches!(
            decode_range(&garbled, 0, 1, &ring),
            Err(SegmentFrameError::Sealed(SealError::Unauthentic))
        ));
    }
}
