//! The link arguments of our two binaries (`intendant` and the runtime's), one build script for
//! both (`build = "../build.rs"` in their `Cargo.toml`).
//!
//! - Packed relative relocations (`DT_RELR`, glibc 2.36+), on every Linux glibc build. A fresh
//!   runtime starts for every batch, so its startup is paid once per agent turn: its 33,000
//!   relative relocations, applied one entry at a time, cost the loader more than the rest of an
//!   empty batch (`LD_DEBUG=statistics`: 11 million cycles, against 0.4 million packed). The
//!   controller's 73,000 took 1.7 MB of its file (`.rela.dyn`), now a few kilobytes. A linker
//!   without the option (binutils before 2.38) only warns and links as before.
//! - Identical code folding (`--icf=all`), in optimised builds linked by rustc's own `lld`: at
//!   `opt-level = 1` every codegen unit keeps its own copy of the functions it inlines from
//!   another (an `async fn`'s state machine three times over, 25,000 drop functions, many the
//!   same bytes), and folding them took 0.7 MB off the controller (docs/benchmarks.md, "First
//!   build"). Rust promises no function two distinct addresses, so nothing may rely on it. Left
//!   out where another linker may be in use (GNU ld refuses the option) and in debug builds,
//!   whose backtraces would name a folded twin.

fn main() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    // rustc links this target with its own lld unless told otherwise (a configured linker, or
    // flags choosing another), and only there is `--icf` known to be understood.
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    let own_lld = var("TARGET") == "x86_64-unknown-linux-gnu"
        && std::env::var_os("RUSTC_LINKER").is_none()
        && !["linker", "link-self-contained", "fuse-ld"]
            .iter()
            .any(|word| flags.contains(word));
    if own_lld && var("OPT_LEVEL") != "0" {
        println!("cargo:rustc-link-arg-bins=-Wl,--icf=all");
    }
    println!("cargo:rerun-if-changed=../build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
}
