//! The real `queenwire` binary, as an operator runs it, on a database the
//! test gives it: started, killed with SIGKILL and started again on the
//! same port, and reached by clients over TCP.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct Queenwire {
    /// `--backend`: the database, as a key=value string.
    pub backend: String,
    pub port: u16,
    pub log: PathBuf,
    /// Flags beyond `--backend` and `--listen`.
    pub extra: Vec<String>,
    pub child: Option<Child>,
}

impl Queenwire {
    /// Starts the binary on `database` (a Unix-socket configuration), its
    /// standard error appended to `dir/<name>.log`.
    pub fn start(
        database: &tokio_postgres::Config,
        dir: &Path,
        name: &str,
        extra: &[&str],
    ) -> Queenwire {
        let socket_dir = match &database.get_hosts()[0] {
            tokio_postgres::config::Host::Unix(dir) => dir.clone(),
            other => panic!("{other:?}"),
        };
        let backend = format!(
            "host={} port={} user={} dbname={}",
            socket_dir.display(),
            database.get_ports()[0],
            database.get_user().unwrap(),
            database.get_dbname().unwrap()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut qw = Queenwire {
            backend,
            port,
            log: dir.join(format!("{name}.log")),
            extra: extra.iter().map(|s| s.to_string()).collect(),
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
                .args(&self.extra)
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

    pub fn client_config(&self, user: &str) -> tokio_postgres::Config {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host("127.0.0.1")
            .port(self.port)
            .user(user)
            .dbname(user);
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
