//! API-key masking and bounded excerpts for every text that may reach an error message.

/// Longest body excerpt (in characters) kept in an error message.
pub const MAX_EXCERPT_CHARS: usize = 512;

/// Key prefixes recognised in free text, with the minimum length of the secret part after the
/// prefix (short enough to catch truncated keys, long enough to spare ordinary words).
const KEY_PREFIXES: &[(&str, usize)] = &[("sk-", 8), ("AIza", 12)];

/// Masks key-like strings (`sk-...`, `sk-ant-...`, `sk-proj-...`, `AIza...`, `Bearer <token>`).
pub fn mask_api_keys(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        let at_boundary = i == 0 || !is_key_char(bytes[i - 1]);
        if at_boundary && let Some(end) = key_end(bytes, i) {
            out.push_str(&text[copied..i]);
            out.push_str(masked_form(&text[i..end]));
            i = end;
            copied = end;
            continue;
        }
        i += 1;
    }
    out.push_str(&text[copied..]);
    out
}

/// Shortest part of the configured key masked where text was cut before it reached us: text
/// that ends with the key's start or begins with its end (a body read up to a byte limit).
const MIN_PARTIAL_KEY: usize = 4;

/// Masks `secret` wherever it appears (and its start or end where the text was cut inside it),
/// then every key-like string.
pub fn mask_secret(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(key) if key.len() >= MIN_PARTIAL_KEY => mask_api_keys(&mask_key_value(text, key)),
        Some(_) | None => mask_api_keys(text),
    }
}

/// The masked, bounded excerpt of `text` that may travel in an error: the key is masked
/// before the cut, so a cut inside the key cannot leave a piece too short to recognise.
pub fn masked_excerpt(text: &str, secret: Option<&str>) -> String {
    excerpt(&mask_secret(text, secret))
}

fn mask_key_value(text: &str, key: &str) -> String {
    let mut masked = text.replace(key, "[REDACTED]");
    let longest = key.len().saturating_sub(1).min(masked.len());
    // The text's last bytes may be the key's first ones, and its first bytes the key's last.
    if let Some(len) = (MIN_PARTIAL_KEY..=longest).rev().find(|len| {
        masked.is_char_boundary(masked.len() - len)
            && key.is_char_boundary(*len)
            && masked.ends_with(&key[..*len])
    }) {
        masked.truncate(masked.len() - len);
        masked.push_str("[REDACTED]");
    }
    let longest = key.len().saturating_sub(1).min(masked.len());
    if let Some(len) = (MIN_PARTIAL_KEY..=longest).rev().find(|len| {
        masked.is_char_boundary(*len)
            && key.is_char_boundary(key.len() - len)
            && masked.starts_with(&key[key.len() - len..])
    }) {
        masked.replace_range(..len, "[REDACTED]");
    }
    masked
}

/// At most [`MAX_EXCERPT_CHARS`] characters of `text`, marked when cut. Text that may hold a
/// key goes through [`masked_excerpt`] instead.
pub fn excerpt(text: &str) -> String {
    let trimmed = text.trim();
    match trimmed.char_indices().nth(MAX_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}...", &trimmed[..cut]),
        None => trimmed.to_owned(),
    }
}

fn is_key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

fn key_end(bytes: &[u8], start: usize) -> Option<usize> {
    let rest = &bytes[start..];
    for (prefix, min_len) in KEY_PREFIXES {
        if rest.starts_with(prefix.as_bytes()) {
            let tail = rest[prefix.len()..]
                .iter()
                .take_while(|b| is_key_char(**b))
                .count();
            if tail >= *min_len {
                return Some(start + prefix.len() + tail);
            }
        }
    }
    if rest.len() > 7 && rest[..7].eq_ignore_ascii_case(b"bearer ") {
        let tail = rest[7..]
            .iter()
            .take_while(|b| is_key_char(**b) || **b == b'.')
            .count();
        if tail >= 8 {
            return Some(start + 7 + tail);
        }
    }
    None
}

fn masked_form(key: &str) -> &'static str {
    if key.starts_with("sk-ant-") {
        "sk-ant-***"
    } else if key.starts_with("sk-") {
        "sk-***"
    } else if key.starts_with("AIza") {
        "AIza***"
    } else {
        "Bearer ***"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_known_shapes() {
        let text = "bad key sk-proj-abcdefghijklmnop and sk-ant-api03-XYZxyz123456, \
                    AIzaSyA1234567890abcdefgh; Authorization: Bearer tok.abc.def12345";
        let masked = mask_api_keys(text);
        assert!(!masked.contains("abcdefghijklmnop"));
        assert!(!masked.contains("XYZxyz123456"));
        assert!(!masked.contains("SyA1234567890"));
        assert!(!masked.contains("tok.abc.def12345"));
        assert!(masked.contains("sk-ant-***"));
        assert!(masked.contains("sk-***"));
        assert!(masked.contains("AIza***"));
    }

    #[test]
    fn spares_ordinary_words() {
        assert_eq!(
            mask_api_keys("task-list desk-top sk-short"),
            "task-list desk-top sk-short"
        );
    }

    #[test]
    fn masks_configured_secret_of_any_shape() {
        let masked = mask_secret("echo: local-secret-42!", Some("local-secret-42"));
        assert_eq!(masked, "echo: [REDACTED]!");
    }

    #[test]
    fn masks_the_configured_key_where_a_cut_left_only_its_start_or_end() {
        let key = "qwertyuiop0123456789";
        assert_eq!(
            mask_secret("body ends inside qwertyuiop01", Some(key)),
            "body ends inside [REDACTED]"
        );
        assert_eq!(
            mask_secret("56789 starts the body", Some(key)),
            "[REDACTED] starts the body"
        );
        assert_eq!(
            mask_secret("qwer is too short to tell", Some(key)),
            "qwer is too short to tell"
        );
    }

    #[test]
    fn masked_excerpt_masks_before_it_cuts() {
        let key = "Zq7".repeat(100);
        let text = format!("{}{key} and more", "x".repeat(MAX_EXCERPT_CHARS - 20));
        let cut = masked_excerpt(&text, Some(&key));
        assert!(!cut.contains("Zq7Zq7Zq"), "{cut}");
        assert!(cut.contains("[REDACTED]"));
    }

    #[test]
    fn excerpt_is_bounded_on_char_boundaries() {
        let long = "é".repeat(MAX_EXCERPT_CHARS * 2);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), MAX_EXCERPT_CHARS + 3);
    }
}
