//! What the proxy lets through before asking anyone: host patterns (the project's `allow` and
//! `deny`, the default allow list), and after the lookup the address guard with its trusted
//! ranges and names.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use intendant_netguard::{self as netguard, Cidr};
use serde::Deserialize;

/// The egress proxy's policy as written (validated by [`EgressPolicy::new`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressSettings {
    /// Host patterns reached without asking (`crates.io`, `*.npmjs.org`).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Host patterns always refused (before `allow` and the default list).
    #[serde(default)]
    pub deny: Vec<String>,
    /// Whether the default allow list of package registries and code hosts applies (default
    /// true).
    pub default_allow: Option<bool>,
    /// Address ranges the address guard lets the proxy connect to although they are not
    /// public (an internal registry: `10.20.0.0/16`).
    #[serde(default)]
    pub allow_addresses: Vec<String>,
    /// Names the proxy resolves itself (`"pkg.internal" = "10.20.0.5"`); the address still
    /// passes the address guard.
    #[serde(default)]
    pub hosts: BTreeMap<String, String>,
}

/// The hosts a `proxy` session reaches without asking, unless `[sandbox.network]
/// default_allow = false`: the common package registries and code hosts, so package managers
/// just work. Each is an exact name; none is a wildcard over a domain anyone can register under.
pub const DEFAULT_ALLOW: &[&str] = &[
    // Rust: the index, the crates, rustup's downloads.
    "crates.io",
    "index.crates.io",
    "static.crates.io",
    "static.rust-lang.org",
    // JavaScript.
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    // Python.
    "pypi.org",
    "files.pythonhosted.org",
    // Go.
    "proxy.golang.org",
    "sum.golang.org",
    // Ruby.
    "rubygems.org",
    "index.rubygems.org",
    // Java.
    "repo.maven.apache.org",
    "repo1.maven.org",
    // Code hosts.
    "github.com",
    "api.github.com",
    "codeload.github.com",
    "objects.githubusercontent.com",
    "raw.githubusercontent.com",
    "gitlab.com",
    "bitbucket.org",
];

/// A host pattern of `[sandbox.network] allow` or `deny`: an exact name (`crates.io`, which
/// does not cover its subdomains), or `*.` and a domain of at least two labels (`*.npmjs.org`:
/// every name below it, not the domain itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    name: String,
    wildcard: bool,
}

impl HostPattern {
    /// Whether `host` (already normalized by [`normalize_host`]) matches.
    pub fn matches(&self, host: &str) -> bool {
        if !self.wildcard {
            return host == self.name;
        }
        host.strip_suffix(self.name.as_str())
            .and_then(|head| head.strip_suffix('.'))
            .is_some_and(|head| !head.is_empty())
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            write!(f, "*.{}", self.name)
        } else {
            f.write_str(&self.name)
        }
    }
}

impl FromStr for HostPattern {
    type Err = String;

    fn from_str(s: &str) -> Result<HostPattern, String> {
        let bad = |why: &str| {
            format!(
                "{s:?} is not a host pattern ({why}): write e.g. \"crates.io\" or \"*.npmjs.org\""
            )
        };
        let (wildcard, rest) = match s.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        if rest.contains('*') {
            return Err(bad("`*` stands only as the whole first label"));
        }
        if !wildcard && netguard::parse_ip_literal(rest).is_some() {
            return normalize_host(rest)
                .map(|name| HostPattern {
                    name,
                    wildcard: false,
                })
                .map_err(|_| bad("not an address"));
        }
        let name = normalize_host(rest).map_err(|why| bad(&why))?;
        if wildcard && name.split('.').count() < 2 {
            return Err(bad(
                "a wildcard over a top-level domain would open all of it",
            ));
        }
        Ok(HostPattern { name, wildcard })
    }
}

/// A host as the proxy compares it: lower case, one trailing dot dropped, an address literal
/// (in any spelling `inet_aton` or a URL parser reads, bracketed or not) in its plain form.
/// Anything but letters, digits, `-`, `_` and non-empty dot-separated labels is refused.
pub fn normalize_host(raw: &str) -> Result<String, String> {
    if let Some(ip) = netguard::parse_ip_literal(raw) {
        return Ok(ip.to_string());
    }
    let lower = raw.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    if name.is_empty() || name.len() > 253 {
        return Err("empty or overlong name".into());
    }
    if name
        .split('.')
        .any(|label| label.is_empty() || label.len() > 63)
    {
        return Err("an empty or overlong label".into());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        return Err("a character no host name has".into());
    }
    Ok(name.to_owned())
}

/// What the host lists say about a host, before any lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostVerdict {
    /// Allowed by this rule (described for the record).
    Allowed(String),
    /// Refused by this rule.
    Denied(String),
    /// In neither list: a human decides (an approval of category `network`).
    Unlisted,
}

/// The proxy's policy, validated once from `[sandbox.network]`.
#[derive(Debug, Clone, Default)]
pub struct EgressPolicy {
    allow: Vec<HostPattern>,
    defaults: Vec<HostPattern>,
    deny: Vec<HostPattern>,
    allow_addresses: Vec<Cidr>,
    hosts: BTreeMap<String, IpAddr>,
}

impl EgressPolicy {
    /// The policy `settings` describe; every bad entry is an error naming it.
    pub fn new(settings: &EgressSettings) -> Result<EgressPolicy, String> {
        let patterns = |key: &str, list: &[String]| {
            list.iter()
                .map(|p| {
                    p.parse::<HostPattern>()
                        .map_err(|e| format!("[sandbox.network] {key}: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let defaults = if settings.default_allow.unwrap_or(true) {
            DEFAULT_ALLOW
                .iter()
                .map(|p| p.parse::<HostPattern>())
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        let allow_addresses = settings
            .allow_addresses
            .iter()
            .map(|c| {
                c.parse::<Cidr>()
                    .map_err(|e| format!("[sandbox.network] allow_addresses: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut hosts = BTreeMap::new();
        for (name, addr) in &settings.hosts {
            let key = normalize_host(name).map_err(|e| {
                format!("[sandbox.network] hosts: {name:?} is not a host name ({e})")
            })?;
            let ip: IpAddr = addr.parse().map_err(|_| {
                format!("[sandbox.network] hosts: {name:?} = {addr:?} is not an IP address")
            })?;
            hosts.insert(key, ip);
        }
        Ok(EgressPolicy {
            allow: patterns("allow", &settings.allow)?,
            defaults,
            deny: patterns("deny", &settings.deny)?,
            allow_addresses,
            hosts,
        })
    }

    /// The verdict of the lists on `host` (normalized): `deny` first, then `allow`, then the
    /// default list. Made on the name as asked, so nothing is looked up for a refused name.
    pub fn verdict(&self, host: &str) -> HostVerdict {
        if let Some(p) = self.deny.iter().find(|p| p.matches(host)) {
            return HostVerdict::Denied(format!("[sandbox.network] deny has \"{p}\""));
        }
        if let Some(p) = self.allow.iter().find(|p| p.matches(host)) {
            return HostVerdict::Allowed(format!("[sandbox.network] allow has \"{p}\""));
        }
        if let Some(p) = self.defaults.iter().find(|p| p.matches(host)) {
            return HostVerdict::Allowed(format!("the default allow list has \"{p}\""));
        }
        HostVerdict::Unlisted
    }

    /// The address the trusted `hosts` map gives `host`, if any.
    pub fn mapped(&self, host: &str) -> Option<IpAddr> {
        self.hosts.get(host).copied()
    }

    /// Why an unlisted name is refused before a human is even asked: a name only a local
    /// network resolves (`localhost`, `*.local`, a single label), unless the `hosts` map names
    /// it. `None`: it may be asked about.
    pub fn local_name(&self, host: &str) -> Option<String> {
        if self.hosts.contains_key(host) || netguard::parse_ip_literal(host).is_some() {
            return None;
        }
        netguard::check_host_name(host).err().map(|e| e.to_string())
    }

    /// Checks an address the proxy is about to connect to for `host`: inside a trusted
    /// `allow_addresses` range, or public (never loopback, private, link-local, multicast,
    /// cloud metadata, or any other special range).
    pub fn check_address(&self, host: &str, ip: IpAddr) -> Result<(), String> {
        if self.allow_addresses.iter().any(|c| c.contains(ip)) {
            return Ok(());
        }
        netguard::check_ip(host, ip).map_err(|e| {
            format!("{e}: the proxy never connects to such an address unless [sandbox.network] allow_addresses (trusted) names its range")
        })
    }
}
