//! Payload encryption at rest: the keys of `--encryption-key-file`, the
//! sealing of a compressed segment (AES-256-GCM, `ring::aead`) and which
//! queues this process has learnt need it.
//!
//! The key file holds one key a line, `key_id hex`, with `#` comments and
//! blank lines ignored:
//!
//! ```text
//! # the first key is current: new segments are sealed with it
//! 2026-12 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//! 2026-06 60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752
//! ```
//!
//! A key id is 1–32 bytes of `A-Z a-z 0-9 _ . : -`; the key is 32 bytes
//! written as 64 hex digits. The first key is the current one; every key
//! listed opens what it sealed, so rotation is: put the new key first, keep
//! the old ones below it until no segment sealed with them is retained.
//! The file must not be readable by group or others (like an ssh key).
//!
//! Which queue needs sealing is the queue's `encryption_enabled`, which
//! `log_push_v1` checks against every blob's version byte: a push framed
//! the wrong way writes nothing and answers `encrypt` (or `plain`), and the
//! writer learns it here and frames the push again. So the database, not a
//! cache, decides that an encrypted queue never stores plaintext.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use uuid::Uuid;

/// The blob version of a sealed segment (`frame.rs` has the layout).
pub const SEALED_VERSION: u8 = 2;
pub const TAG_LEN: usize = 16;
const MAX_KEY_ID: usize = 32;

/// Why a segment could not be sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("no encryption key is configured (--encryption-key-file)")]
    NoKey,
    #[error(
        "the segment is encrypted with key \"{0}\", which is not in this queenwire's key file"
    )]
    UnknownKey(String),
    #[error("the encrypted segment does not authenticate (altered, truncated or sealed with another key of the same id)")]
    Unauthentic,
    #[error("the encrypted segment's header is malformed")]
    Malformed,
    #[error("the system random number generator failed")]
    Random,
}

/// The keys of one reading of the key file.
#[derive(Default)]
pub struct KeyRing {
    current: Option<String>,
    keys: HashMap<String, LessSafeKey>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key material.
        f.debug_struct("KeyRing")
            .field("current", &self.current)
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl KeyRing {
    /// Parses the key file's text.
    pub fn parse(text: &str) -> Result<KeyRing, String> {
        let mut ring = KeyRing::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |what: String| format!("line {}: {what}", n + 1);
            let mut words = line.split_whitespace();
            let (Some(id), Some(hex), None) = (words.next(), words.next(), words.next()) else {
                return Err(at("expected `key_id hex-key`".into()));
            };
            if id.len() > MAX_KEY_ID
                || !id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
            {
                return Err(at(format!(
                    "key id must be 1-{MAX_KEY_ID} bytes of A-Z a-z 0-9 _ . : -"
                )));
            }
            let bytes = decode_hex(hex).ok_or_else(|| at("key must be 64 hex digits".into()))?;
            let key = UnboundKey::new(&AES_256_GCM, &bytes)
                .map_err(|_| at("key must be 32 bytes".into()))?;
            if ring
                .keys
                .insert(id.to_string(), LessSafeKey::new(key))
                .is_some()
            {
                return Err(at(format!("key id \"{id}\" appears twice")));
            }
            ring.current.get_or_insert_with(|| id.to_string());
        }
        Ok(ring)
    }

    /// Reads and parses the key file; refuses one others may read.
    pub fn load(path: &Path) -> Result<KeyRing, String> {
        let fail = |e: String| format!("encryption key file {}: {e}", path.display());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path)
                .map_err(|e| fail(e.to_string()))?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                return Err(fail(format!(
                    "readable by group or others (mode {:o}); chmod 600 it",
                    mode & 0o777
                )));
            }
        }
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let ring = KeyRing::parse(&text).map_err(fail)?;
        if ring.keys.is_empty() {
            return Err(fail("no keys".into()));
        }
        Ok(ring)
    }

    pub fn current(&self) -> Option<&str> {
        self.current.as_deref()
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// `SEALED_VERSION key_id_len key_id nonce ciphertext tag`, the header
    /// (version, length, id) authenticated as associated data.
    pub fn seal(&self, compressed: &[u8]) -> Result<Vec<u8>, SealError> {
        let id = self.current.as_deref().ok_or(SealError::NoKey)?;
        let key = self.keys.get(id).ok_or(SealError::NoKey)?;
        let mut nonce = [0u8; NONCE_LEN];
        // Random 96-bit nonces from the system RNG: one per segment, so
        // the birthday bound (2^32 segments per key) is the rotation limit.
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        let header_len = 2 + id.len();
        let mut blob = Vec::with_capacity(header_len + NONCE_LEN + compressed.len() + TAG_LEN);
        blob.push(SEALED_VERSION);
        blob.push(id.len() as u8);
        blob.extend_from_slice(id.as_bytes());
        blob.extend_from_slice(&nonce);
        let mut body = compressed.to_vec();
        let tag = key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&blob[..header_len]),
                &mut body,
            )
            .map_err(|_| SealError::Malformed)?;
        blob.extend_from_slice(&body);
        blob.extend_from_slice(tag.as_ref());
        Ok(blob)
    }

    /// The compressed frames of a sealed blob (version byte included).
    pub fn open(&self, blob: &[u8]) -> Result<Vec<u8>, SealError> {
        let (&id_len, rest) = blob
            .get(1..)
            .and_then(<[u8]>::split_first)
            .ok_or(SealError::Malformed)?;
        let id_len = id_len as usize;
        if rest.len() < id_len + NONCE_LEN + TAG_LEN {
            return Err(SealError::Malformed);
        }
        let (id, rest) = rest.split_at(id_len);
        let id = std::str::from_utf8(id).map_err(|_| SealError::Malformed)?;
        let key = self
            .keys
            .get(id)
            .ok_or_else(|| SealError::UnknownKey(id.to_string()))?;
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Malformed)?;
        let mut body = sealed.to_vec();
        let plain = key
            .open_in_place(nonce, Aad::from(&blob[..2 + id_len]), &mut body)
            .map_err(|_| SealError::Unauthentic)?;
        let n = plain.len();
        body.truncate(n);
        Ok(body)
    }
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
}

/// What every writer and reader of segments shares: the current key ring
/// (replaced whole on reload) and the queues known to need sealing.
#[derive(Debug, Default)]
pub struct Sealing {
    path: Option<PathBuf>,
    keys: RwLock<Arc<KeyRing>>,
    /// (tenant, queue) whose `encryption_enabled` was last seen true. A
    /// guess that `log_push_v1` corrects; it only saves a round.
    encrypted: Mutex<HashSet<(Uuid, String)>>,
}

impl Sealing {
    /// Reads the key file, if one is given.
    pub fn load(path: Option<PathBuf>) -> Result<Sealing, String> {
        let ring = match &path {
            Some(p) => KeyRing::load(p)?,
            None => KeyRing::default(),
        };
        Ok(Sealing {
            path,
            keys: RwLock::new(Arc::new(ring)),
            encrypted: Mutex::default(),
        })
    }

    /// Reads the key file again (SIGHUP), if there is one. A file that does
    /// not load leaves the old keys in place (and says so in the log).
    pub fn reload(&self) -> Result<(), String> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        match KeyRing::load(path) {
            Ok(ring) => {
                let (n, current) = (ring.len(), ring.current.clone());
                *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(ring);
                tracing::info!(keys = n, current = ?current, file = %path.display(), "encryption keys reloaded");
                Ok(())
            }
            Err(e) => {
                tracing::error!("encryption keys not reloaded, the old ones stay: {e}");
                Err(e)
            }
        }
    }

    /// The key ring as it stands now.
    pub fn keys(&self) -> Arc<KeyRing> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn is_encrypted(&self, tenant: Uuid, queue: &str) -> bool {
        let set = self.encrypted.lock().unwrap_or_else(|p| p.into_inner());
        // No encrypted queue known (the usual case): no key to build.
        !set.is_empty() && set.contains(&(tenant, queue.to_string()))
    }

    /// What `log_push_v1` said the queue needs.
    pub fn learn(&self, tenant: Uuid, queue: &str, encrypted: bool) {
        let mut set = self.encrypted.lock().unwrap_or_else(|p| p.into_inner());
        if encrypted {
            set.insert((tenant, queue.to_string()));
        } else {
            set.remove(&(tenant, queue.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "a1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const B: &str = "b2 ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

    #[test]
    fn the_first_key_is_current_and_every_key_opens_its_own() {
        let old = KeyRing::parse(A).unwrap();
        let sealed_a = old.seal(b"compressed frames").unwrap();
        let both = KeyRing::parse(&format!("# rotated\n{B}\n\n{A}\n")).unwrap();
        assert_eq!(both.current(), Some("b2"));
        let sealed_b = both.seal(b"newer").unwrap();
        assert_eq!(both.open(&sealed_a).unwrap(), b"compressed frames");
        assert_eq!(both.open(&sealed_b).unwrap(), b"newer");
        assert_eq!(old.open(&sealed_b), Err(SealError::UnknownKey("b2".into())));
        // Two seals of the same bytes differ (a fresh nonce each).
        assert_ne!(old.seal(b"x").unwrap(), old.seal(b"x").unwrap());
    }

    #[test]
    fn altered_or_truncated_ciphertext_is_an_error() {
        let ring = KeyRing::parse(A).unwrap();
        let sealed = ring.seal(b"some compressed bytes").unwrap();
        for i in 1..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x40;
            assert!(ring.open(&bad).is_err(), "byte {i}");
        }
        for n in 0..sealed.len() {
            assert!(ring.open(&sealed[..n]).is_err(), "length {n}");
        }
        // The same id with other key material does not authenticate.
        let other = KeyRing::parse(&B.replacen("b2", "a1", 1)).unwrap();
        assert_eq!(other.open(&sealed), Err(SealError::Unauthentic));
    }

    #[test]
    fn bad_key_files_are_refused_with_the_line() {
        for (text, says) in [
            ("a1", "line 1"),
            ("a1 00", "64 hex"),
            (&format!("{A}\n{A}")[..], "twice"),
            (&format!("bad/id {}", &A[3..])[..], "key id"),
            (&format!("{A} extra")[..], "expected"),
        ] {
            let e = KeyRing::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        assert!(KeyRing::parse("# nothing\n").unwrap().is_empty());
        assert_eq!(KeyRing::default().seal(b"x"), Err(SealError::NoKey));
    }
}
