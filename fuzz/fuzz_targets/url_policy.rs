//! Fuzzes the `browse` address policy: whatever URL a model writes, an accepted one names a
//! public address or a name that passed the name policy and is not an IP in disguise, and the
//! verdict is stable when the normalized URL is checked again.
#![no_main]

use intendant_runtime::netguard::{self, Host};
use libfuzzer_sys::fuzz_target;
use std::net::IpAddr;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // As a whole URL, and as a host inside one.
    for candidate in [text.to_string(), format!("http://{text}/")] {
        let Ok(checked) = netguard::check_url(&candidate) else {
            continue;
        };
        match &checked.host {
            Host::Ip(ip) => assert!(netguard::is_public(*ip), "{candidate:?} -> {ip}"),
            Host::Name(name) => {
                assert!(
                    netguard::parse_ip_literal(name).is_none(),
                    "{name} is an IP"
                );
                assert!(netguard::check_host_name(name).is_ok());
                assert!(name.contains('.') && !name.ends_with(".localhost"));
            }
        }
        let again = netguard::check_url(checked.url.as_str()).expect("normalized URL refused");
        assert_eq!(again.host, checked.host);
        if let Some(url::Host::Ipv4(v4)) = checked.url.host() {
            assert_eq!(
                netguard::parse_ip_literal(&v4.to_string()),
                Some(IpAddr::V4(v4))
            );
        }
    }
    // The literal parser and the classifier on their own: embedded forms follow IPv4.
    if let Some(ip) = netguard::parse_ip_literal(&text) {
        if let IpAddr::V4(v4) = ip {
            let mapped = IpAddr::V6(v4.to_ipv6_mapped());
            assert_eq!(netguard::classify(mapped), netguard::classify(ip));
        }
        if !netguard::is_public(ip) {
            assert!(netguard::check_host(&text).is_err());
        }
    }
});
