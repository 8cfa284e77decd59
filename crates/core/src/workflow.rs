//! `workflow_checkpoint`: a session's named JSON documents in the state root's database
//! (`intendant_store::workflow`), the structured state a long orchestration keeps because
//! compaction keeps only a marker. With `name` and `data` the call stores (or replaces) a
//! document; with only `name` it reads one back; with `parent: true` it reads the parent
//! session's (a sub-agent's view of its orchestrator's state, read-only).
//!
//! The names are given to the model again where its memory of them would be gone: in the
//! compaction marker, and at the start of a resumed session (or a sub-agent whose parent has
//! some). The database's faults (locked, full) answer the call with an error; the session goes
//! on.

use intendant_protocol::tools::ToolName;
use intendant_store::SharedStore;
use intendant_store::workflow::{self, CheckpointError};
use serde_json::{Value, json};

use crate::tool_args::Args;

/// A validated `workflow_checkpoint` call.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointCall {
    /// The document's name.
    pub name: String,
    /// The document to store; `None` reads it.
    pub data: Option<Value>,
    /// Read the parent session's document instead of this session's.
    pub parent: bool,
}

/// Parses the arguments of a `workflow_checkpoint` call.
pub(crate) fn parse(a: &Args<'_>) -> Result<CheckpointCall, String> {
    let tool = ToolName::WorkflowCheckpoint;
    let name = a.required("name")?;
    let parent = a.boolean("parent")?.unwrap_or(false);
    let data = match a.map.get("data") {
        None | Some(Value::Null) => None,
        // A document given as JSON text (what many models send) is read as its JSON.
        Some(Value::String(text)) => Some(serde_json::from_str(text).map_err(|e| {
            format!("{tool}: data of {name:?} is not JSON ({e}); nothing was saved")
        })?),
        Some(other) => Some(other.clone()),
    };
    if parent && data.is_some() {
        return Err(format!(
            "{tool}: a parent's checkpoints are read-only; write your own without `parent`"
        ));
    }
    Ok(CheckpointCall { name, data, parent })
}

/// The tool's definition: (name, description, parameters).
pub fn definition() -> (ToolName, &'static str, Value) {
    (
        ToolName::WorkflowCheckpoint,
        "Save or read a named JSON document that outlives context compaction and a resume \
         (the plan, what is done, what each sub-agent was given and returned). With `name` and \
         `data` it saves (replacing that name); with only `name` it reads it back. A sub-agent \
         reads its parent's with `parent: true`. At most 64 names of 256 KiB each.",
        json!({"type": "object", "properties": {
            "name": {"type": "string", "description": "The document's name, e.g. \"plan\"."},
            "data": {"description": "The JSON document to save; omit to read."},
            "parent": {"type": "boolean", "description": "Read the parent session's document (read-only)."}
        }, "required": ["name"], "additionalProperties": false}),
    )
}

/// One session's access to its checkpoints (and its parent's, read-only).
#[derive(Debug, Clone)]
pub struct WorkflowCheckpoints {
    store: SharedStore,
    session: String,
    parent: Option<String>,
}

impl WorkflowCheckpoints {
    /// Session `session`'s checkpoints in `store`; `parent` for a sub-agent.
    pub fn new(store: SharedStore, session: &str, parent: Option<String>) -> WorkflowCheckpoints {
        WorkflowCheckpoints {
            store,
            session: session.to_owned(),
            parent,
        }
    }

    /// Answers `call`: the text for the model, or the error to give it. Blocking (one short
    /// transaction; a locked database waits its busy timeout): async callers use a blocking
    /// thread.
    pub fn answer(&self, call: &CheckpointCall) -> Result<String, String> {
        let tool = ToolName::WorkflowCheckpoint;
        let error = |e: CheckpointError| format!("{tool}: {e}");
        let store = self
            .store
            .get()
            .map_err(|e| format!("{tool}: {e}; the checkpoint was not saved or read"))?;
        let owner = if call.parent {
            self.parent.as_deref().ok_or_else(|| {
                format!("{tool}: this session has no parent (it was not started by another one)")
            })?
        } else {
            &self.session
        };
        match &call.data {
            Some(data) => {
                let now = intendant_protocol::utc::UtcTime::now().unix_seconds();
                let written = workflow::write(&store, owner, &call.name, &data.to_string(), now)
                    .map_err(error)?;
                Ok(format!(
                    "checkpoint {:?} {} ({} bytes)",
                    call.name,
                    if written.created { "saved" } else { "replaced" },
                    written.bytes
                ))
            }
            None => workflow::read(&store, owner, &call.name).map_err(|e| match (e, call.parent) {
                (CheckpointError::Unknown { name, known }, true) => format!(
                    "{tool}: your parent has no checkpoint {name:?}{}",
                    if known.is_empty() {
                        "; it has none".to_owned()
                    } else {
                        format!("; it has: {}", known.join(", "))
                    }
                ),
                (e, _) => error(e),
            }),
        }
    }

    /// What the model is told of the checkpoints it cannot see in its context: this session's
    /// names and its parent's; `None` when there are none (or the database cannot be read).
    pub fn names_note(&self) -> Option<String> {
        let store = self.store.get().ok()?;
        let own = workflow::names(&store, &self.session).ok()?;
        let parents = match &self.parent {
            Some(parent) => workflow::names(&store, parent).ok()?,
            None => Vec::new(),
        };
        let mut lines = Vec::new();
        if !own.is_empty() {
            lines.push(format!(
                "Your workflow checkpoints (read each with workflow_checkpoint and its name before \
                 relying on memory): {}.",
                quoted(&own)
            ));
        }
        if !parents.is_empty() {
            lines.push(format!(
                "Your parent session's workflow checkpoints (read with workflow_checkpoint, \
                 parent: true): {}.",
                quoted(&parents)
            ));
        }
        (!lines.is_empty()).then(|| lines.join("\n"))
    }
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn args(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    fn parsed(v: Value) -> Result<CheckpointCall, String> {
        let m = args(v);
        parse(&Args::new("workflow_checkpoint", &m))
    }

    #[test]
    fn calls_are_parsed_with_data_as_json_or_json_text() {
        let call = parsed(json!({"name": "plan", "data": {"step": 1}})).unwrap();
        assert_eq!(call.data, Some(json!({"step": 1})));
        let call = parsed(json!({"name": "plan", "data": "{\"step\": 2}"})).unwrap();
        assert_eq!(call.data, Some(json!({"step": 2})));
        assert_eq!(parsed(json!({"name": "plan"})).unwrap().data, None);
        let e = parsed(json!({"name": "plan", "data": "{step: 3"})).unwrap_err();
        assert!(e.contains("is not JSON"), "{e}");
        assert!(parsed(json!({"data": {}})).is_err(), "name is required");
        let e = parsed(json!({"name": "plan", "data": {}, "parent": true})).unwrap_err();
        assert!(e.contains("read-only"), "{e}");
    }

    #[test]
    fn a_child_reads_its_parents_checkpoints_and_cannot_write_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = SharedStore::new(dir.path());
        let parent = WorkflowCheckpoints::new(store.clone(), "p", None);
        let child = WorkflowCheckpoints::new(store, "c", Some("p".to_owned()));
        let save = |w: &WorkflowCheckpoints, name: &str, data: Value| {
            w.answer(&CheckpointCall {
                name: name.into(),
                data: Some(data),
                parent: false,
            })
        };
        let read = |w: &WorkflowCheckpoints, name: &str, parent: bool| {
            w.answer(&CheckpointCall {
                name: name.into(),
                data: None,
                parent,
            })
        };
        assert_eq!(
            save(&parent, "plan", json!({"a": 1})).unwrap(),
            "checkpoint \"plan\" saved (7 bytes)"
        );
        assert_eq!(read(&child, "plan", true).unwrap(), r#"{"a":1}"#);
        assert!(read(&child, "plan", false).is_err(), "its own are its own");
        save(&child, "plan", json!({"b": 2})).unwrap();
        assert_eq!(read(&parent, "plan", false).unwrap(), r#"{"a":1}"#);
        let e = read(&parent, "plan", true).unwrap_err();
        assert!(e.contains("has no parent"), "{e}");
        let e = read(&child, "nope", true).unwrap_err();
        assert!(
            e.contains("your parent has no checkpoint \"nope\"; it has: plan"),
            "{e}"
        );

        assert_eq!(
            child.names_note().unwrap(),
            "Your workflow checkpoints (read each with workflow_checkpoint and its name before \
             relying on memory): \"plan\".\nYour parent session's workflow checkpoints (read \
             with workflow_checkpoint, parent: true): \"plan\"."
        );
        let fresh = WorkflowCheckpoints::new(SharedStore::new(dir.path()), "new", None);
        assert_eq!(fresh.names_note(), None);
    }

    #[test]
    fn a_broken_database_answers_the_call_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(intendant_store::DB_FILE),
            b"not a database at all, no",
        )
        .unwrap();
        let w = WorkflowCheckpoints::new(SharedStore::new(dir.path()), "s", None);
        let e = w
            .answer(&CheckpointCall {
                name: "plan".into(),
                data: Some(json!({})),
                parent: false,
            })
            .unwrap_err();
        assert!(
            e.contains("corrupted") && e.contains("was not saved"),
            "{e}"
        );
        assert_eq!(w.names_note(), None);
    }
}
