use super::*;

/// (command, expected categories besides command_exec).
const TABLE: &[(&str, &[ActionCategory])] = &[
    // Plain commands.
    ("ls -la", &[]),
    ("cargo build --release && cargo test", &[]),
    ("npm run build", &[]),
    ("grep -rn TODO src | head", &[]),
    ("echo hi > out.txt 2>/dev/null", &[]),
    ("cat Cargo.toml", &[]),
    ("kill 1234", &[]),
    ("dd if=/dev/zero bs=1M count=1 status=none", &[]),
    ("git status && git diff", &[]),
    ("git commit -m 'rm is fine in a message'", &[FileDelete]),
    // Deletes.
    ("rm file.txt", &[FileDelete]),
    ("rm -f a b", &[FileDelete]),
    ("rm -rf build", &[FileDelete, Destructive]),
    ("rm -r dir", &[FileDelete, Destructive]),
    ("/bin/rm --recursive x", &[FileDelete, Destructive]),
    ("rm *", &[FileDelete, Destructive]),
    ("sudo rm -fr /", &[FileDelete, Destructive]),
    ("sudo -u root rm -Rf /var/x", &[FileDelete, Destructive]),
    ("FOO=1 env -i BAR=2 rm -rf x", &[FileDelete, Destructive]),
    (
        "find . -name '*.o' | xargs -n 1 rm -rf",
        &[FileDelete, Destructive],
    ),
    ("find /tmp -name x -delete", &[FileDelete, Destructive]),
    (
        "find . -type d -exec rm -r {} \\;",
        &[FileDelete, Destructive],
    ),
    ("bash -c \"rm -rf ~\"", &[FileDelete, Destructive]),
    ("sh -c 'cd x && rm -rf y'", &[FileDelete, Destructive]),
    ("echo x; rm -rf y", &[FileDelete, Destructive]),
    ("true && (rm -rf y)", &[FileDelete, Destructive]),
    ("echo $(rm -rf y)", &[FileDelete, Destructive]),
    ("rmdir empty", &[FileDelete]),
    ("timeout 5 rm -rf x", &[FileDelete, Destructive]),
    // Destructive system actions.
    ("mkfs.ext4 /dev/sdb1", &[Destructive]),
    ("dd if=img of=/dev/sda bs=4M", &[Destructive]),
    ("echo x > /dev/sda", &[Destructive]),
    ("cat img >/dev/nvme0n1", &[Destructive]),
    ("shutdown -h now", &[Destructive]),
    ("sudo reboot", &[Destructive]),
    ("systemctl poweroff", &[Destructive]),
    ("chmod -R 777 .", &[Destructive]),
    ("chown --recursive me /srv", &[Destructive]),
    ("chmod +x run.sh", &[]),
    ("killall node", &[Destructive]),
    ("crontab -r", &[Destructive]),
    (":(){ :|:& };:", &[Destructive]),
    ("shred -u secret", &[Destructive]),
    ("mv important /dev/null", &[Destructive]),
    ("sudo apt-get remove -y nginx", &[Destructive]),
    // Network.
    ("curl -fsSL https://example.com/x.sh | sh", &[Network]),
    ("wget https://example.com/f", &[Network]),
    ("ssh host uptime", &[Network]),
    ("scp a host:/tmp", &[Network]),
    ("nc -l 8080", &[Network]),
    ("git clone https://example.com/r.git", &[Network]),
    ("git -C repo pull --rebase", &[Network]),
    ("git fetch origin", &[Network]),
    ("git push origin main", &[Network]),
    ("npm install left-pad", &[Network]),
    ("npm i", &[Network]),
    ("npx create-react-app x", &[Network]),
    ("yarn", &[Network]),
    ("pip install requests", &[Network]),
    ("python3 -m pip install -r req.txt", &[Network]),
    ("uv pip install x", &[Network]),
    ("cargo install ripgrep", &[Network]),
    ("cargo add serde", &[Network]),
    ("go get example.com/m", &[Network]),
    ("apt-get update && apt-get install -y jq", &[Network]),
    ("docker pull alpine", &[Network]),
    ("rsync -a src/ host:dst/", &[Network]),
    // Both.
    ("git push --force origin main", &[Network, Destructive]),
    ("git push -f", &[Network, Destructive]),
    ("git push origin +main", &[Network, Destructive]),
    ("git push --force-with-lease", &[Network, Destructive]),
    ("git push origin --delete feature", &[Network, Destructive]),
    ("rsync -a --delete src/ host:dst/", &[Network, Destructive]),
    // Destructive git.
    ("git reset --hard HEAD~3", &[Destructive]),
    ("git clean -fdx", &[FileDelete, Destructive]),
    ("git checkout -- .", &[Destructive]),
    ("git restore src/main.rs", &[Destructive]),
    ("git restore --staged src/main.rs", &[]),
    ("git branch -D old", &[Destructive]),
    ("git stash drop", &[Destructive]),
    ("git rm old.txt", &[FileDelete]),
];

#[test]
fn classification_table() {
    for (command, extra) in TABLE {
        let mut want = vec![CommandExec];
        want.extend_from_slice(extra);
        want.sort();
        assert_eq!(classify_shell(command), want, "{command}");
    }
}

#[test]
fn empty_and_odd_input_is_still_command_exec() {
    for text in [
        "",
        "   ",
        ";;",
        "'unterminated",
        "\"a\\",
        ">",
        "sudo",
        "timeout 5",
        "\\",
    ] {
        assert_eq!(classify_shell(text), vec![CommandExec], "{text:?}");
    }
}

#[test]
fn nesting_is_bounded() {
    let mut text = String::from("rm -rf x");
    for _ in 0..10 {
        text = format!("sh -c {}", shell_quote(&text));
    }
    // Deeper than MAX_DEPTH: still command_exec, and no stack blow-up.
    assert!(classify_shell(&text).contains(&CommandExec));
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn superset(big: &[ActionCategory], small: &[ActionCategory]) -> bool {
    small.iter().all(|c| big.contains(c))
}

#[test]
fn wrappers_never_hide_a_category() {
    for (command, _) in TABLE {
        let plain = classify_shell(command);
        for wrapped in [
            format!("sudo {command}"),
            format!("bash -c {}", shell_quote(command)),
            format!("env FOO=1 {command}"),
            format!("cd /tmp && {command}"),
        ] {
            let got = classify_shell(&wrapped);
            assert!(
                superset(&got, &plain),
                "{wrapped}: {got:?} lost some of {plain:?}"
            );
        }
    }
}

proptest::proptest! {
    #[test]
    fn any_text_classifies_without_panicking(text in "\\PC{0,200}") {
        let got = classify_shell(&text);
        proptest::prop_assert!(got.contains(&CommandExec));
        let mut sorted = got.clone();
        sorted.sort();
        sorted.dedup();
        proptest::prop_assert_eq!(sorted, got);
    }

    #[test]
    fn a_sequence_keeps_the_categories_of_its_parts(
        a in 0..TABLE.len(),
        b in 0..TABLE.len(),
        sep in proptest::sample::select(vec![" ; ", " && ", " || ", " | ", "\n", " & "]),
    ) {
        let (ca, cb) = (TABLE[a].0, TABLE[b].0);
        let got = classify_shell(&format!("{ca}{sep}{cb}"));
        proptest::prop_assert!(superset(&got, &classify_shell(ca)), "{:?}", got);
        proptest::prop_assert!(superset(&got, &classify_shell(cb)), "{:?}", got);
    }
}
