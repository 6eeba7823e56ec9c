//! Ranking an assistant's tools against what the model or user asks for (tool search).
//!
//! The ranking is BM25 (the `bm25` crate) over each tool's words: its server's name, its
//! own name, the name the user gave it, its title and description, and the names and
//! descriptions of its parameters. Tool and parameter names are identifiers
//! (`create_issue`, `listPullRequests`), so they are split into words first; the words
//! are then lower-cased, stemmed (English) and stripped of stop words by the crate's
//! tokenizer, which also spells other scripts in ASCII (Chinese as pinyin syllables).
//!
//! With a sentence encoder configured (`tool_search.model_dir`), the ranking is hybrid:
//! each tool also has a vector for what it does ([`encoder`]), and a tool's score is BM25's,
//! scaled to the best match, weighted [`LEXICAL_WEIGHT`], plus the cosine of its vector and
//! the query's, scaled between the query's worst and best, weighted the rest. Meaning
//! finds the tool a request paraphrases or asks for in another language; the words keep
//! the tool that names what is asked on top.

mod encoder;
mod npz;
mod sentencepiece;

use std::sync::Arc;

use bm25::{DefaultTokenizer, Embedder, EmbedderBuilder, Scorer, Tokenizer};
use serde_json::{Map, Value};

pub use encoder::{DIMENSIONS, ModelError, SentenceEncoder};

/// BM25's share of a hybrid score: chosen on the labelled set (`tests/tool-search`), where
/// it was the best weight on either half of the requests, tuned on one and checked on the
/// other.
pub const LEXICAL_WEIGHT: f32 = 0.3;
/// How much of a description the meaning of a tool is read from: its first paragraph,
/// cut here. Long manuals drown the one sentence that says what the tool does.
const MEANING_DESCRIPTION_CHARS: usize = 400;

/// How an assistant offers its tools to a model: every one, or a search over them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ToolExposure {
    #[default]
    All,
    /// Two tools, [`SEARCH_TOOLS`] and [`CALL_TOOL`], and the tools the user pinned.
    Search,
}

impl ToolExposure {
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "all" => Some(ToolExposure::All),
            "search" => Some(ToolExposure::Search),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ToolExposure::All => "all",
            ToolExposure::Search => "search",
        }
    }
}

/// The tool a model finds the assistant's tools with, in search mode.
pub const SEARCH_TOOLS: &str = "search_tools";
/// The tool a model calls a found tool through, in search mode.
pub const CALL_TOOL: &str = "call_tool";
/// How many tools `search_tools` returns unless asked for another number.
pub const DEFAULT_SEARCH_RESULTS: usize = 5;

/// A tool of search mode as a model API declares it.
pub struct SearchModeTool {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: Value,
}

/// [`SEARCH_TOOLS`] and [`CALL_TOOL`].
pub fn search_mode_tools() -> [SearchModeTool; 2] {
    [
        SearchModeTool {
            name: SEARCH_TOOLS,
            description: "Finds the tools that can do what you need among this assistant's \
                          tools. Describe the task in a few words; each tool found comes with \
                          its name, what it does and its parameters. Then call it, directly \
                          or with call_tool.",
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What you want to do, in a few words."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "How many tools to return (5 unless given)."}
                },
                "required": ["query"],
            }),
        },
        SearchModeTool {
            name: CALL_TOOL,
            description: "Calls a tool found with search_tools, by its name, with its arguments.",
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The tool's name, as search_tools gave it."},
                    "arguments": {"type": "object", "description": "The tool's arguments, as its parameters describe them."}
                },
                "required": ["name"],
            }),
        },
    ]
}

/// What a tool is searched by.
pub struct ToolDocument<'a> {
    pub server: &'a str,
    /// The server's name for it.
    pub name: &'a str,
    /// The name the user gave it (curation).
    pub alias: Option<&'a str>,
    pub title: Option<&'a str>,
    pub description: Option<&'a str>,
    pub input_schema: &'a Map<String, Value>,
}

impl ToolDocument<'_> {
    /// The document's words. Names count twice: a tool named for what is asked is a better
    /// answer than one that mentions it in passing.
    fn text(&self) -> String {
        let mut text = String::new();
        let mut add = |part: &str| {
            text.push_str(part);
            text.push('\n');
        };
        add(self.server);
        for name in [Some(self.name), self.alias, self.title]
            .into_iter()
            .flatten()
        {
            add(name);
            add(name);
        }
        if let Some(description) = self.description {
            add(description);
        }
        if let Some(Value::Object(properties)) = self.input_schema.get("properties") {
            for (parameter, schema) in properties {
                add(parameter);
                if let Some(description) = schema.get("description").and_then(Value::as_str) {
                    add(description);
                }
            }
        }
        text
    }

    /// What the sentence encoder reads of the tool: `server: name words (title): the
    /// description's first paragraph`, then its parameters' names as words.
    pub fn meaning_text(&self) -> String {
        let mut text = format!(
            "{}: {}",
            self.server,
            split_identifiers(self.name).to_lowercase()
        );
        for also in [self.title, self.alias].into_iter().flatten() {
            text.push_str(&format!(" ({also})"));
        }
        let description = self.description.unwrap_or("").trim();
        let first: String = description
            .split("\n\n")
            .next()
            .unwrap_or("")
            .chars()
            .take(MEANING_DESCRIPTION_CHARS)
            .collect();
        text.push_str(": ");
        text.push_str(&first);
        text.push_str("\nParameters: ");
        if let Some(Value::Object(properties)) = self.input_schema.get("properties") {
            let names: Vec<String> = properties
                .keys()
                .map(|name| split_identifiers(name).to_lowercase())
                .collect();
            text.push_str(&names.join(", "));
        }
        text
    }
}

/// A tool's place in the list the index was built from, and how well it answers a query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ranked {
    pub position: usize,
    pub score: f32,
}

/// An assistant's tools, indexed for ranking; built once per change of its tools.
pub struct ToolIndex {
    embedder: Embedder<u32, WordTokenizer>,
    scorer: Scorer<usize, u32>,
    len: usize,
    /// Each tool's vector ([`ToolDocument::meaning_text`] encoded), when ranking is hybrid.
    meanings: Option<Vec<Arc<[f32]>>>,
}

impl ToolIndex {
    /// Indexes `tools`; a ranking names each by its place in this sequence.
    pub fn build<'a>(tools: impl IntoIterator<Item = ToolDocument<'a>>) -> Self {
        let texts: Vec<String> = tools.into_iter().map(|tool| tool.text()).collect();
        let corpus: Vec<&str> = texts.iter().map(String::as_str).collect();
        let embedder = EmbedderBuilder::<u32, WordTokenizer>::with_tokenizer_and_fit_to_corpus(
            WordTokenizer::new(),
            &corpus,
        )
        .build();
        let mut scorer = Scorer::new();
        for (position, text) in texts.iter().enumerate() {
            scorer.upsert(&position, embedder.embed(text));
        }
        ToolIndex {
            embedder,
            scorer,
            len: texts.len(),
            meanings: None,
        }
    }

    /// Makes the ranking hybrid: `meanings` are the tools' vectors, in the order built.
    pub fn with_meanings(mut self, meanings: Vec<Arc<[f32]>>) -> Self {
        assert_eq!(meanings.len(), self.len, "one vector per tool");
        self.meanings = Some(meanings);
        self
    }

    /// Whether [`ToolIndex::rank`] uses meaning as well as words.
    pub fn is_hybrid(&self) -> bool {
        self.meanings.is_some()
    }

    /// How many tools are indexed.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `limit` tools that answer `query` best, best first; equal scores keep the list's
    /// order. With the query's vector (`meaning`) and a hybrid index, every tool has a
    /// score; by words alone, a tool sharing no word with the query is not among them.
    pub fn rank(&self, query: &str, meaning: Option<&[f32]>, limit: usize) -> Vec<Ranked> {
        let mut ranked: Vec<Ranked> = match (meaning, &self.meanings) {
            (Some(meaning), Some(meanings)) => self.hybrid(query, meaning, meanings),
            _ => self
                .scorer
                .matches(&self.embedder.embed(query))
                .into_iter()
                .map(|scored| Ranked {
                    position: scored.id,
                    score: scored.score,
                })
                .collect(),
        };
        ranked.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then(a.position.cmp(&b.position))
        });
        ranked.truncate(limit);
        ranked
    }

    fn hybrid(&self, query: &str, meaning: &[f32], meanings: &[Arc<[f32]>]) -> Vec<Ranked> {
        // Chinese spelled as pinyin only adds noise to the words of English tools; the
        // meaning carries a Chinese request.
        let words = without_cjk(query);
        let mut lexical = vec![0f32; self.len];
        for scored in self.scorer.matches(&self.embedder.embed(&words)) {
            lexical[scored.id] = scored.score;
        }
        let best_lexical = lexical.iter().copied().fold(0f32, f32::max);
        let cosines: Vec<f32> = meanings
            .iter()
            .map(|tool| encoder::similarity(meaning, tool))
            .collect();
        let lowest = cosines.iter().copied().fold(f32::INFINITY, f32::min);
        let highest = cosines.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let spread = if highest > lowest {
            highest - lowest
        } else {
            1.0
        };
        lexical
            .iter()
            .zip(&cosines)
            .enumerate()
            .map(|(position, (&lexical, &cosine))| {
                let lexical = if best_lexical > 0.0 {
                    lexical / best_lexical
                } else {
                    0.0
                };
                Ranked {
                    position,
                    score: LEXICAL_WEIGHT * lexical
                        + (1.0 - LEXICAL_WEIGHT) * (cosine - lowest) / spread,
                }
            })
            .collect()
    }
}

/// `text` with its Chinese, Japanese and Korean characters (and their punctuation) blanked.
fn without_cjk(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\u{3000}'..='\u{303f}'
            | '\u{3400}'..='\u{4dbf}'
            | '\u{4e00}'..='\u{9fff}'
            | '\u{f900}'..='\u{faff}'
            | '\u{ff00}'..='\u{ffef}' => ' ',
            c => c,
        })
        .collect()
}

/// The crate's English tokenizer, given identifiers split into their words.
struct WordTokenizer {
    words: DefaultTokenizer,
}

impl WordTokenizer {
    fn new() -> Self {
        WordTokenizer {
            words: DefaultTokenizer::builder().build(),
        }
    }
}

impl Tokenizer for WordTokenizer {
    fn tokenize(&self, input_text: &str) -> Vec<String> {
        self.words.tokenize(&split_identifiers(input_text))
    }
}

/// `list_pull-requests.getByID` → `list pull requests get By ID`: the separators of
/// identifiers become spaces, and a lower-case letter or digit followed by a capital
/// starts a new word.
fn split_identifiers(text: &str) -> String {
    let mut split = String::with_capacity(text.len() + 8);
    let mut previous: Option<char> = None;
    for c in text.chars() {
        if matches!(c, '_' | '-' | '.' | '/' | ':') {
            split.push(' ');
        } else {
            if c.is_uppercase() && previous.is_some_and(|p| p.is_lowercase() || p.is_ascii_digit())
            {
                split.push(' ');
            }
            split.push(c);
        }
        previous = Some(c);
    }
    split
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    fn index(tools: &[(&str, &str, &str, Value)]) -> (ToolIndex, Vec<Map<String, Value>>) {
        let schemas: Vec<_> = tools.iter().map(|t| schema(t.3.clone())).collect();
        let index = ToolIndex::build(tools.iter().zip(&schemas).map(|(t, s)| ToolDocument {
            server: t.0,
            name: t.1,
            alias: None,
            title: None,
            description: Some(t.2),
            input_schema: s,
        }));
        (index, schemas)
    }

    fn best(index: &ToolIndex, query: &str) -> Option<usize> {
        index.rank(query, None, 1).first().map(|r| r.position)
    }

    #[test]
    fn identifiers_are_split_into_words() {
        assert_eq!(
            split_identifiers("list_pull-requests.getByID"),
            "list pull requests get By ID"
        );
        assert_eq!(
            split_identifiers("browser_take_screenshot"),
            "browser take screenshot"
        );
        assert_eq!(split_identifiers("查询天气"), "查询天气");
    }

    #[test]
    fn the_tool_whose_words_answer_the_query_ranks_first() {
        let (index, _) = index(&[
            (
                "github",
                "create_issue",
                "Create a new issue in a repository",
                json!({}),
            ),
            (
                "github",
                "listPullRequests",
                "List pull requests of a repository",
                json!({}),
            ),
            (
                "playwright",
                "browser_take_screenshot",
                "Take a screenshot of the current page",
                json!({"properties": {"fullPage": {"description": "capture the whole scrollable page"}}}),
            ),
            (
                "filesystem",
                "read_file",
                "Read the complete contents of a file",
                json!({}),
            ),
        ]);
        assert_eq!(best(&index, "open pull requests"), Some(1));
        assert_eq!(best(&index, "screenshots of the page"), Some(2));
        assert_eq!(best(&index, "file contents"), Some(3));
        // A parameter's description is searched too.
        assert_eq!(best(&index, "scrollable"), Some(2));
        // Nothing shares a word with it: no tool.
        assert!(index.rank("quantum chromodynamics", None, 5).is_empty());
    }

    #[test]
    fn a_ranking_is_cut_at_the_limit_and_ties_keep_the_list_order() {
        let (index, _) = index(&[
            ("a", "alpha", "send a message", json!({})),
            ("b", "beta", "send a message", json!({})),
            ("c", "gamma", "send a message", json!({})),
        ]);
        let ranked = index.rank("message", None, 2);
        assert_eq!(
            ranked.iter().map(|r| r.position).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(index.len(), 3);
    }

    #[test]
    fn with_meanings_the_tool_meant_ranks_first_even_without_a_shared_word() {
        let (index, _) = index(&[
            ("chat", "post", "send a message", json!({})),
            ("weather", "forecast", "tomorrow's rain and sun", json!({})),
            ("files", "remove", "delete a file", json!({})),
        ]);
        assert!(!index.is_hybrid());
        let index = index.with_meanings(vec![
            vec![1.0, 0.0].into(),
            vec![0.0, 1.0].into(),
            vec![-1.0, 0.0].into(),
        ]);
        assert!(index.is_hybrid());
        let positions = |ranked: Vec<Ranked>| ranked.iter().map(|r| r.position).collect::<Vec<_>>();
        // "message" is chat's word, but the query means the weather.
        assert_eq!(
            positions(index.rank("message", Some(&[0.0, 1.0]), 3)),
            [1, 0, 2]
        );
        // Without the query's vector: words alone, and only the tool sharing one.
        assert_eq!(positions(index.rank("message", None, 3)), [0]);
        // No word in common: meaning alone orders every tool.
        assert_eq!(
            positions(index.rank("will it rain", Some(&[0.0, 1.0]), 2)),
            [1, 0]
        );
        // Chinese characters are left to the meaning (their pinyin would match nothing).
        assert_eq!(without_cjk("删除 file。Ünï"), "   file Ünï");
    }

    #[test]
    fn the_meaning_text_is_the_name_in_words_the_first_paragraph_and_the_parameters() {
        let schema = schema(json!({"properties": {"pullNumber": {}, "repo_name": {}}}));
        let long = format!("Gets a pull request.\n\nDetails: {}", "x".repeat(500));
        let document = ToolDocument {
            server: "github",
            name: "get_pull_request",
            alias: Some("pr"),
            title: Some("Get PR"),
            description: Some(&long),
            input_schema: &schema,
        };
        assert_eq!(
            document.meaning_text(),
            "github: get pull request (Get PR) (pr): Gets a pull request.\nParameters: pull number, repo name"
        );
    }

    #[test]
    fn chinese_matches_chinese() {
        let (index, _) = index(&[
            ("weather", "forecast", "查询城市的天气预报", json!({})),
            ("maps", "route", "规划两地之间的路线", json!({})),
        ]);
        assert_eq!(best(&index, "明天的天气"), Some(0));
        assert_eq!(best(&index, "路线"), Some(1));
    }
}
