//! A tool call's arguments as the tools read them, with errors that name the tool and the
//! argument. A leaf, shared by the tool catalog (`tools`) and the sub-agent tools
//! (`subagents`), so neither reaches into the other for it.

use serde_json::Value;

/// A tool call's arguments, read with errors that name the tool and the argument.
pub(crate) struct Args<'a> {
    tool: &'a str,
    /// The arguments object.
    pub(crate) map: &'a serde_json::Map<String, Value>,
}

impl<'a> Args<'a> {
    /// The arguments `map` of a call to `tool`.
    pub(crate) fn new(tool: &'a str, map: &'a serde_json::Map<String, Value>) -> Args<'a> {
        Args { tool, map }
    }

    pub(crate) fn string(&self, key: &str) -> Result<Option<String>, String> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{}: `{key}` must be a string", self.tool)),
        }
    }

    pub(crate) fn required(&self, key: &str) -> Result<String, String> {
        self.string(key)?
            .ok_or_else(|| format!("{}: missing required argument `{key}`", self.tool))
    }

    pub(crate) fn integer(&self, key: &str) -> Result<Option<u64>, String> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("{}: `{key}` must be a non-negative integer", self.tool)),
        }
    }

    pub(crate) fn boolean(&self, key: &str) -> Result<Option<bool>, String> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(format!("{}: `{key}` must be true or false", self.tool)),
        }
    }

    /// The integer `key`, narrowed to `T`; out of range is an error.
    pub(crate) fn narrow<T: TryFrom<u64>>(&self, key: &str) -> Result<Option<T>, String> {
        self.integer(key)?
            .map(|v| T::try_from(v).map_err(|_| format!("{}: `{key}` is out of range", self.tool)))
            .transpose()
    }
}
