use std::collections::BTreeMap;
use std::time::Duration;

use intendant_store::Store;
use intendant_store::memory::Source;
use tokio::sync::broadcast;

use super::*;
use crate::autonomy::AutonomyLevel;

struct Fixture {
    _dir: tempfile::TempDir,
    memories: Memories,
    bus: EventBus,
    events: broadcast::Receiver<AppEvent>,
    memory: Arc<SessionMemory>,
}

const PROJECT: &str = "/work/app";

fn policy(level: AutonomyLevel, table: &[(&str, &str)]) -> ApprovalPolicy {
    let table: BTreeMap<String, String> = table
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    ApprovalPolicy::new(level, &table).unwrap()
}

/// A session's memory side at `level`, attached to a bus a test answers on.
fn fixture(level: AutonomyLevel, interactive: bool) -> Fixture {
    fixture_with(policy(level, &[]), interactive)
}

fn fixture_with(policy: ApprovalPolicy, interactive: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let memories = Memories::new(Store::open(dir.path()).unwrap());
    let bus = EventBus::new();
    let events = bus.subscribe();
    let memory = SessionMemory::new(
        memories.clone(),
        "s-test",
        std::path::Path::new(PROJECT),
        policy,
        interactive,
    );
    memory.attach(&bus);
    Fixture {
        _dir: dir,
        memories,
        bus,
        events,
        memory,
    }
}

fn propose(text: &str, scope: ProposeScope) -> MemoryCall {
    MemoryCall::Propose {
        text: text.to_owned(),
        scope,
    }
}

/// The approval the proposal raised: its id, preview and detail.
async fn asked(events: &mut broadcast::Receiver<AppEvent>) -> (u64, String, String) {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), events.recv()).await {
            Ok(Ok(AppEvent::ApprovalRequired {
                id,
                command_preview,
                detail,
                category,
                session_id,
            })) => {
                assert_eq!(category, ActionCategory::Memory);
                assert_eq!(session_id, "s-test");
                return (id, command_preview, detail.unwrap_or_default());
            }
            Ok(Ok(_)) => {}
            other => panic!("no approval asked: {other:?}"),
        }
    }
}

async fn resolved(events: &mut broadcast::Receiver<AppEvent>) -> (u64, Verdict) {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), events.recv()).await {
            Ok(Ok(AppEvent::ApprovalResolved { id, verdict })) => return (id, verdict),
            Ok(Ok(_)) => {}
            other => panic!("not resolved: {other:?}"),
        }
    }
}

/// Waits until the store holds `n` memories.
async fn stored(memories: &Memories, n: u64) -> Vec<Memory> {
    for _ in 0..500 {
        if memories.count(&ScopeFilter::All).unwrap() == n {
            return memories.list(&ScopeFilter::All, 100).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the store never held {n} memories");
}

fn value(output: &str) -> Value {
    serde_json::from_str(output).unwrap_or_else(|e| panic!("{e}: {output}"))
}

#[tokio::test]
async fn a_proposal_returns_at_once_and_is_stored_only_once_a_human_approves() {
    let mut f = fixture(AutonomyLevel::Full, true);
    let (output, is_error) = f
        .memory
        .answer(propose("the CI runs .ci/run", ProposeScope::Project))
        .await;
    assert!(!is_error, "{output}");
    let answer = value(&output);
    assert_eq!(answer["proposed"], true);
    let (id, preview, detail) = asked(&mut f.events).await;
    assert_eq!(answer["approval"], id);
    assert_eq!(
        preview,
        format!("remember (project:{PROJECT}): the CI runs .ci/run")
    );
    assert!(detail.contains("the CI runs .ci/run"), "{detail}");
    // Even at `full`, nothing is stored until a human answers.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(f.memories.count(&ScopeFilter::All).unwrap(), 0);

    f.bus.send_intent(ControlMsg::Approve { id });
    assert_eq!(resolved(&mut f.events).await, (id, Verdict::Approve));
    let kept = stored(&f.memories, 1).await;
    assert_eq!(kept[0].text, "the CI runs .ci/run");
    assert_eq!(kept[0].scope, Scope::Project(PROJECT.into()));
    assert_eq!(kept[0].source, Source::Session("s-test".into()));
    // A second answer to the same approval changes nothing.
    f.bus.send_intent(ControlMsg::Approve { id });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(f.memories.count(&ScopeFilter::All).unwrap(), 1);
}

#[tokio::test]
async fn denied_or_skipped_proposals_are_dropped_and_approve_all_approves_one_only() {
    let mut f = fixture(AutonomyLevel::High, true);
    for (answer, verdict) in [
        (ControlMsg::Deny { id: 0 }, Verdict::Deny),
        (ControlMsg::Skip { id: 0 }, Verdict::Skip),
    ] {
        f.memory
            .answer(propose("dropped", ProposeScope::User))
            .await;
        let (id, _, _) = asked(&mut f.events).await;
        let msg = match answer {
            ControlMsg::Deny { .. } => ControlMsg::Deny { id },
            _ => ControlMsg::Skip { id },
        };
        f.bus.send_intent(msg);
        assert_eq!(resolved(&mut f.events).await, (id, verdict));
    }
    f.memory
        .answer(propose("kept for the user", ProposeScope::User))
        .await;
    let (id, _, _) = asked(&mut f.events).await;
    f.bus.send_intent(ControlMsg::ApproveAll { id });
    assert_eq!(resolved(&mut f.events).await, (id, Verdict::Approve));
    let kept = stored(&f.memories, 1).await;
    assert_eq!(
        (kept[0].scope.clone(), kept[0].text.as_str()),
        (Scope::User, "kept for the user")
    );
    // The next proposal is asked again, not let through.
    f.memory
        .answer(propose("asked again", ProposeScope::User))
        .await;
    let (next, _, _) = asked(&mut f.events).await;
    assert_ne!(next, id);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(f.memories.count(&ScopeFilter::All).unwrap(), 1);
}

#[tokio::test]
async fn a_ten_mebibyte_proposal_is_refused_before_anything_is_asked_or_stored() {
    let mut f = fixture(AutonomyLevel::Medium, true);
    let huge = "m".repeat(10 * 1024 * 1024);
    let (output, is_error) = f.memory.answer(propose(&huge, ProposeScope::Project)).await;
    assert!(is_error);
    assert!(output.starts_with(ERROR_PREFIX), "{}", clip(&output, 300));
    assert!(
        output.contains("at most 16384 bytes"),
        "{}",
        clip(&output, 300)
    );
    assert!(output.contains("nothing was proposed or stored"));
    assert!(output.len() < 1000, "the text is not echoed back");
    let (output, is_error) = f
        .memory
        .answer(propose(" \n ", ProposeScope::Project))
        .await;
    assert!(is_error && output.contains("empty"), "{output}");
    assert!(f.events.try_recv().is_err(), "no approval was asked");
    assert_eq!(f.memories.count(&ScopeFilter::All).unwrap(), 0);
}

#[tokio::test]
async fn without_a_human_or_with_memory_denied_a_proposal_is_refused_cleanly() {
    let mut headless = fixture(AutonomyLevel::Full, false);
    let (output, is_error) = headless
        .memory
        .answer(propose("x", ProposeScope::Project))
        .await;
    assert!(
        is_error && output.contains("no human can answer"),
        "{output}"
    );
    assert!(headless.events.try_recv().is_err());

    // Once the intents lane closed nobody can answer either.
    let closed = fixture(AutonomyLevel::Medium, true);
    closed.bus.close_intents();
    let mut refused = false;
    for _ in 0..200 {
        let (output, is_error) = closed
            .memory
            .answer(propose("x", ProposeScope::Project))
            .await;
        if is_error {
            assert!(output.contains("no human can answer"), "{output}");
            refused = true;
            break;
        }
        // The router had not seen the close yet: that proposal is dropped at close.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused);

    let mut denied = fixture_with(policy(AutonomyLevel::Medium, &[("memory", "deny")]), true);
    let (output, is_error) = denied
        .memory
        .answer(propose("x", ProposeScope::Project))
        .await;
    assert!(
        is_error && output.contains("[approval] memory = \"deny\""),
        "{output}"
    );
    assert!(denied.events.try_recv().is_err());
}

#[test]
fn no_rule_lets_a_memory_through_without_a_human() {
    let table = BTreeMap::from([("memory".to_owned(), "auto".to_owned())]);
    let e = ApprovalPolicy::new(AutonomyLevel::Full, &table).unwrap_err();
    assert!(
        e.to_string().contains("memory = \"auto\" is not allowed"),
        "{e}"
    );
    for level in AutonomyLevel::ALL {
        assert_eq!(
            policy(level, &[]).effective(ActionCategory::Memory),
            Rule::Ask,
            "{level}"
        );
        assert_eq!(
            policy(level, &[("memory", "ask")]).effective(ActionCategory::Memory),
            Rule::Ask
        );
        for rule in [Rule::Auto, Rule::Ask] {
            assert_eq!(
                crate::approval::effective_rule(ActionCategory::Memory, rule, level),
                Rule::Ask
            );
        }
    }
}

#[tokio::test]
async fn unanswered_proposals_are_dropped_when_the_session_ends_and_the_queue_is_bounded() {
    let mut f = fixture(AutonomyLevel::Medium, true);
    let mut ids = Vec::new();
    for n in 0..MAX_PENDING_PROPOSALS {
        let (output, is_error) = f
            .memory
            .answer(propose(&format!("fact {n}"), ProposeScope::Project))
            .await;
        assert!(!is_error, "{output}");
        ids.push(asked(&mut f.events).await.0);
    }
    let (output, is_error) = f
        .memory
        .answer(propose("one more", ProposeScope::Project))
        .await;
    assert!(
        is_error && output.contains("already wait for a human"),
        "{output}"
    );
    f.memory.close().await;
    let mut dropped = Vec::new();
    let mut warnings = 0;
    while let Ok(event) = f.events.try_recv() {
        match event {
            AppEvent::ApprovalResolved { id, verdict } => {
                assert_eq!(verdict, Verdict::Deny);
                dropped.push(id);
            }
            AppEvent::Warning { message } => {
                assert!(message.contains("nothing was stored"), "{message}");
                warnings += 1;
            }
            _ => {}
        }
    }
    dropped.sort_unstable();
    assert_eq!(dropped, ids);
    assert_eq!(warnings, ids.len());
    // An answer arriving after the end stores nothing.
    f.bus.send_intent(ControlMsg::Approve { id: ids[0] });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(f.memories.count(&ScopeFilter::All).unwrap(), 0);
}

#[tokio::test]
async fn search_and_read_see_this_project_and_the_user_only() {
    let f = fixture(AutonomyLevel::Medium, false);
    let m = &f.memories;
    let here = m
        .add(
            &Scope::Project(PROJECT.into()),
            "deploy with make ship",
            &Source::Human,
        )
        .unwrap();
    let user = m
        .add(
            &Scope::User,
            "the user likes short deploy notes",
            &Source::Human,
        )
        .unwrap();
    let other = m
        .add(
            &Scope::Project("/work/other".into()),
            "deploy other with helm",
            &Source::Human,
        )
        .unwrap();
    let long = m
        .add(
            &Scope::User,
            &format!("deploy {}", "z".repeat(3000)),
            &Source::Human,
        )
        .unwrap();

    let search = |query: &str, scope| MemoryCall::Search {
        query: query.to_owned(),
        scope,
        limit: 10,
    };
    let (output, is_error) = f.memory.answer(search("deploy", SearchScope::All)).await;
    assert!(!is_error, "{output}");
    let answer = value(&output);
    let ids: Vec<i64> = answer["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{answer}");
    assert!(
        !ids.contains(&other.id),
        "another project's memory is not found"
    );
    let clipped = answer["memories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == long.id)
        .unwrap();
    assert_eq!(clipped["whole"], false);
    assert!(clipped["text"].as_str().unwrap().len() < 1100);

    let (output, _) = f
        .memory
        .answer(search("deploy", SearchScope::Project))
        .await;
    assert_eq!(value(&output)["memories"][0]["id"], here.id);
    let (output, _) = f.memory.answer(search("notes", SearchScope::User)).await;
    assert_eq!(value(&output)["memories"][0]["id"], user.id);
    let (output, is_error) = f
        .memory
        .answer(search("deploy AND (", SearchScope::All))
        .await;
    assert!(!is_error, "{output}");
    assert!(
        value(&output)["note"]
            .as_str()
            .unwrap()
            .contains("plain terms")
    );
    let (output, is_error) = f.memory.answer(search("  ", SearchScope::All)).await;
    assert!(is_error && output.contains("empty"), "{output}");

    let (output, is_error) = f.memory.answer(MemoryCall::Read { id: long.id }).await;
    assert!(!is_error);
    assert_eq!(
        value(&output)["text"].as_str().unwrap().len(),
        long.text.len()
    );
    assert_eq!(value(&output)["source"], "human");
    for id in [other.id, 9999] {
        let (output, is_error) = f.memory.answer(MemoryCall::Read { id }).await;
        assert!(
            is_error && output.contains(&format!("no memory {id}")),
            "{output}"
        );
    }
}

#[test]
fn memory_calls_are_validated() {
    use crate::tools::{ToolAction, map_tool_call};
    let call = |name: &str, args: &str| intendant_providers::ToolCall {
        call_id: "c".into(),
        name: name.into(),
        arguments: args.into(),
        thought_signature: None,
        provider_id: false,
    };
    assert_eq!(
        map_tool_call(&call("memory_search", r#"{"query":"ci"}"#), 1),
        ToolAction::Memory(MemoryCall::Search {
            query: "ci".into(),
            scope: SearchScope::All,
            limit: DEFAULT_SEARCH_LIMIT
        })
    );
    assert_eq!(
        map_tool_call(&call("memory_propose", r#"{"text":"t","scope":"user"}"#), 1),
        ToolAction::Memory(MemoryCall::Propose {
            text: "t".into(),
            scope: ProposeScope::User
        })
    );
    assert_eq!(
        map_tool_call(&call("memory_read", r#"{"id":3}"#), 1),
        ToolAction::Memory(MemoryCall::Read { id: 3 })
    );
    for (name, args, want) in [
        ("memory_search", "{}", "missing required argument `query`"),
        (
            "memory_search",
            r#"{"query":"x","scope":"global"}"#,
            "not `all`, `project` or `user`",
        ),
        (
            "memory_search",
            r#"{"query":"x","limit":0}"#,
            "between 1 and 50",
        ),
        (
            "memory_search",
            r#"{"query":"x","limit":51}"#,
            "between 1 and 50",
        ),
        ("memory_read", "{}", "missing required argument `id`"),
        ("memory_read", r#"{"id":"3"}"#, "non-negative integer"),
        (
            "memory_read",
            r#"{"id":18446744073709551615}"#,
            "out of range",
        ),
        ("memory_propose", "{}", "missing required argument `text`"),
        (
            "memory_propose",
            r#"{"text":"t","scope":"all"}"#,
            "not `project` or `user`",
        ),
    ] {
        match map_tool_call(&call(name, args), 1) {
            ToolAction::Invalid(message) => {
                assert!(message.contains(want), "{name} {args}: {message}")
            }
            other => panic!("{name} {args}: {other:?}"),
        }
    }
}

/// The daemon's sessions keep an unanswered proposal pending in the database at their end (no
/// verdict, a warning saying where it waits); the session resumed asks it again, and its answer
/// stores it once.
#[tokio::test]
async fn in_the_daemon_an_unanswered_proposal_stays_pending_and_a_resumed_session_asks_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let memories = Memories::new(Store::open(dir.path()).unwrap());
    let proposals = Proposals::new(memories.store().clone());
    let run = |bus: &EventBus| {
        let memory = SessionMemory::new(
            memories.clone(),
            "s-test",
            std::path::Path::new(PROJECT),
            policy(AutonomyLevel::Full, &[]),
            true,
        );
        memory.keep_unanswered();
        memory.attach(bus);
        memory
    };
    let bus = EventBus::new();
    let mut events = bus.subscribe();
    let first = run(&bus);
    let (output, is_error) = first
        .answer(propose("kept across restarts", ProposeScope::User))
        .await;
    assert!(!is_error, "{output}");
    asked(&mut events).await;
    first.close().await;
    let mut said = Vec::new();
    while let Ok(event) = events.try_recv() {
        match event {
            AppEvent::ApprovalResolved { .. } => panic!("an unanswered proposal has no verdict"),
            AppEvent::Warning { message } => said.push(message),
            _ => {}
        }
    }
    let pending = proposals.pending().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].session_id, "s-test");
    assert!(
        said.iter().any(|m| m.contains(&format!(
            "waits in the daemon's approval queue as memory proposal {}",
            pending[0].id
        ))),
        "{said:?}"
    );
    assert_eq!(memories.count(&ScopeFilter::All).unwrap(), 0);

    // The same session resumed in a new process asks it again.
    let bus = EventBus::new();
    let mut events = bus.subscribe();
    let resumed = run(&bus);
    let (id, preview, _) = asked(&mut events).await;
    assert!(preview.contains("kept across restarts"), "{preview}");
    bus.send_intent(ControlMsg::Approve { id });
    assert_eq!(resolved(&mut events).await, (id, Verdict::Approve));
    let kept = stored(&memories, 1).await;
    assert_eq!(kept[0].source, Source::Session("s-test".into()));
    assert!(proposals.pending().unwrap().is_empty());
    resumed.close().await;
}

/// Outside the daemon an unanswered proposal is dropped in the database too, so no later
/// surface offers it.
#[tokio::test]
async fn outside_the_daemon_an_unanswered_proposal_is_dropped_for_good() {
    let mut f = fixture(AutonomyLevel::Medium, true);
    let (output, is_error) = f
        .memory
        .answer(propose("not kept", ProposeScope::Project))
        .await;
    assert!(!is_error, "{output}");
    asked(&mut f.events).await;
    f.memory.close().await;
    let proposals = Proposals::new(f.memories.store().clone());
    assert!(proposals.pending().unwrap().is_empty());
    assert_eq!(f.memories.count(&ScopeFilter::All).unwrap(), 0);
}

/// What ended sessions left pending in a daemon counts against one bound over the state root:
/// a new session's proposal past it is refused at once, asking nobody.
#[tokio::test]
async fn a_proposal_past_what_the_state_root_keeps_waiting_is_refused_asking_nobody() {
    let mut f = fixture(AutonomyLevel::Medium, true);
    let proposals = Proposals::new(f.memories.store().clone());
    for n in 0..intendant_store::memory::proposals::MAX_PENDING {
        proposals
            .propose(&Scope::User, &format!("left by {n}"), &format!("s-{n}"))
            .unwrap();
    }
    let (output, is_error) = f
        .memory
        .answer(propose("one more", ProposeScope::Project))
        .await;
    assert!(is_error, "{output}");
    assert!(
        output.contains("100 proposals already wait for a human in this state root")
            && output.contains("mention the fact in your final message"),
        "{output}"
    );
    assert!(
        !std::iter::from_fn(|| f.events.try_recv().ok())
            .any(|e| matches!(e, AppEvent::ApprovalRequired { .. })),
        "nobody is asked"
    );
    // Its own bound is free again: the refused one holds no place in it.
    proposals.drop(proposals.pending().unwrap()[0].id).unwrap();
    let (output, is_error) = f
        .memory
        .answer(propose("now it fits", ProposeScope::Project))
        .await;
    assert!(!is_error, "{output}");
    asked(&mut f.events).await;
    f.memory.close().await;
}
