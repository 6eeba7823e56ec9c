//! Integration tests: the real service over HTTP, one test binary.

// Test and load clients dial what they are told: the outbound-client rule (clippy.toml)
// is for the service.
#![allow(clippy::disallowed_methods)]

mod assistant_tools;
mod assistants;
mod audit;
mod auth;
mod catalog;
mod chat;
mod cli;
mod cluster;
mod conformance;
mod console;
mod console_browser;
mod elicitation;
mod embedded;
mod error_texts;
mod fidelity;
mod fixture_stdio;
mod gateway;
mod gateway_features;
mod global_servers;
mod governance;
mod grpc;
mod health;
mod helpers;
mod hostile_servers;
mod http2_upstreams;
mod isolation;
mod js_clients;
mod keys;
mod llm_script;
mod logging;
mod metrics;
mod nginx;
mod oauth;
mod oauth_fixture;
mod oauth_sdk_as;
mod openapi;
mod operators;
mod outbound;
mod persistence;
mod policies;
mod pool_faults;
mod pool_transports;
mod presets;
mod processes;
mod rate_limits;
mod sampling;
mod secrets;
mod server_notices;
mod servers;
mod session_scope;
mod ssrf;
mod storage_faults;
mod tasks;
mod teardown;
mod tool_call_rows;
mod tool_calls;
mod upstream_sessions;
mod upstream_tasks;
mod upstreams;
mod url_secrets;
mod validation;
mod xiaozhi;
