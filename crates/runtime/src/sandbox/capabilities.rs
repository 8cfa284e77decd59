//! Root's capabilities inside the sandbox: the ones no build or package tool needs are dropped
//! from every set before a command runs.
//!
//! Root keeps what installing and building take (`CAP_CHOWN`, `CAP_DAC_OVERRIDE`,
//! `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`, `CAP_FSETID`, `CAP_SETUID`, `CAP_SETGID`, `CAP_KILL`,
//! `CAP_NET_BIND_SERVICE`, `CAP_SETPCAP`, `CAP_AUDIT_WRITE` for `sudo`/`su`, ...) and loses
//! [`DROPPED`]: file capabilities, mounts and the rest of `CAP_SYS_ADMIN`, tracing, modules, raw
//! I/O, device nodes, network administration and raw sockets (a packet socket could read the
//! dashboard's token off loopback), BPF, perf, clocks, MAC and audit control, immutable files,
//! and the two that would let a command take the machine from its controller: a realtime
//! priority (`CAP_SYS_NICE`: a busy loop at `SCHED_FIFO` starves the daemon) and an
//! `oom_score_adj` below the controller's (`CAP_SYS_RESOURCE`: the out-of-memory killer would
//! take the daemon instead), as Docker's default set drops them.
//!
//! The design decision to know: the bounding set is what matters for root, because on
//! `execve` a root process gets every capability the bounding set still holds, whatever its
//! permitted set was; the effective, permitted and inheritable sets are lowered too (which lowers
//! the ambient set with them), so the runtime itself, and the structured edits it runs in
//! process, hold no more than its commands. As an ordinary user inside the sandbox's user
//! namespace, the same drop applies to the namespace's capabilities. A process without
//! `CAP_SETPCAP` (an ordinary user without a user namespace, a container that took it away)
//! cannot drop from its bounding set and needs not: `no_new_privs`, set with Landlock before
//! anything runs, caps what `execve` grants at the permitted set lowered here. A few system
//! calls, no `/proc` read.

/// Why the capabilities could not be dropped.
pub type CapabilityError = String;

/// Capabilities no build or package tool needs, by number (`linux/capability.h`) and name.
pub const DROPPED: &[(u32, &str)] = &[
    (9, "CAP_LINUX_IMMUTABLE"),
    (12, "CAP_NET_ADMIN"),
    (13, "CAP_NET_RAW"),
    (16, "CAP_SYS_MODULE"),
    (17, "CAP_SYS_RAWIO"),
    (18, "CAP_SYS_CHROOT"),
    (19, "CAP_SYS_PTRACE"),
    (20, "CAP_SYS_PACCT"),
    (21, "CAP_SYS_ADMIN"),
    (22, "CAP_SYS_BOOT"),
    (23, "CAP_SYS_NICE"),
    (24, "CAP_SYS_RESOURCE"),
    (25, "CAP_SYS_TIME"),
    (26, "CAP_SYS_TTY_CONFIG"),
    (27, "CAP_MKNOD"),
    (30, "CAP_AUDIT_CONTROL"),
    (31, "CAP_SETFCAP"),
    (32, "CAP_MAC_OVERRIDE"),
    (33, "CAP_MAC_ADMIN"),
    (34, "CAP_SYSLOG"),
    (35, "CAP_WAKE_ALARM"),
    (36, "CAP_BLOCK_SUSPEND"),
    (37, "CAP_AUDIT_READ"),
    (38, "CAP_PERFMON"),
    (39, "CAP_BPF"),
    (40, "CAP_CHECKPOINT_RESTORE"),
];

/// `CAP_SETPCAP`: needed to drop from the bounding set.
const CAP_SETPCAP: u32 = 8;

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`: one 32-bit word of each set.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// [`DROPPED`] as a 64-bit mask.
pub fn dropped_mask() -> u64 {
    DROPPED.iter().fold(0, |mask, &(cap, _)| mask | 1 << cap)
}

/// Drops [`DROPPED`] from the bounding, effective, permitted, inheritable (and so ambient)
/// sets of the calling thread; threads and processes it starts afterwards inherit the result.
/// Must run after the mount namespace is built (it needs `CAP_SYS_ADMIN`).
pub fn drop_unneeded() -> Result<(), CapabilityError> {
    let mut data = get()?;
    let effective = word_pair(data.map(|d| d.effective));
    if effective & (1 << CAP_SETPCAP) != 0 {
        for &(cap, name) in DROPPED {
            // SAFETY: PR_CAPBSET_DROP takes one integer argument and touches no memory.
            let rc =
                unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) };
            if rc != 0 {
                let err = std::io::Error::last_os_error();
                // A capability newer than this kernel is not there to drop.
                if err.raw_os_error() != Some(libc::EINVAL) {
                    return Err(format!("cannot drop {name} from the bounding set: {err}"));
                }
            }
        }
    }
    let keep = !dropped_mask();
    for (word, d) in data.iter_mut().enumerate() {
        let keep = (keep >> (32 * word)) as u32;
        d.effective &= keep;
        d.permitted &= keep;
        d.inheritable &= keep;
    }
    set(&data)
}

/// The low and high words of a set as one mask.
fn word_pair(words: [u32; 2]) -> u64 {
    u64::from(words[0]) | u64::from(words[1]) << 32
}

fn get() -> Result<[CapData; 2], CapabilityError> {
    let mut data = [CapData::default(); 2];
    call(libc::SYS_capget, data.as_mut_ptr())
        .map_err(|e| format!("cannot read the capabilities: {e}"))?;
    Ok(data)
}

fn set(data: &[CapData; 2]) -> Result<(), CapabilityError> {
    call(libc::SYS_capset, data.as_ptr()).map_err(|e| format!("cannot lower the capabilities: {e}"))
}

/// `capget` (which fills `data`) or `capset` (which reads it) of the calling thread: a
/// version-3 header, two data structs.
fn call(nr: libc::c_long, data: *const CapData) -> std::io::Result<()> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: a live version-3 header and a pointer to the two live data structs it asks for,
    // writable where the call writes them (capget's caller passes a mutable array).
    let rc = unsafe { libc::syscall(nr, &mut header as *mut CapHeader, data) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_list_holds_what_the_issue_names_and_keeps_what_package_tools_need() {
        let names: Vec<&str> = DROPPED.iter().map(|&(_, n)| n).collect();
        for must in [
            "CAP_SETFCAP",
            "CAP_SYS_ADMIN",
            "CAP_SYS_PTRACE",
            "CAP_SYS_MODULE",
            "CAP_SYS_RAWIO",
            "CAP_MKNOD",
            "CAP_NET_ADMIN",
            "CAP_BPF",
            "CAP_PERFMON",
        ] {
            assert!(names.contains(&must), "{must}");
        }
        // CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP,
        // NET_BIND_SERVICE, AUDIT_WRITE stay.
        for kept in [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 29] {
            assert_eq!(dropped_mask() & (1 << kept), 0, "capability {kept}");
        }
        let mut numbers: Vec<u32> = DROPPED.iter().map(|&(c, _)| c).collect();
        numbers.dedup();
        assert_eq!(numbers.len(), DROPPED.len());
        assert!(numbers.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_thread_that_drops_keeps_none_of_them_in_any_set() {
        // In a thread of its own: capabilities are per thread, so the test process keeps its.
        let (could_lower_bounding, status) = std::thread::spawn(|| {
            let before = word_pair(get().unwrap().map(|d| d.effective));
            drop_unneeded().unwrap();
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status"));
            (before & (1 << CAP_SETPCAP) != 0, status.unwrap())
        })
        .join()
        .unwrap();
        let mut sets = vec!["CapInh", "CapPrm", "CapEff", "CapAmb"];
        if could_lower_bounding {
            sets.push("CapBnd");
        }
        for set in sets {
            let line = status
                .lines()
                .find(|l| l.starts_with(set))
                .unwrap_or_else(|| panic!("{set} in {status}"));
            let mask = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
            assert_eq!(mask & dropped_mask(), 0, "{line}");
        }
    }
}
