use std::collections::BTreeMap;

use super::*;
use crate::autonomy::AutonomyLevel;
use crate::bus::EventBus;
use crate::child::CancelToken;
use crate::classify::ActionCategory;
use crate::intents::IntentInbox;
use ActionCategory::*;
use AutonomyLevel::{Full, High, Low, Medium};
use intendant_protocol::events::{AppEvent, ControlMsg};
use intendant_protocol::runtime::Command;

fn table(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn default_rules_table() {
    // Rows: category; columns: low, medium, high, full (the rule before the level relaxes it).
    let expected: [(ActionCategory, [Rule; 4]); 11] = {
        use Rule::{Ask as K, Auto as A};
        [
            (FileRead, [A, A, A, A]),
            (FileWrite, [K, K, K, K]),
            (FileDelete, [K, K, K, K]),
            (CommandExec, [K, K, K, K]),
            (Network, [K, A, A, A]),
            (Destructive, [K, K, K, K]),
            (HumanInput, [A, A, A, A]),
            (DisplayControl, [K, K, K, K]),
            (ToolCall, [K, A, A, A]),
            (Mcp, [K, K, K, K]),
            (Memory, [K, K, K, K]),
        ]
    };
    for (category, rules) in expected {
        for (level, rule) in AutonomyLevel::ALL.into_iter().zip(rules) {
            assert_eq!(default_rule(category, level), rule, "{category} at {level}");
        }
    }
}

#[test]
fn every_level_against_every_rule() {
    // What a configured `ask` becomes; columns: low, medium, high, full. `auto` and `deny` are
    // unchanged at every level.
    let ask_becomes: [(ActionCategory, [Rule; 4]); 10] = {
        use Rule::{Ask as K, Auto as A};
        [
            (FileRead, [K, K, A, A]),
            (FileWrite, [K, K, A, A]),
            (FileDelete, [K, K, A, A]),
            (CommandExec, [K, K, A, A]),
            (Network, [K, K, A, A]),
            (Destructive, [K, K, K, A]),
            (HumanInput, [A, A, A, A]),
            (DisplayControl, [K, K, A, A]),
            (ToolCall, [K, K, A, A]),
            (Mcp, [K, K, A, A]),
        ]
    };
    for (category, asks) in ask_becomes {
        for (level, ask) in AutonomyLevel::ALL.into_iter().zip(asks) {
            for (rule, want) in [
                (Rule::Auto, Rule::Auto),
                (Rule::Ask, ask),
                (Rule::Deny, Rule::Deny),
            ] {
                // Through the configuration path too.
                let policy =
                    ApprovalPolicy::new(level, &table(&[(category.name(), rule.name())])).unwrap();
                assert_eq!(
                    policy.effective(category),
                    want,
                    "{category}={rule} at {level}"
                );
                assert_eq!(effective_rule(category, rule, level), want);
            }
        }
    }
}

#[test]
fn effective_defaults_per_level() {
    let ask_at = |level| {
        let p = ApprovalPolicy::new(level, &BTreeMap::new()).unwrap();
        ActionCategory::ALL
            .into_iter()
            .filter(|c| p.effective(*c) == Rule::Ask)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ask_at(Low),
        vec![
            FileWrite,
            FileDelete,
            CommandExec,
            Network,
            Destructive,
            DisplayControl,
            ToolCall,
            Mcp,
            Schedule,
            Memory
        ]
    );
    assert_eq!(
        ask_at(Medium),
        vec![
            FileWrite,
            FileDelete,
            CommandExec,
            Destructive,
            DisplayControl,
            Mcp,
            Schedule,
            Memory
        ]
    );
    // A memory is asked of a human at every level (`memory::tests` attacks the rest).
    assert_eq!(ask_at(High), vec![Destructive, Schedule, Memory]);
    assert_eq!(ask_at(Full), vec![Schedule, Memory]);
}

#[test]
fn an_mcp_tools_hints_shape_its_default_at_each_level() {
    // Columns: low, medium, high, full.
    let expected: [(McpHint, [Rule; 4]); 3] = {
        use Rule::{Ask as K, Auto as A};
        [
            (McpHint::ReadOnly, [K, A, A, A]),
            (McpHint::Additive, [K, K, A, A]),
            (McpHint::Destructive, [K, K, K, A]),
        ]
    };
    for (hint, rules) in expected {
        for (level, want) in AutonomyLevel::ALL.into_iter().zip(rules) {
            let policy = ApprovalPolicy::new(level, &BTreeMap::new()).unwrap();
            let decision = policy.decide_mcp("mcp__files_read", hint);
            assert_eq!(decision.rule, want, "{hint:?} at {level}");
            assert_eq!(decision.category, Mcp);
        }
    }
}

#[test]
fn approval_keys_name_mcp_tools_by_pattern_the_most_specific_deciding() {
    let policy = ApprovalPolicy::new(
        Medium,
        &table(&[
            ("mcp__files_*", "auto"),
            ("mcp__files_write_*", "deny"),
            ("mcp", "deny"),
        ]),
    )
    .unwrap();
    let rule = |name| policy.decide_mcp(name, McpHint::Destructive).rule;
    assert_eq!(rule("mcp__files_read_file"), Rule::Auto);
    assert_eq!(rule("mcp__files_write_file"), Rule::Deny);
    assert_eq!(
        rule("mcp__git_status"),
        Rule::Deny,
        "[approval] mcp holds for the rest"
    );
    let held = ApprovalPolicy::new(High, &table(&[("destructive", "deny")])).unwrap();
    assert_eq!(
        held.decide_mcp("mcp__git_reset", McpHint::Destructive),
        Decision {
            rule: Rule::Deny,
            category: Destructive
        }
    );
    assert_eq!(
        held.decide_mcp("mcp__git_status", McpHint::ReadOnly).rule,
        Rule::Auto
    );
    let e = ApprovalPolicy::new(Medium, &table(&[("mcp__x", "sometimes")])).unwrap_err();
    assert!(e.to_string().contains("\"sometimes\""), "{e}");
    for (pattern, name, matches) in [
        ("mcp__a_*", "mcp__a_b", true),
        ("mcp__a_*", "mcp__b_a", false),
        ("mcp__*_read", "mcp__files_read", true),
        ("mcp__*_read", "mcp__files_reader", false),
        ("mcp__a", "mcp__a", true),
        ("mcp__a", "mcp__ab", false),
        ("mcp__*x*y", "mcp__axbxy", true),
        ("mcp__ab*ba", "mcp__aba", false),
    ] {
        assert_eq!(
            tool_pattern_matches(pattern, name),
            matches,
            "{pattern} {name}"
        );
    }
}

#[test]
fn bad_config_is_a_clear_error() {
    let e = ApprovalPolicy::new(Medium, &table(&[("shell", "ask")])).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("[approval]") && msg.contains("\"shell\"") && msg.contains("network"),
        "{msg}"
    );
    let e = ApprovalPolicy::new(Medium, &table(&[("network", "never")])).unwrap_err();
    assert_eq!(
        e,
        ApprovalConfigError::UnknownRule {
            category: "network".into(),
            value: "never".into()
        }
    );
    assert!(
        e.to_string().contains("\"auto\", \"ask\" or \"deny\""),
        "{e}"
    );
}

fn exec(command: &str, nonce: u64) -> Command {
    Command {
        function: "execAsAgent".into(),
        nonce,
        command: Some(command.into()),
        ..Command::default()
    }
}

fn inspect(nonce: u64) -> Command {
    Command {
        function: "inspectPath".into(),
        nonce,
        path: Some("src".into()),
        ..Command::default()
    }
}

#[test]
fn a_command_takes_its_strictest_category() {
    let p = ApprovalPolicy::new(High, &BTreeMap::new()).unwrap();
    assert_eq!(
        p.decide(&exec("ls", 1)),
        Decision {
            rule: Rule::Auto,
            category: CommandExec
        }
    );
    assert_eq!(
        p.decide(&exec("rm -rf build", 1)),
        Decision {
            rule: Rule::Ask,
            category: Destructive
        }
    );
    let p = ApprovalPolicy::new(Full, &table(&[("network", "deny")])).unwrap();
    assert_eq!(
        p.decide(&exec("curl https://x", 1)),
        Decision {
            rule: Rule::Deny,
            category: Network
        }
    );
    assert_eq!(p.decide(&exec("ls", 1)).rule, Rule::Auto);
    let p = ApprovalPolicy::new(Medium, &table(&[("command_exec", "auto")])).unwrap();
    assert_eq!(p.decide(&exec("ls", 1)).rule, Rule::Auto);
    assert_eq!(p.decide(&exec("git push -f", 1)).category, Destructive);
}

#[test]
fn terminal_answers_parse() {
    for (text, want) in [
        ("y", Some(ApprovalAnswer::Approve)),
        (" YES\n", Some(ApprovalAnswer::Approve)),
        ("s", Some(ApprovalAnswer::Skip)),
        ("a", Some(ApprovalAnswer::ApproveAll)),
        ("all", Some(ApprovalAnswer::ApproveAll)),
        ("n", Some(ApprovalAnswer::Deny)),
        ("no", Some(ApprovalAnswer::Deny)),
        ("", None),
        ("maybe", None),
    ] {
        assert_eq!(parse_terminal_answer(text), want, "{text:?}");
    }
    assert_eq!(
        ApprovalAnswer::ApproveAll.into_control(4),
        ControlMsg::ApproveAll { id: 4 }
    );
    assert_eq!(
        ApprovalAnswer::from_control(&ControlMsg::Skip { id: 4 }, 4),
        Some(ApprovalAnswer::Skip)
    );
    assert_eq!(
        ApprovalAnswer::from_control(&ControlMsg::Skip { id: 5 }, 4),
        None
    );
}

/// Answers every approval request on `bus` with `answers`, in order.
fn responder(
    bus: &EventBus,
    answers: Vec<ApprovalAnswer>,
) -> tokio::task::JoinHandle<Vec<AppEvent>> {
    let mut ring = bus.subscribe();
    let bus = bus.clone();
    tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut answers = answers.into_iter();
        while let Ok(event) = ring.recv().await {
            if let AppEvent::ApprovalRequired { id, .. } = &event
                && let Some(a) = answers.next()
            {
                bus.send_intent(a.into_control(*id));
            }
            let done = matches!(event, AppEvent::Done { .. });
            seen.push(event);
            if done {
                break;
            }
        }
        seen
    })
}

async fn run_gate(
    level: AutonomyLevel,
    rules: &[(&str, &str)],
    interactive: bool,
    batches: &[Vec<Command>],
    answers: Vec<ApprovalAnswer>,
) -> (Vec<Vec<Verdict>>, Vec<AppEvent>, ApprovalGate) {
    let bus = EventBus::new();
    let mut inbox = IntentInbox::new(&bus);
    let watcher = responder(&bus, answers);
    let mut gate = ApprovalGate::new(
        ApprovalPolicy::new(level, &table(rules)).unwrap(),
        interactive,
    );
    let mut verdicts = Vec::new();
    for batch in batches {
        verdicts.push(
            gate.review("s1", batch, &bus, &mut inbox, &CancelToken::new())
                .await,
        );
    }
    bus.emit(AppEvent::Done {
        message: String::new(),
    });
    let events = watcher.await.unwrap();
    (verdicts, events, gate)
}

fn approval_events(events: &[AppEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AppEvent::ApprovalRequired {
                session_id,
                command_preview,
                category,
                ..
            } => Some(format!(
                "required {session_id} {category} {command_preview}"
            )),
            AppEvent::ApprovalResolved { verdict, .. } => Some(format!("resolved {verdict}")),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn approve_is_remembered_for_identical_commands() {
    let (verdicts, events, _) = run_gate(
        Medium,
        &[],
        true,
        &[
            vec![inspect(1), exec("make", 2)],
            vec![exec("make", 3), exec("make test", 4)],
        ],
        vec![ApprovalAnswer::Approve, ApprovalAnswer::Approve],
    )
    .await;
    assert_eq!(
        verdicts,
        vec![vec![Verdict::Approve; 2], vec![Verdict::Approve; 2]]
    );
    assert_eq!(
        approval_events(&events),
        [
            "required s1 command_exec $ make",
            "resolved approve",
            "required s1 command_exec $ make test",
            "resolved approve"
        ]
    );
}

#[tokio::test]
async fn skip_is_not_remembered_and_the_batch_goes_on() {
    let (verdicts, events, _) = run_gate(
        Medium,
        &[],
        true,
        &[vec![exec("make", 1), exec("ls", 2)], vec![exec("make", 3)]],
        vec![
            ApprovalAnswer::Skip,
            ApprovalAnswer::Approve,
            ApprovalAnswer::Approve,
        ],
    )
    .await;
    assert_eq!(
        verdicts,
        vec![
            vec![Verdict::Skip, Verdict::Approve],
            vec![Verdict::Approve]
        ]
    );
    assert_eq!(approval_events(&events).len(), 6);
}

#[tokio::test]
async fn deny_stops_the_rest_of_the_batch() {
    let (verdicts, events, gate) = run_gate(
        Medium,
        &[],
        true,
        &[vec![exec("make", 1), exec("ls", 2), inspect(3)]],
        vec![ApprovalAnswer::Deny],
    )
    .await;
    assert_eq!(verdicts, vec![vec![Verdict::Deny; 3]]);
    assert_eq!(
        approval_events(&events),
        ["required s1 command_exec $ make", "resolved deny"]
    );
    // The denial that stopped the task is the user's, not the batch follow-on.
    let denial = gate.last_denial().unwrap();
    assert_eq!(denial.source, DenialSource::User);
    assert_eq!(denial.command_preview, "$ make");
}

#[tokio::test]
async fn approve_all_raises_the_session_to_full_but_deny_rules_hold() {
    let (verdicts, events, gate) = run_gate(
        Medium,
        &[("network", "deny")],
        true,
        &[
            vec![exec("make", 1), exec("rm -rf build", 2)],
            vec![exec("shutdown now", 3), exec("curl x", 4)],
        ],
        vec![ApprovalAnswer::ApproveAll],
    )
    .await;
    assert_eq!(
        verdicts,
        vec![
            vec![Verdict::Approve; 2],
            vec![Verdict::Approve, Verdict::Deny]
        ]
    );
    assert_eq!(approval_events(&events).len(), 2);
    assert_eq!(gate.level(), Full);
    assert_eq!(gate.last_denial().unwrap().source, DenialSource::Rule);
    assert!(
        gate.last_denial()
            .unwrap()
            .reason()
            .contains("denies network")
    );
}

#[tokio::test]
async fn headless_denies_without_waiting() {
    let (verdicts, events, gate) = run_gate(
        Medium,
        &[],
        false,
        &[vec![inspect(1), exec("make", 2)]],
        Vec::new(),
    )
    .await;
    assert_eq!(verdicts, vec![vec![Verdict::Approve, Verdict::Deny]]);
    assert_eq!(
        approval_events(&events),
        ["required s1 command_exec $ make", "resolved deny"]
    );
    let denial = gate.last_denial().unwrap();
    assert_eq!(denial.source, DenialSource::Headless);
    assert!(
        denial.reason().contains("no interactive human"),
        "{}",
        denial.reason()
    );
}

#[tokio::test]
async fn headless_full_autonomy_runs_without_asking() {
    let (verdicts, events, _) = run_gate(
        Full,
        &[],
        false,
        &[vec![exec("rm -rf build", 1)]],
        Vec::new(),
    )
    .await;
    assert_eq!(verdicts, vec![vec![Verdict::Approve]]);
    assert!(approval_events(&events).is_empty());
}

#[tokio::test]
async fn human_input_is_never_an_approval() {
    let ask = Command {
        function: "askHuman".into(),
        nonce: 1,
        question: Some("which branch?".into()),
        ..Command::default()
    };
    let (verdicts, events, _) = run_gate(
        Low,
        &[("human_input", "ask")],
        false,
        &[vec![ask]],
        Vec::new(),
    )
    .await;
    assert_eq!(verdicts, vec![vec![Verdict::Approve]]);
    assert!(approval_events(&events).is_empty());
}

#[tokio::test]
async fn other_intents_stay_buffered_during_a_wait() {
    let bus = EventBus::new();
    let mut inbox = IntentInbox::new(&bus);
    let mut ring = bus.subscribe();
    let answering = bus.clone();
    let answerer = tokio::spawn(async move {
        while let Ok(event) = ring.recv().await {
            if let AppEvent::ApprovalRequired { id, .. } = event {
                answering.send_intent(ControlMsg::FollowUp {
                    text: "also do X".into(),
                });
                answering.send_intent(ControlMsg::Approve { id: id + 1000 });
                answering.send_intent(ControlMsg::Approve { id });
                break;
            }
        }
    });
    let mut gate = ApprovalGate::new(ApprovalPolicy::new(Medium, &BTreeMap::new()).unwrap(), true);
    let v = gate
        .review(
            "s",
            &[exec("make", 1)],
            &bus,
            &mut inbox,
            &CancelToken::new(),
        )
        .await;
    answerer.await.unwrap();
    assert_eq!(v, vec![Verdict::Approve]);
    assert_eq!(inbox.take_buffered_follow_ups(), vec!["also do X"]);
}

/// Runs `act` once the first approval is asked; the events up to its resolution.
fn when_asked(
    bus: &EventBus,
    act: impl FnOnce() + Send + 'static,
) -> tokio::task::JoinHandle<Vec<AppEvent>> {
    let mut ring = bus.subscribe();
    tokio::spawn(async move {
        let mut act = Some(act);
        let mut seen = Vec::new();
        while let Ok(event) = ring.recv().await {
            if matches!(event, AppEvent::ApprovalRequired { .. })
                && let Some(act) = act.take()
            {
                act();
            }
            let resolved = matches!(event, AppEvent::ApprovalResolved { .. });
            seen.push(event);
            if resolved {
                return seen;
            }
        }
        seen
    })
}

#[tokio::test]
async fn an_interrupt_resolves_the_pending_approval_and_asks_nothing_more() {
    let bus = EventBus::new();
    let mut inbox = IntentInbox::new(&bus);
    let cancel = CancelToken::new();
    let interrupter = {
        let cancel = cancel.clone();
        when_asked(&bus, move || cancel.cancel())
    };
    let mut gate = ApprovalGate::new(ApprovalPolicy::new(Medium, &BTreeMap::new()).unwrap(), true);
    let batch = [exec("make", 1), exec("make test", 2)];
    let v = gate.review("s", &batch, &bus, &mut inbox, &cancel).await;
    let events = interrupter.await.unwrap();
    assert_eq!(v, vec![Verdict::Deny, Verdict::Deny]);
    assert_eq!(
        approval_events(&events),
        vec!["required s command_exec $ make", "resolved deny"]
    );
    let denial = gate.last_denial().unwrap();
    assert_eq!(denial.source, DenialSource::Interrupted);
}

#[tokio::test]
async fn only_a_human_approval_of_display_control_grants_the_user_display() {
    let capture = |nonce| Command {
        function: "captureScreen".into(),
        nonce,
        ..Command::default()
    };
    let on_display = Command {
        display: Some(0),
        ..exec("xclock", 1)
    };
    // Skipped: no grant.
    let (_, _, gate) = run_gate(
        Medium,
        &[],
        true,
        &[vec![capture(1)]],
        vec![ApprovalAnswer::Skip],
    )
    .await;
    assert!(!gate.user_display_granted());
    // Run by the autonomy level alone, nobody asked: no grant.
    let (verdicts, _, gate) = run_gate(Full, &[], false, &[vec![capture(1)]], vec![]).await;
    assert_eq!(verdicts, vec![vec![Verdict::Approve]]);
    assert!(!gate.user_display_granted());
    // A human approved something else: no grant.
    let (_, _, gate) = run_gate(
        Medium,
        &[],
        true,
        &[vec![exec("make", 1)]],
        vec![ApprovalAnswer::Approve],
    )
    .await;
    assert!(!gate.user_display_granted());
    // A human approved a command on a display: granted for the rest of the session.
    let (verdicts, _, gate) = run_gate(
        Medium,
        &[],
        true,
        &[vec![on_display], vec![inspect(2)]],
        vec![ApprovalAnswer::Approve],
    )
    .await;
    assert_eq!(verdicts, vec![vec![Verdict::Approve]; 2]);
    assert!(gate.user_display_granted());
}

async fn run_external(
    level: AutonomyLevel,
    rules: &[(&str, &str)],
    interactive: bool,
    actions: &[ExternalAction],
    answers: Vec<ApprovalAnswer>,
) -> (Vec<ApprovalAnswer>, Vec<AppEvent>, ApprovalGate) {
    let bus = EventBus::new();
    let mut inbox = IntentInbox::new(&bus);
    let watcher = responder(&bus, answers);
    let mut gate = ApprovalGate::new(
        ApprovalPolicy::new(level, &table(rules)).unwrap(),
        interactive,
    );
    let mut out = Vec::new();
    for action in actions {
        let (turn, withdrawn) = (CancelToken::new(), CancelToken::new());
        out.push(
            gate.review_external("s1", action, &bus, &mut inbox, &turn, &withdrawn)
                .await,
        );
    }
    bus.emit(AppEvent::Done {
        message: String::new(),
    });
    (out, watcher.await.unwrap(), gate)
}

fn external(preview: &str, category: ActionCategory) -> ExternalAction {
    ExternalAction {
        preview: preview.to_owned(),
        category,
        detail: None,
    }
}

#[tokio::test]
async fn an_external_request_is_asked_like_a_command_and_remembered() {
    let actions = [
        external("$ touch a", CommandExec),
        external("$ touch a", CommandExec),
        external("edit b.txt", FileWrite),
    ];
    let (answers, events, gate) = run_external(
        Medium,
        &[],
        true,
        &actions,
        vec![ApprovalAnswer::Approve, ApprovalAnswer::Deny],
    )
    .await;
    assert_eq!(
        answers,
        [
            ApprovalAnswer::Approve,
            ApprovalAnswer::Approve,
            ApprovalAnswer::Deny
        ]
    );
    assert_eq!(
        approval_events(&events),
        [
            "required s1 command_exec $ touch a",
            "resolved approve",
            "required s1 file_write edit b.txt",
            "resolved deny"
        ]
    );
    assert_eq!(gate.last_denial().unwrap().source, DenialSource::User);
}

#[tokio::test]
async fn external_requests_follow_rules_levels_and_headless_mode() {
    let actions = [
        external("$ curl x", Network),
        external("$ rm -rf /", CommandExec),
    ];
    let (answers, events, gate) = run_external(
        Medium,
        &[("command_exec", "deny")],
        true,
        &actions,
        Vec::new(),
    )
    .await;
    assert_eq!(answers, [ApprovalAnswer::Approve, ApprovalAnswer::Deny]);
    assert!(approval_events(&events).is_empty());
    assert_eq!(gate.last_denial().unwrap().source, DenialSource::Rule);

    let (answers, events, gate) = run_external(
        Medium,
        &[],
        false,
        &[external("$ make", CommandExec)],
        Vec::new(),
    )
    .await;
    assert_eq!(answers, [ApprovalAnswer::Deny]);
    assert_eq!(
        approval_events(&events),
        ["required s1 command_exec $ make", "resolved deny"]
    );
    assert_eq!(gate.last_denial().unwrap().source, DenialSource::Headless);

    let (answers, _, gate) = run_external(
        Medium,
        &[],
        true,
        &[external("$ a", CommandExec), external("$ b", CommandExec)],
        vec![ApprovalAnswer::ApproveAll],
    )
    .await;
    assert_eq!(
        answers,
        [ApprovalAnswer::ApproveAll, ApprovalAnswer::Approve]
    );
    assert_eq!(gate.level(), Full);
}

/// A worker's pending request, ended by `end` (called with the turn token and the withdrawal
/// token once it is announced): its answer, its events, and the gate.
async fn external_ended_by(
    end: fn(&CancelToken, &CancelToken),
) -> (ApprovalAnswer, Vec<String>, ApprovalGate) {
    let bus = EventBus::new();
    let mut inbox = IntentInbox::new(&bus);
    let (turn, withdrawn) = (CancelToken::new(), CancelToken::new());
    let ender = {
        let (turn, withdrawn) = (turn.clone(), withdrawn.clone());
        when_asked(&bus, move || end(&turn, &withdrawn))
    };
    let mut gate = ApprovalGate::new(ApprovalPolicy::new(Medium, &BTreeMap::new()).unwrap(), true);
    let action = external("$ make", CommandExec);
    let answer = gate
        .review_external("s", &action, &bus, &mut inbox, &turn, &withdrawn)
        .await;
    let events = approval_events(&ender.await.unwrap());
    (answer, events, gate)
}

#[tokio::test]
async fn an_interrupt_resolves_a_workers_pending_request_deny() {
    let (answer, events, gate) = external_ended_by(|turn, _| turn.cancel()).await;
    assert_eq!(answer, ApprovalAnswer::Deny);
    assert_eq!(events, ["required s command_exec $ make", "resolved deny"]);
    assert_eq!(
        gate.last_denial().unwrap().source,
        DenialSource::Interrupted
    );
}

#[tokio::test]
async fn a_withdrawn_worker_request_is_resolved_skip_without_a_denial() {
    let (answer, events, gate) = external_ended_by(|_, withdrawn| withdrawn.cancel()).await;
    assert_eq!(answer, ApprovalAnswer::Skip);
    assert_eq!(events, ["required s command_exec $ make", "resolved skip"]);
    assert!(gate.last_denial().is_none());
}

/// A headless gate at `level` whose `approval_request` hook is a `sh` script answering `answer`
/// for any request (its input is kept in `seen.json` of the project).
fn reviewed_gate(
    level: AutonomyLevel,
    rules: &[(&str, &str)],
    answer: &str,
) -> (ApprovalGate, tempfile::TempDir) {
    use std::os::unix::fs::PermissionsExt;
    let project = tempfile::tempdir().unwrap();
    let script = project.path().join("review.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ncat >> seen.json\necho '{answer}'\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config: crate::hooks::HooksConfig =
        toml::from_str("[[approval_request]]\ncommand = [\"./review.sh\"]\n").unwrap();
    let launcher = crate::hooks::PlainLauncher::new(vec![("PATH".into(), "/usr/bin:/bin".into())]);
    let hooks = crate::hooks::Hooks::new(
        config,
        project.path(),
        "s1",
        false,
        std::sync::Arc::new(launcher),
    )
    .unwrap();
    let mut gate = ApprovalGate::new(ApprovalPolicy::new(level, &table(rules)).unwrap(), false);
    gate.set_hooks(hooks);
    (gate, project)
}

#[tokio::test]
async fn a_reviewer_answers_before_the_human_and_never_what_a_deny_rule_refuses() {
    let bus = EventBus::new();
    let mut inbox = IntentInbox::new(&bus);
    let cancel = CancelToken::new();
    // It approves: the command runs headless without a human, and the approval is not
    // remembered (the next identical one is put to it again).
    let (mut gate, project) = reviewed_gate(Medium, &[], r#"{"decision": "approve"}"#);
    for nonce in [1, 2] {
        let verdicts = gate
            .review("s1", &[exec("ls", nonce)], &bus, &mut inbox, &cancel)
            .await;
        assert_eq!(verdicts, [Verdict::Approve]);
    }
    let seen = std::fs::read_to_string(project.path().join("seen.json")).unwrap();
    assert_eq!(
        seen.matches("\"event\":\"approval_request\"").count(),
        2,
        "{seen}"
    );
    assert!(
        seen.contains(r#""preview":"$ ls","category":"command_exec""#),
        "{seen}"
    );
    // A deny rule decides alone: the reviewer is not run.
    let (mut gate, project) = reviewed_gate(
        Medium,
        &[("command_exec", "deny")],
        r#"{"decision": "approve"}"#,
    );
    let verdicts = gate
        .review("s1", &[exec("ls", 3)], &bus, &mut inbox, &cancel)
        .await;
    assert_eq!(verdicts, [Verdict::Deny]);
    assert_eq!(gate.last_denial().unwrap().source, DenialSource::Rule);
    assert!(!project.path().join("seen.json").exists());
    // It denies: a denial of its own.
    let (mut gate, _project) = reviewed_gate(Medium, &[], r#"{"decision": "deny"}"#);
    let verdicts = gate
        .review("s1", &[exec("rm -rf x", 4)], &bus, &mut inbox, &cancel)
        .await;
    assert_eq!(verdicts, [Verdict::Deny]);
    let denial = gate.last_denial().unwrap();
    assert_eq!(denial.source, DenialSource::Reviewer);
    assert!(
        denial.reason().contains("approval_request hook"),
        "{}",
        denial.reason()
    );
    // It defers: the (absent) human is asked, so headless denies.
    let (mut gate, _project) = reviewed_gate(Medium, &[], r#"{"decision": "ask"}"#);
    let verdicts = gate
        .review("s1", &[exec("ls", 5)], &bus, &mut inbox, &cancel)
        .await;
    assert_eq!(verdicts, [Verdict::Deny]);
    assert_eq!(gate.last_denial().unwrap().source, DenialSource::Headless);
}

#[tokio::test]
async fn a_hook_that_asks_raises_an_auto_rule_to_ask_and_skips_remembered_approvals() {
    let bus = EventBus::new();
    let mut inbox = IntentInbox::new(&bus);
    let cancel = CancelToken::new();
    let mut gate = ApprovalGate::new(ApprovalPolicy::new(Full, &table(&[])).unwrap(), false);
    let raised = [CallReview {
        tool: None,
        at_least_ask: true,
    }];
    let verdicts = gate
        .review_calls("s1", &[exec("ls", 1)], &raised, &bus, &mut inbox, &cancel)
        .await;
    assert_eq!(verdicts, [Verdict::Deny], "asked, and headless denies");
    assert_eq!(gate.last_denial().unwrap().source, DenialSource::Headless);
    let plain = [CallReview::default()];
    let verdicts = gate
        .review_calls("s1", &[exec("ls", 2)], &plain, &bus, &mut inbox, &cancel)
        .await;
    assert_eq!(verdicts, [Verdict::Approve], "at full it runs unasked");
}
