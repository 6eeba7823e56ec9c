//! Prompt mode, for models without function calling: the tools are described in the
//! system prompt and the model answers with JSON instructions, which are found here.
//!
//! Two instruction shapes are understood: seed 000's
//! `{"type":"use_mcp_tool","server_name",…,"tool_name",…,"arguments":{…}}` blocks and seed
//! 003's intent object (`requires_tool`, `selected_tool`, `confidence`, `tool_parameters`,
//! `direct_response`). Models get JSON wrong in the same few ways, so extraction goes in
//! seed 003's stages: fenced blocks, then balanced braces anywhere in the text, each
//! candidate parsed as-is and then repaired (raw newlines and stray quotes inside strings,
//! trailing commas, single quotes, Python literals, comments, a truncated end); when
//! nothing parses, the reply is plain text.

use std::fmt::Write as _;
use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

/// One tool call found in a reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Instruction {
    /// `server_name`, when the model gave one.
    pub server: Option<String>,
    pub tool: String,
    /// Always an object (missing arguments become `{}`); a non-object stays as it came so
    /// that validation can report it.
    pub arguments: Value,
    pub confidence: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParsedReply {
    pub instructions: Vec<Instruction>,
    /// What the user should read: the reply without its instructions, or the intent's
    /// `direct_response`.
    pub text: String,
}

/// A tool as the prompt lists it.
pub struct PromptTool<'a> {
    pub server: &'a str,
    pub tool: &'a str,
    pub description: &'a str,
    pub schema: &'a Value,
}

/// The system prompt of a prompt-mode turn: the caller's own prompt, the tools and the
/// instruction format.
pub fn system_prompt(base: Option<&str>, tools: &[PromptTool<'_>]) -> String {
    let mut prompt = String::new();
    if let Some(base) = base.filter(|b| !b.trim().is_empty()) {
        prompt.push_str(base.trim());
        prompt.push_str("\n\n");
    }
    if tools.is_empty() {
        prompt.push_str("No tools are available; answer in plain text.");
        return prompt;
    }
    prompt.push_str(
        "You can use the tools listed below. To use one, reply with a JSON block in exactly \
         this form:\n\n```json\n{\"type\": \"use_mcp_tool\", \"server_name\": \"<server>\", \
         \"tool_name\": \"<tool>\", \"arguments\": {\"<parameter>\": \"<value>\"}}\n```\n\n\
         Use one block per call; several blocks call several tools. The arguments must match \
         the tool's input schema. The results come back in a message starting with \
         \"Tool results:\"; then continue. When no tool is needed, reply in plain text \
         without any JSON block.\n\nAvailable tools:\n",
    );
    let mut current_server = None;
    for tool in tools {
        if current_server != Some(tool.server) {
            let _ = write!(prompt, "\n## server \"{}\"\n", tool.server);
            current_server = Some(tool.server);
        }
        let _ = writeln!(
            prompt,
            "- \"{}\": {}\n  input schema: {}",
            tool.tool,
            tool.description.trim(),
            tool.schema
        );
    }
    prompt
}

static FENCED: LazyLock<Regex> = LazyLock::new(|| {
    // An unterminated fence (a reply cut off by max tokens) runs to the end of the text.
    Regex::new(r"(?s)```[ \t]*[A-Za-z0-9_+\-]*[ \t]*\r?\n?(.*?)(?:```|\z)")
        .expect("the fence pattern compiles")
});

/// What one JSON candidate turned out to be.
enum Found {
    Calls(Vec<Instruction>),
    /// An intent object that needs no tool, with its direct response.
    Direct(String),
}

pub fn parse_reply(reply: &str) -> ParsedReply {
    let mut consumed: Vec<Range<usize>> = Vec::new();
    let mut instructions = Vec::new();
    let mut direct: Option<String> = None;
    let mut take = |found: Found, span: Range<usize>, consumed: &mut Vec<Range<usize>>| {
        match found {
            Found::Calls(calls) => instructions.extend(calls),
            Found::Direct(text) => {
                direct.get_or_insert(text);
            }
        }
        consumed.push(span);
    };
    // Stage 1: fenced blocks.
    for captures in FENCED.captures_iter(reply) {
        let (whole, body) = (
            captures.get(0).expect("group 0"),
            captures.get(1).expect("group 1"),
        );
        let trimmed = body.as_str().trim();
        if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
            continue;
        }
        if let Some(found) = parse_lenient(trimmed).and_then(|v| interpret(&v)) {
            take(found, whole.range(), &mut consumed);
        } else {
            // A block holding several objects, or prose around one.
            for span in object_spans(body.as_str()) {
                let span = body.start() + span.start..body.start() + span.end;
                if let Some(found) = parse_lenient(&reply[span.clone()]).and_then(|v| interpret(&v))
                {
                    take(found, whole.range(), &mut consumed);
                }
            }
        }
    }
    // Stage 2: balanced braces anywhere, when no fenced block held anything.
    if consumed.is_empty() {
        for span in object_spans(reply) {
            if let Some(found) = parse_lenient(&reply[span.clone()]).and_then(|v| interpret(&v)) {
                take(found, span, &mut consumed);
            }
        }
    }
    // Stage 3: the visible text.
    let remaining = remove_spans(reply, &mut consumed);
    let text = match direct {
        Some(direct) if instructions.is_empty() && !direct.trim().is_empty() => {
            direct.trim().to_owned()
        }
        _ => remaining,
    };
    ParsedReply { instructions, text }
}

fn remove_spans(text: &str, spans: &mut [Range<usize>]) -> String {
    spans.sort_by_key(|s| s.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for span in spans.iter() {
        if span.start >= at {
            out.push_str(&text[at..span.start]);
        }
        at = at.max(span.end);
    }
    out.push_str(&text[at..]);
    BLANK_LINES.replace_all(out.trim(), "\n\n").into_owned()
}

static BLANK_LINES: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\n{3,}").expect("the blank-lines pattern compiles"));

fn is_true(value: Option<&Value>) -> Option<bool> {
    match value? {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" => Some(true),
            "false" | "no" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

fn text_of(value: Option<&Value>) -> Option<String> {
    value
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Arguments as an object where possible: a JSON string of an object is opened up.
fn arguments_of(value: Option<&Value>) -> Value {
    match value {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(Value::String(text)) => match parse_lenient(text) {
            Some(object @ Value::Object(_)) => object,
            _ if text.trim().is_empty() => Value::Object(Default::default()),
            _ => Value::String(text.clone()),
        },
        Some(other) => other.clone(),
    }
}

fn interpret(value: &Value) -> Option<Found> {
    match value {
        Value::Array(items) => {
            let calls: Vec<Instruction> = items
                .iter()
                .filter_map(|item| match interpret(item) {
                    Some(Found::Calls(calls)) => Some(calls),
                    _ => None,
                })
                .flatten()
                .collect();
            (!calls.is_empty()).then_some(Found::Calls(calls))
        }
        Value::Object(object) => {
            let kind = object.get("type").and_then(Value::as_str).map(str::trim);
            if kind.is_some_and(|k| k.eq_ignore_ascii_case("use_mcp_tool")) {
                let tool = text_of(object.get("tool_name"))
                    .or_else(|| text_of(object.get("tool")))
                    .or_else(|| text_of(object.get("name")))?;
                return Some(Found::Calls(vec![Instruction {
                    server: text_of(object.get("server_name"))
                        .or_else(|| text_of(object.get("server"))),
                    tool,
                    arguments: arguments_of(object.get("arguments")),
                    confidence: None,
                }]));
            }
            let requires = is_true(object.get("requires_tool"))?;
            let selected = text_of(object.get("selected_tool"))
                .filter(|t| !t.eq_ignore_ascii_case("none") && !t.eq_ignore_ascii_case("null"));
            match (requires, selected) {
                (true, Some(tool)) => Some(Found::Calls(vec![Instruction {
                    server: text_of(object.get("server_name")),
                    tool,
                    arguments: arguments_of(object.get("tool_parameters")),
                    confidence: object.get("confidence").and_then(|c| match c {
                        Value::Number(n) => n.as_f64(),
                        Value::String(s) => s.trim().parse().ok(),
                        _ => None,
                    }),
                }])),
                _ => Some(Found::Direct(
                    text_of(object.get("direct_response")).unwrap_or_default(),
                )),
            }
        }
        _ => None,
    }
}

/// Byte ranges of top-level `{…}` objects, tracking strings so braces inside them do not
/// count; an object left open at the end runs to the end (a cut-off reply).
fn object_spans(text: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' if depth > 0 => in_string = true,
            '{' => {
                if depth == 0 {
                    start = i;
                }
                depth += 1;
            }
            '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    spans.push(start..i + 1);
                }
            }
            _ => {}
        }
    }
    if depth > 0 {
        spans.push(start..text.len());
    }
    spans
}

/// Parses JSON as written, else after [`repair`].
pub fn parse_lenient(text: &str) -> Option<Value> {
    serde_json::from_str(text)
        .ok()
        .or_else(|| serde_json::from_str(&repair(text)).ok())
}

/// Fixes the mistakes models make in JSON, in one pass.
pub(crate) fn repair(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 16);
    // The quote character of the string we are in, if any.
    let mut quote: Option<char> = None;
    let mut closers: Vec<char> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if let Some(q) = quote {
            match c {
                '\\' => {
                    let next = chars.get(i + 1).copied();
                    match next {
                        Some('"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't' | 'u') => {
                            out.push('\\');
                            out.push(next.expect("matched"));
                            i += 2;
                            continue;
                        }
                        // \' inside a single-quoted string is just a quote.
                        Some('\'') => {
                            out.push('\'');
                            i += 2;
                            continue;
                        }
                        // An escape JSON does not know: keep the backslash literally.
                        _ => out.push_str("\\\\"),
                    }
                }
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                '"' | '\'' | '\u{201c}' | '\u{201d}' if closes(q, c) => {
                    if ends_string(&chars, i + 1) {
                        out.push('"');
                        quote = None;
                    } else if c == '\'' {
                        out.push('\'');
                    } else {
                        out.push_str("\\\"");
                    }
                }
                '"' => out.push_str("\\\""),
                c => out.push(c),
            }
            i += 1;
            continue;
        }
        match c {
            '"' | '\u{201c}' | '\u{201d}' => {
                quote = Some('"');
                out.push('"');
            }
            '\'' => {
                quote = Some('\'');
                out.push('"');
            }
            '{' => {
                closers.push('}');
                out.push(c);
            }
            '[' => {
                closers.push(']');
                out.push(c);
            }
            '}' | ']' => {
                // A trailing comma before the closer.
                let trimmed = out.trim_end().len();
                if out[..trimmed].ends_with(',') {
                    out.truncate(trimmed - 1);
                }
                if closers.last() == Some(&c) {
                    closers.pop();
                }
                out.push(c);
            }
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            c if c.is_ascii_alphabetic() => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                out.push_str(match word.as_str() {
                    "True" => "true",
                    "False" => "false",
                    "None" | "undefined" => "null",
                    _ => &word,
                });
                continue;
            }
            c => out.push(c),
        }
        i += 1;
    }
    // A cut-off reply: close what is open.
    if quote.is_some() {
        out.push('"');
    }
    let trimmed = out.trim_end().len();
    if out[..trimmed].ends_with(',') {
        out.truncate(trimmed - 1);
    }
    while let Some(closer) = closers.pop() {
        out.push(closer);
    }
    out
}

fn closes(open: char, c: char) -> bool {
    match open {
        '\'' => c == '\'',
        _ => matches!(c, '"' | '\u{201c}' | '\u{201d}'),
    }
}

/// Whether a quote at `from - 1` ends its string: what follows (after blanks) is a
/// separator, a closer, a colon or the end. Otherwise it is a quote inside the text.
fn ends_string(chars: &[char], from: usize) -> bool {
    let next = chars[from..].iter().find(|c| !c.is_whitespace());
    matches!(next, None | Some(',' | '}' | ']' | ':'))
}

#[cfg(test)]
mod tests;
