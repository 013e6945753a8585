//! Arbitrary bytes as a client's side of the wire: the startup packet
//! reader, the message framer, and every decoder the frontend runs on a
//! message body (Parse, Bind, Describe/Close, Execute, Query, the SCRAM
//! exchange's password messages), then bound parameters to text and the
//! engine's planning of a dialect statement with them. No panic, no hang.
//!
//! Input: byte 0 picks how the bytes arrive (chunk size) and whether a
//! startup packet comes first; the rest is the stream.
#![no_main]

use queenwire::frontend::encoding::{ClientEncoding, ClientText};
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use queenwire::engine::pop;
use queenwire::engine::queues::{self, Limits};
use queenwire::engine::values::Params;
use queenwire::frontend::params::{bind_params_as_text, result_format};
use queenwire::frontend::scram;
use queenwire::protocol::{self, frontend, BodyReader, SqlError, FrameError, Message};
use queenwire::rewrite::{self, dialect::Statement, Command};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, ReadBuf};

/// The largest message the target accepts (queenwire's default is 64 MiB;
/// smaller here so a claimed length costs no time).
const MAX_MESSAGE: usize = 1 << 20;
/// As in `frontend::startup`.
const MAX_STARTUP_PACKET: usize = 10_000;

/// An in-memory socket that hands out at most `chunk` bytes per read.
struct Chunked<'a> {
    data: &'a [u8],
    chunk: usize,
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self.chunk.min(self.data.len()).min(buf.remaining());
        let (head, tail) = self.data.split_at(n);
        buf.put_slice(head);
        self.data = tail;
        Poll::Ready(Ok(()))
    }
}

/// The reader never returns Pending, so a future that does is waiting for
/// bytes that will never come: with a closed socket that would be a hang.
fn run<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("decoder waits on an exhausted reader"),
    }
}

/// Mirrors the startup phase's decoding of a packet's body.
fn startup_body(packet: &[u8]) {
    let mut r = BodyReader::from_slice(packet);
    let Ok(code) = r.i32() else { return };
    if code == queenwire::protocol::tags::startup::CANCEL_REQUEST {
        let _ = (r.i32(), r.i32());
        return;
    }
    if code >> 16 == 3 {
        while let Ok(name) = r.cstr() {
            if name.is_empty() {
                break;
            }
            if r.cstr().is_err() {
                break;
            }
        }
    }
}

#[derive(Default)]
struct State {
    /// The last Parse: its parameter types and, for a dialect statement,
    /// the statement, as the session keeps them.
    param_types: Vec<u32>,
    dialect: Option<Arc<Statement>>,
    /// A SCRAM exchange started by a SASLInitialResponse, waiting for the
    /// client-final-message.
    scram: Option<scram::Exchange>,
}

/// The password message ('p') as the startup phase reads it: first a
/// SASLInitialResponse (mechanism, length, client-first-message), then a
/// SASLResponse (the client-final-message).
fn password_message(msg: &Message, state: &mut State) {
    if let Some(exchange) = state.scram.take() {
        if let Ok(client_final) = std::str::from_utf8(&msg.body) {
            // A forged proof never passes: the decoy matches no password.
            assert!(exchange.finish(client_final).is_err());
        }
        return;
    }
    let mut r = msg.reader();
    if r.cstr().ok() != Some(scram::MECHANISM) {
        return;
    }
    let Ok(len) = r.i32() else { return };
    let Ok(len) = usize::try_from(len) else { return };
    let Ok(first) = r.bytes(len) else { return };
    let Ok(first) = std::str::from_utf8(first) else { return };
    let decoy = scram::decoy_verifier("fuzz", b"fuzz secret");
    if let Ok((exchange, server_first)) = scram::Exchange::start(None, decoy, first) {
        assert!(server_first.starts_with("r="));
        state.scram = Some(exchange);
    }
}

fn message(msg: &Message, state: &mut State) {
    match msg.tag {
        b'Q' => {
            if let Ok(sql) = frontend::query(msg) {
                // As the session reads it: in a client encoding of its own
                // (SJIS: a character's second byte can be a backslash), with
                // standard_conforming_strings on and off.
                for encoding in [
                    ClientEncoding::Utf8,
                    ClientEncoding::from_name("LATIN9"),
                    ClientEncoding::from_name("SJIS"),
                ] {
                    for standard_strings in [true, false] {
                        let text = ClientText::read(sql, &encoding, standard_strings);
                        for (range, _) in rewrite::classify_script(&text.view) {
                            let _ = text.original(range.clone());
                            let _ = text.readable(range.clone(), range, &encoding);
                        }
                    }
                }
            }
        }
        b'P' => {
            if let Ok(p) = frontend::parse(msg) {
                state.param_types = p.param_types.clone();
                let text = ClientText::read(p.query, &ClientEncoding::Utf8, true);
                state.dialect = match rewrite::classify(&text.view) {
                    Command::Dialect(stmt) => Some(stmt),
                    _ => None,
                };
            }
        }
        b'B' => {
            if let Ok(b) = frontend::bind(msg) {
                bind(msg, &b, state);
            }
        }
        b'D' | b'C' => {
            let _ = frontend::target(msg);
        }
        b'E' => {
            let _ = frontend::execute(msg);
        }
        b'p' => password_message(msg, state),
        _ => {}
    }
    // Whatever the tag, no decoder may panic on any body.
    let _ = frontend::query(msg);
    let _ = frontend::parse(msg);
    let _ = frontend::target(msg);
    let _ = frontend::execute(msg);
    if let Ok(b) = frontend::bind(msg) {
        let _ = bind_params_as_text(&b.params, &b.param_formats, &[]);
    }
    let _ = SqlError::parse(&msg.body);
}

fn bind(msg: &Message, b: &frontend::Bind<'_>, state: &State) {
    // Renaming the statement keeps every other field.
    let renamed = frontend::rebind(msg, b, "qw_s1");
    let again = frontend::bind(&renamed).expect("a rebound Bind decodes");
    assert_eq!(again.statement, "qw_s1");
    assert_eq!(again.portal, b.portal);
    assert_eq!(again.params, b.params);
    assert_eq!(again.param_formats, b.param_formats);
    assert_eq!(again.result_formats, b.result_formats);
    for i in 0..b.result_formats.len() + 1 {
        let _ = result_format(&b.result_formats, i);
    }

    // Parameter types as the session picks them for a dialect statement.
    let types: Vec<u32> = (0..b.params.len())
        .map(|i| match state.param_types.get(i) {
            Some(&t) if t != 0 => t,
            _ => state
                .dialect
                .as_ref()
                .map_or(0, |stmt| stmt.param_type(i + 1)),
        })
        .collect();
    let Ok(params) = bind_params_as_text(&b.params, &b.param_formats, &types) else {
        return;
    };
    assert_eq!(params.len(), b.params.len());
    // The engine's checks of bound values, for the statements it plans
    // without a backend.
    match state.dialect.as_deref() {
        Some(Statement::Push(push)) => {
            let _ = queues::prepare_push(push, &Params(&params), &Limits::default());
        }
        Some(Statement::Pop(pop)) => {
            let _ = pop::plan_pop(pop, &Params(&params), Default::default());
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, stream)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(mode & 0x3f) + 1;
    let mut reader = Chunked {
        data: stream,
        chunk: if chunk == 64 { usize::MAX } else { chunk },
    };

    if mode & 0x40 != 0 {
        match run(protocol::read_startup_packet(
            &mut reader,
            MAX_STARTUP_PACKET,
        )) {
            Ok(packet) => {
                assert!(packet.len() + 4 <= MAX_STARTUP_PACKET);
                startup_body(&packet);
            }
            Err(_) => return,
        }
    }

    let mut buf = BytesMut::new();
    let mut state = State::default();
    loop {
        match run(protocol::read_message(&mut reader, &mut buf, MAX_MESSAGE)) {
            Ok(msg) => {
                assert!(msg.body.len() + 4 <= MAX_MESSAGE);
                message(&msg, &mut state);
            }
            Err(FrameError::Closed) => {
                assert!(buf.is_empty());
                return;
            }
            Err(FrameError::BadLength(_) | FrameError::TooLarge(..) | FrameError::Io(_)) => return,
        }
    }
});
