//! Per-assistant tool curation: what a user changes of how an assistant offers its tools
//! to models (a name, a description), which tools it hides, and which it pins (kept in
//! the model's list when the assistant offers tools by search). An override changes what
//! the model reads, never which tool is called: calls, approval and policies key on the
//! real server and tool.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::tool_search::{CALL_TOOL, SEARCH_TOOLS};
use crate::invalid::InvalidInput;

/// At most this many overrides per assistant.
pub const MAX_OVERRIDES: usize = 2_000;
const MAX_DESCRIPTION_CHARS: usize = 4_096;
const MAX_TOOL_CHARS: usize = 256;
/// What model APIs accept as a function name (OpenAI, Anthropic: 64).
const MAX_NAME_CHARS: usize = 64;

/// One tool's override, by its server and its name there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolOverride {
    pub server_id: Uuid,
    pub tool: String,
    /// The name models call it by instead of `mcp__{server}__{tool}` (and gateway clients
    /// instead of the prefixed name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The description models read instead of the server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Not offered to models or gateway clients, nor callable through the assistant.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
    /// Always in the model's list, also when the assistant offers tools by search.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
}

/// An assistant's overrides, valid as a whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOverrides {
    /// In the order the user gave them.
    entries: Vec<ToolOverride>,
    /// Server → tool → entry.
    index: HashMap<Uuid, HashMap<String, usize>>,
}

fn is_model_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl ToolOverrides {
    /// Checks a list as the user sent it; each refusal names the entry (`overrides[i]`).
    pub fn new(entries: Vec<ToolOverride>) -> Result<Self, InvalidInput> {
        if entries.len() > MAX_OVERRIDES {
            return Err(InvalidInput::value(format!(
                "overrides: at most {MAX_OVERRIDES} entries, got {}",
                entries.len()
            )));
        }
        let mut index: HashMap<Uuid, HashMap<String, usize>> = HashMap::new();
        let mut names = HashSet::new();
        for (i, entry) in entries.iter().enumerate() {
            let at = format!("overrides[{i}]");
            if entry.tool.is_empty() || entry.tool.chars().count() > MAX_TOOL_CHARS {
                return Err(InvalidInput::value(format!(
                    "{at}.tool: 1 to {MAX_TOOL_CHARS} characters"
                )));
            }
            if let Some(name) = &entry.name {
                if !is_model_name(name) {
                    return Err(InvalidInput::value(format!(
                        "{at}.name: 1 to {MAX_NAME_CHARS} letters, digits, '_' or '-' (what model APIs accept), got '{name}'"
                    )));
                }
                if [SEARCH_TOOLS, CALL_TOOL].contains(&name.as_str()) {
                    return Err(InvalidInput::value(format!(
                        "{at}.name: '{name}' is one of the two tools an assistant offers in search mode; choose another"
                    )));
                }
                if !names.insert(name.as_str()) {
                    return Err(InvalidInput::value(format!(
                        "{at}.name: '{name}' is already another tool's name"
                    )));
                }
            }
            if let Some(description) = &entry.description
                && (description.trim().is_empty()
                    || description.chars().count() > MAX_DESCRIPTION_CHARS)
            {
                return Err(InvalidInput::value(format!(
                    "{at}.description: 1 to {MAX_DESCRIPTION_CHARS} characters"
                )));
            }
            if entry.hidden && entry.pinned {
                return Err(InvalidInput::value(format!(
                    "{at}: a hidden tool cannot be pinned"
                )));
            }
            if entry.name.is_none() && entry.description.is_none() && !entry.hidden && !entry.pinned
            {
                return Err(InvalidInput::value(format!(
                    "{at}: sets nothing (name, description, hidden or pinned)"
                )));
            }
            if index
                .entry(entry.server_id)
                .or_default()
                .insert(entry.tool.clone(), i)
                .is_some()
            {
                return Err(InvalidInput::value(format!(
                    "{at}: tool '{}' of server {} has an override already",
                    entry.tool, entry.server_id
                )));
            }
        }
        Ok(Self { entries, index })
    }

    pub fn get(&self, server: Uuid, tool: &str) -> Option<&ToolOverride> {
        self.index
            .get(&server)?
            .get(tool)
            .map(|&i| &self.entries[i])
    }

    pub fn entries(&self) -> &[ToolOverride] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tool: &str) -> ToolOverride {
        ToolOverride {
            server_id: Uuid::nil(),
            tool: tool.into(),
            name: None,
            description: None,
            hidden: true,
            pinned: false,
        }
    }

    #[test]
    fn each_refusal_names_its_entry() {
        let bad_name = ToolOverride {
            name: Some("has space".into()),
            hidden: false,
            ..entry("a")
        };
        let refused = ToolOverrides::new(vec![entry("x"), bad_name]).unwrap_err();
        assert!(
            refused.to_string().starts_with("overrides[1].name"),
            "{refused}"
        );
        let twice = ToolOverrides::new(vec![entry("x"), entry("x")]).unwrap_err();
        assert!(twice.to_string().contains("override already"), "{twice}");
        let both = ToolOverride {
            pinned: true,
            ..entry("x")
        };
        assert!(ToolOverrides::new(vec![both]).is_err());
        let nothing = ToolOverride {
            hidden: false,
            ..entry("x")
        };
        assert!(ToolOverrides::new(vec![nothing]).is_err());
        let same_name = |tool: &str| ToolOverride {
            name: Some("search".into()),
            hidden: false,
            ..entry(tool)
        };
        assert!(ToolOverrides::new(vec![same_name("a"), same_name("b")]).is_err());
    }

    #[test]
    fn an_override_is_found_by_server_and_tool() {
        let overrides = ToolOverrides::new(vec![entry("x")]).unwrap();
        assert!(overrides.get(Uuid::nil(), "x").is_some_and(|o| o.hidden));
        assert!(overrides.get(Uuid::nil(), "y").is_none());
        assert!(overrides.get(Uuid::max(), "x").is_none());
    }
}
