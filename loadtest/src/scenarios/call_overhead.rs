//! `call-overhead`: one tool call on one upstream made (a) directly with an rmcp client,
//! (b) through the pool's HTTP call route, (c) through the gateway endpoint and (d) over
//! gRPC (`CallTool`), for each
//! upstream kind (the fixture over stdio and streamable HTTP, the embedded calculator),
//! at each concurrency; the ratios b/a and c/a come from the same run.

use std::sync::Arc;

use anyhow::Result;
use mcp_pool::embedded::EmbeddedKind;
use mcp_pool::grpc::proto::CallToolRequest;
use mcp_pool::grpc::proto::mcp_pool_client::McpPoolClient;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};

use crate::harness::{Service, Summary, fixture_binary, measure, start_fixture_http};

const USER: &str = "bench";

/// One upstream kind: how to reach it directly and how to register it with the pool.
struct Upstream {
    label: &'static str,
    server: Value,
    tool: &'static str,
    arguments: Value,
}

fn params(tool: &str, arguments: &Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = arguments.as_object().cloned();
    params
}

struct Row {
    upstream: &'static str,
    concurrency: usize,
    direct: Summary,
    pool: Summary,
    gateway: Summary,
    grpc: Summary,
    http_floor: Summary,
}

impl Row {
    fn to_json(&self) -> Value {
        json!({
            "upstream": self.upstream, "concurrency": self.concurrency,
            "direct": self.direct.to_json(), "pool": self.pool.to_json(),
            "gateway": self.gateway.to_json(), "grpc": self.grpc.to_json(),
            "http_floor": self.http_floor.to_json(),
            "pool_added_p50_us": self.pool.p50 - self.direct.p50,
            "gateway_added_p50_us": self.gateway.p50 - self.direct.p50,
            "pool_ratio_p50": self.pool.p50 / self.direct.p50,
            "gateway_ratio_p50": self.gateway.p50 / self.direct.p50,
            "grpc_added_p50_us": self.grpc.p50 - self.direct.p50,
            "grpc_ratio_p50": self.grpc.p50 / self.direct.p50,
        })
    }
}

pub async fn run(calls: usize, levels: Vec<usize>, external: bool, as_json: bool) -> Result<()> {
    let service = Arc::new(if external {
        Service::start_external().await?
    } else {
        Service::start().await?
    });
    service.add_fixture_preset().await?;
    let (_http_child, http_base) = start_fixture_http().await?;
    let grpc = McpPoolClient::connect(service.grpc.clone()).await?;
    let upstreams = [
        Upstream {
            label: "stdio",
            server: json!({"name": "fx-stdio", "preset": "fixture", "autoApproveTools": ["echo"]}),
            tool: "echo",
            arguments: json!({"text": "hello"}),
        },
        Upstream {
            label: "streamableHttp",
            server: json!({"name": "fx-http", "baseUrl": format!("{http_base}/mcp"), "autoApproveTools": ["echo"]}),
            tool: "echo",
            arguments: json!({"text": "hello"}),
        },
        Upstream {
            label: "embedded",
            server: json!({"name": "calc", "type": "embedded", "embedded": "calculator", "autoApproveTools": ["add"]}),
            tool: "add",
            arguments: json!({"a": 1, "b": 2}),
        },
    ];

    let mut rows = Vec::new();
    for upstream in upstreams {
        let direct = Arc::new(match upstream.label {
            "stdio" => {
                let mut command = tokio::process::Command::new(fixture_binary()?);
                command.arg("stdio");
                ().serve(TokioChildProcess::new(command)?).await?
            }
            "streamableHttp" => {
                // Kept-alive connections, like the pool's own client.
                ().serve(StreamableHttpClientTransport::with_client(
                    reqwest::Client::new(),
                    rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                        format!("{http_base}/mcp"),
                    ),
                ))
                .await?
            }
            _ => ().serve(mcp_pool::embedded::start(EmbeddedKind::Calculator)).await?,
        });
        let server_name = upstream.server["name"].as_str().unwrap_or_default();
        let server = service.create_server(USER, upstream.server.clone()).await?;
        let route = Arc::new(format!(
            "/api/mcp-servers/{server}/tools/{}/call",
            upstream.tool
        ));
        let gateway = Arc::new(
            service
                .gateway_client(USER, upstream.label, &server)
                .await?,
        );
        let direct_params = Arc::new(params(upstream.tool, &upstream.arguments));
        let gateway_params = Arc::new(params(
            // The gateway's name for the tool under the default settings the service runs on.
            &mcp_pool::domain::tool_name::gateway_name(
                server_name,
                &mcp_pool::Settings::defaults().gateway.separator,
                upstream.tool,
            ),
            &upstream.arguments,
        ));
        let rest_body = Arc::new(json!({"arguments": upstream.arguments}));
        let grpc_call = Arc::new(CallToolRequest {
            server_id: server.clone(),
            tool_name: upstream.tool.to_owned(),
            arguments_json: upstream.arguments.to_string(),
            ..Default::default()
        });

        for &concurrency in &levels {
            let (peer, call) = (direct.clone(), direct_params.clone());
            let direct_summary = measure(calls, concurrency, move || {
                let (peer, call) = (peer.clone(), call.clone());
                async move {
                    peer.call_tool((*call).clone()).await?;
                    Ok(())
                }
            })
            .await?;
            let (svc, path, body) = (service.clone(), route.clone(), rest_body.clone());
            let pool_summary = measure(calls, concurrency, move || {
                let (svc, path, body) = (svc.clone(), path.clone(), body.clone());
                async move {
                    svc.post(&path, USER, (*body).clone()).await?;
                    Ok(())
                }
            })
            .await?;
            let (peer, call) = (gateway.clone(), gateway_params.clone());
            let gateway_summary = measure(calls, concurrency, move || {
                let (peer, call) = (peer.clone(), call.clone());
                async move {
                    let result = peer.call_tool((*call).clone()).await?;
                    anyhow::ensure!(result.is_error != Some(true), "gateway call failed");
                    Ok(())
                }
            })
            .await?;
            let (client, call, key) = (grpc.clone(), grpc_call.clone(), service.key().to_owned());
            let grpc_summary = measure(calls, concurrency, move || {
                // tonic clients are cheap clones sharing one HTTP/2 connection.
                let (mut client, call, key) = (client.clone(), call.clone(), key.clone());
                async move {
                    let mut request = tonic::Request::new((*call).clone());
                    request
                        .metadata_mut()
                        .insert("authorization", format!("Bearer {key}").parse()?);
                    request.metadata_mut().insert("x-user-id", USER.parse()?);
                    let reply = client.call_tool(request).await?.into_inner();
                    anyhow::ensure!(reply.success, "gRPC call failed");
                    Ok(())
                }
            })
            .await?;
            let svc = service.clone();
            let http_floor = measure(calls, concurrency, move || {
                let svc = svc.clone();
                async move {
                    svc.client
                        .get(format!("{}/healthz", svc.base))
                        .send()
                        .await?
                        .error_for_status()?;
                    Ok(())
                }
            })
            .await?;
            rows.push(Row {
                upstream: upstream.label,
                concurrency,
                direct: direct_summary,
                pool: pool_summary,
                gateway: gateway_summary,
                grpc: grpc_summary,
                http_floor,
            });
        }
    }
    service.stop().await?;

    if as_json {
        let rows: Vec<Value> = rows.iter().map(Row::to_json).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "call-overhead: {calls} calls per cell; (a) direct rmcp client, (b) pool HTTP route, \
         (c) gateway /mcp/assistants/{{id}} with an rmcp client, (d) gRPC CallTool; latencies in µs"
    );
    println!(
        "{:<15} {:>4} | {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7} {:>5} | {:>7} {:>7} {:>7} {:>5} | {:>7} {:>7} {:>7} {:>5} | {:>7}",
        "upstream",
        "conc",
        "a p50",
        "a p99",
        "a c/s",
        "b p50",
        "b p99",
        "b c/s",
        "b/a",
        "c p50",
        "c p99",
        "c c/s",
        "c/a",
        "d p50",
        "d p99",
        "d c/s",
        "d/a",
        "http p50"
    );
    for row in &rows {
        println!(
            "{:<15} {:>4} | {:>7.0} {:>7.0} {:>7.0} | {:>7.0} {:>7.0} {:>7.0} {:>5.2} | {:>7.0} {:>7.0} {:>7.0} {:>5.2} | {:>7.0} {:>7.0} {:>7.0} {:>5.2} | {:>7.0}",
            row.upstream,
            row.concurrency,
            row.direct.p50,
            row.direct.p99,
            row.direct.throughput,
            row.pool.p50,
            row.pool.p99,
            row.pool.throughput,
            row.pool.p50 / row.direct.p50,
            row.gateway.p50,
            row.gateway.p99,
            row.gateway.throughput,
            row.gateway.p50 / row.direct.p50,
            row.grpc.p50,
            row.grpc.p99,
            row.grpc.throughput,
            row.grpc.p50 / row.direct.p50,
            row.http_floor.p50
        );
    }
    Ok(())
}
