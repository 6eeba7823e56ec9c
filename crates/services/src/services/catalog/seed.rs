//! The built-in entries: seed 004's preset list (filesystem, GitHub, Puppeteer, PostgreSQL,
//! SQLite, Brave Search, fetch, memory, sequential thinking) as `server.json` documents,
//! imported disabled into an empty catalog. The README says how to pre-install them.

use serde_json::Value;

const DOCUMENTS: [&str; 9] = [
    include_str!("seed/filesystem.json"),
    include_str!("seed/github.json"),
    include_str!("seed/puppeteer.json"),
    include_str!("seed/postgres.json"),
    include_str!("seed/sqlite.json"),
    include_str!("seed/brave-search.json"),
    include_str!("seed/fetch.json"),
    include_str!("seed/memory.json"),
    include_str!("seed/sequential-thinking.json"),
];

pub(super) fn documents() -> Vec<Value> {
    DOCUMENTS
        .iter()
        .map(|text| serde_json::from_str(text).expect("a built-in entry is JSON"))
        .collect()
}
