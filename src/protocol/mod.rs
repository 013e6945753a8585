//! The PostgreSQL protocol v3 vocabulary both sides of the proxy share:
//! framing (`framing`), message tags and startup codes (`tags`), the
//! transaction status (`status`), the type OIDs (`oid`), errors (`error`),
//! and the messages the proxy builds or inspects (`frontend`, `backend`).
//! Raw tag bytes appear here and nowhere else.
//!
//! Passthrough stays raw: a `Message` is a tag and the body's bytes, read
//! and written without decoding; only what the proxy must look at is
//! parsed, field by field.

pub mod backend;
pub mod error;
pub mod framing;
pub mod frontend;
pub mod oid;
pub mod status;
pub mod tags;

pub use backend::*;
pub use error::{SqlError, SqlState};
pub use framing::{read_message, read_startup_packet, BodyReader, FrameError, Malformed, Message};
pub use status::TxStatus;

#[cfg(test)]
mod tests {
    use super::backend::put_cstr;
    use super::tags::frontend as tag;
    use super::*;
    use bytes::{BufMut, Bytes, BytesMut};
    use tokio::io::AsyncRead;

    #[tokio::test]
    async fn reads_frames_split_across_reads() {
        let mut wire = BytesMut::new();
        frontend::build_query("SELECT 1").encode(&mut wire);
        frontend::sync().encode(&mut wire);
        let bytes = wire.freeze();
        let (a, b) = bytes.split_at(3);
        let mut stream = tokio_test_stream(vec![a.to_vec(), b.to_vec()]);
        let mut buf = BytesMut::new();
        let m = read_message(&mut stream, &mut buf, 1 << 20).await.unwrap();
        assert_eq!(m.tag, tag::QUERY);
        assert_eq!(frontend::query(&m).unwrap(), b"SELECT 1");
        let m = read_message(&mut stream, &mut buf, 1 << 20).await.unwrap();
        assert_eq!(m.tag, tag::SYNC);
        assert!(matches!(
            read_message(&mut stream, &mut buf, 1 << 20).await,
            Err(FrameError::Closed)
        ));
    }

    #[tokio::test]
    async fn rejects_absurd_lengths() {
        let mut stream = tokio_test_stream(vec![vec![tag::QUERY, 0x7f, 0xff, 0xff, 0xff]]);
        let mut buf = BytesMut::new();
        assert!(matches!(
            read_message(&mut stream, &mut buf, 1 << 20).await,
            Err(FrameError::TooLarge(..))
        ));
        let mut stream = tokio_test_stream(vec![vec![tag::QUERY, 0, 0, 0, 1]]);
        assert!(matches!(
            read_message(&mut stream, &mut BytesMut::new(), 1 << 20).await,
            Err(FrameError::BadLength(1))
        ));
    }

    #[test]
    fn malformed_bind_is_an_error_not_a_panic() {
        let msg = Message::new(tag::BIND, Bytes::from_static(b"p\0s\0\x00\x01\x00"));
        assert!(frontend::bind(&msg).is_err());
        let msg = Message::new(
            b'B',
            Bytes::from_static(b"p\0s\0\x00\x00\x00\x01\x7f\xff\xff\xff"),
        );
        assert!(frontend::bind(&msg).is_err());
    }

    #[test]
    fn rebind_replaces_only_the_statement_name() {
        let original = build(tag::BIND, |b| {
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
