//! The JSON reader against serde: syntax, strings, numbers and UTF-8 validation.

use proptest::strategy::Strategy;

use super::*;

type TypeAndDelta<'a> = (Option<Cow<'a, str>>, Option<Cow<'a, str>>);

/// The top-level `type` and `delta` strings, skipping everything else.
fn type_and_delta(text: &str) -> Option<TypeAndDelta<'_>> {
    let (mut kind, mut delta) = (None, None);
    read(text, |r| {
        r.object(|r, key| {
            Some(match key {
                b"type" => {
                    kind = Some(r.string()?);
                    true
                }
                b"delta" => {
                    delta = Some(r.string()?);
                    true
                }
                _ => false,
            })
        })
    })?;
    Some((kind, delta))
}

#[test]
fn members_are_read_and_syntax_is_checked() {
    let text = r#" {"type":"x","n":-1.5e3,"o":{"a":[1,{"b":null}]},"delta":"h\u00e9\n","t":true} "#;
    let (kind, delta) = type_and_delta(text).unwrap();
    assert_eq!(kind.as_deref(), Some("x"));
    assert_eq!(delta.as_deref(), Some("hé\n"));
    assert_eq!(type_and_delta("{}").unwrap(), (None, None));
    for bad in [
        r#"{"a":1,}"#,
        r#"{"a":01}"#,
        r#"{"a":"x"} x"#,
        r#"{"a":"tab	inside"}"#,
        r#"{"a":tru}"#,
        r#"{"d\u0065lta":"x"}"#,
        r#"{"delta":"a","delta":"b"}"#,
        r#"{"delta":5}"#,
        r#"{"a":"\x"}"#,
        r#"{"a":[1,2}"#,
        r#"{"a":{"b":1}"#,
        r#"{"a" 1}"#,
        "[1]",
        "",
    ] {
        assert!(type_and_delta(bad).is_none(), "{bad}");
    }
}

#[test]
fn skipped_members_may_repeat_and_nest() {
    let text = r#"{"z":1,"z":[{"d\u0065lta":2}],"delta":"d"}"#;
    assert_eq!(type_and_delta(text).unwrap().1.as_deref(), Some("d"));
    let deep = format!("{{\"z\":{}{}}}", "[".repeat(40), "]".repeat(40));
    assert!(type_and_delta(&deep).is_none(), "nesting is bounded");
    let fine = format!("{{\"z\":{}{}}}", "[".repeat(20), "]".repeat(20));
    assert!(type_and_delta(&fine).is_some());
}

/// The number `t` of the only element of `c`.
fn only_t(text: &str) -> Option<Option<u64>> {
    let mut found = None;
    read(text, |r| {
        r.object(|r, key| {
            if key != b"c" {
                return Some(false);
            }
            r.only(|r| {
                r.object(|r, key| {
                    if key != b"t" {
                        return Some(false);
                    }
                    found = Some(r.u64()?);
                    Some(true)
                })
            })?;
            Some(true)
        })
    })?;
    Some(found)
}

#[test]
fn only_takes_at_most_one_element() {
    assert_eq!(only_t(r#"{"c":[{"t": 12 ,"u":[1]}]}"#), Some(Some(12)));
    assert_eq!(only_t(r#"{"c":[ ]}"#), Some(None));
    assert_eq!(only_t(r#"{"c":[{"t":1},{"t":2}]}"#), None);
    assert_eq!(only_t(r#"{"c":{"t":1}}"#), None);
}

fn string_or_null(text: &str) -> Option<Option<Cow<'_, str>>> {
    read(text, Reader::string_or_null)
}

#[test]
fn null_and_strings() {
    assert_eq!(string_or_null(" null "), Some(None));
    assert_eq!(string_or_null(r#""a""#), Some(Some(Cow::Borrowed("a"))));
    assert_eq!(string_or_null("nul"), None);
    assert_eq!(string_or_null("nullx"), None);
    assert_eq!(string_or_null("1"), None);
    assert_eq!(read("18446744073709551615", Reader::u64), Some(u64::MAX));
    for not_u64 in [
        "18446744073709551616",
        "-1",
        "1.5",
        "1e3",
        "01",
        "\"1\"",
        "null",
    ] {
        assert_eq!(read(not_u64, Reader::u64), None, "{not_u64}");
    }
    assert_eq!(read("null", Reader::null), Some(()));
    assert_eq!(read("false", Reader::null), None);
}

proptest::proptest! {
    #[test]
    fn block_scans_agree(block in proptest::array::uniform16(proptest::sample::select(
        vec![b'a', b'"', b'\\', 0x00, 0x1f, 0x20, 0x7f, 0x80, 0xe9, 0xff],
    ))) {
        let expected = (
            block.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20),
            block.iter().any(|&c| c >= 0x80),
        );
        proptest::prop_assert_eq!(first_special(&block), expected);
        proptest::prop_assert_eq!(first_special_swar(&block), expected);
    }
}

#[test]
fn word_skipping_finds_specials_at_every_offset() {
    for len in 0..40 {
        let body = "é".repeat(len / 2) + &"a".repeat(len % 2);
        let ok = format!("{{\"k\":\"{body}\\n{body}\"}}");
        assert!(read(&ok, Reader::skip).is_some(), "{ok}");
        let bad = format!("{{\"k\":\"{body}\u{1}{body}\"}}");
        assert!(read(&bad, Reader::skip).is_none(), "{bad:?}");
        let cut = format!("{{\"k\":\"{body}{body}");
        assert!(read(&cut, Reader::skip).is_none());
    }
}

#[test]
fn invalid_utf8_is_declined_anywhere() {
    let cases: [&[u8]; 9] = [
        b"\"\xff\"",
        b"\"abc\xc3\"",
        b"\"\xc3(\"",
        b"\"\xc0\xaf\"",
        b"\"\xed\xa0\x80\"",
        b"\"\xf4\x90\x80\x80\"",
        b"\"0123456789abcdef\xe6\x97\"",
        b"\"\xe6\x97\xa5\\n\x80\"",
        b"\"\xf0\x9f\x98\\u0041\"",
    ];
    for bad in cases {
        assert!(read(bad, Reader::string).is_none(), "{bad:?}");
        let mut member = b"{\"k\":".to_vec();
        member.extend_from_slice(bad);
        member.push(b'}');
        assert!(read(&member, Reader::skip).is_none(), "{bad:?}");
    }
    assert!(
        read(b"{\"\xff\":1}", Reader::skip).is_none(),
        "keys are checked"
    );
    assert!(read(b"{\"k\":1}\xc2\xa0", Reader::skip).is_none());
    assert!(
        read("\u{a0}{}", Reader::skip).is_none(),
        "non-ASCII outside strings"
    );
    assert_eq!(
        read(
            "\"0123456789abcdef\u{e9}\u{65e5}\u{1f600}\"",
            Reader::string
        )
        .as_deref(),
        Some("0123456789abcdef\u{e9}\u{65e5}\u{1f600}")
    );
}

proptest::proptest! {
    /// A string of any bytes (but quotes, backslashes and controls) reads exactly when it
    /// is valid UTF-8, as its text.
    #[test]
    fn string_bytes_read_iff_utf8(body in proptest::collection::vec(
        proptest::prop_oneof![
            4 => 0x20u8..0x80,
            3 => 0x80u8..=0xff,
            1 => proptest::sample::select(vec![0xc3u8, 0xa9, 0xe6, 0x97, 0xa5, 0xf0, 0x9f, 0x98, 0x80]),
        ]
        .prop_filter("plain", |c| *c != b'"' && *c != b'\\'),
        0..48,
    )) {
        let mut raw = vec![b'"'];
        raw.extend_from_slice(&body);
        raw.push(b'"');
        let expected = std::str::from_utf8(&body).ok();
        let ours = read(&raw, Reader::string);
        proptest::prop_assert_eq!(ours.as_deref(), expected);
        proptest::prop_assert_eq!(read(&raw, Reader::skip).is_some(), expected.is_some());
    }
}

#[test]
fn strings_decode_like_serde() {
    for raw in [
        r#""plain""#,
        r#""\ud83d\ude00 \"q\" \\ \/ \b\f\r\t""#,
        r#""日本""#,
    ] {
        let ours = read(raw, Reader::string).unwrap();
        let serde: String = serde_json::from_str(raw).unwrap();
        assert_eq!(ours, serde);
    }
    assert!(read(r#""\ud83d""#, Reader::string).is_none());
    assert!(read(r#""\ude00""#, Reader::string).is_none());
    assert!(read(r#""\ud83d\u0041""#, Reader::string).is_none());
    assert!(read("12", Reader::string).is_none());
}
