//! Micro-benchmark behind the choice of protocol vocabulary (see
//! docs/architecture.md, "Dependencies"): queenwire's own message code
//! against `postgres-protocol`'s for the three jobs the proxy does.
//!
//!     cargo run --release --example protocol_vocabulary
//!
//! 1. Building the proxy's own messages to PostgreSQL (a Bind of nine
//!    binary parameters, Execute, Sync) into a connection's write buffer.
//! 2. Splitting a buffer of backend messages (DataRows) into messages:
//!    queenwire's raw framing (tag + body bytes, nothing decoded) against
//!    `backend::Message::parse` (a typed message per frame).
//! 3. Reading a client's Bind: postgres-protocol is a client library and
//!    has no parser for frontend messages, so only ours is timed.

use bytes::{BufMut, BytesMut};
use postgres_protocol::message::{backend, frontend as pp};
use queenwire::protocol::{self, frontend, read_message};
use std::hint::black_box;
use std::time::Instant;
use tokio_postgres::types::{IsNull, ToSql, Type};

const ROUNDS: usize = 200_000;

fn main() {
    let text = "orders".to_string();
    let ints: Vec<i32> = vec![0, 1, 2];
    let n: i64 = 42;
    let id = uuid::Uuid::from_u128(7);
    let params: [(&(dyn ToSql + Sync), Type); 9] = [
        (&text, Type::TEXT),
        (&text, Type::TEXT),
        (&ints, Type::INT4_ARRAY),
        (&n, Type::INT8),
        (&n, Type::INT8),
        (&id, Type::UUID),
        (&text, Type::TEXT),
        (&true, Type::BOOL),
        (&id, Type::UUID),
    ];

    // 1. Bind + Execute + Sync into a reused write buffer.
    let ours = time(|out| {
        let mut values = BytesMut::new();
        for (p, ty) in &params {
            let at = values.len();
            values.put_i32(0);
            match p.to_sql_checked(ty, &mut values) {
                Ok(IsNull::No) => {
                    let len = (values.len() - at - 4) as i32;
                    values[at..at + 4].copy_from_slice(&len.to_be_bytes());
                }
                _ => {
                    values.truncate(at);
                    values.put_i32(-1);
                }
            }
        }
        bind_ours("qw_push_v1", params.len() as i16, &values).encode(out);
        frontend::build_execute("", 0).encode(out);
        frontend::sync().encode(out);
    });
    let library = time(|out| {
        pp::bind(
            "",
            "qw_push_v1",
            [1i16],
            params.iter(),
            |(p, ty), buf| {
                p.to_sql_checked(ty, buf).map(|n| match n {
                    IsNull::Yes => postgres_protocol::IsNull::Yes,
                    IsNull::No => postgres_protocol::IsNull::No,
                })
            },
            [1i16],
            out,
        )
        .ok();
        pp::execute("", 0, out).ok();
        pp::sync(out);
    });
    report("build Bind(9)+Execute+Sync", ours, library);

    // 2. Framing 1,000 DataRows of three columns.
    let mut wire = BytesMut::new();
    for i in 0..1000 {
        let a = i.to_string();
        protocol::data_row([Some(a.as_bytes()), Some(&b"pending"[..]), None].into_iter())
            .encode(&mut wire);
    }
    let wire = wire.freeze();
    let rounds = ROUNDS / 1000;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let started = Instant::now();
    for _ in 0..rounds {
        runtime.block_on(async {
            let mut reader = std::io::Cursor::new(&wire[..]);
            let mut buf = BytesMut::with_capacity(8192);
            while let Ok(m) = read_message(&mut reader, &mut buf, 1 << 20).await {
                black_box(&m);
            }
        });
    }
    let ours = started.elapsed().as_nanos() as f64 / (rounds * 1000) as f64;
    let started = Instant::now();
    for _ in 0..rounds {
        let mut buf = BytesMut::from(&wire[..]);
        while let Ok(Some(m)) = backend::Message::parse(&mut buf) {
            black_box(&m);
        }
    }
    let library = started.elapsed().as_nanos() as f64 / (rounds * 1000) as f64;
    report("split one DataRow off a buffer", ours, library);

    // 3. Reading a client's Bind (ours only).
    let mut bind = BytesMut::new();
    frontend::build_bind_text("", "s1", &[Some("42"), None, Some("x")]).encode(&mut bind);
    let msg = protocol::Message::new(bind[0], bind.split_off(5).freeze());
    let started = Instant::now();
    for _ in 0..ROUNDS {
        black_box(frontend::bind(black_box(&msg)).ok());
    }
    let ours = started.elapsed().as_nanos() as f64 / ROUNDS as f64;
    println!(
        "{:<34} ours {:>7.1} ns   postgres-protocol: no frontend parser",
        "read a client Bind(3)", ours
    );
}

/// queenwire's own Bind builder before the switch: the body is built in a
/// buffer of its own, then copied into the connection's.
fn bind_ours(statement: &str, count: i16, values: &[u8]) -> protocol::Message {
    protocol::build(b'B', |b| {
        b.put_u8(0);
        b.put_slice(statement.as_bytes());
        b.put_u8(0);
        b.put_i16(1);
        b.put_i16(1);
        b.put_i16(count);
        b.put_slice(values);
        b.put_i16(1);
        b.put_i16(1);
    })
}

/// ns per round of `f` writing into a buffer cleared each round.
fn time(mut f: impl FnMut(&mut BytesMut)) -> f64 {
    let mut out = BytesMut::with_capacity(8192);
    for _ in 0..1000 {
        out.clear();
        f(&mut out);
    }
    let started = Instant::now();
    for _ in 0..ROUNDS {
        out.clear();
        f(&mut out);
        black_box(&out);
    }
    started.elapsed().as_nanos() as f64 / ROUNDS as f64
}

fn report(what: &str, ours: f64, library: f64) {
    println!(
        "{what:<34} ours {ours:>7.1} ns   postgres-protocol {library:>7.1} ns   ({:.2}x)",
        ours / library
    );
}
