//! The approval card: everything being approved, and how to answer. The preview and detail
//! come escaped from `core::preview` (invisible and bidi characters as `\u{..}`), whole: a
//! long command is wrapped, never cut, since its dangerous part is what a cut would hide.

use intendant_protocol::events::ActionCategory;

use super::style::{Palette, Tone, text_width, wrap};

/// Previews longer than this show their length in the card's heading.
const LONG_PREVIEW_CHARS: usize = 80;
/// The answer line of every card but a `network` one.
pub const ANSWER_PROMPT: &str = "  [y]es / [s]kip / [a]ll / [n]o  (? explains)";
/// The answer line of a `network` card: `h` allows the host for good.
pub const NETWORK_ANSWER_PROMPT: &str =
    "  [y]es / [s]kip / [a]ll / [h]ost for good / [n]o  (? explains)";
/// Shown again after a line that is not an approval answer.
pub const APPROVAL_HELP: &str = "  please answer y (yes), s (skip), a (approve all) or n (no)\n";
/// [`APPROVAL_HELP`] at a `network` approval.
pub const NETWORK_APPROVAL_HELP: &str =
    "  please answer y (yes), s (skip), a (approve all), h (the host for good) or n (no)\n";
/// What `?` shows at an approval.
pub const APPROVAL_EXPLAINED: &str = "  y  yes: run it\n  \
     s  skip: do not run it; the model is told so and goes on\n  \
     a  all: run it and everything after it in this session without asking\n  \
     n  no: do not run it, and stop the task\n  \
     (one key answers; a typed word and Enter work too)\n";
/// What `?` shows at a `network` approval.
pub const NETWORK_APPROVAL_EXPLAINED: &str = "  y  yes: this connection only\n  \
     s  skip: the command gets a 403 and the model goes on\n  \
     a  all: this host for the rest of this session\n  \
     h  host: this host for good: added to [sandbox.network] allow in the project's\n     \
     intendant.toml, which stays trusted (left as it is if it has settings you never trusted)\n  \
     n  no: a 403, and stop the task\n  \
     (one key answers; a typed word and Enter work too)\n";

/// The answer line of a `schedule` card: only its owner's yes or no answers one.
pub const SCHEDULE_ANSWER_PROMPT: &str = "  [y]es / [n]o  (? explains)";
/// [`APPROVAL_HELP`] at a `schedule` approval.
pub const SCHEDULE_APPROVAL_HELP: &str = "  please answer y (approve it) or n (refuse it)\n";
/// What `?` shows at a `schedule` approval.
pub const SCHEDULE_APPROVAL_EXPLAINED: &str = "  y  yes: approve it; at its time exactly this request starts, once\n  \
     n  no: refuse it; nothing starts\n  \
     (a scheduled session takes no skip or approve-all; one key answers, a typed word and Enter\n  \
     work too)\n";

/// The answer line, the help and the explanation of an approval of `category`.
pub fn answers(category: ActionCategory) -> (&'static str, &'static str, &'static str) {
    match category {
        ActionCategory::Network => (
            NETWORK_ANSWER_PROMPT,
            NETWORK_APPROVAL_HELP,
            NETWORK_APPROVAL_EXPLAINED,
        ),
        ActionCategory::Schedule => (
            SCHEDULE_ANSWER_PROMPT,
            SCHEDULE_APPROVAL_HELP,
            SCHEDULE_APPROVAL_EXPLAINED,
        ),
        ActionCategory::FileRead
        | ActionCategory::FileWrite
        | ActionCategory::FileDelete
        | ActionCategory::CommandExec
        | ActionCategory::Destructive
        | ActionCategory::HumanInput
        | ActionCategory::DisplayControl
        | ActionCategory::ToolCall
        | ActionCategory::Mcp
        | ActionCategory::Memory => (ANSWER_PROMPT, APPROVAL_HELP, APPROVAL_EXPLAINED),
    }
}

/// Why an action of `category` is asked about: what it does.
pub fn why(category: ActionCategory) -> &'static str {
    match category {
        ActionCategory::FileRead => "it reads files",
        ActionCategory::FileWrite => "it creates or changes a file",
        ActionCategory::FileDelete => "it removes files or empties one",
        ActionCategory::CommandExec => "it runs a shell command",
        ActionCategory::Network => "it reaches the network",
        ActionCategory::Destructive => {
            "it is hard to undo (deletes, force pushes, formatting, shutdowns)"
        }
        ActionCategory::HumanInput => "it asks you a question",
        ActionCategory::DisplayControl => "it looks at or drives a display",
        ActionCategory::ToolCall => "it is a tool this autonomy level does not trust",
        ActionCategory::Mcp => "it calls a tool of an MCP server that may change things",
        ActionCategory::Schedule => "it starts a whole session later, unattended",
        ActionCategory::Memory => {
            "the model proposes a memory; only you approve one (y keeps it, for this proposal only; s or n drops it)"
        }
    }
}

/// The card: the whole preview, on the heading line when it is short and single-line, else
/// wrapped below it with its length; an edit's detail with removed lines red and added lines
/// green; why it is asked; the answer line.
pub fn approval_card(
    category: ActionCategory,
    preview: &str,
    detail: Option<&str>,
    width: usize,
    palette: Palette,
) -> String {
    const INDENT: &str = "  ";
    const DETAIL_INDENT: &str = "  │ ";
    let name = category.name();
    let chars = preview.chars().count();
    let heading = format!("? approve {name}: ");
    let mut lines = Vec::new();
    if !preview.contains('\n')
        && chars <= LONG_PREVIEW_CHARS
        && text_width(&heading) + text_width(preview) <= width
    {
        lines.push(palette.paint(Tone::Warning, &format!("{heading}{preview}")));
    } else {
        lines.push(palette.paint(
            Tone::Warning,
            &format!("? approve {name} ({chars} characters):"),
        ));
        lines.extend(wrap(INDENT, preview, width));
    }
    if let Some(detail) = detail {
        for line in wrap(DETAIL_INDENT, detail, width) {
            let tone = match line.strip_prefix(DETAIL_INDENT) {
                Some(rest) if rest.starts_with("+ ") => Some(Tone::Added),
                Some(rest) if rest.starts_with("- ") => Some(Tone::Removed),
                Some(_) | None => None,
            };
            lines.push(match tone {
                Some(tone) => palette.paint(tone, &line),
                None => line,
            });
        }
    }
    lines.push(palette.paint(Tone::Dim, &format!("  asked because {}", why(category))));
    lines.push(answers(category).0.to_owned());
    let mut card = lines.join("\n");
    card.push('\n');
    card
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_approval_card_shows_a_long_command_whole_and_wrapped() {
        let plain = Palette::new(false);
        let short = approval_card(ActionCategory::CommandExec, "$ ls", None, 80, plain);
        assert_eq!(
            short,
            format!(
                "? approve command_exec: $ ls\n  asked because it runs a shell command\n{ANSWER_PROMPT}\n"
            )
        );
        let long = format!("$ {} && rm -rf ~/tail-marker", "x".repeat(380));
        let card = approval_card(ActionCategory::CommandExec, &long, None, 60, plain);
        let chars = long.chars().count();
        assert!(card.starts_with(&format!("? approve command_exec ({chars} characters):\n")));
        let body: String = card
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with("  ") && !l.contains("asked because"))
            .map(|l| l.strip_prefix("  ").unwrap())
            .collect();
        assert_eq!(body, long);
        assert!(card.lines().all(|l| l.chars().count() <= 60), "{card}");
        let edit = approval_card(
            ActionCategory::FileWrite,
            "edit a.txt (append)",
            Some("append 3 bytes:\n+ abc"),
            80,
            plain,
        );
        assert!(
            edit.contains("edit a.txt (append)\n  │ append 3 bytes:\n  │ + abc\n"),
            "{edit}"
        );
        let painted = approval_card(
            ActionCategory::FileWrite,
            "edit a.txt (replace)",
            Some("replace:\n- old\nwith:\n+ new"),
            80,
            Palette::new(true),
        );
        assert!(painted.contains("\x1b[31m  │ - old\x1b[0m"), "{painted}");
        assert!(painted.contains("\x1b[32m  │ + new\x1b[0m"), "{painted}");
    }
}
