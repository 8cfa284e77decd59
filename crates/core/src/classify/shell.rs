//! The conservative shell-command classifier.
//!
//! The command text is split into simple commands (at `;`, `&`, `|`, newlines, parentheses and
//! backticks), the command word of each is found past assignments and wrappers (`sudo`, `env`,
//! `xargs`, `timeout`, `sh -c`, ...), and a table of known programs adds categories. Quoted
//! strings are also classified as commands of their own, so `bash -c "rm -rf x"` is caught; this
//! over-flags `echo "rm -rf x"`, which is the intended direction of error.

use intendant_protocol::events::ActionCategory::{
    self, CommandExec, Destructive, FileDelete, Network,
};

/// How deep quoted strings inside quoted strings are classified.
const MAX_DEPTH: usize = 4;

/// Block devices: naming one anywhere is treated as destructive.
const BLOCK_DEVICES: [&str; 6] = [
    "/dev/sd",
    "/dev/hd",
    "/dev/vd",
    "/dev/nvme",
    "/dev/mmcblk",
    "/dev/disk",
];

/// The categories of one shell command text: always [`CommandExec`], plus what the patterns find.
pub fn classify_shell(command: &str) -> Vec<ActionCategory> {
    let mut cats = vec![CommandExec];
    scan(command, 0, &mut cats);
    let squeezed: String = command.chars().filter(|c| !c.is_whitespace()).collect();
    if squeezed.contains(":(){") || BLOCK_DEVICES.iter().any(|d| command.contains(d)) {
        cats.push(Destructive);
    }
    cats.sort();
    cats.dedup();
    cats
}

fn scan(text: &str, depth: usize, cats: &mut Vec<ActionCategory>) {
    let lexed = lex(text);
    for segment in &lexed.segments {
        classify_segment(segment, cats);
    }
    if depth < MAX_DEPTH {
        for quoted in &lexed.quoted {
            scan(quoted, depth + 1, cats);
        }
    }
}

struct Lexed {
    segments: Vec<Vec<String>>,
    quoted: Vec<String>,
}

fn lex(text: &str) -> Lexed {
    let mut segments = Vec::new();
    let mut quoted = Vec::new();
    let mut segment: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars().peekable();
    let end_word = |word: &mut String, in_word: &mut bool, segment: &mut Vec<String>| {
        if *in_word {
            segment.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                let mut content = String::new();
                while let Some(q) = chars.next() {
                    if q == c {
                        break;
                    }
                    if c == '"' && q == '\\' {
                        if let Some(esc) = chars.next() {
                            content.push(esc);
                        }
                        continue;
                    }
                    content.push(q);
                }
                word.push_str(&content);
                in_word = true;
                quoted.push(content);
            }
            '\\' => {
                if let Some(esc) = chars.next() {
                    word.push(esc);
                    in_word = true;
                }
            }
            ';' | '&' | '|' | '\n' | '(' | ')' | '`' => {
                end_word(&mut word, &mut in_word, &mut segment);
                if !segment.is_empty() {
                    segments.push(std::mem::take(&mut segment));
                }
            }
            '<' | '>' => {
                end_word(&mut word, &mut in_word, &mut segment);
                let mut op = c.to_string();
                while let Some(&next) = chars.peek() {
                    if next == '>' || next == '&' {
                        op.push(next);
                        chars.next();
                    } else {
                        break;
                    }
                }
                segment.push(op);
            }
            c if c.is_whitespace() => end_word(&mut word, &mut in_word, &mut segment),
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut segment);
    if !segment.is_empty() {
        segments.push(segment);
    }
    Lexed { segments, quoted }
}

fn is_redirect(word: &str) -> bool {
    word.starts_with('<') || word.starts_with('>')
}

fn classify_segment(words: &[String], cats: &mut Vec<ActionCategory>) {
    // Drop redirections and their targets; the block-device check covers dangerous targets.
    let mut args: Vec<&str> = Vec::new();
    let mut skip_next = false;
    for w in words {
        if skip_next {
            skip_next = false;
        } else if is_redirect(w) {
            skip_next = true;
        } else {
            args.push(w);
        }
    }
    let Some(start) = command_position(&args) else {
        return;
    };
    let Some((cmd, rest)) = args[start..].split_first() else {
        return;
    };
    let name = cmd.rsplit('/').next().unwrap_or(cmd);
    classify_program(name, rest, cats);
}

/// Index of the command word, past keywords, assignments and wrapper programs.
fn command_position(args: &[&str]) -> Option<usize> {
    let mut i = 0;
    while i < args.len() {
        let w = args[i];
        let name = w.rsplit('/').next().unwrap_or(w);
        let is_assignment = w.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_')
        });
        // Flags of each wrapper that take a separate value.
        let value_flags: Option<&[&str]> = match name {
            "{" | "}" | "!" | "if" | "then" | "else" | "elif" | "do" | "while" | "until"
            | "time" | "nohup" | "command" | "builtin" | "exec" | "setsid" | "stdbuf"
            | "unbuffer" => Some(&[]),
            "sudo" | "doas" => Some(&["-u", "-g", "-C", "-h", "-p", "-U", "-r", "-t", "-T", "-D"]),
            "env" => Some(&["-u", "-C", "-S"]),
            "nice" | "ionice" => Some(&["-n", "-c", "-p"]),
            "timeout" => Some(&["-s", "-k", "--signal", "--kill-after"]),
            "xargs" => Some(&["-I", "-n", "-P", "-L", "-d", "-a", "-E", "-s"]),
            "watch" => Some(&["-n", "-d"]),
            "sh" | "bash" | "zsh" | "dash" | "ksh" => Some(&["-o", "-O"]),
            _ => None,
        };
        if is_assignment {
            i += 1;
            continue;
        }
        let Some(value_flags) = value_flags else {
            return Some(i);
        };
        i += 1;
        while i < args.len() && args[i].starts_with('-') {
            let flag = args[i];
            i += if value_flags.contains(&flag) { 2 } else { 1 };
        }
        if name == "timeout" && i < args.len() {
            // The duration operand.
            i += 1;
        }
    }
    None
}

fn has_short_flag(args: &[&str], letters: &[char]) -> bool {
    args.iter().any(|a| {
        a.starts_with('-') && !a.starts_with("--") && a[1..].chars().any(|c| letters.contains(&c))
    })
}

fn has_any(args: &[&str], words: &[&str]) -> bool {
    args.iter().any(|a| words.contains(a))
}

fn classify_program(name: &str, args: &[&str], cats: &mut Vec<ActionCategory>) {
    let positional = || args.iter().copied().filter(|a| !a.starts_with('-'));
    match name {
        "rm" => {
            cats.push(FileDelete);
            let sweeping = ["/", "/*", "~", "~/", "*", ".", "..", "$HOME", "${HOME}"];
            if has_short_flag(args, &['r', 'R'])
                || has_any(args, &["--recursive", "--no-preserve-root"])
                || positional().any(|a| sweeping.contains(&a))
            {
                cats.push(Destructive);
            }
        }
        "rmdir" | "unlink" | "truncate" => cats.push(FileDelete),
        "shred" | "wipefs" | "mkswap" | "fdisk" | "sfdisk" | "cfdisk" | "parted" | "mke2fs"
        | "shutdown" | "reboot" | "halt" | "poweroff" | "killall" | "pkill" => {
            cats.push(Destructive)
        }
        n if n.starts_with("mkfs") => cats.push(Destructive),
        "dd" if args.iter().any(|a| a.starts_with("of=")) => cats.push(Destructive),
        "init" | "telinit" if has_any(args, &["0", "6"]) => cats.push(Destructive),
        "systemctl" if has_any(args, &["poweroff", "reboot", "halt", "kexec"]) => {
            cats.push(Destructive)
        }
        "chmod" | "chown" | "chgrp"
            if has_short_flag(args, &['R']) || has_any(args, &["--recursive", "/"]) =>
        {
            cats.push(Destructive)
        }
        "crontab" if has_short_flag(args, &['r']) => cats.push(Destructive),
        "mv" if has_any(args, &["/dev/null"]) => cats.push(Destructive),
        "find" => {
            if has_any(args, &["-delete"]) {
                cats.extend([FileDelete, Destructive]);
            }
            if let Some(at) = args
                .iter()
                .position(|a| matches!(*a, "-exec" | "-execdir" | "-ok" | "-okdir"))
            {
                let inner: Vec<String> = args[at + 1..]
                    .iter()
                    .take_while(|a| !matches!(**a, ";" | "+"))
                    .map(|a| (*a).to_owned())
                    .collect();
                classify_segment(&inner, cats);
            }
        }
        "git" => classify_git(args, cats),
        "curl" | "wget" | "ssh" | "scp" | "sftp" | "nc" | "ncat" | "netcat" | "telnet" | "ftp"
        | "lftp" | "socat" | "http" | "https" | "xh" | "aria2c" | "ping" | "dig" | "nslookup"
        | "host" | "whois" | "traceroute" | "mosh" | "gh" | "npx" | "bunx" | "pnpx" => {
            cats.push(Network)
        }
        "rsync" => {
            cats.push(Network);
            if args.iter().any(|a| a.starts_with("--delete")) {
                cats.push(Destructive);
            }
        }
        "npm" | "pnpm" | "yarn" | "bun" | "pip" | "pip3" | "pipx" | "uv" | "poetry" | "conda"
        | "mamba" | "cargo" | "go" | "gem" | "bundle" | "composer" | "brew" | "apt" | "apt-get"
        | "dnf" | "yum" | "pacman" | "apk" | "zypper" | "snap" | "flatpak" | "docker"
        | "podman" => classify_package_tool(name, args, cats),
        "python" | "python3" => {
            if let Some(at) = args.windows(2).position(|w| w == ["-m", "pip"]) {
                classify_package_tool("pip", &args[at + 2..], cats);
            }
        }
        _ => {}
    }
}

fn classify_package_tool(name: &str, args: &[&str], cats: &mut Vec<ActionCategory>) {
    const FETCHING: [&str; 19] = [
        "install", "i", "add", "ci", "update", "upgrade", "publish", "exec", "dlx", "create",
        "fetch", "download", "get", "search", "login", "sync", "lock", "pull", "push",
    ];
    const REMOVING: [&str; 8] = [
        "remove",
        "purge",
        "autoremove",
        "erase",
        "uninstall",
        "rmi",
        "prune",
        "rm",
    ];
    let positional: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| !a.starts_with('-'))
        .collect();
    // Bare `yarn`/`bundle` installs; `pacman -S` syncs from the network.
    let bare_install = positional.is_empty() && matches!(name, "yarn" | "bundle");
    let pacman_sync = name == "pacman" && has_short_flag(args, &['S']);
    let build_fetches = matches!(name, "docker" | "podman") && has_any(&positional, &["build"]);
    // `cargo run`/`npm run` execute local code; only containers fetch on run.
    let run_fetches = has_any(&positional, &["run"]) && matches!(name, "docker" | "podman");
    let fetching = positional.iter().any(|a| FETCHING.contains(a));
    if fetching || bare_install || pacman_sync || build_fetches || run_fetches {
        cats.push(Network);
    }
    let system_remove = matches!(
        name,
        "apt"
            | "apt-get"
            | "dnf"
            | "yum"
            | "apk"
            | "zypper"
            | "snap"
            | "flatpak"
            | "docker"
            | "podman"
    ) && positional.iter().any(|a| REMOVING.contains(a));
    if system_remove || (name == "pacman" && has_short_flag(args, &['R'])) {
        cats.push(Destructive);
    }
}

fn classify_git(args: &[&str], cats: &mut Vec<ActionCategory>) {
    let mut i = 0;
    while i < args.len() && args[i].starts_with('-') {
        i += if matches!(args[i], "-C" | "-c") { 2 } else { 1 };
    }
    let Some((sub, rest)) = args.get(i..).and_then(<[&str]>::split_first) else {
        return;
    };
    match *sub {
        "push" => {
            cats.push(Network);
            let forced = has_short_flag(rest, &['f', 'd'])
                || rest.iter().any(|a| {
                    a.starts_with("--force") || matches!(*a, "--delete" | "--mirror" | "--prune")
                })
                || rest.iter().any(|a| a.starts_with('+'));
            if forced {
                cats.push(Destructive);
            }
        }
        "pull" | "fetch" | "clone" | "ls-remote" => cats.push(Network),
        "submodule" | "remote" if has_any(rest, &["update", "prune"]) => cats.push(Network),
        "reset" if has_any(rest, &["--hard", "--merge", "--keep"]) => cats.push(Destructive),
        "clean" if has_short_flag(rest, &['f']) || has_any(rest, &["--force"]) => {
            cats.extend([FileDelete, Destructive]);
        }
        "checkout" if has_any(rest, &["--", ".", "-f", "--force"]) => cats.push(Destructive),
        "restore"
            // Only `--staged` alone leaves the working tree alone.
            if !has_any(rest, &["--staged", "-S"]) || has_any(rest, &["--worktree", "-W"]) =>
        {
            cats.push(Destructive)
        }
        "branch"
            if has_any(rest, &["-D"])
                || (has_any(rest, &["-d", "--delete"]) && has_any(rest, &["-f", "--force"])) =>
        {
            cats.push(Destructive)
        }
        "stash" if has_any(rest, &["drop", "clear"]) => cats.push(Destructive),
        "filter-branch" | "filter-repo" => cats.push(Destructive),
        "reflog" if has_any(rest, &["expire", "delete"]) => cats.push(Destructive),
        "rm" => cats.push(FileDelete),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
