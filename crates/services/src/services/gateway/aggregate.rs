//! The bound servers' resources, prompts and completions offered as one server's: lists
//! merged (prompts named like tools), each request routed to the server that can answer.

use std::collections::HashSet;
use std::sync::Arc;

use rmcp::model::{GetPromptResponse, JsonObject, Prompt, Resource, ResourceTemplate};
use uuid::Uuid;

use super::{GatewayPrincipal, GatewayService, GatewayTools};
use crate::domain::app_ui;
use crate::domain::tool_name::{PrefixMode, gateway_names};
use crate::error::{Error, Resource as Missing, Result};
use crate::mcp::ServerFeatures;

impl GatewayService {
    /// The bound, active servers' ids and names.
    pub(super) async fn servers(
        &self,
        principal: &GatewayPrincipal,
    ) -> Result<Vec<(Uuid, String)>> {
        let ids = self
            .store
            .assistants()
            .bound_servers(&principal.user, &principal.assistant)
            .await?;
        let mut servers = Vec::new();
        for id in ids {
            if let Some(server) = self.store.servers().usable(&principal.user, id).await?
                && server.spec.is_active
            {
                servers.push((id, server.spec.name.as_str().to_owned()));
            }
        }
        Ok(servers)
    }

    /// What the assistant's servers support together: a capability is offered when one
    /// of them has it. A server that cannot be reached adds nothing.
    pub async fn features(&self, principal: &GatewayPrincipal) -> Result<ServerFeatures> {
        let mut all = ServerFeatures::default();
        for (id, _) in self.servers(principal).await? {
            if let Ok(one) = self
                .upstream_for(principal)
                .features(&principal.user, &id.to_string())
                .await
            {
                all.resources |= one.resources;
                all.prompts |= one.prompts;
                all.logging |= one.logging;
                all.completions |= one.completions;
                all.subscribe |= one.subscribe;
                all.apps |= one.apps;
            }
        }
        // MCP Apps also when a server offers views without saying so (servers written
        // with the ext-apps SDK declare nothing).
        if !all.apps {
            all.apps = self.tools(principal).await.is_ok_and(|t| t.has_views());
        }
        Ok(all)
    }

    /// The ids of the assistant's active servers.
    pub async fn server_ids(&self, principal: &GatewayPrincipal) -> Result<HashSet<Uuid>> {
        Ok(self
            .servers(principal)
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    /// Whether server `id` offers what `has` asks for (one that cannot be reached offers
    /// nothing).
    pub(super) async fn offers(
        &self,
        principal: &GatewayPrincipal,
        id: &str,
        has: impl Fn(&ServerFeatures) -> bool,
    ) -> bool {
        self.upstream_for(principal)
            .features(&principal.user, id)
            .await
            .is_ok_and(|f| has(&f))
    }

    /// `completion/complete`: a prompt argument goes to the prompt's server (under its
    /// own name there), a resource template's to the servers that complete, first answer.
    pub async fn complete(
        &self,
        principal: &GatewayPrincipal,
        mut params: rmcp::model::CompleteRequestParams,
    ) -> Result<rmcp::model::CompleteResult> {
        use rmcp::model::Reference;
        let candidates: Vec<Uuid> = match &params.r#ref {
            Reference::Prompt(prompt) => {
                let Some((id, _, original)) = self
                    .named_prompts(principal)
                    .await?
                    .into_iter()
                    .find(|(_, name, _)| *name == prompt.name)
                else {
                    return Err(Error::NotFound(Missing::Prompt, prompt.name.clone()));
                };
                params.r#ref = Reference::for_prompt(original.name);
                vec![id]
            }
            _ => self
                .servers(principal)
                .await?
                .into_iter()
                .map(|(id, _)| id)
                .collect(),
        };
        let mut last_error = None;
        for id in candidates {
            let id = id.to_string();
            if !self.offers(principal, &id, |f| f.completions).await {
                continue;
            }
            match self
                .upstream_for(principal)
                .complete(&principal.user, &id, params.clone())
                .await
            {
                Ok(result) => return Ok(result),
                Err(error) => last_error = Some(error),
            }
        }
        match last_error {
            Some(error) => Err(error),
            None => Ok(rmcp::model::CompleteResult::default()),
        }
    }

    /// Every bound server's resources, its views (`ui://`) under their gateway URIs; a
    /// failing server is left out.
    pub async fn resources(
        &self,
        principal: &GatewayPrincipal,
    ) -> Result<(Vec<Resource>, Vec<ResourceTemplate>)> {
        let mut resources = Vec::new();
        let mut templates = Vec::new();
        let servers = self.servers(principal).await?;
        let views = self.view_naming(principal).await?;
        for (id, name) in &servers {
            if let Ok(catalog) = self
                .upstream_for(principal)
                .resources(&principal.user, &id.to_string())
                .await
            {
                resources.extend(catalog.resources.iter().map(|resource| {
                    let mut resource = resource.clone();
                    if let Some(uri) = views.gateway_uri(*id, name, &resource.uri) {
                        resource.uri = uri;
                    }
                    resource
                }));
                templates.extend(catalog.templates.iter().cloned());
            }
        }
        Ok((resources, templates))
    }

    /// How the gateway names the views of the assistant's servers: as its tool view
    /// (built with the assistant's prefix mode) names them.
    async fn view_naming(&self, principal: &GatewayPrincipal) -> Result<ViewNaming> {
        Ok(ViewNaming {
            tools: self.tools(principal).await?,
            separator: self.separator(principal).to_owned(),
        })
    }

    /// A view's gateway URI back to its server and the server's own URI: a view a tool
    /// declares, or under `always` a server's prefix.
    async fn view_source(
        &self,
        principal: &GatewayPrincipal,
        servers: &[(Uuid, String)],
        uri: &str,
    ) -> Result<Option<(Uuid, String)>> {
        if !app_ui::is_ui_uri(uri) || servers.is_empty() {
            return Ok(None);
        }
        let views = self.view_naming(principal).await?;
        if let Some((server, own)) = views.tools.view(uri) {
            return Ok(Some((server, own.to_owned())));
        }
        if views.tools.mode != PrefixMode::Always {
            return Ok(None);
        }
        Ok(servers.iter().find_map(|(id, name)| {
            let prefix = app_ui::gateway_ui_uri(name, &views.separator, "ui://")?;
            let rest = uri.strip_prefix(&prefix)?;
            Some((*id, format!("ui://{rest}")))
        }))
    }

    /// Reads a resource from the first bound server that lists it (or, for URIs only a
    /// template matches, the first that can read it); `relayed`: the client takes a
    /// 2026-07-28 server's rounds itself (see `mcp::CallPeers`).
    pub async fn read_resource(
        &self,
        principal: &GatewayPrincipal,
        uri: &str,
        relayed: Option<crate::mcp::RelayedRound>,
    ) -> Result<rmcp::model::ReadResourceResponse> {
        let servers = self.servers(principal).await?;
        // A view under its gateway URI: read from its server under the server's own URI,
        // the contents named as the client asked.
        if let Some((server, own)) = self.view_source(principal, &servers, uri).await? {
            let upstream = self.upstream_for(principal);
            let id = server.to_string();
            let response = match relayed {
                Some(round) => {
                    upstream
                        .read_resource_relayed(&principal.user, &id, &own, round)
                        .await?
                }
                None => upstream
                    .read_resource(&principal.user, &id, &own)
                    .await?
                    .into(),
            };
            return Ok(match response {
                rmcp::model::ReadResourceResponse::Complete(mut result) => {
                    for contents in &mut result.contents {
                        rename_contents(contents, &own, uri);
                    }
                    result.into()
                }
                asked => asked,
            });
        }
        let read = |id: String| {
            let relayed = relayed.clone();
            async move {
                let upstream = self.upstream_for(principal);
                match relayed {
                    Some(round) => {
                        upstream
                            .read_resource_relayed(&principal.user, &id, uri, round)
                            .await
                    }
                    None => upstream
                        .read_resource(&principal.user, &id, uri)
                        .await
                        .map(Into::into),
                }
            }
        };
        let mut last_error = None;
        for (id, _) in &servers {
            let id = id.to_string();
            let listed = self
                .upstream_for(principal)
                .resources(&principal.user, &id)
                .await
                .map(|c| c.resources.iter().any(|r| r.uri == uri))
                .unwrap_or(false);
            if listed {
                return read(id).await;
            }
        }
        for (id, _) in &servers {
            match read(id.to_string()).await {
                Ok(result) => return Ok(result),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| Error::NotFound(Missing::Resource, uri.to_owned())))
    }

    /// Every bound server's prompts under gateway names, with the server each one is
    /// from; named by the assistant's prefix mode like its tools.
    async fn named_prompts(
        &self,
        principal: &GatewayPrincipal,
    ) -> Result<Vec<(Uuid, String, Prompt)>> {
        let mut listed = Vec::new();
        for (id, server) in self.servers(principal).await? {
            if let Ok(prompts) = self
                .upstream_for(principal)
                .prompts(&principal.user, &id.to_string())
                .await
            {
                listed.extend(prompts.iter().map(|p| (id, server.clone(), p.clone())));
            }
        }
        let mode = self.prefix_mode(principal).await?;
        let items: Vec<(&str, &str)> = listed
            .iter()
            .map(|(_, server, prompt)| (server.as_str(), prompt.name.as_str()))
            .collect();
        let names = gateway_names(mode, self.separator(principal), &items);
        drop(items);
        Ok(listed
            .into_iter()
            .zip(names)
            .filter_map(|((id, _, prompt), name)| name.map(|name| (id, name, prompt)))
            .collect())
    }

    pub async fn prompts(&self, principal: &GatewayPrincipal) -> Result<Vec<Prompt>> {
        Ok(self
            .named_prompts(principal)
            .await?
            .into_iter()
            .map(|(_, name, mut prompt)| {
                prompt.name = name;
                prompt
            })
            .collect())
    }

    /// A prompt by its gateway name; `relayed`: the client takes a 2026-07-28 server's
    /// rounds itself (see `mcp::CallPeers`).
    pub async fn get_prompt(
        &self,
        principal: &GatewayPrincipal,
        (name, arguments): (&str, Option<JsonObject>),
        relayed: Option<crate::mcp::RelayedRound>,
    ) -> Result<GetPromptResponse> {
        let Some((id, _, prompt)) = self
            .named_prompts(principal)
            .await?
            .into_iter()
            .find(|(_, gateway_name, _)| gateway_name == name)
        else {
            return Err(Error::NotFound(Missing::Prompt, name.to_owned()));
        };
        let (user, server) = (&principal.user, id.to_string());
        match relayed {
            Some(round) => {
                self.upstream_for(principal)
                    .get_prompt_relayed(user, &server, (&prompt.name, arguments), round)
                    .await
            }
            None => self
                .upstream_for(principal)
                .get_prompt(user, &server, &prompt.name, arguments)
                .await
                .map(Into::into),
        }
    }
}

/// The assistant's view naming, read once for a listing.
struct ViewNaming {
    tools: Arc<GatewayTools>,
    separator: String,
}

impl ViewNaming {
    /// The gateway URI of server `id`'s resource `uri`, when it is a view: as its tools
    /// name it, else under `always` its server's prefix; `None` to keep it as it is.
    fn gateway_uri(&self, id: Uuid, server: &str, uri: &str) -> Option<String> {
        if !app_ui::is_ui_uri(uri) {
            return None;
        }
        if let Some(named) = self.tools.gateway_view(id, uri) {
            return Some(named.to_owned());
        }
        (self.tools.mode == PrefixMode::Always)
            .then(|| app_ui::gateway_ui_uri(server, &self.separator, uri))
            .flatten()
    }
}

/// A view's contents under the URI the client asked for (the server wrote its own).
fn rename_contents(contents: &mut rmcp::model::ResourceContents, own: &str, asked: &str) {
    use rmcp::model::ResourceContents;
    match contents {
        ResourceContents::TextResourceContents { uri, .. }
        | ResourceContents::BlobResourceContents { uri, .. }
            if uri == own =>
        {
            *uri = asked.to_owned();
        }
        _ => {}
    }
}
