use super::*;
use proptest::prelude::*;
use serde_json::json;

fn call(server: Option<&str>, tool: &str, arguments: Value) -> Instruction {
    Instruction {
        server: server.map(str::to_owned),
        tool: tool.to_owned(),
        arguments,
        confidence: None,
    }
}

/// Real-world shapes of model output: (reply, expected calls, expected visible text).
#[test]
fn malformed_replies_from_real_models_are_understood() {
    let echo = |text: &str| call(Some("fx"), "echo", json!({"text": text}));
    let cases: Vec<(&str, Vec<Instruction>, &str)> = vec![
        (
            "Sure.\n```json\n{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":{\"text\":\"hi\"}}\n```",
            vec![echo("hi")],
            "Sure.",
        ),
        // No language tag, CRLF line ends.
        (
            "```\r\n{\"type\": \"use_mcp_tool\", \"server_name\": \"fx\", \"tool_name\": \"echo\", \"arguments\": {\"text\": \"a\"}}\r\n```",
            vec![echo("a")],
            "",
        ),
        // A raw newline inside a string.
        (
            "```json\n{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":{\"text\":\"line1\nline2\"}}\n```",
            vec![echo("line1\nline2")],
            "",
        ),
        // Unescaped quotes inside a string.
        (
            "```json\n{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":{\"text\":\"say \"hi\" now\"}}\n```",
            vec![echo("say \"hi\" now")],
            "",
        ),
        // Trailing commas.
        (
            "```json\n{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":{\"text\":\"x\",},}\n```",
            vec![echo("x")],
            "",
        ),
        // Single quotes and Python literals.
        (
            "{'type': 'use_mcp_tool', 'server_name': 'fx', 'tool_name': 'add', 'arguments': {'a': 1, 'b': 2, 'exact': True, 'note': None}}",
            vec![call(
                Some("fx"),
                "add",
                json!({"a": 1, "b": 2, "exact": true, "note": null}),
            )],
            "",
        ),
        // No fence, prose around the object.
        (
            "I will call it: {\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":{\"text\":\"{braces}\"}} and then tell you.",
            vec![echo("{braces}")],
            "I will call it:  and then tell you.",
        ),
        // Arguments as a JSON string.
        (
            "```json\n{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":\"{\\\"text\\\":\\\"s\\\"}\"}\n```",
            vec![echo("s")],
            "",
        ),
        // Two blocks: two calls.
        (
            "```json\n{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":{\"text\":\"1\"}}\n```\nand\n```json\n{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":{\"text\":\"2\"}}\n```",
            vec![echo("1"), echo("2")],
            "and",
        ),
        // Cut off by max tokens: no closing fence, no closing braces.
        (
            "```json\n{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":{\"text\":\"cut",
            vec![echo("cut")],
            "",
        ),
        // A comment inside the JSON.
        (
            "```json\n{\n  // calling echo\n  \"type\": \"use_mcp_tool\", \"server_name\": \"fx\", \"tool_name\": \"echo\", \"arguments\": {\"text\": \"c\"}\n}\n```",
            vec![echo("c")],
            "",
        ),
        // Smart quotes from a chat UI.
        (
            "{\u{201c}type\u{201d}: \u{201c}use_mcp_tool\u{201d}, \u{201c}server_name\u{201d}: \u{201c}fx\u{201d}, \u{201c}tool_name\u{201d}: \u{201c}echo\u{201d}, \u{201c}arguments\u{201d}: {\u{201c}text\u{201d}: \u{201c}q\u{201d}}}",
            vec![echo("q")],
            "",
        ),
        // Seed 003's intent object selecting a tool.
        (
            "```json\n{\"requires_tool\": true, \"selected_tool\": \"add\", \"confidence\": 0.92, \"reasoning\": \"sum\", \"direct_response\": \"\", \"tool_parameters\": {\"a\": 2, \"b\": 3}}\n```",
            vec![Instruction {
                server: None,
                tool: "add".into(),
                arguments: json!({"a": 2, "b": 3}),
                confidence: Some(0.92),
            }],
            "",
        ),
        // Intent with requires_tool as a string and a raw newline in reasoning.
        (
            "{\"requires_tool\": \"true\", \"selected_tool\": \"echo\", \"confidence\": \"0.8\", \"reasoning\": \"two\nlines\", \"tool_parameters\": {\"text\": \"z\"},}",
            vec![Instruction {
                server: None,
                tool: "echo".into(),
                arguments: json!({"text": "z"}),
                confidence: Some(0.8),
            }],
            "",
        ),
        // Intent needing no tool: the direct response is the answer.
        (
            "{\"requires_tool\": false, \"selected_tool\": \"none\", \"confidence\": 0.0, \"direct_response\": \"Hello there!\", \"tool_parameters\": {}}",
            vec![],
            "Hello there!",
        ),
        // requires_tool true but no tool named: treated as no call.
        (
            "{\"requires_tool\": true, \"selected_tool\": \"none\", \"direct_response\": \"I cannot.\"}",
            vec![],
            "I cannot.",
        ),
        // Plain prose with braces that are not JSON.
        (
            "Use a set like {a, b} in maths.",
            vec![],
            "Use a set like {a, b} in maths.",
        ),
        // A code sample that is JSON but no instruction stays in the text.
        (
            "Here is config:\n```json\n{\"port\": 8080}\n```",
            vec![],
            "Here is config:\n```json\n{\"port\": 8080}\n```",
        ),
        // An array of instructions.
        (
            "```json\n[{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":{\"text\":\"1\"}},{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":{\"text\":\"2\"}}]\n```",
            vec![echo("1"), echo("2")],
            "",
        ),
        // Two objects in one fence.
        (
            "```json\n{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":{\"text\":\"1\"}}\n{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":{\"text\":\"2\"}}\n```",
            vec![echo("1"), echo("2")],
            "",
        ),
        // A Windows path with backslashes the model did not escape.
        (
            "```json\n{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\",\"arguments\":{\"text\":\"C:\\dir\\sub\"}}\n```",
            vec![echo("C:\\dir\\sub")],
            "",
        ),
        // Empty arguments.
        (
            "```json\n{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\"tool_name\":\"echo\"}\n```",
            vec![call(Some("fx"), "echo", json!({}))],
            "",
        ),
    ];
    for (reply, calls, text) in cases {
        let parsed = parse_reply(reply);
        assert_eq!(parsed.instructions, calls, "calls of {reply:?}");
        assert_eq!(parsed.text, text, "text of {reply:?}");
    }
}

#[test]
fn the_system_prompt_lists_every_tool_under_its_server() {
    let schema = json!({"type": "object"});
    let prompt = system_prompt(
        Some("Be brief."),
        &[
            PromptTool {
                server: "fx",
                tool: "echo",
                description: "Echo text",
                schema: &schema,
            },
            PromptTool {
                server: "fx",
                tool: "add",
                description: "Add",
                schema: &schema,
            },
        ],
    );
    assert!(prompt.starts_with("Be brief."));
    assert_eq!(prompt.matches("## server \"fx\"").count(), 1);
    assert!(prompt.contains("- \"echo\": Echo text"));
    assert!(prompt.contains("use_mcp_tool"));
}

fn instruction_json() -> impl Strategy<Value = (String, String)> {
    ("[a-z_]{1,12}", "[ -~]{0,40}").prop_map(|(tool, text)| {
        let block = json!({
            "type": "use_mcp_tool",
            "server_name": "srv",
            "tool_name": tool,
            "arguments": {"text": text},
        });
        (tool, block.to_string())
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_panics_on_any_text(reply in "\\PC{0,400}") {
        let _ = parse_reply(&reply);
        let _ = repair(&reply);
    }

    #[test]
    fn never_panics_on_json_like_noise(reply in "[{}\\[\\]\"':,\\\\ a-z0-9\n`]{0,200}") {
        let _ = parse_reply(&reply);
    }

    #[test]
    fn an_instruction_inside_prose_is_found(
        before in "[A-Za-z .,!?]{0,80}",
        after in "[A-Za-z .,!?]{0,80}",
        (tool, block) in instruction_json(),
        fenced in any::<bool>(),
    ) {
        let reply = if fenced {
            format!("{before}\n```json\n{block}\n```\n{after}")
        } else {
            format!("{before} {block} {after}")
        };
        let parsed = parse_reply(&reply);
        prop_assert_eq!(parsed.instructions.len(), 1);
        prop_assert_eq!(&parsed.instructions[0].tool, &tool);
        prop_assert!(!parsed.text.contains("use_mcp_tool"));
    }

    #[test]
    fn repair_leaves_valid_json_intact(
        text in "[^\u{201c}\u{201d}]{0,40}",
        number in any::<i32>(),
        flag in any::<bool>(),
    ) {
        let original = json!({"s": text, "n": number, "b": flag, "list": [1, "x", null]});
        let repaired: Value = serde_json::from_str(&repair(&original.to_string())).unwrap();
        prop_assert_eq!(repaired, original);
    }
}
