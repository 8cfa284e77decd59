//! A running session's autonomy level changed by a human (`ctl autonomy --session`, the
//! dashboard, MCP) or held to a lowered ceiling (`ctl reload`), and what that does to its
//! sub-agents.
//!
//! A sub-agent's level is held under its parent's ([`SharedLevel::under`]), so lowering a parent
//! lowers every live descendant at the moment it is set, with nothing to copy. Here the change
//! is checked (a sub-agent is never set above its parent's level now) and announced: every
//! session whose level in force changed gets `autonomy_changed` on its own stream, which also
//! keeps its listing right after it ends.

use intendant_core::autonomy::SharedLevel;
use intendant_core::bus::EventBus;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{HostError, HostErrorCode};
use intendant_protocol::events::AppEvent;

use super::{State, Supervisor, host_error};

/// A live session touched by a change: its bus, its level, and its level in force before the
/// change (`None` for the session the change names, which is announced whatever it was).
type Touched = (EventBus, SharedLevel, Option<AutonomyLevel>);

impl Supervisor {
    /// Sets the own level of running session `id` to `level`.
    pub(super) fn set_session_autonomy(
        &self,
        id: &str,
        level: AutonomyLevel,
    ) -> Result<(), HostError> {
        let touched: Vec<Touched> = {
            let state = self.inner.lock();
            let entry = state.entry(id)?;
            let Some(live) = &entry.live else {
                return Err(entry.not_running_here(id));
            };
            if let Some(cap) = live.autonomy.cap()
                && level > cap
            {
                return Err(host_error(
                    HostErrorCode::InvalidRequest,
                    format!(
                        "session {id} is a sub-agent and its parent's autonomy is {cap} now: a \
                         sub-agent is never above its parent (raise the parent first)"
                    ),
                ));
            }
            let mut touched = vec![(live.bus.clone(), live.autonomy.clone(), None)];
            touched.extend(state.live_descendants(id).into_iter().filter_map(|child| {
                let live = state.sessions.get(&child)?.live.as_ref()?;
                Some((
                    live.bus.clone(),
                    live.autonomy.clone(),
                    Some(live.autonomy.get()),
                ))
            }));
            live.autonomy.set(level);
            touched
        };
        // Outside the lock: each event is numbered and folded by its bus's tap.
        for (bus, autonomy, before) in touched {
            let now = autonomy.get();
            if before != Some(now) {
                bus.emit(AppEvent::AutonomyChanged {
                    level: now,
                    own: autonomy.own(),
                });
            }
        }
        Ok(())
    }

    /// Lowers every live session above `ceiling` to it, parents before their sub-agents (which
    /// follow a lowered parent down, and are then no longer above it).
    pub(super) fn hold_to_ceiling(&self, ceiling: AutonomyLevel) {
        let mut above: Vec<(u32, String)> = {
            let state = self.inner.lock();
            state
                .sessions
                .iter()
                .filter_map(|(id, entry)| {
                    let live = entry.live.as_ref()?;
                    (live.autonomy.get() > ceiling).then(|| (entry.depth, id.clone()))
                })
                .collect()
        };
        above.sort();
        for (_, id) in above {
            let still = {
                let state = self.inner.lock();
                state
                    .sessions
                    .get(&id)
                    .and_then(|e| e.live.as_ref())
                    .is_some_and(|live| live.autonomy.get() > ceiling)
            };
            if still {
                // Only a session that ended meanwhile refuses; it needs lowering no more.
                let _ = self.set_session_autonomy(&id, ceiling);
            }
        }
    }
}

impl State {
    /// The running descendants of session `id`: its children, theirs, and so on.
    fn live_descendants(&self, id: &str) -> Vec<String> {
        let mut found = self.live_children(id);
        let mut next = 0;
        while let Some(child) = found.get(next).cloned() {
            found.extend(self.live_children(&child));
            next += 1;
        }
        found
    }
}
