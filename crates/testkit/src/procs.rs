//! What the tests see in `/proc`: the processes a test's commands left behind, and those in a
//! session's network namespace.

/// Every process whose command line contains `marker`, as `pid: command line` (a test gives its
/// commands a marker no other test uses, such as `sleep 1000.<its pid>`).
pub fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(marker) {
                found.push(format!("{}: {text}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// Every process whose network namespace is `ns` (as `/proc/PID/ns/net` reads: `net:[INODE]`),
/// by pid.
pub fn processes_in_namespace(ns: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read_link(e.path().join("ns/net")).is_ok_and(|l| l.to_string_lossy() == ns)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_a_process_by_its_command_line_only() {
        let marker = format!("{}.7", std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg(format!("100{marker}"))
            .spawn()
            .unwrap();
        // The child shows its own command line once it has exec'd.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut found = super::processes_with(&marker);
        while found.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            found = super::processes_with(&marker);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(super::processes_with("no such marker 0x5f3a").is_empty());
    }

    #[test]
    fn finds_the_processes_of_a_network_namespace() {
        let own = std::fs::read_link("/proc/self/ns/net").unwrap();
        let found = super::processes_in_namespace(&own.to_string_lossy());
        assert!(found.contains(&std::process::id().to_string()), "{found:?}");
        assert!(super::processes_in_namespace("net:[1]").is_empty());
    }
}
