//! SCRAM-SHA-256 on the server side (RFC 5802 / 7677, as PostgreSQL speaks
//! it: no channel binding, the user name taken from the startup packet).
//!
//! An unknown user goes through the same exchange against a made-up
//! verifier (salt derived from the name, so it is stable across attempts)
//! and fails at the same step with the same error, so neither the answer
//! nor its timing tells whether the user exists.

use crate::crypto::{hmac, sha256};
use crate::users::{Verifier, SCRAM_ITERATIONS};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

pub const MECHANISM: &str = "SCRAM-SHA-256";

/// The server's state between the client's first and final messages.
pub struct Exchange {
    verifier: Verifier,
    /// Whether the verifier is real (a known user).
    known: bool,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

/// Why an exchange failed: the client always sees 28P01.
#[derive(Debug, PartialEq, Eq)]
pub struct Failed(pub &'static str);

/// A verifier that matches no password, for a user that does not exist.
pub fn decoy_verifier(user: &str, secret: &[u8]) -> Verifier {
    let salt = hmac(secret, user.as_bytes())[..16].to_vec();
    Verifier {
        iterations: SCRAM_ITERATIONS,
        salt,
        stored_key: hmac(secret, b"decoy stored key"),
        server_key: hmac(secret, b"decoy server key"),
    }
}

impl Exchange {
    /// Takes the client-first-message; returns the state and the
    /// server-first-message.
    pub fn start(
        verifier: Option<Verifier>,
        decoy: Verifier,
        client_first: &str,
    ) -> Result<(Exchange, String), Failed> {
        // gs2 header: "n,," (no channel binding) or "y,," (client supports
        // it, server does not offer it); "p=" would demand binding.
        let bare = client_first
            .strip_prefix("n,,")
            .or_else(|| client_first.strip_prefix("y,,"))
            .ok_or(Failed("unsupported SCRAM channel binding"))?;
        let client_nonce = bare
            .split(',')
            .find_map(|attr| attr.strip_prefix("r="))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b','))
            .ok_or(Failed("malformed SCRAM client-first-message"))?;
        let server_nonce: String =
            B64.encode((0..18).map(|_| rand::random::<u8>()).collect::<Vec<u8>>());
        let nonce = format!("{client_nonce}{server_nonce}");
        let known = verifier.is_some();
        let verifier = verifier.unwrap_or(decoy);
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&verifier.salt),
            verifier.iterations
        );
        Ok((
            Exchange {
                verifier,
                known,
                client_first_bare: bare.to_string(),
                server_first: server_first.clone(),
                nonce,
            },
            server_first,
        ))
    }

    /// Checks the client-final-message; returns the server-final-message.
    pub fn finish(self, client_final: &str) -> Result<String, Failed> {
        let (without_proof, proof) = client_final
            .rsplit_once(",p=")
            .ok_or(Failed("malformed SCRAM client-final-message"))?;
        let mut channel_ok = false;
        let mut nonce_ok = false;
        for attr in without_proof.split(',') {
            if let Some(c) = attr.strip_prefix("c=") {
                // base64 of the gs2 header: "n,," or "y,,".
                channel_ok = c == "biws" || c == "eSws";
            } else if let Some(r) = attr.strip_prefix("r=") {
                nonce_ok = r == self.nonce;
            }
        }
        if !channel_ok || !nonce_ok {
            return Err(Failed("SCRAM nonce or channel binding mismatch"));
        }
        let proof: [u8; 32] = B64
            .decode(proof)
            .ok()
            .and_then(|p| p.try_into().ok())
            .ok_or(Failed("malformed SCRAM proof"))?;
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let client_signature = hmac(&self.verifier.stored_key, auth_message.as_bytes());
        let mut client_key = proof;
        client_key
            .iter_mut()
            .zip(client_signature.iter())
            .for_each(|(k, s)| *k ^= s);
        let matches = sha256(&client_key)
            .iter()
            .zip(self.verifier.stored_key.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
        if !matches || !self.known {
            return Err(Failed("password does not match"));
        }
        let server_signature = hmac(&self.verifier.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};

    fn run(password_on_file: Option<&str>, password_given: &str) -> Result<(), Failed> {
        let verifier = password_on_file.map(Verifier::new);
        let decoy = decoy_verifier("someone", b"secret");
        let mut client = ScramSha256::new(password_given.as_bytes(), ChannelBinding::unsupported());
        let first = String::from_utf8(client.message().to_vec()).unwrap();
        let (exchange, server_first) = Exchange::start(verifier, decoy, &first)?;
        client.update(server_first.as_bytes()).unwrap();
        let fin = String::from_utf8(client.message().to_vec()).unwrap();
        let server_final = exchange.finish(&fin)?;
        client
            .finish(server_final.as_bytes())
            .map_err(|_| Failed("client rejected the server"))
    }

    #[test]
    fn a_real_client_logs_in_with_the_right_password_only() {
        assert_eq!(run(Some("s3cret"), "s3cret"), Ok(()));
        assert!(run(Some("s3cret"), "wrong").is_err());
        // An unknown user fails the same way, even with a "right" password.
        assert!(run(None, "s3cret").is_err());
    }

    #[test]
    fn malformed_messages_fail_cleanly() {
        let decoy = decoy_verifier("x", b"k");
        assert!(Exchange::start(None, decoy.clone(), "p=tls-server-end-point,,n=,r=abc").is_err());
        assert!(Exchange::start(None, decoy.clone(), "n,,n=").is_err());
        let (ex, _) = Exchange::start(None, decoy, "n,,n=,r=abc").unwrap();
        assert!(ex.finish("garbage").is_err());
    }
}
