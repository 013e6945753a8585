//! The `queenwire` binary on its embedded PostgreSQL: starts, serves, stops
//! on SIGTERM, and comes back after a `kill -9`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn(data_dir: &Path, port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_queenwire"))
        .args([
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .env_remove("DATABASE_URL")
        .env_remove("QUEENWIRE_BACKEND")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until `SELECT 1` through the proxy works.
fn wait_serving(port: u16, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "queenwire exited early"
        );
        let out = Command::new("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "t",
                "-X",
                "-At",
                "-c",
                "SELECT 40 + 2",
            ])
            .output()
            .unwrap();
        if out.status.success() {
            assert_eq!(String::from_utf8_lossy(&out.stdout), "42\n");
            return;
        }
        assert!(Instant::now() < deadline, "queenwire never served");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn postmaster_pid(data_dir: &Path) -> i32 {
    let text = std::fs::read_to_string(data_dir.join("pgdata/postmaster.pid")).unwrap();
    text.lines().next().unwrap().trim().parse().unwrap()
}

fn alive(pid: i32) -> bool {
    // A zombie is gone for our purposes.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.contains(") Z "),
        Err(_) => false,
    }
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "queenwire did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn embedded_cluster_starts_serves_stops_and_recovers_from_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    // The cluster runs as an unprivileged user, who must reach the data dir.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("data");

    let port = free_port();
    let mut child = spawn(&data, port);
    wait_serving(port, &mut child);
    let pg = postmaster_pid(&data);
    assert!(alive(pg));

    // SIGTERM: queenwire exits cleanly and takes PostgreSQL with it.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pg) {
        assert!(Instant::now() < deadline, "postgres outlived queenwire");
        std::thread::sleep(Duration::from_millis(50));
    }

    // Restart on the same data dir.
    let mut child = spawn(&data, port);
    wait_serving(port, &mut child);
    let leftover = postmaster_pid(&data);

    // kill -9 leaves PostgreSQL running; the next start recovers.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        alive(leftover),
        "postgres should survive a kill -9 of its parent"
    );
    let mut child = spawn(&data, port);
    wait_serving(port, &mut child);
    assert!(!alive(leftover), "the leftover cluster was not stopped");

    // A second queenwire on the data dir in use is refused, and the first
    // one's cluster is left alone.
    let pg = postmaster_pid(&data);
    let second = Command::new(env!("CARGO_BIN_EXE_queenwire"))
        .args(["--data-dir", data.to_str().unwrap(), "--listen"])
        .arg(format!("127.0.0.1:{}", free_port()))
        .env_remove("DATABASE_URL")
        .env_remove("QUEENWIRE_BACKEND")
        .output()
        .unwrap();
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains("another queenwire is using"), "{err}");
    assert!(alive(pg), "the running cluster was stopped");
    wait_serving(port, &mut child);

    // The cluster dies under queenwire: it exits with an error rather than
    // serve nothing, and the next start recovers.
    unsafe { libc::kill(pg, libc::SIGKILL) };
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert!(!status.success(), "{status:?}");
    let mut child = spawn(&data, port);
    wait_serving(port, &mut child);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(wait_exit(&mut child, Duration::from_secs(30)).success());
}

#[test]
fn a_backend_without_a_server_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_queenwire"))
        .args([
            "--backend",
            "postgres://nobody@127.0.0.1:1/none",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("queenwire: backend"), "{err}");
}

#[test]
fn help_documents_every_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_queenwire"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--backend",
        "--data-dir",
        "--pool-size",
        "--log-level",
        "QUEENWIRE_LISTEN",
        "QUEENWIRE_POOL_SIZE",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
}
