//! A server made from a catalog entry: its values checked by the entry, its transport what
//! the entry resolves them to (shown to the user; the pool resolves the entry again at
//! every connect, so a new version or an operator's change reaches it).

use super::{ServerInput, ServerService};
use crate::domain::{
    CatalogUse, MASK, RemoteEndpoint, Resolved, SecretUrl, ServerSpec, StdioLaunch, Transport,
};
use crate::error::{Error, Result};

impl ServerService {
    /// `None` for a server that is not, and does not become, made from the catalog.
    pub(super) async fn catalog_transport(
        &self,
        input: &ServerInput,
        current: Option<&ServerSpec>,
    ) -> Result<Option<(Transport, CatalogUse)>> {
        let current_use = current.and_then(|c| c.catalog.as_deref());
        let entry = match (&input.catalog, current_use) {
            (Some(entry), _) => entry.trim().to_owned(),
            (None, Some(using)) => using.entry.clone(),
            (None, None) => return Ok(None),
        };
        let refused = [
            ("preset", input.preset.is_some()),
            ("presetArgs", input.preset_args.is_some()),
            ("env", input.env.is_some()),
            ("headers", input.headers.is_some()),
            ("embedded", input.embedded.is_some()),
        ];
        if let Some((field, _)) = refused.iter().find(|(_, given)| *given) {
            return Err(Error::validation(format!(
                "{field} does not apply to a server made from the catalog; its inputs are set with values"
            )));
        }
        // Values belong to an entry: switching entries starts from none.
        let same_entry = current_use.filter(|u| u.entry == entry);
        let values = match (&input.values, same_entry) {
            (Some(values), _) => values.clone(),
            (None, Some(using)) => using
                .values
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .chain(
                    using
                        .secrets
                        .keys()
                        .map(|k| (k.to_owned(), MASK.to_owned())),
                )
                .collect(),
            (None, None) => Default::default(),
        };
        let version = match (&input.catalog_version, same_entry) {
            (Some(version), _) if version.is_empty() => None,
            (Some(version), _) => Some(version.clone()),
            (None, Some(using)) => using.version.clone(),
            (None, None) => None,
        };
        let using = self
            .catalog
            .user_values(&entry, version.as_deref(), values, same_entry)
            .await?;
        let transport = match self.catalog.resolve(&using).await? {
            Resolved::Stdio(launch) => {
                // What the user sees: their secrets masked wherever they landed.
                let shown = |arg: &String| {
                    let mut arg = arg.clone();
                    for secret in using.secrets.expose().values().filter(|s| !s.is_empty()) {
                        arg = arg.replace(secret.as_str(), MASK);
                    }
                    arg
                };
                Transport::Stdio(StdioLaunch {
                    preset: entry.clone(),
                    preset_args: Default::default(),
                    env: Default::default(),
                    command: launch.command,
                    args: launch.args.iter().map(shown).collect(),
                })
            }
            Resolved::Remote { sse, url, headers } => {
                let url = SecretUrl::new(self.url_policy.check(url.as_str()).await?);
                let carried = current.and_then(|c| c.transport.remote());
                let oauth = match input.oauth.clone() {
                    Some(update) => {
                        update.apply(&carried.map(|e| e.oauth.clone()).unwrap_or_default())?
                    }
                    None => carried.map(|e| e.oauth.clone()).unwrap_or_default(),
                };
                let endpoint = RemoteEndpoint {
                    url,
                    headers,
                    oauth,
                };
                if sse {
                    Transport::Sse(endpoint)
                } else {
                    Transport::StreamableHttp(endpoint)
                }
            }
        };
        // A GET → PUT round trip sends these back; anything else would be silently lost.
        let unchanged = [
            (
                "type",
                input
                    .transport
                    .as_deref()
                    .is_none_or(|t| t == transport.kind().as_str()),
            ),
            (
                "command",
                input
                    .command
                    .as_ref()
                    .is_none_or(|c| Some(c) == transport.stdio().map(|s| &s.command)),
            ),
            (
                "args",
                input
                    .args
                    .as_ref()
                    .is_none_or(|a| Some(a) == transport.stdio().map(|s| &s.args)),
            ),
            (
                "baseUrl",
                input.base_url.as_ref().is_none_or(|u| {
                    transport
                        .remote()
                        .is_some_and(|e| *u == e.url.masked() || *u == e.url.expose().as_str())
                }),
            ),
        ];
        if let Some((field, _)) = unchanged.iter().find(|(_, same)| !*same) {
            return Err(Error::validation(format!(
                "the {field} of a server made from the catalog comes from entry '{entry}' and cannot be chosen"
            )));
        }
        Ok(Some((transport, using)))
    }
}
