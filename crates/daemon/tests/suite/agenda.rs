//! The daemon's agenda through `SessionHost`: a schedule waits in the approval queue, starts
//! its exact request once at its time (of two daemons on one state root, one starts it), is
//! `missed` when no daemon ran at its time, and reminders are events.

use std::time::Duration;

use intendant_core::host::SessionHost;
use intendant_core::session_log::read_events;
use intendant_daemon::supervisor::{SCHEDULE_GRACE_SECS, SupervisorOptions};
use intendant_protocol::agenda::{
    AGENDA_SESSION, AgendaItem, AgendaNotice, AgendaOp, AgendaState, rfc3339,
};
use intendant_protocol::daemon::{HostErrorCode, SessionIntent};
use intendant_protocol::events::{ActionCategory, AppEvent, ControlMsg};
use intendant_protocol::utc::UtcTime;
use serde_json::json;

use super::supervisor::{Daemon, until};
use super::support::text_turn;

fn now() -> i64 {
    UtcTime::now().unix_seconds()
}

async fn daemon() -> Daemon {
    Daemon::new(
        json!([text_turn("scheduled work done")]),
        SupervisorOptions::default(),
        4,
    )
    .await
}

async fn schedule(d: &Daemon, task: &str, in_secs: i64) -> AgendaItem {
    let items = d
        .host
        .agenda(AgendaOp::Schedule {
            at: rfc3339(now() + in_secs),
            request: Box::new(d.request(task)),
        })
        .await
        .unwrap();
    assert_eq!(items.len(), 1);
    items[0].clone()
}

fn answer(msg: ControlMsg) -> SessionIntent {
    SessionIntent {
        session_id: AGENDA_SESSION.to_owned(),
        msg,
    }
}

async fn entry(d: &Daemon, id: u64) -> AgendaItem {
    let all = d.host.agenda(AgendaOp::List).await.unwrap();
    all.into_iter().find(|i| i.id == id).unwrap()
}

#[tokio::test]
async fn an_approved_schedule_starts_its_exact_request_once_at_its_time() {
    let d = daemon().await;
    let mut stream = d.host.subscribe(None, None).await.unwrap();
    let item = schedule(&d, "nightly review", 60).await;
    assert_eq!(item.state, AgendaState::Pending);
    assert_eq!(item.request.as_ref(), Some(&d.request("nightly review")));
    let digest = item.digest.clone().unwrap();
    assert_eq!(digest.len(), 64);

    // It waits in the approval queue, whole, with its digest.
    let approvals = d.host.approvals().await.unwrap();
    let pending: Vec<_> = approvals
        .iter()
        .filter(|a| a.session_id == AGENDA_SESSION)
        .collect();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].id, item.id);
    assert_eq!(pending[0].category, ActionCategory::Schedule);
    assert!(pending[0].command_preview.contains("nightly review"));
    assert!(pending[0].detail.as_deref().unwrap().contains(&digest));

    // Its time has not come, and it is not approved: nothing starts.
    d.host.agenda_tick(now() + 10).await;
    assert!(d.host.sessions().await.unwrap().is_empty());

    // Only an approval or a refusal answers it.
    for msg in [
        ControlMsg::FollowUp { text: "go".into() },
        ControlMsg::Skip { id: item.id },
        ControlMsg::ApproveAll { id: item.id },
        ControlMsg::Input { text: "yes".into() },
    ] {
        let e = d.host.send(answer(msg)).await.unwrap_err();
        assert_eq!(e.code, HostErrorCode::InvalidRequest, "{e:?}");
    }
    let e = d
        .host
        .send(answer(ControlMsg::Approve { id: 999 }))
        .await
        .unwrap_err();
    assert_eq!(e.code, HostErrorCode::UnknownApproval);
    d.host
        .send(answer(ControlMsg::Approve { id: item.id }))
        .await
        .unwrap();
    let again = d
        .host
        .send(answer(ControlMsg::Deny { id: item.id }))
        .await
        .unwrap_err();
    assert_eq!(again.code, HostErrorCode::AlreadyAnswered);
    assert!(
        d.host
            .approvals()
            .await
            .unwrap()
            .iter()
            .all(|a| a.session_id != AGENDA_SESSION)
    );

    // At its time it starts, exactly that request, once.
    let at = now() + 61;
    d.host.agenda_tick(at).await;
    d.host.agenda_tick(at + 1).await;
    let sessions = d.host.sessions().await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].task, "nightly review");
    let events = until(&mut stream, |e| {
        matches!(e.event, AppEvent::Agenda { .. }) && e.session_id == AGENDA_SESSION
    })
    .await;
    let last = events.last().unwrap();
    assert_eq!(last.session_id, AGENDA_SESSION);
    // The session's own log names the agenda entry that started it, before the agenda's notice.
    let named = events
        .iter()
        .find(|e| e.session_id == sessions[0].id && matches!(e.event, AppEvent::Agenda { .. }))
        .expect("the session's stream names its agenda entry");
    let log = read_events(&d.host.log_dir(&sessions[0].id).await.unwrap()).unwrap();
    assert!(
        log.records.iter().any(|r| r.seq == Some(named.seq)),
        "in the session's log"
    );
    match &named.event {
        AppEvent::Agenda { id, detail, .. } => {
            assert_eq!(*id, item.id);
            assert!(
                detail.contains(&format!("agenda entry {}", item.id)) && detail.contains(&digest),
                "{detail}"
            );
        }
        other => panic!("{other:?}"),
    }
    match &last.event {
        AppEvent::Agenda {
            id, notice, detail, ..
        } => {
            assert_eq!((*id, *notice), (item.id, AgendaNotice::Started));
            assert!(detail.contains(&sessions[0].id), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    let done = entry(&d, item.id).await;
    assert_eq!(done.state, AgendaState::Started);
    assert_eq!(done.session_id.as_deref(), Some(sessions[0].id.as_str()));
}

#[tokio::test]
async fn a_schedule_made_or_answered_anywhere_is_told_to_the_queues_followers() {
    let d = daemon().await;
    let mut stream = d.host.subscribe(None, None).await.unwrap();
    // What the queue's followers hear: (id, "asked") or (id, verdict), under `agenda`.
    let mut heard = Vec::new();
    let hear = async |stream: &mut intendant_core::host::EventStream, id: u64| {
        let got = until(stream, |e| match &e.event {
            AppEvent::ApprovalRequired { id: i, .. } | AppEvent::ApprovalResolved { id: i, .. } => {
                *i == id
            }
            _ => false,
        })
        .await;
        let env = got.last().unwrap();
        assert_eq!(env.session_id, AGENDA_SESSION);
        match &env.event {
            AppEvent::ApprovalRequired {
                category,
                command_preview,
                ..
            } => {
                assert_eq!(*category, ActionCategory::Schedule);
                assert!(
                    command_preview.contains("start a session"),
                    "{command_preview}"
                );
                (id, "asked".to_owned())
            }
            AppEvent::ApprovalResolved { verdict, .. } => (id, verdict.to_string()),
            _ => unreachable!(),
        }
    };
    let rejected = schedule(&d, "rejected", 600).await.id;
    heard.push(hear(&mut stream, rejected).await);
    d.host
        .send(answer(ControlMsg::Deny { id: rejected }))
        .await
        .unwrap();
    heard.push(hear(&mut stream, rejected).await);
    let approved = schedule(&d, "approved", 600).await.id;
    heard.push(hear(&mut stream, approved).await);
    d.host
        .agenda(AgendaOp::Approve { id: approved })
        .await
        .unwrap();
    heard.push(hear(&mut stream, approved).await);
    // Cancelled while it waited: it leaves the queue; cancelled once approved: it was not there.
    let cancelled = schedule(&d, "cancelled", 600).await.id;
    heard.push(hear(&mut stream, cancelled).await);
    d.host
        .agenda(AgendaOp::Done { id: cancelled })
        .await
        .unwrap();
    heard.push(hear(&mut stream, cancelled).await);
    d.host
        .agenda(AgendaOp::Done { id: approved })
        .await
        .unwrap();
    let last = schedule(&d, "last", 600).await.id;
    let tail = until(
        &mut stream,
        |e| matches!(e.event, AppEvent::ApprovalRequired { id, .. } if id == last),
    )
    .await;
    assert!(
        !tail
            .iter()
            .any(|e| matches!(e.event, AppEvent::ApprovalResolved { id, .. } if id == approved)),
        "an approved schedule cancelled was in no queue: {tail:?}"
    );
    // One whose time came before its owner answered leaves the queue too (missed).
    let missed = schedule(&d, "missed", 5).await.id;
    heard.push(hear(&mut stream, missed).await);
    d.host.agenda_tick(now() + 10).await;
    heard.push(hear(&mut stream, missed).await);
    until(&mut stream, |e| {
        matches!(e.event, AppEvent::Agenda { notice: AgendaNotice::Missed, id, .. } if id == missed)
    })
    .await;
    let said = |id: u64, what: &str| (id, what.to_owned());
    assert_eq!(
        heard,
        [
            said(rejected, "asked"),
            said(rejected, "deny"),
            said(approved, "asked"),
            said(approved, "approve"),
            said(cancelled, "asked"),
            said(cancelled, "deny"),
            said(missed, "asked"),
            said(missed, "deny"),
        ]
    );
    // An item is no approval: adding one tells nothing.
    let item = d
        .host
        .agenda(AgendaOp::Add {
            text: "an item".into(),
            remind_at: None,
        })
        .await
        .unwrap()[0]
        .id;
    d.host.agenda(AgendaOp::Done { id: item }).await.unwrap();
    let end = schedule(&d, "end", 600).await.id;
    let tail = until(
        &mut stream,
        |e| matches!(e.event, AppEvent::ApprovalRequired { id, .. } if id == end),
    )
    .await;
    assert_eq!(tail.len(), 1, "{tail:?}");
}

#[tokio::test]
async fn two_daemons_on_one_state_root_start_a_due_schedule_once() {
    let d = daemon().await;
    let other = d.restart();
    for round in 0..3 {
        let item = schedule(&d, &format!("race {round}"), 60).await;
        d.host
            .agenda(AgendaOp::Approve { id: item.id })
            .await
            .unwrap();
        let at = now() + 61;
        tokio::join!(d.host.agenda_tick(at), other.agenda_tick(at));
        let started =
            d.host.sessions().await.unwrap().len() + other.sessions().await.unwrap().len();
        assert_eq!(started, round + 1, "round {round}: one start per schedule");
        assert_eq!(entry(&d, item.id).await.state, AgendaState::Started);
    }
}

#[tokio::test]
async fn a_schedule_whose_time_passed_with_no_daemon_is_missed_and_never_run() {
    let d = daemon().await;
    let mut stream = d.host.subscribe(None, None).await.unwrap();
    let approved = schedule(&d, "while you were out", 60).await;
    d.host
        .agenda(AgendaOp::Approve { id: approved.id })
        .await
        .unwrap();
    let unapproved = schedule(&d, "never approved", 60).await;
    // The daemon looks again long after (it was down at the time).
    let later = now() + 60 + SCHEDULE_GRACE_SECS + 30;
    d.host.agenda_tick(later).await;
    d.host.agenda_tick(later + 3600).await;
    assert!(d.host.sessions().await.unwrap().is_empty());
    for id in [approved.id, unapproved.id] {
        let e = entry(&d, id).await;
        assert_eq!(e.state, AgendaState::Missed, "{e:?}");
        assert!(e.note.is_some());
    }
    let events = until(
        &mut stream,
        |e| matches!(e.event, AppEvent::Agenda { id, .. } if id == unapproved.id),
    )
    .await;
    let missed = events
        .iter()
        .filter(|e| {
            matches!(
                e.event,
                AppEvent::Agenda {
                    notice: AgendaNotice::Missed,
                    ..
                }
            )
        })
        .count();
    assert_eq!(missed, 2);
    // A missed one cannot be approved into running later.
    let e = d
        .host
        .agenda(AgendaOp::Approve { id: unapproved.id })
        .await
        .unwrap_err();
    assert_eq!(e.code, HostErrorCode::InvalidRequest);
}

#[tokio::test]
async fn a_schedule_in_the_past_or_with_a_bad_request_is_refused_and_nothing_is_kept() {
    let d = daemon().await;
    let e = d
        .host
        .agenda(AgendaOp::Schedule {
            at: rfc3339(now() - 10),
            request: Box::new(d.request("too late")),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, HostErrorCode::InvalidRequest);
    assert!(e.message.contains("in the past"), "{e:?}");
    let e = d
        .host
        .agenda(AgendaOp::Schedule {
            at: "2026-12-03T09:00:00 Mars/Olympus_Mons".into(),
            request: Box::new(d.request("zoned")),
        })
        .await
        .unwrap_err();
    assert!(e.message.contains("unknown timezone"), "{e:?}");
    let mut child = d.request("child");
    child.parent = Some("someone".into());
    let e = d
        .host
        .agenda(AgendaOp::Schedule {
            at: rfc3339(now() + 60),
            request: Box::new(child),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, HostErrorCode::InvalidRequest);
    assert!(d.host.agenda(AgendaOp::List).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_due_reminder_is_an_agenda_event_from_the_daemons_timer() {
    let d = daemon().await;
    let mut stream = d.host.subscribe(None, None).await.unwrap();
    let items = d
        .host
        .agenda(AgendaOp::Add {
            text: "call the vendor".into(),
            // Two whole seconds on: one could be the next second's start, past by the time the
            // request is read on a busy machine ("the time is 0 s in the past").
            remind_at: Some(rfc3339(now() + 2)),
        })
        .await
        .unwrap();
    let timer = d.host.start_agenda();
    let events = until(&mut stream, |e| matches!(e.event, AppEvent::Agenda { .. })).await;
    match &events.last().unwrap().event {
        AppEvent::Agenda {
            id, notice, text, ..
        } => {
            assert_eq!((*id, *notice), (items[0].id, AgendaNotice::Reminder));
            assert_eq!(text, "call the vendor");
        }
        other => panic!("{other:?}"),
    }
    timer.abort();
    // Done is done; snoozing a done item is refused.
    d.host
        .agenda(AgendaOp::Done { id: items[0].id })
        .await
        .unwrap();
    let e = d
        .host
        .agenda(AgendaOp::Snooze {
            id: items[0].id,
            until: rfc3339(now() + 60),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, HostErrorCode::InvalidRequest);
}

#[tokio::test]
async fn a_locked_database_is_a_busy_error_and_sessions_go_on() {
    let d = daemon().await;
    let store = intendant_store::Store::open(d.home.path()).unwrap();
    let (held, release) = std::sync::mpsc::channel::<()>();
    let (locked, is_locked) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        store
            .write(|_tx| {
                locked.send(()).unwrap();
                let _ = release.recv_timeout(Duration::from_secs(30));
                Ok(())
            })
            .unwrap();
    });
    is_locked.recv().unwrap();
    let e = d
        .host
        .agenda(AgendaOp::Add {
            text: "x".into(),
            remind_at: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, HostErrorCode::Busy);
    assert!(e.message.contains("locked by another process"), "{e:?}");
    // A session starts and runs meanwhile.
    let id = d.host.start(d.request("unaffected")).await.unwrap().id;
    assert_eq!(d.host.session(&id).await.unwrap().task, "unaffected");
    held.send(()).unwrap();
    holder.join().unwrap();
    d.host
        .agenda(AgendaOp::Add {
            text: "x".into(),
            remind_at: None,
        })
        .await
        .unwrap();
}
