//! The processes the chaos test breaks: a PostgreSQL cluster of its own,
//! shut down immediately and started again, and the real queenwire
//! binary, killed with SIGKILL and started again.

use queenwire::embedded::EmbeddedPostgres;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// PostgreSQL of the test's own, which it may shut down.
pub struct Cluster {
    pub dir: PathBuf,
    pub postgres: Mutex<Option<EmbeddedPostgres>>,
}

impl Cluster {
    pub fn start(dir: &Path) -> Cluster {
        std::fs::create_dir_all(dir).unwrap();
        // Run as root, the cluster's unprivileged user must enter it.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let postgres = EmbeddedPostgres::start(dir).expect("the chaos cluster starts");
        Cluster {
            dir: dir.to_path_buf(),
            postgres: Mutex::new(Some(postgres)),
        }
    }

    pub fn config(&self) -> tokio_postgres::Config {
        self.postgres
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .client_config()
    }

    /// Immediate shutdown (no checkpoint: crash recovery at the next start)
    /// and a start at once.
    pub fn restart_immediate(&self) -> Duration {
        let mut slot = self.postgres.lock().unwrap();
        let mut old = slot.take().unwrap();
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(old.pid() as libc::pid_t, libc::SIGQUIT) };
        // Reaps the postmaster (already exiting: the SIGINT finds it gone).
        old.stop().unwrap();
        let began = Instant::now();
        *slot = Some(EmbeddedPostgres::start(&self.dir).expect("the chaos cluster restarts"));
        began.elapsed()
    }
}

/// The real binary, as an operator runs it.
pub struct Queenwire {
    pub backend: String,
    pub port: u16,
    pub log: PathBuf,
    pub child: Option<Child>,
}

impl Queenwire {
    pub fn start(cluster: &Cluster, dir: &Path) -> Queenwire {
        let cfg = cluster.config();
        let socket_dir = match &cfg.get_hosts()[0] {
            tokio_postgres::config::Host::Unix(dir) => dir.clone(),
            other => panic!("{other:?}"),
        };
        let backend = format!(
            "host={} port={} user={} dbname={}",
            socket_dir.display(),
            cfg.get_ports()[0],
            cfg.get_user().unwrap(),
            cfg.get_dbname().unwrap()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut qw = Queenwire {
            backend,
            port,
            log: dir.join("queenwire.log"),
            child: None,
        };
        qw.spawn();
        qw
    }

    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        self.child = Some(
            Command::new(env!("CARGO_BIN_EXE_queenwire"))
                .args([
                    "--backend",
                    &self.backend,
                    "--listen",
                    &format!("127.0.0.1:{}", self.port),
                ])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
    }

    /// SIGKILL, then a new process on the same port at once.
    pub fn kill_9_and_restart(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        self.spawn();
    }

    pub fn client_config(&self) -> tokio_postgres::Config {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host("127.0.0.1")
            .port(self.port)
            .user("chaos")
            .dbname("chaos");
        cfg
    }
}

impl Drop for Queenwire {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
