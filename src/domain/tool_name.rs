//! Model-facing tool names: `mcp__{server}__{tool}` (seed 001).
//!
//! Model APIs accept `[A-Za-z0-9_-]{1,64}`; we use at most 63 characters. Anything else
//! becomes `_`, and a name that would be too long keeps a readable prefix plus a short
//! hash of the full name, so two long names never collide by truncation.

use sha2::{Digest, Sha256};

pub const MAX_TOOL_NAME: usize = 63;
const HASH_CHARS: usize = 8;

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

pub fn display_name(server: &str, tool: &str) -> String {
    let full = format!("mcp__{}__{}", sanitize(server), sanitize(tool));
    if full.len() <= MAX_TOOL_NAME {
        return full;
    }
    let digest = hex::encode(Sha256::digest(format!("{server}\u{0}{tool}").as_bytes()));
    let keep = MAX_TOOL_NAME - HASH_CHARS - 1;
    format!("{}_{}", &full[..keep], &digest[..HASH_CHARS])
}

#[cfg(test)]
mod tests {
    use super::*;

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
