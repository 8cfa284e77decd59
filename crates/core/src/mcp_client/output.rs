//! What the model is told of an MCP tool's result: its text, bounded, and its images.
//!
//! Text blocks are kept. An image block is attached to the result for the wires that take
//! images in a tool result (Responses, Anthropic, Gemini) when it is one of the media types
//! they all accept, valid base64 and within [`MAX_IMAGE_BASE64`], up to [`MAX_IMAGES`] per
//! result; the text names each image either way, and says why one was left out. Audio becomes a
//! line naming its type and size; an embedded resource gives its text or its URI, a resource
//! link its URI; structured content stands in when there is no text. Text past
//! [`MAX_RESULT_BYTES`] is cut, and the model is told how much.

use intendant_providers::ToolImage;
use serde_json::Value;

/// Bytes of one result's text the model gets.
pub const MAX_RESULT_BYTES: usize = 32 * 1024;

/// Images attached to one result.
pub const MAX_IMAGES: usize = 4;

/// Bytes of base64 of one attached image (about 3.75 MiB of image: under every wire's limit).
pub const MAX_IMAGE_BASE64: usize = 5 * 1024 * 1024;

/// The media types every image-taking wire accepts.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// What the model gets of one result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// Its text, bounded.
    pub text: String,
    /// Whether it is an error (the server's `isError`).
    pub is_error: bool,
    /// The images attached.
    pub images: Vec<ToolImage>,
}

/// The model's view of `result` (a `CallToolResult` as JSON).
pub fn render(result: &Value) -> Rendered {
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut parts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    for block in result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        parts.push(block_text(block, &mut images));
    }
    if parts.iter().all(|p| p.trim().is_empty())
        && let Some(structured) = result.get("structuredContent")
    {
        parts = vec![structured.to_string()];
    }
    Rendered {
        text: bounded(&parts.join("\n")),
        is_error,
        images,
    }
}

fn block_text(block: &Value, images: &mut Vec<ToolImage>) -> String {
    let field = |name: &str| block.get(name).and_then(Value::as_str).unwrap_or_default();
    match field("type") {
        "text" => field("text").to_owned(),
        "image" => {
            let (mime_type, data) = (field("mimeType"), field("data"));
            let named = format!("[image result: {mime_type}, {} bytes of base64", data.len());
            match image_refusal(mime_type, data, images.len()) {
                Some(why) => format!("{named}, not shown: {why}]"),
                None => {
                    images.push(ToolImage {
                        mime_type: mime_type.to_owned(),
                        data: data.to_owned(),
                    });
                    format!("{named}, attached]")
                }
            }
        }
        "audio" => format!(
            "[audio result: {}, {} bytes of base64, not shown]",
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

/// Why an image cannot be attached, if it cannot: `attached` are already on the result.
fn image_refusal(mime_type: &str, data: &str, attached: usize) -> Option<String> {
    if !IMAGE_TYPES.contains(&mime_type) {
        return Some(format!("the model takes {}", IMAGE_TYPES.join(", ")));
    }
    if data.len() > MAX_IMAGE_BASE64 {
        return Some(format!("over {MAX_IMAGE_BASE64} bytes"));
    }
    if !is_base64(data) {
        return Some("its data is not valid base64".to_owned());
    }
    if attached >= MAX_IMAGES {
        return Some(format!("{MAX_IMAGES} images already attached"));
    }
    None
}

/// Whether `data` is standard, padded base64: what the wires pass on to the model unchecked.
fn is_base64(data: &str) -> bool {
    let bytes = data.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return false;
    }
    let body = bytes
        .strip_suffix(b"==")
        .or_else(|| bytes.strip_suffix(b"="))
        .unwrap_or(bytes);
    body.iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/')
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
        let rendered = render(&json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "mimeType": "image/png", "data": "AAAA"},
                {"type": "audio", "mimeType": "audio/wav", "data": "AAAA"},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "body"}},
                {"type": "resource", "resource": {"uri": "file:///b", "blob": "AA"}},
                {"type": "resource_link", "uri": "file:///c", "name": "c"}
            ],
            "isError": true
        }));
        assert!(rendered.is_error);
        assert_eq!(
            rendered.text,
            "hello\n[image result: image/png, 4 bytes of base64, attached]\n\
             [audio result: audio/wav, 4 bytes of base64, not shown]\n\
             [resource file:///a]\nbody\n[resource file:///b: binary, not shown]\n\
             [resource link file:///c]"
        );
        assert_eq!(
            rendered.images,
            [ToolImage {
                mime_type: "image/png".into(),
                data: "AAAA".into()
            }]
        );
        let rendered = render(&json!({"content": [], "structuredContent": {"n": 1}}));
        assert_eq!(
            (rendered.text.as_str(), rendered.is_error),
            ("{\"n\":1}", false)
        );
    }

    #[test]
    fn an_image_the_wires_would_refuse_is_named_not_attached() {
        let image =
            |mime: &str, data: &str| json!({"type": "image", "mimeType": mime, "data": data});
        let mut content = vec![
            image("image/svg+xml", "AAAA"),
            image("image/png", "not base64!"),
            image("image/png", "AAA"),
            image("image/png", &"A".repeat(MAX_IMAGE_BASE64 + 4)),
        ];
        content.extend((0..MAX_IMAGES + 1).map(|_| image("image/jpeg", "/9j/")));
        let rendered = render(&json!({ "content": content }));
        assert_eq!(rendered.images.len(), MAX_IMAGES);
        let lines: Vec<&str> = rendered.text.lines().collect();
        assert!(
            lines[0].ends_with(
                "not shown: the model takes image/png, image/jpeg, image/gif, image/webp]"
            ),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].ends_with("not shown: its data is not valid base64]"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].ends_with("not shown: its data is not valid base64]"),
            "{}",
            lines[2]
        );
        assert!(lines[3].contains("not shown: over"), "{}", lines[3]);
        assert!(lines[4].ends_with("attached]"), "{}", lines[4]);
        assert!(
            lines[8].ends_with("not shown: 4 images already attached]"),
            "{}",
            lines[8]
        );
    }

    #[test]
    fn a_huge_result_is_cut_and_says_so() {
        let big = "é".repeat(MAX_RESULT_BYTES);
        let text = render(&json!({"content": [{"type": "text", "text": big}]})).text;
        assert!(text.len() < MAX_RESULT_BYTES + 100);
        assert!(
            text.ends_with(&format!("of {} bytes shown]", 2 * MAX_RESULT_BYTES)),
            "{}",
            &text[text.len() - 60..]
        );
    }
}
