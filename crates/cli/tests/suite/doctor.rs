//! `intendant doctor`: the built binary's report of which walls are up, in both forms; its
//! Landlock answer agrees with the kernel's own, a simulated missing Landlock or missing user
//! namespaces shows as missing with its consequence, and a state root inside a write root is
//! named. As root and, where root differs, as `nobody`.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::process::Command;

use intendant_runtime::sandbox::{Probe, landlock_abi};
use serde_json::Value;

use super::controller::harness::intendant_bin;
use super::security_controller::setpriv_nobody;

/// Every key of the JSON report.
const CHECKS: &[&str] = &[
    "landlock",
    "landlock_truncate",
    "landlock_ioctl",
    "landlock_scoping",
    "landlock_socket_connect",
    "mount_namespace",
    "hidden_reads",
    "user_namespaces",
    "seccomp",
    "capabilities",
    "cgroup",
    "cgroup_pids",
    "cgroup_memory",
    "cgroup_cpu",
    "out_of_memory",
    "not_root",
    "state_root",
    "tls_roots",
    // Without `[fleet]`, one line saying there is none (suite::fleet tests the rest).
    "fleet",
];

/// A project directory and a state root outside it.
struct Place {
    root: tempfile::TempDir,
}

impl Place {
    fn new() -> Place {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("project")).unwrap();
        Place { root }
    }

    /// `intendant doctor ARGS` in the project, with the state root `home`.
    fn doctor(&self, home: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(intendant_bin());
        cmd.arg("doctor")
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.root.path())
            .env("INTENDANT_HOME", home)
            .envs(env.iter().copied())
            .current_dir(self.root.path().join("project"));
        cmd
    }
}

/// Runs `cmd`, which must succeed; its JSON report.
fn report(mut cmd: Command) -> Value {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "doctor failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "one JSON line: {text}");
    serde_json::from_str(&text).unwrap()
}

/// Every check has its shape: `ok`, a `detail`, and a `consequence` exactly when it is down.
fn assert_shape(report: &Value) {
    let keys: Vec<&str> = report
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut want = CHECKS.to_vec();
    want.sort_unstable();
    assert_eq!(keys, want, "{report:#}");
    for id in CHECKS {
        let check = &report[id];
        let ok = check["ok"]
            .as_bool()
            .unwrap_or_else(|| panic!("{id}: {check}"));
        assert!(
            !check["detail"].as_str().unwrap().is_empty(),
            "{id}: {check}"
        );
        assert_eq!(
            check["consequence"].is_string(),
            !ok,
            "{id}: a consequence exactly when down: {check}"
        );
    }
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

#[test]
fn doctor_json_reports_every_wall_as_the_kernel_answers() {
    let place = Place::new();
    // Outside `/tmp` (a write root), where the test's own directories are.
    let outside = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let home = outside.path().join("state");
    let report = report(place.doctor(&home, &["--json"], &[]));
    assert_shape(&report);

    // The ABI is the kernel's own answer, and each feature follows from it.
    let abi = landlock_abi(Probe::Kernel).ok();
    assert_eq!(
        report["landlock"]["abi"],
        serde_json::json!(abi),
        "{report:#}"
    );
    assert_eq!(report["landlock"]["ok"], abi.is_some_and(|v| v >= 3));
    for (id, min) in [
        ("landlock_truncate", 3),
        ("landlock_ioctl", 5),
        ("landlock_scoping", 6),
        ("landlock_socket_connect", 9),
    ] {
        assert_eq!(report[id]["min_abi"], min);
        assert_eq!(report[id]["ok"], abi.is_some_and(|v| v >= min), "{id}");
    }
    assert_eq!(report["capabilities"]["ok"], true, "{report:#}");
    assert_eq!(report["out_of_memory"]["ok"], true, "{report:#}");
    // Where root has cgroup v1's `cpu` controller, a session's group weighs it as one.
    if running_as_root() && std::path::Path::new("/sys/fs/cgroup/cpu/cpu.shares").exists() {
        assert_eq!(report["cgroup_cpu"]["ok"], true, "{report:#}");
    }
    assert_eq!(report["not_root"]["ok"], !running_as_root());
    assert_eq!(report["state_root"]["path"], home.display().to_string());
    assert_eq!(report["state_root"]["ok"], true, "{report:#}");
    // The probes ran in children: the groups they made are gone.
    for group in report["cgroup"]["groups"].as_array().unwrap() {
        assert!(
            !std::path::Path::new(group.as_str().unwrap()).exists(),
            "{group} left behind"
        );
    }

    // The text form says the same, one line per check.
    let out = place.doctor(&home, &[], &[]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    assert!(text.contains("landlock: "), "{text}");
    assert!(text.contains("state root: "), "{text}");
}

#[test]
fn a_simulated_missing_landlock_or_namespace_shows_as_missing_with_its_consequence() {
    let place = Place::new();
    let home = place.root.path().join("state");
    let report = report(place.doctor(
        &home,
        &["--json"],
        &[
            ("INTENDANT_SANDBOX_SIMULATE_UNAVAILABLE", "1"),
            ("INTENDANT_SANDBOX_SIMULATE_NO_NAMESPACES", "1"),
        ],
    ));
    assert_shape(&report);
    let landlock = &report["landlock"];
    assert_eq!(landlock["ok"], false, "{landlock}");
    assert_eq!(landlock["abi"], Value::Null);
    assert!(
        landlock["detail"].as_str().unwrap().contains("simulated"),
        "{landlock}"
    );
    assert!(
        landlock["consequence"]
            .as_str()
            .unwrap()
            .contains("refuses to start"),
        "{landlock}"
    );
    for id in [
        "landlock_truncate",
        "landlock_scoping",
        "mount_namespace",
        "hidden_reads",
        "user_namespaces",
    ] {
        assert_eq!(report[id]["ok"], false, "{id}: {report:#}");
    }

    let out = place
        .doctor(
            &home,
            &[],
            &[("INTENDANT_SANDBOX_SIMULATE_UNAVAILABLE", "1")],
        )
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("MISSING landlock: "), "{text}");
    assert!(
        text.contains("-> a sandboxed run refuses to start"),
        "{text}"
    );
}

#[test]
fn the_roots_ssl_cert_file_adds_are_counted_and_a_file_without_one_is_named() {
    let place = Place::new();
    let home = place.root.path().join("state");
    let authority = intendant_testkit::tls::authority();
    let found = report(place.doctor(
        &home,
        &["--json"],
        &[("SSL_CERT_FILE", authority.to_str().unwrap())],
    ));
    let tls = &found["tls_roots"];
    assert_eq!(tls["ok"], true, "{tls}");
    let detail = tls["detail"].as_str().unwrap();
    assert!(
        detail.contains(" built-in roots and 1 from SSL_CERT_FILE ("),
        "{tls}"
    );

    let empty = place.root.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let found = report(place.doctor(
        &home,
        &["--json"],
        &[("SSL_CERT_FILE", empty.to_str().unwrap())],
    ));
    let tls = &found["tls_roots"];
    assert_eq!(tls["ok"], false, "{tls}");
    assert!(
        tls["detail"]
            .as_str()
            .unwrap()
            .contains("holds no PEM certificate"),
        "{tls}"
    );
    assert!(
        tls["consequence"].as_str().unwrap().contains("HTTPS"),
        "{tls}"
    );
}

#[test]
fn a_state_root_inside_a_write_root_is_named() {
    let place = Place::new();
    let project = place.root.path().join("project");
    let home = project.join(".state");
    let report = report(place.doctor(&home, &["--json"], &[]));
    let state = &report["state_root"];
    assert_eq!(state["ok"], false, "{state}");
    // The project, or a write root holding it (`/tmp` holds the test's directories).
    let covering = std::path::PathBuf::from(state["inside_write_root"].as_str().unwrap());
    assert!(project.starts_with(&covering), "{state}");
    assert!(
        state["consequence"]
            .as_str()
            .unwrap()
            .contains("INTENDANT_HOME"),
        "{state}"
    );
}

#[test]
fn as_an_ordinary_user_the_namespace_needs_a_user_namespace() {
    if !running_as_root() {
        // Already an ordinary user: the first test covers this user.
        return;
    }
    let place = Place::new();
    let (uid, _) = intendant_testkit::accounts::nobody();
    let stage = place.root.path().join("bin");
    std::fs::create_dir_all(&stage).unwrap();
    let bin = stage.join("intendant");
    std::fs::copy(intendant_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(place.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = place.root.path().join("state");
    let report = report(setpriv_nobody(&bin, &place.doctor(&home, &["--json"], &[])));
    assert_shape(&report);
    assert_eq!(report["not_root"]["ok"], true);
    assert_eq!(report["not_root"]["euid"], uid);
    // An ordinary user marks its own processes as well (before they are made undumpable).
    assert_eq!(report["out_of_memory"]["ok"], true, "{report:#}");
    // An ordinary user's mount namespace lives inside a user namespace, and hiding reads needs
    // it: all or none.
    assert_eq!(
        report["mount_namespace"]["ok"], report["user_namespaces"]["ok"],
        "{report:#}"
    );
    assert_eq!(
        report["mount_namespace"]["ok"], report["hidden_reads"]["ok"],
        "{report:#}"
    );
    // Its Landlock is the same kernel's.
    assert_eq!(
        report["landlock"]["abi"],
        serde_json::json!(landlock_abi(Probe::Kernel).ok())
    );
}
