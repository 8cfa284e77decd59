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

/// Element nesting past which HTML is flattened by [`strip_tags`] instead of rendered: the
/// converter recurses once per level, so a hostile page of a few thousand nested tags (50 KiB
/// holds 17,000 `<b>`) would overflow the stack and abort the whole runtime.
pub const MAX_HTML_NESTING: usize = 256;

/// HTML to readable text. Deeply nested markup (see [`MAX_HTML_NESTING`]) and markup the
/// converter rejects are flattened to their text instead.
pub fn html_to_text(html: &str, width: usize) -> String {
    if nesting_estimate(html) > MAX_HTML_NESTING {
        return strip_tags(html);
    }
    // The converter parses hostile input; should it panic, the page is flattened instead of the
    // runtime (and the rest of the batch) going down with it.
    std::panic::catch_unwind(|| html2text::from_read(html.as_bytes(), width))
        .ok()
        .and_then(Result::ok)
        .unwrap_or_else(|| strip_tags(html))
}

/// Elements that never hold children.
const VOID_ELEMENTS: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "keygen", "link", "meta", "param",
    "source", "track", "wbr",
];

/// Elements a sibling of the same kind closes implicitly (`<li><li>` does not nest).
const IMPLIED_END_ELEMENTS: &[&str] = &[
    "li", "p", "dt", "dd", "tr", "td", "th", "option", "optgroup", "rp", "rt", "tbody", "thead",
    "tfoot", "colgroup", "caption",
];

/// An upper estimate of how deep the elements of `html` nest: every start tag that can hold
/// children opens a level, every end tag closes one. Tags inside comments or scripts count
/// too, which can only overestimate (and so only flatten a page that did not need it).
pub fn nesting_estimate(html: &str) -> usize {
    let bytes = html.as_bytes();
    let (mut depth, mut max) = (0usize, 0usize);
    let mut i = 0;
    while let Some(at) = bytes[i..].iter().position(|b| *b == b'<') {
        i += at + 1;
        let closing = bytes.get(i) == Some(&b'/');
        let name_start = if closing { i + 1 } else { i };
        let name_len = bytes[name_start..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric())
            .count();
        if name_len == 0 || !bytes[name_start].is_ascii_alphabetic() {
            continue;
        }
        let name = html[name_start..name_start + name_len].to_ascii_lowercase();
        if closing {
            depth = depth.saturating_sub(1);
            continue;
        }
        // The tag ends at the next `>` (or where the next tag starts), so the scan stays linear.
        let tag_end = bytes[name_start..]
            .iter()
            .position(|b| *b == b'>' || *b == b'<')
            .map_or(bytes.len(), |p| name_start + p);
        let self_closing = bytes.get(tag_end) == Some(&b'>') && bytes[tag_end - 1] == b'/';
        if VOID_ELEMENTS.contains(&name.as_str())
            || IMPLIED_END_ELEMENTS.contains(&name.as_str())
            || self_closing
        {
            continue;
        }
        depth += 1;
        max = max.max(depth);
    }
    max
}

/// Flattens HTML to text without a parser: tags become line breaks or spaces, `script` and
/// `style` contents are dropped, the common entities are decoded and blank runs collapsed.
pub fn strip_tags(html: &str) -> String {
    // ASCII lowercasing keeps byte offsets, so `lower` indexes `html` one to one.
    let lower = html.to_ascii_lowercase();
    let mut text = String::with_capacity(html.len());
    let mut pos = 0;
    while let Some(open) = html[pos..].find('<').map(|p| pos + p) {
        text.push_str(&decode_entities(&html[pos..open]));
        let close = html[open..].find('>').map_or(html.len(), |p| open + p + 1);
        let tag = &lower[open..close];
        pos = close;
        if let Some(element) = ["script", "style"]
            .into_iter()
            .find(|t| tag.strip_prefix('<').is_some_and(|n| n.starts_with(t)))
        {
            let end = format!("</{element}");
            pos = lower[pos..].find(&end).map_or(html.len(), |p| pos + p);
        }
        let breaks = ["<br", "</p", "</div", "</li", "</tr", "</h"]
            .iter()
            .any(|b| tag.starts_with(b));
        text.push(if breaks { '\n' } else { ' ' });
    }
    text.push_str(&decode_entities(&html[pos..]));
    collapse_blanks(&text)
}

/// `&amp;`, `&lt;`, `&gt;`, `&quot;`, `&#39;`, `&apos;`, `&nbsp;` and numeric references.
fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp..];
        let entity = after.find(';').filter(|p| *p <= 10).map(|p| &after[1..p]);
        let decoded = entity.and_then(|e| match e {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" | "#39" => Some('\''),
            "nbsp" => Some(' '),
            _ => e
                .strip_prefix("#x")
                .or_else(|| e.strip_prefix("#X"))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| e.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        });
        match (entity, decoded) {
            (Some(e), Some(c)) => {
                out.push(c);
                rest = &after[e.len() + 2..];
            }
            (Some(_) | None, None) | (None, Some(_)) => {
                out.push('&');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Trims every line, drops blank-space runs inside lines and keeps at most one empty line.
fn collapse_blanks(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_lines = 0;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() {
            blank_lines += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank_lines > 0 { "\n\n" } else { "\n" });
        }
        out.push_str(&words.join(" "));
        blank_lines = 0;
    }
    out
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
    fn deep_nesting_is_flattened_instead_of_overflowing_the_stack() {
        // Each of these, repeated to fill the 50 KiB prefix, used to abort the runtime.
        for tag in [
            "<ul><li>",
            "<b>",
            "<div>",
            "<table><tr><td>",
            "<blockquote>",
        ] {
            let mut html = tag.repeat(50 * 1024 / tag.len());
            html.push_str("deep &amp; hostile");
            assert!(nesting_estimate(&html) > MAX_HTML_NESTING, "{tag}");
            assert_eq!(html_to_text(&html, 100), "deep & hostile", "{tag}");
        }
    }

    #[test]
    fn ordinary_markup_is_not_counted_as_deep() {
        let page = "<!doctype html><html><head><meta charset=utf-8><title>t</title></head>\
                    <body><ul><li>a<li>b</ul><p>one<p>two<br><img src=x /><div><span>s</span></div>\
                    </body></html>";
        assert_eq!(nesting_estimate(page), 4);
        let many_items = format!("<ul>{}</ul>", "<li>item".repeat(2000));
        assert_eq!(nesting_estimate(&many_items), 1);
        // At the limit the converter still runs, on a 2 MiB test thread and in a debug build,
        // also for tables, whose implied `tbody`/`tr`/`td` make the real tree four times deeper.
        let tables = "<table><tr><td>".repeat(MAX_HTML_NESTING) + "cell";
        assert_eq!(nesting_estimate(&tables), MAX_HTML_NESTING);
        assert!(html_to_text(&tables, 100).contains("cell"));
        let long_nested = "<div>".repeat(MAX_HTML_NESTING) + &"</div>".repeat(MAX_HTML_NESTING);
        assert_eq!(nesting_estimate(&long_nested), MAX_HTML_NESTING);
        assert!(html_to_text(&long_nested, 100).trim().is_empty());
    }

    #[test]
    fn strip_tags_keeps_the_text() {
        let html = "<p>Hello&nbsp;<b>world</b> &lt;3 &#x41;&#66; &bogus; a&b</p>\
                    <script>var x = '<p>no</p>';</script><STYLE>p{}</STYLE>\n\n\n<div>next</div>";
        assert_eq!(strip_tags(html), "Hello world <3 AB &bogus; a&b\n\nnext");
    }

    #[test]
    fn cap_respects_char_boundaries() {
        assert_eq!(cap("héllo".into(), 2), ("h".into(), true));
        assert_eq!(cap("abc".into(), 3), ("abc".into(), false));
    }
}
