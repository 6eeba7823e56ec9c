//! `/console`: the operators' web console. One page (`assets/index.html`) and an ES-module
//! app (`assets/app.js`, on the vendored htm + Preact in `assets/vendor/`) that reads and
//! changes state only through the admin and user API, so the console has no second way to
//! change anything. Everything is embedded in the binary; nothing is fetched at run time.
//!
//! Sign-in trades an admin key for an HttpOnly, SameSite=Strict cookie holding the key
//! sealed with the service's cipher (`KeyService::open_console_session`); `api::auth`
//! accepts that cookie like a bearer key, and demands the session's CSRF token on every
//! request that is not a read.

use axum::Json as JsonResponse;
use axum::Router;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::{CONSOLE_COOKIE, CSRF_HEADER, carries_csrf_token, console_cookie};
use super::error::ApiError;
use super::extract::{Json, Path};
use crate::error::Error;
use crate::services::{ConsoleSession, console_csrf};

/// The console's files, by name under `/console/assets/`.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("console/assets/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("console/assets/app.css"),
    ),
    (
        "vendor/htm-preact-standalone.module.js",
        "text/javascript; charset=utf-8",
        include_str!("console/assets/vendor/htm-preact-standalone.module.js"),
    ),
];

const INDEX: &str = include_str!("console/assets/index.html");

/// Scripts and styles only from this origin, no framing: a name a user chose can never
/// become code, even if some view forgot to escape it.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The console's session, in the OpenAPI document (its handlers answer 404 when the
/// console is off).
pub fn session_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(session, sign_in, sign_out))
}

fn ensure_enabled(state: &AppState) -> Result<(), ApiError> {
    if state.settings.console.enabled {
        Ok(())
    } else {
        Err(ApiError::RouteNotFound("/console/session".into()))
    }
}

/// The console's page and files, or none when it is switched off.
pub fn routes(state: &AppState) -> Router<AppState> {
    if !state.settings.console.enabled {
        return Router::new();
    }
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route("/console/", get(page))
        .route("/console/assets/{*file}", get(asset))
}

fn hardened(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        HeaderName::from_static("content-security-policy"),
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        HeaderName::from_static("referrer-policy"),
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// The page; the app signs in or shows the console.
async fn page() -> Response {
    hardened(
        (
            [
                (CONTENT_TYPE, "text/html; charset=utf-8"),
                (CACHE_CONTROL, "no-cache"),
            ],
            INDEX,
        )
            .into_response(),
    )
}

async fn asset(Path(file): Path<String>) -> Result<Response, ApiError> {
    let (_, content_type, body) = ASSETS
        .iter()
        .find(|(name, _, _)| *name == file)
        .ok_or_else(|| ApiError::RouteNotFound(format!("/console/assets/{file}")))?;
    Ok(hardened(
        (
            [(CONTENT_TYPE, *content_type), (CACHE_CONTROL, "no-cache")],
            *body,
        )
            .into_response(),
    ))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = ConsoleSession)]
struct SessionView {
    /// Send it as `X-CSRF-Token` with every request that changes state.
    csrf_token: String,
    csrf_header: &'static str,
    expires_at: DateTime<Utc>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct SignIn {
    /// An admin API key.
    #[schema(min_length = 1, max_length = 256)]
    key: String,
}

fn cookie(state: &AppState, value: &str, max_age: i64) -> HeaderValue {
    let secure = if state.settings.console.secure_cookie {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{CONSOLE_COOKIE}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    ))
    .expect("a sealed session is a header value")
}

/// Signs in to the console with an admin key: sets the session cookie (HttpOnly,
/// SameSite=Strict) and answers the token every request that changes state must send.
#[utoipa::path(post, path = "/console/session", tag = "console", request_body = SignIn,
    responses((status = OK, body = SessionView,
        headers(("set-cookie" = String, description = "The session cookie")))))]
async fn sign_in(
    State(state): State<AppState>,
    Json(body): Json<SignIn>,
) -> Result<Response, ApiError> {
    ensure_enabled(&state)?;
    if body.key.trim().is_empty() {
        return Err(Error::Unauthorized("enter an admin API key".into()).into());
    }
    let ConsoleSession {
        cookie: value,
        csrf,
        expires_at,
    } = state.services.keys.open_console_session(&body.key).await?;
    let max_age = (expires_at - crate::domain::now()).num_seconds().max(0);
    let mut headers = HeaderMap::new();
    headers.insert(SET_COOKIE, cookie(&state, &value, max_age));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok((
        headers,
        JsonResponse(SessionView {
            csrf_token: csrf,
            csrf_header: CSRF_HEADER,
            expires_at,
        }),
    )
        .into_response())
}

/// The console session of the request's cookie, and its CSRF token; 401 without one.
#[utoipa::path(get, path = "/console/session", tag = "console",
    responses((status = OK, body = SessionView)))]
async fn session(State(state): State<AppState>, parts: Parts) -> Result<Response, ApiError> {
    ensure_enabled(&state)?;
    let value = console_cookie(&parts)
        .ok_or_else(|| Error::Unauthorized("not signed in to the console".into()))?;
    let (_, expires_at) = state.services.keys.console_principal(value).await?;
    Ok((
        [(CACHE_CONTROL, "no-store")],
        JsonResponse(SessionView {
            csrf_token: console_csrf(value),
            csrf_header: CSRF_HEADER,
            expires_at,
        }),
    )
        .into_response())
}

/// Signs out: ends the session on the server and clears the cookie (with the session's
/// `X-CSRF-Token`).
#[utoipa::path(delete, path = "/console/session", tag = "console",
    responses((status = NO_CONTENT, description = "Signed out")))]
async fn sign_out(State(state): State<AppState>, parts: Parts) -> Result<Response, ApiError> {
    ensure_enabled(&state)?;
    if let Some(value) = console_cookie(&parts)
        && !carries_csrf_token(&parts, value)
    {
        return Err(ApiError::CsrfTokenInvalid);
    }
    let closed = match console_cookie(&parts) {
        Some(value) => state.services.keys.close_console_session(value).await,
        None => Ok(()),
    };
    // The browser forgets the cookie even when the session could not be ended on the
    // server (the database is down): the error says so, and signing out again finishes.
    let mut response = match closed {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => ApiError::from(error).into_response(),
    };
    response
        .headers_mut()
        .insert(SET_COOKIE, cookie(&state, "", 0));
    Ok(response)
}
