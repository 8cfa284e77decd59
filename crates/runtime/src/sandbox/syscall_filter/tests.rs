//! The filter against `seccompiler`'s rules, by a small BPF interpreter.

use super::*;
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};
use std::collections::BTreeMap;

/// Runs a classic BPF program over a `struct seccomp_data` (the opcodes the filters use).
fn run(program: &[sock_filter], data: &[u8; 64]) -> u32 {
    let (mut acc, mut pc) = (0u32, 0usize);
    loop {
        let i = &program[pc];
        pc += 1;
        let cond = |holds: bool| usize::from(if holds { i.jt } else { i.jf });
        match i.code {
            LD_W_ABS => {
                let at = i.k as usize;
                acc = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
            }
            ALU_AND_K => acc &= i.k,
            JMP_JA => pc += i.k as usize,
            JMP_JEQ_K => pc += cond(acc == i.k),
            JMP_JGE_K => pc += cond(acc >= i.k),
            JMP_JGT_K => pc += cond(acc > i.k),
            JMP_JSET_K => pc += cond(acc & i.k != 0),
            RET_K => return i.k,
            other => panic!("opcode {other:#x} not modelled"),
        }
    }
}

/// What the kernel answers for a stack of filters: the most severe action (`KILL` is the
/// smallest as a signed number), the most recently installed filter winning ties.
fn stacked(programs: &[&BpfProgram], data: &[u8; 64]) -> u32 {
    let mut ret = libc::SECCOMP_RET_ALLOW;
    for p in programs.iter().rev() {
        let cur = run(p, data);
        let action = |r: u32| (r & libc::SECCOMP_RET_ACTION_FULL) as i32;
        if action(cur) < action(ret) {
            ret = cur;
        }
    }
    ret
}

fn seccomp_data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
    let mut d = [0u8; 64];
    d[0..4].copy_from_slice(&nr.to_le_bytes());
    d[4..8].copy_from_slice(&arch.to_le_bytes());
    for (i, a) in args.iter().enumerate() {
        d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
    }
    d
}

/// The filters as they were built before the single program: `seccompiler`'s rules for
/// `EPERM`, one for `clone3`, and the hand-written x32 refusal, installed in that order.
fn reference_filters() -> Vec<BpfProgram> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).unwrap();
    let compile = |rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32| -> BpfProgram {
        SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .unwrap()
        .try_into()
        .unwrap()
    };
    let cond = |arg: u8, mask: u64, value: u64| {
        SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(mask),
            value,
        )
        .unwrap()
    };
    let rule = |c| SeccompRule::new(vec![c]).unwrap();
    let fmt = u64::from(libc::S_IFMT);
    let devices = |arg: u8| {
        [libc::S_IFBLK, libc::S_IFCHR]
            .map(|kind| rule(cond(arg, fmt, u64::from(kind))))
            .to_vec()
    };
    let set_id = |arg: u8| {
        [libc::S_ISUID, libc::S_ISGID]
            .map(|bit| rule(cond(arg, u64::from(bit), u64::from(bit))))
            .to_vec()
    };
    let node = |arg: u8| [devices(arg), set_id(arg)].concat();
    let creating = [libc::O_CREAT, libc::O_TMPFILE & !libc::O_DIRECTORY];
    let create_set_id = |flags: u8, mode: u8| {
        let mut all = Vec::new();
        for flag in creating.map(|f| u64::from(f.unsigned_abs())) {
            for bit in [libc::S_ISUID, libc::S_ISGID].map(u64::from) {
                let both = vec![cond(flags, flag, flag), cond(mode, bit, bit)];
                all.push(SeccompRule::new(both).unwrap());
            }
        }
        all
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        REFUSED.iter().map(|&nr| (nr, Vec::new())).collect();
    rules.insert(libc::SYS_mknodat, node(2));
    rules.insert(libc::SYS_openat, create_set_id(2, 3));
    rules.insert(libc::SYS_fchmod, set_id(1));
    rules.insert(libc::SYS_fchmodat, set_id(2));
    rules.insert(libc::SYS_fchmodat2, set_id(2));
    #[cfg(target_arch = "x86_64")]
    {
        rules.insert(libc::SYS_mknod, node(1));
        rules.insert(libc::SYS_chmod, set_id(1));
        rules.insert(libc::SYS_creat, set_id(1));
        rules.insert(libc::SYS_open, create_set_id(1, 2));
    }
    let new_ns = CLONE_NEW
        .iter()
        .map(|&f| {
            let bits = u64::from(f.unsigned_abs());
            rule(cond(0, bits, bits))
        })
        .collect();
    rules.insert(libc::SYS_clone, new_ns);
    let terminal = [libc::TIOCSTI, libc::TIOCLINUX]
        .map(|r| rule(cond(1, 0xffff_ffff, r)))
        .to_vec();
    rules.insert(libc::SYS_ioctl, terminal);
    let mut filters = vec![
        compile(rules, libc::EPERM),
        compile(
            BTreeMap::from([
                (libc::SYS_clone3, Vec::new()),
                (libc::SYS_openat2, Vec::new()),
            ]),
            libc::ENOSYS,
        ),
    ];
    #[cfg(target_arch = "x86_64")]
    filters.push(vec![
        sock_filter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: ARCH_OFFSET,
        },
        sock_filter {
            code: JMP_JEQ_K,
            jt: 0,
            jf: 3,
            k: audit_arch().unwrap(),
        },
        sock_filter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: JMP_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EPERM.unsigned_abs(),
        },
        sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ]);
    filters
}

#[test]
fn the_single_program_answers_exactly_what_the_rule_filters_did() {
    let ours = program().unwrap();
    let reference = reference_filters();
    let reference: Vec<&BpfProgram> = reference.iter().collect();
    let native = audit_arch().unwrap();
    // i386 (the 32-bit calls of an x86_64 process), an unknown one, and this one.
    let arches = [native, 0x4000_0003, 0x1234_5678];
    let mut numbers: Vec<u32> = (0..1024).collect();
    numbers.extend([
        0x3fff_ffff,
        0x4000_0000,
        0x4000_0000 + 165,
        0x4000_0200,
        u32::MAX,
    ]);
    let modes = [
        libc::S_IFBLK,
        libc::S_IFCHR,
        libc::S_IFIFO,
        libc::S_IFSOCK,
        libc::S_IFREG,
        libc::S_IFDIR,
        0,
        libc::S_IFBLK | 0o600,
        libc::S_IFCHR | 0o6777,
        libc::S_ISUID,
        libc::S_ISGID,
        libc::S_ISUID | libc::S_ISGID | 0o777,
        libc::S_IFREG | 0o4755,
        libc::S_IFIFO | 0o2644,
        0o777,
        0o1777,
    ];
    let mut args: Vec<u64> = modes.iter().map(|&m| u64::from(m)).collect();
    args.extend(CLONE_NEW.iter().map(|&f| u64::from(f.unsigned_abs())));
    args.extend([
        u64::from(libc::SIGCHLD.unsigned_abs()),
        (libc::CLONE_VM | libc::CLONE_FS | libc::CLONE_THREAD) as u64,
        u64::from((libc::CLONE_NEWNS | libc::CLONE_VM).unsigned_abs()),
        libc::TIOCSTI,
        libc::TIOCLINUX,
        libc::TIOCGWINSZ,
        libc::TIOCSTI | (1 << 32),
        1 << 40,
        u64::MAX,
    ]);
    let mut checked = 0usize;
    let mut same_answer = |arch: u32, nr: u32, six: [u64; 6]| {
        let data = seccomp_data(arch, nr, six);
        assert_eq!(
            run(&ours, &data),
            stacked(&reference, &data),
            "arch {arch:#x}, nr {nr}, args {six:#x?}"
        );
        checked += 1;
    };
    for &arch in &arches {
        for &nr in &numbers {
            for &a in &args {
                for slot in 0..3 {
                    let mut six = [0u64; 6];
                    six[slot] = a;
                    same_answer(arch, nr, six);
                }
            }
        }
    }
    // `open` and `openat` decide on two arguments at once: every pair of flags and mode,
    // in both layouts, for every number.
    let tmpfile = u64::from(libc::O_TMPFILE.unsigned_abs());
    let creat = u64::from(libc::O_CREAT.unsigned_abs());
    let flags = [
        0,
        creat,
        tmpfile,
        tmpfile & !u64::from(libc::O_DIRECTORY.unsigned_abs()),
        u64::from((libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC).unsigned_abs()),
        u64::from(libc::O_DIRECTORY.unsigned_abs()),
        creat << 32,
        u64::MAX,
    ];
    let modes = [
        0o644,
        0o4755,
        0o2755,
        0o1777,
        u64::from(libc::S_IFREG | 0o6777),
        0o4000 << 32,
        u64::MAX,
    ];
    for &nr in &numbers {
        for (flags_at, mode_at) in [(1, 2), (2, 3)] {
            for &f in &flags {
                for &m in &modes {
                    let mut six = [0u64; 6];
                    six[flags_at] = f;
                    six[mode_at] = m;
                    same_answer(native, nr, six);
                }
            }
        }
    }
    assert!(checked > 200_000);
    // The point of the change: one short program instead of three long ones.
    let before: usize = reference.iter().map(|p| p.len()).sum();
    assert!(ours.len() * 2 < before, "{} vs {before}", ours.len());
}

#[test]
fn every_rule_set_compiles_for_this_architecture() {
    let refuse = program().unwrap();
    assert!(
        refuse.len() > REFUSED.len(),
        "one check per refused call at least"
    );
}

#[test]
fn refusals_answer_eperm_and_clone3_enosys() {
    let ours = program().unwrap();
    let arch = audit_arch().unwrap();
    let nr = |n: libc::c_long| u32::try_from(n).unwrap();
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM.unsigned_abs();
    let call = |n, args| run(&ours, &seccomp_data(arch, nr(n), args));
    assert_eq!(call(libc::SYS_mount, [0; 6]), eperm);
    assert_eq!(call(libc::SYS_getpid, [0; 6]), libc::SECCOMP_RET_ALLOW);
    assert_eq!(
        call(libc::SYS_clone3, [0; 6]),
        libc::SECCOMP_RET_ERRNO | libc::ENOSYS.unsigned_abs()
    );
    let block = u64::from(libc::S_IFBLK | 0o600);
    assert_eq!(call(libc::SYS_mknodat, [0, 0, block, 0, 0, 0]), eperm);
    let fifo = u64::from(libc::S_IFIFO | 0o600);
    assert_eq!(
        call(libc::SYS_mknodat, [0, 0, fifo, 0, 0, 0]),
        libc::SECCOMP_RET_ALLOW
    );
    assert_eq!(
        run(&ours, &seccomp_data(0x4000_0003, 20, [0; 6])),
        libc::SECCOMP_RET_KILL_PROCESS
    );
}

#[test]
fn no_call_makes_a_setuid_or_setgid_file() {
    let ours = program().unwrap();
    let arch = audit_arch().unwrap();
    let nr = |n: libc::c_long| u32::try_from(n).unwrap();
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM.unsigned_abs();
    let allow = libc::SECCOMP_RET_ALLOW;
    let call = |n, args| run(&ours, &seccomp_data(arch, nr(n), args));
    let create = u64::from((libc::O_WRONLY | libc::O_CREAT).unsigned_abs());
    let tmpfile = u64::from((libc::O_WRONLY | libc::O_TMPFILE).unsigned_abs());
    let read = u64::from(libc::O_RDONLY.unsigned_abs());
    let suid = 0o4755;
    let sgid = 0o2755;
    assert_eq!(call(libc::SYS_openat, [0, 0, create, suid, 0, 0]), eperm);
    assert_eq!(call(libc::SYS_openat, [0, 0, create, sgid, 0, 0]), eperm);
    assert_eq!(call(libc::SYS_openat, [0, 0, tmpfile, suid, 0, 0]), eperm);
    assert_eq!(call(libc::SYS_openat, [0, 0, create, 0o755, 0, 0]), allow);
    // Without O_CREAT the mode is stale register contents, never a reason to refuse.
    assert_eq!(call(libc::SYS_openat, [0, 0, read, suid, 0, 0]), allow);
    let regular = u64::from(libc::S_IFREG);
    assert_eq!(
        call(libc::SYS_mknodat, [0, 0, regular | suid, 0, 0, 0]),
        eperm
    );
    assert_eq!(call(libc::SYS_mknodat, [0, 0, suid, 0, 0, 0]), eperm);
    assert_eq!(
        call(libc::SYS_mknodat, [0, 0, regular | 0o755, 0, 0, 0]),
        allow
    );
    assert_eq!(call(libc::SYS_fchmodat2, [0, 0, sgid, 0, 0, 0]), eperm);
    assert_eq!(
        call(libc::SYS_openat2, [0; 6]),
        libc::SECCOMP_RET_ERRNO | libc::ENOSYS.unsigned_abs()
    );
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(call(libc::SYS_open, [0, create, suid, 0, 0, 0]), eperm);
        assert_eq!(call(libc::SYS_open, [0, read, suid, 0, 0, 0]), allow);
        assert_eq!(call(libc::SYS_creat, [0, sgid, 0, 0, 0, 0]), eperm);
        assert_eq!(call(libc::SYS_creat, [0, 0o644, 0, 0, 0, 0]), allow);
        assert_eq!(
            call(libc::SYS_mknod, [0, regular | suid, 0, 0, 0, 0]),
            eperm
        );
    }
}
