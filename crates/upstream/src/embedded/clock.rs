//! `clock`: the current time, in UTC or at a fixed offset.

use chrono::{FixedOffset, Utc};
use rmcp::model::*;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::schema;

pub struct Clock;

/// `+08:00`, `-0530`, `Z` or `UTC`.
fn parse_offset(raw: &str) -> Option<FixedOffset> {
    let raw = raw.trim();
    if raw.eq_ignore_ascii_case("utc") || raw == "Z" {
        return FixedOffset::east_opt(0);
    }
    let (sign, rest) = match raw.as_bytes().first()? {
        b'+' => (1, &raw[1..]),
        b'-' => (-1, &raw[1..]),
        _ => return None,
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let hours: i32 = digits[..2].parse().ok()?;
    let minutes: i32 = digits[2..].parse().ok()?;
    if hours > 14 || minutes > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * (hours * 3600 + minutes * 60))
}

impl ServerHandler for Clock {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "mcp-pool clock",
                env!("CARGO_PKG_VERSION"),
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "now",
                "The current date and time (RFC 3339), in UTC or at the given offset",
                schema(json!({
                    "type": "object",
                    "properties": {"utcOffset": {
                        "type": "string",
                        "description": "e.g. +08:00, -05:30 or UTC (the default)"
                    }},
                })),
            ),
            Tool::new(
                "unix_time",
                "Seconds since 1970-01-01T00:00:00Z",
                schema(json!({"type": "object"})),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = match request.name.as_ref() {
            "now" => {
                let raw = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("utcOffset"))
                    .and_then(Value::as_str)
                    .unwrap_or("UTC");
                let Some(offset) = parse_offset(raw) else {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                        "'{raw}' is not a UTC offset like +08:00"
                    ))])
                    .into());
                };
                Utc::now().with_timezone(&offset).to_rfc3339()
            }
            "unix_time" => Utc::now().timestamp().to_string(),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool '{other}'"),
                    None,
                ));
            }
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_parse_in_the_usual_spellings() {
        assert_eq!(parse_offset("UTC").unwrap().local_minus_utc(), 0);
        assert_eq!(parse_offset("+08:00").unwrap().local_minus_utc(), 8 * 3600);
        assert_eq!(
            parse_offset("-0530").unwrap().local_minus_utc(),
            -(5 * 3600 + 1800)
        );
        assert!(parse_offset("+25:00").is_none());
        assert!(parse_offset("Europe/Paris").is_none());
        assert!(parse_offset("").is_none());
    }
}
