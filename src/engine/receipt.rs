//! Receipts: the opaque text POP returns and ACK/RENEW take back.
//!
//! A receipt names (partition, offset, group, lease token) and carries an
//! HMAC-SHA256 tag (truncated to 128 bits) under a secret that every
//! queenwire on the database shares (`queen.receipt_secret_v1`), so a
//! receipt works from any connection and any proxy, and an altered or
//! forged one is refused before it reaches PostgreSQL.
//!
//! ```text
//! receipt := base64url-nopad( version:u8 partition_id:i64 offset:i64
//!                             lease_token:[u8;16] group:utf8 tag:[u8;16] )
//! ```
//! The version byte also says which consumer model leased the message:
//! 1 an ordered group (the lease is the partition's), 2 a shared group
//! (the lease is the message's own), so ACK and RENEW call the procedures
//! of that model without asking the database which one the group is.
//! Tenancy is not in the receipt: the ack procedures only act on partitions
//! of the caller's tenant, so another tenant's receipt is `stale`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::hmac;

const VERSION: u8 = 1;
/// The version byte of a shared group's receipt.
const SHARED_VERSION: u8 = 2;
const TAG_LEN: usize = 16;
const FIXED_LEN: usize = 1 + 8 + 8 + 16;
/// Longest receipt text accepted (a group name is at most 255 bytes).
const MAX_RECEIPT_LEN: usize = 512;
/// The most signed-and-tagged bytes a receipt is encoded from on the stack
/// (a group name of up to 255 bytes fits).
const MAX_RAW_LEN: usize = 384;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub partition_id: i64,
    pub offset: i64,
    pub lease_token: uuid::Uuid,
    pub group: String,
    /// Leased by a shared group (per message), not an ordered one.
    pub shared: bool,
}

/// The receipt secret, keyed into HMAC-SHA256 once (`hmac::Key` holds the
/// inner and outer states): each tag starts from them instead of hashing
/// the key again (two SHA-256 blocks of the
/// four or five a tag took; measured 2026-12-01, popack100: SHA-256 was
/// 9.5 % of queenwire's CPU).
#[derive(Clone)]
pub struct ReceiptKey {
    keyed: hmac::Key,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid receipt")]
pub struct InvalidReceipt;

impl ReceiptKey {
    pub fn new(secret: Vec<u8>) -> ReceiptKey {
        ReceiptKey {
            keyed: hmac::Key::new(hmac::HMAC_SHA256, &secret),
        }
    }

    fn tag(&self, data: &[u8]) -> [u8; TAG_LEN] {
        let full = hmac::sign(&self.keyed, data);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&full.as_ref()[..TAG_LEN]);
        tag
    }

    pub fn encode(&self, r: &Receipt) -> String {
        self.encode_parts(r.partition_id, r.offset, r.lease_token, &r.group, r.shared)
    }

    /// [`Self::encode`] of a receipt's parts, the group borrowed (POP makes
    /// one per message): the signed bytes on the stack, one allocation.
    pub fn encode_parts(
        &self,
        partition_id: i64,
        offset: i64,
        lease_token: uuid::Uuid,
        group: &str,
        shared: bool,
    ) -> String {
        let group = group.as_bytes();
        let end = FIXED_LEN + group.len();
        // On the stack for any group name the dialect accepts (255 bytes);
        // a longer one is laid out the same way on the heap.
        let mut stack = [0u8; MAX_RAW_LEN];
        let mut heap = Vec::new();
        let buf: &mut [u8] = if end + TAG_LEN <= MAX_RAW_LEN {
            &mut stack[..end + TAG_LEN]
        } else {
            heap.resize(end + TAG_LEN, 0);
            &mut heap
        };
        buf[0] = if shared { SHARED_VERSION } else { VERSION };
        buf[1..9].copy_from_slice(&partition_id.to_be_bytes());
        buf[9..17].copy_from_slice(&offset.to_be_bytes());
        buf[17..FIXED_LEN].copy_from_slice(lease_token.as_bytes());
        buf[FIXED_LEN..end].copy_from_slice(group);
        let tag = self.tag(&buf[..end]);
        buf[end..].copy_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(buf)
    }

    pub fn decode(&self, text: &str) -> Result<Receipt, InvalidReceipt> {
        if text.len() > MAX_RECEIPT_LEN {
            return Err(InvalidReceipt);
        }
        let data = URL_SAFE_NO_PAD
            .decode(text.trim())
            .map_err(|_| InvalidReceipt)?;
        if data.len() < FIXED_LEN + TAG_LEN || (data[0] != VERSION && data[0] != SHARED_VERSION) {
            return Err(InvalidReceipt);
        }
        let (signed, tag) = data.split_at(data.len() - TAG_LEN);
        let expected = self.tag(signed);
        // Constant-time comparison.
        if expected
            .iter()
            .zip(tag)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            != 0
        {
            return Err(InvalidReceipt);
        }
        let i64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&signed[at..at + 8]);
            i64::from_be_bytes(b)
        };
        let mut token = [0u8; 16];
        token.copy_from_slice(&signed[17..33]);
        let group = std::str::from_utf8(&signed[FIXED_LEN..]).map_err(|_| InvalidReceipt)?;
        Ok(Receipt {
            partition_id: i64_at(1),
            offset: i64_at(9),
            lease_token: uuid::Uuid::from_bytes(token),
            group: group.to_string(),
            shared: data[0] == SHARED_VERSION,
        })
    }
}

/// The part of a receipt's text that names its partition: 12 base64
/// characters, the version byte and the partition id. Receipts of one
/// partition share it, so runs of them are told apart without decoding.
pub fn partition_head(text: &str) -> Option<&str> {
    text.trim().get(..12)
}

/// The partition a receipt names, read without checking its tag: only as
/// a hint (counting, on a receipt that POP just made or ACK just accepted;
/// telling an ephemeral queue's receipt apart, where the path it picks
/// checks the tag).
pub fn partition_of(text: &str) -> Option<i64> {
    let head = URL_SAFE_NO_PAD.decode(partition_head(text)?).ok()?;
    if !matches!(head.first(), Some(&(VERSION | SHARED_VERSION))) {
        return None;
    }
    Some(i64::from_be_bytes(head.get(1..9)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Receipt {
        Receipt {
            partition_id: 42,
            offset: 7,
            lease_token: uuid::Uuid::now_v7(),
            group: "billing".into(),
            shared: false,
        }
    }

    #[test]
    fn round_trips() {
        let key = ReceiptKey::new(b"secret".to_vec());
        let r = sample();
        assert_eq!(key.decode(&key.encode(&r)), Ok(r));
    }

    /// The stack and the heap encodings are one encoding: a group name as
    /// long as the stack buffer holds, and one longer, round-trip and
    /// equal the heap-built text.
    #[test]
    fn receipts_of_any_group_length_round_trip() {
        let key = ReceiptKey::new(b"secret".to_vec());
        let fits = MAX_RAW_LEN - FIXED_LEN - TAG_LEN;
        for len in [0, 1, 255, fits, fits + 1, 400] {
            let r = Receipt {
                group: "g".repeat(len),
                ..sample()
            };
            let text = key.encode(&r);
            let mut raw = vec![VERSION];
            raw.extend_from_slice(&r.partition_id.to_be_bytes());
            raw.extend_from_slice(&r.offset.to_be_bytes());
            raw.extend_from_slice(r.lease_token.as_bytes());
            raw.extend_from_slice(r.group.as_bytes());
            let tag = key.tag(&raw);
            raw.extend_from_slice(&tag);
            assert_eq!(text, URL_SAFE_NO_PAD.encode(&raw), "group of {len}");
            if text.len() <= MAX_RECEIPT_LEN {
                assert_eq!(key.decode(&text), Ok(r), "group of {len}");
            }
        }
    }

    #[test]
    fn a_shared_receipt_says_so_and_is_signed_as_one() {
        let key = ReceiptKey::new(b"secret".to_vec());
        let shared = Receipt {
            shared: true,
            ..sample()
        };
        let text = key.encode(&shared);
        assert_eq!(key.decode(&text), Ok(shared));
        assert_eq!(partition_of(&text), Some(42));
        assert_ne!(text, key.encode(&sample()));
    }

    /// The text of a receipt is fixed by its format: proxies of different
    /// builds share one database, so each must accept the other's receipts.
    #[test]
    fn a_receipt_text_is_the_same_in_every_build() {
        let key = ReceiptKey::new(b"receipt secret".to_vec());
        let r = Receipt {
            partition_id: 42,
            offset: 7,
            lease_token: uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
            group: "billing".into(),
            shared: false,
        };
        assert_eq!(
            key.encode(&r),
            "AQAAAAAAAAAqAAAAAAAAAAcBI0VniavN7wEjRWeJq83vYmlsbGluZxGPvD7RX-nNRWfJnKKOjNw"
        );
        let shared = Receipt { shared: true, ..r };
        assert_eq!(
            key.encode(&shared),
            "AgAAAAAAAAAqAAAAAAAAAAcBI0VniavN7wEjRWeJq83vYmlsbGluZ3pkUHbhWUzRP9btY8sHIKM"
        );
    }

    #[test]
    fn the_partition_is_read_without_the_key() {
        let key = ReceiptKey::new(b"secret".to_vec());
        assert_eq!(partition_of(&key.encode(&sample())), Some(42));
        assert_eq!(partition_of("short"), None);
        assert_eq!(partition_of("////////////////"), None);
    }

    #[test]
    fn altered_forged_and_foreign_receipts_are_refused() {
        let key = ReceiptKey::new(b"secret".to_vec());
        let text = key.encode(&sample());
        // Flip one character.
        let mut altered: Vec<char> = text.chars().collect();
        altered[5] = if altered[5] == 'A' { 'B' } else { 'A' };
        let altered: String = altered.into_iter().collect();
        assert_eq!(key.decode(&altered), Err(InvalidReceipt));
        // Signed with another secret.
        let other = ReceiptKey::new(b"other".to_vec());
        assert_eq!(key.decode(&other.encode(&sample())), Err(InvalidReceipt));
        for junk in [
            "",
            "x",
            "!!!!",
            &"A".repeat(600),
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ] {
            assert_eq!(key.decode(junk), Err(InvalidReceipt), "{junk}");
        }
    }
}
