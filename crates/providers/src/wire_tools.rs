//! A request's tools as a wire's JSON, encoded once per set of tools: a session offers the same
//! shared set ([`crate::ChatRequest::tools`]) request after request, and encoding their schemas
//! again was the largest part of building a body (4% of a busy daemon's CPU samples).

use std::sync::{Arc, Mutex, PoisonError, Weak};

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::{ChatRequest, ProviderError, ProviderKind, ToolDefinition};

/// The most sets remembered; past it the oldest goes (sets made per request, with a session's
/// MCP tools, come and go).
const REMEMBERED: usize = 16;

/// A set of tools, by identity (its allocation stays while the weak reference does, so no
/// other set can take its address), encoded for a wire.
type Encoded = (ProviderKind, Weak<[ToolDefinition]>, Arc<RawValue>);

static ENCODED: Mutex<Vec<Encoded>> = Mutex::new(Vec::new());

/// The body of `request` for `wire`: `fields` and, when the request offers tools, its tools
/// as `encode` writes them for this wire under `"tools"`, encoded on the first request that
/// offers this very set and shared after.
pub(crate) fn body_with_tools(
    wire: ProviderKind,
    request: &ChatRequest,
    encode: fn(&[ToolDefinition]) -> Value,
    fields: &Map<String, Value>,
) -> Result<String, ProviderError> {
    #[derive(Serialize)]
    struct Body<'a> {
        #[serde(flatten)]
        fields: &'a Map<String, Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tools: Option<&'a RawValue>,
    }
    let tools = encoded(wire, &request.tools, encode)?;
    serde_json::to_string(&Body {
        fields,
        tools: tools.as_deref(),
    })
    .map_err(encoding_error)
}

/// `tools` as `encode` writes them for `wire` (none when there are none), from what is
/// remembered when this very set was encoded before.
pub(crate) fn encoded(
    wire: ProviderKind,
    tools: &Arc<[ToolDefinition]>,
    encode: fn(&[ToolDefinition]) -> Value,
) -> Result<Option<Arc<RawValue>>, ProviderError> {
    if tools.is_empty() {
        return Ok(None);
    }
    let this = Arc::downgrade(tools);
    let mut remembered = ENCODED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, _, json)) = remembered
        .iter()
        .find(|(kind, set, _)| *kind == wire && set.ptr_eq(&this))
    {
        return Ok(Some(Arc::clone(json)));
    }
    let json: Arc<RawValue> = serde_json::value::to_raw_value(&encode(tools))
        .map_err(encoding_error)?
        .into();
    remembered.retain(|(_, set, _)| set.strong_count() > 0);
    if remembered.len() >= REMEMBERED {
        remembered.remove(0);
    }
    remembered.push((wire, this, Arc::clone(&json)));
    Ok(Some(json))
}

fn encoding_error(e: serde_json::Error) -> ProviderError {
    ProviderError::Config(format!("request encoding: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> ToolDefinition {
        ToolDefinition {
            name: name.to_owned(),
            description: format!("{name} it"),
            parameters: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
        }
    }

    fn shape(tools: &[ToolDefinition]) -> Value {
        tools
            .iter()
            .map(|t| json!({"name": t.name, "parameters": t.parameters}))
            .collect()
    }

    fn other_shape(tools: &[ToolDefinition]) -> Value {
        tools
            .iter()
            .map(|t| json!({"function": {"name": t.name}}))
            .collect()
    }

    #[test]
    fn one_set_is_encoded_once_per_wire_a_new_set_afresh_and_none_not_at_all() {
        let set: Arc<[ToolDefinition]> = vec![tool("read"), tool("write")].into();
        let first = encoded(ProviderKind::OpenAi, &set, shape).unwrap().unwrap();
        let again = encoded(ProviderKind::OpenAi, &set, shape).unwrap().unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the same set is encoded once");
        let read: Value = serde_json::from_str(first.get()).unwrap();
        assert_eq!(read, shape(&set));

        let other = encoded(ProviderKind::OpenAiChat, &set, other_shape)
            .unwrap()
            .unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(other.get()).unwrap(),
            json!([{"function": {"name": "read"}}, {"function": {"name": "write"}}]),
            "another wire has its own encoding"
        );

        // A set made anew (a session's MCP tools change it) is encoded from its own tools.
        let changed: Arc<[ToolDefinition]> = vec![tool("read"), tool("search")].into();
        let fresh = encoded(ProviderKind::OpenAi, &changed, shape)
            .unwrap()
            .unwrap();
        assert!(fresh.get().contains("search") && !fresh.get().contains("write"));

        let none: Arc<[ToolDefinition]> = Vec::new().into();
        assert!(
            encoded(ProviderKind::OpenAi, &none, shape)
                .unwrap()
                .is_none()
        );
        let request = ChatRequest::default();
        let body = body_with_tools(ProviderKind::OpenAi, &request, shape, &Map::new()).unwrap();
        assert_eq!(body, "{}", "no tools, no `tools` member");
    }

    #[test]
    fn sets_made_per_request_do_not_grow_what_is_remembered() {
        for n in 0..(REMEMBERED * 4) {
            let set: Arc<[ToolDefinition]> = vec![tool(&format!("t{n}"))].into();
            let json = encoded(ProviderKind::OpenAi, &set, shape).unwrap().unwrap();
            assert!(json.get().contains(&format!("\"t{n}\"")));
        }
        let remembered = ENCODED.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(remembered.len() <= REMEMBERED, "{}", remembered.len());
    }
}
