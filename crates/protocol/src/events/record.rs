//! [`SessionLogRecord`]: one line of a session's `session.jsonl`.

use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::AppEvent;

/// Key of the record's time stamp.
const TS_KEY: &str = "ts";
/// Key of the daemon's sequence number in a record.
const SEQ_KEY: &str = "seq";
/// Key of the event name in a record (the event's own `type` tag, renamed).
const EVENT_KEY: &str = "event";
/// The tag key of a serialized [`AppEvent`].
const TYPE_KEY: &str = "type";

/// One line of `session.jsonl`: `{"ts": "<RFC 3339 UTC>", "event": "<AppEvent name>",
/// ...the event's fields}`. The event's `type` tag travels as `event`, beside the time stamp, so
/// a record is flat and greppable; no event has a field named `ts`, `seq` or `event`. A session
/// the daemon runs also records each event's daemon-wide `seq` (absent for one-shot runs), so a
/// replay from the logs numbers events as the live stream did.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionLogRecord {
    /// When the event was written (RFC 3339 UTC).
    pub ts: String,
    /// The event's daemon-wide sequence number (`crate::daemon::Envelope::seq`), when a daemon
    /// published it.
    pub seq: Option<u64>,
    /// The event.
    pub event: AppEvent,
}

impl SessionLogRecord {
    /// The record as a flat JSON object.
    pub fn to_fields(&self) -> Result<Map<String, Value>, serde_json::Error> {
        let mut fields = match serde_json::to_value(&self.event)? {
            Value::Object(map) => map,
            other => {
                return Err(<serde_json::Error as serde::ser::Error>::custom(format!(
                    "event serialized to a non-object: {other}"
                )));
            }
        };
        fields.remove(TYPE_KEY);
        let mut record = Map::new();
        record.insert(TS_KEY.into(), self.ts.clone().into());
        if let Some(seq) = self.seq {
            record.insert(SEQ_KEY.into(), seq.into());
        }
        record.insert(EVENT_KEY.into(), self.event.name().into());
        record.extend(fields);
        Ok(record)
    }

    /// Reads a flat record. Fails when `ts` or `event` is missing, `seq` is not a number, or the
    /// event is not one this build knows (a newer writer's event, or an older one's with other
    /// fields).
    pub fn from_fields(mut fields: Map<String, Value>) -> Result<Self, serde_json::Error> {
        let ts = match fields.remove(TS_KEY) {
            Some(Value::String(ts)) => ts,
            Some(_) | None => return Err(serde::de::Error::missing_field(TS_KEY)),
        };
        let seq = take_seq(&mut fields)?;
        let name = match fields.remove(EVENT_KEY) {
            Some(Value::String(name)) => name,
            Some(_) | None => return Err(serde::de::Error::missing_field(EVENT_KEY)),
        };
        SessionLogRecord::from_parts(ts, seq, &name, fields)
    }

    /// Reads a record already split into its time stamp, event name and the event's fields.
    pub fn from_parts(
        ts: String,
        seq: Option<u64>,
        name: &str,
        mut fields: Map<String, Value>,
    ) -> Result<Self, serde_json::Error> {
        fields.insert(TYPE_KEY.into(), name.into());
        let event = serde_json::from_value(Value::Object(fields))?;
        Ok(SessionLogRecord { ts, seq, event })
    }
}

/// Removes and reads the optional `seq` of a flat record.
fn take_seq(fields: &mut Map<String, Value>) -> Result<Option<u64>, serde_json::Error> {
    match fields.remove(SEQ_KEY) {
        None => Ok(None),
        Some(value) => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("{SEQ_KEY} is not a number: {value}"))),
    }
}

impl Serialize for SessionLogRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_fields()
            .map_err(S::Error::custom)?
            .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SessionLogRecord {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = Map::deserialize(deserializer)?;
        SessionLogRecord::from_fields(fields).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{ActionCategory, ControlMsg, EndStatus, Verdict};

    fn record(event: AppEvent) -> SessionLogRecord {
        SessionLogRecord {
            ts: "2026-11-30T10:15:30.123Z".into(),
            seq: None,
            event,
        }
    }

    #[test]
    fn records_are_flat_with_the_tag_as_event() {
        let cases = [
            (
                record(AppEvent::TurnStarted { turn: 2 }),
                r#"{"event":"turn_started","ts":"2026-11-30T10:15:30.123Z","turn":2}"#,
            ),
            (
                record(AppEvent::SessionEnded {
                    session_id: "s1".into(),
                    status: EndStatus::TurnCap,
                    reason: "cap".into(),
                }),
                r#"{"event":"session_ended","reason":"cap","session_id":"s1","status":"turn_cap","ts":"2026-11-30T10:15:30.123Z"}"#,
            ),
            (
                record(AppEvent::ApprovalRequired {
                    id: 3,
                    session_id: "s1".into(),
                    command_preview: "$ curl x".into(),
                    detail: None,
                    category: ActionCategory::Network,
                }),
                r#"{"category":"network","command_preview":"$ curl x","event":"approval_required","id":3,"session_id":"s1","ts":"2026-11-30T10:15:30.123Z"}"#,
            ),
            (
                record(AppEvent::ApprovalResolved {
                    id: 3,
                    verdict: Verdict::Skip,
                }),
                r#"{"event":"approval_resolved","id":3,"ts":"2026-11-30T10:15:30.123Z","verdict":"skip"}"#,
            ),
            (
                record(AppEvent::ControlCommand(ControlMsg::FollowUp {
                    text: "go".into(),
                })),
                r#"{"action":"follow_up","event":"control_command","text":"go","ts":"2026-11-30T10:15:30.123Z"}"#,
            ),
        ];
        for (rec, line) in cases {
            assert_eq!(serde_json::to_string(&rec).unwrap(), line);
            let back: SessionLogRecord = serde_json::from_str(line).unwrap();
            assert_eq!(back, rec);
        }
    }

    #[test]
    fn a_daemon_record_carries_its_seq() {
        let rec = SessionLogRecord {
            seq: Some(42),
            ..record(AppEvent::TurnStarted { turn: 1 })
        };
        let line = r#"{"event":"turn_started","seq":42,"ts":"2026-11-30T10:15:30.123Z","turn":1}"#;
        assert_eq!(serde_json::to_string(&rec).unwrap(), line);
        assert_eq!(serde_json::from_str::<SessionLogRecord>(line).unwrap(), rec);
        let bad = r#"{"event":"turn_started","seq":"x","ts":"2026-11-30T10:15:30Z","turn":1}"#;
        assert!(serde_json::from_str::<SessionLogRecord>(bad).is_err());
    }

    #[test]
    fn unknown_or_incomplete_records_are_errors() {
        for line in [
            r#"{"event":"future_event","ts":"2026-11-30T10:15:30Z","x":1}"#,
            r#"{"event":"turn_started","ts":"2026-11-30T10:15:30Z"}"#,
            r#"{"event":"turn_started","turn":1}"#,
            r#"{"ts":"2026-11-30T10:15:30Z","turn":1}"#,
            r#"{"event":7,"ts":"2026-11-30T10:15:30Z"}"#,
            r#"[1,2]"#,
        ] {
            assert!(
                serde_json::from_str::<SessionLogRecord>(line).is_err(),
                "{line}"
            );
        }
    }
}
