//! The conversation the model sees: the context prefix, the task, and every turn after it,
//! plus the three ways it shrinks (auto-compaction, `drop_turns`, `summarize`).
//!
//! The design decision to know: a tool result never survives without its call (providers
//! reject orphans), so every cut point is moved back to the start of a whole turn.

use intendant_protocol::text::clip;
use intendant_providers::ConversationItem;

/// Items at the start that are never removed: the context message and its acknowledgement.
pub const CONTEXT_PREFIX_LEN: usize = 2;
/// Messages kept at the end by auto-compaction.
pub const COMPACTION_KEEP_LAST: usize = 4;
/// Context usage fraction that triggers auto-compaction.
pub const COMPACTION_THRESHOLD: f64 = 0.90;
/// Characters per token used when no usage has been reported yet.
const CHARS_PER_TOKEN: usize = 4;

/// The conversation plus what the last response said about its size.
#[derive(Debug, Clone, Default)]
pub struct Conversation {
    items: Vec<ConversationItem>,
    /// Input + output tokens of the last response, cleared whenever the history shrinks.
    last_reported_tokens: Option<u64>,
}

impl Conversation {
    /// A conversation starting with the context prefix (`context` and an acknowledgement).
    pub fn new(context: String) -> Conversation {
        Conversation {
            items: vec![
                ConversationItem::User { text: context },
                ConversationItem::Assistant {
                    text:
                        "Understood. I will work in that directory and follow those instructions."
                            .to_owned(),
                },
            ],
            last_reported_tokens: None,
        }
    }

    /// A conversation restored from earlier items (a resumed session).
    pub fn from_items(items: Vec<ConversationItem>) -> Conversation {
        Conversation {
            items,
            last_reported_tokens: None,
        }
    }

    /// The items, oldest first.
    pub fn items(&self) -> &[ConversationItem] {
        &self.items
    }

    /// Appends one item.
    pub fn push(&mut self, item: ConversationItem) {
        self.items.push(item);
    }

    /// Records the size the provider reported for the last request and its answer.
    pub fn record_usage(&mut self, input_tokens: u64, output_tokens: u64) {
        self.last_reported_tokens = Some(input_tokens + output_tokens);
    }

    /// Estimated tokens of the whole request: the provider's last figure when still valid,
    /// never less than a character-count estimate of `system` and the items.
    pub fn estimated_tokens(&self, system: &str) -> u64 {
        let chars: usize = system.len() + self.items.iter().map(item_chars).sum::<usize>();
        let estimate = (chars / CHARS_PER_TOKEN) as u64;
        self.last_reported_tokens
            .map_or(estimate, |r| r.max(estimate))
    }

    /// Fraction of `window` in use.
    pub fn usage_fraction(&self, system: &str, window: u64) -> f64 {
        if window == 0 {
            return 0.0;
        }
        self.estimated_tokens(system) as f64 / window as f64
    }

    /// Auto-compaction: keeps the context prefix and the last [`COMPACTION_KEEP_LAST`] messages
    /// (moved back to a turn boundary) and puts a marker in between. Returns how many items
    /// were removed (0 when there was nothing to remove). `checkpoints` (the names of the
    /// session's workflow checkpoints, as a note) is added to the marker.
    pub fn auto_compact(&mut self, task: &str, checkpoints: Option<&str>) -> usize {
        let tail = turn_boundary_at_or_before(
            &self.items,
            self.items.len().saturating_sub(COMPACTION_KEEP_LAST),
        );
        let marker = format!(
            "[Context compacted: earlier messages were removed to fit the context window. The task was: {}\nContinue from the messages that follow; re-inspect files rather than relying on memory.",
            clip(task, 2000)
        );
        self.replace_middle(tail, with_checkpoints(marker, checkpoints))
    }

    /// Drops the oldest `count` turns after the context prefix, never the latest turn. Returns
    /// how many items were removed. `checkpoints` (as for [`Conversation::auto_compact`]) is
    /// added to the marker: the turns dropped may be the ones that saved them.
    pub fn drop_turns(&mut self, count: usize, checkpoints: Option<&str>) -> usize {
        let starts = self.turn_starts();
        // The latest turn is the one asking for the drop; it must stay.
        let droppable = starts.len().saturating_sub(1);
        let n = count.min(droppable);
        if n == 0 {
            return 0;
        }
        let cut = starts[n];
        self.replace_middle(
            cut,
            with_checkpoints(
                format!("[{n} earlier turn(s) were dropped at the model's request."),
                checkpoints,
            ),
        )
    }

    /// Replaces everything between the prefix and the latest turn with `summary`. Returns how
    /// many items were removed. `checkpoints` is added after the summary, as for
    /// [`Conversation::drop_turns`].
    pub fn summarize(&mut self, summary: &str, checkpoints: Option<&str>) -> usize {
        let Some(&last) = self.turn_starts().last() else {
            return 0;
        };
        let mut marker = format!("[Summary of earlier work, written by you]\n{summary}");
        if let Some(note) = checkpoints {
            marker.push_str("\n\n");
            marker.push_str(note);
        }
        self.replace_middle(last, marker)
    }

    /// Replaces `items[CONTEXT_PREFIX_LEN..tail]` with one user marker; 0 if that range is
    /// empty or already only a marker.
    fn replace_middle(&mut self, tail: usize, marker: String) -> usize {
        let tail = turn_boundary_at_or_before(&self.items, tail);
        if tail <= CONTEXT_PREFIX_LEN + 1 {
            return 0;
        }
        let removed = tail - CONTEXT_PREFIX_LEN;
        self.items.splice(
            CONTEXT_PREFIX_LEN..tail,
            [ConversationItem::User { text: marker }],
        );
        self.last_reported_tokens = None;
        removed
    }

    /// Indices where a model turn begins after the prefix (the first model item after a user
    /// message or tool result).
    fn turn_starts(&self) -> Vec<usize> {
        let mut starts = Vec::new();
        let mut prev_was_model = true;
        for (i, item) in self.items.iter().enumerate().skip(CONTEXT_PREFIX_LEN) {
            let is_model = is_model_item(item);
            if is_model && !prev_was_model {
                starts.push(i);
            }
            prev_was_model = is_model;
        }
        starts
    }
}

fn is_model_item(item: &ConversationItem) -> bool {
    match item {
        ConversationItem::Assistant { .. }
        | ConversationItem::Refusal { .. }
        | ConversationItem::Reasoning(_)
        | ConversationItem::ToolCall(_) => true,
        ConversationItem::User { .. } | ConversationItem::ToolResult { .. } => false,
    }
}

/// Moves `index` back until `items[index]` starts a self-contained stretch: not a tool result
/// and not inside a run of model items (reasoning, text and calls of one response stay
/// together), never into the prefix.
fn turn_boundary_at_or_before(items: &[ConversationItem], index: usize) -> usize {
    let mut i = index.min(items.len());
    while i > CONTEXT_PREFIX_LEN && i < items.len() {
        let here = &items[i];
        let before = &items[i - 1];
        let inside_turn = matches!(here, ConversationItem::ToolResult { .. })
            || (is_model_item(here) && is_model_item(before));
        if !inside_turn {
            break;
        }
        i -= 1;
    }
    i.max(CONTEXT_PREFIX_LEN)
}

fn item_chars(item: &ConversationItem) -> usize {
    match item {
        ConversationItem::User { text }
        | ConversationItem::Assistant { text }
        | ConversationItem::Refusal { text } => text.len(),
        ConversationItem::Reasoning(r) => {
            r.text.len() + r.encrypted_content.as_ref().map_or(0, String::len)
        }
        ConversationItem::ToolCall(c) => c.name.len() + c.arguments.len(),
        ConversationItem::ToolResult { output, images, .. } => {
            output.len() + images.len() * IMAGE_CHARS
        }
    }
}

/// What an image in a tool result is counted as, in characters of text: about 1,600 tokens, what
/// the wires charge for an image near their size limit (its base64 length would count far more).
const IMAGE_CHARS: usize = 6_400;

/// `marker` (an opening `[` and its text) with the checkpoint note on a line of its own, closed.
fn with_checkpoints(mut marker: String, checkpoints: Option<&str>) -> String {
    if let Some(note) = checkpoints {
        marker.push('\n');
        marker.push_str(note);
    }
    marker.push(']');
    marker
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use intendant_providers::ToolCall;

    pub(crate) fn user(t: &str) -> ConversationItem {
        ConversationItem::User { text: t.into() }
    }
    pub(crate) fn call(id: &str) -> ConversationItem {
        ConversationItem::ToolCall(ToolCall {
            call_id: id.into(),
            name: "exec_command".into(),
            arguments: "{}".into(),
            thought_signature: None,
            provider_id: false,
        })
    }
    pub(crate) fn result(id: &str) -> ConversationItem {
        ConversationItem::ToolResult {
            call_id: id.into(),
            name: "exec_command".into(),
            output: "ok".into(),
            is_error: false,
            images: Vec::new(),
        }
    }

    fn sample() -> Conversation {
        let mut c = Conversation::new("ctx".into());
        c.push(user("task"));
        for i in 0..5 {
            let id = format!("c{i}");
            c.push(call(&id));
            c.push(call(&format!("{id}b")));
            c.push(result(&id));
            c.push(result(&format!("{id}b")));
        }
        c
    }

    /// Every tool result in `items` has its call earlier in `items`.
    fn no_orphans(items: &[ConversationItem]) -> bool {
        items.iter().enumerate().all(|(i, it)| match it {
            ConversationItem::ToolResult { call_id, .. } => items[..i]
                .iter()
                .any(|p| matches!(p, ConversationItem::ToolCall(c) if &c.call_id == call_id)),
            _ => true,
        })
    }

    #[test]
    fn auto_compact_keeps_prefix_and_whole_last_turn() {
        let mut c = sample();
        let before = c.items().len();
        let removed = c.auto_compact("task", None);
        assert!(removed > 0);
        let items = c.items();
        assert_eq!(items.len(), before - removed + 1);
        assert!(matches!(&items[0], ConversationItem::User { text } if text == "ctx"));
        assert!(
            matches!(&items[2], ConversationItem::User { text } if text.starts_with("[Context compacted"))
        );
        // The last 4 items were two results of the last turn; their calls were kept too.
        assert_eq!(items.len(), 3 + 4);
        assert!(no_orphans(items));
        // Nothing more to remove a second time.
        assert_eq!(c.auto_compact("task", None), 0);
    }

    #[test]
    fn drop_turns_keeps_the_latest_turn() {
        let mut c = sample();
        let removed = c.drop_turns(2, None);
        // task + two turns of 4 items each.
        assert_eq!(removed, 1 + 8);
        assert!(no_orphans(c.items()));
        let removed = c.drop_turns(100, None);
        assert!(removed > 0);
        assert_eq!(c.items().len(), 3 + 4);
        assert_eq!(c.drop_turns(1, None), 0);
    }

    #[test]
    fn summarize_replaces_history() {
        let mut c = sample();
        assert!(c.summarize("did things", None) > 0);
        assert!(
            matches!(&c.items()[2], ConversationItem::User { text } if text.contains("did things"))
        );
        assert!(no_orphans(c.items()));
    }

    #[test]
    fn usage_fraction_prefers_reported_size() {
        let mut c = Conversation::new("x".repeat(400));
        assert!(c.usage_fraction("", 1000) < 0.2);
        c.record_usage(950, 10);
        assert!(c.usage_fraction("", 1000) >= COMPACTION_THRESHOLD);
        c.push(user("t"));
        c.push(call("a"));
        c.push(result("a"));
        c.push(call("b"));
        c.push(result("b"));
        c.push(call("c"));
        c.push(result("c"));
        assert!(c.auto_compact("t", None) > 0);
        assert!(
            c.usage_fraction("", 1000) < 0.5,
            "a stale report must not re-trigger"
        );
    }
}
