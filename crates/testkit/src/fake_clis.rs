//! The fake agent CLIs the tests run: Python scripts under `crates/agents/tests/fixtures/`
//! (`fake_cli.py` for one-shot delegation, `fake_worker.py` replaying a recorded worker
//! transcript), shared by the agents and cli suites.

use std::path::{Path, PathBuf};

/// The fixtures directory holding the fake CLIs and their recordings.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents/tests/fixtures")
}

/// Writes `dir/NAME`, an executable fake worker CLI replaying `transcript` (a recording under
/// `fixtures/workers/`) that appends its argv, environment names and every line it read to
/// `record`; returns its path.
pub fn write_fake_worker(
    dir: &Path,
    name: &str,
    transcript: &str,
    record: &Path,
) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    let exe = dir.join(name);
    std::fs::write(
        &exe,
        format!(
            "#!/bin/sh\nFAKE_WORKER_RECORD={} exec python3 {} {} \"$@\"\n",
            record.display(),
            fixtures().join("fake_worker.py").display(),
            fixtures().join("workers").join(transcript).display(),
        ),
    )?;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))?;
    Ok(exe)
}
