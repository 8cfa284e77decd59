//! A fleet member's side of placement (`docs/fleet.md`): while the daemon has a free slot it
//! takes a placed session from the fleet's work queue, clones the request's repository beneath
//! its state root (`fleet/work/<placement>`), starts the session there through the same
//! `SessionHost::start` as a local one (the same trust and autonomy ceiling), and when the
//! session ends (or idles, its round done) pushes its `HEAD` back as `intendant/<session id>`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use intendant_core::child::own::running_own;
use intendant_core::host::SessionHost;
use intendant_daemon::supervisor::Supervisor;
use intendant_fleet::Member;
use intendant_fleet::mirror::RecordOrigin;
use intendant_protocol::daemon::SessionStatus;
use intendant_protocol::fleet::{FleetStartRequest, PlacementState};
use tokio::sync::Notify;

/// How often a placed session's status is looked at, until it ends or idles.
const POLL: Duration = Duration::from_millis(500);

/// Takes placed sessions while `supervisor` has a free slot, for as long as the daemon runs.
///
/// It does not poll: it waits for a signal that a request it may take was queued, a slot of
/// its own freeing while requests may wait, or [`intendant_fleet::LOOK_EVERY`] (what no signal
/// announced), and then takes one request after another while a slot is free.
#[allow(clippy::print_stderr)]
pub(crate) async fn take_placements(
    member: Arc<Member>,
    host: Arc<dyn SessionHost>,
    supervisor: Supervisor,
    home: PathBuf,
) {
    // Taken and still cloning: they hold a slot before their session exists.
    let preparing = Arc::new(AtomicU32::new(0));
    // One of them started, or failed: its slot is the session's now, or free.
    let prepared = Arc::new(Notify::new());
    let mut signals = match member.placement_signals().await {
        Ok(signals) => Some(signals),
        Err(e) => {
            eprintln!(
                "intendant serve: placed sessions are looked for every {} s alone: {e}",
                intendant_fleet::LOOK_EVERY.as_secs()
            );
            None
        }
    };
    // Whether requests may wait for this member: at first, after a signal, and after taking
    // stopped at a full house (not after a look that found the queue empty).
    let mut may_wait = true;
    let mut next_look = tokio::time::Instant::now();
    loop {
        // Made before the look at the load, so no change after it is missed.
        let slots = supervisor.slots_changed();
        let started_or_failed = prepared.notified();
        let free = has_free_slot(&supervisor, &preparing);
        if free && (may_wait || tokio::time::Instant::now() >= next_look) {
            may_wait =
                take_while_free(&member, &host, &supervisor, &home, &preparing, &prepared).await;
            next_look = tokio::time::Instant::now() + intendant_fleet::LOOK_EVERY;
            continue;
        }
        let signal = async {
            match signals.as_mut() {
                Some(signals) => signals.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = slots => {}
            () = started_or_failed => {}
            heard = signal => {
                if heard {
                    may_wait = true;
                } else {
                    signals = None;
                }
            }
            () = tokio::time::sleep_until(next_look) => {}
        }
    }
}

/// Whether `supervisor` has a slot free of running, queued and still-cloning sessions.
fn has_free_slot(supervisor: &Supervisor, preparing: &AtomicU32) -> bool {
    let load = supervisor.load();
    let busy = load.running + load.queued + preparing.load(Ordering::SeqCst);
    busy < supervisor.max_running()
}

/// Takes one request after another while a slot is free (a burst of placements is taken at
/// the server's pace), each run by a task of its own; whether it stopped at a full house
/// (requests may still wait) rather than an empty queue or an unreachable server.
async fn take_while_free(
    member: &Arc<Member>,
    host: &Arc<dyn SessionHost>,
    supervisor: &Supervisor,
    home: &Path,
    preparing: &Arc<AtomicU32>,
    prepared: &Arc<Notify>,
) -> bool {
    loop {
        if !has_free_slot(supervisor, preparing) {
            return true;
        }
        let Ok(Some(request)) = member.take().await else {
            return false;
        };
        preparing.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(run_placed(
            request,
            Arc::clone(member),
            Arc::clone(host),
            home.to_path_buf(),
            Arc::clone(preparing),
            Arc::clone(prepared),
        ));
    }
}

/// Clones, runs and pushes back one placed session. Where it stands is kept in the fleet
/// (`ctl placement ID`): taken, then started as its session or failed with the reason; what
/// fails is also said on the daemon's stderr.
#[allow(clippy::print_stderr)]
async fn run_placed(
    request: FleetStartRequest,
    member: Arc<Member>,
    host: Arc<dyn SessionHost>,
    home: PathBuf,
    preparing: Arc<AtomicU32>,
    prepared: Arc<Notify>,
) {
    let id = request.id.clone();
    let outcome = |state, session: Option<String>, reason: Option<String>| {
        let member = Arc::clone(&member);
        let request = request.clone();
        async move {
            if let Err(e) = member
                .placement_outcome(&request, state, session.as_deref(), reason.as_deref())
                .await
            {
                eprintln!("intendant serve: placed session {}: {e}", request.id);
            }
        }
    };
    // A request taken before (its acknowledgement lost to a server that died right after it)
    // is not run twice.
    if let Ok(Some(before)) = member.placement(&id).await
        && before.state != PlacementState::Pending
    {
        preparing.fetch_sub(1, Ordering::SeqCst);
        prepared.notify_waiters();
        eprintln!(
            "intendant serve: placed session {id} was taken before ({}): not run again",
            before.state.name()
        );
        return;
    }
    outcome(PlacementState::Taken, None, None).await;
    let started = start_placed(&request, &host, &home).await;
    preparing.fetch_sub(1, Ordering::SeqCst);
    prepared.notify_waiters();
    let (session, dir) = match started {
        Ok(started) => started,
        Err(e) => {
            eprintln!(
                "intendant serve: placed session {id} from {}: {e}",
                request.by
            );
            outcome(PlacementState::Failed, None, Some(e)).await;
            return;
        }
    };
    eprintln!("intendant serve: placed session {id} runs as {session}");
    outcome(PlacementState::Started, Some(session.clone()), None).await;
    let origin = RecordOrigin {
        member: member.name().to_owned(),
        repo: request.repo.clone(),
        git_ref: request.git_ref.clone(),
    };
    // The mirror publishes it, so that another member can resume the session if this one dies.
    if let Err(e) = crate::fleet_mirror::write_origin(&home, &session, &origin) {
        eprintln!("intendant serve: placed session {session}: its origin is not kept: {e}");
    }
    push_when_done(host, session, dir, request.repo, home).await;
}

/// Waits until `session` ends or idles, then pushes its clone `dir`'s `HEAD` to `repo` as
/// `intendant/<session>`; what fails is said on the daemon's stderr.
#[allow(clippy::print_stderr)]
pub(crate) async fn push_when_done(
    host: Arc<dyn SessionHost>,
    session: String,
    dir: PathBuf,
    repo: String,
    home: PathBuf,
) {
    loop {
        tokio::time::sleep(POLL).await;
        match host.session(&session).await {
            Ok(s) if !(s.status.is_finished() || s.status == SessionStatus::Idle) => {}
            _ => break,
        }
    }
    let branch = format!("intendant/{session}");
    let scratch = home.join("fleet").join("push").join(&session);
    let target = repo.clone();
    let pushed = tokio::task::spawn_blocking(move || {
        running_own(|| intendant_fleet::git::push_back(&dir, &target, &branch, &scratch))
    })
    .await;
    match pushed {
        Ok(Ok(())) => eprintln!(
            "intendant serve: placed session {session}: pushed intendant/{session} to {repo}"
        ),
        Ok(Err(e)) => eprintln!("intendant serve: placed session {session}: {e}"),
        Err(e) => eprintln!("intendant serve: placed session {session}: {e}"),
    }
}

/// Clones the request's repository beneath `home` and starts its session there: the
/// session's id and its clone.
async fn start_placed(
    request: &FleetStartRequest,
    host: &Arc<dyn SessionHost>,
    home: &Path,
) -> Result<(String, PathBuf), String> {
    let valid = !request.id.is_empty()
        && request
            .id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(format!("the placement id {:?} is not usable", request.id));
    }
    let dir = home.join("fleet").join("work").join(&request.id);
    std::fs::create_dir_all(home.join("fleet").join("work")).map_err(|e| e.to_string())?;
    let (repo, git_ref, target) = (request.repo.clone(), request.git_ref.clone(), dir.clone());
    tokio::task::spawn_blocking(move || {
        running_own(|| intendant_fleet::git::clone(&repo, git_ref.as_deref(), &target))
    })
    .await
    .map_err(|e| e.to_string())??;
    let mut start = request.start.clone();
    start.project = dir.display().to_string();
    // Nothing of another machine's paths: a placed session starts fresh.
    start.resume = None;
    start.parent = None;
    start.scenario = None;
    let summary = host.start(start).await.map_err(|e| e.to_string())?;
    Ok((summary.id, dir))
}
