//! The server's TLS certificate and key, loaded from PEM files (at start
//! and on SIGHUP).

use std::path::PathBuf;

/// PEM files of the server certificate (chain) and its private key.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The TLS acceptor of `files`; the error names the file and what is wrong.
pub fn tls_acceptor(files: &TlsFiles) -> Result<tokio_rustls::TlsAcceptor, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls;
    let bad = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| bad(&files.cert.display().to_string(), &e))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(&files.cert.display().to_string(), &e))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", files.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| bad(&files.key.display().to_string(), &e))?;
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| bad("TLS versions", &e))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| bad("certificate and key", &e))?;
    Ok(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))
}
