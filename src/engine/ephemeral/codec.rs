//! The encoding of the internal channel's frames (`wire.rs`): big-endian
//! integers, length-prefixed strings, a flag byte before what may be
//! absent. Decoding never trusts a count beyond what the frame holds.

use super::store::{Delivered, NewMessage, Pushed, Start};
use super::wire::{Inbound, Item, Op, PopSpec, Reply, Request, WireError};
use crate::protocol::tags::internal as tag;
use crate::protocol::{SqlError, SqlState};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use uuid::Uuid;

struct Enc(Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
    }
    fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    fn opt_str(&mut self, v: Option<&str>) {
        match v {
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
            None => self.u8(0),
        }
    }
    fn uuid(&mut self, v: Uuid) {
        self.0.extend_from_slice(v.as_bytes());
    }
    fn opt_duration(&mut self, v: Option<Duration>) {
        match v {
            Some(d) => {
                self.u8(1);
                self.u64(d.as_micros().min(u64::MAX as u128) as u64);
            }
            None => self.u8(0),
        }
    }
    fn time(&mut self, v: SystemTime) {
        let micros = match v.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_micros() as i64,
            Err(e) => -(e.duration().as_micros() as i64),
        };
        self.i64(micros);
    }
    fn message(&mut self, m: &NewMessage) {
        self.uuid(m.id);
        self.str(&m.partition);
        self.str(&m.payload);
        self.opt_str(m.transaction_id.as_deref());
        self.opt_str(m.trace_id.as_deref());
        self.i64(m.created_at_micros);
    }
    fn messages(&mut self, ms: &[NewMessage]) {
        self.u64(ms.len() as u64);
        for m in ms {
            self.message(m);
        }
    }
    fn items(&mut self, items: &[Item]) {
        self.u64(items.len() as u64);
        for i in items {
            self.str(&i.group);
            self.i64(i.seq);
            self.uuid(i.token);
        }
    }
}

struct Dec<'a>(&'a [u8]);

type D<T> = Result<T, WireError>;

impl Dec<'_> {
    fn take(&mut self, n: usize) -> D<&[u8]> {
        if self.0.len() < n {
            return Err(WireError::Malformed("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> D<u8> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> D<u64> {
        let b = self.take(8)?;
        Ok(u64::from_be_bytes(
            b.try_into().map_err(|_| WireError::Malformed("u64"))?,
        ))
    }
    fn i64(&mut self) -> D<i64> {
        Ok(self.u64()? as i64)
    }
    /// A count of things each at least `min` bytes long: bounded by what
    /// is left, so a hostile count cannot make us allocate.
    fn count(&mut self, min: usize) -> D<usize> {
        let n = usize::try_from(self.u64()?).map_err(|_| WireError::Malformed("count"))?;
        if n.saturating_mul(min.max(1)) > self.0.len() {
            return Err(WireError::Malformed("count beyond the frame"));
        }
        Ok(n)
    }
    fn bytes(&mut self) -> D<Vec<u8>> {
        let n = self.count(1)?;
        Ok(self.take(n)?.to_vec())
    }
    fn str(&mut self) -> D<String> {
        String::from_utf8(self.bytes()?).map_err(|_| WireError::Malformed("utf-8"))
    }
    fn flag(&mut self) -> D<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::Malformed("flag")),
        }
    }
    fn opt_str(&mut self) -> D<Option<String>> {
        Ok(if self.flag()? {
            Some(self.str()?)
        } else {
            None
        })
    }
    fn uuid(&mut self) -> D<Uuid> {
        let b = self.take(16)?;
        Uuid::from_slice(b).map_err(|_| WireError::Malformed("uuid"))
    }
    fn opt_duration(&mut self) -> D<Option<Duration>> {
        Ok(if self.flag()? {
            Some(Duration::from_micros(self.u64()?))
        } else {
            None
        })
    }
    fn time(&mut self) -> D<SystemTime> {
        let micros = self.i64()?;
        let d = Duration::from_micros(micros.unsigned_abs());
        Ok(if micros >= 0 {
            UNIX_EPOCH + d
        } else {
            UNIX_EPOCH - d
        })
    }
    fn message(&mut self) -> D<NewMessage> {
        Ok(NewMessage {
            id: self.uuid()?,
            partition: self.str()?,
            payload: self.str()?,
            transaction_id: self.opt_str()?,
            trace_id: self.opt_str()?,
            created_at_micros: self.i64()?,
        })
    }
    fn messages(&mut self) -> D<Vec<NewMessage>> {
        let n = self.count(16)?;
        (0..n).map(|_| self.message()).collect()
    }
    fn items(&mut self) -> D<Vec<Item>> {
        let n = self.count(32)?;
        (0..n)
            .map(|_| {
                Ok(Item {
                    group: self.str()?,
                    seq: self.i64()?,
                    token: self.uuid()?,
                })
            })
            .collect()
    }
    fn end(&self) -> D<()> {
        match self.0.is_empty() {
            true => Ok(()),
            false => Err(WireError::Malformed("trailing bytes")),
        }
    }
}

impl Inbound {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc(Vec::new());
        match self {
            Inbound::Cancel(id) => {
                e.u8(tag::CANCEL);
                e.u64(*id);
            }
            Inbound::Stop(id) => {
                e.u8(tag::STOP);
                e.u64(*id);
            }
            Inbound::Request(r) => {
                e.u8(tag::REQUEST);
                e.u64(r.id);
                e.uuid(r.tenant);
                e.i64(r.ref_);
                match &r.op {
                    Op::Push(ms) => {
                        e.u8(tag::PUSH);
                        e.messages(ms);
                    }
                    Op::Fit { count, bytes } => {
                        e.u8(tag::FIT);
                        e.u64(*count);
                        e.u64(*bytes);
                    }
                    Op::Apply(ms) => {
                        e.u8(tag::APPLY);
                        e.messages(ms);
                    }
                    Op::Pop { spec, wait } => {
                        e.u8(tag::POP);
                        e.str(&spec.group);
                        e.u8(u8::from(spec.start == Start::Newest));
                        e.u64(spec.limit.into());
                        e.u64(spec.partitions.into());
                        e.opt_duration(spec.lease);
                        e.u8(u8::from(spec.auto_ack));
                        e.opt_duration(*wait);
                    }
                    Op::Ack { failed, items } => {
                        e.u8(tag::ACK);
                        e.u8(u8::from(*failed));
                        e.items(items);
                    }
                    Op::Renew { extend, items } => {
                        e.u8(tag::RENEW);
                        e.opt_duration(*extend);
                        e.items(items);
                    }
                    Op::Counts => e.u8(tag::COUNTS),
                }
            }
        }
        e.0
    }

    pub fn decode(frame: &[u8]) -> Result<Inbound, WireError> {
        let mut d = Dec(frame);
        let out = match d.u8()? {
            tag::CANCEL => Inbound::Cancel(d.u64()?),
            tag::STOP => Inbound::Stop(d.u64()?),
            tag::REQUEST => {
                let (id, tenant, ref_) = (d.u64()?, d.uuid()?, d.i64()?);
                let op = match d.u8()? {
                    tag::PUSH => Op::Push(d.messages()?),
                    tag::FIT => Op::Fit {
                        count: d.u64()?,
                        bytes: d.u64()?,
                    },
                    tag::APPLY => Op::Apply(d.messages()?),
                    tag::POP => Op::Pop {
                        spec: PopSpec {
                            group: d.str()?,
                            start: if d.flag()? {
                                Start::Newest
                            } else {
                                Start::Oldest
                            },
                            limit: u32::try_from(d.u64()?).unwrap_or(u32::MAX),
                            partitions: u32::try_from(d.u64()?).unwrap_or(u32::MAX),
                            lease: d.opt_duration()?,
                            auto_ack: d.flag()?,
                        },
                        wait: d.opt_duration()?,
                    },
                    tag::ACK => Op::Ack {
                        failed: d.flag()?,
                        items: d.items()?,
                    },
                    tag::RENEW => Op::Renew {
                        extend: d.opt_duration()?,
                        items: d.items()?,
                    },
                    tag::COUNTS => Op::Counts,
                    _ => return Err(WireError::Malformed("unknown operation")),
                };
                Inbound::Request(Request {
                    id,
                    tenant,
                    ref_,
                    op,
                })
            }
            _ => return Err(WireError::Malformed("unknown frame")),
        };
        d.end()?;
        Ok(out)
    }
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc(Vec::new());
        match self {
            Reply::NotOwner => e.u8(tag::NOT_OWNER),
            Reply::Error(err) => {
                e.u8(tag::ERROR);
                e.str(err.code());
                e.str(&err.message);
                e.opt_str(err.detail.as_deref());
                e.opt_str(err.hint.as_deref());
            }
            Reply::Done => e.u8(tag::DONE),
            Reply::Seqs(seqs) => {
                e.u8(tag::SEQS);
                e.u64(seqs.len() as u64);
                for s in seqs {
                    e.i64(*s);
                }
            }
            Reply::Pushed(ps) => {
                e.u8(tag::PUSHED);
                e.u64(ps.len() as u64);
                for p in ps {
                    match p {
                        Pushed::Queued(seq) => {
                            e.u8(0);
                            e.i64(*seq);
                        }
                        Pushed::Duplicate { seq, id } => {
                            e.u8(1);
                            e.i64(*seq);
                            e.uuid(*id);
                        }
                    }
                }
            }
            Reply::Delivered(ds) => {
                e.u8(tag::DELIVERED);
                e.u64(ds.len() as u64);
                for d in ds {
                    e.i64(d.seq);
                    e.message(&d.msg);
                    e.i64(d.retry_count.into());
                    match d.lease {
                        Some((token, at)) => {
                            e.u8(1);
                            e.uuid(token);
                            e.time(at);
                        }
                        None => e.u8(0),
                    }
                }
            }
            Reply::Statuses(ss) => {
                e.u8(tag::STATUSES);
                e.u64(ss.len() as u64);
                for s in ss {
                    e.str(s);
                }
            }
            Reply::Until(ts) => {
                e.u8(tag::UNTIL);
                e.u64(ts.len() as u64);
                for t in ts {
                    match t {
                        Some(t) => {
                            e.u8(1);
                            e.time(*t);
                        }
                        None => e.u8(0),
                    }
                }
            }
        }
        e.0
    }

    pub fn decode(frame: &[u8]) -> Result<Reply, WireError> {
        let mut d = Dec(frame);
        let out = match d.u8()? {
            tag::NOT_OWNER => Reply::NotOwner,
            tag::ERROR => {
                let code = d.str()?;
                let mut err = SqlError::error(SqlState::from_code(&code), d.str()?);
                err.detail = d.opt_str()?;
                err.hint = d.opt_str()?;
                Reply::Error(err)
            }
            tag::DONE => Reply::Done,
            tag::SEQS => {
                let n = d.count(8)?;
                Reply::Seqs((0..n).map(|_| d.i64()).collect::<D<_>>()?)
            }
            tag::PUSHED => {
                let n = d.count(9)?;
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    out.push(match d.flag()? {
                        false => Pushed::Queued(d.i64()?),
                        true => Pushed::Duplicate {
                            seq: d.i64()?,
                            id: d.uuid()?,
                        },
                    });
                }
                Reply::Pushed(out)
            }
            tag::DELIVERED => {
                let n = d.count(40)?;
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    let seq = d.i64()?;
                    let msg = d.message()?;
                    let retry_count = i32::try_from(d.i64()?).unwrap_or(i32::MAX);
                    let lease = match d.flag()? {
                        true => Some((d.uuid()?, d.time()?)),
                        false => None,
                    };
                    out.push(Delivered {
                        seq,
                        msg,
                        retry_count,
                        lease,
                    });
                }
                Reply::Delivered(out)
            }
            tag::STATUSES => {
                let n = d.count(8)?;
                Reply::Statuses((0..n).map(|_| d.str()).collect::<D<_>>()?)
            }
            tag::UNTIL => {
                let n = d.count(1)?;
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    out.push(match d.flag()? {
                        true => Some(d.time()?),
                        false => None,
                    });
                }
                Reply::Until(out)
            }
            _ => return Err(WireError::Malformed("unknown reply")),
        };
        d.end()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> NewMessage {
        NewMessage {
            id: Uuid::now_v7(),
            partition: "p".into(),
            payload: "{\"a\": 1}".into(),
            transaction_id: Some("t".into()),
            trace_id: None,
            created_at_micros: 1_700_000_000_000_000,
        }
    }

    #[test]
    fn requests_and_replies_round_trip() {
        let item = Item {
            group: "g".into(),
            seq: 7,
            token: Uuid::now_v7(),
        };
        let ops = [
            Op::Push(vec![message(), message()]),
            Op::Fit {
                count: 3,
                bytes: 10,
            },
            Op::Apply(vec![message()]),
            Op::Pop {
                spec: PopSpec {
                    group: "__QUEUE_MODE__".into(),
                    start: Start::Newest,
                    limit: 10,
                    partitions: 2,
                    lease: Some(Duration::from_millis(1500)),
                    auto_ack: true,
                },
                wait: Some(Duration::from_secs(3)),
            },
            Op::Ack {
                failed: true,
                items: vec![item.clone()],
            },
            Op::Renew {
                extend: None,
                items: vec![item],
            },
            Op::Counts,
        ];
        for op in ops {
            let r = Inbound::Request(Request {
                id: 9,
                tenant: Uuid::from_u128(5),
                ref_: 3,
                op,
            });
            assert_eq!(Inbound::decode(&r.encode()).unwrap(), r);
        }
        for f in [Inbound::Cancel(1), Inbound::Stop(2)] {
            assert_eq!(Inbound::decode(&f.encode()).unwrap(), f);
        }
        let at = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        let mut err = SqlError::error(SqlState::PROGRAM_LIMIT_EXCEEDED, "full");
        err.hint = Some("drop some".into());
        for reply in [
            Reply::NotOwner,
            Reply::Error(err),
            Reply::Done,
            Reply::Seqs(vec![1, 2]),
            Reply::Pushed(vec![
                Pushed::Queued(7),
                Pushed::Duplicate {
                    seq: 3,
                    id: Uuid::now_v7(),
                },
            ]),
            Reply::Delivered(vec![Delivered {
                seq: 4,
                msg: message(),
                retry_count: 1,
                lease: Some((Uuid::now_v7(), at)),
            }]),
            Reply::Statuses(vec!["acked".into(), "stale".into()]),
            Reply::Until(vec![Some(at), None]),
        ] {
            assert_eq!(Reply::decode(&reply.encode()).unwrap(), reply);
        }
    }

    #[test]
    fn hostile_frames_are_refused_without_allocating() {
        // A count far beyond the frame.
        let mut e = Enc(Vec::new());
        e.u8(tag::SEQS);
        e.u64(u64::MAX);
        assert!(Reply::decode(&e.0).is_err());
        assert!(Inbound::decode(b"").is_err());
        assert!(Inbound::decode(b"r\x00").is_err());
        let mut ok = Inbound::Cancel(1).encode();
        ok.push(0);
        assert!(Inbound::decode(&ok).is_err(), "trailing bytes");
    }
}
