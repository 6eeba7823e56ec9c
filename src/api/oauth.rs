//! Per-user OAuth of remote servers: start, read and forget a user's authorization, the
//! authorization server's callback, and the client metadata document this service
//! publishes. The callback needs no key: its `state` is the credential.

use axum::Json as JsonResponse;
use axum::extract::State;
use axum::extract::rejection::QueryRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::UserContext;
use super::error::ApiError;
use super::extract::Path;
use crate::services::oauth::{CallbackOutcome, CallbackParams};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(authorize))
        .routes(routes!(status, forget))
        .routes(routes!(callback))
        .routes(routes!(client_metadata))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Authorization {
    /// Open it in the user's browser; the authorization server redirects back to
    /// `/oauth/callback`.
    authorization_url: String,
    /// After this the URL can no longer be completed.
    expires_at: DateTime<Utc>,
}

/// Starts the user's authorization of an OAuth-protected server.
#[utoipa::path(post, path = "/api/mcp-servers/{id}/oauth/authorize", tag = "oauth",
    params(("id" = String, Path, description = "The server's id")),
    responses((status = OK, body = Authorization)))]
async fn authorize(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Authorization>, ApiError> {
    let start = state.services.oauth.authorize(&ctx.user, &id).await?;
    Ok(JsonResponse(Authorization {
        authorization_url: start.authorization_url,
        expires_at: start.expires_at,
    }))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct OAuthState {
    /// `not_required` (the server never asked), `required`, `authorized`, or `expired`
    /// (the access token expired and cannot be refreshed).
    #[schema(example = "authorized")]
    status: &'static str,
    issuer: Option<String>,
    scopes: Vec<String>,
    /// When the access token expires (it is refreshed shortly before).
    expires_at: Option<DateTime<Utc>>,
}

/// The user's authorization of a server. Tokens are never shown.
#[utoipa::path(get, path = "/api/mcp-servers/{id}/oauth", tag = "oauth",
    params(("id" = String, Path, description = "The server's id")),
    responses((status = OK, body = OAuthState)))]
async fn status(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<OAuthState>, ApiError> {
    let report = state.services.oauth.status(&ctx.user, &id).await?;
    Ok(JsonResponse(OAuthState {
        status: report.status.as_str(),
        issuer: report.issuer,
        scopes: report.scopes,
        expires_at: report.expires_at,
    }))
}

/// Forgets the user's tokens for a server, revoking them where the authorization server
/// offers revocation (RFC 7009).
#[utoipa::path(delete, path = "/api/mcp-servers/{id}/oauth", tag = "oauth",
    params(("id" = String, Path, description = "The server's id")),
    responses((status = NO_CONTENT, description = "Forgotten")))]
async fn forget(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.services.oauth.forget(&ctx.user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Where the authorization server sends the browser back. Redirects to
/// `oauth.return_url` with `serverId` and `status` (`authorized` or `failed`), or shows a
/// small page when none is configured.
#[utoipa::path(get, path = "/oauth/callback", tag = "oauth", params(CallbackParams),
    responses((status = OK, description = "A page saying it worked", content_type = "text/html"),
              (status = BAD_REQUEST, description = "A page saying why it failed (an unknown, used or expired state; the authorization server's refusal)", content_type = "text/html"),
              (status = SEE_OTHER, description = "To `oauth.return_url`")))]
async fn callback(
    State(state): State<AppState>,
    params: Result<axum::extract::Query<CallbackParams>, QueryRejection>,
) -> Response {
    // A browser lands here: whatever is wrong, it gets the page, not a JSON error.
    let params = params.map(|query| query.0).unwrap_or_default();
    let outcome = state.services.oauth.callback(params).await;
    let return_url = state.settings.oauth.return_url.trim();
    if !return_url.is_empty()
        && let Ok(mut target) = url::Url::parse(return_url)
    {
        target
            .query_pairs_mut()
            .append_pair(
                "serverId",
                &outcome.server.map(|s| s.to_string()).unwrap_or_default(),
            )
            .append_pair(
                "status",
                if outcome.authorized {
                    "authorized"
                } else {
                    "failed"
                },
            );
        return Redirect::to(target.as_str()).into_response();
    }
    page(&outcome)
}

fn page(outcome: &CallbackOutcome) -> Response {
    let (status, title) = if outcome.authorized {
        (StatusCode::OK, "Authorized")
    } else {
        (StatusCode::BAD_REQUEST, "Authorization failed")
    };
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\
         <meta name=\"viewport\" content=\"width=device-width\"></head><body>\
         <h1>{title}</h1><p>{}</p><p>You can close this window.</p></body></html>",
        html_escape(&outcome.message)
    );
    let mut response = (status, Html(body)).into_response();
    // The page must not be framed, cached or leak the callback URL (it held the code).
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
    );
    response
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// This service's OAuth Client ID Metadata Document; its URL is the client id used with
/// authorization servers that advertise `client_id_metadata_document_supported`.
#[utoipa::path(get, path = "/oauth/client-metadata.json", tag = "oauth",
    responses((status = OK, description = "The client metadata document", content_type = "application/json")))]
async fn client_metadata(State(state): State<AppState>) -> JsonResponse<serde_json::Value> {
    JsonResponse(state.services.oauth.client_metadata())
}
