//! Integration tests: the real service over HTTP, one test binary.

mod assistant_tools;
mod assistants;
mod auth;
mod chat;
mod cli;
mod embedded;
mod gateway;
mod global_servers;
mod health;
mod helpers;
mod isolation;
mod keys;
mod llm_script;
mod logging;
mod metrics;
mod persistence;
mod pool_faults;
mod pool_transports;
mod presets;
mod rate_limits;
mod secrets;
mod servers;
mod tool_calls;
mod upstreams;
mod validation;
mod xiaozhi;
