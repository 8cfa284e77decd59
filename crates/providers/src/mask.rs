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

/// Masks `secret` wherever it appears, then every key-like string.
pub fn mask_secret(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(key) if key.len() >= 4 && text.contains(key) => {
            mask_api_keys(&text.replace(key, "[REDACTED]"))
        }
        Some(_) | None => mask_api_keys(text),
    }
}

/// At most [`MAX_EXCERPT_CHARS`] characters of `text`, marked when cut.
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
    fn excerpt_is_bounded_on_char_boundaries() {
        let long = "é".repeat(MAX_EXCERPT_CHARS * 2);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), MAX_EXCERPT_CHARS + 3);
    }
}
