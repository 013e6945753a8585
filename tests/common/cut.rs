//! A TCP relay in front of the test cluster that a test can cut: every
//! connection through it closes at once, both ways, as when a network path
//! or a PostgreSQL host dies between a request and its reply. New
//! connections pass again afterwards. Deterministic where killing a
//! backend is not: PostgreSQL sends nothing of its own (no 57P01), and the
//! shared cluster goes on serving the other tests.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, UnixStream};
use tokio::task::AbortHandle;

pub struct Cutter {
    pub port: u16,
    live: Arc<Mutex<Vec<AbortHandle>>>,
    /// While set, new connections are closed as soon as they arrive.
    down: Arc<AtomicBool>,
    accept: AbortHandle,
}

impl Cutter {
    /// Relays 127.0.0.1:`port` to the cluster's Unix socket.
    pub async fn start() -> Cutter {
        let cluster = super::cluster::cluster();
        let socket: PathBuf = cluster
            .socket_dir()
            .join(format!(".s.PGSQL.{}", cluster.port()));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let live: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let relays = live.clone();
        let down: Arc<AtomicBool> = Arc::default();
        let refusing = down.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if refusing.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let socket = socket.clone();
                let relay = tokio::spawn(async move {
                    if let Ok(mut server) = UnixStream::connect(&socket).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                relays.lock().unwrap().push(relay.abort_handle());
            }
        })
        .abort_handle();
        Cutter {
            port,
            live,
            down,
            accept,
        }
    }

    /// A configuration for `database` through the relay.
    pub fn config(&self, database: &tokio_postgres::Config) -> tokio_postgres::Config {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host("127.0.0.1")
            .port(self.port)
            .user(database.get_user().unwrap())
            .dbname(database.get_dbname().unwrap());
        cfg
    }

    /// Cuts every connection and refuses new ones until [`Cutter::up`]:
    /// PostgreSQL is unreachable.
    pub fn down(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cut();
    }

    pub fn up(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    /// Closes every connection through the relay now.
    pub fn cut(&self) {
        for relay in self.live.lock().unwrap().drain(..) {
            relay.abort();
        }
    }
}

impl Drop for Cutter {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
