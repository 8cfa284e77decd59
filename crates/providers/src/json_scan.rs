//! A strict, allocation-free scanner for the top level of a JSON object, used by the wires' fast
//! path for text-delta events (the bulk of every stream).
//!
//! It validates the whole text as JSON syntax and hands back the raw text of the members it was
//! asked for. Anything it is unsure about (escaped keys, duplicate wanted keys, deep nesting,
//! invalid syntax) yields `None`, and the caller falls back to full `serde_json` decoding, which
//! then reports the precise error.

use std::borrow::Cow;

/// Deepest nesting the scanner follows before giving up (serde then decides).
const MAX_DEPTH: usize = 32;

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// A mask whose lowest set bit lies in the first byte of `word` (little-endian order) that is a
/// quote, a backslash or a control character; bits above that one may be spurious.
fn special_bytes(word: u64) -> u64 {
    let below = |v: u64, n: u64| v.wrapping_sub(ONES * n) & !v & HIGHS;
    below(word ^ (ONES * u64::from(b'"')), 1)
        | below(word ^ (ONES * u64::from(b'\\')), 1)
        | below(word, 0x20)
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    /// A string at `i`; returns its inner range and whether it holds escapes.
    fn string(&mut self) -> Option<(usize, usize, bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            // Ordinary bytes are skipped eight at a time.
            while let Some(word) = self.b.get(self.i..self.i + 8) {
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(word);
                let special = special_bytes(u64::from_le_bytes(bytes));
                if special != 0 {
                    self.i += (special.trailing_zeros() / 8) as usize;
                    break;
                }
                self.i += 8;
            }
            let c = *self.b.get(self.i)?;
            match c {
                b'"' => {
                    self.i += 1;
                    return Some((start, self.i - 1, escaped));
                }
                b'\\' => {
                    escaped = true;
                    match *self.b.get(self.i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                        b'u' => {
                            let hex = self.b.get(self.i + 2..self.i + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.i += 6;
                        }
                        _ => return None,
                    }
                }
                0..=0x1f => return None,
                _ => self.i += 1,
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        match self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.eat(b'.').is_some() && self.digits() == 0 {
            return None;
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        Some(())
    }

    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        self.b[self.i..]
            .starts_with(lit)
            .then(|| self.i += lit.len())
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match *self.b.get(self.i)? {
            b'"' => self.string().map(|_| ()),
            b'{' => {
                self.i += 1;
                self.ws();
                if self.eat(b'}').is_some() {
                    return Some(());
                }
                loop {
                    self.string()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    self.value(depth + 1)?;
                    self.ws();
                    if self.eat(b',').is_some() {
                        self.ws();
                        continue;
                    }
                    return self.eat(b'}');
                }
            }
            b'[' => {
                self.i += 1;
                self.ws();
                if self.eat(b']').is_some() {
                    return Some(());
                }
                loop {
                    self.value(depth + 1)?;
                    self.ws();
                    if self.eat(b',').is_some() {
                        self.ws();
                        continue;
                    }
                    return self.eat(b']');
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }
}

/// One step of a path into a JSON document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seg {
    /// The member with this key (unescaped) of an object.
    Key(&'static str),
    /// The element of an array that must hold exactly one; more make the extraction fail.
    Only,
}

/// Walks `text` once, validating it as one JSON value, and returns the raw text found at each
/// of `paths` (`None` where a path is absent). Fails (`None`) on invalid syntax, an escaped key
/// on a wanted path, a repeated wanted key, or a second element in an array a path passes with
/// [`Seg::Only`].
pub(crate) fn extract<'a, const N: usize>(
    text: &'a str,
    paths: [&[Seg]; N],
) -> Option<[Option<&'a str>; N]> {
    const { assert!(N <= 32) };
    let mut walker = Walker {
        s: Scanner {
            b: text.as_bytes(),
            i: 0,
        },
        text,
        paths,
        out: [None; N],
    };
    walker.s.ws();
    let all = if N == 32 { u32::MAX } else { (1u32 << N) - 1 };
    walker.walk(0, 0, all)?;
    walker.s.ws();
    (walker.s.i == text.len()).then_some(walker.out)
}

/// The indices of the set bits of `mask`, lowest first.
fn bits(mut mask: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let p = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            p
        })
    })
}

struct Walker<'a, 'p, const N: usize> {
    s: Scanner<'a>,
    text: &'a str,
    paths: [&'p [Seg]; N],
    out: [Option<&'a str>; N],
}

impl<'a, const N: usize> Walker<'a, '_, N> {
    /// The value at `i`, reached through `depth` path steps by the paths in `active`.
    fn walk(&mut self, nesting: usize, depth: usize, active: u32) -> Option<()> {
        if active == 0 {
            return self.s.value(nesting + 1);
        }
        if nesting > MAX_DEPTH {
            return None;
        }
        let start = self.s.i;
        let mut ending = 0u32;
        let mut deeper = 0u32;
        for p in bits(active) {
            if self.paths[p].len() == depth {
                ending |= 1 << p;
            } else {
                deeper |= 1 << p;
            }
        }
        match self.s.b.get(self.s.i)? {
            b'{' if deeper != 0 => self.object(nesting, depth, deeper)?,
            b'[' if deeper != 0 => self.array(nesting, depth, deeper)?,
            _ => self.s.value(nesting + 1)?,
        }
        for p in bits(ending) {
            if self.out[p].is_some() {
                return None;
            }
            self.out[p] = Some(&self.text[start..self.s.i]);
        }
        Some(())
    }

    fn object(&mut self, nesting: usize, depth: usize, deeper: u32) -> Option<()> {
        self.s.i += 1;
        self.s.ws();
        if self.s.eat(b'}').is_some() {
            return Some(());
        }
        let mut keyed = 0u32;
        for p in bits(deeper) {
            if matches!(self.paths[p][depth], Seg::Key(_)) {
                keyed |= 1 << p;
            }
        }
        loop {
            let (ks, ke, escaped) = self.s.string()?;
            if escaped && keyed != 0 {
                return None;
            }
            let key = &self.text[ks..ke];
            let mut sub = 0u32;
            // Paths often share a key; compare each distinct one once.
            let mut last: Option<(&str, bool)> = None;
            for p in bits(keyed) {
                let Seg::Key(k) = self.paths[p][depth] else {
                    continue;
                };
                let hit = match last {
                    Some((prev, hit)) if std::ptr::eq(prev, k) => hit,
                    Some(_) | None => {
                        let hit = k.len() == key.len()
                            && k.as_bytes().first() == key.as_bytes().first()
                            && k == key;
                        last = Some((k, hit));
                        hit
                    }
                };
                if hit {
                    sub |= 1 << p;
                }
            }
            self.s.ws();
            self.s.eat(b':')?;
            self.s.ws();
            self.walk(nesting + 1, depth + 1, sub)?;
            self.s.ws();
            if self.s.eat(b',').is_some() {
                self.s.ws();
                continue;
            }
            return self.s.eat(b'}');
        }
    }

    fn array(&mut self, nesting: usize, depth: usize, deeper: u32) -> Option<()> {
        let mut sub = 0u32;
        for p in bits(deeper) {
            if self.paths[p][depth] == Seg::Only {
                sub |= 1 << p;
            }
        }
        self.s.i += 1;
        self.s.ws();
        if self.s.eat(b']').is_some() {
            return Some(());
        }
        let mut index = 0usize;
        loop {
            if index > 0 && sub != 0 {
                return None;
            }
            self.walk(nesting + 1, depth + 1, sub)?;
            index += 1;
            self.s.ws();
            if self.s.eat(b',').is_some() {
                self.s.ws();
                continue;
            }
            return self.s.eat(b']');
        }
    }
}

/// Whether the raw value is absent or `null`.
pub(crate) fn is_null_or_absent(raw: Option<&str>) -> bool {
    raw.is_none_or(|r| r == "null")
}

/// The decoded text of the raw string value `raw` (already validated), or `None` when `raw` is
/// not a string or holds a lone surrogate.
pub(crate) fn string_value(raw: &str) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.char_indices();
    while let Some((_, c)) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let (_, e) = chars.next()?;
        let decoded = match e {
            '"' => '"',
            '\\' => '\\',
            '/' => '/',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => {
                let hi = hex4(&mut chars)?;
                match hi {
                    0xD800..=0xDBFF => {
                        if chars.next()?.1 != '\\' || chars.next()?.1 != 'u' {
                            return None;
                        }
                        let lo = hex4(&mut chars)?;
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return None;
                        }
                        char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?
                    }
                    0xDC00..=0xDFFF => return None,
                    _ => char::from_u32(hi)?,
                }
            }
            _ => return None,
        };
        out.push(decoded);
    }
    Some(Cow::Owned(out))
}

fn hex4(chars: &mut std::str::CharIndices<'_>) -> Option<u32> {
    let mut v = 0;
    for _ in 0..4 {
        v = v * 16 + chars.next()?.1.to_digit(16)?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    use Seg::{Key, Only};

    #[test]
    fn fields_are_found_and_syntax_is_checked() {
        let text =
            r#" {"type":"x","n":-1.5e3,"o":{"a":[1,{"b":null}]},"delta":"h\u00e9\n","t":true} "#;
        let [kind, delta, missing] =
            extract(text, [&[Key("type")], &[Key("delta")], &[Key("zzz")]]).unwrap();
        assert_eq!(kind, Some("\"x\""));
        assert_eq!(string_value(delta.unwrap()).unwrap(), "hé\n");
        assert_eq!(missing, None);
        for bad in [
            r#"{"a":1,}"#,
            r#"{"a":01}"#,
            r#"{"a":"x"} x"#,
            r#"{"a":"tab	inside"}"#,
            r#"{"a":tru}"#,
            r#"{"d\u0065lta":"x"}"#,
            r#"{"delta":"a","delta":"b"}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":[1,2}"#,
        ] {
            assert!(extract(bad, [&[Key("delta")]]).is_none(), "{bad}");
        }
    }

    #[test]
    fn any_value_may_be_the_document() {
        assert_eq!(extract("[1]", [&[Key("delta")]]), Some([None]));
        assert_eq!(extract(" \"s\" ", [&[Key("delta")]]), Some([None]));
    }

    #[test]
    fn nested_paths_in_one_pass() {
        let text =
            r#"{"c":[{"p":{"parts":[{"text":"hi"}]},"f":null}],"u":{"n":1},"z":[{"text":"no"}]}"#;
        let [t, f, u, other] = extract(
            text,
            [
                &[Key("c"), Only, Key("p"), Key("parts"), Only, Key("text")],
                &[Key("c"), Only, Key("f")],
                &[Key("u")],
                &[Key("z"), Only],
            ],
        )
        .unwrap();
        assert_eq!(t, Some("\"hi\""));
        assert_eq!(f, Some("null"));
        assert_eq!(u, Some(r#"{"n":1}"#));
        assert_eq!(other, Some(r#"{"text":"no"}"#));
        let two = r#"{"c":[{"t":1},{"t":2}]}"#;
        assert!(extract(two, [&[Key("c"), Only, Key("t")]]).is_none());
        assert!(
            extract(two, [&[Key("x")]]).is_some(),
            "arrays off the paths may be long"
        );
    }

    #[test]
    fn word_skipping_finds_specials_at_every_offset() {
        for len in 0..20 {
            let body = "é".repeat(len / 2) + &"a".repeat(len % 2);
            let ok = format!("{{\"k\":\"{body}\\n{body}\"}}");
            assert!(extract(&ok, [&[Key("k")]]).is_some(), "{ok}");
            let bad = format!("{{\"k\":\"{body}\u{1}{body}\"}}");
            assert!(extract(&bad, [&[Key("k")]]).is_none(), "{bad:?}");
            let cut = format!("{{\"k\":\"{body}{body}");
            assert!(extract(&cut, [&[Key("k")]]).is_none());
        }
    }

    #[test]
    fn strings_decode_like_serde() {
        for raw in [
            r#""plain""#,
            r#""\ud83d\ude00 \"q\" \\ \/ \b\f\r\t""#,
            r#""日本""#,
        ] {
            let ours = string_value(raw).unwrap();
            let serde: String = serde_json::from_str(raw).unwrap();
            assert_eq!(ours, serde);
        }
        assert!(string_value(r#""\ud83d""#).is_none());
        assert!(string_value(r#""\ude00""#).is_none());
        assert!(string_value("12").is_none());
    }
}
