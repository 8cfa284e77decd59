//! System accounts the attack tests run commands as.

/// The uid and gid of `nobody`, from `/etc/passwd`. Panics when there is none: the attack tests
/// that need an ordinary user cannot run without one.
pub fn nobody() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let ids = passwd
        .lines()
        .find(|l| l.starts_with("nobody:"))
        .map(|l| l.split(':').collect::<Vec<_>>())
        .and_then(|f| Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?)));
    match ids {
        Some(ids) => ids,
        None => panic!("no `nobody` user with numeric ids in /etc/passwd"),
    }
}
