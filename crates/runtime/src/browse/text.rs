//! Turning a capped body into readable text: content-type triage, sniffing, decoding, HTML.

/// What a response body is, as far as `browse` cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentKind {
    /// HTML or XHTML: converted to readable text.
    Html,
    /// Plain text, JSON, XML, scripts, CSV...: passed through.
    Text,
    /// Images, archives, executables, PDFs...: refused.
    Binary,
    /// No usable `Content-Type`: decided by sniffing the prefix.
    Unknown,
}

/// `application/*` types that are text.
const TEXT_APPLICATION_TYPES: &[&str] = &[
    "application/json",
    "application/xml",
    "application/javascript",
    "application/x-javascript",
    "application/ecmascript",
    "application/yaml",
    "application/x-yaml",
    "application/toml",
    "application/x-ndjson",
    "application/sql",
    "application/graphql",
    "application/x-sh",
];

/// Classifies a `Content-Type` header value.
pub fn classify_content_type(value: Option<&str>) -> ContentKind {
    let Some(value) = value else {
        return ContentKind::Unknown;
    };
    let mime = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if mime.is_empty() {
        return ContentKind::Unknown;
    }
    if mime == "text/html" || mime == "application/xhtml+xml" {
        ContentKind::Html
    } else if mime.starts_with("text/")
        || TEXT_APPLICATION_TYPES.contains(&mime.as_str())
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
    {
        ContentKind::Text
    } else {
        ContentKind::Binary
    }
}

/// Decides an undeclared body from its prefix: NUL bytes or mostly invalid UTF-8 mean binary.
pub fn sniff(body: &[u8]) -> ContentKind {
    let head = &body[..body.len().min(1024)];
    if head.contains(&0) {
        return ContentKind::Binary;
    }
    let lossy = String::from_utf8_lossy(head);
    let replaced = lossy
        .chars()
        .filter(|c| *c == char::REPLACEMENT_CHARACTER)
        .count();
    if replaced * 10 > lossy.chars().count().max(1) {
        return ContentKind::Binary;
    }
    let start = lossy
        .trim_start()
        .get(..14)
        .unwrap_or_default()
        .to_ascii_lowercase();
    if start.starts_with("<!doctype html") || start.starts_with("<html") {
        ContentKind::Html
    } else {
        ContentKind::Text
    }
}

/// Decodes `body` by the charset of `content_type`: UTF-8 (default, lossy) or a single-byte
/// Latin charset. A multi-byte character cut by the cap is dropped, not shown as garbage.
pub fn decode(body: &[u8], content_type: Option<&str>) -> String {
    let charset = content_type
        .and_then(|ct| {
            ct.split(';')
                .skip(1)
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("charset"))
                .map(|(_, v)| v.trim().trim_matches('"').to_ascii_lowercase())
        })
        .unwrap_or_default();
    match charset.as_str() {
        "iso-8859-1" | "latin1" | "latin-1" | "windows-1252" | "cp1252" | "us-ascii" | "ascii" => {
            body.iter().map(|b| char::from(*b)).collect()
        }
        _ => {
            let cut = incomplete_utf8_tail(body);
            String::from_utf8_lossy(&body[..body.len() - cut]).into_owned()
        }
    }
}

/// Bytes at the end of `body` that start a UTF-8 sequence the cap cut short.
fn incomplete_utf8_tail(body: &[u8]) -> usize {
    for back in 1..=body.len().min(3) {
        let b = body[body.len() - back];
        if b & 0xC0 != 0x80 {
            // A lead byte: how long should its sequence be?
            let want = match b {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF7 => 4,
                _ => 1,
            };
            return if want > back { back } else { 0 };
        }
    }
    0
}

/// HTML to readable text; markup that the converter rejects falls back to its raw text.
pub fn html_to_text(html: &str, width: usize) -> String {
    html2text::from_read(html.as_bytes(), width).unwrap_or_else(|_| html.to_owned())
}

/// Cuts `text` to at most `max` bytes on a character boundary; reports whether it cut.
pub fn cap(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_are_triaged() {
        let cases = [
            (Some("text/html; charset=utf-8"), ContentKind::Html),
            (Some("application/xhtml+xml"), ContentKind::Html),
            (Some("TEXT/PLAIN"), ContentKind::Text),
            (Some("application/json"), ContentKind::Text),
            (Some("application/ld+json"), ContentKind::Text),
            (Some("application/rss+xml"), ContentKind::Text),
            (Some("image/png"), ContentKind::Binary),
            (Some("application/octet-stream"), ContentKind::Binary),
            (Some("application/pdf"), ContentKind::Binary),
            (Some("application/zip"), ContentKind::Binary),
            (Some(""), ContentKind::Unknown),
            (None, ContentKind::Unknown),
        ];
        for (ct, want) in cases {
            assert_eq!(classify_content_type(ct), want, "{ct:?}");
        }
    }

    #[test]
    fn sniffing_spots_binary_and_html() {
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), ContentKind::Binary);
        assert_eq!(
            sniff(&[0xff, 0xfe, 0xfd, 0x80, 0x81, 0x82, 0x83]),
            ContentKind::Binary
        );
        assert_eq!(sniff(b"  <!DOCTYPE html><p>x</p>"), ContentKind::Html);
        assert_eq!(sniff(b"hello world"), ContentKind::Text);
        assert_eq!(sniff(b""), ContentKind::Text);
    }

    #[test]
    fn decoding_honours_charset_and_drops_a_cut_character() {
        assert_eq!(
            decode(b"caf\xe9", Some("text/plain; charset=ISO-8859-1")),
            "café"
        );
        assert_eq!(decode("café".as_bytes(), Some("text/plain")), "café");
        let euro = "€".as_bytes();
        let cut = [b"ab".as_slice(), &euro[..2]].concat();
        assert_eq!(decode(&cut, None), "ab");
        assert_eq!(decode(&[b'a', 0xff, b'b'], None), "a\u{fffd}b");
    }

    #[test]
    fn html_becomes_readable_text() {
        let out = html_to_text(
            "<html><head><title>T</title><script>evil()</script></head><body><h1>Hello</h1><p>World &amp; more</p></body></html>",
            80,
        );
        assert!(out.contains("Hello"), "{out}");
        assert!(out.contains("World & more"), "{out}");
        assert!(!out.contains("<p>"), "{out}");
        assert!(!out.contains("evil()"), "{out}");
    }

    #[test]
    fn cap_respects_char_boundaries() {
        assert_eq!(cap("héllo".into(), 2), ("h".into(), true));
        assert_eq!(cap("abc".into(), 3), ("abc".into(), false));
    }
}
