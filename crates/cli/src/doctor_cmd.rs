//! `intendant doctor`: which walls are up on this machine, each found by asking the kernel the
//! way a session would, never guessed from versions or files.
//!
//! Landlock's ABI comes from its version query (no side effect); everything that changes the
//! process that asks (Landlock itself, the mount namespace, a user namespace, the seccomp filter,
//! a session cgroup) is tried in a forked child, which reports what happened and exits, so the
//! doctor itself stays as it was (but for the one move a daemon makes too: alone in a delegated
//! cgroup v2 group, it moves into a leaf below it so a session's groups get the controllers).
//! The test hooks of the sandbox (`INTENDANT_SANDBOX_SIMULATE_UNAVAILABLE`,
//! `INTENDANT_SANDBOX_SIMULATE_NO_NAMESPACES`) are honoured, so the report says what a session
//! would meet. Must run before any thread starts (`fork` of a threaded process, and
//! `unshare(CLONE_NEWUSER)`, need one thread).

use std::io::{Read as _, Write as _};
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use intendant_core::containment::{LimitsConfig, SessionContainment};
use intendant_core::prompts::detect_project_root;
use intendant_core::runtime_env::{WriteRoots, write_root_covering};
use intendant_core::session_log::intendant_home;
use intendant_protocol::runtime::{ReadMask, SESSION_OOM_SCORE_ADJ};
use intendant_runtime::sandbox::{self, Probe};
use serde_json::{Map, Value, json};

/// Flags of `intendant doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// One JSON object on stdout (a key per check) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One wall, or one fact about the machine, as found.
#[derive(Debug, Clone)]
struct Check {
    /// Stable key (the JSON object's key).
    id: &'static str,
    /// Whether the wall is up.
    ok: bool,
    /// What was found.
    detail: String,
    /// What its absence means for a session (said only when it is down).
    consequence: &'static str,
    /// Further facts for scripts (the ABI, a path).
    extra: Map<String, Value>,
}

impl Check {
    fn new(id: &'static str, found: Result<String, String>, consequence: &'static str) -> Check {
        let (ok, detail) = match found {
            Ok(detail) => (true, detail),
            Err(detail) => (false, detail),
        };
        Check {
            id,
            ok,
            detail,
            consequence,
            extra: Map::new(),
        }
    }

    fn with(mut self, key: &str, value: Value) -> Check {
        self.extra.insert(key.to_owned(), value);
        self
    }

    fn json(&self) -> Value {
        let mut out = Map::new();
        out.insert("ok".into(), json!(self.ok));
        out.insert("detail".into(), json!(self.detail));
        out.insert(
            "consequence".into(),
            if self.ok {
                Value::Null
            } else {
                json!(self.consequence)
            },
        );
        out.extend(self.extra.clone());
        Value::Object(out)
    }
}

/// What each Landlock ABI adds that a session relies on: key, first ABI, what it refuses, and
/// what its absence leaves open.
const LANDLOCK_FEATURES: &[(&str, i32, &str, &str)] = &[
    (
        "landlock_truncate",
        3,
        "truncate(2) outside the write roots",
        "the sandbox refuses to run: below ABI 3 a command could empty any file it can open",
    ),
    (
        "landlock_ioctl",
        5,
        "ioctl on devices opened outside the write roots",
        "commands may issue ioctls on the devices they can open (the second layer's minimal /dev \
         still limits which)",
    ),
    (
        "landlock_socket_connect",
        9,
        "connect(2) to pathname UNIX sockets outside the write roots",
        "a command can connect to any pathname UNIX socket it can reach (the daemon's socket \
         among them, unless another wall refuses it)",
    ),
];

/// Runs `intendant doctor`.
#[allow(clippy::print_stdout)]
pub fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let checks = checks();
    if args.json {
        let mut out = Map::new();
        for check in &checks {
            out.insert(check.id.to_owned(), check.json());
        }
        println!("{}", Value::Object(out));
    } else {
        print!("{}", text(&checks));
    }
    Ok(ExitCode::SUCCESS)
}

/// Every check, in the order the report shows them.
fn checks() -> Vec<Check> {
    let mut checks = landlock();
    checks.push(mount_namespace());
    checks.push(hidden_reads());
    checks.push(user_namespaces());
    checks.push(scoping());
    checks.push(seccomp());
    checks.push(capabilities());
    checks.extend(cgroups());
    checks.push(out_of_memory());
    checks.push(root());
    checks.push(state_root());
    checks.push(tls_roots());
    // Last: it starts a runtime, after every probe that forks.
    checks.extend(fleet());
    checks
}

/// The fleet of this state root (`[fleet]` of its `intendant.toml`): a line saying there is
/// none, or what the server, JetStream, the fleet's streams and this member's record are.
fn fleet() -> Vec<Check> {
    use intendant_fleet::{FleetConfig, FleetSettings};
    let Ok(home) = intendant_home() else {
        return Vec::new();
    };
    let config = match FleetSettings::read(&home)
        .and_then(|settings| FleetConfig::resolve(settings, None, &home))
    {
        Ok(Some(config)) => config,
        Ok(None) => {
            return vec![Check::new(
                "fleet",
                Ok("none configured ([fleet] url): the daemon serves alone".to_owned()),
                "",
            )];
        }
        Err(e) => {
            return vec![Check::new(
                "fleet",
                Err(e.to_string()),
                "`intendant serve` stops with this reason",
            )];
        }
    };
    let configured = Check::new(
        "fleet",
        Ok(format!("member {:?} of {}", config.name, config.server)),
        "",
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let found = match runtime {
        Ok(runtime) => runtime.block_on(intendant_fleet::doctor::doctor(&config)),
        Err(e) => vec![intendant_fleet::doctor::FleetCheck {
            id: "fleet_server",
            found: Err(format!("no runtime to ask it: {e}")),
        }],
    };
    let mut checks = vec![configured];
    checks.extend(found.into_iter().map(|c| {
        let consequence = match c.id {
            "fleet_server" => "the daemon cannot join the fleet: `intendant serve` stops with exit status 1",
            "fleet_jetstream" => "the fleet needs JetStream: the daemon cannot join",
            "fleet_streams" => "nothing was placed or mirrored yet; the first member that joins makes them",
            _ => "this state root's daemon is not a live member: its sessions are not listed or mirrored, it takes no placed session",
        };
        Check::new(c.id, c.found, consequence)
    }));
    checks
}

/// The human report: one line per check, and the consequence under each that is down.
fn text(checks: &[Check]) -> String {
    let mut out = String::new();
    for check in checks {
        let mark = if check.ok { "ok  " } else { "MISSING" };
        let name = check.id.replace('_', " ");
        out.push_str(&format!("{mark:<8}{name}: {}\n", check.detail));
        if !check.ok {
            out.push_str(&format!("        -> {}\n", check.consequence));
        }
    }
    out
}

/// Landlock: the ABI, whether a ruleset is really enforced (tried in a child), and what the ABI
/// offers.
fn landlock() -> Vec<Check> {
    let probe = Probe::from_env();
    let abi = sandbox::landlock_abi(probe);
    let enforced = match &abi {
        Ok(_) => in_child(|| {
            sandbox::apply(&[], probe)
                .map(|_| "a ruleset is fully enforced".to_owned())
                .map_err(|e| e.to_string())
        }),
        Err(why) => Err(why.clone()),
    };
    let found = match (&abi, enforced) {
        (Ok(v), Ok(how)) => Ok(format!("ABI {v}; {how}")),
        (Ok(v), Err(why)) => Err(format!("ABI {v}, but {why}")),
        (Err(_), Err(why)) => Err(why),
        (Err(why), Ok(_)) => Err(why.clone()),
    };
    let version = abi.as_ref().ok().copied();
    let mut checks = vec![
        Check::new(
            "landlock",
            found,
            "a sandboxed run refuses to start (exit 3); only `--no-sandbox` runs, with no write \
             confinement",
        )
        .with("abi", json!(version)),
    ];
    for (id, min_abi, what, consequence) in LANDLOCK_FEATURES {
        let found = match version {
            Some(v) if v >= *min_abi => Ok(format!("offered ({what}; ABI {min_abi}+)")),
            Some(v) => Err(format!(
                "not offered ({what} needs ABI {min_abi}; this is {v})"
            )),
            None => Err(format!(
                "not offered ({what} needs ABI {min_abi}; no Landlock)"
            )),
        };
        checks.push(Check::new(id, found, consequence).with("min_abi", json!(min_abi)));
    }
    checks
}

/// The second layer's mount namespace, made in a child exactly as the runtime makes it.
fn mount_namespace() -> Check {
    let probe = namespace_probe();
    let found = in_child(|| {
        let roots = sandbox::effective_write_roots(&[]);
        sandbox::mounts::isolate(&roots, &[], &[], probe)
            .map(|()| "a read-only mount namespace can be made".to_owned())
    });
    Check::new(
        "mount_namespace",
        found,
        "reads are not confined (the state root, credentials and .env keys stay readable), chmod, \
         chown, timestamps, extended attributes and device writes outside the write roots are not \
         refused, and control files (intendant.toml, .env, .git/config, .git/hooks) stay writable; \
         `[sandbox] require_full = true` refuses to run instead",
    )
}

/// Whether the second layer can hide a path from commands (the state root, credentials): a
/// directory holding a file is hidden in a child's namespace, which then tries to read the file.
fn hidden_reads() -> Check {
    let probe = namespace_probe();
    let dir = std::env::temp_dir().join(format!("intendant-doctor-{}", std::process::id()));
    let made = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join("secret"), "x"));
    let found = match made {
        Err(e) => Err(format!("cannot make a directory to hide: {e}")),
        Ok(()) => in_child(|| {
            let roots = sandbox::effective_write_roots(&[]);
            let masks = [ReadMask::Hide(dir.clone())];
            sandbox::mounts::isolate(&roots, &[], &masks, probe)?;
            match std::fs::read(dir.join("secret")) {
                Ok(_) => Err("a hidden file stayed readable".to_owned()),
                Err(_) => Ok("a hidden path cannot be read inside the namespace".to_owned()),
            }
        }),
    };
    let _ = std::fs::remove_dir_all(&dir);
    Check::new(
        "hidden_reads",
        found,
        "reads are not confined: commands can read the state root (the daemon's socket and web \
         token among it), ~/.ssh, ~/.aws, the user's Intendant configuration and the keys in .env \
         files",
    )
}

/// Whether an ordinary user can make a user namespace (what its second layer needs); as root,
/// tried by a child that first becomes `nobody`.
fn user_namespaces() -> Check {
    let found = if flag(sandbox::SIMULATE_NO_NAMESPACES_ENV) {
        Err("user namespaces are unavailable (simulated)".to_owned())
    } else {
        in_child(|| {
            // SAFETY: plain id and namespace calls on this single-threaded child.
            unsafe {
                if libc::geteuid() == 0
                    && (libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(NOBODY) != 0
                        || libc::setuid(NOBODY) != 0)
                {
                    return Err(format!(
                        "cannot become an ordinary user to try: {}",
                        std::io::Error::last_os_error()
                    ));
                }
                if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                    return Err(format!(
                        "an ordinary user cannot make a user namespace ({}): sysctl \
                         user.max_user_namespaces, kernel.unprivileged_userns_clone or AppArmor's \
                         kernel.apparmor_restrict_unprivileged_userns refuses it",
                        std::io::Error::last_os_error()
                    ));
                }
            }
            Ok("an ordinary user can make a user namespace".to_owned())
        })
    };
    Check::new(
        "user_namespaces",
        found,
        "runs as an ordinary user get no mount namespace: the second layer is down for them (see \
         mount namespace)",
    )
}

/// Landlock's scoping of signals and abstract UNIX sockets, applied in a child as the runtime
/// applies it.
fn scoping() -> Check {
    let probe = Probe::from_env();
    let found = in_child(|| {
        let status = sandbox::apply(&[], probe).map_err(|e| e.to_string())?;
        match status {
            sandbox::SandboxStatus::Enforced {
                scoping: sandbox::Scoping::Enforced,
                ..
            } => Ok("signals and abstract UNIX sockets stay inside each runtime".to_owned()),
            sandbox::SandboxStatus::Enforced {
                scoping: sandbox::Scoping::SignalsOnly,
                ..
            } => Err("only signals are scoped".to_owned()),
            sandbox::SandboxStatus::Enforced {
                scoping: sandbox::Scoping::Unavailable { reason },
                ..
            } => Err(reason),
            sandbox::SandboxStatus::NotRequested => Err("no sandbox was applied".to_owned()),
        }
    });
    Check::new(
        "landlock_scoping",
        found,
        "a command can signal processes outside its session (the daemon among them) and connect \
         to the host's abstract UNIX sockets; `[sandbox] require_full = true` refuses to run \
         instead",
    )
    .with("min_abi", json!(6))
}

/// What root keeps inside the sandbox: the runtime's capability drop, made in a child and read
/// back from `/proc/self/status`.
fn capabilities() -> Check {
    let found = in_child(|| {
        sandbox::capabilities::drop_unneeded().map_err(|e| e.to_string())?;
        let status = std::fs::read_to_string("/proc/self/status")
            .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
        let set = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .unwrap_or(u64::MAX)
        };
        let dropped = sandbox::capabilities::dropped_mask();
        // An ordinary user holds none to use; its bounding set matters only to root, since
        // no_new_privs keeps execve from raising what a process holds.
        // SAFETY: geteuid cannot fail.
        let bounding = if unsafe { libc::geteuid() } == 0 {
            set("CapBnd:")
        } else {
            0
        };
        let left = (set("CapEff:") | set("CapPrm:") | bounding) & dropped;
        if left == 0 {
            Ok(format!(
                "{} capabilities a command never needs are dropped (CAP_SYS_ADMIN, \
                 CAP_SYS_PTRACE, CAP_SETFCAP, ...)",
                dropped.count_ones()
            ))
        } else {
            Err(format!("capabilities left after the drop: {left:#x}"))
        }
    });
    Check::new(
        "capabilities",
        found,
        "a root command keeps CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_SETFCAP and the rest: it can \
         give a file capabilities or trace processes outside the sandbox",
    )
}

/// The uid and gid of `nobody` on Linux.
const NOBODY: u32 = 65534;

/// The runtime's seccomp filter, installed in a child.
fn seccomp() -> Check {
    let found = in_child(|| {
        sandbox::syscall_filter::install()
            .map(|()| "the syscall filter can be installed".to_owned())
            .map_err(|e| format!("no syscall filter: {e}"))
    });
    Check::new(
        "seccomp",
        found,
        "mounts, new namespaces, ptrace, keyrings, bpf, device nodes and setuid chmod are not \
         refused by a filter",
    )
}

/// A session cgroup with pids and memory limits and a `cpu` group, made and removed in a child.
fn cgroups() -> Vec<Check> {
    // As a daemon readies its group before its first session: alone in a delegated group (a
    // `systemd-run -p Delegate=yes` unit), the doctor moves into its leaf as the daemon would;
    // otherwise the child's notes say why a controller stays out of reach.
    let _ = intendant_core::containment::ready_own_group();
    let made = in_child(|| {
        let limits = LimitsConfig {
            memory_max_mib: Some(1024),
            ..LimitsConfig::default()
        };
        let mut containment = SessionContainment::create("doctor", &limits);
        let dirs = containment.group_dirs();
        let v2 = dirs.iter().any(|d| on_cgroup2(d));
        let (pids, memory) = containment.limits_applied();
        let cpu = containment.weighs_as_one();
        let notes = containment.notes().join("; ");
        containment.end();
        Ok(json!({
            "groups": dirs,
            "v2": v2,
            "pids": pids,
            "memory": memory,
            "cpu": cpu,
            "notes": notes,
        })
        .to_string())
    });
    let report: Value = match &made {
        Ok(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        Err(_) => Value::Null,
    };
    let groups: Vec<String> = report["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(str::to_owned))
        .collect();
    let notes = report["notes"].as_str().unwrap_or_default().to_owned();
    let why = || match &made {
        Err(e) => e.clone(),
        Ok(_) if notes.is_empty() => "not available".to_owned(),
        Ok(_) => notes.clone(),
    };
    let v2 = report["v2"] == true;
    let group = if groups.is_empty() {
        Err(why())
    } else {
        let version = if v2 {
            "on cgroup v2"
        } else {
            "on the cgroup v1 hierarchies only"
        };
        Ok(format!(
            "a session cgroup can be made, {version} ({})",
            groups.join(", ")
        ))
    };
    let limit = |key: &str, name: &str| {
        if report[key] == true {
            Ok(format!("{name} is applied to a session's cgroup"))
        } else if groups.is_empty() {
            Err("no session cgroup (see cgroup)".to_owned())
        } else {
            Err(why())
        }
    };
    vec![
        Check::new(
            "cgroup",
            group,
            "a session's processes are contained by the controller as child subreaper only: \
             killed at the end, with no pids or memory limit",
        )
        .with("groups", json!(groups))
        .with("v2", json!(v2)),
        Check::new(
            "cgroup_pids",
            limit("pids", "pids.max"),
            "`[limits] pids_max` is not applied: a fork bomb is not bounded",
        ),
        Check::new(
            "cgroup_memory",
            limit("memory", "memory.max"),
            "`[limits] memory_max_mib` is not applied",
        ),
        Check::new(
            "cgroup_cpu",
            if report["cpu"] == true {
                Ok("a session's cpu group weighs it as one process against the controller".into())
            } else if groups.is_empty() {
                Err("no session cgroup (see cgroup)".to_owned())
            } else {
                Err("no cpu controller for a session's cgroup".to_owned())
            },
            "a session's busy processes each weigh as much as the controller's in the \
             scheduler (its commands still run at nice 10)",
        ),
    ]
}

/// Whether a runtime's mark for the out-of-memory killer takes, made in a child as the runtime
/// makes it and read back.
fn out_of_memory() -> Check {
    let found = in_child(|| {
        // The controller is not dumpable (its `/proc/self` files are root's), the runtime not
        // yet when it raises its mark: the child is made so for the moment, as the runtime is.
        use intendant_runtime::hardening::{prefer_for_oom_kill, while_dumpable};
        while_dumpable(prefer_for_oom_kill)
            .and_then(|raised| raised)
            .map_err(|e| format!("cannot raise oom_score_adj: {e}"))?;
        let now = std::fs::read_to_string("/proc/self/oom_score_adj")
            .map_err(|e| format!("cannot read oom_score_adj: {e}"))?;
        match now.trim().parse::<i32>() {
            Ok(mark) if mark >= SESSION_OOM_SCORE_ADJ => Ok(format!(
                "a session's processes go before the controller when memory runs out \
                 (oom_score_adj {mark})"
            )),
            _ => Err(format!("oom_score_adj reads {:?} once raised", now.trim())),
        }
    });
    Check::new(
        "out_of_memory",
        found,
        "a command that exhausts memory may have the controller (and every session a daemon \
         holds) killed before itself; `[limits] memory_max_mib` still bounds a session",
    )
}

/// Whether this runs as root.
fn root() -> Check {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    let found = if euid == 0 {
        Err("runs as root".to_owned())
    } else {
        Ok(format!("runs as uid {euid}"))
    };
    Check::new(
        "not_root",
        found,
        "commands run as root: with the sandbox off they can read the controller's memory and \
         descriptors (CAP_SYS_PTRACE), and under it they keep what package tools need as root \
         (CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER, CAP_SETUID...), so file permissions do not \
         stop them where the sandbox does not; prefer an ordinary user",
    )
    .with("euid", json!(euid))
}

/// Where the state root is, and whether the sandbox's write roots (for a session in the current
/// directory's project) cover it.
/// Whom every HTTPS connection trusts: the built-in roots and those `SSL_CERT_FILE` names.
fn tls_roots() -> Check {
    let found = intendant_netguard::http::trust()
        .map(|trust| match trust.extra {
            None => format!("{} built-in roots; SSL_CERT_FILE not set", trust.built_in),
            Some((path, added)) => format!(
                "{} built-in roots and {added} from SSL_CERT_FILE ({path})",
                trust.built_in
            ),
        })
        .map_err(|e| e.to_string());
    Check::new(
        "tls_roots",
        found,
        "no HTTPS connection can start: the model providers, MCP servers over HTTP and `browse` fail",
    )
}

fn state_root() -> Check {
    let home = match intendant_home() {
        Ok(home) => home,
        Err(e) => {
            return Check::new(
                "state_root",
                Err(format!("no state root: {e}")),
                "no session can start",
            );
        }
    };
    let project = std::env::current_dir()
        .ok()
        .map(|cwd| detect_project_root(&cwd));
    let artifacts = home.join("artifacts").join("doctor");
    let paths = WriteRoots::from_env(project, artifacts).write_paths(&[]);
    let covering: Option<PathBuf> = write_root_covering(&paths, &home);
    let found = match &covering {
        None => Ok(format!("{} lies outside every write root", home.display())),
        Some(root) => Err(format!(
            "{} lies inside the write root {}",
            home.display(),
            root.display()
        )),
    };
    Check::new(
        "state_root",
        found,
        "sandboxed commands can rewrite the controller's records and reach the daemon's files \
         there; set INTENDANT_HOME outside every write root",
    )
    .with("path", json!(home))
    .with("inside_write_root", json!(covering))
}

/// Whether `dir` is on a cgroup v2 file system.
fn on_cgroup2(dir: &std::path::Path) -> bool {
    /// `CGROUP2_SUPER_MAGIC`.
    const CGROUP2_MAGIC: i64 = 0x6367_7270;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: `statfs` is plain old data, valid all zeroes.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs fills the struct it is given from a NUL-terminated path that outlives the
    // call.
    unsafe { libc::statfs(path.as_ptr(), &mut fs) == 0 && fs.f_type as i64 == CGROUP2_MAGIC }
}

/// How the runtime would try its namespace: for real, or not (its test hook).
fn namespace_probe() -> sandbox::mounts::NamespaceProbe {
    if flag(sandbox::SIMULATE_NO_NAMESPACES_ENV) {
        sandbox::mounts::NamespaceProbe::SimulateUnavailable
    } else {
        sandbox::mounts::NamespaceProbe::Kernel
    }
}

/// Whether an environment variable is set to a non-empty value.
fn flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Runs `probe` in a forked child, which may change itself (a namespace, a filter, Landlock)
/// and then exits; its answer comes back through a pipe. The caller must be single-threaded.
fn in_child(probe: impl FnOnce() -> Result<String, String>) -> Result<String, String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two descriptors it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!(
            "cannot make a pipe for the probe: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: both descriptors were just made and are owned here alone.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the process is single-threaded (the doctor starts no thread), so the child may
    // allocate and run ordinary code before it exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!(
            "cannot fork the probe: {}",
            std::io::Error::last_os_error()
        ));
    }
    if pid == 0 {
        drop(read_end);
        let (code, text) = match probe() {
            Ok(text) => (0, text),
            Err(text) => (1, text),
        };
        let mut pipe = std::fs::File::from(write_end);
        let _ = pipe.write_all(text.as_bytes());
        drop(pipe);
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    drop(write_end);
    let mut text = String::new();
    let _ = std::fs::File::from(read_end).read_to_string(&mut text);
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        return Err(format!(
            "cannot wait for the probe: {}",
            std::io::Error::last_os_error()
        ));
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(text)
    } else if libc::WIFEXITED(status) {
        Err(text)
    } else {
        Err(format!(
            "the probe died of signal {}",
            libc::WTERMSIG(status)
        ))
    }
}
