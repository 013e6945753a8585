//! Window assignment and closing for one (stream, source partition): pure,
//! so every rule of docs/streams.md is tested here without a database.
//!
//! Events are taken in offset order, one at a time, and windows close after
//! each event, so what is emitted never depends on how the source was cut
//! into batches:
//! - processing time: an event's time is the largest `created_at` seen so
//!   far in the partition (its own, or a larger earlier one), and that is
//!   the stream time;
//! - event time: the stream time (watermark) is the largest event time seen
//!   minus ALLOWED LATENESS; an event is late when a window it belongs to
//!   had already closed before it arrived; ON LATE DROP drops it from those
//!   windows, ON LATE INCLUDE opens the window again for it, marked late,
//!   and it is emitted at once (a row with only the late events);
//! - a window closes (is emitted, its state deleted) when
//!   `window_end + GRACE <= stream time`;
//! - IDLE FLUSH: on a partition quiet for longer than the idle time by the
//!   wall clock, the stream time moves on to the wall clock (as Queen's
//!   runner does: `window_end + grace <= now`), closing what is ripe by then.

use super::aggregate::{AggError, AggState};
use crate::engine::values::{format_timestamptz, pg_from_unix_micros};
use crate::json;
use crate::rewrite::dialect::stream::AggFn;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tumbling { size: i64 },
    Sliding { size: i64, every: i64 },
    Session { gap: i64 },
}

/// A stream's window rules, times in microseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub kind: Kind,
    pub event_time: bool,
    pub lateness: i64,
    pub include_late: bool,
    pub grace: i64,
    pub aggs: Vec<AggFn>,
    pub names: Vec<String>,
}

/// One evaluated event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Event time, or the message's created_at (processing time).
    pub ts: i64,
    pub key: String,
    /// One argument text per aggregate.
    pub vals: Vec<Option<String>>,
}

#[derive(Debug, Clone, PartialEq)]
struct Open {
    end: i64,
    aggs: Vec<AggState>,
    late: bool,
    dirty: bool,
}

/// A closed window, to push once its pending states are resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Emitted {
    pub key: String,
    pub start: i64,
    pub end: i64,
    aggs: Vec<AggState>,
    late: bool,
}

/// A stored window to delete or upsert.
#[derive(Debug, Clone, PartialEq)]
pub struct Upsert {
    pub key: String,
    pub start: i64,
    pub end: i64,
    pub state: String,
    pub late: bool,
}

/// The open windows of one (stream, partition) and its clock.
pub struct Partition<'s> {
    spec: &'s Spec,
    pub stream_time: Option<i64>,
    pub max_seen: Option<i64>,
    open: BTreeMap<(String, i64), Open>,
    /// (key, start) of the rows the database held when loaded.
    loaded: BTreeSet<(String, i64)>,
    /// No open window ends before this (a cheap test before a scan).
    min_end: i64,
    pub emitted: Vec<Emitted>,
    pub late_dropped: i64,
    pub messages: i64,
}

fn div_floor(a: i64, b: i64) -> i64 {
    a.div_euclid(b)
}

impl<'s> Partition<'s> {
    pub fn new(spec: &'s Spec, stream_time: Option<i64>, max_seen: Option<i64>) -> Self {
        Partition {
            spec,
            stream_time,
            max_seen,
            open: BTreeMap::new(),
            loaded: BTreeSet::new(),
            min_end: i64::MAX,
            emitted: Vec::new(),
            late_dropped: 0,
            messages: 0,
        }
    }

    /// A window the database holds.
    pub fn load(
        &mut self,
        key: String,
        start: i64,
        end: i64,
        vals: &[Option<String>],
        late: bool,
    ) -> Result<(), AggError> {
        let aggs = self
            .spec
            .aggs
            .iter()
            .enumerate()
            .map(|(i, f)| AggState::load(*f, vals.get(i).and_then(|v| v.as_deref())))
            .collect::<Result<Vec<_>, _>>()?;
        self.min_end = self.min_end.min(end);
        self.loaded.insert((key.clone(), start));
        self.open.insert(
            (key, start),
            Open {
                end,
                aggs,
                late,
                dirty: false,
            },
        );
        Ok(())
    }

    fn closed(&self, end: i64, at: Option<i64>) -> bool {
        at.is_some_and(|t| end.saturating_add(self.spec.grace) <= t)
    }

    /// The (start, end) of the tumbling or sliding windows holding `ts`.
    fn fixed_windows(&self, ts: i64) -> Vec<(i64, i64)> {
        match self.spec.kind {
            Kind::Tumbling { size } => {
                let start = div_floor(ts, size) * size;
                vec![(start, start + size)]
            }
            Kind::Sliding { size, every } => {
                let last = div_floor(ts, every);
                let first = div_floor(ts - size, every) + 1;
                (first..=last)
                    .map(|k| (k * every, k * every + size))
                    .collect()
            }
            Kind::Session { .. } => Vec::new(),
        }
    }

    fn add_to(
        &mut self,
        key: &str,
        start: i64,
        end: i64,
        late: bool,
        ev: &Event,
    ) -> Result<(), AggError> {
        let spec = self.spec;
        let entry = self
            .open
            .entry((key.to_string(), start))
            .or_insert_with(|| Open {
                end,
                aggs: spec.aggs.iter().map(|f| AggState::new(*f)).collect(),
                late,
                dirty: true,
            });
        for (i, agg) in entry.aggs.iter_mut().enumerate() {
            agg.add(ev.vals.get(i).and_then(|v| v.as_deref()))?;
        }
        entry.dirty = true;
        self.min_end = self.min_end.min(end);
        Ok(())
    }

    /// One event, in offset order.
    pub fn event(&mut self, mut ev: Event) -> Result<(), AggError> {
        self.messages += 1;
        let before = self.stream_time;
        if !self.spec.event_time {
            ev.ts = ev.ts.max(self.max_seen.unwrap_or(i64::MIN));
        }
        match self.spec.kind {
            Kind::Session { gap } => self.session_event(&ev, gap, before)?,
            _ => {
                let mut placed = false;
                for (start, end) in self.fixed_windows(ev.ts) {
                    let late = self.spec.event_time && self.closed(end, before);
                    if late && !self.spec.include_late {
                        continue;
                    }
                    // A window still open takes the event as any other.
                    let reopened = late && !self.open.contains_key(&(ev.key.clone(), start));
                    self.add_to(&ev.key.clone(), start, end, reopened, &ev)?;
                    placed = true;
                }
                if !placed {
                    self.late_dropped += 1;
                }
            }
        }
        self.max_seen = Some(self.max_seen.map_or(ev.ts, |m| m.max(ev.ts)));
        let watermark = self.max_seen.map(|m| m.saturating_sub(self.spec.lateness));
        self.stream_time = match (self.stream_time, watermark) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.close_ripe();
        Ok(())
    }

    fn session_event(&mut self, ev: &Event, gap: i64, before: Option<i64>) -> Result<(), AggError> {
        let lo = (ev.key.clone(), i64::MIN);
        let hi = (ev.key.clone(), i64::MAX);
        let joins: Vec<i64> = self
            .open
            .range(lo..=hi)
            .filter(|((_, start), w)| start.saturating_sub(gap) <= ev.ts && ev.ts < w.end)
            .map(|((_, start), _)| *start)
            .collect();
        let own_end = ev.ts.saturating_add(gap);
        if joins.is_empty() {
            let late = self.spec.event_time && self.closed(own_end, before);
            if late && !self.spec.include_late {
                self.late_dropped += 1;
                return Ok(());
            }
            return self.add_to(&ev.key, ev.ts, own_end, late, ev);
        }
        // The event bridges (or extends) sessions: one session from the
        // earliest start to the latest end, states merged in start order.
        let mut start = ev.ts;
        let mut end = own_end;
        let mut merged: Option<Open> = None;
        for s in joins {
            let Some(w) = self.open.remove(&(ev.key.clone(), s)) else {
                continue;
            };
            start = start.min(s);
            end = end.max(w.end);
            merged = Some(match merged {
                None => w,
                Some(mut m) => {
                    for (a, b) in m.aggs.iter_mut().zip(&w.aggs) {
                        a.merge(b)?;
                    }
                    m.late |= w.late;
                    m
                }
            });
        }
        let Some(mut m) = merged else {
            return self.add_to(&ev.key, ev.ts, own_end, false, ev);
        };
        for (i, agg) in m.aggs.iter_mut().enumerate() {
            agg.add(ev.vals.get(i).and_then(|v| v.as_deref()))?;
        }
        m.end = end;
        m.dirty = true;
        self.min_end = self.min_end.min(end);
        self.open.insert((ev.key.clone(), start), m);
        Ok(())
    }

    /// The partition was quiet for the idle time; `now` is the wall clock.
    pub fn idle(&mut self, now: i64) {
        self.stream_time = Some(self.stream_time.map_or(now, |s| s.max(now)));
        self.close_ripe();
    }

    fn close_ripe(&mut self) {
        if !self.closed(self.min_end, self.stream_time) {
            return;
        }
        let mut ripe: Vec<(i64, i64, String)> = self
            .open
            .iter()
            .filter(|(_, w)| self.closed(w.end, self.stream_time))
            .map(|((key, start), w)| (w.end, *start, key.clone()))
            .collect();
        ripe.sort();
        for (end, start, key) in ripe {
            if let Some(w) = self.open.remove(&(key.clone(), start)) {
                self.emitted.push(Emitted {
                    key,
                    start,
                    end,
                    aggs: w.aggs,
                    late: w.late,
                });
            }
        }
        self.min_end = self.open.values().map(|w| w.end).min().unwrap_or(i64::MAX);
    }

    /// The sink message of an emitted window: `{key, window_start,
    /// window_end, <aggregates>}` (after [`Partition::pending`] is resolved).
    pub fn payload(&self, e: &Emitted) -> String {
        let mut out = format!(
            "{{\"key\": {}, \"window_start\": {}, \"window_end\": {}",
            json::string(&e.key),
            json::string(&format_timestamptz(pg_from_unix_micros(e.start))),
            json::string(&format_timestamptz(pg_from_unix_micros(e.end)))
        );
        for (name, agg) in self.spec.names.iter().zip(&e.aggs) {
            out.push_str(&format!(", {}: {}", json::string(name), agg.emitted()));
        }
        if e.late {
            out.push_str(", \"late\": true");
        }
        out.push('}');
        out
    }

    /// Every state PostgreSQL must still decide (text min/max, reduce), in
    /// the windows emitted and those to save, with its aggregate's index.
    pub fn pending(&mut self) -> Vec<(usize, &mut AggState)> {
        let emitted = self.emitted.iter_mut().map(|e| &mut e.aggs);
        let open = self
            .open
            .values_mut()
            .filter(|w| w.dirty)
            .map(|w| &mut w.aggs);
        emitted
            .chain(open)
            .flat_map(|aggs| aggs.iter_mut().enumerate())
            .filter(|(_, a)| a.is_pending())
            .collect()
    }

    /// What the database must change: (deletes as (key, start), upserts).
    pub fn changes(&self) -> (Vec<(String, i64)>, Vec<Upsert>) {
        let deletes = self
            .loaded
            .iter()
            .filter(|k| !self.open.contains_key(*k))
            .cloned()
            .collect();
        let upserts = self
            .open
            .iter()
            .filter(|(_, w)| w.dirty)
            .map(|((key, start), w)| Upsert {
                key: key.clone(),
                start: *start,
                end: w.end,
                state: self.state_object(w),
                late: w.late,
            })
            .collect();
        (deletes, upserts)
    }

    fn state_object(&self, w: &Open) -> String {
        let members: Vec<String> = self
            .spec
            .names
            .iter()
            .zip(&w.aggs)
            .map(|(n, a)| format!("{}: {}", json::string(n), a.stored()))
            .collect();
        format!("{{{}}}", members.join(", "))
    }

    /// How many windows are open.
    pub fn open_windows(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;

    fn spec(kind: Kind, event_time: bool) -> Spec {
        Spec {
            kind,
            event_time,
            lateness: 0,
            include_late: false,
            grace: 0,
            aggs: vec![AggFn::Count, AggFn::Sum],
            names: vec!["n".into(), "total".into()],
        }
    }

    fn ev(ts_s: i64, key: &str, v: i64) -> Event {
        Event {
            ts: ts_s * S,
            key: key.into(),
            vals: vec![Some("1".into()), Some(v.to_string())],
        }
    }

    fn summary(p: &Partition<'_>) -> Vec<(String, i64, i64)> {
        p.emitted
            .iter()
            .map(|e| (e.key.clone(), e.start / S, e.end / S))
            .collect()
    }

    #[test]
    fn tumbling_windows_close_when_stream_time_passes_their_end() {
        let spec = spec(Kind::Tumbling { size: 10 * S }, true);
        let mut p = Partition::new(&spec, None, None);
        for (t, k, v) in [
            (1, "a", 1),
            (3, "b", 2),
            (9, "a", 3),
            (10, "a", 4),
            (25, "a", 5),
        ] {
            p.event(ev(t, k, v)).unwrap();
        }
        assert_eq!(
            summary(&p),
            vec![
                ("a".into(), 0, 10),
                ("b".into(), 0, 10),
                ("a".into(), 10, 20)
            ]
        );
        assert!(p.payload(&p.emitted[0]).contains("\"n\": 2, \"total\": 4"));
        assert_eq!(p.open_windows(), 1);
    }

    #[test]
    fn sliding_windows_hold_each_event_size_over_every_times() {
        let spec = spec(
            Kind::Sliding {
                size: 10 * S,
                every: 5 * S,
            },
            true,
        );
        let mut p = Partition::new(&spec, None, None);
        p.event(ev(7, "k", 1)).unwrap();
        p.event(ev(100, "k", 1)).unwrap();
        assert_eq!(summary(&p), vec![("k".into(), 0, 10), ("k".into(), 5, 15)]);
    }

    #[test]
    fn sessions_extend_and_merge_within_the_gap() {
        let spec = spec(Kind::Session { gap: 5 * S }, true);
        let mut p = Partition::new(&spec, None, None);
        for t in [0, 3, 7, 20] {
            p.event(ev(t, "k", 1)).unwrap();
        }
        assert_eq!(summary(&p), vec![("k".into(), 0, 12)]);
        assert!(p.payload(&p.emitted[0]).contains("\"n\": 3"));
    }

    #[test]
    fn late_events_are_dropped_or_emitted_again_as_declared() {
        let mut s = spec(Kind::Tumbling { size: 10 * S }, true);
        let mut p = Partition::new(&s, None, None);
        for t in [1, 15, 2] {
            p.event(ev(t, "k", 1)).unwrap();
        }
        assert_eq!(p.late_dropped, 1);
        assert_eq!(p.emitted.len(), 1);
        s.include_late = true;
        let mut p = Partition::new(&s, None, None);
        for t in [1, 15, 2] {
            p.event(ev(t, "k", 1)).unwrap();
        }
        assert_eq!(summary(&p), vec![("k".into(), 0, 10), ("k".into(), 0, 10)]);
        assert!(p.payload(&p.emitted[1]).ends_with("\"late\": true}"));
    }

    #[test]
    fn processing_time_never_goes_back() {
        let spec = spec(Kind::Tumbling { size: 10 * S }, false);
        let mut p = Partition::new(&spec, None, None);
        for t in [1, 12, 11, 25] {
            p.event(ev(t, "k", 1)).unwrap();
        }
        // 11 counts at 12 (the largest created_at seen), never late.
        assert_eq!(summary(&p), vec![("k".into(), 0, 10), ("k".into(), 10, 20)]);
        assert!(p.payload(&p.emitted[1]).contains("\"n\": 2"));
    }

    #[test]
    fn grace_and_idle_flush_decide_the_close() {
        let mut s = spec(Kind::Tumbling { size: 10 * S }, true);
        s.grace = 5 * S;
        let mut p = Partition::new(&s, None, None);
        p.event(ev(1, "k", 1)).unwrap();
        p.event(ev(14, "k", 1)).unwrap();
        assert!(p.emitted.is_empty());
        p.idle(15 * S);
        assert_eq!(summary(&p), vec![("k".into(), 0, 10)]);
    }

    #[test]
    fn each_sliding_window_keeps_its_own_payloads_to_fold_until_resolved() {
        let spec = Spec {
            aggs: vec![AggFn::Reduce],
            names: vec!["ids".into()],
            ..spec(
                Kind::Sliding {
                    size: 10 * S,
                    every: 5 * S,
                },
                true,
            )
        };
        let mut p = Partition::new(&spec, None, None);
        for (t, id) in [(1, "1"), (6, "2"), (30, "3")] {
            p.event(Event {
                ts: t * S,
                key: "k".into(),
                vals: vec![Some(id.into())],
            })
            .unwrap();
        }
        // [-5, 5) holds 1; [0, 10) holds 1, 2; [5, 15) holds 2 (all
        // emitted); [25, 35) and [30, 40) hold 3 (open).
        let mut pending: Vec<Vec<String>> = p
            .pending()
            .into_iter()
            .map(|(i, a)| {
                assert_eq!(i, 0);
                match a {
                    AggState::Reduce { pending, .. } => pending.clone(),
                    other => panic!("{other:?}"),
                }
            })
            .collect();
        pending.sort();
        assert_eq!(
            pending,
            [vec!["1"], vec!["1", "2"], vec!["2"], vec!["3"], vec!["3"]]
        );
        for (_, a) in p.pending() {
            a.resolve("[\"folded\"]".into());
        }
        assert!(p.pending().is_empty());
        assert!(p.payload(&p.emitted[0]).ends_with("\"ids\": [\"folded\"]}"));
        let (_, upserts) = p.changes();
        assert_eq!(upserts[0].state, "{\"ids\": [[\"folded\"]]}");
    }

    #[test]
    fn a_reload_changes_only_what_moved() {
        let spec = spec(Kind::Tumbling { size: 10 * S }, true);
        let mut p = Partition::new(&spec, Some(5 * S), Some(5 * S));
        p.load(
            "a".into(),
            0,
            10 * S,
            &[Some("2".into()), Some("3".into())],
            false,
        )
        .unwrap();
        p.load("b".into(), 0, 10 * S, &[Some("1".into()), None], false)
            .unwrap();
        p.event(ev(6, "a", 1)).unwrap();
        let (deletes, upserts) = p.changes();
        assert!(deletes.is_empty());
        assert_eq!(upserts.len(), 1);
        assert_eq!(upserts[0].state, "{\"n\": 3, \"total\": 4}");
        p.event(ev(30, "c", 1)).unwrap();
        let (deletes, _) = p.changes();
        assert_eq!(deletes.len(), 2);
        assert!(p.payload(&p.emitted[0]).contains("\"total\": 4"));
        assert!(p.payload(&p.emitted[1]).contains("\"total\": null"));
    }
}
