use rmcp::model::{ClientRequest, JsonRpcMessage, RequestId, ServerResult};
use tokio::io::AsyncBufReadExt;

use super::lines::KEPT_BUFFER;
use super::*;

async fn read_all(input: &[u8], max: usize) -> (Vec<RxJsonRpcMessage<RoleClient>>, usize) {
    let mut reader = LineReader::new(input, max, PendingCalls::default());
    let mut out = Vec::new();
    while let Some(message) = reader.next_message().await {
        out.push(message);
    }
    (out, reader.line.capacity())
}

fn error_code(message: &RxJsonRpcMessage<RoleClient>) -> Option<(i32, String)> {
    let value = serde_json::to_value(message).unwrap();
    Some((
        value["error"]["code"].as_i64()? as i32,
        value["id"].to_string(),
    ))
}

#[tokio::test]
async fn an_oversized_answer_fails_its_request_wherever_its_id_stands() {
    let big = "x".repeat(10_000);
    let input = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{{\"text\":\"{big}\"}}}}\n\
         {{\"result\":{{\"text\":\"{big}\"}},\"jsonrpc\":\"2.0\",\"id\":\"abc\"}}\n\
         {{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{{}}}}\n"
    );
    let (messages, _) = read_all(input.as_bytes(), 4096).await;
    assert_eq!(messages.len(), 3);
    assert_eq!(
        error_code(&messages[0]),
        Some((MESSAGE_TOO_LARGE_CODE, "7".into()))
    );
    assert_eq!(
        error_code(&messages[1]),
        Some((MESSAGE_TOO_LARGE_CODE, "\"abc\"".into()))
    );
    assert_eq!(error_code(&messages[2]), None, "the next message is intact");
}

/// The answers a server sends while a call is unanswered come out as rmcp reads them:
/// the call's own as its tool result, others (a list, a task, a call that was never
/// made) as the general reading makes them; and the call is forgotten once answered.
#[tokio::test]
async fn answers_read_while_calls_are_pending_come_out_as_rmcp_reads_them() {
    let calls = PendingCalls::default();
    let call = |id: i64, name: &str| {
        let request = ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
            rmcp::model::CallToolRequestParams::new(name.to_owned()),
        ));
        calls.outgoing(&JsonRpcMessage::request(request, RequestId::Number(id)));
    };
    call(1, "echo");
    call(2, "slow");
    call(3, "tasked");
    let input = concat!(
        r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":3,"result":{"resultType":"task","taskId":"t1","status":"working","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttlMs":null}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"no"}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
        "\n",
    );
    let mut reader = LineReader::new(input.as_bytes(), 4096, calls.clone());
    let mut read = Vec::new();
    while let Some(message) = reader.next_message().await {
        read.push(message);
    }
    let general =
        |line: &str| -> RxJsonRpcMessage<RoleClient> { serde_json::from_str(line).unwrap() };
    let lines: Vec<&str> = input.lines().collect();
    assert_eq!(read.len(), lines.len());
    for (message, line) in read.iter().zip(&lines) {
        assert_eq!(
            serde_json::to_value(message).unwrap(),
            serde_json::to_value(general(line)).unwrap(),
            "{line}"
        );
    }
    let result = |message: &RxJsonRpcMessage<RoleClient>| match message {
        JsonRpcMessage::Response(answer) => Some(answer.result.clone()),
        _ => None,
    };
    assert!(matches!(
        result(&read[0]),
        Some(ServerResult::CallToolResult(_))
    ));
    assert!(matches!(
        result(&read[1]),
        Some(ServerResult::ListToolsResult(_))
    ));
    assert!(matches!(read[2], JsonRpcMessage::Notification(_)));
    assert!(matches!(
        result(&read[3]),
        Some(ServerResult::CreateTaskResult(_))
    ));
    assert!(matches!(read[4], JsonRpcMessage::Error(_)));
    assert!(calls.set().is_empty(), "every call was answered");
}

#[tokio::test]
async fn a_large_message_does_not_keep_its_buffer() {
    let big = "y".repeat(2 * 1024 * 1024);
    let input = format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{\"t\":\"{big}\"}}}}\n");
    let (messages, capacity) = read_all(input.as_bytes(), 16 * 1024 * 1024).await;
    assert_eq!(messages.len(), 1);
    assert!(capacity <= KEPT_BUFFER, "kept {capacity} bytes");
}

#[tokio::test]
async fn dropping_the_transport_ends_the_whole_group() {
    let mut command = tokio::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg("sleep 60 & echo $! ; exec cat")
        .stderr(Stdio::null());
    let (mut transport, _) = StdioTransport::spawn(StdioCommand {
        command,
        max_message_bytes: 1024,
        limits: Default::default(),
        egress: None,
        sandboxed: false,
    })
    .unwrap();
    let pgid = transport.pid() as i32;
    assert!(guard_lists(pgid));
    // The grandchild's pid, printed by the shell, is not a message: read it raw.
    let mut first = String::new();
    transport.reader.read.read_line(&mut first).await.unwrap();
    let grandchild: i32 = first.trim().parse().unwrap();
    drop(transport);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while (group_alive(pgid) || guard_lists(pgid)) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!group_alive(pgid), "the group is gone");
    assert!(!guard_lists(pgid), "and no longer guarded");
    let state = std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
    assert!(
        state.is_empty() || state.contains(") Z"),
        "the grandchild is gone: {state}"
    );
}
