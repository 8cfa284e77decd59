//! The seccomp filter of the second layer: system calls no model-driven command needs and a
//! hostile one could use to get past the mounts and Landlock, refused with `EPERM` (never a
//! kill, so a command gets a clear error).
//!
//! Refused: creating block or character devices (`mknod`/`mknodat` of those types; FIFOs and
//! sockets stay allowed), every mount and namespace call (`mount`, `umount2`, `pivot_root`,
//! `chroot`, the new mount API, `unshare`, `setns`, `clone` with a `CLONE_NEW*` flag),
//! `ptrace`, `process_vm_readv/writev`, `pidfd_getfd`, kernel keyrings, `bpf`,
//! `perf_event_open`, `userfaultfd`, `open_by_handle_at`, `io_uring` (its requests are not
//! seen by seccomp), module and `kexec` loading, `iopl`/`ioperm`, `reboot`, swap, clock and
//! host-name changes, `acct`, `quotactl`, `fanotify_init`, `syslog`, `TIOCSTI`/`TIOCLINUX`
//! (typing into a terminal), and every call that would make a setuid or setgid file: `chmod`
//! (`chmod`, `fchmod`, `fchmodat`, `fchmodat2`) to such a mode, `open`/`openat` with `O_CREAT` or
//! `O_TMPFILE` and such a mode, `creat` with one, `mknod`/`mknodat` with one. `clone3` and
//! `openat2` answer `ENOSYS` (their flags and mode sit in memory a filter cannot read), so the C
//! library and programs fall back to `clone` and `openat`, whose arguments it can read. File
//! capabilities (`security.capability`, whose name is in memory too) are left to the capability
//! drop (`super::capabilities`: no `CAP_SETFCAP`). On x86_64 the x32 system call numbers are refused as a
//! whole and 32-bit calls (another architecture to the filter) kill the caller.
//!
//! Installed last, after Landlock (which set `no_new_privs`), and inherited by every child.
//!
//! The filter is one program, built here rather than by `seccompiler`'s rule compiler: a binary
//! search over the sorted runs of call numbers that need a verdict, so an allowed call runs
//! about ten instructions (an `openat`, which decides on its flags, a few more), and the kernel
//! checks and compiles one program of 107 instructions per runtime instead of three of 517 in
//! all (that setup was a tenth of a one-command runtime's CPU). The test below proves it answers
//! exactly what `seccompiler`'s rules would.

use seccompiler::{BpfProgram, sock_filter};

/// Refused outright, whatever the arguments.
const REFUSED: &[libc::c_long] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_keyctl,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_fanotify_init,
    libc::SYS_syslog,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

/// Namespace flags `clone` may not carry.
const CLONE_NEW: &[libc::c_int] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

/// The setuid and setgid bits of a mode.
const SET_ID: u32 = libc::S_ISUID | libc::S_ISGID;

/// The `open` flags that create a file: `O_CREAT`, and `__O_TMPFILE` (`O_TMPFILE` without the
/// `O_DIRECTORY` it carries; the kernel refuses one without the other).
fn creating_flags() -> Result<u32, FilterError> {
    u32::try_from(libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)).map_err(|e| e.to_string())
}

/// First x32 system call number (`__X32_SYSCALL_BIT`).
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Why the filter could not be installed.
pub type FilterError = String;

/// What the filter answers for one system call number (every other number is allowed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// `EPERM`, whatever the arguments.
    Refuse,
    /// `ENOSYS` (`clone3`, so the C library falls back to `clone`).
    NoSys,
    /// `EPERM` when the mode in argument `arg` is a block or character device, or sets the
    /// setuid or setgid bit (`mknod`).
    Node { arg: u8 },
    /// `EPERM` when the mode in argument `arg` sets the setuid or setgid bit.
    SetId { arg: u8 },
    /// `EPERM` when the flags in argument `flags` create a file (`O_CREAT`, `O_TMPFILE`) and
    /// the mode in argument `mode` sets the setuid or setgid bit (`open`, `openat`).
    CreateSetId { flags: u8, mode: u8 },
    /// `EPERM` when argument 0 (`clone`'s flags) carries a `CLONE_NEW*` flag.
    NewNamespace,
    /// `EPERM` when argument 1 (`ioctl`'s request) types into a terminal.
    TerminalInput,
}

/// Every number that gets a verdict, sorted by number.
fn verdicts() -> Result<Vec<(u32, Verdict)>, FilterError> {
    let mut table: Vec<(libc::c_long, Verdict)> =
        REFUSED.iter().map(|&nr| (nr, Verdict::Refuse)).collect();
    table.extend([
        (libc::SYS_clone3, Verdict::NoSys),
        (libc::SYS_openat2, Verdict::NoSys),
        (libc::SYS_mknodat, Verdict::Node { arg: 2 }),
        (libc::SYS_openat, Verdict::CreateSetId { flags: 2, mode: 3 }),
        (libc::SYS_fchmod, Verdict::SetId { arg: 1 }),
        (libc::SYS_fchmodat, Verdict::SetId { arg: 2 }),
        (libc::SYS_fchmodat2, Verdict::SetId { arg: 2 }),
        (libc::SYS_clone, Verdict::NewNamespace),
        (libc::SYS_ioctl, Verdict::TerminalInput),
    ]);
    #[cfg(target_arch = "x86_64")]
    table.extend([
        (libc::SYS_mknod, Verdict::Node { arg: 1 }),
        (libc::SYS_chmod, Verdict::SetId { arg: 1 }),
        (libc::SYS_creat, Verdict::SetId { arg: 1 }),
        (libc::SYS_open, Verdict::CreateSetId { flags: 1, mode: 2 }),
    ]);
    let mut out = table
        .into_iter()
        .map(|(nr, v)| {
            u32::try_from(nr)
                .map(|nr| (nr, v))
                .map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    out.sort_unstable_by_key(|(nr, _)| *nr);
    if out.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err("a system call has two verdicts".into());
    }
    Ok(out)
}

/// Installs the filter on the calling thread (and so on everything it later starts).
pub fn install() -> Result<(), FilterError> {
    seccompiler::apply_filter(&program()?).map_err(|e| format!("cannot install: {e}"))
}

/// `AUDIT_ARCH_*` of this architecture: `EM_*`, 64-bit, little-endian.
fn audit_arch() -> Result<u32, FilterError> {
    const ARCH_64_LE: u32 = 0x8000_0000 | 0x4000_0000;
    let machine = match std::env::consts::ARCH {
        "x86_64" => 62,
        "aarch64" => 183,
        "riscv64" => 243,
        other => return Err(format!("no filter for {other}")),
    };
    Ok(machine | ARCH_64_LE)
}

// Classic BPF opcodes (`linux/bpf_common.h`).
const LD_W_ABS: u16 = 0x20;
const ALU_AND_K: u16 = 0x54;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGE_K: u16 = 0x35;
const JMP_JGT_K: u16 = 0x25;
const JMP_JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
/// `offsetof(struct seccomp_data, nr)`, `arch` and `args`.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;
const ARGS_OFFSET: u32 = 16;
/// Leaves of the search hold at most this many numbers, compared one by one.
const LEAF: usize = 4;

/// A jump target of [`Asm`].
type Label = usize;

/// One instruction whose jumps name labels, resolved by [`Asm::finish`].
#[derive(Debug, Clone, Copy)]
enum Op {
    Stmt {
        code: u16,
        k: u32,
    },
    /// A conditional jump: to `yes` when the test holds, else to `no`.
    Jump {
        code: u16,
        k: u32,
        yes: Label,
        no: Label,
    },
    /// An unconditional jump.
    Goto(Label),
    /// Marks where a label points.
    Here(Label),
}

/// A tiny assembler: forward jumps by label, resolved once the program is laid out.
#[derive(Debug, Default)]
struct Asm {
    ops: Vec<Op>,
    labels: usize,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.labels += 1;
        self.labels - 1
    }

    fn here(&mut self, label: Label) {
        self.ops.push(Op::Here(label));
    }

    fn stmt(&mut self, code: u16, k: u32) {
        self.ops.push(Op::Stmt { code, k });
    }

    fn jump(&mut self, code: u16, k: u32, yes: Label, no: Label) {
        self.ops.push(Op::Jump { code, k, yes, no });
    }

    fn goto(&mut self, label: Label) {
        self.ops.push(Op::Goto(label));
    }

    /// The program, with every jump turned into its forward offset.
    fn finish(self) -> Result<BpfProgram, FilterError> {
        let mut at = vec![None; self.labels];
        let mut pc = 0usize;
        for op in &self.ops {
            match op {
                Op::Here(l) => at[*l] = Some(pc),
                Op::Stmt { .. } | Op::Jump { .. } | Op::Goto(_) => pc += 1,
            }
        }
        let mut out = Vec::with_capacity(pc);
        let offset = |from: usize, to: Label| -> Result<usize, FilterError> {
            at[to]
                .and_then(|t| t.checked_sub(from + 1))
                .ok_or_else(|| "filter jump to an unplaced or earlier label".to_string())
        };
        let short = |off: usize| u8::try_from(off).map_err(|_| "filter jump too far".to_string());
        for op in self.ops {
            let pc = out.len();
            let insn = |code, jt, jf, k| sock_filter { code, jt, jf, k };
            out.push(match op {
                Op::Here(_) => continue,
                Op::Stmt { code, k } => insn(code, 0, 0, k),
                Op::Jump { code, k, yes, no } => {
                    insn(code, short(offset(pc, yes)?)?, short(offset(pc, no)?)?, k)
                }
                Op::Goto(to) => insn(
                    JMP_JA,
                    0,
                    0,
                    u32::try_from(offset(pc, to)?).map_err(|e| e.to_string())?,
                ),
            });
        }
        Ok(out)
    }
}

/// Where the search's leaves and the argument checks end up.
struct Exits {
    allow: Label,
    refuse: Label,
    no_sys: Label,
}

/// The whole filter: the architecture check (another one kills the caller, as a 32-bit call
/// on x86_64 would otherwise reach other numbers), the x32 refusal, the search, and one block
/// per argument check.
fn program() -> Result<BpfProgram, FilterError> {
    let arch = audit_arch()?;
    let table = verdicts()?;
    let mut asm = Asm::default();
    let exits = Exits {
        allow: asm.label(),
        refuse: asm.label(),
        no_sys: asm.label(),
    };
    let native = asm.label();
    asm.stmt(LD_W_ABS, ARCH_OFFSET);
    let kill = asm.label();
    asm.jump(JMP_JEQ_K, arch, native, kill);
    asm.here(kill);
    asm.stmt(RET_K, libc::SECCOMP_RET_KILL_PROCESS);
    asm.here(native);
    asm.stmt(LD_W_ABS, NR_OFFSET);
    #[cfg(target_arch = "x86_64")]
    {
        // The same calls by other numbers: refused as a whole.
        let native_numbers = asm.label();
        asm.jump(JMP_JGE_K, X32_SYSCALL_BIT, exits.refuse, native_numbers);
        asm.here(native_numbers);
    }
    let checks: Vec<(Label, Verdict)> = table.iter().map(|&(_, v)| (asm.label(), v)).collect();
    let targets: Vec<(u32, Label)> = table
        .iter()
        .zip(&checks)
        .map(|(&(nr, v), &(label, _))| {
            let to = match v {
                Verdict::Refuse => exits.refuse,
                Verdict::NoSys => exits.no_sys,
                Verdict::Node { .. }
                | Verdict::SetId { .. }
                | Verdict::CreateSetId { .. }
                | Verdict::NewNamespace
                | Verdict::TerminalInput => label,
            };
            (nr, to)
        })
        .collect();
    search(&mut asm, &runs(&targets), &exits);
    for (label, verdict) in checks {
        arg_check(&mut asm, label, verdict, &exits)?;
    }
    asm.here(exits.allow);
    asm.stmt(RET_K, libc::SECCOMP_RET_ALLOW);
    asm.here(exits.refuse);
    asm.stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM.unsigned_abs());
    asm.here(exits.no_sys);
    asm.stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::ENOSYS.unsigned_abs());
    asm.finish()
}

/// `targets` (sorted by number) as runs of consecutive numbers with the same target: first,
/// last, target. Many refused calls are neighbours (`acct` to `ioperm`, `io_uring_setup` to
/// `fspick` on x86_64), and a run costs the search no more than one number.
fn runs(targets: &[(u32, Label)]) -> Vec<(u32, u32, Label)> {
    let mut out: Vec<(u32, u32, Label)> = Vec::new();
    for &(nr, to) in targets {
        match out.last_mut() {
            Some((_, last, run_to)) if *run_to == to && last.checked_add(1) == Some(nr) => {
                *last = nr;
            }
            _ => out.push((nr, nr, to)),
        }
    }
    out
}

/// A binary search over `runs` (sorted, disjoint) with the number loaded: a number in a run
/// jumps to its target, anything else to `exits.allow`.
fn search(asm: &mut Asm, runs: &[(u32, u32, Label)], exits: &Exits) {
    if runs.len() <= LEAF {
        for &(first, last, to) in runs {
            let next = asm.label();
            if first == last {
                asm.jump(JMP_JEQ_K, first, to, next);
            } else {
                // Past this run: try the next. Else at or before its end: in it, or in the gap
                // before it (every earlier run ends below the number).
                let not_past = asm.label();
                asm.jump(JMP_JGT_K, last, next, not_past);
                asm.here(not_past);
                asm.jump(JMP_JGE_K, first, to, exits.allow);
            }
            asm.here(next);
        }
        asm.goto(exits.allow);
        return;
    }
    let (low, high) = runs.split_at(runs.len() / 2);
    let (upper, lower) = (asm.label(), asm.label());
    asm.jump(JMP_JGE_K, high[0].0, upper, lower);
    asm.here(lower);
    search(asm, low, exits);
    asm.here(upper);
    search(asm, high, exits);
}

/// The block at `label` that decides a call by its arguments (the low 32 bits of each, as the
/// kernel reads `int` and `mode_t` arguments).
fn arg_check(
    asm: &mut Asm,
    label: Label,
    verdict: Verdict,
    exits: &Exits,
) -> Result<(), FilterError> {
    let arg_offset = |arg: u8| ARGS_OFFSET + 8 * u32::from(arg);
    match verdict {
        Verdict::Refuse | Verdict::NoSys => return Ok(()),
        Verdict::Node { arg } => {
            asm.here(label);
            asm.stmt(LD_W_ABS, arg_offset(arg));
            let not_set_id = asm.label();
            asm.jump(JMP_JSET_K, SET_ID, exits.refuse, not_set_id);
            asm.here(not_set_id);
            asm.stmt(ALU_AND_K, libc::S_IFMT);
            let not_block = asm.label();
            asm.jump(JMP_JEQ_K, libc::S_IFBLK, exits.refuse, not_block);
            asm.here(not_block);
            asm.jump(JMP_JEQ_K, libc::S_IFCHR, exits.refuse, exits.allow);
        }
        Verdict::SetId { arg } => {
            asm.here(label);
            asm.stmt(LD_W_ABS, arg_offset(arg));
            asm.jump(JMP_JSET_K, SET_ID, exits.refuse, exits.allow);
        }
        Verdict::CreateSetId { flags, mode } => {
            // Without a creating flag the mode argument is whatever the register held: it is
            // read only when the call creates.
            asm.here(label);
            asm.stmt(LD_W_ABS, arg_offset(flags));
            let creates = asm.label();
            asm.jump(JMP_JSET_K, creating_flags()?, creates, exits.allow);
            asm.here(creates);
            asm.stmt(LD_W_ABS, arg_offset(mode));
            asm.jump(JMP_JSET_K, SET_ID, exits.refuse, exits.allow);
        }
        Verdict::NewNamespace => {
            asm.here(label);
            asm.stmt(LD_W_ABS, arg_offset(0));
            let flags = CLONE_NEW.iter().fold(0u32, |all, f| all | f.unsigned_abs());
            asm.jump(JMP_JSET_K, flags, exits.refuse, exits.allow);
        }
        Verdict::TerminalInput => {
            asm.here(label);
            asm.stmt(LD_W_ABS, arg_offset(1));
            let request = |r: libc::Ioctl| u32::try_from(r).map_err(|e| e.to_string());
            let not_sti = asm.label();
            asm.jump(JMP_JEQ_K, request(libc::TIOCSTI)?, exits.refuse, not_sti);
            asm.here(not_sti);
            asm.jump(
                JMP_JEQ_K,
                request(libc::TIOCLINUX)?,
                exits.refuse,
                exits.allow,
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
