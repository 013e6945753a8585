//! Wake-ups for long-polling POPs.
//!
//! A waiting POP parks on its queue's waiters and holds no backend
//! connection (outside a transaction block). A PUSH wakes that queue's
//! waiters in this process when its transaction ends, and tells other
//! queenwire processes on the same database through NOTIFY on
//! [`CHANNEL`], sent by one background connection in batches so that no
//! push transaction ever takes PostgreSQL's NOTIFY commit lock. Each process
//! LISTENs on the channel and wakes its own waiters. A slow backoff poll in
//! the waiter is the safety net for a lost notification.
//!
//! Any role may LISTEN on any channel, tenants' roles included, so the
//! payload never names a queue: it is a digest of (tenant, queue) keyed by
//! the database's shared secret, which every queenwire on the database
//! computes alike and no tenant can.
//!
//! Every wake-up, local or remote, also tells the hot list (`hotlist/`)
//! that the queue was written, so its rings catch up before their next POP.
//!
//! Who is woken. A POP of one group over the whole queue waits with the
//! other POPs of its group, and a wake-up wakes ONE of them; that one, if
//! its attempt finds messages, passes the wake-up on to the next before it
//! returns, and the chain ends at the first attempt that finds nothing. A
//! partition is leased to one consumer of a group at a time, so waking
//! every waiter of a group for one push only bought empty attempts: each
//! woken POP pays a backend call (measured: docs/internals/storage.md, "The
//! wake-up path").
//! A POP naming its partition, or over a namespace, cannot tell for the
//! others whether there is work, so those are woken all together by every
//! wake-up, as before.

use super::hotlist::Hotlist;
use crate::backend::call::prepare;
use crate::backend::health::Health;
use crate::calls::maintenance::{NotifyPushed, LISTEN_WAKEUPS, WAKE_CHANNEL};
use crate::shutdown::ShutdownSignal;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use uuid::Uuid;

pub const CHANNEL: &str = WAKE_CHANNEL;

/// The least time between two NOTIFY transactions of one process: a push
/// wakes this process's waiters at once and other processes' within this
/// much more. Measured 2026-12-01 (push1, C=8, 2 cores): one NOTIFY
/// transaction per fused write cost 20 µs of PostgreSQL's CPU and 9 µs of
/// queenwire's per message.
const NOTIFY_PACE: Duration = Duration::from_millis(5);

/// (tenant, queue) as it travels in a notification payload.
pub fn queue_key(tenant: Uuid, queue: &str) -> String {
    format!("{tenant}:{queue}")
}

pub struct Waiters {
    /// Keyed by the digest of the queue key (what travels in a NOTIFY).
    queues: Mutex<HashMap<String, Arc<QueueWaiters>>>,
    digest_key: [u8; 32],
    /// The hot list's rings, told of every wake-up before the waiters are
    /// woken (a digest names the queue, not the partition: the rings catch
    /// up with a windowed reseed, see `hotlist/`).
    pub hot: Hotlist,
}

/// The POPs waiting on one queue.
#[derive(Default)]
pub struct QueueWaiters {
    /// POPs naming a partition, or over a namespace: all woken by every
    /// wake-up.
    every: Notify,
    /// Per consumer group, the POPs over the whole queue.
    groups: Mutex<HashMap<String, Arc<GroupWaiters>>>,
}

/// The POPs of one group waiting on one queue (all partitions).
#[derive(Default)]
pub struct GroupWaiters {
    notify: Notify,
    /// POPs between their first attempt and their return. Read by a
    /// wake-up before `notify_one`, which would otherwise leave a permit
    /// that makes the group's next waiting POP try once more for nothing.
    /// A POP counts itself before it registers its `Notified` and before
    /// its first attempt (both `SeqCst`, as the hot list's wake count the
    /// wake-up bumps first), so a wake-up that reads 0 came before that
    /// attempt, which then sees the push.
    registered: AtomicUsize,
}

impl GroupWaiters {
    /// Wakes one waiting POP of the group, if any is registered.
    fn wake_one(&self) {
        if self.registered.load(Ordering::SeqCst) > 0 {
            self.notify.notify_one();
        }
    }
}

/// How one POP waits: what wakes it, and its place among the waiters.
pub enum Waiting {
    Every(Arc<QueueWaiters>),
    /// The queue is held too, so a prune never replaces it while this POP
    /// waits on one of its groups.
    Group(Arc<QueueWaiters>, Arc<GroupWaiters>),
}

impl Waiting {
    pub fn notify(&self) -> &Notify {
        match self {
            Waiting::Every(q) => &q.every,
            Waiting::Group(_, g) => &g.notify,
        }
    }

    /// This POP's attempt found messages after a wake-up: there may be
    /// more (another partition, or beyond its LIMIT), so the next waiter
    /// of its group tries too. Called once the POP no longer waits itself.
    pub fn pass_on(&self) {
        if let Waiting::Group(_, g) = self {
            g.registered.fetch_sub(1, Ordering::SeqCst);
            g.wake_one();
            g.registered.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Waiting::Group(_, g) = self {
            g.registered.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Waiters {
    /// `secret`: the database's shared secret (the receipt secret), from
    /// which the digest key is derived.
    pub fn new(secret: &[u8]) -> Waiters {
        Waiters {
            queues: Mutex::new(HashMap::new()),
            digest_key: crate::crypto::hmac(secret, b"queenwire wake-up digest"),
            hot: Hotlist::default(),
        }
    }

    /// The NOTIFY payload of a queue key: 128 bits of HMAC-SHA256, in hex.
    pub fn digest(&self, key: &str) -> String {
        use std::fmt::Write;
        let mac = crate::crypto::hmac(&self.digest_key, key.as_bytes());
        mac[..16]
            .iter()
            .fold(String::with_capacity(32), |mut s, b| {
                let _ = write!(s, "{b:02x}");
                s
            })
    }

    fn queue(&self, key: &str) -> Arc<QueueWaiters> {
        let digest = self.digest(key);
        lock(&self.queues).entry(digest).or_default().clone()
    }

    /// A place among the waiters of queue `key` woken by every wake-up
    /// (a POP naming its partition, or over a namespace).
    pub fn every(&self, key: &str) -> Waiting {
        Waiting::Every(self.queue(key))
    }

    /// A place among the waiters of `group` on queue `key`, counted from
    /// now (before the POP's first attempt) until it is dropped.
    pub fn group(&self, key: &str, group: &str) -> Waiting {
        let queue = self.queue(key);
        let g = lock(&queue.groups)
            .entry(group.to_string())
            .or_default()
            .clone();
        g.registered.fetch_add(1, Ordering::SeqCst);
        Waiting::Group(queue, g)
    }

    /// Wakes the POPs now waiting on the queue with this digest (from this
    /// process's pushes, or from a NOTIFY): one per group, and every one
    /// naming a partition or a namespace.
    pub fn wake_digest(&self, digest: &str) {
        self.hot.woken(digest);
        self.wake_waiters(digest);
    }

    /// Wakes the waiting POPs of the queue with this digest, as
    /// [`Waiters::wake_digest`], without telling its hot-list rings (they
    /// were given what was written).
    fn wake_waiters(&self, digest: &str) {
        let queue = lock(&self.queues).get(digest).cloned();
        if let Some(q) = queue {
            q.every.notify_waiters();
            for g in lock(&q.groups).values() {
                g.wake_one();
            }
        }
    }

    /// Forgets queues and groups nobody waits on, and idle hot-list rings
    /// (called now and then).
    pub fn prune(&self) {
        self.hot.prune();
        lock(&self.queues).retain(|_, q| {
            lock(&q.groups).retain(|_, g| Arc::strong_count(g) > 1);
            Arc::strong_count(q) > 1
        });
    }
}

/// Announces pushes: wakes local waiters at once and queues a NOTIFY for
/// other processes.
#[derive(Clone)]
pub struct Announcer {
    pub waiters: Arc<Waiters>,
    remote: mpsc::UnboundedSender<String>,
}

impl Announcer {
    pub fn new(waiters: Arc<Waiters>) -> (Announcer, mpsc::UnboundedReceiver<String>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Announcer {
                waiters,
                remote: tx,
            },
            rx,
        )
    }

    pub fn pushed(&self, key: &str) {
        let digest = self.waiters.digest(key);
        self.waiters.wake_digest(&digest);
        let _ = self.remote.send(digest);
    }

    /// Messages of the queue became claimable again without a write (a
    /// held claim given back unused): its waiting POPs, here and in the
    /// other processes, look again now rather than at their next poll.
    pub fn released(&self, key: &str) {
        let digest = self.waiters.digest(key);
        self.waiters.wake_waiters(&digest);
        let _ = self.remote.send(digest);
    }

    /// A committed push into these partitions (ids) of the queue: the
    /// queue's rings take the ids themselves, so their next POP claims
    /// without reseeding first; with no ids (nothing written, or not
    /// known) as [`Announcer::pushed`].
    pub fn pushed_into(&self, key: &str, partitions: &[i64]) {
        let digest = self.waiters.digest(key);
        if partitions.is_empty() || !self.waiters.hot.fed(&digest, partitions) {
            self.waiters.wake_digest(&digest);
        } else {
            self.waiters.wake_waiters(&digest);
        }
        let _ = self.remote.send(digest);
    }
}

/// Sends queued announcements as NOTIFYs, many per round trip, and LISTENs
/// for those of other processes, until shutdown begins. Reconnects after a
/// lost connection.
pub async fn run(
    config: tokio_postgres::Config,
    waiters: Arc<Waiters>,
    announcements: mpsc::UnboundedReceiver<String>,
    shutdown: ShutdownSignal,
) {
    tokio::select! {
        () = relay(config, waiters, announcements) => {}
        () = shutdown.begun() => {}
    }
}

async fn relay(
    config: tokio_postgres::Config,
    waiters: Arc<Waiters>,
    mut announcements: mpsc::UnboundedReceiver<String>,
) {
    use futures::StreamExt;
    let mut health = Health::new("wake-ups");
    loop {
        let (client, mut connection) = match config.connect(tokio_postgres::NoTls).await {
            Ok(c) => c,
            Err(e) => {
                health.lost(&e);
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        // Drive the connection and turn notifications into local wake-ups.
        // This connection's own NOTIFYs come back to it too: their queues
        // were woken here when announced, so they are skipped (`own` is
        // this backend's pid, 0 until known).
        let own = Arc::new(AtomicI32::new(0));
        let (fail_tx, mut fail_rx) = tokio::sync::oneshot::channel::<()>();
        let listen_waiters = waiters.clone();
        let own_pid = own.clone();
        tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(msg) = messages.next().await {
                match msg {
                    Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                        if n.process_id() != own_pid.load(Ordering::Relaxed) {
                            listen_waiters.wake_digest(n.payload())
                        }
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            let _ = fail_tx.send(());
        });
        let pid = match client.query_one("SELECT pg_backend_pid()", &[]).await {
            Ok(row) => row.try_get::<_, i32>(0),
            Err(e) => Err(e),
        };
        match pid {
            Ok(pid) => own.store(pid, Ordering::Relaxed),
            Err(e) => {
                health.lost(&e);
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        }
        if let Err(e) = client.batch_execute(LISTEN_WAKEUPS).await {
            health.lost(&e);
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            continue;
        }
        let notify_pushed = match prepare::<NotifyPushed>(&client).await {
            Ok(prepared) => prepared,
            Err(e) => {
                health.lost(&e);
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        health.ok();
        let mut prune = tokio::time::interval(std::time::Duration::from_secs(60));
        let mut last_sent: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                key = announcements.recv() => {
                    let Some(key) = key else { return };
                    // Each NOTIFY is a transaction with a commit record of
                    // its own: at most one per NOTIFY_PACE, carrying every
                    // queue announced meanwhile (local waiters were woken
                    // already; only other processes wait the pace).
                    if let Some(at) = last_sent {
                        tokio::time::sleep_until(at + NOTIFY_PACE).await;
                    }
                    let mut keys = vec![key];
                    while let Ok(k) = announcements.try_recv() {
                        if !keys.contains(&k) {
                            keys.push(k);
                        }
                        if keys.len() >= 256 {
                            break;
                        }
                    }
                    let notify = NotifyPushed { channel: CHANNEL, payloads: &keys };
                    last_sent = Some(tokio::time::Instant::now());
                    if let Err(e) = notify_pushed.execute(&client, &notify).await {
                        health.lost(&e);
                        break;
                    }
                }
                _ = prune.tick() => waiters.prune(),
                _ = &mut fail_rx => {
                    health.lost(&"the LISTEN connection closed");
                    break;
                }
            }
        }
    }
}
