//! The address policy of `browse` and of the controller's egress proxy: which URLs, host names
//! and IP addresses may be reached. One copy, in a crate of its own, so the runtime (`browse`)
//! and the controller (`core::egress`) can never disagree.
//!
//! `browse` is not a LAN client, and neither is a command going through the egress proxy
//! (`docs/security.md`). The design decision to know: the policy is an
//! allowlist of *public* space expressed as pure functions, with no switch, variable or flag to
//! turn it off (the proxy's only opening is a trusted list of [`Cidr`] ranges it checks first).
//! An address is public only if it falls in none of the special-purpose ranges;
//! IPv6 must moreover be global unicast (`2000::/3`), and every IPv6 form that embeds an IPv4
//! address (mapped, compatible, NAT64, 6to4) gets the verdict of the embedded address. Host
//! names that only make sense on a local network are refused before any DNS query, and IP
//! literals are normalized in every spelling `inet_aton(3)` or a URL parser would accept
//! (`2130706433`, `0x7f.1`, `127.1`, `0177.0.0.1`, `[::1]`, a trailing dot).
//!
//! A DNS answer is accepted only as a whole: one non-public address refuses all of them.

pub mod http;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use thiserror::Error;
use url::Url;

/// Why an address is not public.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrClass {
    /// Globally routable: may be fetched.
    Public,
    /// `0.0.0.0`, `::`.
    Unspecified,
    /// `0.0.0.0/8` ("this network").
    ThisNetwork,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918 private space.
    Private,
    /// `100.64.0.0/10`, carrier-grade NAT.
    Cgnat,
    /// `169.254.0.0/16`, `fe80::/10` (cloud metadata lives here).
    LinkLocal,
    /// `192.0.0.0/24` IETF protocol assignments, `192.88.99.0/24` 6to4 relays, `2001::/23`.
    ProtocolAssignment,
    /// Documentation ranges: TEST-NET-1/2/3, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `198.18.0.0/15`, `2001:2::/48` benchmarking.
    Benchmarking,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `240.0.0.0/4` and IPv6 outside global unicast (`100::/64` discard, `5f00::/16`...).
    Reserved,
    /// `fc00::/7` unique-local.
    UniqueLocal,
    /// `fec0::/10` site-local (deprecated, still routed by some stacks).
    SiteLocal,
}

impl AddrClass {
    /// Whether this class may be fetched.
    pub fn is_public(self) -> bool {
        match self {
            AddrClass::Public => true,
            AddrClass::Unspecified
            | AddrClass::ThisNetwork
            | AddrClass::Loopback
            | AddrClass::Private
            | AddrClass::Cgnat
            | AddrClass::LinkLocal
            | AddrClass::ProtocolAssignment
            | AddrClass::Documentation
            | AddrClass::Benchmarking
            | AddrClass::Multicast
            | AddrClass::Broadcast
            | AddrClass::Reserved
            | AddrClass::UniqueLocal
            | AddrClass::SiteLocal => false,
        }
    }

    /// A short human description for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            AddrClass::Public => "public",
            AddrClass::Unspecified => "unspecified",
            AddrClass::ThisNetwork => "this-network (0.0.0.0/8)",
            AddrClass::Loopback => "loopback",
            AddrClass::Private => "private",
            AddrClass::Cgnat => "carrier-grade NAT (100.64.0.0/10)",
            AddrClass::LinkLocal => "link-local",
            AddrClass::ProtocolAssignment => "IETF protocol assignment",
            AddrClass::Documentation => "documentation",
            AddrClass::Benchmarking => "benchmarking",
            AddrClass::Multicast => "multicast",
            AddrClass::Broadcast => "broadcast",
            AddrClass::Reserved => "reserved",
            AddrClass::UniqueLocal => "unique-local (fc00::/7)",
            AddrClass::SiteLocal => "site-local (fec0::/10)",
        }
    }
}

/// IPv4 special-purpose ranges, most specific first where they overlap.
const V4_RANGES: &[([u8; 4], u8, AddrClass)] = &[
    ([255, 255, 255, 255], 32, AddrClass::Broadcast),
    ([0, 0, 0, 0], 32, AddrClass::Unspecified),
    ([0, 0, 0, 0], 8, AddrClass::ThisNetwork),
    ([10, 0, 0, 0], 8, AddrClass::Private),
    ([100, 64, 0, 0], 10, AddrClass::Cgnat),
    ([127, 0, 0, 0], 8, AddrClass::Loopback),
    ([169, 254, 0, 0], 16, AddrClass::LinkLocal),
    ([172, 16, 0, 0], 12, AddrClass::Private),
    ([192, 0, 0, 0], 24, AddrClass::ProtocolAssignment),
    ([192, 0, 2, 0], 24, AddrClass::Documentation),
    ([192, 88, 99, 0], 24, AddrClass::ProtocolAssignment),
    ([192, 168, 0, 0], 16, AddrClass::Private),
    ([198, 18, 0, 0], 15, AddrClass::Benchmarking),
    ([198, 51, 100, 0], 24, AddrClass::Documentation),
    ([203, 0, 113, 0], 24, AddrClass::Documentation),
    ([224, 0, 0, 0], 4, AddrClass::Multicast),
    ([240, 0, 0, 0], 4, AddrClass::Reserved),
];

fn in_v4(ip: u32, net: [u8; 4], len: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    ip & mask == u32::from_be_bytes(net) & mask
}

fn in_v6(ip: u128, net: u128, len: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    ip & mask == net & mask
}

/// Classifies an IPv4 address.
pub fn classify_v4(ip: Ipv4Addr) -> AddrClass {
    let bits = u32::from(ip);
    V4_RANGES
        .iter()
        .find(|(net, len, _)| in_v4(bits, *net, *len))
        .map_or(AddrClass::Public, |(_, _, class)| *class)
}

/// The IPv4 address an IPv6 address carries, for the forms that route to it: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-translated (`::ffff:0:a.b.c.d`), IPv4-compatible (`::a.b.c.d`),
/// NAT64 well-known prefix (`64:ff9b::a.b.c.d`) and 6to4 (`2002:aabb:ccdd::/48`).
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let low = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    if in_v6(bits, 0xffff << 32, 96)
        || in_v6(bits, 0xffff << 48, 96)
        || in_v6(bits, 0x64_ff9b << 96, 96)
    {
        return Some(low);
    }
    // ::/96 minus :: and ::1, which are the IPv6 unspecified and loopback addresses.
    if in_v6(bits, 0, 96) && bits > 1 {
        return Some(low);
    }
    if in_v6(bits, 0x2002 << 112, 16) {
        return Some(Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32));
    }
    None
}

/// IPv6 special-purpose ranges inside or around global unicast, most specific first.
const V6_RANGES: &[(u128, u8, AddrClass)] = &[
    (0, 128, AddrClass::Unspecified),
    (1, 128, AddrClass::Loopback),
    (0x0064_ff9b_0001 << 80, 48, AddrClass::Private), // 64:ff9b:1::/48 local-use NAT64
    (0x0100 << 112, 64, AddrClass::Reserved),         // discard-only
    (0x2001_0002 << 96, 48, AddrClass::Benchmarking), // 2001:2::/48
    (0x2001_0db8 << 96, 32, AddrClass::Documentation),
    (0x2001 << 112, 23, AddrClass::ProtocolAssignment), // Teredo, ORCHID, AMT...
    (0x3fff << 112, 20, AddrClass::Documentation),
    (0xfc00 << 112, 7, AddrClass::UniqueLocal),
    (0xfe80 << 112, 10, AddrClass::LinkLocal),
    (0xfec0 << 112, 10, AddrClass::SiteLocal),
    (0xff00 << 112, 8, AddrClass::Multicast),
];

/// Classifies an IPv6 address; embedded IPv4 forms get the IPv4 verdict.
pub fn classify_v6(ip: Ipv6Addr) -> AddrClass {
    if let Some(v4) = embedded_v4(ip) {
        return classify_v4(v4);
    }
    let bits = u128::from(ip);
    if let Some((_, _, class)) = V6_RANGES.iter().find(|(n, l, _)| in_v6(bits, *n, *l)) {
        return *class;
    }
    if in_v6(bits, 0x2000 << 112, 3) {
        AddrClass::Public
    } else {
        AddrClass::Reserved
    }
}

/// Classifies any address.
pub fn classify(ip: IpAddr) -> AddrClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Whether `ip` may be fetched.
pub fn is_public(ip: IpAddr) -> bool {
    classify(ip).is_public()
}

/// Why a URL, host or answer was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NetGuardError {
    /// Not a URL.
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    /// Not `http` or `https`.
    #[error("only http and https URLs can be browsed, not `{0}:`")]
    Scheme(String),
    /// The URL carries a user name or password.
    #[error("URLs with embedded credentials are refused")]
    Credentials,
    /// The URL has no host.
    #[error("URL has no host")]
    NoHost,
    /// A host name that only resolves on a local network.
    #[error("refusing local host name `{host}`: {reason}")]
    LocalName {
        /// The normalized host name.
        host: String,
        /// Which rule refused it.
        reason: &'static str,
    },
    /// An address (literal or resolved) that is not public.
    #[error("refusing {class} address {addr} for `{host}`")]
    Address {
        /// The host as written in the URL.
        host: String,
        /// The offending address.
        addr: IpAddr,
        /// Its class, described.
        class: &'static str,
    },
    /// The DNS answer held no address.
    #[error("no address found for `{0}`")]
    NoAddress(String),
}

/// A URL that passed the policy, with its normalized host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedUrl {
    /// The parsed URL.
    pub url: Url,
    /// Where to connect.
    pub host: Host,
    /// The port (explicit or the scheme's default).
    pub port: u16,
}

/// A checked host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// An IP literal, already checked public.
    Ip(IpAddr),
    /// A DNS name that passed the name policy; its answers still need [`check_answers`].
    Name(String),
}

/// Parses an IP literal in any spelling `inet_aton(3)` or a WHATWG URL parser accepts:
/// bracketed IPv6, dotted IPv4 with 1 to 4 parts, each decimal, octal (leading `0`) or hex
/// (`0x`), and one trailing dot. `None` when `host` is not an IP literal.
pub fn parse_ip_literal(host: &str) -> Option<IpAddr> {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(v6) = host.parse::<Ipv6Addr>() {
        return Some(IpAddr::V6(v6));
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let nums = parts
        .iter()
        .map(|p| parse_v4_part(p))
        .collect::<Option<Vec<u64>>>()?;
    let (last, head) = nums.split_last()?;
    if head.iter().any(|n| *n > 255) {
        return None;
    }
    let last_bits = 8 * (5 - nums.len()) as u32;
    if *last >= 1u64 << last_bits {
        return None;
    }
    let mut value: u64 = *last;
    for (i, n) in head.iter().enumerate() {
        value |= n << (24 - 8 * i as u32);
    }
    u32::try_from(value)
        .ok()
        .map(|v| IpAddr::V4(Ipv4Addr::from(v)))
}

fn parse_v4_part(part: &str) -> Option<u64> {
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            // WHATWG reads a bare `0x` as zero.
            if hex.is_empty() {
                return Some(0);
            }
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    // Leading zeros cannot overflow the parse; anything past 2^32 is out of range anyway.
    let trimmed = digits.trim_start_matches('0');
    if trimmed.len() > 11 {
        return None;
    }
    if trimmed.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(trimmed, radix).ok()
}

/// Suffixes of names that only resolve on a local network.
const LOCAL_SUFFIXES: &[&str] = &[
    ".localhost",
    ".local",
    ".internal",
    ".home.arpa",
    ".localdomain",
    ".lan",
];

/// Checks a DNS host name (not an IP literal): lowercase, one trailing dot ignored.
pub fn check_host_name(host: &str) -> Result<String, NetGuardError> {
    let lower = host.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    let refuse = |reason| {
        Err(NetGuardError::LocalName {
            host: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return Err(NetGuardError::NoHost);
    }
    if name == "localhost" {
        return refuse("localhost");
    }
    if LOCAL_SUFFIXES.iter().any(|s| name.ends_with(s)) {
        return refuse("a local-network domain");
    }
    if !name.contains('.') {
        return refuse("a single-label name resolves through local search domains");
    }
    if name.split('.').any(str::is_empty) {
        return Err(NetGuardError::InvalidUrl(format!(
            "empty label in `{host}`"
        )));
    }
    Ok(name.to_owned())
}

/// Checks one address for `host`.
pub fn check_ip(host: &str, ip: IpAddr) -> Result<(), NetGuardError> {
    let class = classify(ip);
    if class.is_public() {
        Ok(())
    } else {
        Err(NetGuardError::Address {
            host: host.to_owned(),
            addr: ip,
            class: class.describe(),
        })
    }
}

/// Checks a DNS answer as a whole: every address must be public, and there must be one.
pub fn check_answers(host: &str, answers: &[IpAddr]) -> Result<(), NetGuardError> {
    if answers.is_empty() {
        return Err(NetGuardError::NoAddress(host.to_owned()));
    }
    answers.iter().try_for_each(|ip| check_ip(host, *ip))
}

/// Checks a host as written in a URL: an IP literal in any spelling, or a DNS name.
pub fn check_host(host: &str) -> Result<Host, NetGuardError> {
    match parse_ip_literal(host) {
        Some(ip) => check_ip(host, ip).map(|()| Host::Ip(ip)),
        None => check_host_name(host).map(Host::Name),
    }
}

/// Parses and checks a URL to fetch: `http`/`https`, no credentials, an acceptable host.
pub fn check_url(raw: &str) -> Result<CheckedUrl, NetGuardError> {
    let url = Url::parse(raw.trim()).map_err(|e| NetGuardError::InvalidUrl(e.to_string()))?;
    check_parsed_url(url)
}

/// [`check_url`] for an already parsed URL (a redirect target).
pub fn check_parsed_url(url: Url) -> Result<CheckedUrl, NetGuardError> {
    match url.scheme() {
        "http" | "https" => {}
        other => return Err(NetGuardError::Scheme(other.to_owned())),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(NetGuardError::Credentials);
    }
    let host = match url.host() {
        None => return Err(NetGuardError::NoHost),
        Some(url::Host::Ipv4(v4)) => {
            let ip = IpAddr::V4(v4);
            check_ip(&v4.to_string(), ip)?;
            Host::Ip(ip)
        }
        Some(url::Host::Ipv6(v6)) => {
            let ip = IpAddr::V6(v6);
            check_ip(&format!("[{v6}]"), ip)?;
            Host::Ip(ip)
        }
        // The URL parser already turned numeric hosts into addresses; a second look with the
        // permissive parser closes any gap between its rules and the system resolver's.
        Some(url::Host::Domain(name)) => check_host(name)?,
    };
    let port = url
        .port_or_known_default()
        .ok_or_else(|| NetGuardError::InvalidUrl("no port".into()))?;
    Ok(CheckedUrl { url, host, port })
}

/// An address range (`10.20.0.0/16`, `fd00::/8`, or one address): the egress proxy's trusted
/// `allow_addresses`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    len: u8,
}

impl Cidr {
    /// Whether `ip` lies in the range (an IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            IpAddr::V4(_) => ip,
        };
        match (self.net, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => in_v4(u32::from(ip), net.octets(), self.len),
            (IpAddr::V6(net), IpAddr::V6(ip)) => in_v6(u128::from(ip), u128::from(net), self.len),
            (IpAddr::V4(_), IpAddr::V6(_)) | (IpAddr::V6(_), IpAddr::V4(_)) => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;

    /// Plain dotted or colon notation only (no `inet_aton` spellings: a trusted setting is
    /// written once, and an ambiguous one is refused rather than guessed).
    fn from_str(s: &str) -> Result<Cidr, String> {
        let bad = |why: &str| {
            format!("{s:?} is not an address range ({why}): write e.g. \"10.20.0.0/16\"")
        };
        let (addr, len) = match s.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (s, None),
        };
        let net: IpAddr = addr.parse().map_err(|_| bad("not an address"))?;
        let max = match net {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        let len = match len {
            Some(len) => len
                .parse::<u8>()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| bad("prefix length out of range"))?,
            None => max,
        };
        if len == 0 {
            return Err(bad("a /0 range would open every address"));
        }
        Ok(Cidr { net, len })
    }
}

#[cfg(test)]
mod tests;
