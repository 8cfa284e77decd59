//! The front matter of a `SKILL.md`, read by a small strict parser instead of a YAML library.
//!
//! The subset read: the file starts with a `---` line and the front matter ends at the next
//! `---` line. Between them, each top-level line is `key: value`; the value is plain text or
//! one `"double-"` or `'single-quoted'` string on that line. Blank lines and `#` comments are
//! skipped; indented lines belong to the key above them (a nested map such as `metadata:`) and
//! are not read. Only `name` and `description` are used; other keys (`license`,
//! `allowed-tools`, `metadata`, ...) are accepted and ignored. Block scalars (`|`, `>`) and
//! flow values (`[..]`, `{..}`) are refused for `name` and `description`.

/// Longest skill name (the Agent Skills limit).
pub const MAX_NAME_CHARS: usize = 64;
/// Longest description (the Agent Skills limit).
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// The front matter fields a skill needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontMatter {
    /// Lowercase letters, digits and single hyphens, at most [`MAX_NAME_CHARS`].
    pub name: String,
    /// Non-empty, at most [`MAX_DESCRIPTION_CHARS`] characters.
    pub description: String,
}

/// Why a `SKILL.md`'s front matter cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontMatterError {
    /// The file does not start with a `---` line.
    #[error(
        "it has no front matter: the file must start with a `---` line, then `name:` and `description:` lines, then `---`"
    )]
    Missing,
    /// No closing `---` line.
    #[error("its front matter is not closed by a `---` line")]
    Unclosed,
    /// A top-level line that is not `key: value`.
    #[error("front matter line {line}: expected `key: value`, found {text:?}")]
    NotKeyValue {
        /// 1-based line number in the file.
        line: usize,
        /// The line, clipped.
        text: String,
    },
    /// A key given twice.
    #[error("front matter line {line}: `{key}` is given twice")]
    Duplicate {
        /// 1-based line number in the file.
        line: usize,
        /// The key.
        key: String,
    },
    /// A quoted value without its closing quote, or text after it.
    #[error("front matter line {line}: the quoted value of `{key}` is not closed on that line")]
    BadQuote {
        /// 1-based line number in the file.
        line: usize,
        /// The key.
        key: String,
    },
    /// `name` or `description` written as a block or flow value.
    #[error(
        "front matter line {line}: write `{key}` as text on one line (block and list values are not read)"
    )]
    NotOneLine {
        /// 1-based line number in the file.
        line: usize,
        /// The key.
        key: String,
    },
    /// A required key is missing or empty.
    #[error("its front matter has no `{0}`")]
    MissingKey(&'static str),
    /// The name breaks the naming rule.
    #[error(
        "skill name {0:?} must be 1 to 64 lowercase letters, digits and single hyphens, not starting or ending with a hyphen"
    )]
    BadName(String),
    /// The description is too long.
    #[error("its description is longer than {MAX_DESCRIPTION_CHARS} characters")]
    LongDescription,
}

/// Splits `text` into its front matter and the body after it.
pub fn parse_front_matter(text: &str) -> Result<(FrontMatter, &str), FrontMatterError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().ok_or(FrontMatterError::Missing)?;
    if first.trim_end() != "---" {
        return Err(FrontMatterError::Missing);
    }
    let mut offset = first.len();
    let mut name = None;
    let mut description = None;
    let mut seen: Vec<String> = Vec::new();
    let mut closed = false;
    for (index, raw) in lines.enumerate() {
        let line_no = index + 2;
        offset += raw.len();
        let line = raw.trim_end();
        if line == "---" {
            closed = true;
            break;
        }
        if line.trim().is_empty()
            || line.trim_start().starts_with('#')
            || raw.starts_with([' ', '\t'])
        {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(FrontMatterError::NotKeyValue {
                line: line_no,
                text: line.chars().take(80).collect(),
            });
        };
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(FrontMatterError::NotKeyValue {
                line: line_no,
                text: line.chars().take(80).collect(),
            });
        }
        if seen.iter().any(|k| k == key) {
            return Err(FrontMatterError::Duplicate {
                line: line_no,
                key: key.to_owned(),
            });
        }
        seen.push(key.to_owned());
        let slot = match key {
            "name" => &mut name,
            "description" => &mut description,
            _ => continue,
        };
        let value = value.trim();
        if value.starts_with(['|', '>', '[', '{']) {
            return Err(FrontMatterError::NotOneLine {
                line: line_no,
                key: key.to_owned(),
            });
        }
        *slot = Some(unquote(value).ok_or_else(|| FrontMatterError::BadQuote {
            line: line_no,
            key: key.to_owned(),
        })?);
    }
    if !closed {
        return Err(FrontMatterError::Unclosed);
    }
    let name = name
        .filter(|n| !n.is_empty())
        .ok_or(FrontMatterError::MissingKey("name"))?;
    if !valid_name(&name) {
        return Err(FrontMatterError::BadName(name.chars().take(80).collect()));
    }
    let description = description
        .filter(|d| !d.trim().is_empty())
        .ok_or(FrontMatterError::MissingKey("description"))?;
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(FrontMatterError::LongDescription);
    }
    Ok((FrontMatter { name, description }, &text[offset..]))
}

/// The Agent Skills naming rule.
fn valid_name(name: &str) -> bool {
    name.chars().count() <= MAX_NAME_CHARS
        && !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// A plain or quoted one-line value; `None` for a quote left open or followed by text.
fn unquote(value: &str) -> Option<String> {
    if let Some(rest) = value.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return only_comment(chars.as_str()).then_some(out),
                '\\' => match chars.next()? {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    other => out.push(other),
                },
                c => out.push(c),
            }
        }
        return None;
    }
    if let Some(rest) = value.strip_prefix('\'') {
        let mut out = String::new();
        let mut chars = rest.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\'' {
                if chars.peek() == Some(&'\'') {
                    chars.next();
                    out.push('\'');
                    continue;
                }
                let tail: String = chars.collect();
                return only_comment(&tail).then_some(out);
            }
            out.push(c);
        }
        return None;
    }
    // A plain value ends at a ` #` comment, as in YAML.
    let plain = value.split(" #").next().unwrap_or(value);
    Some(plain.trim().to_owned())
}

/// Whether what follows a closing quote is nothing or a `#` comment.
fn only_comment(tail: &str) -> bool {
    let tail = tail.trim();
    tail.is_empty() || tail.starts_with('#')
}
