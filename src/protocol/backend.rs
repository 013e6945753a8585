//! Backend messages the proxy produces itself, towards clients.

use super::framing::Message;
use super::status::TxStatus;
use super::tags::backend as tag;
use bytes::{BufMut, Bytes, BytesMut};

pub fn put_cstr(out: &mut BytesMut, s: &str) {
    out.put_slice(s.as_bytes());
    out.put_u8(0);
}

/// A message of `tag` whose body `f` writes.
pub fn build(tag: u8, f: impl FnOnce(&mut BytesMut)) -> Message {
    let mut body = BytesMut::new();
    f(&mut body);
    Message::new(tag, body.freeze())
}

pub fn empty(tag: u8) -> Message {
    Message::new(tag, Bytes::new())
}

pub fn ready_for_query(status: TxStatus) -> Message {
    Message::new(
        tag::READY_FOR_QUERY,
        Bytes::copy_from_slice(&[status.as_byte()]),
    )
}

pub fn parse_complete() -> Message {
    empty(tag::PARSE_COMPLETE)
}

pub fn bind_complete() -> Message {
    empty(tag::BIND_COMPLETE)
}

pub fn close_complete() -> Message {
    empty(tag::CLOSE_COMPLETE)
}

pub fn no_data() -> Message {
    empty(tag::NO_DATA)
}

pub fn portal_suspended() -> Message {
    empty(tag::PORTAL_SUSPENDED)
}

pub fn parameter_status(name: &str, value: &str) -> Message {
    build(tag::PARAMETER_STATUS, |b| {
        put_cstr(b, name);
        put_cstr(b, value);
    })
}

pub fn backend_key_data(pid: i32, secret: i32) -> Message {
    build(tag::BACKEND_KEY_DATA, |b| {
        b.put_i32(pid);
        b.put_i32(secret);
    })
}

pub fn authentication(code: i32, extra: &[u8]) -> Message {
    build(tag::AUTHENTICATION, |b| {
        b.put_i32(code);
        b.put_slice(extra);
    })
}

/// NegotiateProtocolVersion: the newest minor version served and the
/// startup options not recognised.
pub fn negotiate_protocol_version(newest: i32, unsupported: &[String]) -> Message {
    build(tag::NEGOTIATE_PROTOCOL_VERSION, |b| {
        b.put_i32(newest);
        b.put_i32(unsupported.len() as i32);
        for o in unsupported {
            put_cstr(b, o);
        }
    })
}

/// NotificationResponse from `pid`; `rest` is the channel and payload as
/// the backend sent them (two NUL-terminated strings).
pub fn notification_response(pid: i32, rest: &[u8]) -> Message {
    build(tag::NOTIFICATION_RESPONSE, |b| {
        b.put_i32(pid);
        b.put_slice(rest);
    })
}

pub fn command_complete(command_tag: &str) -> Message {
    build(tag::COMMAND_COMPLETE, |b| put_cstr(b, command_tag))
}

pub fn parameter_description(oids: &[u32]) -> Message {
    build(tag::PARAMETER_DESCRIPTION, |b| {
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
    build(tag::ROW_DESCRIPTION, |b| {
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
    build(tag::DATA_ROW, |b| {
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
