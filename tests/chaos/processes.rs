//! The PostgreSQL cluster the chaos test breaks: its own, shut down
//! immediately and started again (the queenwire binary it kills is
//! `common::binary`).

use queenwire::embedded::EmbeddedPostgres;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
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
