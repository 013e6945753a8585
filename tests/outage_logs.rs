//! Background loops report a backend outage once: one WARN when they lose
//! the backend and one INFO when it is back, however many retries fail in
//! between. Its own test binary, since it reads the process's log.

mod common;

use common::cut::Cutter;
use common::proxy::Proxy;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn lines(&self, level: &str, task: &str) -> usize {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        text.lines()
            .filter(|l| l.contains(level) && l.contains(&format!("task=\"{task}\"")))
            .count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_one_warn_and_one_info_per_background_loop() {
    let log = Log::default();
    let writer = log.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish(),
    )
    .unwrap();
    let db = common::cluster::fresh_database("outage_logs");
    let cutter = Cutter::start().await;
    let proxy = Proxy::start_on(cutter.config(&db), |_| {}).await;
    let client = proxy.connect().await;
    client
        .simple_query("PUSH INTO q VALUES ('1')")
        .await
        .unwrap();
    // Everything running before the outage.
    tokio::time::sleep(Duration::from_millis(500)).await;

    cutter.down();
    // Timers retry every 200 ms, wake-ups every second: many failures.
    tokio::time::sleep(Duration::from_secs(6)).await;
    cutter.up();
    let tasks = ["timers", "wake-ups", "maintenance"];
    let deadline = Instant::now() + Duration::from_secs(30);
    while tasks.iter().any(|t| log.lines("INFO", t) == 0) {
        assert!(
            Instant::now() < deadline,
            "not every loop recovered: {}",
            String::from_utf8_lossy(&log.0.lock().unwrap())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for task in tasks {
        assert_eq!(
            log.lines("WARN", task),
            1,
            "{task}: {}",
            String::from_utf8_lossy(&log.0.lock().unwrap())
        );
        assert_eq!(log.lines("INFO", task), 1, "{task}");
    }
    // And queenwire serves again.
    let again = proxy.connect().await;
    again
        .simple_query("PUSH INTO q VALUES ('2')")
        .await
        .unwrap();
}
