use reqwest::{Method, StatusCode};

use crate::helpers::spawn_app;

#[tokio::test]
async fn liveness_and_readiness_answer_without_a_key() {
    let app = spawn_app().await;
    let live = app.send(Method::GET, "/healthz", None, None, None).await;
    assert_eq!(live.status, StatusCode::OK);
    assert_eq!(live.body["status"], "ok");
    let ready = app.send(Method::GET, "/readyz", None, None, None).await;
    assert_eq!(ready.status, StatusCode::OK);
    assert_eq!(ready.body["status"], "ready");
}

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let app = spawn_app().await;
    let reply = app.send(Method::GET, "/healthz", None, None, None).await;
    assert!(reply.headers.get("x-request-id").is_some());
}
