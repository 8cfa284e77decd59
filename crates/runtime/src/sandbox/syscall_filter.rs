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
//! (typing into a terminal), and `chmod` calls that set the setuid or setgid bit. `clone3`
//! answers `ENOSYS` (its flags sit in memory a filter cannot read), so the C library falls back
//! to `clone`, whose flags it can. On x86_64 the x32 system call numbers are refused as a
//! whole and 32-bit calls (another architecture to the filter) kill the caller.
//!
//! Installed last, after Landlock (which set `no_new_privs`), and inherited by every child.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

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

/// First x32 system call number (`__X32_SYSCALL_BIT`).
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Why the filter could not be installed.
pub type FilterError = String;

/// Installs the filters on the calling thread (and so on everything it later starts).
pub fn install() -> Result<(), FilterError> {
    let arch = target_arch()?;
    let refuse = compile(refused_rules()?, libc::EPERM, arch)?;
    let clone3 = compile(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        libc::ENOSYS,
        arch,
    )?;
    for program in [&refuse, &clone3] {
        seccompiler::apply_filter(program).map_err(|e| format!("cannot install: {e}"))?;
    }
    #[cfg(target_arch = "x86_64")]
    seccompiler::apply_filter(&x32_refusal()).map_err(|e| format!("cannot install: {e}"))?;
    Ok(())
}

fn target_arch() -> Result<TargetArch, FilterError> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("no filter for {}: {e}", std::env::consts::ARCH))
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: i32,
    arch: TargetArch,
) -> Result<BpfProgram, FilterError> {
    let errno = u32::try_from(errno).map_err(|e| e.to_string())?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno),
        arch,
    )
    .map_err(|e| e.to_string())?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// A condition that `arg` has every bit of `bits` set.
fn has_bits(arg: u8, bits: u64) -> Result<SeccompCondition, FilterError> {
    SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(bits),
        bits,
    )
    .map_err(|e| e.to_string())
}

/// A condition that `arg` has, under `mask`, exactly `value`.
fn masked(arg: u8, mask: u64, value: u64) -> Result<SeccompCondition, FilterError> {
    SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(mask),
        value,
    )
    .map_err(|e| e.to_string())
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, FilterError> {
    SeccompRule::new(conditions).map_err(|e| e.to_string())
}

fn refused_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, FilterError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        REFUSED.iter().map(|&nr| (nr, Vec::new())).collect();
    let fmt = u64::from(libc::S_IFMT);
    let devices = |mode_arg: u8| -> Result<Vec<SeccompRule>, FilterError> {
        [libc::S_IFBLK, libc::S_IFCHR]
            .into_iter()
            .map(|kind| rule(vec![masked(mode_arg, fmt, u64::from(kind))?]))
            .collect()
    };
    let set_id = |mode_arg: u8| -> Result<Vec<SeccompRule>, FilterError> {
        [libc::S_ISUID, libc::S_ISGID]
            .into_iter()
            .map(|bit| rule(vec![has_bits(mode_arg, u64::from(bit))?]))
            .collect()
    };
    rules.insert(libc::SYS_mknodat, devices(2)?);
    rules.insert(libc::SYS_fchmod, set_id(1)?);
    rules.insert(libc::SYS_fchmodat, set_id(2)?);
    rules.insert(libc::SYS_fchmodat2, set_id(2)?);
    #[cfg(target_arch = "x86_64")]
    {
        rules.insert(libc::SYS_mknod, devices(1)?);
        rules.insert(libc::SYS_chmod, set_id(1)?);
    }
    let new_ns = CLONE_NEW
        .iter()
        .map(|&flag| rule(vec![has_bits(0, u64::from(flag.unsigned_abs()))?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, new_ns);
    let terminal_input = [libc::TIOCSTI, libc::TIOCLINUX]
        .into_iter()
        .map(|request| rule(vec![masked(1, 0xffff_ffff, request)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_ioctl, terminal_input);
    Ok(rules)
}

/// A hand-written filter for what seccompiler cannot say: on x86_64, a system call number with
/// the x32 bit set (the same calls by other numbers) is refused.
#[cfg(target_arch = "x86_64")]
fn x32_refusal() -> BpfProgram {
    use seccompiler::sock_filter;
    // BPF_LD | BPF_W | BPF_ABS, BPF_JMP | BPF_JEQ | BPF_K, BPF_JMP | BPF_JGE | BPF_K, BPF_RET.
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    /// `offsetof(struct seccomp_data, arch)`.
    const ARCH_OFFSET: u32 = 4;
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    let insn = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        insn(LD_W_ABS, 0, 0, ARCH_OFFSET),
        insn(JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        insn(LD_W_ABS, 0, 0, 0),
        insn(JGE_K, 0, 1, X32_SYSCALL_BIT),
        insn(
            RET_K,
            0,
            0,
            libc::SECCOMP_RET_ERRNO | libc::EPERM.unsigned_abs(),
        ),
        insn(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_set_compiles_for_this_architecture() {
        let arch = target_arch().unwrap();
        let refuse = compile(refused_rules().unwrap(), libc::EPERM, arch).unwrap();
        assert!(
            refuse.len() > REFUSED.len(),
            "one check per refused call at least"
        );
    }
}
