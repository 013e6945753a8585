//! SIGHUP: the users file, the TLS certificate and the encryption keys
//! read again while queenwire serves.

use super::{pool_labels, tenant_role_pools, Server};
use crate::frontend::tls::tls_acceptor;
use std::sync::Arc;

impl Server {
    /// Reads the users file, the TLS certificate and key and the encryption
    /// keys again (SIGHUP).
    /// New logins see the new users (the tenant roles of added users are
    /// made first, as at start); sessions already in are untouched, also
    /// those of a removed user. What fails to load is kept as it was and
    /// reported; the other part is still replaced.
    pub async fn reload(&self) -> Result<(), String> {
        let mut errors = Vec::new();
        if let Some(path) = &self.reload.users_path {
            match self.reload_users(path).await {
                Ok(n) => tracing::info!(users = n, file = %path.display(), "users file reloaded"),
                Err(e) => {
                    tracing::error!("users file not reloaded, the old one stays: {e}");
                    errors.push(e);
                }
            }
        }
        if let Some(files) = &self.reload.tls {
            match tls_acceptor(files) {
                Ok(acceptor) => {
                    self.shared.replace_tls(acceptor);
                    tracing::info!(cert = %files.cert.display(), "TLS certificate reloaded");
                }
                Err(e) => {
                    tracing::error!("TLS certificate not reloaded, the old one stays: {e}");
                    errors.push(e.to_string());
                }
            }
        }
        if let Err(e) = self.shared.engine.sealing.reload() {
            errors.push(e);
        }
        match errors.is_empty() {
            true => Ok(()),
            false => Err(errors.join("; ")),
        }
    }

    async fn reload_users(&self, path: &std::path::Path) -> Result<usize, String> {
        if !path.exists() {
            return Err(format!("users file {} does not exist", path.display()));
        }
        let users = crate::users::Users::load(path).map_err(|e| e.to_string())?;
        if users.users.is_empty() {
            return Err(format!("users file {} has no users", path.display()));
        }
        let from = &self.reload;
        let (client, connection) = from
            .background
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| format!("backend: {e}"))?;
        let conn_task = tokio::spawn(async move {
            let _ = connection.await;
        });
        let shared = &self.shared;
        let pools = tenant_role_pools(&client, &users, &from.target, from.pool_size, |t, ro| {
            shared.has_role_pool(t, ro)
        })
        .await
        .map_err(|e| e.to_string());
        drop(client);
        let _ = conn_task.await;
        let n = users.users.len();
        self.shared.replace_users(Arc::new(users), pools?);
        self.metrics.add_pools(pool_labels(&self.shared));
        Ok(n)
    }
}
