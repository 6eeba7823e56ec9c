//! MCP Apps (the `io.modelcontextprotocol/ui` extension, SEP-1865): what a tool's `_meta`
//! says of its view and of who may call it, and how the gateway names a server's views.
//!
//! A tool names its view by `_meta.ui.resourceUri` (or the older flat
//! `_meta["ui/resourceUri"]`), a `ui://` resource of type [`APP_MIME_TYPE`], and who may
//! call it by `_meta.ui.visibility`: `"model"` (offered to models), `"app"` (callable by a
//! view of its server); both when it says nothing.

use serde_json::{Map, Value};

/// The extension's id: the key of `extensions` in capabilities.
pub const UI_EXTENSION: &str = "io.modelcontextprotocol/ui";
/// The MIME type of a view's HTML.
pub const APP_MIME_TYPE: &str = "text/html;profile=mcp-app";
/// The older, flat key of a tool's view, which servers still write beside `ui`.
const FLAT_RESOURCE_URI: &str = "ui/resourceUri";
const SCHEME: &str = "ui://";

/// What a tool's `_meta` says of its view and its callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolUi<'a> {
    /// The `ui://` resource that renders the tool's results.
    pub resource_uri: Option<&'a str>,
    /// The tool is offered to models.
    pub for_model: bool,
    /// A view of the tool's server may call it.
    pub for_app: bool,
}

impl<'a> ToolUi<'a> {
    /// Reads a tool's `_meta`; a tool without one is for the model and the app, with no view.
    pub fn of(meta: Option<&'a Map<String, Value>>) -> Self {
        let ui = meta.and_then(|m| m.get("ui")).and_then(Value::as_object);
        let resource_uri = ui
            .and_then(|ui| ui.get("resourceUri"))
            .or_else(|| meta.and_then(|m| m.get(FLAT_RESOURCE_URI)))
            .and_then(Value::as_str)
            .filter(|uri| is_ui_uri(uri));
        let (for_model, for_app) = match ui.and_then(|ui| ui.get("visibility")) {
            Some(Value::Array(audiences)) => (
                audiences.iter().any(|a| a == "model"),
                audiences.iter().any(|a| a == "app"),
            ),
            _ => (true, true),
        };
        Self {
            resource_uri,
            for_model,
            for_app,
        }
    }

    /// The visibility as the extension writes it.
    pub fn visibility(&self) -> Vec<&'static str> {
        let mut audiences = Vec::with_capacity(2);
        if self.for_model {
            audiences.push("model");
        }
        if self.for_app {
            audiences.push("app");
        }
        audiences
    }
}

pub fn is_ui_uri(uri: &str) -> bool {
    uri.starts_with(SCHEME)
}

/// Rewrites the view a tool's `_meta` names (both keys a server may have written) to
/// `uri`; nothing else of the `_meta` changes.
pub fn set_tool_resource_uri(meta: &mut Map<String, Value>, uri: &str) {
    if let Some(Value::Object(ui)) = meta.get_mut("ui")
        && ui.contains_key("resourceUri")
    {
        ui.insert("resourceUri".into(), Value::String(uri.to_owned()));
    }
    if meta.contains_key(FLAT_RESOURCE_URI) {
        meta.insert(FLAT_RESOURCE_URI.into(), Value::String(uri.to_owned()));
    }
}

/// A server's view as the gateway offers it: `ui://{server}{separator}{rest}`, the
/// server's name as gateway tool names write it, so two servers' `ui://app/view.html`
/// stay apart. `None` for a URI that is not a view's.
pub fn gateway_ui_uri(server: &str, separator: &str, uri: &str) -> Option<String> {
    let rest = uri.strip_prefix(SCHEME)?;
    Some(format!(
        "{SCHEME}{}{separator}{rest}",
        super::tool_name::namespace(server)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(value: Value) -> Map<String, Value> {
        value.as_object().expect("an object").clone()
    }

    #[test]
    fn a_tool_without_meta_is_for_both_with_no_view() {
        let ui = ToolUi::of(None);
        assert_eq!(ui.resource_uri, None);
        assert!(ui.for_model && ui.for_app);
    }

    #[test]
    fn the_view_is_read_from_either_key_and_visibility_as_declared() {
        let nested = meta(json!({"ui": {"resourceUri": "ui://a/v.html", "visibility": ["app"]}}));
        let ui = ToolUi::of(Some(&nested));
        assert_eq!(ui.resource_uri, Some("ui://a/v.html"));
        assert_eq!((ui.for_model, ui.for_app), (false, true));
        let flat = meta(json!({"ui/resourceUri": "ui://a/v.html"}));
        assert_eq!(ToolUi::of(Some(&flat)).resource_uri, Some("ui://a/v.html"));
        let not_a_view = meta(json!({"ui": {"resourceUri": "https://a/v.html"}}));
        assert_eq!(ToolUi::of(Some(&not_a_view)).resource_uri, None);
        let model_only = meta(json!({"ui": {"visibility": ["model"]}}));
        assert_eq!(ToolUi::of(Some(&model_only)).visibility(), vec!["model"]);
    }

    #[test]
    fn a_rewrite_changes_both_keys_and_nothing_else() {
        let mut m = meta(json!({
            "ui": {"resourceUri": "ui://a/v.html", "visibility": ["model", "app"]},
            "ui/resourceUri": "ui://a/v.html",
            "x": 1
        }));
        set_tool_resource_uri(&mut m, "ui://srv__a/v.html");
        assert_eq!(
            Value::Object(m),
            json!({
                "ui": {"resourceUri": "ui://srv__a/v.html", "visibility": ["model", "app"]},
                "ui/resourceUri": "ui://srv__a/v.html",
                "x": 1
            })
        );
        assert_eq!(
            gateway_ui_uri("my board", "__", "ui://a/v.html").as_deref(),
            Some("ui://my_board__a/v.html")
        );
        assert_eq!(gateway_ui_uri("s", "__", "file:///x"), None);
    }
}
