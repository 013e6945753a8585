//! The hash functions queenwire computes itself: HMAC-SHA-256, SHA-256 and
//! SCRAM's salted password, shared by the users file (verifiers), the SCRAM
//! exchange with clients and the wake-up digests. All through ring, the one
//! crypto library (tokio-rustls builds it anyway).

use std::num::NonZeroU32;

use ring::{digest, hmac, pbkdf2};

pub fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data);
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

pub fn sha256(data: &[u8]) -> [u8; 32] {
    let hash = digest::digest(&digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(hash.as_ref());
    out
}

/// PBKDF2-HMAC-SHA256 with one output block: SCRAM's Hi(). Zero iterations
/// count as one (Hi() is undefined for zero; the users file refuses it).
pub fn salted_password(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let iterations = NonZeroU32::new(iterations).unwrap_or(NonZeroU32::MIN);
    let mut out = [0u8; 32];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        salt,
        password,
        &mut out,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        assert_eq!(
            hex(&hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn sha256_matches_fips_180_2() {
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn salted_password_is_pbkdf2_hmac_sha256() {
        assert_eq!(
            hex(&salted_password(b"password", b"salt", 1)),
            "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b"
        );
        assert_eq!(
            hex(&salted_password(b"password", b"salt", 4096)),
            "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a"
        );
    }
}
