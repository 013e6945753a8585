//! Starting queenwire in-process on a fresh database of the shared cluster,
//! and connecting to it with real clients.

use queenwire::server::{Backend, Config, Server};
use std::net::SocketAddr;
use std::process::Command;

pub struct Proxy {
    pub server: Server,
    pub addr: SocketAddr,
    /// Direct access to the proxy's database, bypassing the proxy.
    pub direct: tokio_postgres::Config,
}

impl Proxy {
    pub async fn start(prefix: &str) -> Proxy {
        Proxy::start_with(prefix, |_| {}).await
    }

    pub async fn start_with(prefix: &str, adjust: impl FnOnce(&mut Config)) -> Proxy {
        let direct = super::cluster::fresh_database(prefix);
        Proxy::start_on(direct, adjust).await
    }

    /// A proxy on an existing database.
    pub async fn start_on(
        direct: tokio_postgres::Config,
        adjust: impl FnOnce(&mut Config),
    ) -> Proxy {
        let mut config = Config {
            listen: "127.0.0.1:0".into(),
            backend: Backend::External(Box::new(direct.clone())),
            pool_size: 4,
            ..Config::default()
        };
        adjust(&mut config);
        let server = Server::start(config).await.expect("queenwire starts");
        let addr = server.local_addr;
        Proxy {
            server,
            addr,
            direct,
        }
    }

    pub fn client_config(&self) -> tokio_postgres::Config {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host("127.0.0.1")
            .port(self.addr.port())
            .user("tester")
            .dbname("anything");
        cfg
    }

    /// A tokio-postgres client through the proxy.
    pub async fn connect(&self) -> tokio_postgres::Client {
        connect(&self.client_config()).await
    }

    /// A tokio-postgres client straight to the proxy's database.
    pub async fn connect_direct(&self) -> tokio_postgres::Client {
        connect(&self.direct).await
    }

    /// Runs `psql` against the proxy with the given arguments; returns
    /// (success, stdout, stderr). psql runs on a blocking thread: the proxy
    /// serves it from this test's runtime.
    pub async fn psql(&self, args: &[&str]) -> (bool, String, String) {
        self.psql_env(args, &[]).await
    }

    /// `psql` with extra environment variables; a `-U` in `args` wins over
    /// the default user.
    pub async fn psql_env(&self, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
        psql_at("127.0.0.1", self.addr.port(), args, env).await
    }
}

/// Runs `psql -h HOST -p PORT -U tester` (HOST may be a socket directory)
/// with the given arguments and environment; returns (success, stdout,
/// stderr). psql runs on a blocking thread: the proxy serves it from the
/// test's runtime.
pub async fn psql_at(
    host: &str,
    port: u16,
    args: &[&str],
    env: &[(&str, &str)],
) -> (bool, String, String) {
    let (host, port) = (host.to_string(), port.to_string());
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("psql")
            .args([
                "-h",
                &host,
                "-p",
                &port,
                "-U",
                "tester",
                "-X",
                "-v",
                "ON_ERROR_STOP=1",
            ])
            .args(&args)
            .env_remove("PGPASSWORD")
            .envs(env)
            .output()
            .expect("psql runs")
    })
    .await
    .expect("psql thread");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub async fn connect(cfg: &tokio_postgres::Config) -> tokio_postgres::Client {
    let (client, connection) = cfg.connect(tokio_postgres::NoTls).await.expect("connects");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}
