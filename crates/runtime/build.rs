//! Links the runtime's binaries with packed relative relocations (`DT_RELR`, glibc 2.36+).
//!
//! A fresh runtime starts for every batch, so its startup is paid once per agent turn. The
//! binary holds about 33,000 relative relocations; applied one entry at a time they cost the
//! loader more than the rest of an empty batch (its own statistics, `LD_DEBUG=statistics`:
//! 11 million cycles, against 0.4 million packed), mostly in page faults on the table. A linker
//! without the option (binutils before 2.38) only warns and links as before.

fn main() {
    let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
    if linux_gnu {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
