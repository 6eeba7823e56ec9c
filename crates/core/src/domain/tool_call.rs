//! ToolCallRecord (seed 001): one tool call of an assistant message and its outcome.
//!
//! The record is the wire format seed 001 defines: the API shows a message's records
//! embedded in it, in order. The store keeps one `tool_calls` row per record (keyed by
//! message and call id), so changing one record writes one row.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolCallStatus {
    /// Parked, waiting for the user's approval.
    Pending,
    Invoking,
    Done,
    Error,
    Cancelled,
}

impl ToolCallStatus {
    pub fn is_open(self) -> bool {
        matches!(self, ToolCallStatus::Pending | ToolCallStatus::Invoking)
    }

    /// The wire name (as serialized).
    pub fn as_str(self) -> &'static str {
        match self {
            ToolCallStatus::Pending => "pending",
            ToolCallStatus::Invoking => "invoking",
            ToolCallStatus::Done => "done",
            ToolCallStatus::Error => "error",
            ToolCallStatus::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRecord {
    /// The model's id for the call.
    pub id: String,
    pub server_id: Option<Uuid>,
    pub server_name: Option<String>,
    pub tool_name: Option<String>,
    /// The name the model used (`mcp__{server}__{tool}`).
    pub display_name: String,
    pub arguments: Value,
    pub status: ToolCallStatus,
    /// The tool's result (MCP content), or a message the model can read.
    pub response: Value,
    pub is_error: bool,
}
