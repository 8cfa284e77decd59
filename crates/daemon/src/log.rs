//! [`DaemonLog`]: where the daemon tells its operator what they should know and no client was
//! asked about (a refused peer, a session stopped because its record could not be written).
//! `intendant serve` writes it to its stderr, which is the journal under systemd; tests collect
//! it or drop it.

use std::sync::Arc;

/// The daemon's log for its operator, one line at a time. Cheap to clone.
#[derive(Clone)]
pub struct DaemonLog(Arc<dyn Fn(&str) + Send + Sync>);

impl DaemonLog {
    /// A log handing each line to `write`.
    pub fn new(write: impl Fn(&str) + Send + Sync + 'static) -> DaemonLog {
        DaemonLog(Arc::new(write))
    }

    /// A log that drops every line (a part nobody gave one).
    pub fn discard() -> DaemonLog {
        DaemonLog::new(|_| {})
    }

    /// Says one line.
    pub fn say(&self, line: &str) {
        (self.0)(line);
    }

    /// This log saying at most `burst` lines a second: what a flood of refused connections
    /// says (one line each, a thousand a second) would bury the rest of the journal. Past the
    /// burst a line says the rest of that second's are counted, not said, and the next line
    /// said after it first says how many were left out.
    pub fn at_most(self, burst: u32) -> DaemonLog {
        let spell = std::sync::Mutex::new(Spell {
            began: std::time::Instant::now(),
            said: 0,
            left_out: 0,
        });
        DaemonLog::new(move |line| {
            let mut spell = spell
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = std::time::Instant::now();
            if now.duration_since(spell.began) >= std::time::Duration::from_secs(1) {
                if spell.left_out > 0 {
                    self.say(&format!(
                        "({} more lines like those were left out)",
                        spell.left_out
                    ));
                }
                *spell = Spell {
                    began: now,
                    said: 0,
                    left_out: 0,
                };
            }
            if spell.said < burst {
                spell.said += 1;
                self.say(line);
            } else {
                if spell.left_out == 0 {
                    self.say(&format!(
                        "(more than {burst} lines this second: the rest are counted, not said)"
                    ));
                }
                spell.left_out += 1;
            }
        })
    }
}

/// One second of an [`DaemonLog::at_most`] log: when it began, the lines said and left out.
struct Spell {
    began: std::time::Instant,
    said: u32,
    left_out: u64,
}

impl std::fmt::Debug for DaemonLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DaemonLog")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_said_up_to_its_burst_then_counted() {
        let said = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let sink = said.clone();
        let log = DaemonLog::new(move |line| sink.lock().unwrap().push(line.to_owned())).at_most(3);
        for i in 0..100 {
            log.say(&format!("refused {i}"));
        }
        let lines = said.lock().unwrap().clone();
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines[..3], ["refused 0", "refused 1", "refused 2"]);
        assert!(lines[3].contains("counted, not said"), "{lines:?}");
        std::thread::sleep(std::time::Duration::from_millis(1100));
        log.say("later");
        let lines = said.lock().unwrap().clone();
        assert_eq!(lines[4], "(97 more lines like those were left out)");
        assert_eq!(lines[5], "later");
    }
}
