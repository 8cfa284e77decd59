use super::*;
use std::ffi::OsString;

/// Every name the issue lists, plus the usual suspects; each must be denied in any case.
const PROVIDER_KEYS: &[&str] = &[
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_ADMIN_KEY",
    "OPENAI_ORG_KEY_2",
    "AZURE_OPENAI_KEY",
    "MISTRAL_API_KEY",
    "OPENROUTER_API_KEY",
    "DEEPSEEK_API_KEY",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "HF_TOKEN",
    "SOME_VENDOR_API_KEY",
    "SOME_VENDOR_API_TOKEN",
    "MYAPIKEY",
];

const AMBIENT: &[&str] = &[
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "GH_ENTERPRISE_TOKEN",
    "GITLAB_TOKEN",
    "NPM_TOKEN",
    "NPM_CONFIG__AUTHTOKEN",
    "CARGO_REGISTRY_TOKEN",
    "VAULT_TOKEN",
    "CI_JOB_TOKEN",
    "MY_SERVICE_SECRET",
    "CLIENT_SECRET_FILE",
    "DB_PASSWORD",
    "PGPASSWORD",
    "MYSQL_PWD",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "SERVICE_CREDENTIALS",
    "DEPLOY_PRIVATE_KEY",
    "STORAGE_ACCESS_KEY",
    "KUBECONFIG",
    "DOCKER_CONFIG",
    "NETRC",
    "GITHUB_PAT",
    "NPM_CONFIG__AUTH",
    "DATABASE_URL",
    "SENTRY_DSN",
    "DBUS_SESSION_BUS_ADDRESS",
    "TOKEN_FILE",
];

const HARMLESS: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TERM",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "GOPATH",
    "TOKENIZERS_PARALLELISM",
    "OPENAI_BASE_URL",
    "AWS_REGION",
    "XAUTHORITY",
    "DO_NOT_TRACK",
    "MY_FLAG",
];

fn variants(name: &str) -> [String; 3] {
    [name.to_owned(), name.to_ascii_lowercase(), {
        let mut s = name.to_ascii_lowercase();
        if let Some(first) = s.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        s
    }]
}

#[test]
fn provider_keys_are_denied_as_provider_keys_in_any_case() {
    for name in PROVIDER_KEYS {
        for v in variants(name) {
            assert_eq!(deny_reason(&v), Some(DenyReason::ProviderKey), "{v}");
        }
    }
}

#[test]
fn ambient_credentials_are_denied_in_any_case() {
    for name in AMBIENT {
        for v in variants(name) {
            assert!(is_denied(&v), "{v} must be denied");
        }
    }
}

#[test]
fn harmless_names_are_not_denied() {
    for name in HARMLESS {
        assert_eq!(deny_reason(name), None, "{name}");
    }
}

#[test]
fn no_allowlisted_name_is_denied() {
    for name in ALLOWED_NAMES {
        assert!(
            !is_denied(name),
            "allowlist and deny rules disagree on {name}"
        );
        assert!(is_essential(name));
        assert!(
            is_essential(&name.to_ascii_lowercase()),
            "case-insensitive: {name}"
        );
    }
    assert!(is_essential("LC_MESSAGES"));
    assert!(!is_essential("MY_FLAG"));
}

#[test]
fn passthrough_parses_exact_comma_separated_names() {
    let p = parse_passthrough(" MY_FLAG, PROJECT_MODE ,,MY_FLAG, A*, B=1, C D, x.y-z");
    assert_eq!(p.names, vec!["MY_FLAG", "PROJECT_MODE", "x.y-z"]);
    assert_eq!(p.rejected, vec!["A*", "B=1", "C D"]);
    assert!(p.contains("MY_FLAG"));
    assert!(!p.contains("my_flag"), "passthrough names are exact");
    assert_eq!(parse_passthrough(""), Passthrough::default());
}

#[test]
fn passthrough_cannot_admit_a_denied_name() {
    let all: Vec<&str> = PROVIDER_KEYS.iter().chain(AMBIENT).copied().collect();
    let p = parse_passthrough(&all.join(","));
    assert_eq!(p.names.len(), all.len(), "all parse as names");
    for name in &all {
        assert!(!is_allowed(name, &p), "passthrough admitted {name}");
    }
    let vars: Vec<(String, String)> = all.iter().map(|n| ((*n).to_owned(), "v".into())).collect();
    assert!(filter_env(vars, &p).is_empty());
}

#[test]
fn allowlist_admits_essentials_and_passthrough_only() {
    let p = parse_passthrough("MY_FLAG");
    let vars = vec![
        ("PATH", "/bin"),
        ("Path", "/bin"),
        ("LC_CTYPE", "C"),
        ("MY_FLAG", "1"),
        ("OTHER_FLAG", "1"),
        ("INTENDANT_SANDBOX_WRITE_PATHS", "/tmp"),
        ("OPENAI_API_KEY", "sk-x"),
    ];
    let kept: Vec<&str> = filter_env(vars, &p).into_iter().map(|(k, _)| k).collect();
    assert_eq!(kept, vec!["PATH", "Path", "LC_CTYPE", "MY_FLAG"]);
    let control = parse_passthrough("INTENDANT_LOG_DIR");
    assert!(
        !is_allowed("INTENDANT_LOG_DIR", &control),
        "controls are injected, never inherited"
    );
    assert!(is_control("intendant_log_dir"));
    assert!(!is_control("INTENDANT"));
}

#[test]
#[cfg(unix)]
fn scrub_keeps_unknown_names_and_drops_denied_and_non_utf8() {
    use std::os::unix::ffi::OsStringExt;
    let bad = OsString::from_vec(b"GH_TOKEN\xff".to_vec());
    let vars = vec![
        (OsString::from("PATH"), OsString::from("/bin")),
        (OsString::from("MY_FLAG"), OsString::from("1")),
        (OsString::from("GITHUB_TOKEN"), OsString::from("ghp_x")),
        (bad, OsString::from("x")),
        (OsString::from("openai_api_key"), OsString::from("sk")),
    ];
    let kept: Vec<OsString> = scrub(vars).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        kept,
        vec![OsString::from("PATH"), OsString::from("MY_FLAG")]
    );
}
