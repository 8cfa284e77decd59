//! The MCP tools a session offers the model: their names (`mcp__<server>_<tool>`), the
//! definitions sent with each request, and the deferral that keeps that request small.
//!
//! The design decision to know: past a budget ([`DEFER_FROM_TOOLS`] tools or
//! [`DEFER_FROM_BYTES`] bytes of definitions), the model gets one tool, [`SEARCH_TOOL`], instead
//! of every definition; a search answers with the matching tools' descriptions and schemas and
//! adds their definitions to every later request of the session (a tool is callable by its name
//! whether or not it was loaded).

use std::collections::BTreeSet;

use intendant_providers::ToolDefinition;
use serde_json::{Value, json};

use crate::approval::McpHint;

/// Every MCP tool's model-facing name starts with this.
pub const TOOL_PREFIX: &str = "mcp__";
/// The tool offered instead of the definitions once they pass the budget.
pub const SEARCH_TOOL: &str = "mcp_tool_search";
/// Deferral starts above this many tools.
pub const DEFER_FROM_TOOLS: usize = 16;
/// Deferral starts above this many bytes of definitions (names, descriptions, schemas as JSON).
pub const DEFER_FROM_BYTES: usize = 8 * 1024;
/// Longest tool name the providers accept.
const MAX_TOOL_NAME: usize = 64;
/// Bytes of a tool's description kept in its definition.
const MAX_DESCRIPTION_BYTES: usize = 2048;
/// Tools one search returns at most.
const SEARCH_LIMIT: usize = 8;

/// One tool of one server, as offered.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogTool {
    /// `mcp__<server>_<tool>` (sanitized, unique in the session).
    pub model_name: String,
    /// The server's name.
    pub server: String,
    /// The tool's own name on its server.
    pub tool: String,
    /// Its description (bounded).
    pub description: String,
    /// Its input schema (a JSON Schema object).
    pub schema: Value,
    /// What its annotations say.
    pub hint: McpHint,
}

impl CatalogTool {
    /// Its definition for a request.
    pub fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.model_name.clone(),
            description: self.description.clone(),
            parameters: self.schema.clone(),
        }
    }

    fn size(&self) -> usize {
        self.model_name.len() + self.description.len() + self.schema.to_string().len()
    }
}

/// The hint of a tool from its annotations, the protocol's defaults applied: not read-only,
/// destructive.
pub fn hint(read_only: Option<bool>, destructive: Option<bool>) -> McpHint {
    match (read_only, destructive) {
        (Some(true), _) => McpHint::ReadOnly,
        (_, Some(false)) => McpHint::Additive,
        (Some(false) | None, Some(true) | None) => McpHint::Destructive,
    }
}

/// `mcp__<server>_<tool>`, with every character a provider refuses replaced by `_`; a name too
/// long is cut and ends with a short hash of the whole, so it stays unique.
pub fn model_name(server: &str, tool: &str) -> String {
    let raw = format!("{TOOL_PREFIX}{server}_{tool}");
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_TOOL_NAME && clean == raw {
        return clean;
    }
    let hash = crate::digest::sha256_hex(raw.as_bytes());
    let cut: String = clean.chars().take(MAX_TOOL_NAME - 9).collect();
    format!("{cut}_{}", &hash[..8])
}

/// A tool's input schema as offered, or why it is left out: it must be a JSON object whose
/// `type`, when given, is `object`.
pub fn checked_schema(schema: &serde_json::Map<String, Value>) -> Result<Value, String> {
    match schema.get("type") {
        None => {
            let mut schema = schema.clone();
            schema.insert("type".into(), "object".into());
            Ok(Value::Object(schema))
        }
        Some(Value::String(t)) if t == "object" => Ok(Value::Object(schema.clone())),
        Some(other) => Err(format!("its input schema has type {other}, not \"object\"")),
    }
}

/// A description cut to [`MAX_DESCRIPTION_BYTES`] on a character boundary.
pub fn bounded_description(text: &str) -> String {
    intendant_protocol::text::clip(text, MAX_DESCRIPTION_BYTES)
}

/// The tools of every running server, and which ones the model has loaded.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    tools: Vec<CatalogTool>,
    loaded: BTreeSet<String>,
}

impl Catalog {
    /// A catalog of `tools` (their names already unique).
    pub fn new(tools: Vec<CatalogTool>) -> Catalog {
        Catalog {
            tools,
            loaded: BTreeSet::new(),
        }
    }

    /// Replaces the tools (a server started, ended or changed its list); loaded names that
    /// still exist stay loaded.
    pub fn replace(&mut self, tools: Vec<CatalogTool>) {
        self.loaded
            .retain(|name| tools.iter().any(|t| &t.model_name == name));
        self.tools = tools;
    }

    /// Every tool.
    pub fn tools(&self) -> &[CatalogTool] {
        &self.tools
    }

    /// The tool called `model_name`.
    pub fn find(&self, model_name: &str) -> Option<&CatalogTool> {
        self.tools.iter().find(|t| t.model_name == model_name)
    }

    /// Whether the definitions pass the budget, so the search tool stands in for them.
    pub fn deferred(&self) -> bool {
        self.tools.len() > DEFER_FROM_TOOLS
            || self.tools.iter().map(CatalogTool::size).sum::<usize>() > DEFER_FROM_BYTES
    }

    /// The definitions for the next request: every tool, or the search tool and the tools
    /// loaded through it.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        if self.tools.is_empty() {
            return Vec::new();
        }
        if !self.deferred() {
            return self.tools.iter().map(CatalogTool::definition).collect();
        }
        let mut servers: Vec<(&str, usize)> = Vec::new();
        for tool in &self.tools {
            match servers.iter_mut().find(|(s, _)| *s == tool.server) {
                Some((_, n)) => *n += 1,
                None => servers.push((&tool.server, 1)),
            }
        }
        let listed: Vec<String> = servers.iter().map(|(s, n)| format!("{s} ({n})")).collect();
        let mut defs = vec![ToolDefinition {
            name: SEARCH_TOOL.to_owned(),
            description: format!(
                "Find tools of the MCP servers ({}) by keywords; returns each match's name, \
                 description and input schema, and makes it callable by that name from then on.",
                listed.join(", ")
            ),
            parameters: json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "Keywords, or exact tool names separated by spaces."}
            }, "required": ["query"], "additionalProperties": false}),
        }];
        defs.extend(
            self.tools
                .iter()
                .filter(|t| self.loaded.contains(&t.model_name))
                .map(CatalogTool::definition),
        );
        defs
    }

    /// Answers a search: the best matches of `query` (exact names first, then by how many of
    /// its words a tool's name and description hold), as JSON text; each match is loaded.
    pub fn search(&mut self, query: &str) -> String {
        let words: Vec<String> = query
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        let mut scored: Vec<(usize, &CatalogTool)> = self
            .tools
            .iter()
            .filter_map(|t| {
                let name = t.model_name.to_lowercase();
                let text = format!(
                    "{name} {} {}",
                    t.tool.to_lowercase(),
                    t.description.to_lowercase()
                );
                let exact = words
                    .iter()
                    .any(|w| *w == name || *w == t.tool.to_lowercase());
                let hits = words.iter().filter(|w| text.contains(w.as_str())).count();
                let score = if exact { usize::MAX } else { hits };
                (score > 0).then_some((score, t))
            })
            .collect();
        scored.sort_by_key(|(score, _)| std::cmp::Reverse(*score));
        let matches: Vec<&CatalogTool> = scored
            .into_iter()
            .take(SEARCH_LIMIT)
            .map(|(_, t)| t)
            .collect();
        let names: Vec<String> = matches.iter().map(|t| t.model_name.clone()).collect();
        let answer = json!({
            "tools": matches.iter().map(|t| json!({
                "name": t.model_name,
                "server": t.server,
                "description": t.description,
                "input_schema": t.schema,
            })).collect::<Vec<_>>(),
            "note": if names.is_empty() {
                "no tool matched; try other words"
            } else {
                "these tools are now callable by their names"
            },
        });
        self.loaded.extend(names);
        answer.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(server: &str, name: &str, description: &str) -> CatalogTool {
        CatalogTool {
            model_name: model_name(server, name),
            server: server.into(),
            tool: name.into(),
            description: description.into(),
            schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            hint: McpHint::ReadOnly,
        }
    }

    #[test]
    fn names_follow_the_seed_and_stay_valid_and_unique() {
        assert_eq!(model_name("files", "read_file"), "mcp__files_read_file");
        let odd = model_name("files", "read.file");
        assert!(
            odd.starts_with("mcp__files_read_file_") && odd.len() <= 64,
            "{odd}"
        );
        assert_ne!(odd, model_name("files", "read file"));
        let long = model_name("a-server-with-a-long-name", &"x".repeat(80));
        assert_eq!(long.len(), 64);
        assert_ne!(
            long,
            model_name("a-server-with-a-long-name", &"x".repeat(81))
        );
    }

    #[test]
    fn hints_take_the_protocols_defaults() {
        assert_eq!(hint(Some(true), Some(true)), McpHint::ReadOnly);
        assert_eq!(hint(None, Some(false)), McpHint::Additive);
        assert_eq!(hint(None, None), McpHint::Destructive);
        assert_eq!(hint(Some(false), None), McpHint::Destructive);
    }

    #[test]
    fn schemas_must_be_objects() {
        let ok = json!({"properties": {}});
        assert_eq!(
            checked_schema(ok.as_object().unwrap()).unwrap()["type"],
            "object"
        );
        let bad = json!({"type": "string"});
        assert!(checked_schema(bad.as_object().unwrap()).is_err());
    }

    #[test]
    fn few_tools_are_offered_whole_and_many_through_the_search() {
        let small = Catalog::new(vec![tool("files", "read_file", "Read a file")]);
        assert!(!small.deferred());
        assert_eq!(small.definitions()[0].name, "mcp__files_read_file");

        let many: Vec<CatalogTool> = (0..60)
            .map(|i| {
                tool(
                    if i < 30 { "files" } else { "git" },
                    &format!("tool_{i}"),
                    "Does a thing",
                )
            })
            .chain([tool("git", "git_status", "Show the working tree status")])
            .collect();
        let mut catalog = Catalog::new(many);
        assert!(catalog.deferred());
        let defs = catalog.definitions();
        assert_eq!(defs.len(), 1);
        assert_eq!(defs[0].name, SEARCH_TOOL);
        assert!(
            defs[0].description.contains("files (30)") && defs[0].description.contains("git (31)")
        );
        let answer: Value = serde_json::from_str(&catalog.search("working tree status")).unwrap();
        assert_eq!(answer["tools"][0]["name"], "mcp__git_git_status");
        let names: Vec<String> = catalog.definitions().into_iter().map(|d| d.name).collect();
        assert_eq!(names, [SEARCH_TOOL, "mcp__git_git_status"]);
        let none: Value = serde_json::from_str(&catalog.search("zzz")).unwrap();
        assert_eq!(none["tools"], json!([]));
        catalog.replace(vec![tool("files", "read_file", "Read")]);
        assert_eq!(
            catalog.definitions().len(),
            1,
            "a small list is offered whole again"
        );
    }

    #[test]
    fn a_big_description_alone_passes_the_byte_budget() {
        let catalog = Catalog::new(vec![tool(
            "files",
            "read_file",
            &"x".repeat(DEFER_FROM_BYTES),
        )]);
        assert!(catalog.deferred());
    }
}
