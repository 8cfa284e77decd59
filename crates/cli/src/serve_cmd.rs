//! `intendant serve`: the daemon of this state root in the foreground: the session supervisor
//! behind the control socket.
//!
//! One shutdown path: SIGINT, SIGTERM and `intendant ctl shutdown` all end in
//! `SessionHost::shutdown` (every session stopped through the one cancellation path), and the
//! process exits once the supervisor says every session task has ended. A second signal while
//! it drains exits at once.
//!
//! Exit status: 0 after a shutdown; 1 the daemon could not start; 2 another daemon serves this
//! state root (its pid is named), something else listens on its socket, or the state root's
//! `intendant.toml` has an unknown table or key or an invalid value (named).

use std::process::ExitCode;
use std::sync::Arc;

use intendant_core::host::SessionHost;
use intendant_core::session_log::intendant_home;
use intendant_daemon::control_plane::{self, ClientLimits};
use intendant_daemon::supervisor::Supervisor;
use intendant_fleet::route::Surface;
use intendant_fleet::{FleetConfig, FleetSettings, LoadFn, Member, MemberLoad};
use intendant_protocol::daemon::{PruneRequest, SessionsPage};
use intendant_protocol::fleet::MemberSessions;
use intendant_server::socket::{ControlSocket, DaemonLock, StateRootError};
use intendant_server::systemd::{self, Manager};
use intendant_server::{fleet, limits, web};
use tokio::signal::unix::{SignalKind, signal};

/// Exit status: another daemon serves this state root.
const EXIT_HELD: u8 = 2;
/// Exit status: the state root's settings are not ones this daemon reads.
const EXIT_CONFIG: u8 = 2;
/// Exit status of a daemon stopped by a second signal while it drained.
const EXIT_FORCED: u8 = 130;

/// Arguments of `intendant serve`.
#[derive(Debug, Default, clap::Args)]
pub struct ServeArgs {
    /// Serve the web dashboard too, on ADDR (default: `[daemon] web` in the state root's
    /// intendant.toml, else 127.0.0.1 on a free port); prints its login URL on stdout.
    #[arg(long, value_name = "ADDR")]
    pub web: Option<Option<String>>,
    /// Let --web listen on a non-loopback address (the login token is still required).
    #[arg(long, requires = "web")]
    pub web_allow_remote: bool,
    /// Join the fleet on the NATS server at URL (`nats://HOST:PORT`; default: `[fleet] url` of
    /// the state root's intendant.toml; no fleet without either).
    #[arg(long, value_name = "URL")]
    pub fleet: Option<String>,
}

/// Runs `intendant serve`.
#[allow(clippy::print_stderr)]
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let home = intendant_home()?;
    // Read whole before anything starts: a misspelled key would otherwise be ignored.
    let checked = match control_plane::load_checked(&home) {
        Ok(checked) => checked,
        Err(e) => {
            eprintln!("intendant serve: {e}");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    let limits = checked.limits;
    let fleet = match FleetSettings::read(&home)
        .and_then(|settings| FleetConfig::resolve(settings, args.fleet.as_deref(), &home))
    {
        Ok(fleet) => fleet,
        Err(e) => {
            eprintln!("intendant serve: {e}");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    let manager = match Manager::from_start() {
        Ok(manager) => manager.map(Arc::new),
        Err(e) => {
            eprintln!("intendant serve: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let (limits, fitted) = limits::fit(limits, limits::raise_fd_limit());
    if let Some(why) = fitted {
        eprintln!("intendant serve: {why}");
    }
    let lock = match DaemonLock::acquire(&home) {
        Ok(lock) => lock,
        Err(e @ StateRootError::Held { .. }) => {
            eprintln!("intendant serve: {e}");
            return Ok(ExitCode::from(EXIT_HELD));
        }
        Err(e) => return Err(e.into()),
    };
    // What the sessions' processes leave this process as their subreaper is reaped as it
    // exits, never held against their pids.
    intendant_core::child::own::start_reaper();
    // Every session is made inside one group bounding them together, so no number of them
    // takes every pid (or the memory) the daemon needs.
    for note in intendant_core::containment::bound_sessions(&checked.sessions) {
        eprintln!("intendant serve: {note}");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(serve(lock, args, limits, fleet, manager));
    // Connections still open (an attached client) must not hold the exit.
    rt.shutdown_background();
    intendant_core::containment::release_sessions_bound();
    match result {
        Ok(code) => Ok(code),
        Err(e @ StateRootError::SocketInUse { .. }) => {
            eprintln!("intendant serve: {e}");
            Ok(ExitCode::from(EXIT_HELD))
        }
        Err(e) => Err(e.into()),
    }
}

/// Collects the checkpoint stores' garbage in the background at start
/// (`[checkpoints] retention_days`); sessions checkpointing meanwhile wait for the store they
/// use. What it removed, and a store it could not collect, are said on stderr.
#[allow(clippy::print_stderr)]
fn spawn_checkpoint_gc(home: std::path::PathBuf) {
    tokio::spawn(async move {
        match intendant_core::rewind::collect_checkpoint_garbage(&home).await {
            Ok(reports) => {
                for r in reports {
                    if let Some(error) = &r.error {
                        eprintln!("intendant serve: checkpoints gc: {error}");
                    } else if !r.sessions_removed.is_empty() || r.objects_removed > 0 {
                        eprintln!(
                            "intendant serve: checkpoints gc: {}: {} session(s) past retention removed, {} object(s) freed",
                            r.store.display(),
                            r.sessions_removed.len(),
                            r.objects_removed
                        );
                    }
                }
            }
            Err(e) => eprintln!("intendant serve: checkpoints gc: {e}"),
        }
    });
}

/// Prunes the sessions past `[daemon] session_retention_days` (if set) at start and then once a
/// day, saying on stderr what went and what could not; runs as long as the daemon.
#[allow(clippy::print_stderr)]
fn spawn_session_retention(
    home: &std::path::Path,
    supervisor: &Supervisor,
) -> Option<tokio::task::JoinHandle<()>> {
    let retention = match intendant_daemon::control_plane::session_retention(home) {
        Ok(Some(retention)) => retention,
        // Checked with the rest of the file before the start: nothing to do.
        Ok(None) | Err(_) => return None,
    };
    let supervisor = supervisor.clone();
    Some(tokio::spawn(async move {
        let request = PruneRequest {
            older_than_secs: retention.as_secs(),
            dry_run: false,
        };
        let mut every = tokio::time::interval(RETENTION_PASS);
        loop {
            every.tick().await;
            // What went is said on the daemon's log by the prune itself.
            match supervisor.prune(request).await {
                Ok(report) => {
                    for kept in report.kept.iter().filter(|k| k.why.contains("could not")) {
                        eprintln!(
                            "intendant serve: retention: session {}: {}",
                            kept.id, kept.why
                        );
                    }
                }
                Err(e) => eprintln!("intendant serve: retention: {}", e.message),
            }
        }
    }))
}

/// How often `[daemon] session_retention_days` is applied after the start.
const RETENTION_PASS: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Sessions a state root keeps past which `serve`, with no retention set, says how old ones go.
const MANY_SESSIONS: u64 = 5_000;

/// With no `session_retention_days` set, says at the start how to remove old sessions once the
/// state root keeps [`MANY_SESSIONS`]: each is held in the daemon's memory and on disk for good.
#[allow(clippy::print_stderr)]
async fn hint_retention(supervisor: &Supervisor) {
    let Ok(counts) = supervisor.session_counts().await else {
        return;
    };
    if counts.total >= MANY_SESSIONS {
        eprintln!(
            "intendant serve: this state root keeps {} sessions, each held in the daemon's memory \
             (about 3-17 KiB) and on disk until removed: `intendant sessions prune --older-than \
             90d` removes old ones, `[daemon] session_retention_days = 90` in its intendant.toml \
             does so daily",
            counts.total
        );
    }
}

// Long because it is the daemon's life in order: start, fleet, socket, web, signals, stop;
// each step is a call, and the order is what a reader needs to see in one place.
#[allow(clippy::print_stderr, clippy::print_stdout)]
async fn serve(
    lock: DaemonLock,
    args: ServeArgs,
    limits: ClientLimits,
    fleet: Option<FleetConfig>,
    manager: Option<Arc<Manager>>,
) -> Result<ExitCode, StateRootError> {
    let home = lock.home().to_path_buf();
    let supervisor = match crate::wiring::daemon_supervisor(&home, daemon_log()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("intendant serve: {}", e.message);
            return Ok(ExitCode::FAILURE);
        }
    };
    // Reminders and approved schedules, each once (`docs/agenda.md`); ends with the supervisor.
    let _agenda = supervisor.start_agenda();
    // What each recorded session ended with, read back from its log after the start.
    let _endings = supervisor.read_endings();
    // Sessions one-shot runs record: listed once found, and as they end, not running for good.
    let _records = supervisor.follow_records();
    spawn_checkpoint_gc(home.clone());
    let retention = spawn_session_retention(&home, &supervisor);
    if retention.is_none() {
        hint_retention(&supervisor).await;
    }
    let mut host: Arc<dyn SessionHost> = Arc::new(supervisor.clone());
    let member = match &fleet {
        Some(config) => match join_fleet(config, &supervisor).await {
            Ok(member) => Some(Arc::new(member)),
            Err(e) => {
                eprintln!("intendant serve: {e}");
                return Ok(ExitCode::FAILURE);
            }
        },
        None => None,
    };
    // A member mirrors its records to the fleet and resumes the mirrored sessions of others.
    let mirror = match &member {
        Some(member) => match intendant_fleet::mirror::Mirror::open(member).await {
            Ok(mirror) => {
                host = Arc::new(crate::fleet_resume::ResumingHost::new(
                    host,
                    Arc::clone(member),
                    mirror.clone(),
                    home.clone(),
                ));
                Some(tokio::spawn(crate::fleet_mirror::mirror_records(
                    mirror,
                    home.clone(),
                )))
            }
            Err(e) => {
                eprintln!("intendant serve: the fleet at {}: {e}", member.server());
                return Ok(ExitCode::FAILURE);
            }
        },
        None => None,
    };
    let mut socket = ControlSocket::bind(&lock)?
        .with_refusal_log(daemon_log())
        .with_limits(limits);
    if let Some(member) = &member {
        socket = socket.with_fleet(member.clone());
    }
    let mut tasks: Vec<tokio::task::JoinHandle<()>> = mirror.into_iter().collect();
    let publisher = member.as_ref().zip(fleet.as_ref()).map(|(member, config)| {
        // Publishing and taking placed sessions end together, before the member leaves.
        let publish = tokio::spawn(publish_sessions(
            Arc::clone(member),
            Arc::clone(&host),
            config.heartbeat,
        ));
        let take = tokio::spawn(crate::fleet_worker::take_placements(
            Arc::clone(member),
            Arc::clone(&host),
            supervisor.clone(),
            home.clone(),
        ));
        let events = tokio::spawn(fleet::owner::publish_events(
            Arc::clone(member),
            Arc::clone(&host),
        ));
        [publish, take, events]
    });
    // Every surface's door: what names another member's session is routed to it.
    let (door, model_door) = match &member {
        Some(member) => {
            let control = member
                .serve_control(fleet::owner::handler(Arc::clone(&host), home.clone()))
                .await;
            match control {
                Ok(control) => tasks.push(control),
                Err(e) => {
                    eprintln!("intendant serve: the fleet's control cannot be served: {e}");
                    leave_fleet(Some(Arc::clone(member)), publisher, tasks).await;
                    return Ok(ExitCode::FAILURE);
                }
            }
            let door = |surface| -> Arc<dyn SessionHost> {
                Arc::new(fleet::FleetHost::new(
                    Arc::clone(&host),
                    Arc::clone(member),
                    surface,
                ))
            };
            (door(Surface::Human), door(Surface::Model))
        }
        None => (Arc::clone(&host), Arc::clone(&host)),
    };
    let io = |source| StateRootError::Io {
        path: home.clone(),
        source,
    };
    let mut sigint = signal(SignalKind::interrupt()).map_err(io)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(io)?;
    // A closed terminal's hang-up ends the daemon as a SIGTERM does, its sessions stopped and
    // recorded, not by the signal's default action.
    let mut sighup = signal(SignalKind::hangup()).map_err(io)?;
    let (web_stop, web_stopped) = tokio::sync::oneshot::channel::<()>();
    if let Some(addr) = &args.web {
        match start_web(
            addr.as_deref(),
            args.web_allow_remote,
            [&door, &model_door],
            &home,
            limits,
            web_stopped,
        )
        .await
        {
            Ok((url, load)) => {
                println!("{url}");
                socket = socket.with_web(load);
            }
            Err(e) => {
                eprintln!("intendant serve: {e}");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    eprintln!(
        "intendant serve: pid {} serving {} on {}",
        std::process::id(),
        home.display(),
        socket.path().display()
    );
    let told = manager.clone().map(|manager| {
        let watched = supervisor.clone();
        tokio::spawn(systemd::keep_told(
            manager,
            move || load_status(&watched),
            |e| eprintln!("intendant serve: cannot tell the service manager: {e}"),
        ))
    });
    // Returns on a signal or once a client's `shutdown` was accepted.
    socket
        .with_model_host(model_door)
        .serve(door, async {
            tokio::select! {
                _ = sigint.recv() => {}
                _ = sigterm.recv() => {}
                _ = sighup.recv() => {}
            }
        })
        .await;
    eprintln!("intendant serve: shutting down");
    if let Some((told, manager)) = told.zip(manager) {
        told.abort();
        let status = format!("stopping: {}", load_status(&supervisor));
        let _ = tokio::task::spawn_blocking(move || manager.stopping(&status)).await;
    }
    let _ = web_stop.send(());
    leave_fleet(member, publisher, tasks).await;
    // Already asked for when a client sent `shutdown`; asking again changes nothing.
    let _ = host.shutdown().await;
    tokio::select! {
        () = supervisor.closed() => {}
        _ = sigint.recv() => return Ok(ExitCode::from(EXIT_FORCED)),
        _ = sigterm.recv() => return Ok(ExitCode::from(EXIT_FORCED)),
        _ = sighup.recv() => return Ok(ExitCode::from(EXIT_FORCED)),
    }
    drop(lock);
    Ok(ExitCode::SUCCESS)
}

/// The sessions' load in a line, as the service manager shows it.
fn load_status(supervisor: &Supervisor) -> String {
    let load = supervisor.load();
    format!(
        "{} running, {} waiting for a human, {} idle, {} queued (max_running {})",
        load.running,
        load.asking,
        load.idle,
        load.queued,
        supervisor.max_running()
    )
}

/// Joins the fleet `config` names, reporting `supervisor`'s load in each heartbeat.
#[allow(clippy::print_stderr)]
async fn join_fleet(
    config: &FleetConfig,
    supervisor: &Supervisor,
) -> Result<Member, intendant_fleet::FleetError> {
    let watched = supervisor.clone();
    let load: LoadFn = Arc::new(move || {
        let now = watched.load();
        MemberLoad {
            running: u64::from(now.running),
            idle: u64::from(now.idle),
            queued: u64::from(now.queued),
            max_running: u64::from(watched.max_running()),
        }
    });
    let member = Member::join(config, load).await?;
    eprintln!(
        "intendant serve: member {} of the fleet at {}",
        member.name(),
        config.server
    );
    Ok(member)
}

/// Stops publishing the daemon's sessions and events, mirroring its records, answering other
/// members and taking placed sessions, then leaves the fleet (the others see it gone at
/// once).
async fn leave_fleet(
    member: Option<Arc<Member>>,
    publisher: Option<[tokio::task::JoinHandle<()>; 3]>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
) {
    for task in publisher.into_iter().flatten().chain(tasks) {
        task.abort();
        // Awaited so that nothing is published or taken once the member left.
        let _ = task.await;
    }
    if let Some(member) = member {
        member.leave().await;
    }
}

/// Publishes the daemon's sessions to the fleet every `every`, and [`SETTLE`] after an event
/// that changes a session's status (each member lists them in `ctl sessions` and the dashboard,
/// which the other members' events on its live stream refresh); unchanged, nothing is sent. A
/// failed publish (the server away) is tried again the next time.
async fn publish_sessions(
    member: Arc<Member>,
    host: Arc<dyn SessionHost>,
    every: std::time::Duration,
) {
    use intendant_protocol::daemon::StreamItem;
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut events = None;
    loop {
        // Fell behind, ended or never opened: taken up again (the ticks publish meanwhile).
        if events.is_none() {
            events = host.subscribe(None, None).await.ok();
        }
        let woken = tokio::select! {
            _ = ticks.tick() => None,
            item = next_item(&mut events) => Some(item),
        };
        match woken {
            None => {}
            Some(Some(StreamItem::Event(event))) if event.event.is_lifecycle() => {
                // A burst of changes is published once: what came meanwhile is passed over.
                tokio::time::sleep(SETTLE).await;
                while let Some(stream) = events.as_mut() {
                    // A zero timeout polls once: what is there now, or nothing.
                    match tokio::time::timeout(std::time::Duration::ZERO, stream.next()).await {
                        Ok(Some(StreamItem::Event(_))) => {}
                        Ok(_) => events = None,
                        Err(_) => break,
                    }
                }
            }
            Some(Some(_)) => continue,
            Some(None) => {}
        }
        // Its newest alone: every session it ever ran would be copied at every change.
        let page = SessionsPage::newest(MemberSessions::LIMIT as u32);
        if let (Ok(newest), Ok(counts)) =
            (host.sessions_page(&page).await, host.session_counts().await)
        {
            let _ = member.publish_sessions(newest, counts.total).await;
        }
    }
}

/// How long a status change waits for the changes right after it before the sessions are
/// published.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(200);

/// The next item of `events`; `None` when it ended or fell behind (then it is dropped), never
/// when there is none.
async fn next_item(
    events: &mut Option<intendant_core::host::EventStream>,
) -> Option<intendant_protocol::daemon::StreamItem> {
    let Some(stream) = events else {
        return std::future::pending().await;
    };
    match stream.next().await {
        Some(intendant_protocol::daemon::StreamItem::Lagged { .. }) | None => {
            *events = None;
            None
        }
        item => item,
    }
}

/// The daemon's log for its operator (refused peers, sessions whose record failed): its stderr.
#[allow(clippy::print_stderr)]
fn daemon_log() -> intendant_daemon::log::DaemonLog {
    intendant_daemon::log::DaemonLog::new(|line| eprintln!("intendant serve: {line}"))
}

/// Binds the dashboard where `addr` (or the config) says, with MCP at `/mcp` beside it, and
/// serves it in a task until `stopped` fires; returns its login URL and how many connections it
/// holds (for `ctl status`). `hosts` are the dashboard's
/// (a human's) and MCP's (a model's): in a fleet each routes as its surface.
async fn start_web(
    addr: Option<&str>,
    allow_remote: bool,
    hosts: [&Arc<dyn SessionHost>; 2],
    home: &std::path::Path,
    limits: ClientLimits,
    stopped: tokio::sync::oneshot::Receiver<()>,
) -> Result<(String, web::WebLoad), web::WebError> {
    let config = web::WebConfig::resolve(addr, allow_remote, home)?;
    let server = web::WebServer::bind(&config, hosts[0].clone(), home.to_path_buf())
        .await?
        .with_refusal_log(daemon_log())
        .with_limits(limits);
    let url = server.login_url()?;
    let load = server.load();
    let policy = control_plane::mcp_policy(home)?;
    let (mcp, mcp_sessions) =
        intendant_server::mcp::http::routes_with(hosts[1].clone(), server.access(), policy, limits);
    tokio::spawn(server.with_routes(mcp).run(async move {
        let _ = stopped.await;
        mcp_sessions.end();
    }));
    Ok((url, load))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use intendant_core::host::double::{HostDouble, SUBSCRIBER_CAPACITY};
    use intendant_protocol::daemon::{SessionStatus, StartRequest};
    use intendant_protocol::events::AppEvent;

    use super::*;

    /// A `nats-server -js` on a free loopback port, its store in a directory of its own;
    /// killed on drop. `None` (after a note) when it is not installed.
    struct Nats {
        child: std::process::Child,
        _store: tempfile::TempDir,
        port: u16,
    }

    impl Nats {
        fn start() -> Option<Nats> {
            use intendant_testkit::nats;
            let bin = nats::binary()?;
            let store = tempfile::tempdir().unwrap();
            let port = nats::free_port().unwrap();
            let child = nats::spawn(&bin, port, store.path(), &[]).unwrap();
            Some(Nats {
                child,
                _store: store,
                port,
            })
        }

        async fn join(&self, name: &str) -> Member {
            let url = format!("nats://127.0.0.1:{}", self.port);
            let config = FleetConfig {
                url: url.clone(),
                server: url,
                name: name.into(),
                credentials: None,
                labels: Vec::new(),
                heartbeat: Duration::from_secs(1),
            };
            Member::join(&config, Arc::new(MemberLoad::default))
                .await
                .unwrap()
        }
    }

    impl Drop for Nats {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Waits (10 s at most) until `observer` reads session `id` of member `of` published with
    /// `status`, calling `meanwhile` between reads; whether it did.
    async fn seen(
        observer: &Member,
        of: &str,
        id: &str,
        status: SessionStatus,
        meanwhile: impl Fn(),
    ) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let fleet = observer.fleet_sessions(Vec::new()).await;
            let published = fleet.members.iter().filter(|m| m.member == of);
            if published
                .flat_map(|m| &m.sessions)
                .any(|s| s.id == id && s.status == status)
            {
                return true;
            }
            meanwhile();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// A publisher of the double's session `s1` (running) as member `pub-a`, its ticks an hour
    /// apart (so only events publish in a test), once `refused` subscriptions were refused;
    /// with member `pub-b` watching.
    struct Publishing {
        member: Arc<Member>,
        observer: Member,
        double: Arc<HostDouble>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Publishing {
        async fn start(nats: &Nats, refused: usize) -> Publishing {
            let member = Arc::new(nats.join("pub-a").await);
            let observer = nats.join("pub-b").await;
            let double = HostDouble::new();
            let host: Arc<dyn SessionHost> = double.clone();
            let request = StartRequest {
                task: "t".into(),
                project: "/p".into(),
                ..StartRequest::default()
            };
            assert_eq!(host.start(request).await.unwrap().id, "s1");
            double.refuse_subscriptions(refused);
            let task = tokio::spawn(publish_sessions(
                Arc::clone(&member),
                host,
                Duration::from_secs(3600),
            ));
            // The first tick publishes at once, after the publisher tried to subscribe.
            let publishing = Publishing {
                member,
                observer,
                double,
                task,
            };
            assert!(publishing.seen(SessionStatus::Running, || {}).await);
            publishing
        }

        /// Whether `pub-b` reads `s1` published with `status` within 10 s.
        async fn seen(&self, status: SessionStatus, meanwhile: impl Fn()) -> bool {
            seen(&self.observer, "pub-a", "s1", status, meanwhile).await
        }

        /// Asserts that `s1` ending reaches the fleet by its event (sent again while waiting,
        /// for the publisher may subscribe only after the first was sent), then stops.
        async fn an_end_reaches_the_fleet(self, after: &str) {
            self.double.set_status("s1", SessionStatus::Done);
            let ended = || {
                self.double.publish(
                    "s1",
                    AppEvent::SessionEnded {
                        session_id: "s1".into(),
                        status: intendant_protocol::events::EndStatus::Completed,
                        reason: "done".into(),
                    },
                );
            };
            assert!(
                self.seen(SessionStatus::Done, ended).await,
                "a status change after {after} never reached the fleet before the next tick"
            );
            self.task.abort();
            let _ = self.task.await;
            self.member.leave().await;
            self.observer.leave().await;
        }
    }

    /// The publisher's stream fell behind while it settled a burst of changes (the daemon
    /// dropped it with `Lagged`): it subscribes again, so a later status change still reaches
    /// the fleet within moments, not on the next tick (an hour away here). Runs on one thread,
    /// so the burst is queued whole before the publisher reads any of it.
    #[tokio::test]
    async fn publisher_subscribes_again_after_its_stream_fell_behind() {
        let Some(nats) = Nats::start() else {
            return;
        };
        let publishing = Publishing::start(&nats, 0).await;
        // A burst one longer than the subscriber's queue: its stream ends `Lagged`, read while
        // the burst settles; the status it settles on is published.
        publishing.double.set_status("s1", SessionStatus::Idle);
        for turn in (1..).take(SUBSCRIBER_CAPACITY + 1) {
            publishing
                .double
                .publish("s1", AppEvent::TurnStarted { turn });
        }
        assert!(publishing.seen(SessionStatus::Idle, || {}).await);
        publishing.an_end_reaches_the_fleet("the lag").await;
    }

    /// The publisher's first subscription was refused (the daemon busy starting): it
    /// subscribes again, so a status change reaches the fleet by its event, not on the next
    /// tick.
    #[tokio::test]
    async fn publisher_subscribes_again_after_its_first_subscription_failed() {
        let Some(nats) = Nats::start() else {
            return;
        };
        let publishing = Publishing::start(&nats, 1).await;
        publishing
            .an_end_reaches_the_fleet("a refused subscription")
            .await;
    }
}
