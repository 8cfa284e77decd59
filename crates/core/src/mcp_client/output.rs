//! What the model is told of an MCP tool's result: its text, bounded.
//!
//! Text blocks are kept; an image or audio block becomes a line naming its type and size (the
//! conversation carries text only); an embedded resource gives its text or its URI, a resource
//! link its URI; structured content stands in when there is no text. Everything past
//! [`MAX_RESULT_BYTES`] is cut, and the model is told how much.

use serde_json::Value;

/// Bytes of one result the model gets.
pub const MAX_RESULT_BYTES: usize = 32 * 1024;

/// The model's text for `result` (a `CallToolResult` as JSON) and whether it is an error.
pub fn render(result: &Value) -> (String, bool) {
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut parts: Vec<String> = Vec::new();
    for block in result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        parts.push(block_text(block));
    }
    if parts.iter().all(|p| p.trim().is_empty())
        && let Some(structured) = result.get("structuredContent")
    {
        parts = vec![structured.to_string()];
    }
    let text = parts.join("\n");
    (bounded(&text), is_error)
}

fn block_text(block: &Value) -> String {
    let field = |name: &str| block.get(name).and_then(Value::as_str).unwrap_or_default();
    match field("type") {
        "text" => field("text").to_owned(),
        kind @ ("image" | "audio") => format!(
            "[{kind} result: {}, {} bytes of base64, not shown]",
            field("mimeType"),
            field("data").len()
        ),
        "resource" => {
            let resource = block.get("resource");
            let text = resource.and_then(|r| r.get("text")).and_then(Value::as_str);
            let uri = resource
                .and_then(|r| r.get("uri"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            match text {
                Some(text) => format!("[resource {uri}]\n{text}"),
                None => format!("[resource {uri}: binary, not shown]"),
            }
        }
        "resource_link" => format!("[resource link {}]", field("uri")),
        other => format!("[{other} result, not shown]"),
    }
}

/// `text` cut to [`MAX_RESULT_BYTES`] on a character boundary, saying how much was left out.
pub fn bounded(text: &str) -> String {
    if text.len() <= MAX_RESULT_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_RESULT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[result cut: {} of {} bytes shown]",
        &text[..end],
        end,
        text.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_become_text_and_errors_stay_errors() {
        let (text, is_error) = render(&json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "mimeType": "image/png", "data": "AAAA"},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "body"}},
                {"type": "resource", "resource": {"uri": "file:///b", "blob": "AA"}},
                {"type": "resource_link", "uri": "file:///c", "name": "c"}
            ],
            "isError": true
        }));
        assert!(is_error);
        assert_eq!(
            text,
            "hello\n[image result: image/png, 4 bytes of base64, not shown]\n\
             [resource file:///a]\nbody\n[resource file:///b: binary, not shown]\n\
             [resource link file:///c]"
        );
        let (text, is_error) = render(&json!({"content": [], "structuredContent": {"n": 1}}));
        assert_eq!((text.as_str(), is_error), ("{\"n\":1}", false));
    }

    #[test]
    fn a_huge_result_is_cut_and_says_so() {
        let big = "é".repeat(MAX_RESULT_BYTES);
        let (text, _) = render(&json!({"content": [{"type": "text", "text": big}]}));
        assert!(text.len() < MAX_RESULT_BYTES + 100);
        assert!(
            text.ends_with(&format!("of {} bytes shown]", 2 * MAX_RESULT_BYTES)),
            "{}",
            &text[text.len() - 60..]
        );
    }
}
