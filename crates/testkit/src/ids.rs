//! Random identifiers and opaque signatures in each API's style.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static FALLBACK: AtomicU64 = AtomicU64::new(0);

fn random_bytes(count: usize) -> Vec<u8> {
    let mut bytes = vec![0; count];
    if getrandom::fill(&mut bytes).is_err() {
        // Uniqueness, not secrecy, is what matters here: mix a counter with the clock.
        let mut state = FALLBACK.fetch_add(1, Ordering::Relaxed) ^ now_nanos();
        for byte in &mut bytes {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *byte = (state >> 56) as u8;
        }
    }
    bytes
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Seconds since the epoch, for `created` fields.
pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `prefix` followed by 24 random hex digits.
pub(crate) fn id(prefix: &str) -> String {
    let mut out = String::from(prefix);
    for byte in random_bytes(12) {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// An opaque base64 token; padding and `+`/`/` make byte-exact echo checks meaningful.
pub(crate) fn signature(prefix: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = random_bytes(97);
    let mut out = String::from(prefix);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let symbols = chunk.len() + 1;
        for position in 0..4 {
            if position < symbols {
                out.push(ALPHABET[(n >> (18 - 6 * position)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
