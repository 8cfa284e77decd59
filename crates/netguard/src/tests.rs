use super::*;
use proptest::prelude::*;

/// Exhaustive table: one representative (and the edges) of every class.
const TABLE: &[(&str, AddrClass)] = &[
    ("0.0.0.0", AddrClass::Unspecified),
    ("0.1.2.3", AddrClass::ThisNetwork),
    ("0.255.255.255", AddrClass::ThisNetwork),
    ("10.0.0.0", AddrClass::Private),
    ("10.255.255.255", AddrClass::Private),
    ("100.63.255.255", AddrClass::Public),
    ("100.64.0.0", AddrClass::Cgnat),
    ("100.127.255.255", AddrClass::Cgnat),
    ("100.128.0.0", AddrClass::Public),
    ("127.0.0.1", AddrClass::Loopback),
    ("127.255.255.254", AddrClass::Loopback),
    ("169.254.169.254", AddrClass::LinkLocal),
    ("172.15.255.255", AddrClass::Public),
    ("172.16.0.0", AddrClass::Private),
    ("172.31.255.255", AddrClass::Private),
    ("172.32.0.0", AddrClass::Public),
    ("192.0.0.170", AddrClass::ProtocolAssignment),
    ("192.0.2.1", AddrClass::Documentation),
    ("192.88.99.1", AddrClass::ProtocolAssignment),
    ("192.168.1.1", AddrClass::Private),
    ("198.17.255.255", AddrClass::Public),
    ("198.18.0.0", AddrClass::Benchmarking),
    ("198.19.255.255", AddrClass::Benchmarking),
    ("198.20.0.0", AddrClass::Public),
    ("198.51.100.7", AddrClass::Documentation),
    ("203.0.113.9", AddrClass::Documentation),
    ("223.255.255.255", AddrClass::Public),
    ("224.0.0.1", AddrClass::Multicast),
    ("239.255.255.255", AddrClass::Multicast),
    ("240.0.0.1", AddrClass::Reserved),
    ("255.255.255.254", AddrClass::Reserved),
    ("255.255.255.255", AddrClass::Broadcast),
    ("1.1.1.1", AddrClass::Public),
    ("8.8.8.8", AddrClass::Public),
    ("93.184.216.34", AddrClass::Public),
    ("::", AddrClass::Unspecified),
    ("::1", AddrClass::Loopback),
    ("::ffff:127.0.0.1", AddrClass::Loopback),
    ("::ffff:10.1.2.3", AddrClass::Private),
    ("::ffff:8.8.8.8", AddrClass::Public),
    ("::ffff:0:127.0.0.1", AddrClass::Loopback),
    ("::127.0.0.1", AddrClass::Loopback),
    ("::169.254.169.254", AddrClass::LinkLocal),
    ("64:ff9b::7f00:1", AddrClass::Loopback),
    ("64:ff9b::a9fe:a9fe", AddrClass::LinkLocal),
    ("64:ff9b::808:808", AddrClass::Public),
    ("64:ff9b:1::1", AddrClass::Private),
    ("2002:7f00:1::", AddrClass::Loopback),
    ("2002:c0a8:101::1", AddrClass::Private),
    ("2002:808:808::1", AddrClass::Public),
    ("100::1", AddrClass::Reserved),
    ("2001::1", AddrClass::ProtocolAssignment),
    ("2001:2::1", AddrClass::Benchmarking),
    ("2001:db8::1", AddrClass::Documentation),
    ("3fff::1", AddrClass::Documentation),
    ("fc00::1", AddrClass::UniqueLocal),
    ("fd12:3456::1", AddrClass::UniqueLocal),
    ("fe80::1", AddrClass::LinkLocal),
    ("febf::1", AddrClass::LinkLocal),
    ("fec0::1", AddrClass::SiteLocal),
    ("ff02::1", AddrClass::Multicast),
    ("5f00::1", AddrClass::Reserved),
    ("4000::1", AddrClass::Reserved),
    ("2606:4700:4700::1111", AddrClass::Public),
    ("2a00:1450::1", AddrClass::Public),
];

#[test]
fn table_of_every_address_class() {
    for (addr, want) in TABLE {
        let ip: IpAddr = addr.parse().unwrap();
        assert_eq!(classify(ip), *want, "{addr}");
        assert_eq!(is_public(ip), *want == AddrClass::Public, "{addr}");
    }
}

/// URLs that must be refused, one per form of attack.
const REFUSED_URLS: &[&str] = &[
    "http://localhost/",
    "http://LOCALHOST./",
    "http://localhost:8080/admin",
    "http://app.localhost/",
    "http://printer.local/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://router.home.arpa/",
    "http://nas.lan/",
    "http://intranet/",
    "http://intranet./",
    "http://127.0.0.1/",
    "http://127.0.0.1.:80/",
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0x7f.1/",
    "http://0x7F.0.0.1/",
    "http://127.1/",
    "http://127.0.1/",
    "http://0177.0.0.1/",
    "http://0177.1/",
    "http://017700000001/",
    "http://0/",
    "http://0.0.0.0/",
    "http://[::]/",
    "http://[::1]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::127.0.0.1]/",
    "http://[64:ff9b::127.0.0.1]/",
    "http://[2002:7f00:1::1]/",
    "http://[fc00::1]/",
    "http://[fd00::1]/",
    "http://[fe80::1]/",
    "http://[fec0::1]/",
    "http://[ff02::1]/",
    "http://10.0.0.1/",
    "http://172.16.0.1/",
    "http://192.168.0.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://100.64.0.1/",
    "http://198.18.0.1/",
    "http://192.0.2.1/",
    "http://198.51.100.1/",
    "http://203.0.113.1/",
    "http://224.0.0.1/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "https://[::ffff:a9fe:a9fe]/",
    "http://%31%32%37.0.0.1/",
    "http://127%2E0%2E0%2E1/",
    "http://\u{ff11}\u{ff12}\u{ff17}.0.0.1/",
    "http://127\u{3002}0\u{3002}0\u{3002}1/",
    "http://LOCALHOST\u{3002}/",
    "http://xn--localhost-/",
    "ftp://example.com/",
    "file:///etc/passwd",
    "gopher://example.com/",
    "data:text/plain,hi",
    "http://user:pw@example.com/",
    "http://example.com@127.0.0.1/",
    "not a url",
    "",
];

#[test]
fn every_refused_url_form_is_refused() {
    for url in REFUSED_URLS {
        assert!(check_url(url).is_err(), "{url} was accepted");
    }
}

#[test]
fn public_urls_pass_with_their_normalized_host() {
    let cases: &[(&str, Host, u16)] = &[
        ("http://example.com/", Host::Name("example.com".into()), 80),
        (
            "https://Example.COM./x",
            Host::Name("example.com".into()),
            443,
        ),
        (
            "http://93.184.216.34:8080/",
            Host::Ip("93.184.216.34".parse().unwrap()),
            8080,
        ),
        (
            "http://1572395042/",
            Host::Ip("93.184.216.34".parse().unwrap()),
            80,
        ),
        (
            "http://[2606:4700::1111]/",
            Host::Ip("2606:4700::1111".parse().unwrap()),
            80,
        ),
        (
            "https://8.8.8.8./",
            Host::Ip("8.8.8.8".parse().unwrap()),
            443,
        ),
    ];
    for (url, host, port) in cases {
        let checked = check_url(url).unwrap();
        assert_eq!(&checked.host, host, "{url}");
        assert_eq!(checked.port, *port, "{url}");
    }
}

#[test]
fn literal_spellings_normalize() {
    let lo = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    for s in [
        "127.0.0.1",
        "127.0.0.1.",
        "2130706433",
        "0x7f000001",
        "0x7f.1",
        "0X7F.0.0.1",
        "127.1",
        "127.0.1",
        "0177.0.0.1",
        "0177.1",
        "017700000001",
        "0x7f.0x0.0x0.0x1",
        "127.00.0.01",
    ] {
        assert_eq!(parse_ip_literal(s), lo, "{s}");
    }
    assert_eq!(parse_ip_literal("[::1]"), Some("::1".parse().unwrap()));
    assert_eq!(
        parse_ip_literal("0x"),
        Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    );
    for s in [
        "",
        ".",
        "1..2",
        "256.1.1.1",
        "1.2.3.4.5",
        "4294967296",
        "08",
        "0x1g",
        "a.b",
        "1.2.3.256",
        "example.com",
        "1.2.3.4..",
        "[1.2.3.4]",
    ] {
        assert_eq!(parse_ip_literal(s), None, "{s}");
    }
}

#[test]
fn mixed_and_empty_answers_are_refused_as_a_whole() {
    let public: IpAddr = "93.184.216.34".parse().unwrap();
    let private: IpAddr = "10.0.0.5".parse().unwrap();
    assert!(check_answers("h.example", &[public]).is_ok());
    assert!(check_answers("h.example", &[public, private]).is_err());
    assert!(check_answers("h.example", &[private, public]).is_err());
    assert!(check_answers("h.example", &[]).is_err());
}

/// Every textual form of `ip` a URL or `inet_aton` accepts.
fn spellings(ip: Ipv4Addr) -> Vec<String> {
    let [a, b, c, d] = ip.octets();
    let n = u32::from(ip);
    vec![
        ip.to_string(),
        format!("{ip}."),
        n.to_string(),
        format!("0x{n:x}"),
        format!("0{n:o}"),
        format!("{a}.{}", n & 0x00ff_ffff),
        format!("{a}.{b}.{}", n & 0xffff),
        format!("0x{a:x}.0x{b:x}.0x{c:x}.0x{d:x}"),
        format!("0{a:o}.0{b:o}.0{c:o}.0{d:o}"),
        format!("[::ffff:{ip}]"),
        format!("[::ffff:{:x}:{:x}]", n >> 16, n & 0xffff),
        format!("[64:ff9b::{ip}]"),
        format!("[2002:{:x}:{:x}::1]", n >> 16, n & 0xffff),
    ]
}

fn blocked_v4() -> impl Strategy<Value = Ipv4Addr> {
    (0..V4_RANGES.len(), any::<u32>()).prop_map(|(i, host_bits)| {
        let (net, len, _) = V4_RANGES[i];
        let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
        Ipv4Addr::from((u32::from_be_bytes(net) & mask) | (host_bits & !mask))
    })
}

proptest! {
    #[test]
    fn every_blocked_v4_in_every_spelling_is_refused(ip in blocked_v4()) {
        prop_assert!(!classify_v4(ip).is_public());
        for s in spellings(ip) {
            prop_assert!(check_url(&format!("http://{s}/")).is_err(), "{s} accepted");
            prop_assert!(check_host(&s).is_err(), "{s} accepted as host");
        }
    }

    #[test]
    fn embedded_forms_match_their_v4_verdict(n in any::<u32>()) {
        let v4 = Ipv4Addr::from(n);
        let want = classify_v4(v4);
        let bits = u128::from(n);
        for v6 in [
            v4.to_ipv6_mapped(),
            Ipv6Addr::from((0xffffu128 << 32) | bits),
            Ipv6Addr::from((0x64_ff9bu128 << 96) | bits),
            Ipv6Addr::from((0x2002u128 << 112) | (bits << 80) | 1),
        ] {
            prop_assert_eq!(classify_v6(v6), want, "{}", v6);
        }
        if n > 1 {
            prop_assert_eq!(classify_v6(Ipv6Addr::from(bits)), want);
        }
    }

    #[test]
    fn literal_parser_agrees_with_the_url_parser(host in "[0-9a-fxA-FX.]{1,24}") {
        // Whatever the URL parser reads as an IPv4 address, the policy reads the same way.
        if let Ok(url) = Url::parse(&format!("http://{host}/"))
            && let Some(url::Host::Ipv4(v4)) = url.host()
        {
            prop_assert_eq!(parse_ip_literal(&host), Some(IpAddr::V4(v4)));
        }
    }

    #[test]
    fn public_v4_spellings_parse_to_the_same_address(n in any::<u32>()) {
        let ip = Ipv4Addr::from(n);
        prop_assume!(classify_v4(ip).is_public());
        for s in spellings(ip).into_iter().filter(|s| !s.starts_with('[')) {
            prop_assert_eq!(parse_ip_literal(&s), Some(IpAddr::V4(ip)), "{}", s);
            let checked = check_url(&format!("http://{s}/")).unwrap();
            prop_assert_eq!(checked.host, Host::Ip(IpAddr::V4(ip)));
        }
    }

    #[test]
    fn v6_outside_global_unicast_is_never_public(bits in any::<u128>()) {
        let ip = Ipv6Addr::from(bits);
        if embedded_v4(ip).is_none() && !in_v6(bits, 0x2000 << 112, 3) {
            prop_assert!(!classify_v6(ip).is_public(), "{}", ip);
        }
    }
}

#[test]
fn address_ranges_parse_contain_and_refuse_garbage() {
    let range: Cidr = "10.20.0.0/16".parse().unwrap();
    assert!(range.contains("10.20.255.1".parse().unwrap()));
    assert!(range.contains("::ffff:10.20.0.5".parse().unwrap()));
    assert!(!range.contains("10.21.0.1".parse().unwrap()));
    assert!(!range.contains("fd00::1".parse().unwrap()));
    assert_eq!(range.to_string(), "10.20.0.0/16");
    let one: Cidr = "10.200.0.2".parse().unwrap();
    assert!(one.contains("10.200.0.2".parse().unwrap()));
    assert!(!one.contains("10.200.0.3".parse().unwrap()));
    let v6: Cidr = "fd00::/8".parse().unwrap();
    assert!(v6.contains("fd12::1".parse().unwrap()));
    for bad in [
        "",
        "10.20.0.0/33",
        "10.20.0.0/",
        "0.0.0.0/0",
        "::/0",
        "10.1/16",
        "x/8",
        "10.0.0.0/-1",
    ] {
        let err = bad.parse::<Cidr>().unwrap_err();
        assert!(err.contains("address range"), "{bad}: {err}");
    }
}
