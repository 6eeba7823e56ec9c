//! Who asked for a tool call and through which door: what its audit row records.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The door a tool call came in by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallVia {
    /// `POST /api/mcp-servers/{id}/tools/{tool}/call` (and its task form).
    #[default]
    Rest,
    /// A call of an assistant message: submitted to the REST API or made by the agent
    /// loop, run once approved or auto-approved.
    Chat,
    /// An assistant's MCP endpoint (`/mcp/assistants/{id}`).
    Gateway,
    /// A Xiaozhi bridge.
    Xiaozhi,
    /// The gRPC interface.
    Grpc,
}

impl CallVia {
    pub fn as_str(self) -> &'static str {
        match self {
            CallVia::Rest => "rest",
            CallVia::Chat => "chat",
            CallVia::Gateway => "gateway",
            CallVia::Xiaozhi => "xiaozhi",
            CallVia::Grpc => "grpc",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [
            CallVia::Rest,
            CallVia::Chat,
            CallVia::Gateway,
            CallVia::Xiaozhi,
            CallVia::Grpc,
        ]
        .into_iter()
        .find(|via| via.as_str() == raw)
    }
}

/// Who asked for a call: the door, the credential and, for a call of an assistant
/// message, the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallOrigin {
    pub via: CallVia,
    /// The API key (REST, gRPC) or gateway token the call came with.
    pub key_id: Option<Uuid>,
    /// `key_id` is an admin's key acting for the user (support trying a user's server).
    pub by_admin: bool,
    /// A server's view (MCP Apps) made the call through its host: only a tool of the
    /// view's own server that is visible to apps.
    pub from_app: bool,
    /// The assistant message the call belongs to.
    pub message: Option<Uuid>,
}

impl CallOrigin {
    pub fn new(via: CallVia) -> Self {
        Self {
            via,
            ..Self::default()
        }
    }

    pub fn with_key(self, key_id: Uuid, by_admin: bool) -> Self {
        Self {
            key_id: Some(key_id),
            by_admin,
            ..self
        }
    }

    pub fn from_app(self) -> Self {
        Self {
            from_app: true,
            ..self
        }
    }

    pub fn with_message(self, message: Uuid) -> Self {
        Self {
            message: Some(message),
            ..self
        }
    }
}
