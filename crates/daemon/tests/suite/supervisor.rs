//! The daemon's session supervisor, driven through `SessionHost` with real sessions: the fake
//! model server on loopback, the built `intendant-runtime`.

use std::collections::BTreeMap;
use std::time::Duration;

use intendant_core::autonomy::AutonomyLevel;
use intendant_core::config::ProjectConfig;
use intendant_core::host::{EventStream, SessionHost};
use intendant_core::session::assemble::{AssemblyEnv, SharedStore};
use intendant_core::session_log::{SessionLog, SessionMeta, read_events, unsent_follow_ups};
use intendant_core::trust::TrustStore;
use intendant_daemon::control_plane;
use intendant_daemon::supervisor::{Load, Supervisor, SupervisorOptions};
use intendant_protocol::daemon::{
    Backend, DAEMON_SESSION, Envelope, HostErrorCode, PruneRequest, SessionCounts, SessionIntent,
    SessionStatus, SessionsPage, Settings, SettingsChange, StartRequest, StreamItem,
};
use intendant_protocol::events::{AppEvent, ControlMsg, EndStatus};
use intendant_protocol::socket::MAX_TASK_BYTES;
use intendant_testkit::{FakeModelServer, Scenario, Wire};
use serde_json::{Value, json};

use super::support::{exec_turn, runtime_bin, text_turn};

/// Longest a test waits for an event (never reached by a healthy run).
const WAIT_LIMIT: Duration = Duration::from_secs(20);

pub(super) struct Daemon {
    pub(super) project: tempfile::TempDir,
    pub(super) home: tempfile::TempDir,
    pub(super) server: FakeModelServer,
    pub(super) host: Supervisor,
}

fn settings(max_running: u32) -> Settings {
    Settings {
        default_autonomy: AutonomyLevel::Medium,
        default_backend: Backend::Native,
        max_running,
        max_autonomy: AutonomyLevel::Full,
    }
}

impl Daemon {
    /// A daemon whose model plays `turns`, then answers `done` to every further request.
    pub(super) async fn new(turns: Value, options: SupervisorOptions, max_running: u32) -> Daemon {
        let scenario =
            Scenario::from_json(&json!({ "model": "fake-model", "turns": turns }).to_string())
                .unwrap();
        let server = FakeModelServer::start(scenario).await.unwrap();
        let project = tempfile::tempdir().unwrap();
        std::fs::create_dir(project.path().join(".git")).unwrap();
        let home = tempfile::tempdir().unwrap();
        let host = supervisor(&home, &server, options, max_running);
        Daemon {
            project,
            home,
            server,
            host,
        }
    }

    pub(super) fn request(&self, task: &str) -> StartRequest {
        StartRequest {
            task: task.into(),
            project: self.project.path().display().to_string(),
            provider: Some("openai".into()),
            model: Some("fake-model".into()),
            ..StartRequest::default()
        }
    }

    async fn start(&self, task: &str) -> String {
        self.host.start(self.request(task)).await.unwrap().id
    }

    async fn status(&self, id: &str) -> SessionStatus {
        self.host.session(id).await.unwrap().status
    }

    /// A second supervisor on the same state root (a daemon restarted).
    pub(super) fn restart(&self) -> Supervisor {
        supervisor(&self.home, &self.server, SupervisorOptions::default(), 4)
    }
}

fn supervisor(
    home: &tempfile::TempDir,
    server: &FakeModelServer,
    options: SupervisorOptions,
    max_running: u32,
) -> Supervisor {
    let env = AssemblyEnv {
        home: home.path().to_path_buf(),
        runtime_path: Some(runtime_bin()),
        config_dir: None,
        store: SharedStore::new(home.path()),
        process_env: daemon_env(server),
    };
    control_plane::save(home.path(), &settings(max_running)).unwrap();
    Supervisor::new(env, None, options).unwrap()
}

/// The environment of a daemon talking to `server`.
fn daemon_env(server: &FakeModelServer) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "OPENAI_API_KEY".to_owned(),
            "sk-test-daemon-0123456789".to_owned(),
        ),
        (
            "OPENAI_BASE_URL".to_owned(),
            server.base_url(Wire::OpenAiResponses),
        ),
    ])
}

/// Reads `stream` until an envelope satisfies `stop` (included); a lag fails the test.
pub(super) async fn until(
    stream: &mut EventStream,
    mut stop: impl FnMut(&Envelope) -> bool,
) -> Vec<Envelope> {
    let mut got: Vec<Envelope> = Vec::new();
    loop {
        let Ok(item) = tokio::time::timeout(WAIT_LIMIT, stream.next()).await else {
            let names: Vec<String> = got.iter().map(|e| format!("{:?}", e.event)).collect();
            panic!("no event in time; got {names:#?}");
        };
        let item = item.expect("the stream goes on");
        match item {
            StreamItem::Event(env) => {
                let done = stop(&env);
                got.push(std::sync::Arc::unwrap_or_clone(env));
                if done {
                    return got;
                }
            }
            StreamItem::Lagged { next_seq } => panic!("lagged at {next_seq}"),
        }
    }
}

/// Reads a replay up to its history end.
async fn replay(stream: &mut EventStream) -> Vec<Envelope> {
    let end = stream.history_end();
    if end == 0 {
        return Vec::new();
    }
    until(stream, |e| e.seq == end).await
}

fn is_round_end(env: &Envelope) -> bool {
    matches!(env.event, AppEvent::RoundComplete { .. })
}

fn count(envs: &[Envelope], pred: impl Fn(&Envelope) -> bool) -> usize {
    envs.iter().filter(|e| pred(e)).count()
}

/// `replayed` is `live` with some deltas left out (deltas are never logged): same events, same
/// order, no duplicate, every lifecycle event present.
fn assert_same_stream(replayed: &[Envelope], live: &[Envelope]) {
    let lifecycle = |v: &[Envelope]| -> Vec<Envelope> {
        v.iter()
            .filter(|e| e.event.is_lifecycle())
            .cloned()
            .collect()
    };
    assert_eq!(lifecycle(replayed), lifecycle(live));
    let mut rest = live.iter();
    for env in replayed {
        assert!(
            rest.any(|l| l == env),
            "replayed seq {} is not in the live stream in order",
            env.seq
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seq_is_gapless_and_in_publish_order_across_concurrent_sessions() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 8).await;
    let mut all = daemon.host.subscribe(None, None).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(daemon.start(&format!("task {i}")).await);
    }
    let mut rounds = 0;
    let got = until(&mut all, |e| {
        if is_round_end(e) {
            rounds += 1;
        }
        rounds == 4
    })
    .await;
    let seqs: Vec<u64> = got.iter().map(|e| e.seq).collect();
    let want: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(seqs, want, "gapless from 1, in order");
    for id in &ids {
        assert_eq!(
            count(&got, |e| e.session_id == *id && is_round_end(e)),
            1,
            "each session's events carry its id"
        );
        assert_eq!(daemon.status(id).await, SessionStatus::Idle);
    }
    // Each session's log records its lifecycle events with the daemon's seq.
    for id in &ids {
        let mut one = daemon.host.subscribe(Some(id), Some(0)).await.unwrap();
        let replayed = replay(&mut one).await;
        let live: Vec<Envelope> = got
            .iter()
            .filter(|e| e.session_id == *id)
            .cloned()
            .collect();
        assert_same_stream(&replayed, &live);
    }
}

/// Whatever a client saw is already in the session's log: a daemon killed right after any
/// event reached a subscriber loses none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lifecycle_event_a_client_sees_is_already_in_the_log() {
    let daemon = Daemon::new(
        json!([exec_turn("echo one"), exec_turn("echo two")]),
        SupervisorOptions::default(),
        8,
    )
    .await;
    let mut all = daemon.host.subscribe(None, None).await.unwrap();
    let id = daemon
        .host
        .start(StartRequest {
            autonomy: Some(AutonomyLevel::Full),
            ..daemon.request("logged first")
        })
        .await
        .unwrap()
        .id;
    let log_dir = daemon.host.log_dir(&id).await.unwrap();
    let mut checked = 0;
    until(&mut all, |env| {
        if env.session_id == id && env.event.is_lifecycle() {
            let logged = read_events(&log_dir).unwrap();
            assert!(
                logged.records.iter().any(|r| r.seq == Some(env.seq)),
                "seq {} ({:?}) reached a client before the log",
                env.seq,
                env.event
            );
            checked += 1;
        }
        is_round_end(env)
    })
    .await;
    assert!(checked >= 6, "only {checked} lifecycle events seen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_older_than_the_ring_is_read_from_the_logs_with_no_gap_or_duplicate() {
    let options = SupervisorOptions {
        ring_capacity: 8,
        ..SupervisorOptions::default()
    };
    let daemon = Daemon::new(
        json!([exec_turn("echo one"), exec_turn("echo two")]),
        options,
        8,
    )
    .await;
    let mut all = daemon.host.subscribe(None, None).await.unwrap();
    let full = |task: &str| StartRequest {
        autonomy: Some(AutonomyLevel::Full),
        ..daemon.request(task)
    };
    daemon.host.start(full("first")).await.unwrap();
    let b = daemon.host.start(full("second")).await.unwrap().id;
    let mut rounds = 0;
    let live = until(&mut all, |e| {
        if is_round_end(e) {
            rounds += 1;
        }
        rounds == 2
    })
    .await;
    assert!(live.len() > 8 * 2, "far more than the ring holds");
    // Everything, from the start: mostly from the logs, the tail from the ring.
    let mut from_start = daemon.host.subscribe(None, Some(0)).await.unwrap();
    let replayed = replay(&mut from_start).await;
    assert_eq!(replayed.first().map(|e| e.seq), Some(1));
    assert_same_stream(&replayed, &live);
    // One session from the middle of its history.
    let mid = live
        .iter()
        .filter(|e| e.session_id == b)
        .nth(3)
        .unwrap()
        .seq;
    let mut tail = daemon.host.subscribe(Some(&b), Some(mid)).await.unwrap();
    let replayed = replay(&mut tail).await;
    let want: Vec<Envelope> = live
        .iter()
        .filter(|e| e.session_id == b && e.seq > mid)
        .cloned()
        .collect();
    assert_same_stream(&replayed, &want);
    // The replay goes on live: a follow-up's events come after the history, numbered on.
    daemon
        .host
        .send(SessionIntent {
            session_id: b.clone(),
            msg: ControlMsg::FollowUp {
                text: "more".into(),
            },
        })
        .await
        .unwrap();
    let next = until(&mut tail, is_round_end).await;
    assert!(
        next.iter()
            .all(|e| e.session_id == b && e.seq > live.last().unwrap().seq)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_reading_lags_and_blocks_nobody() {
    let options = SupervisorOptions {
        subscriber_capacity: 4,
        ..SupervisorOptions::default()
    };
    let daemon = Daemon::new(json!([]), options, 8).await;
    let mut stalled = daemon.host.subscribe(None, None).await.unwrap();
    let mut reader = daemon.host.subscribe(None, None).await.unwrap();
    let id = daemon.start("go").await;
    // A reader with the same small queue keeps up the way a client should: when it lags, it
    // subscribes again from the seq it was told.
    let mut live: Vec<Envelope> = Vec::new();
    while !live.last().is_some_and(is_round_end) {
        let item = tokio::time::timeout(WAIT_LIMIT, reader.next())
            .await
            .unwrap();
        match item.expect("the stream goes on until a lag") {
            StreamItem::Event(env) => live.push(std::sync::Arc::unwrap_or_clone(env)),
            StreamItem::Lagged { next_seq } => {
                reader = daemon
                    .host
                    .subscribe(None, Some(next_seq - 1))
                    .await
                    .unwrap();
            }
        }
    }
    let seqs: Vec<u64> = live.iter().map(|e| e.seq).collect();
    let want: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(
        seqs, want,
        "no gap and no duplicate across the re-subscriptions"
    );
    assert!(live.len() > 4);
    assert_eq!(daemon.status(&id).await, SessionStatus::Idle);
    // The stalled one got what fit (one slot stays for the notice), then Lagged, then its end.
    let mut got = Vec::new();
    let lagged = loop {
        match stalled.next().await.unwrap() {
            StreamItem::Event(env) => got.push(env.seq),
            StreamItem::Lagged { next_seq } => break next_seq,
        }
    };
    assert_eq!(got, [1, 2, 3]);
    assert_eq!(lagged, 4);
    assert!(stalled.next().await.is_none());
    // It re-reads from where it lagged.
    let mut again = daemon.host.subscribe(None, Some(lagged - 1)).await.unwrap();
    let replayed = replay(&mut again).await;
    assert_eq!(replayed.first().unwrap().seq, lagged);
    assert_eq!(replayed, live[3..].to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_queue_daemon_wide_and_bad_answers_are_refused() {
    let daemon = Daemon::new(
        json!([
            exec_turn("echo approved"),
            text_turn("ran it"),
            exec_turn("echo unasked")
        ]),
        SupervisorOptions::default(),
        8,
    )
    .await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let id = daemon.start("run it").await;
    let asked = until(&mut stream, |e| {
        matches!(e.event, AppEvent::ApprovalRequired { .. })
    })
    .await;
    let env = asked.last().unwrap();
    let AppEvent::ApprovalRequired { id: approval, .. } = env.event else {
        unreachable!()
    };
    let queue = daemon.host.approvals().await.unwrap();
    assert_eq!(queue.len(), 1);
    assert_eq!(queue[0].id, approval);
    assert_eq!(queue[0].session_id, id);
    assert_eq!(queue[0].seq, env.seq);
    let summary = daemon.host.session(&id).await.unwrap();
    assert_eq!(summary.status, SessionStatus::WaitingForHuman);
    assert_eq!(summary.pending_approvals, 1);

    let answer = |session: &str, msg: ControlMsg| SessionIntent {
        session_id: session.into(),
        msg,
    };
    let code = |r: Result<
        intendant_protocol::daemon::Sent,
        intendant_protocol::daemon::HostError,
    >| r.unwrap_err().code;
    assert_eq!(
        code(
            daemon
                .host
                .send(answer("nope", ControlMsg::Approve { id: approval }))
                .await
        ),
        HostErrorCode::UnknownSession
    );
    assert_eq!(
        code(
            daemon
                .host
                .send(answer(
                    &id,
                    ControlMsg::Approve {
                        id: approval + 1000
                    }
                ))
                .await
        ),
        HostErrorCode::UnknownApproval
    );
    assert_eq!(
        code(
            daemon
                .host
                .send(answer(&id, ControlMsg::Input { text: "x".into() }))
                .await
        ),
        HostErrorCode::UnknownApproval,
        "no question is pending"
    );
    assert_eq!(
        code(
            daemon
                .host
                .send(answer(&id, ControlMsg::AllowHost { id: approval }))
                .await
        ),
        HostErrorCode::InvalidRequest,
        "allow_host answers a network approval only; this one stays pending"
    );
    assert_eq!(daemon.host.approvals().await.unwrap().len(), 1);
    daemon
        .host
        .send(answer(&id, ControlMsg::Approve { id: approval }))
        .await
        .unwrap();
    assert_eq!(
        code(
            daemon
                .host
                .send(answer(&id, ControlMsg::Deny { id: approval }))
                .await
        ),
        HostErrorCode::AlreadyAnswered
    );
    assert!(daemon.host.approvals().await.unwrap().is_empty());
    let ran = until(&mut stream, is_round_end).await;
    assert!(ran.iter().any(|e| matches!(&e.event,
        AppEvent::AgentOutput { output, .. } if output.contains("approved"))));
    assert_eq!(daemon.status(&id).await, SessionStatus::Idle);

    // A per-session autonomy change reaches the session's gate: the next command runs unasked.
    daemon
        .host
        .set_autonomy(Some(&id), AutonomyLevel::Full)
        .await
        .unwrap();
    assert_eq!(
        daemon.host.session(&id).await.unwrap().autonomy,
        AutonomyLevel::Full
    );
    daemon
        .host
        .send(answer(
            &id,
            ControlMsg::FollowUp {
                text: "again".into(),
            },
        ))
        .await
        .unwrap();
    let second = until(&mut stream, is_round_end).await;
    assert_eq!(
        count(&second, |e| matches!(
            e.event,
            AppEvent::ApprovalRequired { .. }
        )),
        0
    );
    assert!(second.iter().any(|e| matches!(&e.event,
        AppEvent::AgentOutput { output, .. } if output.contains("unasked"))));
    assert!(daemon.server.invariant_violations().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_beyond_max_running_queue_visibly_in_order() {
    // The first session's answer is held back, so it still holds the one slot when the other
    // two are started (an instant round could end first and hand them the slot).
    let daemon = Daemon::new(
        json!([{ "text": "one", "delivery": { "first_chunk_delay_ms": 1000 } }]),
        SupervisorOptions::default(),
        1,
    )
    .await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let first = daemon.start("one").await;
    let second = daemon.host.start(daemon.request("two")).await.unwrap();
    let third = daemon.host.start(daemon.request("three")).await.unwrap();
    assert_eq!(second.status, SessionStatus::Queued);
    assert_eq!(third.status, SessionStatus::Queued);
    // `ctl status` counts them as the listing shows them.
    let counts = daemon.host.session_counts().await.unwrap();
    let listed = daemon.host.sessions().await.unwrap();
    assert_eq!(counts, SessionCounts::of(listed.iter().map(|s| s.status)));
    let expected = SessionCounts {
        total: 3,
        active: 3,
        running: 1,
        idle: 0,
        queued: 2,
        ..SessionCounts::default()
    };
    assert_eq!(counts, expected);
    until(&mut stream, |e| e.session_id == first && is_round_end(e)).await;
    // The first session stays open (idle) and gives its slot to the next in line.
    assert_eq!(daemon.status(&first).await, SessionStatus::Idle);
    let got = until(&mut stream, |e| {
        e.session_id == second.id && is_round_end(e)
    })
    .await;
    assert!(
        got.iter().all(|e| e.session_id != third.id),
        "first come, first served"
    );
    assert_eq!(
        daemon
            .host
            .update_settings(SettingsChange {
                max_running: Some(0),
                ..SettingsChange::default()
            })
            .await
            .unwrap_err()
            .code,
        HostErrorCode::InvalidRequest
    );
    let raised = daemon
        .host
        .update_settings(SettingsChange {
            max_running: Some(2),
            ..SettingsChange::default()
        })
        .await
        .unwrap();
    assert_eq!(raised.max_running, 2);
    daemon
        .host
        .set_autonomy(None, AutonomyLevel::High)
        .await
        .unwrap();
    // Persisted: what a restarted daemon loads.
    let loaded = control_plane::load(daemon.home.path()).unwrap();
    assert_eq!(loaded.max_running, 2);
    assert_eq!(loaded.default_autonomy, AutonomyLevel::High);
    assert_eq!(daemon.host.settings().await.unwrap(), loaded);
    until(&mut stream, |e| e.session_id == third.id && is_round_end(e)).await;
    assert_eq!(daemon.status(&third.id).await, SessionStatus::Idle);
    assert!(control_plane::default_max_running() >= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn more_sessions_than_default_slots_all_run_three_rounds_and_none_stays_queued() {
    let max = control_plane::default_max_running();
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), max).await;
    // Twenty on a two-core machine (max_running 8): more than twice the slots.
    let n = usize::try_from(2 * max + 4).unwrap().max(20);
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(daemon.start(&format!("task {i}")).await);
    }
    let mut rounds: BTreeMap<String, u32> = BTreeMap::new();
    let mut finished = 0;
    while finished < n {
        let got = until(&mut stream, is_round_end).await;
        let load = daemon.host.load();
        assert!(load.running <= max, "{load:?} with max_running {max}");
        let id = got.last().unwrap().session_id.clone();
        let round = rounds.entry(id.clone()).or_default();
        *round += 1;
        if *round < 3 {
            daemon
                .host
                .send(SessionIntent {
                    session_id: id,
                    msg: ControlMsg::FollowUp {
                        text: format!("round {}", *round + 1),
                    },
                })
                .await
                .unwrap();
        } else {
            finished += 1;
        }
    }
    for id in &ids {
        assert_eq!(rounds[id], 3, "{id}");
        assert_eq!(daemon.status(id).await, SessionStatus::Idle, "{id}");
    }
    let load = daemon.host.load();
    assert_eq!(
        (load.running, load.idle, load.queued),
        (0, u32::try_from(n).unwrap(), 0)
    );
    daemon.host.shutdown().await.unwrap();
    daemon.host.closed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_follow_up_or_answer_past_the_bound_is_refused_whoever_sends_it() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    let most = intendant_protocol::socket::MAX_TASK_BYTES;
    let long = "x".repeat(most + 1);
    let refused = daemon.host.start(daemon.request(&long)).await.unwrap_err();
    assert_eq!(refused.code, HostErrorCode::InvalidRequest);
    assert!(
        refused
            .message
            .contains(&format!("the task is {} bytes, over the {most}", most + 1)),
        "{}",
        refused.message
    );
    assert!(daemon.host.sessions().await.unwrap().is_empty());
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let id = daemon.start(&"y".repeat(most)).await;
    until(&mut stream, is_round_end).await;
    let asked = daemon.server.requests().len();
    for msg in [
        ControlMsg::FollowUp { text: long.clone() },
        ControlMsg::Input { text: long.clone() },
    ] {
        let refused = daemon
            .host
            .send(SessionIntent {
                session_id: id.clone(),
                msg,
            })
            .await
            .unwrap_err();
        assert_eq!(
            refused.code,
            HostErrorCode::InvalidRequest,
            "{}",
            refused.message
        );
        assert!(
            refused.message.contains("a session takes"),
            "{}",
            refused.message
        );
    }
    assert_eq!(daemon.status(&id).await, SessionStatus::Idle);
    assert_eq!(
        daemon.server.requests().len(),
        asked,
        "nothing more reached the model"
    );
    daemon.host.shutdown().await.unwrap();
    daemon.host.closed().await;
}

/// A command that runs until the test makes `go` in the project: a batch in flight, holding a
/// slot, for as long as a test needs.
const UNTIL_GO: &str = "while [ ! -e go ]; do sleep 0.05; done; echo went";

/// [`Daemon::request`] at autonomy `full` (its commands run unasked).
fn unasked(daemon: &Daemon, task: &str) -> StartRequest {
    StartRequest {
        autonomy: Some(AutonomyLevel::Full),
        ..daemon.request(task)
    }
}

/// Waits until `session`'s model asked for its batch (its tool call was published).
async fn until_batch(stream: &mut EventStream, session: &str) {
    until(stream, |e| {
        e.session_id == session && matches!(e.event, AppEvent::ToolCall { .. })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_to_an_idle_session_queues_while_every_slot_works_then_runs() {
    let daemon = Daemon::new(
        json!([text_turn("first"), exec_turn(UNTIL_GO), text_turn("ran it")]),
        SupervisorOptions::default(),
        1,
    )
    .await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let idle = daemon.start("one").await;
    until(&mut stream, |e| e.session_id == idle && is_round_end(e)).await;
    assert_eq!(daemon.status(&idle).await, SessionStatus::Idle);
    // The second session holds the one slot while its batch runs.
    let busy = daemon.host.start(unasked(&daemon, "two")).await.unwrap().id;
    until_batch(&mut stream, &busy).await;
    let requests = daemon.server.requests().len();
    let follow_up = |session: &str, text: &str| SessionIntent {
        session_id: session.into(),
        msg: ControlMsg::FollowUp { text: text.into() },
    };
    daemon
        .host
        .send(follow_up(&idle, "and then?"))
        .await
        .unwrap();
    daemon.host.send(follow_up(&idle, "also")).await.unwrap();
    assert_eq!(daemon.status(&idle).await, SessionStatus::Queued);
    let load = daemon.host.load();
    assert_eq!((load.running, load.idle, load.queued), (1, 0, 1));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(daemon.server.requests().len(), requests, "nothing ran");
    // Held, each is recorded so: a daemon stopping now would leave them to a resume.
    let log_dir = daemon.host.log_dir(&idle).await.unwrap();
    assert_eq!(unsent_follow_ups(&log_dir).unwrap(), ["and then?", "also"]);
    std::fs::write(daemon.project.path().join("go"), "").unwrap();
    let got = until(&mut stream, |e| e.session_id == idle && is_round_end(e)).await;
    let busy_end = got
        .iter()
        .position(|e| e.session_id == busy && is_round_end(e))
        .expect("the working session ended its round first");
    let idle_start = got
        .iter()
        .position(|e| e.session_id == idle && matches!(e.event, AppEvent::TurnStarted { .. }))
        .unwrap();
    assert!(busy_end < idle_start, "the follow-up waited for the slot");
    let rounds = got
        .iter()
        .filter(|e| e.session_id == idle && is_round_end(e))
        .count();
    assert_eq!(rounds, 1, "both queued follow-ups are one round");
    assert_eq!(daemon.status(&idle).await, SessionStatus::Idle);
    assert_eq!(daemon.status(&busy).await, SessionStatus::Idle);
    let load = daemon.host.load();
    assert_eq!(
        (load.running, load.idle, load.queued),
        (0, 2, 0),
        "no slot kept"
    );
    let last = daemon.server.requests().pop().unwrap();
    let body = serde_json::to_string(&last.body).unwrap();
    assert!(
        body.contains("and then?") && body.contains("also"),
        "one round took both: {body}"
    );
    let recorded: Vec<String> = read_events(&log_dir)
        .unwrap()
        .records
        .into_iter()
        .filter_map(
            |r| match (r.event.as_str(), r.data.get("text").and_then(Value::as_str)) {
                ("follow_up_held", Some(text)) => Some(format!("held {text}")),
                ("control_command", Some(text)) => Some(format!("sent {text}")),
                _ => None,
            },
        )
        .collect();
    assert_eq!(
        recorded,
        ["held and then?", "held also", "sent and then?\n\nalso"]
    );
    assert!(unsent_follow_ups(&log_dir).unwrap().is_empty(), "all taken");
}

/// What waits for a session is bounded as a task is: the follow-ups that reached it and that
/// it has not taken, joined as its next round takes them, stay within `MAX_TASK_BYTES` whether
/// they wait in its loop (its round works) or in the daemon (for a slot). One more is refused
/// `busy`, naming why, and nothing of it is kept (a client sending follow-ups without end grew
/// the daemon, or the loop, by each); once a round took them, there is room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follow_ups_waiting_for_a_session_are_bounded_as_a_task_is() {
    let daemon = Daemon::new(
        json!([
            text_turn("first"),
            exec_turn(UNTIL_GO),
            text_turn("went"),
            text_turn("took w"),
            text_turn("took i"),
            text_turn("again")
        ]),
        SupervisorOptions::default(),
        1,
    )
    .await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let idle = daemon.start("one").await;
    until(&mut stream, |e| e.session_id == idle && is_round_end(e)).await;
    let working = daemon.host.start(unasked(&daemon, "two")).await.unwrap().id;
    until_batch(&mut stream, &working).await;
    let half = |c: char| c.to_string().repeat(MAX_TASK_BYTES / 2);
    let send = |session: &str, text: String| {
        daemon.host.send(SessionIntent {
            session_id: session.into(),
            msg: ControlMsg::FollowUp { text },
        })
    };
    for (session, c) in [(&idle, 'i'), (&working, 'w')] {
        send(session, half(c)).await.unwrap();
        let refused = send(session, half(c)).await.unwrap_err();
        assert_eq!(refused.code, HostErrorCode::Busy, "{refused}");
        assert!(
            refused.message.contains("has not taken yet")
                && refused.message.contains(&MAX_TASK_BYTES.to_string()),
            "{refused}"
        );
        send(session, format!("<then {c}>")).await.unwrap();
    }
    assert_eq!(daemon.status(&idle).await, SessionStatus::Queued);
    for (session, c) in [(&idle, 'i'), (&working, 'w')] {
        let log_dir = daemon.host.log_dir(session).await.unwrap();
        assert_eq!(
            unsent_follow_ups(&log_dir).unwrap(),
            [half(c), format!("<then {c}>")],
            "the refused one is not recorded"
        );
    }

    // The working session's round ends and its next takes its follow-ups, keeping the slot;
    // then the idle one's round takes its own.
    std::fs::write(daemon.project.path().join("go"), "").unwrap();
    until(&mut stream, |e| e.session_id == idle && is_round_end(e)).await;
    for session in [&idle, &working] {
        assert_eq!(daemon.status(session).await, SessionStatus::Idle);
        let log_dir = daemon.host.log_dir(session).await.unwrap();
        assert!(unsent_follow_ups(&log_dir).unwrap().is_empty(), "taken");
    }
    let bodies: Vec<String> = daemon
        .server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    for c in ['i', 'w'] {
        let took = bodies
            .iter()
            .find(|b| b.contains(&format!("<then {c}>")))
            .expect("a round took them");
        assert_eq!(
            took.matches(&half(c)).count(),
            1,
            "the first once, not the refused one"
        );
    }
    // Taken, so there is room for as much again.
    send(&idle, half('i')).await.unwrap();
    send(&idle, "<then i again>".to_owned()).await.unwrap();
}

/// The id of the approval `envs` ends with.
fn asked_id(envs: &[Envelope]) -> u64 {
    match envs.last().map(|e| &e.event) {
        Some(AppEvent::ApprovalRequired { id, .. }) => *id,
        other => panic!("not an approval: {other:?}"),
    }
}

fn is_asked(env: &Envelope) -> bool {
    matches!(env.event, AppEvent::ApprovalRequired { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_waiting_for_an_approval_holds_no_slot_and_its_answer_queues_for_one() {
    let daemon = Daemon::new(
        json!([
            exec_turn("echo asked | tee asked"),
            exec_turn(UNTIL_GO),
            text_turn("the other is done"),
            text_turn("ran what was asked"),
            text_turn("and the follow-up")
        ]),
        SupervisorOptions::default(),
        1,
    )
    .await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let asking = daemon.start("ask first").await;
    let approval = asked_id(&until(&mut stream, is_asked).await);
    assert_eq!(daemon.status(&asking).await, SessionStatus::WaitingForHuman);
    let load = daemon.host.load();
    assert_eq!(
        (load.running, load.asking, load.queued),
        (0, 1, 0),
        "the wait holds no slot"
    );
    // The one slot is free: a session started now runs at once, not queued.
    let working = daemon.host.start(unasked(&daemon, "work")).await.unwrap();
    assert_ne!(working.status, SessionStatus::Queued);
    until_batch(&mut stream, &working.id).await;

    // The answer, and a follow-up sent with it, wait for the slot the other session holds.
    daemon
        .host
        .send(SessionIntent {
            session_id: asking.clone(),
            msg: ControlMsg::Approve { id: approval },
        })
        .await
        .unwrap();
    daemon
        .host
        .send(SessionIntent {
            session_id: asking.clone(),
            msg: ControlMsg::FollowUp {
                text: "one more thing".into(),
            },
        })
        .await
        .unwrap();
    assert_eq!(daemon.status(&asking).await, SessionStatus::Queued);
    assert!(daemon.host.approvals().await.unwrap().is_empty());
    let load = daemon.host.load();
    assert_eq!((load.running, load.asking, load.queued), (1, 0, 1));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let project = daemon.project.path();
    assert!(!project.join("asked").exists());
    let requests = daemon.server.requests().len();
    assert_eq!(requests, 2, "the answered session has not gone on");

    std::fs::write(project.join("go"), "").unwrap();
    let got = until(&mut stream, |e| e.session_id == asking && is_round_end(e)).await;
    let working_end = got
        .iter()
        .position(|e| e.session_id == working.id && is_round_end(e))
        .expect("the working session ended its round first");
    let ran = got
        .iter()
        .position(|e| {
            let said = |o: &str| o.contains("asked");
            e.session_id == asking
                && matches!(&e.event, AppEvent::AgentOutput { output, .. } if said(output))
        })
        .expect("the approved command ran");
    assert!(working_end < ran, "the answer waited for the slot");
    // The follow-up held while it waited is the next round, once this one ended.
    let next = until(&mut stream, |e| e.session_id == asking && is_round_end(e)).await;
    assert!(next.iter().all(|e| !is_asked(e)));
    let last = daemon.server.requests().pop().unwrap();
    assert!(
        serde_json::to_string(&last.body)
            .unwrap()
            .contains("one more thing")
    );
    assert_eq!(daemon.status(&asking).await, SessionStatus::Idle);
    let load = daemon.host.load();
    assert_eq!(
        (load.running, load.asking, load.idle, load.queued),
        (0, 0, 2, 0),
        "no slot kept"
    );
    assert!(daemon.server.invariant_violations().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_an_approval_ended_without_an_answer_frees_what_it_held() {
    let daemon = Daemon::new(
        json!([
            exec_turn("echo never | tee never"),
            exec_turn("echo never | tee never"),
            exec_turn(UNTIL_GO)
        ]),
        SupervisorOptions::default(),
        1,
    )
    .await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    // Interrupted while it waits: the round ends and the session is idle, no slot counted.
    let interrupted = daemon.start("interrupted").await;
    until(&mut stream, is_asked).await;
    daemon.host.interrupt(&interrupted).await.unwrap();
    until(&mut stream, |e| {
        e.session_id == interrupted && is_round_end(e)
    })
    .await;
    assert_eq!(daemon.status(&interrupted).await, SessionStatus::Idle);
    let load = daemon.host.load();
    assert_eq!((load.running, load.asking, load.idle), (0, 0, 1));

    // Stopped with its answer queued for a slot (a gated batch holds the one): it ends, and
    // leaves neither a place in the queue nor a slot.
    let stopped = daemon.start("stopped").await;
    let approval = asked_id(&until(&mut stream, is_asked).await);
    let working = daemon
        .host
        .start(unasked(&daemon, "work"))
        .await
        .unwrap()
        .id;
    until_batch(&mut stream, &working).await;
    daemon
        .host
        .send(SessionIntent {
            session_id: stopped.clone(),
            msg: ControlMsg::Approve { id: approval },
        })
        .await
        .unwrap();
    assert_eq!(daemon.status(&stopped).await, SessionStatus::Queued);
    daemon.host.stop(&stopped).await.unwrap();
    until(&mut stream, |e| {
        e.session_id == stopped && matches!(e.event, AppEvent::SessionEnded { .. })
    })
    .await;
    assert_eq!(daemon.status(&stopped).await, SessionStatus::Interrupted);
    assert!(!daemon.project.path().join("never").exists());
    let load = daemon.host.load();
    assert_eq!(
        (load.running, load.asking, load.queued),
        (1, 0, 0),
        "only the working session holds a slot"
    );
    std::fs::write(daemon.project.path().join("go"), "").unwrap();
    until(&mut stream, |e| e.session_id == working && is_round_end(e)).await;
    let load = daemon.host.load();
    assert_eq!((load.running, load.queued), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_ends_completed_after_idle_timeout_and_resumes() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 2).await;
    std::fs::write(
        daemon.home.path().join(control_plane::SETTINGS_FILE),
        "[daemon]\nidle_timeout = 1\n",
    )
    .unwrap();
    let host = supervisor(
        &daemon.home,
        &daemon.server,
        SupervisorOptions::default(),
        2,
    );
    let mut stream = host.subscribe(None, None).await.unwrap();
    let id = host.start(daemon.request("one")).await.unwrap().id;
    let got = until(&mut stream, |e| {
        e.session_id == id && matches!(e.event, AppEvent::SessionEnded { .. })
    })
    .await;
    assert!(
        got.iter()
            .any(|e| matches!(&e.event, AppEvent::Warning { message }
            if message.contains("idle_timeout"))),
        "the session says why it ends"
    );
    let Some(AppEvent::SessionEnded { status, .. }) = got.last().map(|e| &e.event) else {
        unreachable!()
    };
    assert_eq!(*status, EndStatus::Completed);
    assert_eq!(host.session(&id).await.unwrap().status, SessionStatus::Done);
    let refused = host
        .send(SessionIntent {
            session_id: id.clone(),
            msg: ControlMsg::FollowUp {
                text: "late".into(),
            },
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code, HostErrorCode::SessionFinished);
    // Told how to go on.
    assert!(
        refused
            .message
            .contains(&format!("intendant ctl start --resume {id}")),
        "{}",
        refused.message
    );
    let mut request = daemon.request("again");
    request.resume = Some(id.clone());
    // Its task winds down (the log writer records the end) a moment after `session_ended` is
    // listed; until then a resume is refused as still running.
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    let resumed = loop {
        match host.start(request.clone()).await {
            Err(e) if e.code == HostErrorCode::InvalidRequest => {
                assert!(tokio::time::Instant::now() < deadline, "{e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => break other.unwrap(),
        }
    };
    assert_eq!(resumed.id, id);
    let got = until(&mut stream, |e| e.session_id == id && is_round_end(e)).await;
    assert!(matches!(
        got.first().map(|e| &e.event),
        Some(AppEvent::SessionStarted { resumed: true, .. })
    ));
    assert_eq!(host.session(&id).await.unwrap().status, SessionStatus::Idle);
}

/// `idle_timeout` changed in the file and reloaded is in force for the sessions that go idle
/// after the reload (it was read only at the daemon's start, and `ctl reload` said "reloaded").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_idle_timeout_ends_sessions_that_go_idle_after_it() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 2).await;
    std::fs::write(
        daemon.home.path().join(control_plane::SETTINGS_FILE),
        "[daemon]\nidle_timeout = 1\n",
    )
    .unwrap();
    daemon
        .host
        .update_settings(SettingsChange {
            reload: true,
            ..SettingsChange::default()
        })
        .await
        .unwrap();
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let id = daemon.start("one").await;
    let got = until(&mut stream, |e| {
        e.session_id == id && matches!(e.event, AppEvent::SessionEnded { .. })
    })
    .await;
    assert!(
        matches!(
            got.last().map(|e| &e.event),
            Some(AppEvent::SessionEnded {
                status: EndStatus::Completed,
                ..
            })
        ),
        "{got:?}"
    );
    assert_eq!(
        daemon.host.session(&id).await.unwrap().status,
        SessionStatus::Done
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_lists_each_sessions_autonomy_provider_and_model_and_a_resume_restores_them() {
    use intendant_protocol::network::NetworkMode;
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let mut request = daemon.request("at full");
    request.autonomy = Some(AutonomyLevel::Full);
    request.network = Some(NetworkMode::None);
    let full = daemon.host.start(request).await.unwrap().id;
    let low = daemon.start("lowered later").await;
    until(&mut stream, |e| e.session_id == full && is_round_end(e)).await;
    daemon
        .host
        .set_autonomy(Some(&low), AutonomyLevel::Low)
        .await
        .unwrap();
    until(&mut stream, |e| {
        e.session_id == low && matches!(e.event, AppEvent::AutonomyChanged { .. })
    })
    .await;
    // Listed with the network its commands get (the project's by default).
    for (id, network) in [(&full, NetworkMode::None), (&low, NetworkMode::Proxy)] {
        let listed = daemon.host.session(id).await.unwrap();
        assert_eq!(listed.network, Some(network));
    }
    daemon.host.shutdown().await.unwrap();
    daemon.host.closed().await;

    let restarted = daemon.restart();
    let listed = |id: &str, all: &[intendant_protocol::daemon::SessionSummary]| {
        all.iter().find(|s| s.id == id).unwrap().clone()
    };
    let all = restarted.sessions().await.unwrap();
    let full_listed = listed(&full, &all);
    assert_eq!(full_listed.autonomy, AutonomyLevel::Full);
    assert_eq!(full_listed.provider, "openai");
    assert_eq!(full_listed.model, "fake-model");
    assert_eq!(full_listed.backend, Backend::Native);
    assert_eq!(listed(&low, &all).autonomy, AutonomyLevel::Low);
    assert_eq!(full_listed.network, Some(NetworkMode::None));
    assert_eq!(listed(&low, &all).network, Some(NetworkMode::Proxy));
    let resume = |id: &str| StartRequest {
        task: String::new(),
        project: daemon.project.path().display().to_string(),
        resume: Some(id.to_owned()),
        ..StartRequest::default()
    };
    let resumed = restarted.start(resume(&full)).await.unwrap();
    assert_eq!(resumed.autonomy, AutonomyLevel::Full);
    // And a resume keeps it.
    assert_eq!(resumed.network, Some(NetworkMode::None));
    assert_eq!(resumed.provider, "openai");
    assert_eq!(resumed.model, "fake-model");
    restarted.shutdown().await.unwrap();
    restarted.closed().await;

    // The owner lowers the ceiling: a resume is held under it.
    control_plane::save(daemon.home.path(), &settings(4)).unwrap();
    let text =
        std::fs::read_to_string(daemon.home.path().join(control_plane::SETTINGS_FILE)).unwrap();
    std::fs::write(
        daemon.home.path().join(control_plane::SETTINGS_FILE),
        format!("{text}max_autonomy = \"high\"\n"),
    )
    .unwrap();
    let env = AssemblyEnv {
        home: daemon.home.path().to_path_buf(),
        runtime_path: Some(runtime_bin()),
        config_dir: None,
        store: SharedStore::new(daemon.home.path()),
        process_env: daemon_env(&daemon.server),
    };
    let capped = Supervisor::new(env, None, SupervisorOptions::default()).unwrap();
    assert_eq!(
        capped.settings().await.unwrap().max_autonomy,
        AutonomyLevel::High
    );
    let resumed = capped.start(resume(&full)).await.unwrap();
    assert_eq!(resumed.autonomy, AutonomyLevel::High, "held to the ceiling");
    capped.shutdown().await.unwrap();
    capped.closed().await;
}

/// Resumes of one session asked at once (a double click, two clients) start it once: the others
/// are refused while the first reopens its record, rather than run beside it on the same log
/// (two runs appended to one `session.jsonl`, the listing knowing only one of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumes_of_one_session_asked_at_once_start_it_once() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    let log = recorded_ended(&daemon, "resumed twice at once", None, &[]);
    let id = log.id().to_owned();
    daemon.host.shutdown().await.unwrap();
    daemon.host.closed().await;
    let restarted = daemon.restart();
    let resume = |text: &str| StartRequest {
        task: text.to_owned(),
        project: daemon.project.path().display().to_string(),
        resume: Some(id.clone()),
        ..StartRequest::default()
    };
    let (a, b, c) = tokio::join!(
        restarted.start(resume("go on a")),
        restarted.start(resume("go on b")),
        restarted.start(resume("go on c")),
    );
    let results = [a, b, c];
    let started = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(started, 1, "{results:?}");
    for refused in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(refused.code, HostErrorCode::InvalidRequest, "{refused:?}");
        assert!(
            refused.message.contains("being resumed already")
                || refused.message.contains("stop it before resuming"),
            "{}",
            refused.message
        );
    }
    let mut stream = restarted.subscribe(Some(&id), Some(0)).await.unwrap();
    until(&mut stream, is_round_end).await;
    restarted.shutdown().await.unwrap();
    restarted.closed().await;
    let started_runs = std::fs::read_to_string(
        daemon
            .home
            .path()
            .join("logs")
            .join(&id)
            .join("session.jsonl"),
    )
    .unwrap()
    .lines()
    .filter(|l| l.contains("\"event\":\"session_started\""))
    .count();
    assert_eq!(started_runs, 1, "one run appended to its record");
    // Refused ones claimed nothing: it resumes again.
    let again = daemon.restart();
    again.start(resume("once more")).await.unwrap();
    again.shutdown().await.unwrap();
    again.closed().await;
}

/// A sub-agent an earlier daemon recorded (its parent gone, its record older than the depth
/// field: it names only its parent and role), resumed on its own: the model is told it is a
/// sub-agent in its role and offered `submit_result`, as at its start, not a top session's
/// prompt and tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_resumed_on_its_own_is_told_its_role_and_offered_submit_result() {
    let daemon = Daemon::new(
        json!([{ "text": "resumed" }]),
        SupervisorOptions::default(),
        4,
    )
    .await;
    let child = recorded_ended(
        &daemon,
        "review the parser",
        Some("20261101T000000Z-gone00"),
        &[],
    );
    let file = child.dir().join("session_meta.json");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    meta["role"] = json!("review");
    std::fs::write(&file, serde_json::to_vec(&meta).unwrap()).unwrap();
    daemon.host.shutdown().await.unwrap();
    daemon.host.closed().await;
    let restarted = daemon.restart();
    let mut stream = restarted
        .subscribe(Some(child.id()), Some(0))
        .await
        .unwrap();
    let resumed = restarted
        .start(StartRequest {
            task: "go on".into(),
            project: daemon.project.path().display().to_string(),
            resume: Some(child.id().to_owned()),
            ..StartRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(resumed.parent.as_deref(), Some("20261101T000000Z-gone00"));
    until(&mut stream, is_round_end).await;
    let requests = daemon.server.turn_requests();
    let body = &requests.last().unwrap().body;
    let instructions = body["instructions"].as_str().unwrap();
    assert!(
        instructions.contains(intendant_core::prompts::SUB_AGENT_PREAMBLE),
        "{instructions}"
    );
    assert!(instructions.contains("Role: review"), "{instructions}");
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(tools.contains(&"submit_result"), "{tools:?}");
    // At depth 1, below the maximum: it may still start children of its own.
    assert!(tools.contains(&"spawn_sub_agent"), "{tools:?}");
    restarted.shutdown().await.unwrap();
    restarted.closed().await;
}

/// A resume that names no project goes on in the one its session worked in; once that
/// directory is gone, it is refused saying so, and goes on where a resume names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_goes_on_in_its_sessions_project_and_says_when_that_is_gone() {
    let daemon = Daemon::new(
        json!([{ "text": "again" }, { "text": "moved" }]),
        SupervisorOptions::default(),
        4,
    )
    .await;
    let kept = recorded_ended(&daemon, "worked here", None, &[]);
    let moved = tempfile::tempdir().unwrap();
    let gone = moved.path().join("gone");
    std::fs::create_dir(&gone).unwrap();
    let log = SessionLog::create(
        daemon.home.path(),
        SessionMeta::new(&gone, "worked in a moved project", "fake-model", "openai"),
    )
    .unwrap();
    let left = log.id().to_owned();
    drop(log);
    std::fs::remove_dir(&gone).unwrap();
    daemon.host.shutdown().await.unwrap();
    daemon.host.closed().await;
    let restarted = daemon.restart();
    let resume = |id: &str, project: &str| StartRequest {
        task: "go on".into(),
        project: project.into(),
        resume: Some(id.to_owned()),
        ..StartRequest::default()
    };
    let resumed = restarted.start(resume(kept.id(), "")).await.unwrap();
    assert_eq!(resumed.project, daemon.project.path().display().to_string());
    let refused = restarted.start(resume(&left, "")).await.unwrap_err();
    assert_eq!(refused.code, HostErrorCode::InvalidRequest);
    assert!(
        refused.message.contains("not a directory now")
            && refused.message.contains(&gone.display().to_string()),
        "{}",
        refused.message
    );
    let elsewhere = restarted
        .start(resume(&left, &daemon.project.path().display().to_string()))
        .await
        .unwrap();
    assert_eq!(
        elsewhere.project,
        daemon.project.path().display().to_string()
    );
    restarted.shutdown().await.unwrap();
    restarted.closed().await;
}

/// A session the daemon gave the orchestration prompt (its task lists two parts) is given it
/// again when resumed with a plain instruction: the system prompt is built anew each run, and
/// a resume's instruction, which does not look like work to split, left it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_session_that_orchestrated_is_given_the_orchestration_prompt_again() {
    let daemon = Daemon::new(
        json!([{ "text": "planned" }, { "text": "went on" }]),
        SupervisorOptions::default(),
        4,
    )
    .await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let id = daemon.start("- write the parser\n- write its tests").await;
    until(&mut stream, |e| e.session_id == id && is_round_end(e)).await;
    daemon.host.stop(&id).await.unwrap();
    until(&mut stream, |e| {
        e.session_id == id && matches!(e.event, AppEvent::SessionEnded { .. })
    })
    .await;
    let mut resume = daemon.request("go on");
    resume.resume = Some(id.clone());
    daemon.host.start(resume).await.unwrap();
    until(&mut stream, |e| e.session_id == id && is_round_end(e)).await;
    let orchestrate = intendant_core::prompts::orchestrate_prompt(daemon.project.path(), None);
    let requests = daemon.server.turn_requests();
    assert_eq!(requests.len(), 2);
    for request in requests {
        let instructions = request.body["instructions"].as_str().unwrap();
        assert!(instructions.contains(&orchestrate), "{instructions}");
    }
    daemon.host.shutdown().await.unwrap();
    daemon.host.closed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_session_that_is_stopped_ends_interrupted_without_running() {
    let daemon = Daemon::new(
        json!([exec_turn(UNTIL_GO)]),
        SupervisorOptions::default(),
        1,
    )
    .await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let first = daemon.host.start(unasked(&daemon, "one")).await.unwrap().id;
    let queued = daemon.host.start(daemon.request("two")).await.unwrap();
    assert_eq!(queued.status, SessionStatus::Queued);
    // The first session holds the one slot while its batch runs.
    until_batch(&mut stream, &first).await;
    let asked = daemon.server.requests().len();
    // Without waiting for the slot the first session holds.
    daemon.host.stop(&queued.id).await.unwrap();
    until(&mut stream, |e| {
        e.session_id == queued.id && matches!(e.event, AppEvent::SessionEnded { .. })
    })
    .await;
    assert_eq!(daemon.status(&queued.id).await, SessionStatus::Interrupted);
    assert_eq!(daemon.server.requests().len(), asked, "no model request");
    // Its log holds the end: an event is written before any subscriber sees it.
    let log_dir = daemon.host.log_dir(&queued.id).await.unwrap();
    let ended = || {
        read_events(&log_dir).unwrap().records.last().map(|r| {
            (
                r.event.clone(),
                r.data
                    .get("status")
                    .and_then(|s| s.as_str())
                    .map(str::to_owned),
            )
        })
    };
    assert_eq!(ended().unwrap().0, "session_ended");
    assert_eq!(ended().unwrap().1.as_deref(), Some("interrupted"));
    assert_eq!(daemon.status(&first).await, SessionStatus::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_with_their_codes() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 2).await;
    let mut request = daemon.request("x");
    request.project = "relative/dir".into();
    assert_eq!(
        daemon.host.start(request).await.unwrap_err().code,
        HostErrorCode::InvalidRequest
    );
    let mut request = daemon.request("x");
    request.backend = Some(Backend::named("codex"));
    let e = daemon.host.start(request).await.unwrap_err();
    assert_eq!(e.code, HostErrorCode::InvalidRequest);
    assert!(e.message.contains("codex"), "{e}");
    let mut request = daemon.request("");
    request.resume = Some("no-such-session".into());
    assert_eq!(
        daemon.host.start(request).await.unwrap_err().code,
        HostErrorCode::UnknownSession
    );
    assert_eq!(
        daemon
            .host
            .subscribe(Some("nope"), Some(0))
            .await
            .unwrap_err()
            .code,
        HostErrorCode::UnknownSession
    );
    // The pseudo-sessions the daemon files its own events under are followed alone.
    for pseudo in [
        intendant_protocol::agenda::AGENDA_SESSION,
        intendant_protocol::memory::MEMORY_SESSION,
        DAEMON_SESSION,
    ] {
        assert!(
            daemon.host.subscribe(Some(pseudo), Some(0)).await.is_ok(),
            "{pseudo}"
        );
    }
    assert_eq!(
        daemon.host.log_dir("nope").await.unwrap_err().code,
        HostErrorCode::UnknownSession
    );
    assert!(
        daemon.host.sessions().await.unwrap().is_empty(),
        "nothing was created"
    );
}

/// Writes the project's `intendant.toml` and trusts it, as `intendant trust` does.
fn trusted_project_config(daemon: &Daemon, toml: &str) {
    std::fs::write(daemon.project.path().join("intendant.toml"), toml).unwrap();
    let (_, digest) = ProjectConfig::load_digest(daemon.project.path()).unwrap();
    TrustStore::new(daemon.home.path())
        .trust(&digest.unwrap())
        .unwrap();
}

/// Without a worker factory an agent backend is refused naming it, which tells which one was
/// chosen.
async fn refused_backend(daemon: &Daemon, request: StartRequest) -> String {
    let e = daemon.host.start(request).await.unwrap_err();
    assert_eq!(e.code, HostErrorCode::InvalidRequest, "{e}");
    e.message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_is_the_requests_then_the_projects_then_the_daemons() {
    let daemon = Daemon::new(json!([text_turn("ok")]), SupervisorOptions::default(), 2).await;
    daemon
        .host
        .update_settings(SettingsChange {
            default_backend: Some(Backend::named("codex")),
            ..SettingsChange::default()
        })
        .await
        .unwrap();
    // The daemon's default when the project names none.
    let refused = refused_backend(&daemon, daemon.request("x")).await;
    assert!(refused.contains("\"codex\""), "{refused}");
    // The project's default wins over the daemon's, and the listing shows it.
    trusted_project_config(&daemon, "[agent]\ndefault_backend = \"native\"\n");
    let summary = daemon.host.start(daemon.request("x")).await.unwrap();
    assert_eq!(summary.backend, Backend::Native);
    let listed = daemon.host.sessions().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].backend, Backend::Native);
    // The request's wins over the project's.
    trusted_project_config(&daemon, "[agent]\ndefault_backend = \"codex\"\n");
    let mut request = daemon.request("x");
    request.backend = Some(Backend::named("kimi"));
    let refused = refused_backend(&daemon, request).await;
    assert!(refused.contains("\"kimi\""), "{refused}");
    let mut request = daemon.request("x");
    request.backend = Some(Backend::Native);
    let summary = daemon.host.start(request).await.unwrap();
    assert_eq!(summary.backend, Backend::Native);
    daemon.host.shutdown().await.unwrap();
    daemon.host.closed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_lists_the_backend_each_session_recorded() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 2).await;
    let kimi = SessionMeta {
        backend: Some(Backend::named("kimi")),
        ..SessionMeta::new(daemon.project.path(), "by kimi", "", "kimi")
    };
    let kimi = SessionLog::create(daemon.home.path(), kimi).unwrap();
    let native = SessionMeta::new(daemon.project.path(), "ours", "fake-model", "openai");
    let native = SessionLog::create(daemon.home.path(), native).unwrap();
    let listed = daemon.restart().sessions().await.unwrap();
    let backend = |id: &str| listed.iter().find(|s| s.id == id).unwrap().backend.clone();
    assert_eq!(backend(kimi.id()), Backend::named("kimi"));
    assert_eq!(backend(native.id()), Backend::Native);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_lists_interrupted_and_finished_sessions_and_resumes_one() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    // A finished one-shot session in the same state root.
    let meta = SessionMeta::new(daemon.project.path(), "one-shot", "fake-model", "openai");
    let finished = SessionLog::create(daemon.home.path(), meta).unwrap();
    finished
        .record_event(&AppEvent::SessionEnded {
            session_id: finished.id().into(),
            status: EndStatus::Completed,
            reason: "ok".into(),
        })
        .unwrap();
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let id = daemon.start("survive").await;
    let mut live = until(&mut stream, is_round_end).await;
    // The daemon shuts down, ending the session `interrupted` the one way a stop does; then a
    // record is torn mid-line after it (what a kill -9 mid-write leaves; the daemon's own
    // kill -9 is in the CLI's suite).
    daemon.host.shutdown().await.unwrap();
    live.extend(
        until(&mut stream, |e| {
            matches!(e.event, AppEvent::SessionEnded { .. })
        })
        .await,
    );
    let last_seq = live.last().unwrap().seq;
    daemon.host.closed().await;
    let log_dir = daemon.host.log_dir(&id).await.unwrap();
    let events = log_dir.join("session.jsonl");
    let mut torn = std::fs::read(&events).unwrap();
    torn.extend_from_slice(br#"{"ts":"2026-12-01T10:00:00Z","seq":99999,"event":"turn_st"#);
    std::fs::write(&events, torn).unwrap();
    assert!(read_events(&log_dir).unwrap().torn_tail.is_some());

    let restarted = daemon.restart();
    let listed = restarted.sessions().await.unwrap();
    let status = |sid: &str| listed.iter().find(|s| s.id == sid).unwrap().status;
    assert_eq!(status(&id), SessionStatus::Interrupted);
    assert_eq!(status(finished.id()), SessionStatus::Done);
    assert_eq!(restarted.next_seq(), last_seq + 1, "numbering goes on");
    // Attach after the restart: the same events, in the same order.
    let mut attach = restarted.subscribe(Some(&id), Some(0)).await.unwrap();
    let replayed = replay(&mut attach).await;
    assert_same_stream(&replayed, &live);
    // Resume: the same session, its conversation continued.
    let mut all = restarted.subscribe(None, None).await.unwrap();
    let mut request = daemon.request("");
    request.resume = Some(id.clone());
    let resumed = restarted.start(request).await.unwrap();
    assert_eq!(resumed.id, id);
    // Still the task it was started with, not the resume's instruction to go on.
    assert_eq!(resumed.task, "survive");
    let got = until(&mut all, is_round_end).await;
    assert!(matches!(
        got.first().map(|e| &e.event),
        Some(AppEvent::SessionStarted { resumed: true, .. })
    ));
    assert!(got.iter().all(|e| e.seq > last_seq));
    assert_eq!(restarted.session(&id).await.unwrap().task, "survive");
    let mut again = daemon.request("");
    again.resume = Some(id.clone());
    let refused = restarted.start(again).await.unwrap_err();
    assert_eq!(
        refused.code,
        HostErrorCode::InvalidRequest,
        "a running session is not resumed twice"
    );
    // Its round ended: it waits for a follow-up, and is told how to give one.
    assert!(
        refused.message.contains("is idle, waiting for a follow-up")
            && refused
                .message
                .contains(&format!("intendant ctl send {id}")),
        "{}",
        refused.message
    );
    restarted.shutdown().await.unwrap();
    assert_eq!(
        restarted
            .start(daemon.request("late"))
            .await
            .unwrap_err()
            .code,
        HostErrorCode::ShuttingDown
    );
    restarted.closed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_gives_back_what_each_session_ended_with() {
    // Texts longer than a listing carries: an ended session's are held cut, and read back whole.
    let long = |what: &str| format!("{what} {}", "x".repeat(10_000));
    let answer = long("The answer, given before the restart.");
    let daemon = Daemon::new(json!([text_turn(&answer)]), SupervisorOptions::default(), 4).await;
    // A sub-agent's record: two reports and two answers; the last of each is what it ended
    // with (as written by its daemon before this one).
    let mut meta = SessionMeta::new(daemon.project.path(), "child", "fake-model", "openai");
    meta.parent = Some("20261205T000000Z-parent".into());
    let child = SessionLog::create(daemon.home.path(), meta).unwrap();
    let submit = |summary: &str| AppEvent::ToolCall {
        call_id: "c".into(),
        name: "submit_result".into(),
        arguments: json!({ "summary": summary, "fields": { "n": 2 } }),
    };
    for event in [
        submit("a first try"),
        AppEvent::Done {
            message: "first".into(),
        },
        submit(&long("probed both")),
        AppEvent::Done {
            message: "Reported.".into(),
        },
        AppEvent::SessionEnded {
            session_id: child.id().into(),
            status: EndStatus::Completed,
            reason: "done".into(),
        },
    ] {
        child.record_event(&event).unwrap();
    }
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let asked = daemon.start(&long("asked for first")).await;
    until(&mut stream, |e| e.session_id == asked && is_round_end(e)).await;
    let listed = daemon.start("listed").await;
    until(&mut stream, |e| e.session_id == listed && is_round_end(e)).await;
    let answered = |s: &intendant_protocol::daemon::SessionSummary| s.final_text.clone();
    let before = answered(&daemon.host.session(&asked).await.unwrap());
    assert_eq!(before.as_deref(), Some(answer.as_str()));
    let before_listed = answered(&daemon.host.session(&listed).await.unwrap());
    assert!(before_listed.is_some());
    daemon.host.shutdown().await.unwrap();
    daemon.host.closed().await;
    // Ended: listed cut, whole when asked for by id.
    let ended = daemon.host.session(&asked).await.unwrap();
    assert_eq!(answered(&ended), before);
    assert_eq!(ended.task, long("asked for first"));
    let stopped = ended.reason;
    assert!(stopped.is_some());
    let all = daemon.host.sessions().await.unwrap();
    let cut = all.iter().find(|s| s.id == asked).unwrap();
    let cut_text = cut.final_text.as_deref().unwrap();
    assert!(
        cut_text.len() < 4200 && cut_text.ends_with('…'),
        "{cut_text}"
    );

    let restarted = daemon.restart();
    // Asked for by id before anything was read back: read from its log then.
    let asked_now = restarted.session(&asked).await.unwrap();
    assert_eq!(answered(&asked_now), before);
    assert_eq!(asked_now.task, long("asked for first"));
    assert_eq!(asked_now.reason, stopped, "why it ended, as recorded");
    let child_now = restarted.session(child.id()).await.unwrap();
    assert_eq!(child_now.final_text.as_deref(), Some("Reported."));
    let report = child_now.result.expect("its report");
    assert_eq!(report.summary, long("probed both"));
    assert_eq!(report.fields["n"], 2);
    // Every other one, in the listing, once the daemon has read them back.
    restarted.read_endings().await.unwrap();
    let all = restarted.sessions().await.unwrap();
    let listed_now = all.iter().find(|s| s.id == listed).unwrap();
    assert_eq!(answered(listed_now), before_listed);
    restarted.shutdown().await.unwrap();
    restarted.closed().await;
}

/// A session recorded in `daemon`'s state root as another process's, still running: its
/// record names `writer` (pid and start time) as the process writing it.
fn recorded_running_in(daemon: &Daemon, task: &str, writer: u32) -> SessionLog {
    let meta = SessionMeta::new(daemon.project.path(), task, "fake-model", "openai");
    let log = SessionLog::create(daemon.home.path(), meta).unwrap();
    written_by(log.dir(), writer);
    log
}

/// Makes the record in `record` (a session directory) say process `writer` writes it.
fn written_by(record: &std::path::Path, writer: u32) {
    let stat = std::fs::read_to_string(format!("/proc/{writer}/stat")).unwrap();
    let (_, after_name) = stat.rsplit_once(')').unwrap();
    let start: u64 = after_name
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let file = record.join("session_meta.json");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    meta["pid"] = json!(writer);
    meta["pid_start"] = json!(start);
    std::fs::write(&file, serde_json::to_vec(&meta).unwrap()).unwrap();
}

/// The ids a `sessions_changed` event names.
fn changed_ids(env: &Envelope) -> &[String] {
    match &env.event {
        AppEvent::SessionsChanged { ids } if env.session_id == DAEMON_SESSION => ids,
        _ => &[],
    }
}

/// Reads `stream` until `sessions_changed` events have named every one of `ids`; every event
/// read.
async fn until_changed(stream: &mut EventStream, ids: &[&str]) -> Vec<Envelope> {
    let mut left: Vec<&str> = ids.to_vec();
    until(stream, |env| {
        left.retain(|id| !changed_ids(env).iter().any(|c| c == id));
        left.is_empty()
    })
    .await
}

/// A one-shot run still writing its session when the daemon starts is listed running; once the
/// run ends (or is killed) the daemon lists what its record then says, instead of running for
/// good (and counting it among the running in `ctl status`), and tells its subscribers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_another_process_was_writing_is_listed_as_it_ends() {
    use std::io::Write as _;
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    daemon.host.shutdown().await.unwrap();
    daemon.host.closed().await;
    let mut writer = std::process::Command::new("sh")
        .args(["-c", "read _"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ends = recorded_running_in(&daemon, "ends", writer.id());
    let killed = recorded_running_in(&daemon, "killed", writer.id());
    let restarted = daemon.restart();
    let statuses = || async {
        let listed = restarted.sessions().await.unwrap();
        let of = |id: &str| listed.iter().find(|s| s.id == id).unwrap().status;
        (of(ends.id()), of(killed.id()))
    };
    assert_eq!(
        statuses().await,
        (SessionStatus::Running, SessionStatus::Running)
    );
    let counts = restarted.session_counts().await.unwrap();
    assert_eq!((counts.running, counts.run_elsewhere), (2, 2));
    let mut stream = restarted.subscribe(None, None).await.unwrap();
    let follow = restarted.follow_records();
    // One writes its end, then the writer goes away leaving the other unfinished.
    ends.record_event(&AppEvent::SessionEnded {
        session_id: ends.id().into(),
        status: EndStatus::Completed,
        reason: "done".into(),
    })
    .unwrap();
    writer.stdin.take().unwrap().write_all(b"end\n").unwrap();
    writer.wait().unwrap();
    until_changed(&mut stream, &[ends.id(), killed.id()]).await;
    assert_eq!(
        statuses().await,
        (SessionStatus::Done, SessionStatus::Interrupted)
    );
    let counts = restarted.session_counts().await.unwrap();
    assert_eq!(
        (
            counts.running,
            counts.done,
            counts.interrupted,
            counts.run_elsewhere
        ),
        (0, 1, 1, 0)
    );
    let left = restarted.session(killed.id()).await.unwrap();
    assert!(left.reason.is_some(), "why it is interrupted: {left:?}");
    restarted.shutdown().await.unwrap();
    restarted.closed().await;
    drop(restarted);
    tokio::time::timeout(Duration::from_secs(20), follow)
        .await
        .expect("the follower ends with the supervisor")
        .unwrap();
}

/// Sessions a one-shot run records once the daemon serves are listed as they appear, running
/// while their writer runs and as their record says once it is gone, each told to subscribers
/// (a dashboard's listing shows them without a reload); the daemon's own sessions are not
/// "found".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_another_process_records_after_the_start_are_listed_and_told() {
    use std::io::Write as _;
    let daemon = Daemon::new(json!([text_turn("mine")]), SupervisorOptions::default(), 4).await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let _follow = daemon.host.follow_records();
    let own = daemon.start("my own").await;
    until(&mut stream, |e| e.session_id == own && is_round_end(e)).await;
    let mut writer = std::process::Command::new("sh")
        .args(["-c", "read _"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let running = recorded_running_in(&daemon, "one-shot running", writer.id());
    let meta = SessionMeta::new(
        daemon.project.path(),
        "one-shot finished",
        "fake-model",
        "openai",
    );
    let finished = SessionLog::create(daemon.home.path(), meta).unwrap();
    finished
        .record_event(&AppEvent::SessionEnded {
            session_id: finished.id().into(),
            status: EndStatus::Completed,
            reason: "done".into(),
        })
        .unwrap();
    // Written (and ended) by another process: this one runs the daemon.
    written_by(finished.dir(), writer.id());
    let seen = until_changed(&mut stream, &[running.id(), finished.id()]).await;
    assert!(
        seen.iter().all(|e| !changed_ids(e).contains(&own)),
        "the daemon's own session is not found anew"
    );
    let listed = |id: &str| {
        let host = daemon.host.clone();
        let id = id.to_owned();
        async move { host.session(&id).await.unwrap() }
    };
    let found = listed(running.id()).await;
    assert_eq!(found.status, SessionStatus::Running);
    assert_eq!(found.task, "one-shot running");
    assert_eq!(found.run_by, Some(writer.id()), "the process that runs it");
    assert_eq!(listed(finished.id()).await.run_by, None);
    assert_eq!(listed(finished.id()).await.status, SessionStatus::Done);
    let counts = daemon.host.session_counts().await.unwrap();
    assert_eq!(
        (
            counts.total,
            counts.running,
            counts.done,
            counts.run_elsewhere
        ),
        (3, 1, 1, 1),
        "running, and run by another process"
    );
    // Followed while it runs: what its log gains is relayed as it was recorded.
    let mut followed = daemon
        .host
        .subscribe(Some(running.id()), Some(0))
        .await
        .unwrap();
    appended_by_its_writer(running.dir(), AppEvent::TurnStarted { turn: 1 });
    let relayed = until(&mut followed, |e| {
        matches!(e.event, AppEvent::TurnStarted { turn: 1 })
    })
    .await;
    let turn = relayed.last().unwrap();
    assert_eq!(turn.session_id, running.id());
    assert_eq!(turn.ts, RECORDED_AT, "as it was recorded");
    let log_len = std::fs::metadata(running.dir().join("session.jsonl"))
        .unwrap()
        .len();
    assert_eq!(turn.record_end, Some(log_len), "where its line ends");
    // What only a session the daemon runs takes is refused, naming the process that runs it.
    let follow_up = SessionIntent {
        session_id: running.id().to_owned(),
        msg: ControlMsg::FollowUp {
            text: "more".into(),
        },
    };
    let approve = SessionIntent {
        session_id: running.id().to_owned(),
        msg: ControlMsg::Approve { id: 1 },
    };
    for refused in [
        daemon.host.send(follow_up).await.map(drop),
        daemon.host.send(approve).await.map(drop),
        daemon.host.interrupt(running.id()).await,
        daemon.host.stop(running.id()).await,
        daemon
            .host
            .set_autonomy(Some(running.id()), AutonomyLevel::Low)
            .await,
    ] {
        let e = refused.unwrap_err();
        assert_eq!(e.code, HostErrorCode::InvalidRequest, "{e:?}");
        assert!(
            e.message.contains("run by another process")
                && e.message.contains(&format!("pid {}", writer.id()))
                && !e.message.contains("  "),
            "{}",
            e.message
        );
    }
    // While it runs, it is listed as its record says now (here, its level as the run set it).
    assert_eq!(found.autonomy, AutonomyLevel::Medium);
    let file = running.dir().join("session_meta.json");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    meta["autonomy"] = json!("high");
    std::fs::write(&file, serde_json::to_vec(&meta).unwrap()).unwrap();
    until_changed(&mut stream, &[running.id()]).await;
    let now = listed(running.id()).await;
    assert_eq!(
        (now.autonomy, now.status),
        (AutonomyLevel::High, SessionStatus::Running)
    );

    // Its writer gone, the running one is listed interrupted, and told; its follower gets the
    // end the listing gives it (the writer was killed before it wrote one), not a wait for good.
    writer.stdin.take().unwrap().write_all(b"end\n").unwrap();
    writer.wait().unwrap();
    until_changed(&mut stream, &[running.id()]).await;
    let interrupted = listed(running.id()).await;
    assert_eq!(
        (interrupted.status, interrupted.run_by),
        (SessionStatus::Interrupted, None)
    );
    assert_eq!(daemon.host.session_counts().await.unwrap().running, 0);
    let end = until(&mut followed, |e| {
        matches!(e.event, AppEvent::SessionEnded { .. })
    })
    .await;
    let AppEvent::SessionEnded { status, reason, .. } = &end.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!(*status, EndStatus::Interrupted);
    assert!(reason.contains("left unfinished"), "{reason}");
    assert_eq!(
        end.last().unwrap().record_end,
        None,
        "not read from its log"
    );
    // What was relayed is history a later follower reads back (while the ring holds it).
    let ended = daemon
        .host
        .subscribe(Some(running.id()), Some(0))
        .await
        .unwrap();
    assert_eq!(ended.history_end(), end.last().unwrap().seq);
}

/// When a record [`appended_by_its_writer`] says it was written.
const RECORDED_AT: &str = "2026-12-06T10:00:00.000Z";

/// Appends `event` to the log in `record` (a session directory) as the one-shot run writing it
/// would (one whole line, no `seq`), leaving its metadata as it is.
fn appended_by_its_writer(record: &std::path::Path, event: AppEvent) {
    use std::io::Write as _;
    let line = intendant_protocol::events::SessionLogRecord {
        ts: RECORDED_AT.to_owned(),
        seq: None,
        event,
    };
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(record.join("session.jsonl"))
        .unwrap();
    log.write_all(format!("{}\n", serde_json::to_string(&line).unwrap()).as_bytes())
        .unwrap();
}

/// A session the daemon lists as ended that another process resumes (a one-shot `intendant
/// --resume`, which marks `logs/` changed once its record names it, as
/// `intendant_core::session_log` does) is listed running while that process writes it, with
/// what it uses, and then as its record says; each change told. A record rewritten by this
/// process (the daemon's own) is not taken for another's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_listed_ended_that_another_process_resumes_is_listed_running_then_as_it_ends() {
    use std::io::Write as _;
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let _follow = daemon.host.follow_records();
    let spawn_writer = || {
        std::process::Command::new("sh")
            .args(["-c", "read _"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let end = |mut writer: std::process::Child| {
        writer.stdin.take().unwrap().write_all(b"end\n").unwrap();
        writer.wait().unwrap();
    };
    let first = spawn_writer();
    let log = recorded_ended(&daemon, "resumed elsewhere", None, &[]);
    let id = log.id().to_owned();
    written_by(log.dir(), first.id());
    end(first);
    until_changed(&mut stream, &[&id]).await;
    let listed = |id: &str| {
        let host = daemon.host.clone();
        let id = id.to_owned();
        async move { host.session(&id).await.unwrap() }
    };
    assert_eq!(listed(&id).await.status, SessionStatus::Done);

    // Resumed by another process: its record says running again, written by that process.
    let file = log.dir().join("session_meta.json");
    let rewrite = |change: &dyn Fn(&mut Value)| {
        let mut meta: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        change(&mut meta);
        std::fs::write(&file, serde_json::to_vec(&meta).unwrap()).unwrap();
        std::fs::File::open(daemon.home.path().join("logs"))
            .unwrap()
            .set_modified(std::time::SystemTime::now())
            .unwrap();
    };
    let second = spawn_writer();
    rewrite(&|meta| {
        meta["status"] = json!("running");
        meta["resumes"] = json!(1);
    });
    written_by(log.dir(), second.id());
    rewrite(&|_| {});
    until_changed(&mut stream, &[&id]).await;
    let running = listed(&id).await;
    assert_eq!(running.status, SessionStatus::Running);
    assert_eq!(daemon.host.session_counts().await.unwrap().running, 1);
    // Followed while it runs: what it uses, then its end.
    std::fs::write(&file, {
        let mut meta: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        meta["usage"]["input_tokens"] = json!(1234);
        serde_json::to_vec(&meta).unwrap()
    })
    .unwrap();
    until_changed(&mut stream, &[&id]).await;
    assert_eq!(listed(&id).await.input_tokens, 1234);
    rewrite(&|meta| meta["status"] = json!("completed"));
    end(second);
    until_changed(&mut stream, &[&id]).await;
    let after = listed(&id).await;
    assert_eq!(
        (after.status, after.input_tokens),
        (SessionStatus::Done, 1234)
    );
    assert_eq!(daemon.host.session_counts().await.unwrap().running, 0);

    // A record this process rewrites (as the daemon's own resume would) is not another's.
    rewrite(&|meta| {
        meta["status"] = json!("running");
        meta["pid"] = json!(std::process::id());
    });
    // Looked at by the time a session recorded after it is found: not told, not changed.
    let third = spawn_writer();
    let later = recorded_running_in(&daemon, "found after", third.id());
    let seen = until_changed(&mut stream, &[later.id()]).await;
    assert!(
        seen.iter().all(|e| !changed_ids(e).contains(&id)),
        "a record this process wrote is not another's resume"
    );
    assert_eq!(listed(&id).await.status, SessionStatus::Done);
    end(third);
}

/// A session a prune chose whose record a resume took meanwhile (its writer's lock held, its
/// record not rewritten yet) is kept, saying so, listed again as its record says and not told
/// pruned; the next prune, once the record is free, removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_record_a_resume_holds_is_kept_by_a_prune_and_listed_again() {
    use std::os::fd::AsRawFd;
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    daemon.host.shutdown().await.unwrap();
    daemon.host.closed().await;
    let held = recorded_ended(&daemon, "held by a resume", None, &[]);
    let free = recorded_ended(&daemon, "free", None, &[]);
    written_days_ago(held.dir(), 90);
    written_days_ago(free.dir(), 90);
    let restarted = daemon.restart();
    let lock = std::fs::File::open(held.dir().join("session.jsonl")).unwrap();
    // SAFETY: flock(2) on a descriptor this test owns touches no memory.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(locked, 0);
    let month = PruneRequest {
        older_than_secs: 30 * 86_400,
        dry_run: false,
    };
    let done = restarted.prune(month).await.unwrap();
    let removed: Vec<&str> = done.removed.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(removed, [free.id()]);
    let kept: Vec<(&str, &str)> = done
        .kept
        .iter()
        .map(|k| (k.id.as_str(), k.why.as_str()))
        .collect();
    assert_eq!(kept, [(held.id(), "it is being resumed")]);
    assert!(held.dir().join("session.jsonl").exists());
    assert_eq!(
        restarted.session(held.id()).await.unwrap().status,
        SessionStatus::Done
    );
    drop(lock);
    let done = restarted.prune(month).await.unwrap();
    let removed: Vec<&str> = done.removed.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(removed, [held.id()]);
    restarted.shutdown().await.unwrap();
    restarted.closed().await;
}

/// A session an earlier daemon recorded in `daemon`'s state root: `task`, under `parent`, its
/// log `events` and then its `session_ended`.
fn recorded_ended(
    daemon: &Daemon,
    task: &str,
    parent: Option<&str>,
    events: &[AppEvent],
) -> Recorded {
    let mut meta = SessionMeta::new(daemon.project.path(), task, "fake-model", "openai");
    meta.parent = parent.map(str::to_owned);
    let log = SessionLog::create(daemon.home.path(), meta).unwrap();
    for event in events {
        log.record_event(event).unwrap();
    }
    log.record_event(&AppEvent::SessionEnded {
        session_id: log.id().into(),
        status: EndStatus::Completed,
        reason: "done".into(),
    })
    .unwrap();
    Recorded {
        id: log.id().to_owned(),
        dir: log.dir().to_path_buf(),
    }
}

/// A session's record a test wrote, its writer gone (as an earlier daemon's is).
struct Recorded {
    id: String,
    dir: std::path::PathBuf,
}

impl Recorded {
    fn id(&self) -> &str {
        &self.id
    }

    fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}

/// Options whose operator's log is kept, and what it was told.
fn telling_options() -> (
    SupervisorOptions,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let lines = std::sync::Arc::clone(&told);
    let options = SupervisorOptions {
        log: intendant_daemon::log::DaemonLog::new(move |line| {
            lines.lock().unwrap().push(line.to_owned())
        }),
        ..SupervisorOptions::default()
    };
    (options, told)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_log_cannot_be_read_back_is_listed_as_held_and_the_operator_told() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    let record = |task: &str, answer: &str| {
        let answer = AppEvent::Done {
            message: answer.into(),
        };
        recorded_ended(&daemon, task, None, &[answer])
    };
    let long_task = format!("long {}", "t".repeat(6_000));
    let unread = record("never read", "lost");
    let held = record(&long_task, "kept");
    let (options, told) = telling_options();
    // A log that is not a file any more, where its answer would be read back from.
    let unreadable = |log: &Recorded| {
        let events = log.dir().join("session.jsonl");
        std::fs::remove_file(&events).unwrap();
        std::fs::create_dir(&events).unwrap();
    };
    unreadable(&unread);
    let restarted = supervisor(&daemon.home, &daemon.server, options, 4);
    let listed = restarted.session(unread.id()).await.unwrap();
    assert_eq!(listed.final_text, None);
    assert_eq!(listed.status, SessionStatus::Done);
    // Read back whole first, then held cut; its log gone, it is shown as held.
    assert_eq!(restarted.session(held.id()).await.unwrap().task, long_task);
    unreadable(&held);
    // Its row (the dashboard's `?ids=`) is read from memory: its records are not asked.
    let row = restarted.session_listed(held.id()).await.unwrap();
    assert!(row.task.ends_with('…') && long_task.starts_with(row.task.trim_end_matches('…')));
    assert_eq!(row.final_text.as_deref(), Some("kept"));
    assert_eq!(told.lock().unwrap().len(), 1, "{told:#?}");
    let cut = restarted.session(held.id()).await.unwrap();
    assert!(cut.task.ends_with('…') && long_task.starts_with(cut.task.trim_end_matches('…')));
    assert_eq!(cut.final_text.as_deref(), Some("kept"));
    let told = told.lock().unwrap().clone();
    assert_eq!(told.len(), 2, "{told:#?}");
    assert!(
        told[0].contains(unread.id()) && told[0].contains("could not be read back"),
        "{told:#?}"
    );
    assert!(
        told[1].contains(held.id()) && told[1].contains("whole texts could not be read back"),
        "{told:#?}"
    );
    restarted.shutdown().await.unwrap();
    restarted.closed().await;
}

/// Stops sessions `ids` and reads `stream` until each has ended.
async fn stop_all(daemon: &Daemon, stream: &mut EventStream, ids: &[String]) {
    for id in ids {
        daemon.host.stop(id).await.unwrap();
    }
    let mut ended = 0;
    until(stream, |e| {
        ended += usize::from(matches!(e.event, AppEvent::SessionEnded { .. }));
        ended == ids.len()
    })
    .await;
}

/// What ended sessions freed is given back to the system once their ends settle, one release for
/// a burst of ends (the soak measured RSS growing with every session that came and went).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_that_end_together_have_their_freed_memory_given_back_once() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let ids = [
        daemon.start("one").await,
        daemon.start("two").await,
        daemon.start("three").await,
    ];
    assert_eq!(daemon.host.memory_releases(), 0, "nothing ended yet");
    // Each says `done` and waits for a follow-up; a stop ends it.
    let mut idle = 0;
    until(&mut stream, |e| {
        idle += usize::from(is_round_end(e));
        idle == ids.len()
    })
    .await;
    stop_all(&daemon, &mut stream, &ids).await;
    let deadline = std::time::Instant::now() + WAIT_LIMIT;
    while daemon.host.load() != Load::default() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        daemon.host.load(),
        Load::default(),
        "every session task ended"
    );
    while daemon.host.memory_releases() == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Three ends within a second share one release (`memory`'s unit test pins that down; a
    // loaded machine may spread these ends wider).
    let released = daemon.host.memory_releases();
    assert!((1..=3).contains(&released), "{released} releases");
    tokio::time::sleep(intendant_daemon::memory::RELEASE_DELAY * 2).await;
    assert_eq!(
        daemon.host.memory_releases(),
        released,
        "no release without an end"
    );
}

/// Nothing a session started outlives it: not the timer of each idle spell (every round that
/// ends idle arms one, for the whole `[daemon] idle_timeout`), nor the wait of a stop's grace
/// (the soak found both alive long after their sessions, a few hundred bytes each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_session_leaves_no_task_behind_nor_its_idle_timers() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let ids = [daemon.start("one").await, daemon.start("two").await];
    let rounds_each = 3;
    for round in 0..rounds_each {
        // Each says `done` and waits for a follow-up, its idle timer armed.
        let mut idle = 0;
        until(&mut stream, |e| {
            idle += usize::from(is_round_end(e));
            idle == ids.len()
        })
        .await;
        if round + 1 == rounds_each {
            break;
        }
        for id in &ids {
            let follow_up = SessionIntent {
                session_id: id.clone(),
                msg: ControlMsg::FollowUp {
                    text: format!("round {round}"),
                },
            };
            daemon.host.send(follow_up).await.unwrap();
        }
    }
    stop_all(&daemon, &mut stream, &ids).await;
    // Shorter than the stop grace (10 s) and than the idle timeout: a timer of either would
    // still be alive. The release of freed memory (a second's wait) ends well within it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while metrics.num_alive_tasks() > before && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        metrics.num_alive_tasks() <= before,
        "{} tasks alive after the sessions ended, {before} before they started",
        metrics.num_alive_tasks()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_puts_the_files_settings_in_force_and_lowers_sessions_above_a_lowered_ceiling() {
    let daemon = Daemon::new(json!([text_turn("ok")]), SupervisorOptions::default(), 2).await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let id = daemon
        .host
        .start(StartRequest {
            autonomy: Some(AutonomyLevel::Full),
            ..daemon.request("wait here")
        })
        .await
        .unwrap()
        .id;
    until(&mut stream, |e| e.session_id == id && is_round_end(e)).await;
    let reload = SettingsChange {
        reload: true,
        ..SettingsChange::default()
    };
    // A file that does not read changes nothing, and says what is wrong.
    let file = daemon.home.path().join("intendant.toml");
    std::fs::write(&file, "[daemon]\nmax_runing = 5\n").unwrap();
    let e = daemon
        .host
        .update_settings(reload.clone())
        .await
        .unwrap_err();
    assert_eq!(e.code, HostErrorCode::InvalidRequest);
    assert!(e.message.contains("max_runing"), "{e}");
    assert_eq!(daemon.host.settings().await.unwrap(), settings(2));
    // Nor does a reload that also asks for a change.
    let mixed = SettingsChange {
        max_running: Some(4),
        ..reload.clone()
    };
    let e = daemon.host.update_settings(mixed).await.unwrap_err();
    assert_eq!(e.code, HostErrorCode::InvalidRequest, "{e}");
    // The owner's edit: every key a running daemon can change is in force at once.
    std::fs::write(
        &file,
        "[daemon]\nmax_running = 3\nmax_autonomy = \"high\"\ndefault_autonomy = \"low\"\n\
         default_backend = \"codex\"\n",
    )
    .unwrap();
    let now = daemon.host.update_settings(reload).await.unwrap();
    assert_eq!(
        now,
        Settings {
            default_autonomy: AutonomyLevel::Low,
            default_backend: Backend::named("codex"),
            max_running: 3,
            max_autonomy: AutonomyLevel::High,
        }
    );
    assert_eq!(daemon.host.settings().await.unwrap(), now);
    // The session at `full` is held to the lowered ceiling, and told so on its stream.
    let told = until(&mut stream, |e| {
        e.session_id == id && matches!(e.event, AppEvent::AutonomyChanged { .. })
    })
    .await;
    assert!(matches!(
        told.last().unwrap().event,
        AppEvent::AutonomyChanged {
            level: AutonomyLevel::High,
            ..
        }
    ));
    assert_eq!(
        daemon.host.session(&id).await.unwrap().autonomy,
        AutonomyLevel::High
    );
    let e = daemon
        .host
        .set_autonomy(Some(&id), AutonomyLevel::Full)
        .await
        .unwrap_err();
    assert_eq!(e.code, HostErrorCode::Forbidden, "{e}");
}

/// Makes the record in `record` (a session directory) say it was last written `days` ago.
fn written_days_ago(record: &std::path::Path, days: u64) {
    let path = record.join("session_meta.json");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let then = std::time::SystemTime::now() - Duration::from_secs(days * 86_400);
    meta["updated"] = intendant_protocol::utc::UtcTime::from_system(then)
        .rfc3339()
        .into();
    std::fs::write(&path, serde_json::to_vec(&meta).unwrap()).unwrap();
}

/// Waits until session `id` is done ending (its record written last, its task gone): until then
/// a prune keeps it, as running.
async fn done_ending(host: &Supervisor, id: &str) {
    let preview = PruneRequest {
        older_than_secs: 0,
        dry_run: true,
    };
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    while !host
        .prune(preview)
        .await
        .unwrap()
        .removed
        .iter()
        .any(|s| s.id == id)
    {
        assert!(tokio::time::Instant::now() < deadline, "{id} never ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_removes_ended_sessions_records_keeps_what_runs_and_numbers_go_on() {
    let (options, told) = telling_options();
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    // An old session from an earlier daemon, its sub-agent young and still recorded: both stay.
    let record = |task: &str, parent: Option<&str>, days: u64| {
        let log = recorded_ended(&daemon, task, parent, &[]);
        written_days_ago(log.dir(), days);
        log
    };
    let old = record("old", None, 90);
    let old_parent = record("old parent", None, 90);
    let young_child = record("young child", Some(old_parent.id()), 1);
    let restarted = supervisor(&daemon.home, &daemon.server, options, 4);
    let mut stream = restarted.subscribe(None, None).await.unwrap();
    let start = |task: &str| {
        let mut request = daemon.request(task);
        request.task = task.into();
        restarted.start(request)
    };
    let ended = start("ends now").await.unwrap().id;
    until(&mut stream, |e| e.session_id == ended && is_round_end(e)).await;
    restarted.stop(&ended).await.unwrap();
    until(&mut stream, |e| {
        e.session_id == ended && matches!(e.event, AppEvent::SessionEnded { .. })
    })
    .await;
    done_ending(&restarted, &ended).await;
    let idle = start("waits for a follow-up").await.unwrap().id;
    until(&mut stream, |e| e.session_id == idle && is_round_end(e)).await;
    let ids = |report: &intendant_protocol::daemon::PruneReport| {
        let mut ids: Vec<String> = report.removed.iter().map(|s| s.id.clone()).collect();
        ids.sort();
        ids
    };
    let listed = |all: Vec<intendant_protocol::daemon::SessionSummary>| {
        let mut ids: Vec<String> = all.into_iter().map(|s| s.id).collect();
        ids.sort();
        ids
    };
    let everything = listed(restarted.sessions().await.unwrap());
    assert_eq!(everything.len(), 5);

    // A scheduled session made 60 days ago for the day after, never approved: missed, and
    // pruned with the sessions of its time.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let ledger = intendant_store::Store::open(daemon.home.path()).unwrap();
    let old_schedule = intendant_store::agenda::add_schedule(
        &ledger,
        "long ago",
        now - 59 * 86_400,
        r#"{"task":"t","project":"/p"}"#,
        now - 60 * 86_400,
    )
    .unwrap();
    intendant_store::agenda::claim_due(&ledger, now, 60, "test").unwrap();

    // Older than 30 days: the old one alone (the old parent stays with its young child).
    let month = PruneRequest {
        older_than_secs: 30 * 86_400,
        dry_run: true,
    };
    let preview = restarted.prune(month).await.unwrap();
    assert!(preview.dry_run);
    assert_eq!(ids(&preview), [old.id().to_owned()]);
    let why: Vec<(&str, &str)> = preview
        .kept
        .iter()
        .map(|k| (k.id.as_str(), k.why.as_str()))
        .collect();
    assert_eq!(
        why,
        [(
            old_parent.id(),
            format!("its sub-agent {} is kept", young_child.id()).as_str()
        )]
    );
    assert_eq!(listed(restarted.sessions().await.unwrap()), everything);
    assert!(old.dir().exists(), "a dry run removes nothing");
    assert_eq!(preview.schedules, 1, "{preview:?}");
    assert!(intendant_store::agenda::get(&ledger, old_schedule.id).is_ok());

    // Everything that ended: what the daemon runs (the idle one) stays, saying so.
    let all = PruneRequest {
        older_than_secs: 0,
        dry_run: false,
    };
    let done = restarted.prune(all).await.unwrap();
    let mut expected = vec![
        old.id().to_owned(),
        old_parent.id().to_owned(),
        young_child.id().to_owned(),
        ended.clone(),
    ];
    expected.sort();
    assert_eq!(ids(&done), expected, "kept: {:?}", done.kept);
    // Subscribers are told what went (the dry run told nothing), under the daemon's own id.
    let heard = until(&mut stream, |e| {
        matches!(e.event, AppEvent::SessionsPruned { .. })
    })
    .await;
    let heard = heard.last().unwrap();
    assert_eq!(heard.session_id, DAEMON_SESSION);
    let AppEvent::SessionsPruned { ids: mut pruned } = heard.event.clone() else {
        unreachable!()
    };
    pruned.sort();
    assert_eq!(pruned, expected);
    assert!(done.bytes > 0);
    assert_eq!((done.schedules, &done.schedules_error), (1, &None));
    assert!(intendant_store::agenda::get(&ledger, old_schedule.id).is_err());
    assert_eq!(done.kept.len(), 1, "{:?}", done.kept);
    assert_eq!(done.kept[0].id, idle);
    assert_eq!(done.kept[0].why, "it is running");
    assert_eq!(listed(restarted.sessions().await.unwrap()), [idle.as_str()]);
    let gone = restarted.session(&ended).await.unwrap_err();
    assert_eq!(gone.code, HostErrorCode::UnknownSession);
    for id in &expected {
        assert!(!daemon.home.path().join("logs").join(id).exists(), "{id}");
        assert!(
            !daemon.home.path().join("artifacts").join(id).exists(),
            "{id}"
        );
    }
    assert!(
        told.lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("pruned 4 session(s)")
                && l.ends_with("and 1 ended scheduled session(s) of the agenda")),
        "{:?}",
        told.lock().unwrap()
    );
    // A resume of a pruned session is refused by name.
    let mut resume = daemon.request("again");
    resume.resume = Some(ended.clone());
    assert!(restarted.start(resume).await.is_err());

    // The idle one ends and goes too: no log holds a seq any more, and a restart numbers on.
    restarted.stop(&idle).await.unwrap();
    until(&mut stream, |e| {
        e.session_id == idle && matches!(e.event, AppEvent::SessionEnded { .. })
    })
    .await;
    done_ending(&restarted, &idle).await;
    let next = restarted.next_seq();
    let last = restarted.prune(all).await.unwrap();
    assert_eq!(ids(&last), [idle.as_str()]);
    assert!(restarted.sessions().await.unwrap().is_empty());
    restarted.shutdown().await.unwrap();
    restarted.closed().await;
    let again = daemon.restart();
    assert!(again.sessions().await.unwrap().is_empty());
    assert!(
        again.next_seq() >= next,
        "numbering went back: {} after {next}",
        again.next_seq()
    );
    again.shutdown().await.unwrap();
    again.closed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_sessions_are_a_page_of_their_own() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    let mut recorded: Vec<String> = (0..5)
        .map(|i| {
            let meta = SessionMeta::new(
                daemon.project.path(),
                &format!("t{i}"),
                "fake-model",
                "openai",
            );
            SessionLog::create(daemon.home.path(), meta)
                .unwrap()
                .id()
                .to_owned()
        })
        .collect();
    recorded.sort();
    let host = daemon.restart();
    let ids = |page: Vec<intendant_protocol::daemon::SessionSummary>| {
        page.into_iter().map(|s| s.id).collect::<Vec<_>>()
    };
    let newest = host.sessions_page(&SessionsPage::newest(2)).await.unwrap();
    assert_eq!(ids(newest), recorded[3..]);
    let first = host
        .sessions_page(&SessionsPage {
            limit: Some(2),
            ..SessionsPage::ALL
        })
        .await
        .unwrap();
    assert_eq!(ids(first), recorded[..2]);
    let newest_after = SessionsPage {
        after: Some(recorded[2].clone()),
        limit: Some(9),
        last: true,
        ..SessionsPage::ALL
    };
    assert_eq!(
        ids(host.sessions_page(&newest_after).await.unwrap()),
        recorded[3..]
    );
    assert_eq!(
        ids(host.sessions_page(&SessionsPage::newest(9)).await.unwrap()),
        recorded
    );
    host.shutdown().await.unwrap();
    host.closed().await;
}

/// A page of one status, or before a session, is read under the lock as the listing
/// filtered would give it, and counted the same (MCP's `list_sessions` reads only its page and
/// counts what is older).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_one_status_before_a_session_is_the_listing_filtered_and_counted_alike() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    for n in 0..SessionsPage::SIZE + 20 {
        let meta = SessionMeta::new(
            daemon.project.path(),
            &format!("t{n}"),
            "fake-model",
            "openai",
        );
        let log = SessionLog::create(daemon.home.path(), meta).unwrap();
        let status = if n % 3 == 0 {
            EndStatus::Failed
        } else {
            EndStatus::Completed
        };
        log.record_event(&AppEvent::SessionEnded {
            session_id: log.id().into(),
            status,
            reason: "ended".into(),
        })
        .unwrap();
    }
    let host = daemon.restart();
    let listed = host.sessions().await.unwrap();
    let ids = |sessions: &[intendant_protocol::daemon::SessionSummary]| -> Vec<String> {
        sessions.iter().map(|s| s.id.clone()).collect()
    };
    let failed: Vec<String> = ids(&listed
        .iter()
        .filter(|s| s.status == SessionStatus::Failed)
        .cloned()
        .collect::<Vec<_>>());
    assert_eq!(failed.len(), (SessionsPage::SIZE as usize + 20).div_ceil(3));
    let of = |status: Option<SessionStatus>, before: Option<&String>, limit: u32| SessionsPage {
        status,
        before: before.cloned(),
        ..SessionsPage::newest(limit)
    };
    let page = |p: SessionsPage| {
        let host = host.clone();
        async move { ids(&host.sessions_page(&p).await.unwrap()) }
    };
    let count = |p: SessionsPage| {
        let host = host.clone();
        async move { host.sessions_count(&p).await.unwrap() }
    };
    let newest_failed = page(of(Some(SessionStatus::Failed), None, 5)).await;
    assert_eq!(newest_failed, failed[failed.len() - 5..]);
    // Read back from the oldest of that page: the five before it, and the rest counted.
    let before = &newest_failed[0];
    let older = page(of(Some(SessionStatus::Failed), Some(before), 5)).await;
    assert_eq!(older, failed[failed.len() - 10..failed.len() - 5]);
    assert_eq!(
        count(of(Some(SessionStatus::Failed), Some(before), 5)).await,
        failed.len() as u64 - 5
    );
    assert_eq!(
        count(SessionsPage::ALL).await,
        listed.len() as u64,
        "the whole listing counted"
    );
    let all_before = listed.iter().position(|s| &s.id == before).unwrap();
    assert_eq!(count(of(None, Some(before), 1)).await, all_before as u64);
    assert_eq!(
        page(of(None, Some(before), 3)).await,
        ids(&listed[all_before - 3..all_before])
    );
    assert!(
        page(of(Some(SessionStatus::Running), None, 5))
            .await
            .is_empty()
    );
    assert_eq!(count(of(Some(SessionStatus::Running), None, 5)).await, 0);
    // Ends that cross or meet give nothing, never a panic of the map they are read from.
    for (after, before) in [(&listed[9], &listed[3]), (&listed[4], &listed[4])] {
        let crossed = SessionsPage {
            after: Some(after.id.clone()),
            before: Some(before.id.clone()),
            ..SessionsPage::ALL
        };
        assert!(page(crossed.clone()).await.is_empty());
        assert_eq!(count(crossed).await, 0);
    }
    let between = SessionsPage {
        after: Some(listed[3].id.clone()),
        before: Some(listed[9].id.clone()),
        ..SessionsPage::ALL
    };
    assert_eq!(page(between.clone()).await, ids(&listed[4..9]));
    assert_eq!(count(between).await, 5);
    host.shutdown().await.unwrap();
    host.closed().await;
}

#[tokio::test]
async fn a_parents_children_are_found_among_more_sessions_than_a_page() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    let parent = recorded_ended(&daemon, "parent", None, &[]);
    let mut children = Vec::new();
    for n in 0..SessionsPage::SIZE + 10 {
        let child = [0, 150, SessionsPage::SIZE + 5].contains(&n);
        let log = recorded_ended(
            &daemon,
            &format!("session {n}"),
            child.then_some(parent.id()),
            &[],
        );
        if child {
            children.push(log.id().to_owned());
        }
    }
    // In the listing's order: ids made in one second sort by their random part.
    children.sort();
    let restarted = supervisor(
        &daemon.home,
        &daemon.server,
        SupervisorOptions::default(),
        4,
    );
    let ids = |sessions: Vec<intendant_protocol::daemon::SessionSummary>| -> Vec<String> {
        sessions.into_iter().map(|s| s.id).collect()
    };
    assert_eq!(
        ids(restarted.children(parent.id()).await.unwrap()),
        children
    );
    // What the listing gives, filtered: the same, in the same order.
    let listed: Vec<String> = restarted
        .sessions()
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.parent.as_deref() == Some(parent.id()))
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, children);
    assert!(restarted.children(&children[0]).await.unwrap().is_empty());
    assert!(
        restarted
            .children("no such session")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_a_prune_could_not_remove_is_listed_again() {
    let daemon = Daemon::new(json!([]), SupervisorOptions::default(), 4).await;
    let mut stream = daemon.host.subscribe(None, None).await.unwrap();
    let id = daemon.start("ends").await;
    until(&mut stream, |e| e.session_id == id && is_round_end(e)).await;
    daemon.host.stop(&id).await.unwrap();
    done_ending(&daemon.host, &id).await;
    // The place of the event-number floor taken: its log is the only record of its numbers.
    let floor = daemon.home.path().join("logs").join("seq_floor");
    std::fs::create_dir_all(floor.join("x")).unwrap();
    let all = PruneRequest {
        older_than_secs: 0,
        dry_run: false,
    };
    let report = daemon.host.prune(all).await.unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    assert_eq!(report.kept.len(), 1);
    assert!(
        report.kept[0]
            .why
            .starts_with("its event numbers could not be kept"),
        "{report:?}"
    );
    assert_eq!(daemon.status(&id).await, SessionStatus::Interrupted);
    assert_eq!(daemon.host.sessions().await.unwrap().len(), 1);
    std::fs::remove_dir_all(&floor).unwrap();
    let report = daemon.host.prune(all).await.unwrap();
    assert_eq!(report.removed.len(), 1);
    assert!(daemon.host.sessions().await.unwrap().is_empty());
}
