//! The PostgreSQL the integration tests run against: one embedded cluster per
//! test binary, started on first use, stopped and removed when the binary
//! exits.
//!
//! Its directory is fixed per test (under the system temp dir, named after
//! the test without cargo's build hash, the uid and a hash of the target
//! directory), so a run that was killed leaves one cluster that the next run,
//! rebuilt or not, recovers through [`EmbeddedPostgres::start`] rather than a
//! new directory each time. The hash keeps two target directories that run
//! the same test at once from sharing, and so stopping, each other's cluster.
//! A cluster that stopped at exit is removed: a test cluster holds hundreds
//! of megabytes, and a machine that runs CI on clean clones again and again
//! must not keep one per build.
//!
//! Tests get a database of their own from [`fresh_database`]. Databases from
//! earlier runs are dropped when the cluster starts, so a recovered directory
//! does not grow run after run.

// Every test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use queenwire::embedded::EmbeddedPostgres;

/// Starts every database name `fresh_database` makes, so that the ones left
/// by earlier runs can be found and dropped.
const TEST_DATABASE_PREFIX: &str = "qwt_";
/// Keeps the socket path well under its 107-byte limit.
const MAX_BINARY_NAME_CHARS: usize = 40;
const MAX_DATABASE_PREFIX_CHARS: usize = 24;
/// Fast shutdown of a test cluster takes well under a second; past this the
/// process exits anyway and postgres finishes shutting down on its own.
const EXIT_STOP_TIMEOUT: Duration = Duration::from_secs(10);

static CLUSTER: OnceLock<EmbeddedPostgres> = OnceLock::new();
static CLUSTER_DIR: OnceLock<PathBuf> = OnceLock::new();
static DATABASE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// One embedded cluster per test binary, started on first use in a fixed
/// per-binary directory under the system temp dir, reusing
/// [`EmbeddedPostgres::start`] (so a leftover from an earlier crashed run is
/// recovered).
pub fn cluster() -> &'static EmbeddedPostgres {
    CLUSTER.get_or_init(|| {
        let dir = CLUSTER_DIR.get_or_init(cluster_dir);
        let cluster = EmbeddedPostgres::start(dir).unwrap_or_else(|error| {
            panic!("could not start the test cluster in {}: {error}", dir.display())
        });
        drop_databases_of_earlier_runs(&cluster);
        // A static is never dropped, so nothing else would stop the cluster.
        // SAFETY: the handler is a plain function that does not unwind.
        if unsafe { libc::atexit(stop_cluster_at_exit) } != 0 {
            eprintln!("could not register the test cluster's exit handler; the next run will stop the cluster it leaves running");
        }
        cluster
    })
}

/// CREATE DATABASE with a unique name (prefix + pid + counter) on the shared
/// cluster and return its configuration. Works from synchronous tests and
/// from inside a tokio runtime alike.
pub fn fresh_database(prefix: &str) -> tokio_postgres::Config {
    let cluster = cluster();
    let name = format!(
        "{TEST_DATABASE_PREFIX}{}_{}_{}",
        identifier_part(prefix),
        std::process::id(),
        DATABASE_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let admin_config = cluster.client_config();
    run_on_own_runtime(|| async {
        let client = connect(&admin_config).await;
        client
            .batch_execute(&format!("CREATE DATABASE {}", quote_identifier(&name)))
            .await
            .unwrap_or_else(|error| panic!("could not create the test database {name}: {error}"));
    });
    let mut config = admin_config;
    config.dbname(&name);
    config
}

fn cluster_dir() -> PathBuf {
    let binary = std::env::current_exe()
        .unwrap_or_else(|error| panic!("could not find the test binary's path: {error}"));
    let name: String = binary
        .file_stem()
        .map(|stem| test_name(&stem.to_string_lossy()))
        .unwrap_or_else(|| String::from("tests"))
        .chars()
        .take(MAX_BINARY_NAME_CHARS)
        .collect();
    let mut hasher = DefaultHasher::new();
    binary.parent().hash(&mut hasher);
    let path_hash = hasher.finish() as u32;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let dir = std::env::temp_dir().join(format!("queenwire-test-{name}-{uid}-{path_hash:08x}"));
    fs::create_dir_all(&dir)
        .unwrap_or_else(|error| panic!("could not create {}: {error}", dir.display()));
    // Run as root, the cluster runs as an unprivileged user, which must be
    // able to enter it.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|error| panic!("could not open up {}: {error}", dir.display()));
    dir
}

/// A test binary's stem without the `-<16 hex digits>` cargo appends to it,
/// which changes with every build.
fn test_name(stem: &str) -> String {
    match stem.rsplit_once('-') {
        Some((name, hash))
            if hash.len() == 16 && hash.bytes().all(|byte| byte.is_ascii_hexdigit()) =>
        {
            name.to_string()
        }
        _ => stem.to_string(),
    }
}

/// Every database in this directory's cluster carrying the test prefix was
/// made by an earlier run: a second run of the same binary stops the first
/// one's cluster when it starts.
fn drop_databases_of_earlier_runs(cluster: &EmbeddedPostgres) {
    let config = cluster.client_config();
    run_on_own_runtime(|| async {
        let client = connect(&config).await;
        let rows = client
            .query(
                "SELECT datname FROM pg_database WHERE starts_with(datname, $1)",
                &[&TEST_DATABASE_PREFIX],
            )
            .await
            .unwrap_or_else(|error| panic!("could not list earlier test databases: {error}"));
        for row in rows {
            let name: String = row.get(0);
            client
                .batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    quote_identifier(&name)
                ))
                .await
                .unwrap_or_else(|error| {
                    panic!("could not drop the old test database {name}: {error}")
                });
        }
    });
}

/// Fast shutdown by pid, as `EmbeddedPostgres::stop` would, without the
/// `&mut` a static cannot give, then the directory's removal. The postmaster
/// is this process's child, so reaping it is how we see it exit; one that has
/// not exited by the deadline keeps its directory, which the next run
/// recovers.
extern "C" fn stop_cluster_at_exit() {
    let Some(cluster) = CLUSTER.get() else {
        return;
    };
    let pid = cluster.pid() as libc::pid_t;
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(pid, libc::SIGINT) } != 0 {
        return;
    }
    let deadline = Instant::now() + EXIT_STOP_TIMEOUT;
    while Instant::now() < deadline {
        let mut status = 0;
        // SAFETY: status is a valid place for waitpid to write to.
        let reaped = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        // The pid when reaped, -1 when it is no longer our child to wait for.
        if reaped == pid {
            remove_cluster_dir();
            return;
        }
        if reaped != 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn remove_cluster_dir() {
    let Some(dir) = CLUSTER_DIR.get() else {
        return;
    };
    if let Err(error) = fs::remove_dir_all(dir) {
        eprintln!(
            "could not remove the test cluster in {}: {error}",
            dir.display()
        );
    }
}

/// Runs async setup on a thread with its own runtime, since a test may
/// already be running inside one, where blocking on another would panic.
fn run_on_own_runtime<F, Fut>(make_future: F)
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = ()>,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap_or_else(|error| panic!("could not build a tokio runtime: {error}"));
                runtime.block_on(make_future());
            })
            .join()
    })
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}

async fn connect(config: &tokio_postgres::Config) -> tokio_postgres::Client {
    let (client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| panic!("could not connect to the test cluster: {error}"));
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            eprintln!("test cluster connection failed: {error}");
        }
    });
    client
}

/// Lower-case letters, digits and underscores, so the name needs no care.
fn identifier_part(prefix: &str) -> String {
    prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(MAX_DATABASE_PREFIX_CHARS)
        .collect()
}

fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
