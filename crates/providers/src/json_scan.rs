//! A strict, allocation-free, single-pass JSON reader for the wires' fast path for text-delta
//! events (the bulk of every stream).
//!
//! A [`Reader`] walks one JSON text front to back and validates all of it as JSON syntax, while
//! its caller steers it into the members it wants ([`Reader::object`], [`Reader::only`]) and
//! reads their values ([`Reader::string`], [`Reader::raw`], [`Reader::null`]); everything else
//! is skipped, still validated. Anything the reader or its caller is unsure about (an escaped
//! key, a key read twice, deep nesting, invalid syntax, an unexpected type) yields `None`, and
//! the caller falls back to full `serde_json` decoding, which then reports the precise error.
//!
//! The reader takes raw bytes and validates their UTF-8 itself, so an SSE event's data needs no
//! separate UTF-8 pass first: outside strings valid JSON is ASCII (any other byte is a syntax
//! error), and each string that holds a non-ASCII byte is validated when its closing quote is
//! found. Quotes are ASCII, so validating every string piece validates the whole text.

use std::borrow::Cow;

/// Deepest nesting the reader follows before giving up (serde then decides).
const MAX_DEPTH: usize = 32;

/// Most members one object may have read (a key read twice is detected among them).
const MAX_READ_MEMBERS: usize = 8;

/// Longest stretch of a text remembered to be stepped over in the next one (a stream's repeated
/// members are short; a hostile server's huge ones are not worth keeping a copy of).
pub(crate) const MAX_REMEMBERED: usize = 4096;

/// String bytes examined per step.
const BLOCK: usize = 16;

/// The offset of the first quote, backslash or control byte in `block`, if any, and whether
/// `block` holds a non-ASCII byte (anywhere).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn first_special(block: &[u8; BLOCK]) -> (Option<usize>, bool) {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    // SAFETY: SSE2 is part of the x86_64 baseline, and the unaligned load reads exactly the
    // 16 bytes `block` borrows.
    let (mask, high) = unsafe {
        let v = _mm_loadu_si128(block.as_ptr().cast::<__m128i>());
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
        (
            _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control)),
            _mm_movemask_epi8(v),
        )
    };
    (
        (mask != 0).then(|| mask.trailing_zeros() as usize),
        high != 0,
    )
}

#[cfg(not(target_arch = "x86_64"))]
fn first_special(block: &[u8; BLOCK]) -> (Option<usize>, bool) {
    first_special_swar(block)
}

/// [`first_special`] in portable arithmetic, eight bytes per word.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn first_special_swar(block: &[u8; BLOCK]) -> (Option<usize>, bool) {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);
    // The lowest set high bit marks the first byte below `n`; bits above it may be spurious.
    let below = |v: u64, n: u64| v.wrapping_sub(ONES * n) & !v & HIGHS;
    let special = |w: u64| {
        below(w ^ (ONES * u64::from(b'"')), 1)
            | below(w ^ (ONES * u64::from(b'\\')), 1)
            | below(w, 0x20)
    };
    let word = u128::from_le_bytes(*block);
    let [lo, hi] = [word as u64, (word >> 64) as u64];
    let first = match (special(lo), special(hi)) {
        (0, 0) => None,
        (0, h) => Some(8 + (h.trailing_zeros() / 8) as usize),
        (l, _) => Some((l.trailing_zeros() / 8) as usize),
    };
    (first, (lo | hi) & HIGHS != 0)
}

/// Reads `text` as exactly one JSON value through `value`, which must read or skip that value.
/// `None` when `value` declines or `text` is not valid UTF-8 JSON.
pub(crate) fn read<'a, T, S: AsRef<[u8]> + ?Sized>(
    text: &'a S,
    value: impl FnOnce(&mut Reader<'a>) -> Option<T>,
) -> Option<T> {
    let text = text.as_ref();
    let mut reader = Reader {
        b: text,
        i: 0,
        depth: 0,
    };
    reader.ws();
    let out = value(&mut reader)?;
    reader.ws();
    (reader.i == text.len()).then_some(out)
}

/// A position in a JSON text, always at the start of a value (whitespace already skipped).
pub(crate) struct Reader<'a> {
    b: &'a [u8],
    i: usize,
    /// Objects and arrays entered and not yet left.
    depth: usize,
}

impl<'a> Reader<'a> {
    /// Reads an object, handing each key and the reader (at the member's value) to `member`.
    /// `member` either reads the value and returns `Some(true)`, or returns `Some(false)`
    /// without touching it, and the reader skips it. Fails on an escaped key (it could spell a
    /// wanted one) and on a key read twice (serde rejects duplicate fields).
    pub(crate) fn object(
        &mut self,
        member: impl FnMut(&mut Self, &'a [u8]) -> Option<bool>,
    ) -> Option<()> {
        self.object_with(None, member)
    }

    /// [`Self::object`], remembering in `skipped` the object's opening up to its first member
    /// read: `{` and the members `member` skipped before it, through the comma. When the object
    /// starts with exactly the remembered bytes, they are stepped over unread.
    ///
    /// Streams repeat such members in every event (a chunk's id, model, creation time), and the
    /// bytes are the same valid members as before: each skipped value was validated then, and
    /// a member's value ends where its own syntax says, so equal bytes are equal members. This
    /// holds only while `member` decides to skip by the key alone, as every caller here does.
    pub(crate) fn object_memo(
        &mut self,
        skipped: &mut Vec<u8>,
        member: impl FnMut(&mut Self, &'a [u8]) -> Option<bool>,
    ) -> Option<()> {
        self.object_with(Some(skipped), member)
    }

    #[inline(always)]
    fn object_with(
        &mut self,
        mut skipped: Option<&mut Vec<u8>>,
        mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<bool>,
    ) -> Option<()> {
        let open = self.i;
        self.eat(b'{')?;
        self.enter()?;
        let mut read: [&[u8]; MAX_READ_MEMBERS] = [b""; MAX_READ_MEMBERS];
        let mut n_read = 0;
        // Where the skipped opening ends (0: nothing to remember).
        let mut skipped_end = 0;
        if let Some(known) = skipped.as_deref().filter(|k| !k.is_empty())
            && self.b[open..].starts_with(known)
        {
            self.i = open + known.len();
            // Already remembered; nothing new to learn.
            skipped = None;
        }
        if self.i > open + 1 || self.eat_ws(b'}').is_none() {
            loop {
                let (start, end, escaped) = self.string_span()?;
                if escaped {
                    return None;
                }
                let key = &self.b[start..end];
                self.eat_ws(b':')?;
                self.ws();
                let was_read = member(self, key)?;
                if was_read {
                    if n_read == MAX_READ_MEMBERS || read[..n_read].contains(&key) {
                        return None;
                    }
                    read[n_read] = key;
                    n_read += 1;
                } else {
                    self.skip()?;
                }
                if !self.next_or_close(b'}')? {
                    break;
                }
                if n_read == 0 && skipped.is_some() {
                    skipped_end = self.i;
                }
            }
        }
        if let Some(memo) =
            skipped.filter(|_| skipped_end > 0 && skipped_end - open <= MAX_REMEMBERED)
        {
            memo.clear();
            memo.extend_from_slice(&self.b[open..skipped_end]);
        }
        self.depth -= 1;
        Some(())
    }

    /// Reads an array of at most one element, calling `element` at it; a second element fails.
    pub(crate) fn only(&mut self, element: impl FnOnce(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        self.enter()?;
        if self.eat_ws(b']').is_none() {
            element(self)?;
            self.eat_ws(b']')?;
        }
        self.depth -= 1;
        Some(())
    }

    /// Reads a string value, unescaped (borrowed when it holds no escape).
    #[inline(always)]
    pub(crate) fn string(&mut self) -> Option<Cow<'a, str>> {
        let (start, end, escaped) = self.string_span()?;
        // SAFETY: `string_span` validated the UTF-8 of its inner range.
        let inner = unsafe { std::str::from_utf8_unchecked(&self.b[start..end]) };
        if escaped {
            unescape(inner).map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(inner))
        }
    }

    /// Reads `null` (`None`) or a string.
    pub(crate) fn string_or_null(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.null().is_some() {
            return Some(None);
        }
        self.string().map(Some)
    }

    /// Reads the literal `null`; any other value fails.
    pub(crate) fn null(&mut self) -> Option<()> {
        self.literal(b"null")
    }

    /// Reads a non-negative integer that fits a `u64`, as serde reads one; a sign, a fraction,
    /// an exponent or an overflow fails.
    pub(crate) fn u64(&mut self) -> Option<u64> {
        let start = self.i;
        let mut n: u64 = 0;
        while let Some(&c) = self.b.get(self.i).filter(|c| c.is_ascii_digit()) {
            n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            self.i += 1;
        }
        let digits = &self.b[start..self.i];
        let integer = match digits {
            [] => false,
            [b'0', _, ..] => false,
            _ => !matches!(self.b.get(self.i), Some(b'.' | b'e' | b'E')),
        };
        integer.then_some(n)
    }

    /// The offset in the text.
    pub(crate) fn position(&self) -> usize {
        self.i
    }

    /// The text from `start` (an earlier position) to here.
    pub(crate) fn since(&self, start: usize) -> &'a [u8] {
        self.b.get(start..self.i).unwrap_or_default()
    }

    /// A value the caller recognises without reading it: `known` gets the rest of the text and
    /// returns what it found there and its length, which the reader then steps over. Only for
    /// a value the caller validated before in the same form (see `UsageTemplate`).
    pub(crate) fn known<T>(
        &mut self,
        known: impl FnOnce(&'a [u8]) -> Option<(T, usize)>,
    ) -> Option<T> {
        let (found, len) = known(self.b.get(self.i..)?)?;
        self.i += len;
        Some(found)
    }

    /// Skips (and validates) any value.
    #[inline(always)]
    pub(crate) fn skip(&mut self) -> Option<()> {
        self.value(self.depth)
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// Skips whitespace; servers send compact JSON, so one comparison usually decides.
    #[inline(always)]
    fn ws(&mut self) {
        if self.b.get(self.i).is_some_and(|&c| c <= b' ') {
            self.skip_ws();
        }
    }

    #[cold]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// Consumes `c` after any whitespace (compact JSON has none: `c` is checked first).
    #[inline(always)]
    fn eat_ws(&mut self, c: u8) -> Option<()> {
        let next = *self.b.get(self.i)?;
        if next == c {
            self.i += 1;
            return Some(());
        }
        if next > b' ' {
            return None;
        }
        self.skip_ws();
        self.eat(c)
    }

    /// After a member or an element: `true` past a `,` (and any whitespace after it), `false`
    /// past `close`; anything else fails.
    #[inline(always)]
    fn next_or_close(&mut self, close: u8) -> Option<bool> {
        let mut next = *self.b.get(self.i)?;
        if next <= b' ' {
            self.skip_ws();
            next = *self.b.get(self.i)?;
        }
        self.i += 1;
        if next == b',' {
            self.ws();
            Some(true)
        } else {
            (next == close).then_some(false)
        }
    }

    #[inline(always)]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    /// A string at `i`; returns its inner range (valid UTF-8) and whether it holds escapes.
    #[inline(always)]
    fn string_span(&mut self) -> Option<(usize, usize, bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let mut escaped = false;
        // Whether a non-ASCII byte may be in the string (then its UTF-8 is checked at the end).
        let mut non_ascii = false;
        loop {
            // Ordinary bytes are skipped a block at a time, the last few one by one.
            while let Some(block) = self.b.get(self.i..).and_then(<[u8]>::first_chunk) {
                let (special, high) = first_special(block);
                non_ascii |= high;
                if let Some(offset) = special {
                    self.i += offset;
                    break;
                }
                self.i += BLOCK;
            }
            let c = *self.b.get(self.i)?;
            match c {
                b'"' => {
                    let end = self.i;
                    self.i += 1;
                    if non_ascii && simdutf8::basic::from_utf8(&self.b[start..end]).is_err() {
                        return None;
                    }
                    return Some((start, end, escaped));
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
                _ => {
                    non_ascii |= c >= 0x80;
                    self.i += 1;
                }
            }
        }
    }

    #[inline(always)]
    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        self.i - start
    }

    #[inline(always)]
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

    #[inline(always)]
    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        self.b[self.i..]
            .starts_with(lit)
            .then(|| self.i += lit.len())
    }

    /// Skips a value inside `depth` containers: scalars inline, containers out of line.
    #[inline(always)]
    fn value(&mut self, depth: usize) -> Option<()> {
        match *self.b.get(self.i)? {
            b'"' => self.string_span().map(|_| ()),
            b'-' | b'0'..=b'9' => self.number(),
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            _ => self.container(depth),
        }
    }

    fn container(&mut self, depth: usize) -> Option<()> {
        if depth >= MAX_DEPTH {
            return None;
        }
        match *self.b.get(self.i)? {
            b'{' => {
                self.i += 1;
                self.ws();
                if self.eat(b'}').is_some() {
                    return Some(());
                }
                loop {
                    self.string_span()?;
                    self.eat_ws(b':')?;
                    self.ws();
                    self.value(depth + 1)?;
                    if !self.next_or_close(b'}')? {
                        return Some(());
                    }
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
                    if !self.next_or_close(b']')? {
                        return Some(());
                    }
                }
            }
            _ => None,
        }
    }
}

/// The text of a string's validated inner part `inner`, escapes decoded; `None` for a lone
/// surrogate.
fn unescape(inner: &str) -> Option<String> {
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
    Some(out)
}

fn hex4(chars: &mut std::str::CharIndices<'_>) -> Option<u32> {
    let mut v = 0;
    for _ in 0..4 {
        v = v * 16 + chars.next()?.1.to_digit(16)?;
    }
    Some(v)
}

#[cfg(test)]
mod tests;
