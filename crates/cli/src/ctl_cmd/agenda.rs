//! `intendant ctl agenda ...` and `intendant ctl schedule`: the daemon's agenda over its control
//! socket. Times are read here (RFC 3339 with `Z` or an offset, a date and time with a zone name,
//! or `+10m`: `intendant_daemon::when`) and sent as UTC; the daemon refuses a time in the past.

use intendant_core::host::SessionHost;
use intendant_daemon::when::parse_when;
use intendant_protocol::agenda::{AgendaItem, AgendaKind, AgendaOp, rfc3339};
use intendant_protocol::daemon::{HostError, HostErrorCode};
use intendant_protocol::utc::UtcTime;
use intendant_server::socket::RemoteHost;

use super::{Failure, Out, StartArgs, start_request};

/// `ctl agenda` verbs.
#[derive(Debug, clap::Subcommand)]
pub(super) enum AgendaVerb {
    /// Every entry, oldest first: work items and scheduled sessions (`missed` ones included).
    List,
    /// Park a work item, with an optional reminder (an `agenda` event when it is due).
    Add {
        /// What to do.
        text: String,
        /// When to remind: RFC 3339 with Z or an offset, a date and time with a zone name
        /// ("2026-12-03T09:00 Europe/Paris"), or relative (+10m, +2h, +1d, +1h30m).
        #[arg(long, value_name = "TIME")]
        remind: Option<String>,
    },
    /// Mark an item done, or cancel a scheduled session that has not run.
    Done {
        /// The entry's id.
        id: u64,
    },
    /// Move an item's reminder to TIME (and arm it again).
    Snooze {
        /// The entry's id.
        id: u64,
        /// The new time: RFC 3339 with Z or an offset, a date and time with a zone name, or
        /// relative (+10m).
        #[arg(value_name = "TIME")]
        until: String,
    },
    /// Approve a pending scheduled session (as shown, with its digest): it starts at its time.
    Approve {
        /// The entry's id.
        id: u64,
    },
    /// Refuse a pending scheduled session.
    Reject {
        /// The entry's id.
        id: u64,
    },
}

/// `ctl schedule`.
#[derive(Debug, clap::Args)]
pub(super) struct ScheduleArgs {
    /// When to start it: RFC 3339 with Z or an offset (2026-12-03T09:00:00+01:00), a date and
    /// time with a zone name ("2026-12-03T09:00 Europe/Paris"), or relative (+10m, +2h, +1d,
    /// +1h30m).
    #[arg(long, value_name = "TIME")]
    at: String,
    #[command(flatten)]
    pub(super) start: StartArgs,
}

fn invalid(message: String) -> Failure {
    Failure::Host(HostError::new(HostErrorCode::InvalidRequest, message))
}

/// `text` as UTC RFC 3339, read against the clock now.
fn utc(text: &str) -> Result<String, Failure> {
    parse_when(text, UtcTime::now().unix_seconds())
        .map(rfc3339)
        .map_err(invalid)
}

/// Runs one `ctl agenda` verb.
pub(super) async fn agenda(host: &RemoteHost, out: &Out, verb: AgendaVerb) -> Result<(), Failure> {
    let op = match verb {
        AgendaVerb::List => AgendaOp::List,
        AgendaVerb::Add { text, remind } => AgendaOp::Add {
            text,
            remind_at: remind.as_deref().map(utc).transpose()?,
        },
        AgendaVerb::Done { id } => AgendaOp::Done { id },
        AgendaVerb::Snooze { id, until } => AgendaOp::Snooze {
            id,
            until: utc(&until)?,
        },
        AgendaVerb::Approve { id } => AgendaOp::Approve { id },
        AgendaVerb::Reject { id } => AgendaOp::Reject { id },
    };
    let listing = matches!(op, AgendaOp::List);
    let items = host.agenda(op).await?;
    if out.json {
        items.iter().for_each(|i| out.object(i));
    } else if listing && items.is_empty() {
        out.text("the agenda is empty\n");
    } else {
        out.text(&table(&items));
    }
    Ok(())
}

/// Runs `ctl schedule`: the whole request is stored with its digest and waits for approval.
pub(super) async fn schedule(
    host: &RemoteHost,
    out: &Out,
    args: ScheduleArgs,
) -> Result<(), Failure> {
    if args.start.attach {
        return Err(invalid(
            "--attach is for a session started now; attach to a scheduled one once it starts"
                .to_owned(),
        ));
    }
    let at = utc(&args.at)?;
    let request = Box::new(start_request(args.start)?);
    let items = host.agenda(AgendaOp::Schedule { at, request }).await?;
    for item in &items {
        if out.json {
            out.object(item);
        } else {
            out.text(&scheduled(item));
        }
    }
    Ok(())
}

/// What `ctl schedule` prints: the request as it will run, its digest, how to approve it.
fn scheduled(item: &AgendaItem) -> String {
    let request = item
        .request
        .as_ref()
        .and_then(|r| serde_json::to_string_pretty(r).ok())
        .unwrap_or_default();
    format!(
        "scheduled {} for {}: waiting for your approval (category schedule)\n\
         request:\n{request}\nsha256: {}\n\
         approve it with `intendant ctl agenda approve {}` (or in the dashboard's approvals)\n",
        item.id,
        item.at.as_deref().unwrap_or("?"),
        item.digest.as_deref().unwrap_or("?"),
        item.id
    )
}

/// The entries as a table: id, kind, state, time, text (and a session or a note).
fn table(items: &[AgendaItem]) -> String {
    let mut text = String::new();
    for i in items {
        let kind = match i.kind {
            AgendaKind::Item => "item",
            AgendaKind::Schedule => "schedule",
        };
        let mut line = format!(
            "{:>4}  {kind:<8}  {:<8}  {:<24}  {}",
            i.id,
            i.state.name(),
            i.at.as_deref().unwrap_or("-"),
            intendant_core::preview::escape_invisible(&i.text)
        );
        if let Some(session) = &i.session_id {
            line.push_str(&format!("  → session {session}"));
        }
        if let Some(note) = &i.note {
            line.push_str(&format!(
                "  ({})",
                intendant_core::preview::escape_invisible(note)
            ));
        }
        text.push_str(&line);
        text.push('\n');
    }
    text
}
