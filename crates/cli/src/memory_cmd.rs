//! `intendant memory list|show|add|edit|rm|search|backup`: the memories of the state root's
//! database (`intendant_store::memory`), kept by a human. What a human adds or edits here is
//! `human`'s; a session's model only proposes (`intendant_core::memory`), and its proposal is
//! stored once approved. `backup FILE` writes a consistent copy of the whole database while
//! sessions run.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use intendant_core::prompts::detect_project_root;
use intendant_core::session_log::intendant_home;
use intendant_store::Store;
use intendant_store::memory::{MAX_TEXT_BYTES, Memories, Memory, Scope, ScopeFilter, Source};
use serde_json::json;

/// Flags of `intendant memory`.
#[derive(Debug, Args)]
pub struct MemoryArgs {
    #[command(subcommand)]
    command: MemoryCommand,
}

#[derive(Debug, Subcommand)]
enum MemoryCommand {
    /// The memories of a scope, most recently changed first.
    List {
        #[command(flatten)]
        view: View,
    },
    /// One memory, whole.
    Show {
        /// Its id.
        id: i64,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Adds a memory (TEXT, or `-` to read it from stdin; at most 16 KiB).
    Add {
        /// The fact.
        text: String,
        /// `project` (the current directory's project, the default), `user`, or
        /// `project:/absolute/path`.
        #[arg(long, default_value = "project")]
        scope: String,
    },
    /// Replaces a memory's text (TEXT, or `-` for stdin).
    Edit {
        /// Its id.
        id: i64,
        /// The new text.
        text: String,
    },
    /// Deletes a memory.
    Rm {
        /// Its id.
        id: i64,
    },
    /// Full-text search, best match first (plain words, "phrases", OR, NOT, prefix*).
    Search {
        /// The query.
        query: String,
        #[command(flatten)]
        view: View,
    },
    /// Writes a consistent copy of the whole database to FILE (which must not exist), while
    /// sessions go on.
    Backup {
        /// The new file.
        file: PathBuf,
    },
}

/// Which memories, how many, and how they are printed.
#[derive(Debug, Args)]
struct View {
    /// `all` (the default), `project` (the current directory's project), `user`, or
    /// `project:/absolute/path`.
    #[arg(long, default_value = "all")]
    scope: String,
    /// At most this many (1 to 200).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=200))]
    limit: u16,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `intendant memory`.
pub fn run(args: MemoryArgs) -> anyhow::Result<ExitCode> {
    let home = intendant_home()?;
    let memories = Memories::new(Store::open(&home)?);
    match args.command {
        MemoryCommand::List { view } => {
            let filter = filter(&view.scope)?;
            let list = memories.list(&filter, usize::from(view.limit))?;
            if list.is_empty() && !view.json {
                say(&format!("no memories ({})", view.scope));
            }
            for memory in &list {
                print_memory(memory, None, view.json, false);
            }
        }
        MemoryCommand::Show { id, json } => {
            let memory = memories
                .get(id)?
                .with_context(|| format!("there is no memory {id}"))?;
            print_memory(&memory, None, json, true);
        }
        MemoryCommand::Add { text, scope } => {
            let scope = one_scope(&scope)?;
            let memory = memories.add(&scope, &text_arg(text)?, &Source::Human)?;
            say(&format!("added memory {} ({})", memory.id, memory.scope));
        }
        MemoryCommand::Edit { id, text } => {
            let memory = memories.edit(id, &text_arg(text)?)?;
            say(&format!("edited memory {} ({})", memory.id, memory.scope));
        }
        MemoryCommand::Rm { id } => {
            let memory = memories.remove(id)?;
            say(&format!("removed memory {} ({})", memory.id, memory.scope));
        }
        MemoryCommand::Search { query, view } => {
            let filter = filter(&view.scope)?;
            let found = memories.search(&query, &filter, usize::from(view.limit))?;
            if found.read_as_plain_terms {
                warn("the query is not valid FTS5 syntax: its words were searched as plain terms");
            }
            if found.hits.is_empty() && !view.json {
                say(&format!("no memory matches {query:?} ({})", view.scope));
            }
            for hit in &found.hits {
                print_memory(&hit.memory, Some(hit.rank), view.json, false);
            }
        }
        MemoryCommand::Backup { file } => {
            let store = memories.store();
            store.backup_to(&file)?;
            say(&format!(
                "backed up {} to {}",
                store.path().display(),
                file.display()
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The text argument, or stdin for `-`.
fn text_arg(text: String) -> anyhow::Result<String> {
    use crate::stdin_text::StdinTextError;
    crate::stdin_text::text_arg(text, MAX_TEXT_BYTES).map_err(|e| match e {
        StdinTextError::TooLong { .. } => anyhow::anyhow!(
            "a memory holds at most {MAX_TEXT_BYTES} bytes of text and stdin has more: nothing was stored"
        ),
        StdinTextError::NotUtf8 => {
            anyhow::anyhow!("the text on stdin is not UTF-8: nothing was stored")
        }
        e @ (StdinTextError::Read(_) | StdinTextError::Empty) => {
            anyhow::anyhow!("the text on stdin: {e}: nothing was stored")
        }
    })
}

/// One scope from the command line: `project` is the current directory's project.
fn one_scope(text: &str) -> anyhow::Result<Scope> {
    match text {
        "project" => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            let root = detect_project_root(&cwd);
            let root = std::fs::canonicalize(&root).unwrap_or(root);
            Ok(Scope::project(&root))
        }
        other => Ok(other.parse()?),
    }
}

/// The filter of `--scope`: `all`, or one scope.
fn filter(text: &str) -> anyhow::Result<ScopeFilter> {
    match text {
        "all" => Ok(ScopeFilter::All),
        other => Ok(ScopeFilter::Only(vec![one_scope(other)?])),
    }
}

/// Prints one memory: a JSON line, or its heading and its text (whole, or its first line).
#[allow(clippy::print_stdout)]
fn print_memory(memory: &Memory, rank: Option<f64>, as_json: bool, whole: bool) {
    if as_json {
        let mut value = json!({
            "id": memory.id,
            "scope": memory.scope.to_string(),
            "text": memory.text,
            "source": memory.source.to_string(),
            "created": memory.created,
            "updated": memory.updated,
        });
        if let Some(rank) = rank {
            value["rank"] = json!(rank);
        }
        println!("{value}");
        return;
    }
    println!(
        "#{} {} · {} · {}",
        memory.id, memory.scope, memory.source, memory.updated
    );
    let text = intendant_core::preview::escape_invisible(&memory.text);
    if whole {
        for line in text.lines() {
            println!("  {line}");
        }
    } else {
        let first = text.lines().next().unwrap_or_default();
        let more = if text.lines().nth(1).is_some() {
            " …"
        } else {
            ""
        };
        println!("  {}{more}", intendant_protocol::text::clip(first, 200));
    }
}

#[allow(clippy::print_stdout)]
fn say(line: &str) {
    println!("{line}");
}

#[allow(clippy::print_stderr)]
fn warn(line: &str) {
    eprintln!("note: {line}");
}
