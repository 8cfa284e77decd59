//! The write sandbox, applied in-process before the first command runs: Landlock, and a second
//! layer of a mount namespace and a seccomp filter.
//!
//! Posture (`docs/security.md`): the filesystem stays readable but for the read masks, only the
//! roots in [`SANDBOX_WRITE_PATHS_ENV`] plus `/dev` are writable, nonexistent roots are skipped.
//! The design decision to know: it fails closed. When a sandbox is requested and the kernel
//! cannot enforce *every* filesystem right of the best ABI it offers (no Landlock, Landlock
//! disabled, an ABI older than 3 that cannot stop `truncate(2)`, or a partially enforced
//! ruleset), [`apply_from_env`] returns an error naming the explicit opt-outs and the runtime
//! refuses to run. It never degrades silently.
//!
//! The second layer covers what Landlock does not see: metadata (`chmod`, `chown`, timestamps,
//! extended attributes) outside the write roots and devices (`mounts`: the tree read-only but
//! the roots, a minimal `/dev`, the project's control files read-only, and `masks`: the state
//! root, credentials and other homes hidden, `.env` files without their keys; `syscall_filter`: no
//! device creation, mounts, `ptrace`, keyrings, `bpf` and the like). It takes its roots from
//! the same [`effective_write_roots`] as Landlock, so the layers always agree. Where the kernel
//! refuses the namespace (an ordinary user without user namespaces), the runtime runs with
//! Landlock and the filter and says so on stderr ([`SANDBOX_DEGRADED_WARNING`]), unless
//! [`SANDBOX_REQUIRE_FULL_ENV`] asks it to refuse.
//!
//! Landlock also keeps signals and abstract UNIX socket connects inside the sandbox (its
//! scoping, ABI 6+): a command can signal or connect only to processes of its own runtime.
//! Once a human granted the user's own display, abstract sockets are left unscoped (X clients
//! reach the display through one and do not fall back to its path socket on `EPERM`); signals
//! stay scoped. Where the kernel's Landlock cannot scope, the runtime runs and says so
//! ([`SANDBOX_SCOPE_WARNING`]), unless [`SANDBOX_REQUIRE_FULL_ENV`] asks it to refuse. Root
//! inside the sandbox loses the capabilities no build or package tool needs
//! ([`capabilities`]), after the mount namespace (which needs `CAP_SYS_ADMIN`) is built.
//!
//! Where the controller names the TCP ports commands may connect to
//! ([`SANDBOX_CONNECT_PORTS_ENV`]: a session without a network namespace of its own), the
//! ruleset also handles TCP connects and allows those ports only (ABI 4+; before, the runtime
//! runs without and says so ([`SANDBOX_PORTS_WARNING`]), unless `require_full` refuses).
//!
//! Landlock restricts the calling thread and everything it later spawns or executes, so `main`
//! calls this before starting any thread; structured edits run in this process and obey the
//! same wall as shell commands.
//!
//! [`SIMULATE_UNAVAILABLE_ENV`] makes the kernel probe report "no Landlock", and
//! [`SIMULATE_NO_NAMESPACES_ENV`] makes the namespace step report "no user namespaces", and
//! [`SIMULATE_NO_SCOPES_ENV`] builds the ruleset as for a kernel without scoping. They
//! can only turn a requested sandbox into a refusal or a smaller one that says so, never weaken
//! it silently, so they are honoured in release builds too; the fail-closed tests use them.

use std::path::{Path, PathBuf};
use thiserror::Error;

pub use intendant_protocol::network::SANDBOX_CONNECT_PORTS_ENV;
pub use intendant_protocol::runtime::{
    ReadMask, SANDBOX_DEGRADED_WARNING, SANDBOX_PORTS_WARNING, SANDBOX_READ_MASKS_ENV,
    SANDBOX_REQUIRE_FULL_ENV, SANDBOX_SCOPE_WARNING, SANDBOX_WRITE_PATHS_ENV,
    USER_DISPLAY_GRANTED_ENV,
};

#[cfg(target_os = "linux")]
pub mod capabilities;
#[cfg(target_os = "linux")]
pub mod control_files;
#[cfg(target_os = "linux")]
pub mod masks;
#[cfg(target_os = "linux")]
mod mount_calls;
#[cfg(target_os = "linux")]
pub mod mounts;
#[cfg(target_os = "linux")]
pub mod syscall_filter;

/// When set to a non-empty value, the kernel probe reports Landlock as unavailable (test hook;
/// it can only make the runtime refuse, never run with less confinement).
pub const SIMULATE_UNAVAILABLE_ENV: &str = "INTENDANT_SANDBOX_SIMULATE_UNAVAILABLE";

/// When set to a non-empty value, the mount namespace is reported unavailable without trying
/// (test hook; it can only remove the second layer's namespace, which the runtime then says,
/// or, with [`SANDBOX_REQUIRE_FULL_ENV`], refuse to run).
pub const SIMULATE_NO_NAMESPACES_ENV: &str = "INTENDANT_SANDBOX_SIMULATE_NO_NAMESPACES";

/// When set to a non-empty value, Landlock's signal and abstract-socket scoping is left out as
/// on a kernel before ABI 6 (test hook; the runtime then says so, or, with
/// [`SANDBOX_REQUIRE_FULL_ENV`], refuses to run).
pub const SIMULATE_NO_SCOPES_ENV: &str = "INTENDANT_SANDBOX_SIMULATE_NO_SCOPES";

/// First Landlock ABI with TCP rules (`NetPort`, Linux 6.7).
pub const TCP_LANDLOCK_ABI: i32 = 4;

/// First Landlock ABI that scopes signals and abstract UNIX sockets (Linux 6.12).
pub const SCOPED_LANDLOCK_ABI: i32 = 6;

/// Lowest Landlock ABI accepted: ABI 3 is the first that can refuse `truncate(2)` outside the
/// writable roots; below it a "sandboxed" command could still empty any file it can open.
pub const MIN_LANDLOCK_ABI: i32 = 3;

/// Roots always granted write access: terminal and PTY nodes, `/dev/null` (DAC still applies).
pub const ALWAYS_WRITABLE: &[&str] = &["/dev"];

/// The explicit opt-outs every refusal names.
const OPT_OUTS: &str = "to run without a write sandbox, opt out explicitly with `intendant --no-sandbox` or `[sandbox] enabled = false` in intendant.toml";

/// The opt-out a refusal for a missing second layer names.
const SECOND_LAYER_OPT_OUT: &str = "to run with Landlock alone, set `[sandbox] require_full = false` in intendant.toml (or opt out of the sandbox with `intendant --no-sandbox` or `[sandbox] enabled = false`)";

/// What was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxStatus {
    /// No sandbox was requested.
    NotRequested,
    /// Landlock is enforced with these writable roots.
    Enforced {
        /// Roots that existed and were granted write access.
        write_roots: Vec<std::path::PathBuf>,
        /// Whether the second layer is in place too.
        second_layer: SecondLayer,
        /// Whether signals and abstract UNIX sockets are kept inside the sandbox.
        scoping: Scoping,
        /// Which TCP ports commands may connect to.
        ports: PortWall,
    },
}

/// The TCP ports commands may connect to ([`SANDBOX_CONNECT_PORTS_ENV`], Landlock ABI 4+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortWall {
    /// Not asked for: every port (the session's own network namespace, or the host's network
    /// by choice).
    NotAsked,
    /// A TCP connect to any other port is refused (`EACCES`), to any address.
    Enforced(Vec<u16>),
    /// Asked for, but the kernel's Landlock has no TCP rules; the runtime runs without it and
    /// says so.
    Unavailable {
        /// Why.
        reason: String,
    },
}
/// Landlock's scoping of signals and abstract UNIX socket connects (ABI 6+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scoping {
    /// A command signals and connects to abstract sockets of its own runtime's processes only.
    Enforced,
    /// Signals are scoped; abstract sockets are not, because a human granted the user's own
    /// display, which X clients reach through one.
    SignalsOnly,
    /// Not in place; the runtime runs without it, and says so.
    Unavailable {
        /// Why: the kernel's ABI, or the test hook.
        reason: String,
    },
}

/// The state of the second layer (mount namespace and syscall filter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecondLayer {
    /// Both the namespace and the filter are in place.
    Enforced,
    /// Not (fully) in place; the runtime runs with what is, and says so.
    Unavailable {
        /// What could not be set up, and why.
        reason: String,
    },
}

impl SandboxStatus {
    /// The warnings to print once each, one line apiece: a missing second layer, missing
    /// scoping.
    pub fn warnings(&self) -> Vec<String> {
        let (second_layer, scoping, ports) = match self {
            SandboxStatus::Enforced {
                second_layer,
                scoping,
                ports,
                ..
            } => (second_layer, scoping, ports),
            SandboxStatus::NotRequested => return Vec::new(),
        };
        let mut out = Vec::new();
        match second_layer {
            SecondLayer::Unavailable { reason } => out.push(format!(
                "{SANDBOX_DEGRADED_WARNING}: {reason}; running with Landlock only, which does not refuse chmod, chown, timestamps, extended attributes or device writes outside the write roots, and reads are not confined (the state root, the credentials in the home directory and the keys in .env files stay readable); set `[sandbox] require_full = true` to refuse to run instead"
            )),
            SecondLayer::Enforced => {}
        }
        match scoping {
            Scoping::Unavailable { reason } => out.push(format!(
                "{SANDBOX_SCOPE_WARNING}: {reason}; a command can signal the user's other processes and connect to their abstract UNIX sockets; set `[sandbox] require_full = true` to refuse to run instead"
            )),
            Scoping::Enforced | Scoping::SignalsOnly => {}
        }
        match ports {
            PortWall::Unavailable { reason } => out.push(format!(
                "{SANDBOX_PORTS_WARNING}: {reason}; commands can connect to any TCP port of the host and beyond"
            )),
            PortWall::NotAsked | PortWall::Enforced(_) => {}
        }
        out
    }
}

/// Why the sandbox could not be applied; the runtime refuses to run.
#[derive(Debug, Error)]
pub enum SandboxError {
    /// The kernel offers no usable Landlock (not built in, disabled, or too old an ABI).
    #[error(
        "write sandbox requested but Landlock is unavailable: {reason}; refusing to run unconfined; {OPT_OUTS}"
    )]
    Unavailable {
        /// What the kernel probe found.
        reason: String,
    },
    /// The ruleset was applied but the kernel reports it is not (fully) enforced.
    #[error(
        "write sandbox requested but the kernel reports it {status}; refusing to run unconfined; {OPT_OUTS}"
    )]
    NotEnforced {
        /// The enforcement status reported by the kernel.
        status: String,
    },
    /// Building or applying the ruleset failed.
    #[error(
        "write sandbox requested but could not be applied: {0}; refusing to run unconfined; {OPT_OUTS}"
    )]
    Apply(String),
    /// `require_full` was asked for and the second layer could not be set up.
    #[error(
        "full sandbox required (`[sandbox] require_full = true`) but its second layer could not be set up: {reason}; refusing to run; {SECOND_LAYER_OPT_OUT}"
    )]
    SecondLayerUnavailable {
        /// What could not be set up, and why.
        reason: String,
    },
    /// `require_full` was asked for and Landlock cannot limit the ports commands connect to.
    #[error(
        "full sandbox required (`[sandbox] require_full = true`) but the ports commands connect to cannot be limited: {reason}; refusing to run; set `[sandbox] require_full = false` in intendant.toml to run without that"
    )]
    PortsUnavailable {
        /// Why.
        reason: String,
    },
    /// `require_full` was asked for and Landlock cannot scope signals and abstract sockets.
    #[error(
        "full sandbox required (`[sandbox] require_full = true`) but signals and abstract UNIX sockets cannot be kept inside the session: {reason}; refusing to run; to run without that, set `[sandbox] require_full = false` in intendant.toml (or opt out of the sandbox with `intendant --no-sandbox` or `[sandbox] enabled = false`)"
    )]
    ScopingUnavailable {
        /// Why scoping is missing.
        reason: String,
    },
    /// This platform has no in-process write sandbox yet.
    #[error(
        "write sandbox requested but not supported on this platform; refusing to run unconfined; {OPT_OUTS}"
    )]
    UnsupportedPlatform,
}

/// How to probe the kernel: for real, or pretending Landlock is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Ask the kernel.
    Kernel,
    /// Report Landlock as not implemented (the fail-closed test hook).
    SimulateUnavailable,
}

impl Probe {
    /// [`Probe::SimulateUnavailable`] when [`SIMULATE_UNAVAILABLE_ENV`] is set non-empty.
    pub fn from_env() -> Probe {
        match std::env::var_os(SIMULATE_UNAVAILABLE_ENV) {
            Some(v) if !v.is_empty() => Probe::SimulateUnavailable,
            Some(_) | None => Probe::Kernel,
        }
    }
}

/// The kernel's Landlock ABI version, or why there is none (`intendant doctor`). The query has
/// no side effect; [`Probe::SimulateUnavailable`] answers "none" as the sandbox would see it.
#[cfg(target_os = "linux")]
pub fn landlock_abi(probe: Probe) -> Result<i32, String> {
    landlock_impl::kernel_abi(probe)
}

/// No Landlock off Linux.
#[cfg(not(target_os = "linux"))]
pub fn landlock_abi(probe: Probe) -> Result<i32, String> {
    let _ = probe;
    Err("Landlock is Linux-only".into())
}

/// Splits the value of [`SANDBOX_WRITE_PATHS_ENV`] into roots; empty entries are ignored.
pub fn parse_write_paths(value: &std::ffi::OsStr) -> Vec<PathBuf> {
    std::env::split_paths(value)
        .filter(|p| !p.as_os_str().is_empty())
        .collect()
}

/// The roots that will actually be granted: the requested ones that exist, plus
/// [`ALWAYS_WRITABLE`], canonicalized (so the report names real locations), deduplicated.
pub fn effective_write_roots(requested: &[PathBuf]) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    let always = ALWAYS_WRITABLE.iter().map(Path::new);
    for p in requested.iter().map(PathBuf::as_path).chain(always) {
        if let Ok(real) = std::fs::canonicalize(p)
            && !roots.contains(&real)
        {
            roots.push(real);
        }
    }
    roots
}

/// Whether an environment variable is set to a non-empty value.
fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Applies the sandbox requested by [`SANDBOX_WRITE_PATHS_ENV`] to this process: both layers,
/// with [`SANDBOX_REQUIRE_FULL_ENV`] deciding whether a missing second layer is a refusal.
pub fn apply_from_env() -> Result<SandboxStatus, SandboxError> {
    match std::env::var_os(SANDBOX_WRITE_PATHS_ENV) {
        Some(v) if !v.is_empty() => apply_layers(
            &parse_write_paths(&v),
            &read_masks_from_env()?,
            Probe::from_env(),
            Layers {
                namespaces: !env_flag(SIMULATE_NO_NAMESPACES_ENV),
                scopes: !env_flag(SIMULATE_NO_SCOPES_ENV),
                user_display: env_flag(USER_DISPLAY_GRANTED_ENV),
                require_full: env_flag(SANDBOX_REQUIRE_FULL_ENV),
                connect_ports: connect_ports_from_env()?,
            },
        ),
        Some(_) | None => Ok(SandboxStatus::NotRequested),
    }
}

/// The read masks of [`SANDBOX_READ_MASKS_ENV`]; a value the runtime cannot read is a refusal.
fn read_masks_from_env() -> Result<Vec<ReadMask>, SandboxError> {
    std::env::var_os(SANDBOX_READ_MASKS_ENV)
        .map(|v| intendant_protocol::runtime::decode_read_masks(&v))
        .transpose()
        .map(Option::unwrap_or_default)
        .map_err(SandboxError::Apply)
}

/// The ports of [`SANDBOX_CONNECT_PORTS_ENV`] (`None` when unset); a value that is not a list
/// of ports is a refusal.
fn connect_ports_from_env() -> Result<Option<Vec<u16>>, SandboxError> {
    std::env::var_os(SANDBOX_CONNECT_PORTS_ENV)
        .map(|v| parse_connect_ports(&v.to_string_lossy()))
        .transpose()
}

/// `8080,3128` as ports; empty is none at all.
pub fn parse_connect_ports(value: &str) -> Result<Vec<u16>, SandboxError> {
    value
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<u16>().ok().filter(|&n| n != 0).ok_or_else(|| {
                SandboxError::Apply(format!(
                    "{SANDBOX_CONNECT_PORTS_ENV} must list TCP ports separated by commas, not {value:?}"
                ))
            })
        })
        .collect()
}

/// What [`apply_layers`] may use, and whether anything missing is a refusal.
#[derive(Debug, Clone)]
struct Layers {
    /// Try the mount namespace (false: the test hook says it is unavailable).
    namespaces: bool,
    /// Scope signals and abstract sockets where the kernel can (false: the test hook).
    scopes: bool,
    /// The user's own display is granted: abstract sockets stay unscoped.
    user_display: bool,
    /// Refuse to run when the second layer or scoping is missing.
    require_full: bool,
    /// The only TCP ports commands may connect to (`None`: not asked).
    connect_ports: Option<Vec<u16>>,
}

/// Both layers: the Landlock probe first (a missing Landlock refuses before anything changes),
/// then the mount namespace (it must precede Landlock, which forbids mounting), root's
/// capabilities dropped, Landlock, and the syscall filter last. The process must still be
/// single-threaded.
#[cfg(target_os = "linux")]
fn apply_layers(
    requested: &[PathBuf],
    masks: &[ReadMask],
    probe: Probe,
    layers: Layers,
) -> Result<SandboxStatus, SandboxError> {
    let Layers {
        namespaces,
        scopes,
        user_display,
        require_full,
        connect_ports,
    } = layers;
    let abi = landlock_impl::abi(probe)?;
    let scoping = landlock_impl::scoping(abi, scopes, user_display);
    let ports = landlock_impl::port_wall(abi, connect_ports);
    if let (PortWall::Unavailable { reason }, true) = (&ports, require_full) {
        return Err(SandboxError::PortsUnavailable {
            reason: reason.clone(),
        });
    }
    if let (Scoping::Unavailable { reason }, true) = (&scoping, require_full) {
        return Err(SandboxError::ScopingUnavailable {
            reason: reason.clone(),
        });
    }
    let roots = effective_write_roots(requested);
    let ns_probe = if namespaces {
        mounts::NamespaceProbe::Kernel
    } else {
        mounts::NamespaceProbe::SimulateUnavailable
    };
    let guards = control_files::guards(&roots, &control_files::ToolchainHomes::from_env());
    let namespace = mounts::isolate(&roots, &guards, masks, ns_probe)
        .map_err(|e| format!("no read-only mount namespace: {e}"));
    if let (Err(reason), true) = (&namespace, require_full) {
        return Err(SandboxError::SecondLayerUnavailable {
            reason: reason.clone(),
        });
    }
    let capabilities =
        capabilities::drop_unneeded().map_err(|e| format!("root's capabilities not dropped: {e}"));
    landlock_impl::restrict(abi, &roots, &scoping, &ports)?;
    let filter = syscall_filter::install().map_err(|e| format!("no syscall filter: {e}"));
    let problems: Vec<String> = [namespace, capabilities, filter]
        .into_iter()
        .filter_map(Result::err)
        .collect();
    let second_layer = if problems.is_empty() {
        SecondLayer::Enforced
    } else if require_full {
        return Err(SandboxError::SecondLayerUnavailable {
            reason: problems.join("; "),
        });
    } else {
        SecondLayer::Unavailable {
            reason: problems.join("; "),
        }
    };
    Ok(SandboxStatus::Enforced {
        write_roots: roots,
        second_layer,
        scoping,
        ports,
    })
}

/// Other platforms have no in-process sandbox yet: a requested sandbox is refused.
#[cfg(not(target_os = "linux"))]
fn apply_layers(
    requested: &[PathBuf],
    masks: &[ReadMask],
    probe: Probe,
    layers: Layers,
) -> Result<SandboxStatus, SandboxError> {
    let _ = (requested, masks, probe, layers);
    Err(SandboxError::UnsupportedPlatform)
}

/// Restricts the calling thread (and everything it spawns afterwards) with Landlock alone to
/// writing beneath `requested` and [`ALWAYS_WRITABLE`]. An empty `requested` still restricts:
/// every write outside `/dev` is refused. The runtime itself applies both layers
/// ([`apply_from_env`]); this one serves threads that cannot take a namespace.
#[cfg(target_os = "linux")]
pub fn apply(requested: &[PathBuf], probe: Probe) -> Result<SandboxStatus, SandboxError> {
    landlock_impl::apply(requested, probe)
}

/// Other platforms have no in-process sandbox yet: a requested sandbox is refused.
#[cfg(not(target_os = "linux"))]
pub fn apply(requested: &[PathBuf], probe: Probe) -> Result<SandboxStatus, SandboxError> {
    let _ = (requested, probe);
    Err(SandboxError::UnsupportedPlatform)
}

#[cfg(target_os = "linux")]
mod landlock_impl {
    use super::{
        MIN_LANDLOCK_ABI, PortWall, Probe, SCOPED_LANDLOCK_ABI, SandboxError, SandboxStatus,
        Scoping, SecondLayer, TCP_LANDLOCK_ABI, effective_write_roots,
    };
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
    };
    use std::path::PathBuf;

    /// `LANDLOCK_CREATE_RULESET_VERSION`: ask the kernel for its ABI version.
    const CREATE_RULESET_VERSION: libc::c_uint = 1;

    /// The kernel's Landlock ABI version, or why there is none.
    pub(super) fn kernel_abi(probe: Probe) -> Result<i32, String> {
        match probe {
            Probe::SimulateUnavailable => {
                return Err("Landlock is not implemented by this kernel (simulated)".into());
            }
            Probe::Kernel => {}
        }
        // SAFETY: the version query takes no attribute struct (NULL, size 0) and has no
        // side effect; it returns the ABI version or -1 with errno.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                CREATE_RULESET_VERSION,
            )
        };
        if v < 0 {
            let err = std::io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::EOPNOTSUPP) => "Landlock is built in but disabled at boot (add `landlock` to the `lsm=` kernel parameter)".into(),
                Some(libc::ENOSYS) => "Landlock is not implemented by this kernel (Linux 5.13+ with CONFIG_SECURITY_LANDLOCK needed)".into(),
                Some(_) | None => format!("the Landlock version query failed: {err}"),
            });
        }
        i32::try_from(v).map_err(|_| format!("the kernel reported an invalid Landlock ABI {v}"))
    }

    pub(super) fn apply(
        requested: &[PathBuf],
        probe: Probe,
    ) -> Result<SandboxStatus, SandboxError> {
        let abi = abi(probe)?;
        let roots = effective_write_roots(requested);
        let scoping = scoping(abi, true, false);
        restrict(abi, &roots, &scoping, &PortWall::NotAsked)?;
        Ok(SandboxStatus::Enforced {
            write_roots: roots,
            second_layer: SecondLayer::Unavailable {
                reason: "Landlock alone was asked for".into(),
            },
            scoping,
            ports: PortWall::NotAsked,
        })
    }

    /// Whether a ruleset for `abi` scopes signals and abstract sockets (`wanted` false: the
    /// test hook leaves it out; `user_display`: a human granted the user's own display, so
    /// abstract sockets stay reachable), and if not, why.
    pub(super) fn scoping(abi: ABI, wanted: bool, user_display: bool) -> Scoping {
        if !wanted {
            return Scoping::Unavailable {
                reason: "Landlock scoping is left out (simulated)".into(),
            };
        }
        if Scope::from_all(abi).is_empty() {
            return Scoping::Unavailable {
                reason: format!(
                    "the kernel's Landlock ABI {} cannot scope signals or abstract UNIX sockets (ABI {SCOPED_LANDLOCK_ABI}, Linux 6.12, is needed)",
                    abi as i32
                ),
            };
        }
        if user_display {
            return Scoping::SignalsOnly;
        }
        Scoping::Enforced
    }

    /// The wall over `ports` a ruleset for `abi` can build (`None`: not asked).
    pub(super) fn port_wall(abi: ABI, ports: Option<Vec<u16>>) -> PortWall {
        match ports {
            None => PortWall::NotAsked,
            Some(ports) if AccessNet::from_all(abi).is_empty() => {
                let _ = ports;
                PortWall::Unavailable {
                    reason: format!(
                        "the kernel's Landlock ABI {} has no TCP rules (ABI {TCP_LANDLOCK_ABI}, Linux 6.7, is needed)",
                        abi as i32
                    ),
                }
            }
            Some(ports) => PortWall::Enforced(ports),
        }
    }

    /// The ABI to build the ruleset for, or the refusal.
    pub(super) fn abi(probe: Probe) -> Result<ABI, SandboxError> {
        usable_abi(kernel_abi(probe))
    }

    /// Restricts the calling thread to writing beneath `roots`, where `scoping` says so to
    /// signalling and connecting to abstract sockets of its own domain, and where `ports` says
    /// so to connecting over TCP to those ports only.
    pub(super) fn restrict(
        abi: ABI,
        roots: &[PathBuf],
        scoping: &Scoping,
        ports: &PortWall,
    ) -> Result<(), SandboxError> {
        let apply_err = |e: landlock::RulesetError| SandboxError::Apply(e.to_string());
        let scopes = match scoping {
            Scoping::Enforced => Scope::from_all(abi),
            Scoping::SignalsOnly => Scope::Signal.into(),
            Scoping::Unavailable { .. } => landlock::BitFlags::EMPTY,
        };
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi))
            .map_err(apply_err)?;
        if !scopes.is_empty() {
            ruleset = ruleset.scope(scopes).map_err(apply_err)?;
        }
        let allowed: &[u16] = match ports {
            PortWall::Enforced(allowed) => {
                ruleset = ruleset
                    .handle_access(AccessNet::ConnectTcp)
                    .map_err(apply_err)?;
                allowed
            }
            PortWall::NotAsked | PortWall::Unavailable { .. } => &[],
        };
        let status = ruleset
            .create()
            .map_err(apply_err)?
            .no_new_privs(true)
            .add_rules(allowed.iter().map(|&port| {
                Ok::<_, landlock::RulesetError>(NetPort::new(port, AccessNet::ConnectTcp))
            }))
            .map_err(apply_err)?
            .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
            .map_err(apply_err)?
            .add_rules(path_beneath_rules(roots, AccessFs::from_all(abi)))
            .map_err(apply_err)?
            .restrict_self()
            .map_err(apply_err)?;
        check_enforced(status.ruleset, status.no_new_privs)
    }

    /// The ABI to build the ruleset for, from the kernel's answer: the best one both the kernel
    /// and the crate know, every right of which is then a hard requirement (anything the kernel
    /// would silently skip becomes an error). No Landlock, or an ABI before 3, is a refusal.
    pub(super) fn usable_abi(version: Result<i32, String>) -> Result<ABI, SandboxError> {
        let version = version.map_err(|reason| SandboxError::Unavailable { reason })?;
        if version < MIN_LANDLOCK_ABI {
            return Err(SandboxError::Unavailable {
                reason: format!(
                    "the kernel offers Landlock ABI {version}, which cannot refuse truncate(2); ABI {MIN_LANDLOCK_ABI} (Linux 6.2) or later is needed"
                ),
            });
        }
        Ok(ABI::from(version))
    }

    /// The kernel's report on a restriction: only a fully enforced ruleset with
    /// `no_new_privs` is accepted; partial or no enforcement is a refusal.
    pub(super) fn check_enforced(
        ruleset: RulesetStatus,
        no_new_privs: bool,
    ) -> Result<(), SandboxError> {
        let status = match ruleset {
            RulesetStatus::FullyEnforced if no_new_privs => return Ok(()),
            RulesetStatus::FullyEnforced => "enforced without no_new_privs",
            RulesetStatus::PartiallyEnforced => "only partially enforced",
            RulesetStatus::NotEnforced => "not enforced",
        };
        Err(SandboxError::NotEnforced {
            status: status.into(),
        })
    }

    #[cfg(test)]
    pub(super) fn probe_kernel() -> Result<i32, String> {
        kernel_abi(Probe::Kernel)
    }
}

#[cfg(test)]
mod tests;
