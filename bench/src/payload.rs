//! The message every system gets: a 200-byte JSON object. Messages differ
//! (sequence number, ids, a pseudo-random note) so that no system is
//! flattered by compressing 100 copies of one string; the same generator
//! feeds every system.

pub const PAYLOAD_BYTES: usize = 200;

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The payload of message `seq`: exactly [`PAYLOAD_BYTES`] bytes of JSON.
pub fn payload(seq: u64) -> String {
    payload_with(seq, ":")
}

/// Message `seq` as the pgbench scripts carry it (bench/pgbench/): a space
/// after each colon, so that pgbench reads no `:name` variable in it, and
/// its note shorter by the spaces, so it is [`PAYLOAD_BYTES`] bytes too.
/// The scripts are files a reader can copy; a test checks them against it.
#[cfg(test)]
pub fn payload_spaced(seq: u64) -> String {
    payload_with(seq, ": ")
}

fn payload_with(seq: u64, colon: &str) -> String {
    let r = splitmix64(seq);
    let r2 = splitmix64(r);
    let head = format!(
        "{{\"seq\"{colon}\"{seq:010}\",\"event\"{colon}\"order.created\",\"customer\"{colon}\"cus_{:012x}\",\"sku\"{colon}\"SKU-{:08}\",\"qty\"{colon}{},\"amount_cents\"{colon}{},\"currency\"{colon}\"EUR\",\"note\"{colon}\"",
        r & 0xFFFF_FFFF_FFFF,
        (r >> 20) % 100_000_000,
        1 + (r2 % 9),
        (r2 >> 8) % 10_000_000,
    );
    let mut s = String::with_capacity(PAYLOAD_BYTES);
    s.push_str(&head);
    let fill = PAYLOAD_BYTES - head.len() - 2;
    let mut x = r2;
    const WORDS: [&str; 16] = [
        "gift", "wrap", "leave", "at", "door", "ring", "bell", "fragile", "express", "call",
        "before", "delivery", "office", "back", "side", "entrance",
    ];
    while s.len() < head.len() + fill {
        x = splitmix64(x);
        let w = WORDS[(x % 16) as usize];
        let room = head.len() + fill - s.len();
        if s.len() > head.len() && room > 1 {
            s.push(' ');
        }
        let room = head.len() + fill - s.len();
        s.push_str(&w[..w.len().min(room)]);
    }
    s.push_str("\"}");
    debug_assert_eq!(s.len(), PAYLOAD_BYTES);
    s
}

/// The sequence number inside a payload this module made, also after a
/// round trip through `jsonb` (which reorders keys and adds spaces).
pub fn seq_of(json: &str) -> Option<u64> {
    let at = json.find("\"seq\":")? + 6;
    let rest = json[at..].trim_start().strip_prefix('"')?;
    rest.get(..10)?.parse().ok()
}

/// A pool of distinct payloads shared by the throughput workloads.
pub struct Payloads(Vec<String>);

impl Payloads {
    pub fn new(n: usize) -> Payloads {
        Payloads((0..n as u64).map(payload).collect())
    }

    pub fn get(&self, i: usize) -> &str {
        &self.0[i % self.0.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_200_bytes_and_carry_their_seq() {
        for seq in [0, 1, 99, 123_456, 9_999_999_999] {
            for p in [payload(seq), payload_spaced(seq)] {
                assert_eq!(p.len(), PAYLOAD_BYTES, "{p}");
                assert_eq!(seq_of(&p), Some(seq));
                assert!(p.starts_with('{') && p.ends_with("\"}"));
            }
        }
        assert_ne!(payload(1), payload(2));
        assert_eq!(
            seq_of("{\"qty\": 3, \"seq\": \"0000000042\", \"sku\": \"x\"}"),
            Some(42)
        );
        // Valid JSON numbers: no leading zeros.
        for seq in 0..2000 {
            let p = payload(seq);
            assert!(!p.contains(":0"), "{p}");
        }
    }
}
