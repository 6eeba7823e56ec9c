//! The OpenAPI 3 document of the HTTP API, served at `/openapi.json` and browsable at
//! `/docs`.
//!
//! Operations come from the handlers' `#[utoipa::path]` annotations, collected by the same
//! `routes!` registrations that build the router, so a REST route cannot exist without
//! being documented. What every operation shares (who may call it, the error body) is added
//! here once, by path prefix, instead of on forty annotations.

use utoipa::ToSchema;
use utoipa::openapi::path::{Operation, Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{OpenApi, Ref, RefOr, Required, ResponseBuilder};

use super::error::ErrorBody;
use super::external_id::ExternalId;

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "mcp-pool",
        description = "Per-user MCP servers for a multi-user chat backend: server definitions, \
            tool calls that run at once or wait for the user's approval, the agent loop, an \
            assistant's servers re-exposed as one MCP endpoint, and the admin API.\n\n\
            Every error is `{\"error\":{\"code\",\"message\",\"details?\"}}` with a stable `code`."
    ),
    paths(super::gateway::gateway_endpoint),
    components(schemas(ErrorBody, ExternalId)),
    tags(
        (name = "health", description = "Liveness, readiness and metrics (no key)"),
        (name = "servers", description = "The caller's MCP server definitions"),
        (name = "assistants", description = "Which servers an assistant uses, and its tools"),
        (name = "upstream", description = "Talking to one server: connect, tools, resources, prompts"),
        (name = "tool-calls", description = "A model's tool calls, parked until approved, and their events"),
        (name = "tasks", description = "Tool calls that run on after their request (Prefer: respond-async), read and cancelled from any instance"),
        (name = "chat", description = "The agent loop"),
        (name = "gateway", description = "An assistant's servers as one MCP endpoint; its tokens and Xiaozhi bridge"),
        (name = "presets", description = "The stdio allow-list"),
        (name = "catalog", description = "Servers users can add in one call, in the MCP Registry's server.json format"),
        (name = "oauth", description = "Users' OAuth authorization of remote servers"),
        (name = "admin", description = "Keys, connections, bridges and global servers (admin key)"),
        (name = "console", description = "The operators' web console's sign-in (an admin key, then its cookie)"),
    )
)]
pub struct ApiDoc;

/// Which credentials a path needs, by its prefix (see `api::auth`).
enum Caller {
    /// `/api/...`: a service or admin key acting for the user in `X-User-Id`.
    User,
    /// `/admin/...`: an admin key.
    Admin,
    /// `/mcp/...`: a gateway token of the assistant in the path.
    Gateway,
    /// Health, metrics and these docs.
    Public,
}

impl Caller {
    fn of(path: &str) -> Self {
        if path.starts_with("/api/") {
            Caller::User
        } else if path.starts_with("/admin/") {
            Caller::Admin
        } else if path.starts_with("/mcp/") {
            Caller::Gateway
        } else {
            Caller::Public
        }
    }
}

/// Adds the security schemes, the `X-User-Id` header and the error responses; called once
/// every route is in (a derive `modifiers` would run before the routes are merged).
pub fn add_shared_parts(openapi: &mut OpenApi) {
    let components = openapi.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "apiKey",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some("A service or admin key (`mcp-pool keys create`)"))
                .build(),
        ),
    );
    components.add_security_scheme(
        "gatewayToken",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some("A gateway token of the assistant in the path"))
                .build(),
        ),
    );
    for (path, item) in openapi.paths.paths.iter_mut() {
        let caller = Caller::of(path);
        for operation in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            describe_access(operation, &caller);
            add_error_responses(operation);
        }
    }
}

fn describe_access(operation: &mut Operation, caller: &Caller) {
    let scheme = match caller {
        Caller::User | Caller::Admin => "apiKey",
        Caller::Gateway => "gatewayToken",
        Caller::Public => return,
    };
    operation.security = Some(vec![SecurityRequirement::new::<_, _, &str>(scheme, [])]);
    if let Caller::User = caller {
        operation
            .parameters
            .get_or_insert_with(Vec::new)
            .insert(0, RefOr::T(user_id_header()));
    }
}

fn user_id_header() -> Parameter {
    ParameterBuilder::new()
        .name("X-User-Id")
        .parameter_in(ParameterIn::Header)
        .required(Required::True)
        .description(Some("The end user this request acts for"))
        .schema(Some(Ref::from_schema_name(ExternalId::name())))
        .build()
}

/// Any 4xx or 5xx answer carries the error body; the code tables are in the README.
fn add_error_responses(operation: &mut Operation) {
    for (range, description) in [
        ("4XX", "The request was refused: see `error.code`"),
        (
            "5XX",
            "The service or something it depends on failed: see `error.code`",
        ),
    ] {
        operation
            .responses
            .responses
            .entry(range.to_owned())
            .or_insert_with(|| {
                RefOr::T(
                    ResponseBuilder::new()
                        .description(description)
                        .content(
                            "application/json",
                            utoipa::openapi::ContentBuilder::new()
                                .schema(Some(Ref::from_schema_name(ErrorBody::name())))
                                .build(),
                        )
                        .build(),
                )
            });
    }
}
