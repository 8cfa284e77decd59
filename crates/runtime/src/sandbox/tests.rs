use super::*;
use std::ffi::OsStr;
use std::fs;

fn assert_names_opt_outs(err: &SandboxError) {
    let msg = err.to_string();
    assert!(msg.contains("--no-sandbox"), "{msg}");
    assert!(msg.contains("[sandbox] enabled = false"), "{msg}");
}

#[test]
fn write_paths_split_on_colon_and_skip_empty_entries() {
    let p = parse_write_paths(OsStr::new("/a::/b/c:"));
    assert_eq!(p, vec![PathBuf::from("/a"), PathBuf::from("/b/c")]);
    assert!(parse_write_paths(OsStr::new("")).is_empty());
}

#[test]
fn effective_roots_skip_missing_paths_and_always_add_dev() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let roots = effective_write_roots(&[dir.path().to_path_buf(), missing, dir.path().into()]);
    let real = fs::canonicalize(dir.path()).unwrap();
    assert_eq!(roots, vec![real, PathBuf::from("/dev")]);
}

#[test]
fn every_error_names_both_opt_outs() {
    assert_names_opt_outs(&SandboxError::Unavailable { reason: "x".into() });
    assert_names_opt_outs(&SandboxError::NotEnforced { status: "x".into() });
    assert_names_opt_outs(&SandboxError::Apply("x".into()));
    assert_names_opt_outs(&SandboxError::UnsupportedPlatform);
    for err in [
        SandboxError::SecondLayerUnavailable { reason: "x".into() },
        SandboxError::ScopingUnavailable { reason: "x".into() },
    ] {
        assert_names_opt_outs(&err);
        assert!(err.to_string().contains("require_full = false"), "{err}");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_kernel_without_scoping_is_named_and_said() {
    use landlock::ABI;
    for abi in [ABI::V3, ABI::V4, ABI::V5] {
        let scoping = landlock_impl::scoping(abi, true, false);
        let Scoping::Unavailable { reason } = &scoping else {
            panic!("{abi:?} cannot scope");
        };
        assert!(reason.contains(&format!("ABI {}", abi as i32)), "{reason}");
        assert!(reason.contains("ABI 6"), "{reason}");
        let status = SandboxStatus::Enforced {
            write_roots: Vec::new(),
            second_layer: SecondLayer::Enforced,
            scoping,
            ports: PortWall::NotAsked,
        };
        let warnings = status.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with(SANDBOX_SCOPE_WARNING),
            "{warnings:?}"
        );
        assert!(warnings[0].contains("signal"), "{warnings:?}");
        assert!(warnings[0].contains("require_full = true"), "{warnings:?}");
    }
    for abi in [ABI::V6, ABI::V7] {
        assert_eq!(landlock_impl::scoping(abi, true, false), Scoping::Enforced);
    }
    assert!(matches!(
        landlock_impl::scoping(ABI::V7, false, false),
        Scoping::Unavailable { .. }
    ));
    // A granted user display keeps abstract sockets reachable, signals scoped, and says
    // nothing (a human chose it); an old kernel still says what it lacks.
    assert_eq!(
        landlock_impl::scoping(ABI::V7, true, true),
        Scoping::SignalsOnly
    );
    assert!(matches!(
        landlock_impl::scoping(ABI::V5, true, true),
        Scoping::Unavailable { .. }
    ));
    let whole = SandboxStatus::Enforced {
        write_roots: Vec::new(),
        second_layer: SecondLayer::Enforced,
        scoping: Scoping::Enforced,
        ports: PortWall::Enforced(vec![3128]),
    };
    assert!(whole.warnings().is_empty());
}

#[cfg(target_os = "linux")]
#[test]
fn a_kernel_without_tcp_rules_is_named_and_said_and_bad_ports_are_refused() {
    use landlock::ABI;
    assert_eq!(landlock_impl::port_wall(ABI::V7, None), PortWall::NotAsked);
    assert_eq!(
        landlock_impl::port_wall(ABI::V4, Some(vec![80])),
        PortWall::Enforced(vec![80])
    );
    let wall = landlock_impl::port_wall(ABI::V3, Some(vec![80]));
    let PortWall::Unavailable { reason } = &wall else {
        panic!("ABI 3 has no TCP rules: {wall:?}");
    };
    assert!(
        reason.contains("ABI 3") && reason.contains("ABI 4"),
        "{reason}"
    );
    let status = SandboxStatus::Enforced {
        write_roots: Vec::new(),
        second_layer: SecondLayer::Enforced,
        scoping: Scoping::Enforced,
        ports: wall,
    };
    let warnings = status.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(SANDBOX_PORTS_WARNING),
        "{warnings:?}"
    );
    assert_eq!(parse_connect_ports("").unwrap(), Vec::<u16>::new());
    assert_eq!(parse_connect_ports("8080,3128").unwrap(), [8080, 3128]);
    for bad in ["x", "0", "70000", "80;81", "-1"] {
        assert!(parse_connect_ports(bad).is_err(), "{bad}");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn simulated_missing_landlock_fails_closed() {
    let dir = tempfile::tempdir().unwrap();
    let err = apply(&[dir.path().to_path_buf()], Probe::SimulateUnavailable).unwrap_err();
    assert!(matches!(err, SandboxError::Unavailable { .. }), "{err}");
    assert_names_opt_outs(&err);
}

#[cfg(target_os = "linux")]
#[test]
fn partial_or_missing_enforcement_fails_closed() {
    use landlock::RulesetStatus;
    assert!(landlock_impl::check_enforced(RulesetStatus::FullyEnforced, true).is_ok());
    for (ruleset, no_new_privs, says) in [
        (RulesetStatus::PartiallyEnforced, true, "partially"),
        (RulesetStatus::NotEnforced, true, "not enforced"),
        (RulesetStatus::FullyEnforced, false, "no_new_privs"),
    ] {
        let err = landlock_impl::check_enforced(ruleset, no_new_privs).unwrap_err();
        assert!(matches!(err, SandboxError::NotEnforced { .. }), "{err}");
        assert!(err.to_string().contains(says), "{err}");
        assert_names_opt_outs(&err);
    }
    // Landlock missing, or too old to refuse truncate(2): refused before any ruleset exists.
    for (version, says) in [
        (Err("not implemented".to_owned()), "not implemented"),
        (Ok(1), "ABI 1"),
        (Ok(2), "ABI 2"),
    ] {
        let err = landlock_impl::usable_abi(version).unwrap_err();
        assert!(matches!(err, SandboxError::Unavailable { .. }), "{err}");
        assert!(err.to_string().contains(says), "{err}");
        assert_names_opt_outs(&err);
    }
    assert!(landlock_impl::usable_abi(Ok(MIN_LANDLOCK_ABI)).is_ok());
    assert!(
        landlock_impl::usable_abi(Ok(99)).is_ok(),
        "a newer kernel uses the newest ABI known"
    );
}

#[cfg(not(target_os = "linux"))]
#[test]
fn other_platforms_refuse_a_requested_sandbox() {
    let err = apply(&[], Probe::Kernel).unwrap_err();
    assert!(matches!(err, SandboxError::UnsupportedPlatform));
}

#[cfg(target_os = "linux")]
#[test]
fn kernel_offers_landlock_abi_3_or_later() {
    // The suite's attack tests rely on a real Landlock; say so loudly if the machine lacks it.
    let abi = landlock_impl::probe_kernel().unwrap();
    assert!(abi >= MIN_LANDLOCK_ABI, "kernel Landlock ABI {abi}");
}

/// Runs `f` in a fresh thread restricted to `roots`: Landlock confines only the calling
/// thread, so the test process itself stays unconfined.
#[cfg(target_os = "linux")]
fn in_sandboxed_thread<T: Send + 'static>(
    roots: Vec<PathBuf>,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        let status = apply(&roots, Probe::Kernel).unwrap();
        assert!(matches!(status, SandboxStatus::Enforced { .. }));
        f()
    })
    .join()
    .unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn landlock_confines_writes_to_the_granted_roots() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let inside = dir.path().join("inside");
    let outside = dir.path().join("outside");
    fs::create_dir_all(&inside).unwrap();
    fs::create_dir_all(&outside).unwrap();
    let victim = outside.join("victim.txt");
    fs::write(&victim, "original").unwrap();
    fs::write(inside.join("mine.txt"), "mine").unwrap();
    symlink(&victim, inside.join("link")).unwrap();

    let (i, o, v) = (inside.clone(), outside.clone(), victim.clone());
    let outcomes = in_sandboxed_thread(vec![inside.clone()], move || {
        vec![
            ("write inside", fs::write(i.join("new.txt"), "ok").is_ok()),
            ("mkdir inside", fs::create_dir(i.join("sub")).is_ok()),
            ("read outside", fs::read_to_string(&v).is_ok()),
            ("write /dev/null", fs::write("/dev/null", "x").is_ok()),
            ("create outside", fs::write(o.join("new.txt"), "x").is_ok()),
            ("overwrite outside", fs::write(&v, "pwned").is_ok()),
            (
                "truncate outside",
                fs::OpenOptions::new()
                    .write(true)
                    .open(&v)
                    .and_then(|f| f.set_len(0))
                    .is_ok(),
            ),
            (
                "write via symlink",
                fs::write(i.join("link"), "pwned").is_ok(),
            ),
            (
                "hard link outside file in",
                fs::hard_link(&v, i.join("hard")).is_ok(),
            ),
            (
                "rename out",
                fs::rename(i.join("mine.txt"), o.join("moved.txt")).is_ok(),
            ),
            ("remove outside", fs::remove_file(&v).is_ok()),
        ]
    });
    let expected_ok = [
        "write inside",
        "mkdir inside",
        "read outside",
        "write /dev/null",
    ];
    for (what, ok) in outcomes {
        assert_eq!(ok, expected_ok.contains(&what), "{what}");
    }
    assert_eq!(fs::read_to_string(&victim).unwrap(), "original");
    assert!(!outside.join("new.txt").exists());
    assert!(!outside.join("moved.txt").exists());
    assert!(inside.join("mine.txt").exists());
}

#[cfg(target_os = "linux")]
#[test]
fn empty_write_set_still_restricts_everything_but_dev() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("f");
    let t = target.clone();
    let ok = in_sandboxed_thread(Vec::new(), move || fs::write(&t, "x").is_ok());
    assert!(!ok);
    assert!(!target.exists());
}
