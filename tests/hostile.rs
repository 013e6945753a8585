//! Hostile input at the front door: random, truncated and absurd protocol
//! messages, before and after startup. Each hostile connection must end with
//! an ErrorResponse or a close (every read is bounded by a timeout, so a
//! hang fails the test instead of stalling it), a bystander session keeps
//! being served meanwhile, queenwire answers `SELECT 1` afterwards, and no
//! queenwire code panicked.
//!
//! queenwire runs on a runtime of its own with two workers (CI's cores), so
//! a session that blocks a worker shows up as other sessions stalling, and a
//! stuck server cannot keep the test binary from ending.

mod common;

use bytes::{BufMut, BytesMut};
use common::proxy::Proxy;
use queenwire::protocol::tags::Target as Describes;
use queenwire::protocol::{self, frontend, read_message, Message, SqlError};
use queenwire::rewrite::{self, dialect, Command};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::runtime::Runtime;

/// The longest queenwire may take to answer or close a hostile connection.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);
/// The longest one round trip of the bystander may take while hostile
/// clients are at work.
const BYSTANDER_STALL: Duration = Duration::from_secs(3);
/// The password of every user in the SCRAM scenario's users file; sent
/// only when asked for.
const PASSWORD: &str = "hostile pw";
/// A whole test, past which it fails rather than hangs.
const TEST_LIMIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

/// Panics raised outside this file: in queenwire (or a crate it calls) while
/// serving a hostile client. tokio would swallow them into a closed socket.
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn record_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let location = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            if !location.starts_with("tests/") && !location.starts_with("tests\\") {
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                if let Ok(mut panics) = PANICS.lock() {
                    panics.push(format!("{location}: {message}"));
                }
            }
            default(info);
        }));
    });
}

/// queenwire on its own runtime; see the module comment.
struct Target {
    proxy: Option<Proxy>,
    runtime: Option<Runtime>,
    addr: SocketAddr,
}

impl Target {
    fn start(name: &str, adjust: impl FnOnce(&mut queenwire::server::Config)) -> Target {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("queenwire")
            .enable_all()
            .build()
            .expect("server runtime");
        let proxy = runtime.block_on(Proxy::start_with(name, adjust));
        let addr = proxy.addr;
        Target {
            proxy: Some(proxy),
            runtime: Some(runtime),
            addr,
        }
    }

    fn direct(&self) -> tokio_postgres::Config {
        self.proxy.as_ref().expect("proxy").direct.clone()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            {
                let _inside = runtime.enter();
                self.proxy.take();
            }
            // A worker stuck in a hostile session must not hold up the end.
            runtime.shutdown_background();
        }
    }
}

/// Runs one hostile scenario: `body` gets the proxy's address; afterwards a
/// new client must get `SELECT 1` answered and no queenwire code may have
/// panicked.
fn hostile<F, Fut>(name: &str, pool_size: usize, body: F)
where
    F: FnOnce(SocketAddr, tokio_postgres::Config) -> Fut,
    Fut: Future<Output = ()>,
{
    hostile_with(name, |c| c.pool_size = pool_size, body)
}

fn hostile_with<F, Fut>(name: &str, adjust: impl FnOnce(&mut queenwire::server::Config), body: F)
where
    F: FnOnce(SocketAddr, tokio_postgres::Config) -> Fut,
    Fut: Future<Output = ()>,
{
    record_panics();
    let target = Target::start(name, adjust);
    let addr = target.addr;
    let direct = target.direct();
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("client runtime");
    clients.block_on(async move {
        tokio::time::timeout(TEST_LIMIT, body(addr, direct))
            .await
            .unwrap_or_else(|_| panic!("{name}: did not finish within {TEST_LIMIT:?}"));
        tokio::time::timeout(ANSWER_WITHIN, select_one(addr))
            .await
            .unwrap_or_else(|_| panic!("{name}: SELECT 1 afterwards took over {ANSWER_WITHIN:?}"));
    });
    clients.shutdown_background();
    drop(target);
    let panics = PANICS.lock().map(|p| p.clone()).unwrap_or_default();
    assert!(panics.is_empty(), "queenwire panicked: {panics:#?}");
}

fn client_config(addr: SocketAddr, user: &str) -> tokio_postgres::Config {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(addr.port())
        .user(user)
        .password(PASSWORD)
        .dbname("anything")
        .connect_timeout(ANSWER_WITHIN);
    cfg
}

async fn connect(addr: SocketAddr, user: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio::time::timeout(
        ANSWER_WITHIN,
        client_config(addr, user).connect(tokio_postgres::NoTls),
    )
    .await
    .expect("connecting took too long")
    .expect("connects");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

async fn select_one(addr: SocketAddr) {
    let client = connect(addr, "after").await;
    let rows = client.simple_query("SELECT 1").await.expect("SELECT 1");
    let one = rows.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(one.as_deref(), Some("1"));
}

/// A well-behaved session querying in a loop while the hostile clients
/// work: every round trip must come back, and quickly.
struct Bystander {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Result<(u32, Duration), String>>,
}

impl Bystander {
    async fn start(addr: SocketAddr) -> Bystander {
        let client = connect(addr, "bystander").await;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut rounds = 0u32;
            let mut worst = Duration::ZERO;
            while !flag.load(Ordering::Relaxed) || rounds == 0 {
                let started = Instant::now();
                let n = rounds as i32;
                let row = tokio::time::timeout(
                    BYSTANDER_STALL,
                    client.query_one("SELECT $1::int4 + 1", &[&n]),
                )
                .await
                .map_err(|_| format!("round {rounds} stalled over {BYSTANDER_STALL:?}"))?
                .map_err(|e| format!("round {rounds} failed: {e}"))?;
                if row.get::<_, i32>(0) != n + 1 {
                    return Err(format!("round {rounds}: wrong answer"));
                }
                worst = worst.max(started.elapsed());
                rounds += 1;
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Ok((rounds, worst))
        });
        Bystander { stop, task }
    }

    async fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        let outcome = tokio::time::timeout(ANSWER_WITHIN, self.task)
            .await
            .expect("the bystander's last round came back")
            .expect("bystander task");
        match outcome {
            Ok((rounds, worst)) => assert!(rounds > 0 && worst < BYSTANDER_STALL),
            Err(e) => panic!("the bystander session was harmed: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------
// Raw protocol
// ---------------------------------------------------------------------------

fn cstr(b: &mut BytesMut, s: &str) {
    b.put_slice(s.as_bytes());
    b.put_u8(0);
}

fn startup_packet(params: &[(&str, &str)]) -> Vec<u8> {
    let mut body = BytesMut::new();
    body.put_i32(196_608);
    for (k, v) in params {
        cstr(&mut body, k);
        cstr(&mut body, v);
    }
    body.put_u8(0);
    let mut packet = BytesMut::new();
    packet.put_i32(body.len() as i32 + 4);
    packet.put_slice(&body);
    packet.to_vec()
}

fn wire(msgs: &[Message]) -> Vec<u8> {
    let mut out = BytesMut::new();
    for m in msgs {
        m.encode(&mut out);
    }
    out.to_vec()
}

fn parse_msg(name: &str, query: &str, types: &[u32]) -> Message {
    frontend::build_parse(name, query, types)
}

fn bind_msg(statement: &str, params: &[Option<&[u8]>], formats: &[i16]) -> Message {
    protocol::build(b'B', |b| {
        cstr(b, "");
        cstr(b, statement);
        b.put_i16(formats.len() as i16);
        for f in formats {
            b.put_i16(*f);
        }
        b.put_i16(params.len() as i16);
        for p in params {
            match p {
                None => b.put_i32(-1),
                Some(v) => {
                    b.put_i32(v.len() as i32);
                    b.put_slice(v);
                }
            }
        }
        b.put_i16(0);
    })
}

fn execute_msg() -> Message {
    protocol::build(b'E', |b| {
        cstr(b, "");
        b.put_i32(0);
    })
}

fn sync_msg() -> Message {
    protocol::empty(b'S')
}

/// How a hostile connection ended, and what it was told.
#[derive(Debug)]
struct Heard {
    messages: Vec<Message>,
    /// The server closed the connection (EOF or reset).
    closed: bool,
    /// No close within the bound.
    timed_out: bool,
}

impl Heard {
    fn errors(&self) -> Vec<SqlError> {
        self.messages
            .iter()
            .filter(|m| m.tag == b'E')
            .map(|m| SqlError::parse(&m.body))
            .collect()
    }

    fn codes(&self) -> Vec<String> {
        self.errors()
            .into_iter()
            .map(|e| e.code().to_string())
            .collect()
    }

    fn rows(&self) -> Vec<Vec<Option<String>>> {
        self.messages
            .iter()
            .filter(|m| m.tag == b'D')
            .map(|m| {
                let mut r = m.reader();
                let n = r.i16().expect("column count");
                (0..n)
                    .map(|_| {
                        let len = r.i32().expect("length");
                        (len >= 0).then(|| {
                            String::from_utf8_lossy(r.bytes(len as usize).expect("value"))
                                .into_owned()
                        })
                    })
                    .collect()
            })
            .collect()
    }

    fn ready(&self) -> bool {
        self.messages.iter().any(|m| m.tag == b'Z')
    }
}

/// A raw client socket with its read buffer.
struct Raw {
    stream: TcpStream,
    buf: BytesMut,
    key: (i32, i32),
}

impl Raw {
    async fn tcp(addr: SocketAddr) -> Raw {
        let stream = tokio::time::timeout(ANSWER_WITHIN, TcpStream::connect(addr))
            .await
            .expect("tcp connect in time")
            .expect("tcp connect");
        Raw {
            stream,
            buf: BytesMut::new(),
            key: (0, 0),
        }
    }

    /// A good startup, up to the first ReadyForQuery.
    async fn started(addr: SocketAddr) -> Raw {
        let mut raw = Raw::tcp(addr).await;
        raw.send(&startup_packet(&[("user", "hostile"), ("database", "x")]))
            .await;
        let heard = raw.until_ready().await;
        assert!(
            heard.ready() && heard.errors().is_empty(),
            "startup failed: {heard:?}"
        );
        if let Some(k) = heard.messages.iter().find(|m| m.tag == b'K') {
            let mut r = k.reader();
            raw.key = (r.i32().unwrap(), r.i32().unwrap());
        }
        raw
    }

    /// Writes bytes; a server that already closed may refuse them.
    async fn send(&mut self, bytes: &[u8]) -> bool {
        tokio::time::timeout(ANSWER_WITHIN, self.stream.write_all(bytes))
            .await
            .map(|r| r.is_ok())
            .unwrap_or(false)
    }

    async fn shutdown_write(&mut self) {
        let _ = self.stream.shutdown().await;
    }

    /// Reads until ReadyForQuery, a close, or the bound.
    async fn until_ready(&mut self) -> Heard {
        self.listen(ANSWER_WITHIN, true).await
    }

    /// Reads until the server closes (or the bound passes).
    async fn until_closed(&mut self) -> Heard {
        self.listen(ANSWER_WITHIN, false).await
    }

    async fn listen(&mut self, limit: Duration, stop_at_ready: bool) -> Heard {
        let deadline = tokio::time::Instant::now() + limit;
        let mut heard = Heard {
            messages: Vec::new(),
            closed: false,
            timed_out: false,
        };
        loop {
            let read = tokio::time::timeout_at(
                deadline,
                read_message(&mut self.stream, &mut self.buf, 1 << 30),
            )
            .await;
            match read {
                Err(_) => {
                    heard.timed_out = true;
                    return heard;
                }
                Ok(Err(_)) => {
                    heard.closed = true;
                    return heard;
                }
                Ok(Ok(msg)) => {
                    let ready = msg.tag == b'Z';
                    heard.messages.push(msg);
                    if ready && stop_at_ready {
                        return heard;
                    }
                }
            }
        }
    }
}

/// The hostile connection got an ErrorResponse or was closed, in time.
fn assert_error_or_close(heard: &Heard, what: &str) {
    assert!(
        heard.closed || !heard.errors().is_empty(),
        "{what}: neither an ErrorResponse nor a close within {ANSWER_WITHIN:?}: {heard:?}"
    );
}

/// A small deterministic generator, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| match self.below(4) {
                // NULs and printable text make more bodies decode part way.
                0 => 0,
                1 => b"SPQ$1(),' "[self.below(10)],
                _ => self.next() as u8,
            })
            .collect()
    }
}

/// Runs `cases` hostile connections, `parallel` at a time.
async fn in_batches<F, Fut>(cases: usize, parallel: usize, case: F)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut i = 0;
    while i < cases {
        let batch: Vec<_> = (i..(i + parallel).min(cases))
            .map(|n| tokio::spawn(case(n)))
            .collect();
        for task in batch {
            if let Err(e) = task.await {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        i += parallel;
    }
}

// ---------------------------------------------------------------------------
// After a good startup
// ---------------------------------------------------------------------------

/// Well-formed client traffic to mutate and cut: simple and extended
/// protocol, plain SQL and a dialect statement with binary parameters.
fn sample_messages() -> Vec<Message> {
    vec![
        frontend::build_query("SELECT 1; SHOW QUEUES"),
        parse_msg("s1", "SELECT $1::int4", &[23]),
        bind_msg("s1", &[Some(&7i32.to_be_bytes())], &[1]),
        frontend::build_describe(Describes::Statement, "s1"),
        frontend::build_describe(Describes::Portal, ""),
        execute_msg(),
        frontend::build_close(Describes::Statement, "s1"),
        parse_msg("", "PUSH INTO hq VALUES ($1)", &[3802]),
        bind_msg("", &[Some(b"\x01{\"n\": 1}")], &[1]),
        sync_msg(),
        protocol::empty(b'H'),
    ]
}

#[test]
fn random_messages_after_startup() {
    hostile("hostile_random", 4, |addr, _| async move {
        let bystander = Bystander::start(addr).await;
        in_batches(96, 8, move |case| async move {
            let mut rng = Rng(0x5EED_0000 + case as u64 * 7919);
            let mut raw = Raw::started(addr).await;
            let mut out = Vec::new();
            for _ in 0..1 + rng.below(4) {
                match case % 3 {
                    // A known tag (or any byte) with a consistent length and a random body.
                    0 => {
                        let tag = if rng.below(4) == 0 {
                            rng.next() as u8
                        } else {
                            b"QPBDECSHFdcfp"[rng.below(13)]
                        };
                        let n = rng.below(200);
                        out.extend(wire(&[Message::new(tag, rng.bytes(n))]));
                    }
                    // Random bytes, framing and all.
                    1 => {
                        let n = 1 + rng.below(64);
                        out.extend(rng.bytes(n));
                    }
                    // Real traffic with a few bytes changed.
                    _ => {
                        let samples = sample_messages();
                        let mut bytes = wire(&samples[rng.below(samples.len())..]);
                        for _ in 0..1 + rng.below(3) {
                            let at = rng.below(bytes.len());
                            bytes[at] = rng.next() as u8;
                        }
                        out.extend(bytes);
                    }
                }
            }
            raw.send(&out).await;
            // If the session survived, it must still be in step: a Sync and
            // a query get their own answers. Random framing may announce a
            // longer message than was sent (the server rightly waits for
            // it), so after a quiet spell the client hangs up, and then the
            // server must close.
            raw.send(&wire(&[sync_msg(), frontend::build_query("SELECT 42")]))
                .await;
            let framed = case % 3 == 0;
            let quiet = if framed {
                ANSWER_WITHIN
            } else {
                Duration::from_secs(2)
            };
            loop {
                let heard = raw.listen(quiet, true).await;
                if heard.timed_out {
                    assert!(
                        !framed,
                        "case {case}: no answer, no close after {out:?}: {heard:?}"
                    );
                    break;
                }
                if heard.closed || heard.rows().iter().any(|r| r[0].as_deref() == Some("42")) {
                    break;
                }
            }
            raw.shutdown_write().await;
            let heard = raw.until_closed().await;
            assert!(
                heard.closed,
                "case {case}: not closed after EOF following {out:?}: {heard:?}"
            );
        })
        .await;
        bystander.finish().await;
    });
}

#[test]
fn truncated_messages_after_startup() {
    hostile("hostile_truncated", 4, |addr, _| async move {
        let bystander = Bystander::start(addr).await;
        let samples = sample_messages();

        // Cut on the wire, then EOF: a close, promptly.
        let cuts: Vec<Vec<u8>> = samples
            .iter()
            .flat_map(|m| {
                let bytes = wire(std::slice::from_ref(m));
                let len = bytes.len();
                [1, 3, 5, len / 2, len - 1]
                    .into_iter()
                    .filter(move |&c| c > 0 && c < len)
                    .map(move |c| bytes[..c].to_vec())
                    .collect::<Vec<_>>()
            })
            .collect();
        let cuts = Arc::new(cuts);
        let count = cuts.len();
        in_batches(count, 8, {
            let cuts = cuts.clone();
            move |i| {
                let cut = cuts[i].clone();
                async move {
                    let mut raw = Raw::started(addr).await;
                    raw.send(&cut).await;
                    raw.shutdown_write().await;
                    let heard = raw.until_closed().await;
                    assert!(heard.closed, "cut {cut:?}: not closed: {heard:?}");
                }
            }
        })
        .await;

        // A consistent length around a body whose fields end early: 08P01.
        let bodies: Vec<Message> = samples
            .iter()
            .filter(|m| !m.body.is_empty())
            .flat_map(|m| {
                let len = m.body.len();
                [0, 1, len / 2, len - 1]
                    .into_iter()
                    .filter(move |&c| c < len)
                    .map(move |c| Message::new(m.tag, m.body.slice(..c)))
                    .collect::<Vec<_>>()
            })
            .collect();
        let bodies = Arc::new(bodies);
        in_batches(bodies.len(), 8, {
            let bodies = bodies.clone();
            move |i| {
                let msg = bodies[i].clone();
                async move {
                    let mut raw = Raw::started(addr).await;
                    raw.send(&wire(&[msg.clone(), sync_msg()])).await;
                    let heard = raw.until_closed().await;
                    assert_error_or_close(&heard, &format!("short {:?}", msg));
                    assert!(
                        heard.codes().iter().any(|c| c == "08P01") && heard.closed,
                        "short {} body {:?}: expected 08P01 and a close: {heard:?}",
                        msg.tag as char,
                        msg.body
                    );
                }
            }
        })
        .await;
        bystander.finish().await;
    });
}

// ---------------------------------------------------------------------------
// Startup
// ---------------------------------------------------------------------------

#[test]
fn startup_packets_with_absurd_lengths() {
    hostile("hostile_startup_len", 4, |addr, _| async move {
        let bystander = Bystander::start(addr).await;
        let good = startup_packet(&[("user", "u"), ("database", "d")]);
        let with_len = |len: i32| {
            let mut p = good.clone();
            p[..4].copy_from_slice(&len.to_be_bytes());
            p
        };
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("negative", with_len(-1)),
            ("i32::MIN", with_len(i32::MIN)),
            ("zero", with_len(0)),
            ("four", with_len(4)),
            ("seven", with_len(7)),
            ("code only", {
                let mut p = 8i32.to_be_bytes().to_vec();
                p.extend(196_608i32.to_be_bytes());
                p
            }),
            ("4 GB", with_len(u32::MAX as i32)),
            ("2 GB", with_len(i32::MAX)),
            ("just over 10,000", with_len(10_001)),
            ("longer than sent", with_len(9_000)),
            ("shorter than sent", with_len(12)),
            ("only a length", 1_000i32.to_be_bytes().to_vec()),
            ("half a length", vec![0, 0]),
        ];
        for (what, bytes) in cases {
            let mut raw = Raw::tcp(addr).await;
            raw.send(&bytes).await;
            raw.shutdown_write().await;
            let heard = raw.until_closed().await;
            assert_error_or_close(&heard, what);
            assert!(heard.closed, "{what}: not closed: {heard:?}");
            assert!(
                !heard.ready(),
                "{what}: a session started from a broken packet"
            );
        }
        bystander.finish().await;
    });
}

#[test]
fn garbage_before_startup() {
    hostile("hostile_garbage", 4, |addr, _| async move {
        let bystander = Bystander::start(addr).await;
        let mut rng = Rng(0xBAD5_EED5);
        let mut cases: Vec<(String, Vec<u8>)> = vec![
            ("http".into(), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
            (
                "tls client hello".into(),
                vec![
                    0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
                ],
            ),
            ("zeros".into(), vec![0; 64]),
            ("protocol 0.0".into(), {
                let mut p = 8i32.to_be_bytes().to_vec();
                p.extend(0i32.to_be_bytes());
                p
            }),
            ("protocol 2.0".into(), {
                let mut p = startup_packet(&[("user", "u")]);
                p[4..8].copy_from_slice(&(2i32 << 16).to_be_bytes());
                p
            }),
            ("no user".into(), startup_packet(&[("database", "d")])),
            (
                "bad parameter name".into(),
                startup_packet(&[("user", "u"), ("x;DROP TABLE t", "1")]),
            ),
            (
                "bad options".into(),
                startup_packet(&[("user", "u"), ("options", "-d 5 -c")]),
            ),
            ("unterminated parameters".into(), {
                let mut body = 196_608i32.to_be_bytes().to_vec();
                body.extend(b"user\0u\0database");
                let mut p = (body.len() as i32 + 4).to_be_bytes().to_vec();
                p.extend(body);
                p
            }),
            ("invalid UTF-8 name".into(), {
                let mut body = 196_608i32.to_be_bytes().to_vec();
                body.extend(b"user\0\xff\xfe\0\0");
                let mut p = (body.len() as i32 + 4).to_be_bytes().to_vec();
                p.extend(body);
                p
            }),
            ("ssl request, then garbage".into(), {
                let mut p = 8i32.to_be_bytes().to_vec();
                p.extend(80_877_103i32.to_be_bytes());
                p.extend(b"\x16\x03\x01garbage");
                p
            }),
            ("gss request, then nothing".into(), {
                let mut p = 8i32.to_be_bytes().to_vec();
                p.extend(80_877_104i32.to_be_bytes());
                p
            }),
            (
                "a regular message instead".into(),
                wire(&[frontend::build_query("SELECT 1")]),
            ),
        ];
        for i in 0..24 {
            let n = 1 + rng.below(48);
            cases.push((format!("random {i}"), rng.bytes(n)));
        }
        for i in 0..8 {
            // A plausible length and code, then random parameters.
            let n = rng.below(64);
            let mut body = 196_608i32.to_be_bytes().to_vec();
            body.extend(rng.bytes(n));
            let mut p = (body.len() as i32 + 4).to_be_bytes().to_vec();
            p.extend(body);
            cases.push((format!("random parameters {i}"), p));
        }
        for (what, bytes) in cases {
            let mut raw = Raw::tcp(addr).await;
            raw.send(&bytes).await;
            raw.shutdown_write().await;
            let heard = raw.until_closed().await;
            assert_error_or_close(&heard, &what);
            assert!(heard.closed, "{what}: not closed after EOF: {heard:?}");
        }
        bystander.finish().await;
    });
}

#[test]
fn cancel_requests_with_random_keys() {
    hostile("hostile_cancel", 4, |addr, _| async move {
        // A raw session whose key we know, busy with a two-second query.
        let mut victim = Raw::started(addr).await;
        let (pid, secret) = victim.key;
        victim
            .send(&wire(&[frontend::build_query(
                "SELECT pg_sleep(2), 'survived'",
            )]))
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut rng = Rng(0xCA9CE1);
        for i in 0..60 {
            let (p, s) = match i % 3 {
                0 => (rng.next() as i32, rng.next() as i32),
                // The victim's pid (a small counter, easy to guess) with a wrong secret.
                1 => (pid, secret.wrapping_add(1 + rng.below(1 << 30) as i32)),
                _ => (pid + 1 + rng.below(3) as i32, rng.next() as i32),
            };
            let mut packet = 16i32.to_be_bytes().to_vec();
            packet.extend(80_877_102i32.to_be_bytes());
            packet.extend(p.to_be_bytes());
            packet.extend(s.to_be_bytes());
            let mut raw = Raw::tcp(addr).await;
            raw.send(&packet).await;
            let heard = raw.until_closed().await;
            assert!(
                heard.closed && heard.messages.is_empty(),
                "cancel {i}: {heard:?}"
            );
        }
        for (what, packet) in [
            ("short cancel", {
                let mut p = 12i32.to_be_bytes().to_vec();
                p.extend(80_877_102i32.to_be_bytes());
                p.extend(pid.to_be_bytes());
                p
            }),
            ("long cancel", {
                let mut p = 24i32.to_be_bytes().to_vec();
                p.extend(80_877_102i32.to_be_bytes());
                p.extend(pid.to_be_bytes());
                p.extend(secret.wrapping_add(1).to_be_bytes());
                p.extend([0xff; 8]);
                p
            }),
        ] {
            let mut raw = Raw::tcp(addr).await;
            raw.send(&packet).await;
            raw.shutdown_write().await;
            let heard = raw.until_closed().await;
            assert!(heard.closed, "{what}: {heard:?}");
        }
        let heard = victim.until_ready().await;
        assert!(
            heard.errors().is_empty()
                && heard.rows() == vec![vec![Some("".into()), Some("survived".into())]],
            "a wrong key cancelled another session's query: {heard:?}"
        );
    });
}

// ---------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------

#[test]
fn bind_with_ten_thousand_parameters() {
    hostile("hostile_10k_params", 4, |addr, _| async move {
        let bystander = Bystander::start(addr).await;
        let mut raw = Raw::started(addr).await;
        let values: Vec<Vec<u8>> = (1..=10_000).map(|i| i.to_string().into_bytes()).collect();
        let params: Vec<Option<&[u8]>> = values.iter().map(|v| Some(v.as_slice())).collect();

        // Plain SQL: the backend receives them all.
        let list: Vec<String> = (1..=10_000).map(|i| format!("${i}::int4")).collect();
        let sql = format!("SELECT cardinality(ARRAY[{}]), ${}", list.join(","), 10_000);
        raw.send(&wire(&[
            parse_msg("", &sql, &[]),
            bind_msg("", &params, &[]),
            execute_msg(),
            sync_msg(),
        ]))
        .await;
        let heard = raw.until_ready().await;
        assert_eq!(
            heard.rows(),
            vec![vec![Some("10000".into()), Some("10000".into())]],
            "{:?}",
            heard.errors()
        );

        // A dialect statement: 10,000 rows pushed in one Bind.
        raw.send(&wire(&[frontend::build_query("CREATE QUEUE hq")]))
            .await;
        assert!(raw.until_ready().await.errors().is_empty());
        let payloads: Vec<Vec<u8>> = (1..=10_000)
            .map(|i| format!("{{\"n\": {i}}}").into_bytes())
            .collect();
        let params: Vec<Option<&[u8]>> = payloads.iter().map(|v| Some(v.as_slice())).collect();
        let rows: Vec<String> = (1..=10_000).map(|i| format!("(${i})")).collect();
        raw.send(&wire(&[
            parse_msg("", &format!("PUSH INTO hq VALUES {}", rows.join(", ")), &[]),
            bind_msg("", &params, &[]),
            execute_msg(),
            sync_msg(),
        ]))
        .await;
        let heard = raw.until_ready().await;
        assert!(heard.errors().is_empty(), "{:?}", heard.errors());
        assert_eq!(heard.rows().len(), 10_000);

        // More parameters than the statement has: an error, and the session goes on.
        for query in ["SELECT $1::int4", "SHOW QUEUES", "POP FROM hq GROUP $1"] {
            raw.send(&wire(&[
                parse_msg("", query, &[]),
                bind_msg("", &params, &[]),
                execute_msg(),
                sync_msg(),
                frontend::build_query("SELECT 'next'"),
            ]))
            .await;
            let first = raw.until_ready().await;
            assert!(!first.timed_out && !first.closed, "{query}: {first:?}");
            let next = raw.until_ready().await;
            assert_eq!(next.rows(), vec![vec![Some("next".into())]], "{query}");
        }
        bystander.finish().await;
    });
}

/// Describe of a dialect statement whose highest parameter is `$n`: a
/// 40-byte pipeline. The parameter types are worked out once, not once per
/// parameter (`$65535` is the most the grammar takes).
#[test]
fn describe_of_a_statement_with_a_high_parameter_number() {
    hostile("hostile_high_param", 4, |addr, _| async move {
        let bystander = Bystander::start(addr).await;
        let n = std::env::var("QW_HOSTILE_PARAM_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000u32);
        let mut raw = Raw::started(addr).await;
        let started = Instant::now();
        raw.send(&wire(&[
            parse_msg("", &format!("POP FROM hq GROUP ${n}"), &[]),
            frontend::build_describe(Describes::Statement, ""),
            sync_msg(),
        ]))
        .await;
        let heard = raw.until_ready().await;
        let took = started.elapsed();
        assert!(
            heard.ready(),
            "no answer within {ANSWER_WITHIN:?}: {heard:?}"
        );
        let description = heard
            .messages
            .iter()
            .find(|m| m.tag == b't')
            .expect("ParameterDescription");
        assert_eq!(
            u16::from_be_bytes([description.body[0], description.body[1]]) as u32,
            n
        );
        assert!(
            took < Duration::from_secs(1),
            "Describe of a statement with ${n} took {took:?}"
        );
        bystander.finish().await;
    });
}

/// Binds whose counts claim more than the message carries.
#[test]
fn bind_claiming_more_parameters_than_it_carries() {
    hostile("hostile_bind_claims", 4, |addr, _| async move {
        let bystander = Bystander::start(addr).await;
        let claim = |formats: u16, params: u16, carried: usize, value_len: i32| {
            protocol::build(b'B', |b| {
                cstr(b, "");
                cstr(b, "");
                b.put_u16(formats);
                b.put_u16(params);
                for _ in 0..carried {
                    b.put_i32(value_len);
                    if value_len > 0 {
                        b.put_slice(&vec![b'7'; value_len.min(4) as usize]);
                    }
                }
                b.put_i16(0);
            })
        };
        let cases = [
            ("65,535 parameters, 3 carried", claim(0, 65_535, 3, 1)),
            ("32,767 parameters, 3 carried", claim(0, 32_767, 3, 1)),
            ("65,535 formats", claim(65_535, 1, 1, 1)),
            ("a value claiming 2 GB", claim(0, 1, 1, i32::MAX)),
            ("a value claiming -2", claim(0, 1, 1, -2)),
        ];
        for statement in ["SELECT $1::text", "POP FROM hq GROUP $1"] {
            for (what, bind) in &cases {
                let mut raw = Raw::started(addr).await;
                raw.send(&wire(&[
                    parse_msg("", statement, &[]),
                    bind.clone(),
                    execute_msg(),
                    sync_msg(),
                ]))
                .await;
                let heard = raw.until_ready().await;
                assert_error_or_close(&heard, what);
                assert!(
                    !heard.timed_out,
                    "{statement}, {what}: still open after {ANSWER_WITHIN:?}: {heard:?}"
                );
            }
        }
        bystander.finish().await;
    });
}

fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn message_header_of_100_mb() {
    hostile("hostile_100mb", 4, |addr, _| async move {
        let bystander = Bystander::start(addr).await;
        // Over the limit (64 MiB): 54000 at once, then the close.
        for tag in [b'Q', b'P', b'B', b'd', b'X', b'!'] {
            let mut raw = Raw::started(addr).await;
            let mut header = vec![tag];
            header.extend((100i32 * 1024 * 1024).to_be_bytes());
            raw.send(&header).await;
            let heard = raw.until_closed().await;
            assert!(heard.closed, "{}: not closed: {heard:?}", tag as char);
            assert_eq!(heard.codes(), vec!["54000".to_string()], "{}", tag as char);
        }
        // The same during COPY FROM STDIN.
        let mut raw = Raw::started(addr).await;
        let sql = b"CREATE TEMP TABLE big_copy (x text); COPY big_copy FROM STDIN\0";
        let mut query = vec![b'Q'];
        query.extend((4 + sql.len() as i32).to_be_bytes());
        query.extend(sql);
        query.push(b'd');
        query.extend((100i32 * 1024 * 1024).to_be_bytes());
        raw.send(&query).await;
        let heard = raw.until_closed().await;
        assert!(heard.closed, "COPY: not closed: {heard:?}");
        assert_eq!(heard.codes(), vec!["54000".to_string()], "COPY");
        // Lengths that cannot be: a close (an error is optional).
        for len in [-1i32, 0, 3, i32::MIN, i32::MAX] {
            let mut raw = Raw::started(addr).await;
            let mut header = vec![b'Q'];
            header.extend(len.to_be_bytes());
            raw.send(&header).await;
            let heard = raw.until_closed().await;
            assert!(heard.closed, "length {len}: not closed: {heard:?}");
        }
        // Just under the limit, then nothing: queenwire waits for the body,
        // but a 5-byte header must not cost it the 60 MB it announces.
        let before = resident_bytes();
        let mut waiting = Vec::new();
        for _ in 0..16 {
            let mut raw = Raw::started(addr).await;
            let mut header = vec![b'Q'];
            header.extend((60i32 * 1024 * 1024).to_be_bytes());
            header.extend(b"SELECT");
            raw.send(&header).await;
            waiting.push(raw);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let (Some(before), Some(after)) = (before, resident_bytes()) {
            let grown = after.saturating_sub(before);
            assert!(
                grown < 256 * 1024 * 1024,
                "16 announced 60 MB messages grew queenwire by {} MB",
                grown / (1024 * 1024)
            );
        }
        for mut raw in waiting {
            raw.shutdown_write().await;
            assert!(raw.until_closed().await.closed);
        }
        bystander.finish().await;
    });
}

// ---------------------------------------------------------------------------
// Slow clients
// ---------------------------------------------------------------------------

#[test]
fn half_a_message_then_sleep() {
    hostile("hostile_half", 4, |addr, _| async move {
        let bystander = Bystander::start(addr).await;
        let query = wire(&[frontend::build_query("SELECT 'finally'")]);
        let (head, tail) = query.split_at(7);

        // More sleepers than the pool has connections: an idle session
        // holds none, so nobody waits behind them.
        let mut sleepers = Vec::new();
        for _ in 0..6 {
            let mut raw = Raw::started(addr).await;
            raw.send(head).await;
            sleepers.push(raw);
        }
        // And some that stop half way through their startup packet.
        let mut half_started = Vec::new();
        for _ in 0..6 {
            let mut raw = Raw::tcp(addr).await;
            raw.send(&startup_packet(&[("user", "slow")])[..9]).await;
            half_started.push(raw);
        }
        let during = Instant::now();
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let client = connect(addr, "newcomer").await;
            let v: i32 = client.query_one("SELECT 5", &[]).await.unwrap().get(0);
            assert_eq!(v, 5);
        }
        assert!(during.elapsed() < Duration::from_secs(10));

        // Sleepers that wake up are served as if nothing happened.
        for raw in sleepers.iter_mut() {
            let quiet = raw.listen(Duration::from_millis(50), true).await;
            assert!(quiet.messages.is_empty() && !quiet.closed, "{quiet:?}");
            raw.send(tail).await;
            let heard = raw.until_ready().await;
            assert_eq!(
                heard.rows(),
                vec![vec![Some("finally".into())]],
                "{heard:?}"
            );
        }
        for mut raw in half_started {
            raw.shutdown_write().await;
            assert!(raw.until_closed().await.closed);
        }
        bystander.finish().await;
    });
}

// ---------------------------------------------------------------------------
// Statement text
// ---------------------------------------------------------------------------

/// A simple-query message of many malformed dialect statements is well under
/// the 64 MiB message limit; PostgreSQL rejects a script of this size in
/// milliseconds. Classifying it must take time in proportion to its length.
#[test]
fn script_of_many_invalid_dialect_statements_is_classified_in_linear_time() {
    // The best of three, so a busy machine does not decide.
    let time = |n: usize| {
        let sql = "POP;".repeat(n);
        (0..3)
            .map(|_| {
                let started = Instant::now();
                let commands = rewrite::classify_script(&sql);
                assert_eq!(commands.len(), n);
                assert!(matches!(commands[n - 1].1, Command::Invalid(_)));
                started.elapsed()
            })
            .min()
            .unwrap_or_default()
    };
    let small = time(20_000).max(Duration::from_millis(1));
    let large = time(160_000);
    // 8 times the text: linear is ~8x, quadratic ~64x.
    assert!(
        large < small * 24,
        "8x the statements took {:.0}x the time ({small:?} → {large:?}): quadratic",
        large.as_secs_f64() / small.as_secs_f64()
    );
}

/// The same script through the proxy: its author gets 42601 promptly, and
/// meanwhile the other sessions are served.
#[test]
fn script_of_many_invalid_dialect_statements_is_answered_promptly() {
    hostile("hostile_invalid_script", 4, |addr, _| async move {
        let bystander = Bystander::start(addr).await;
        // 1.6 MB, 2.5% of the default message limit.
        let script = "POP;".repeat(400_000);
        // Two of them, one per worker of a two-core machine.
        let mut authors = Vec::new();
        for _ in 0..2 {
            let mut raw = Raw::started(addr).await;
            raw.send(&wire(&[frontend::build_query(&script)])).await;
            authors.push(raw);
        }
        let started = Instant::now();
        let newcomer = tokio::time::timeout(Duration::from_secs(5), async {
            let client = connect(addr, "newcomer").await;
            client.simple_query("SELECT 1").await.map(|_| ())
        })
        .await;
        let stalled = started.elapsed();
        for mut raw in authors {
            let heard = raw.until_ready().await;
            assert!(
                heard.ready() && heard.codes() == vec!["42601".to_string()],
                "no 42601 within {ANSWER_WITHIN:?}: timed out {}, closed {}",
                heard.timed_out,
                heard.closed
            );
        }
        assert!(
            matches!(newcomer, Ok(Ok(()))),
            "a new session got no answer for {stalled:?} while two scripts were classified"
        );
        bystander.finish().await;
    });
}

#[test]
fn deeply_nested_statement_text_does_not_overflow_the_stack() {
    let n = 200_000;
    let cases = [
        format!("PUSH INTO q VALUES {}'1'{}", "(".repeat(n), ")".repeat(n)),
        format!("POP FROM {}q{}", "(".repeat(n), ")".repeat(n)),
        format!("POP FROM {}", "(".repeat(n)),
        format!("PUSH INTO q VALUES ('{}{}')", "[".repeat(n), "]".repeat(n)),
        format!("PUSH INTO q VALUES ('{}')", "{\"a\":".repeat(n)),
        format!("SHOW QUEUES {}{}", "/*".repeat(n), "*/".repeat(n)),
        format!("POP FROM 'q'{}", "::text".repeat(n)),
        format!("POP FROM q LIMIT {}1{}", "(".repeat(n), ")".repeat(n)),
        format!("CREATE FUNCTION f() BEGIN ATOMIC {}", "CASE ".repeat(n)),
    ];
    for sql in &cases {
        let _ = dialect::parse(sql);
        let _ = rewrite::classify_script(sql);
        let _ = dialect::validate_json(sql);
    }
}

// ---------------------------------------------------------------------------
// Startup parameters
// ---------------------------------------------------------------------------

/// Startup parameters are applied on pooled backend connections with
/// `set_config` calls built as SQL text. A session that left
/// `standard_conforming_strings = off` on a connection (a startup parameter
/// of its own is enough) makes `\'` an escaped quote in the next session's
/// literals there: a value must still reach PostgreSQL as a value, never as
/// SQL.
#[test]
fn startup_parameters_are_values_not_sql() {
    hostile("hostile_startup_sql", 1, |addr, direct| async move {
        // One backend connection, so both sessions land on it.
        let mut first = Raw::tcp(addr).await;
        first
            .send(&startup_packet(&[
                ("user", "a"),
                ("standard_conforming_strings", "off"),
            ]))
            .await;
        assert!(first.until_ready().await.ready());
        first.send(&wire(&[protocol::empty(b'X')])).await;
        assert!(first.until_closed().await.closed);

        let payload = "\\', false); CREATE TABLE qw_injected (); --";
        let mut second = Raw::tcp(addr).await;
        second
            .send(&startup_packet(&[
                ("user", "b"),
                ("application_name", payload),
            ]))
            .await;
        let heard = second.until_ready().await;
        assert!(!heard.timed_out, "{heard:?}");

        let (admin, connection) = direct.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        let injected: bool = admin
            .query_one("SELECT to_regclass('qw_injected') IS NOT NULL", &[])
            .await
            .unwrap()
            .get(0);
        assert!(
            !injected,
            "application_name {payload:?} ran as SQL on the backend (CREATE TABLE qw_injected succeeded)"
        );
        if heard.ready() {
            second
                .send(&wire(&[frontend::build_query("SHOW application_name")]))
                .await;
            let shown = second.until_ready().await;
            assert_eq!(shown.rows(), vec![vec![Some(payload.to_string())]]);
        }
    });
}

// ---------------------------------------------------------------------------
// Authentication
// ---------------------------------------------------------------------------

/// Garbage in place of each SCRAM message, for a known and an unknown user:
/// 28P01 or a close, never AuthenticationOk, never a session.
#[test]
fn garbage_during_scram_authentication() {
    let mut text = String::new();
    for name in ["alice", "bystander", "after"] {
        text.push_str(&format!(
            "[users.{name}]\ntenant = \"0f5c1a2b-0000-4000-8000-000000000001\"\npassthrough = \"full\"\nscram = \"{}\"\n",
            queenwire::users::Verifier::new(PASSWORD).encode()
        ));
    }
    let users = Arc::new(queenwire::users::Users::parse(&text).expect("users file"));
    hostile_with(
        "hostile_scram",
        |c| {
            c.pool_size = 4;
            c.users = Some(users);
        },
        |addr, _| async move {
            let bystander = Bystander::start(addr).await;
            let sasl_initial = |mechanism: &str, len: i32, data: &[u8]| {
                protocol::build(b'p', |b| {
                    cstr(b, mechanism);
                    b.put_i32(len);
                    b.put_slice(data);
                })
            };
            let first = b"n,,n=,r=hostileclientnonce";
            let good_first = sasl_initial("SCRAM-SHA-256", first.len() as i32, first);
            let mut rng = Rng(0x0005_C4A3);
            // (what, messages after AuthenticationSASL; None = hang up)
            let mut cases: Vec<(String, Vec<u8>)> = vec![
                (
                    "SCRAM-SHA-1".into(),
                    wire(&[sasl_initial("SCRAM-SHA-1", 3, b"n,,")]),
                ),
                (
                    "no mechanism".into(),
                    wire(&[Message::new(b'p', b"".to_vec())]),
                ),
                (
                    "negative length".into(),
                    wire(&[sasl_initial("SCRAM-SHA-256", -1, first)]),
                ),
                (
                    "2 GB length".into(),
                    wire(&[sasl_initial("SCRAM-SHA-256", i32::MAX, first)]),
                ),
                (
                    "not UTF-8".into(),
                    wire(&[sasl_initial("SCRAM-SHA-256", 4, b"n,,\xff")]),
                ),
                (
                    "channel binding demanded".into(),
                    wire(&[sasl_initial(
                        "SCRAM-SHA-256",
                        24,
                        b"p=tls-server-end-point,,",
                    )]),
                ),
                (
                    "empty nonce".into(),
                    wire(&[sasl_initial("SCRAM-SHA-256", 8, b"n,,n=,r=")]),
                ),
                (
                    "a query instead".into(),
                    wire(&[frontend::build_query("SELECT 1")]),
                ),
                ("over 10,000 bytes".into(), {
                    let big = vec![b'r'; 20_000];
                    wire(&[sasl_initial("SCRAM-SHA-256", big.len() as i32, &big)])
                }),
                ("final: wrong nonce".into(), {
                    let mut w = wire(std::slice::from_ref(&good_first));
                    w.extend(wire(&[Message::new(
                        b'p',
                        b"c=biws,r=wrong,p=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_vec(),
                    )]));
                    w
                }),
                ("final: empty".into(), {
                    let mut w = wire(std::slice::from_ref(&good_first));
                    w.extend(wire(&[Message::new(b'p', Vec::new())]));
                    w
                }),
                ("final: a query".into(), {
                    let mut w = wire(std::slice::from_ref(&good_first));
                    w.extend(wire(&[frontend::build_query("SELECT 1")]));
                    w
                }),
                (
                    "final: hang up".into(),
                    wire(std::slice::from_ref(&good_first)),
                ),
            ];
            for i in 0..12 {
                let n = rng.below(120);
                let mut w = wire(std::slice::from_ref(&good_first));
                w.extend(wire(&[Message::new(b'p', rng.bytes(n))]));
                cases.push((format!("final: random {i}"), w));
                let n = 1 + rng.below(60);
                cases.push((format!("first: random {i}"), rng.bytes(n)));
            }
            for user in ["alice", "mallory"] {
                for (what, bytes) in &cases {
                    let what = format!("{user}, {what}");
                    let mut raw = Raw::tcp(addr).await;
                    raw.send(&startup_packet(&[("user", user), ("database", "x")]))
                        .await;
                    raw.send(bytes).await;
                    raw.shutdown_write().await;
                    let heard = raw.until_closed().await;
                    assert_error_or_close(&heard, &what);
                    assert!(heard.closed, "{what}: not closed: {heard:?}");
                    let asked = heard.messages.first().is_some_and(|m| {
                        m.tag == b'R' && m.body.len() >= 4 && m.body[..4] == [0, 0, 0, 10]
                    });
                    assert!(asked, "{what}: no AuthenticationSASL first: {heard:?}");
                    let authenticated = heard
                        .messages
                        .iter()
                        .any(|m| m.tag == b'R' && m.body.len() >= 4 && m.body[..4] == [0, 0, 0, 0]);
                    assert!(
                        !authenticated && !heard.ready(),
                        "{what}: garbage was let in: {heard:?}"
                    );
                    assert!(
                        heard.codes().iter().all(|c| c == "28P01" || c == "08P01"),
                        "{what}: {:?}",
                        heard.codes()
                    );
                }
            }
            bystander.finish().await;
        },
    );
}

/// Distinct statements, each prepared and closed by the client, do not pile
/// up on a backend connection: past the limit the idle connection
/// deallocates them.
#[test]
fn prepared_statements_on_a_backend_connection_are_bounded() {
    hostile("prepared_bounded", 1, |addr, _| async move {
        let client = connect(addr, "preparer").await;
        for i in 0..1500 {
            let stmt = client
                .prepare(&format!("SELECT {i}::int AS n"))
                .await
                .expect("prepare");
            let row = client.query_one(&stmt, &[]).await.expect("query");
            assert_eq!(row.get::<_, i32>(0), i);
        }
        // The pool has one connection: this runs where all of them landed.
        let left: i64 = client
            .query_one("SELECT count(*) FROM pg_prepared_statements", &[])
            .await
            .unwrap()
            .get(0);
        assert!(
            left <= queenwire::backend::pool::MAX_PREPARED_PER_CONNECTION as i64 + 2,
            "{left} statements prepared on the backend connection"
        );
    });
}

/// A session may not hold unbounded statement text in the proxy.
#[test]
fn a_session_with_too_much_prepared_text_gets_54000() {
    hostile("prepared_text_limit", 2, |addr, _| async move {
        let client = connect(addr, "hoarder").await;
        let padding = "x".repeat(20 << 20);
        let mut held = Vec::new();
        let mut refused = None;
        for i in 0..5 {
            match client.prepare(&format!("SELECT {i} /* {padding} */")).await {
                Ok(s) => held.push(s),
                Err(e) => {
                    refused = Some((i, e.code().map(|c| c.code().to_string())));
                    break;
                }
            }
        }
        assert_eq!(refused, Some((3, Some("54000".to_string()))));
        // The session goes on, and closing statements frees room.
        held.pop();
        let again = client
            .prepare(&format!("SELECT 42 /* {padding} */"))
            .await
            .expect("room again after a Close");
        let row = client.query_one(&again, &[]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), 42);
    });
}
