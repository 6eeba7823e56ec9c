//! Model-facing tool names: `mcp__{server}__{tool}` (seed 001).
//!
//! Model APIs accept `[A-Za-z0-9_-]{1,64}`; we use at most 63 characters. Anything else
//! becomes `_`, and a name that would be too long keeps a readable prefix plus a short
//! hash of the full name, so two long names never collide by truncation. Within one
//! assistant, [`ToolNameTable`] makes names unique even when sanitizing makes two equal,
//! and resolves a model's tool name back through the table, never by splitting it.

use std::collections::HashMap;

use sha2::{Digest, Sha256};
use uuid::Uuid;

pub const MAX_TOOL_NAME: usize = 63;
const HASH_CHARS: usize = 8;

/// A server's name as gateway names write it: anything but letters, digits, `_` and `-`
/// made `_`.
pub fn namespace(server: &str) -> String {
    sanitize(server)
}

fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Longest name the gateway gives a tool or prompt: what model APIs accept as a function
/// name (OpenAI, Anthropic: 64).
pub const MAX_GATEWAY_NAME: usize = 64;

/// A tool's name on the gateway (seed 002): `{namespace}{separator}{tool}`, the namespace
/// being the server's name with anything but letters, digits, `_` and `-` made `_`. A
/// name over [`MAX_GATEWAY_NAME`] keeps its start and ends in a hash of the server and
/// tool, so two long names stay apart.
pub fn gateway_name(server: &str, separator: &str, tool: &str) -> String {
    let full = format!("{}{separator}{tool}", sanitize(server));
    if full.len() <= MAX_GATEWAY_NAME {
        return full;
    }
    let digest = hex::encode(Sha256::digest(format!("{server}\u{0}{tool}").as_bytes()));
    let mut keep = MAX_GATEWAY_NAME - HASH_CHARS - 1;
    while !full.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}_{}", &full[..keep], &digest[..HASH_CHARS])
}

/// How the gateway names the tools and prompts of an assistant's servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrefixMode {
    /// Always `{server}{separator}{name}`: names never change when a server is bound or
    /// unbound (the default).
    #[default]
    Always,
    /// A name stays as its server defines it unless two bound servers offer it; then
    /// only those are prefixed.
    OnCollision,
    /// Names as the servers define them; of two equal names only the first server's is
    /// offered.
    Never,
}

impl PrefixMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PrefixMode::Always => "always",
            PrefixMode::OnCollision => "on_collision",
            PrefixMode::Never => "never",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "always" => Some(PrefixMode::Always),
            "on_collision" => Some(PrefixMode::OnCollision),
            "never" => Some(PrefixMode::Never),
            _ => None,
        }
    }
}

/// The gateway names of `items` (server name, item name), in order; `None` for an item
/// that is not offered (a duplicate). A name is offered once: the first item wins.
pub fn gateway_names(
    mode: PrefixMode,
    separator: &str,
    items: &[(&str, &str)],
) -> Vec<Option<String>> {
    names_by_mode(mode, items, |server, item| {
        gateway_name(server, separator, item)
    })
}

/// Names each (server, item) by `mode`: `prefixed` where the mode (or, for
/// `on_collision`, another server's equal item) asks for it, else the item itself; of two
/// equal names only the first is kept (`None` for the other).
pub fn names_by_mode(
    mode: PrefixMode,
    items: &[(&str, &str)],
    prefixed: impl Fn(&str, &str) -> String,
) -> Vec<Option<String>> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (_, item) in items {
        *counts.entry(item).or_default() += 1;
    }
    let mut taken = std::collections::HashSet::new();
    items
        .iter()
        .map(|(server, item)| {
            let name = match mode {
                PrefixMode::Always => prefixed(server, item),
                PrefixMode::OnCollision if counts[item] > 1 => prefixed(server, item),
                PrefixMode::OnCollision | PrefixMode::Never => (*item).to_owned(),
            };
            taken.insert(name.clone()).then_some(name)
        })
        .collect()
}

pub fn display_name(server: &str, tool: &str) -> String {
    let full = format!("mcp__{}__{}", sanitize(server), sanitize(tool));
    if full.len() <= MAX_TOOL_NAME {
        return full;
    }
    let digest = hex::encode(Sha256::digest(format!("{server}\u{0}{tool}").as_bytes()));
    let keep = MAX_TOOL_NAME - HASH_CHARS - 1;
    format!("{}_{}", &full[..keep], &digest[..HASH_CHARS])
}

/// Which server and tool a model-facing name stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRef {
    pub server_id: Uuid,
    pub server_name: String,
    pub tool: String,
}

/// The model-facing names of one assistant's tools, in a stable order.
#[derive(Debug, Default)]
pub struct ToolNameTable {
    entries: Vec<(String, ToolRef)>,
    by_name: HashMap<String, usize>,
}

impl ToolNameTable {
    /// Names are given in order; a later tool whose name is taken gets a hash suffix
    /// derived from its server id and tool name, so the result is stable.
    pub fn build(tools: impl IntoIterator<Item = ToolRef>) -> Self {
        Self::build_aliased(tools.into_iter().map(|tool| (tool, None)))
    }

    /// [`Self::build`] where some tools have a name of the user's choosing (an
    /// assistant's curation, names already unique among themselves): those keep it, and
    /// a tool whose own name it would be is named as if taken.
    pub fn build_aliased(tools: impl IntoIterator<Item = (ToolRef, Option<String>)>) -> Self {
        let tools: Vec<(ToolRef, Option<String>)> = tools.into_iter().collect();
        // Owned, so the tools can be moved into the table (aliases are few).
        let aliases: std::collections::HashSet<String> = tools
            .iter()
            .filter_map(|(_, alias)| alias.clone())
            .collect();
        let mut table = Self::default();
        for (tool, alias) in tools {
            if let Some(alias) = alias
                && !table.by_name.contains_key(&alias)
            {
                table.by_name.insert(alias.clone(), table.entries.len());
                table.entries.push((alias, tool));
                continue;
            }
            let mut name = display_name(&tool.server_name, &tool.tool);
            let mut attempt = 0u32;
            while table.by_name.contains_key(&name) || aliases.contains(name.as_str()) {
                attempt += 1;
                let digest = hex::encode(Sha256::digest(
                    format!("{}\u{0}{}\u{0}{attempt}", tool.server_id, tool.tool).as_bytes(),
                ));
                let base = display_name(&tool.server_name, &tool.tool);
                let keep = base.len().min(MAX_TOOL_NAME - HASH_CHARS - 1);
                name = format!("{}_{}", &base[..keep], &digest[..HASH_CHARS]);
            }
            table.by_name.insert(name.clone(), table.entries.len());
            table.entries.push((name, tool));
        }
        table
    }

    pub fn resolve(&self, name: &str) -> Option<&ToolRef> {
        self.index_of(name).map(|i| &self.entries[i].1)
    }

    /// Where `name` stands in the order the tools were given.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &ToolRef)> {
        self.entries
            .iter()
            .map(|(name, tool)| (name.as_str(), tool))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixed_names_are_bounded_and_stay_apart() {
        let server = "a-server-with-a-rather-long-name-indeed";
        let (one, two) = (
            "a_tool_whose_name_is_also_long_one",
            "a_tool_whose_name_is_also_long_two",
        );
        let first = gateway_name(server, "__", one);
        let second = gateway_name(server, "__", two);
        assert!(first.len() <= MAX_GATEWAY_NAME && second.len() <= MAX_GATEWAY_NAME);
        assert_ne!(first, second);
        assert!(first.starts_with("a-server-with-a-rather-long-name-indeed__a_tool"));
        assert_eq!(gateway_name("fx", "__", "echo"), "fx__echo");
        // A tool name of the server's own (not sanitized) is cut on a character boundary.
        assert!(gateway_name(server, ".", &"é".repeat(40)).len() <= MAX_GATEWAY_NAME);
    }

    #[test]
    fn each_prefix_mode_names_as_documented() {
        let items = [
            ("fx", "echo"),
            ("fx", "add"),
            ("every", "echo"),
            ("every", "sum"),
        ];
        let names = |mode| gateway_names(mode, ".", &items);
        let some = |names: &[&str]| {
            names
                .iter()
                .map(|n| Some(n.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(PrefixMode::Always),
            some(&["fx.echo", "fx.add", "every.echo", "every.sum"])
        );
        assert_eq!(
            names(PrefixMode::OnCollision),
            some(&["fx.echo", "add", "every.echo", "sum"])
        );
        assert_eq!(
            names(PrefixMode::Never),
            vec![
                Some("echo".into()),
                Some("add".into()),
                None,
                Some("sum".into())
            ]
        );
        for mode in ["always", "on_collision", "never"] {
            assert_eq!(PrefixMode::parse(mode).unwrap().as_str(), mode);
        }
        assert_eq!(PrefixMode::parse("sometimes"), None);
    }

    fn tool(server: &str, name: &str) -> ToolRef {
        ToolRef {
            server_id: Uuid::new_v4(),
            server_name: server.into(),
            tool: name.into(),
        }
    }

    #[test]
    fn tables_make_names_unique_and_resolve_them_back() {
        let a = tool("my.files", "read");
        let b = tool("my_files", "read");
        let c = tool("web", "fetch");
        let table = ToolNameTable::build([a.clone(), b.clone(), c.clone()]);
        let names: Vec<&str> = table.iter().map(|(n, _)| n).collect();
        assert_eq!(names[0], "mcp__my_files__read");
        assert_ne!(
            names[1], names[0],
            "sanitizing made them equal; the table does not"
        );
        assert!(names[1].starts_with("mcp__my_files__read_") && names[1].len() <= MAX_TOOL_NAME);
        assert_eq!(names[2], "mcp__web__fetch");
        assert_eq!(table.resolve(names[0]), Some(&a));
        assert_eq!(table.resolve(names[1]), Some(&b));
        assert_eq!(table.resolve("mcp__web__fetch"), Some(&c));
        assert_eq!(table.resolve("mcp__web"), None);
        let again = ToolNameTable::build([a, b, c]);
        assert!(
            again.iter().map(|(n, _)| n).eq(names.iter().copied()),
            "stable for the same input"
        );
    }

    #[test]
    fn long_colliding_names_stay_unique_and_bounded() {
        let long = "s".repeat(80);
        let tools: Vec<ToolRef> = (0..5).map(|_| tool(&long, &"t".repeat(80))).collect();
        let table = ToolNameTable::build(tools);
        let mut names: Vec<&str> = table.iter().map(|(n, _)| n).collect();
        assert!(names.iter().all(|n| n.len() <= MAX_TOOL_NAME));
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 5);
    }

    #[test]
    fn names_are_sanitized_and_bounded() {
        assert_eq!(display_name("files", "read_file"), "mcp__files__read_file");
        assert_eq!(
            display_name("My Files!", "read.file"),
            "mcp__My_Files___read_file"
        );
        assert_eq!(display_name("文件", "读"), "mcp_______");
        let a = display_name(&"s".repeat(40), &format!("{}a", "t".repeat(40)));
        let b = display_name(&"s".repeat(40), &format!("{}b", "t".repeat(40)));
        assert_eq!(a.len(), MAX_TOOL_NAME);
        assert_ne!(a, b, "truncated names stay distinct");
    }
}
