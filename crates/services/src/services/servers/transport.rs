//! A server's transport built from the input laid over the stored one: which kind, which
//! fields apply to it, and how masked secrets and preset launches carry over.

use std::collections::BTreeMap;

use super::{ServerInput, ServerService};
use crate::domain::{
    EmbeddedKind, MASK, RemoteEndpoint, SecretMap, SecretUrl, ServerSpec, StdioLaunch, Transport,
    TransportKind,
};
use crate::error::{Error, Resource, Result};

/// An embedded server: only its kind, nothing of the other transports.
pub(super) fn embedded_transport(
    input: &ServerInput,
    current: Option<&Transport>,
) -> Result<Transport> {
    let foreign = [
        ("baseUrl", input.base_url.is_some()),
        ("oauth", input.oauth.is_some()),
        ("headers", input.headers.is_some()),
        ("preset", input.preset.is_some()),
        ("presetArgs", input.preset_args.is_some()),
        ("command", input.command.is_some()),
        ("args", input.args.is_some()),
        ("env", input.env.is_some()),
    ];
    if let Some((field, _)) = foreign.iter().find(|(_, given)| *given) {
        return Err(Error::validation(format!(
            "{field} does not apply to embedded servers"
        )));
    }
    match (&input.embedded, current) {
        (Some(raw), _) => Ok(Transport::Embedded(EmbeddedKind::parse(raw.trim())?)),
        (None, Some(Transport::Embedded(kind))) => Ok(Transport::Embedded(*kind)),
        (None, _) => Err(Error::validation(
            "embedded is required for embedded servers (clock or calculator)",
        )),
    }
}

impl ServerService {
    pub(super) fn transport_kind(
        &self,
        input: &ServerInput,
        current: Option<&ServerSpec>,
    ) -> Result<TransportKind> {
        if let Some(raw) = &input.transport {
            return Ok(TransportKind::parse(raw)?);
        }
        if input.embedded.is_some() {
            return Ok(TransportKind::Embedded);
        }
        if input.preset.is_some() || input.command.is_some() {
            return Ok(TransportKind::Stdio);
        }
        if let Some(raw) = &input.base_url {
            let url = url::Url::parse(raw.trim())
                .map_err(|e| Error::validation(format!("baseUrl is not a valid URL: {e}")))?;
            return Ok(TransportKind::infer_from_url(&url));
        }
        current.map(|c| c.transport.kind()).ok_or_else(|| {
            Error::validation(
                "type is required (stdio, sse or streamableHttp), or give baseUrl or preset",
            )
        })
    }

    pub(super) async fn remote_transport(
        &self,
        kind: TransportKind,
        input: &ServerInput,
        carried: Option<&Transport>,
    ) -> Result<Transport> {
        let stdio_fields = [
            ("preset", input.preset.is_some()),
            ("presetArgs", input.preset_args.is_some()),
            ("command", input.command.is_some()),
            ("args", input.args.is_some()),
            ("env", input.env.is_some()),
        ];
        if input.embedded.is_some() {
            return Err(Error::validation(format!(
                "embedded only applies to embedded servers, not {}",
                kind.as_str()
            )));
        }
        if let Some((field, _)) = stdio_fields.iter().find(|(_, given)| *given) {
            return Err(Error::validation(format!(
                "{field} only applies to stdio servers, not {}",
                kind.as_str()
            )));
        }
        let current = carried.and_then(Transport::remote);
        let url = match (&input.base_url, current) {
            // Parts sent masked keep the stored credentials, as for headers.
            (Some(raw), current) => {
                SecretUrl::merge_update(self.url_policy.check(raw).await?, current.map(|e| &e.url))?
            }
            (None, Some(endpoint)) => endpoint.url.clone(),
            (None, None) => {
                return Err(Error::validation(format!(
                    "baseUrl is required for {} servers",
                    kind.as_str()
                )));
            }
        };
        let current_headers = current.map(|e| e.headers.clone()).unwrap_or_default();
        let headers = match &input.headers {
            Some(update) => {
                self.secret_update("headers", &current_headers, update, validate_header)?
            }
            None => current_headers,
        };
        let current_oauth = current.map(|e| e.oauth.clone()).unwrap_or_default();
        let oauth = match input.oauth.clone() {
            Some(update) => update.apply(&current_oauth)?,
            None => current_oauth,
        };
        let endpoint = RemoteEndpoint {
            url,
            headers,
            oauth,
        };
        Ok(match kind {
            TransportKind::Sse => Transport::Sse(endpoint),
            _ => Transport::StreamableHttp(endpoint),
        })
    }

    pub(super) async fn stdio_transport(
        &self,
        input: &ServerInput,
        current: Option<&StdioLaunch>,
    ) -> Result<Transport> {
        if input.base_url.is_some() || input.headers.is_some() || input.oauth.is_some() {
            return Err(Error::validation(
                "baseUrl, headers and oauth only apply to sse and streamableHttp servers",
            ));
        }
        if input.embedded.is_some() {
            return Err(Error::validation(
                "embedded only applies to embedded servers",
            ));
        }
        let preset_name = match (&input.preset, current) {
            (Some(name), _) => name.clone(),
            (None, Some(current)) => current.preset.clone(),
            (None, None) if input.command.is_some() => {
                return Err(Error::ForbiddenCommand(
                    "stdio servers can only be created from an admin preset; choose one from GET /api/presets".into(),
                ));
            }
            (None, None) => {
                return Err(Error::validation(
                    "preset is required for stdio servers (see GET /api/presets)",
                ));
            }
        };
        let preset = self
            .store
            .presets()
            .get(&preset_name)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::Preset, preset_name.clone()))?;
        // Slot values belong to a preset: switching presets starts from none.
        let current = current.filter(|c| c.preset == preset_name);
        let preset_args = match (&input.preset_args, current) {
            (Some(args), _) => args.clone(),
            (None, Some(current)) => current.preset_args.clone(),
            (None, None) => BTreeMap::new(),
        };
        let current_env = current.map(|c| c.env.clone()).unwrap_or_default();
        let env = match &input.env {
            Some(update) => self.secret_update("env", &current_env, update, |_, _| Ok(()))?,
            None => current_env,
        };
        let launch =
            preset
                .spec
                .resolve(&preset_args, &env, self.settings.limits.max_value_bytes)?;
        if input.command.as_ref().is_some_and(|c| c != &launch.command) {
            return Err(Error::ForbiddenCommand(format!(
                "the command of a stdio server comes from preset '{preset_name}' and cannot be chosen"
            )));
        }
        if input.args.as_ref().is_some_and(|a| a != &launch.args) {
            return Err(Error::ForbiddenCommand(format!(
                "the arguments of a stdio server come from preset '{preset_name}'; set its slots with presetArgs"
            )));
        }
        Ok(Transport::Stdio(StdioLaunch {
            preset: preset_name,
            preset_args,
            env,
            command: launch.command,
            args: launch.args,
        }))
    }

    /// Applies a headers/env update: masked values keep the stored secret, limits apply.
    fn secret_update(
        &self,
        field: &str,
        current: &SecretMap,
        update: &BTreeMap<String, String>,
        validate: impl Fn(&str, &str) -> Result<()>,
    ) -> Result<SecretMap> {
        let limits = &self.settings.limits;
        if update.len() > limits.max_secret_entries {
            return Err(Error::validation(format!(
                "{field} has more than {} entries",
                limits.max_secret_entries
            )));
        }
        for (name, value) in update {
            if value == MASK && current.get(name).is_none() {
                return Err(Error::validation(format!(
                    "{field} '{name}' holds the mask placeholder but has no stored value; send the real value"
                )));
            }
            if value.len() > limits.max_value_bytes {
                return Err(Error::validation(format!(
                    "{field} '{name}' is longer than {} bytes",
                    limits.max_value_bytes
                )));
            }
            validate(name, value)?;
        }
        Ok(current.merge_update(update.clone()))
    }
}

/// Headers the MCP transports set themselves; a user value would break the session.
const RESERVED_HEADERS: [&str; 7] = [
    "accept",
    "content-type",
    "content-length",
    "host",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

fn validate_header(name: &str, value: &str) -> Result<()> {
    http::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| Error::validation(format!("headers: '{name}' is not a valid header name")))?;
    if RESERVED_HEADERS
        .iter()
        .any(|r| name.eq_ignore_ascii_case(r))
    {
        return Err(Error::validation(format!(
            "headers: '{name}' is set by the MCP transport and cannot be overridden"
        )));
    }
    http::HeaderValue::from_str(value).map_err(|_| {
        Error::validation(format!(
            "headers: the value of '{name}' is not a valid header value"
        ))
    })?;
    Ok(())
}
