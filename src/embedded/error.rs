//! What can go wrong running the embedded cluster, each error saying what
//! to do about it, with the end of the cluster's log where that helps.

use super::ServerBinaries;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

const LOG_TAIL_BYTES: u64 = 8192;
const LOG_TAIL_LINES: usize = 20;
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "no PostgreSQL server binaries (initdb, postgres) of version 15 or newer found in PATH or /usr/lib/postgresql/*/bin{}; install them, e.g. `apt-get install postgresql`",
        describe_found(.found)
    )]
    NoServerBinaries { found: Vec<ServerBinaries> },

    #[error(
        "the cluster in {} was created by PostgreSQL {cluster_major}, but no server binaries of that version were found in PATH or /usr/lib/postgresql/*/bin{}; install them, e.g. `apt-get install postgresql-{cluster_major}`, or upgrade the cluster with pg_upgrade",
        .pgdata.display(),
        describe_found(.found)
    )]
    NoBinariesForCluster {
        pgdata: PathBuf,
        cluster_major: u32,
        found: Vec<ServerBinaries>,
    },

    #[error("could not {action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },

    #[error(
        "another queenwire is using the data directory {} (it holds queenwire.lock there); stop it first, or give this one a --data-dir of its own",
        .data_dir.display()
    )]
    InUse { data_dir: PathBuf },

    #[error("could not look up the OS user `{name}`: {source}")]
    UserLookup {
        name: &'static str,
        source: io::Error,
    },

    #[error(
        "queenwire runs as root, which PostgreSQL refuses, and neither a `postgres` nor a `nobody` OS user exists to run it as; create one, e.g. `useradd --system postgres`"
    )]
    NoUnprivilegedUser,

    #[error(
        "PostgreSQL must run as the unprivileged user `{user}` because queenwire runs as root, but `{user}` cannot enter {} (mode {mode:o}, owner uid {owner}); choose a data directory it can reach (e.g. under /var/lib) or let it in (e.g. `chmod o+x {}`)",
        .dir.display(),
        .dir.display()
    )]
    NotTraversable {
        user: String,
        dir: PathBuf,
        mode: u32,
        owner: u32,
    },

    #[error(
        "the socket path {} is {len} bytes, more than the 107 a Unix socket address holds; choose a data directory with a shorter path",
        .path.display()
    )]
    SocketPathTooLong { path: PathBuf, len: usize },

    #[error(
        "{} exists and is not empty but holds no PostgreSQL cluster (no PG_VERSION), probably left by an interrupted initdb; remove it so queenwire can create the cluster again",
        .pgdata.display()
    )]
    PgdataNotACluster { pgdata: PathBuf },

    #[error("could not run {}: {source}", .program.display())]
    Spawn { program: PathBuf, source: io::Error },

    #[error("initdb failed ({status}); see {}, which ends with:\n{log_tail}", .log.display())]
    InitdbFailed {
        status: ExitStatus,
        log: PathBuf,
        log_tail: String,
    },

    #[error(
        "a PostgreSQL (pid {pid}) left running on {} by an earlier run did not exit after SIGINT, SIGQUIT and SIGKILL",
        .pgdata.display()
    )]
    LeftoverWouldNotStop { pid: u32, pgdata: PathBuf },

    #[error("postgres exited ({status}) before accepting connections; see {}, which ends with:\n{log_tail}", .log.display())]
    ExitedEarly {
        status: ExitStatus,
        log: PathBuf,
        log_tail: String,
    },

    #[error(
        "postgres did not accept connections within {waited:?} (last attempt: {last_error}); see {}, which ends with:\n{log_tail}",
        .log.display()
    )]
    NotReady {
        waited: Duration,
        last_error: String,
        log: PathBuf,
        log_tail: String,
    },

    #[error("could not build the runtime for the readiness check: {source}")]
    ProbeRuntime { source: io::Error },

    #[error("could not send {signal} to postgres (pid {pid}): {source}")]
    Signal {
        pid: u32,
        signal: &'static str,
        source: io::Error,
    },

    #[error("could not wait for postgres (pid {pid}) to exit: {source}")]
    Wait { pid: u32, source: io::Error },
}

fn describe_found(found: &[ServerBinaries]) -> String {
    if found.is_empty() {
        return String::new();
    }
    let listed: Vec<String> = found
        .iter()
        .map(|binaries| format!("{} in {}", binaries.major, binaries.bin_dir.display()))
        .collect();
    format!(" (found only: {})", listed.join(", "))
}

/// The end of the log, for error messages; best effort, since the error being
/// reported matters more than a log we cannot read.
pub(super) fn log_tail(log_path: &Path) -> String {
    let read_tail = || -> io::Result<String> {
        let mut file = File::open(log_path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        Ok(lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n"))
    };
    read_tail().unwrap_or_else(|error| format!("(the log could not be read: {error})"))
}

pub(super) fn io_error(
    action: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(io::Error) -> EmbeddedError {
    let path = path.into();
    move |source| EmbeddedError::Io {
        action,
        path,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_error_says_what_to_install() {
        let error = EmbeddedError::NoServerBinaries {
            found: vec![ServerBinaries {
                bin_dir: PathBuf::from("/usr/lib/postgresql/13/bin"),
                major: 13,
            }],
        };
        assert_eq!(
            error.to_string(),
            "no PostgreSQL server binaries (initdb, postgres) of version 15 or newer found in PATH or /usr/lib/postgresql/*/bin (found only: 13 in /usr/lib/postgresql/13/bin); install them, e.g. `apt-get install postgresql`"
        );
    }
}
