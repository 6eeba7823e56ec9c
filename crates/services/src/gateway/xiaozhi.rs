//! Xiaozhi bridges (seed 002 §2): per assistant, mcp-pool dials the voice platform's
//! WebSocket endpoint as a client and serves MCP (JSON-RPC in text frames) over it with
//! the assistant's aggregated tools.
//!
//! One task per enabled bridge: connect, serve until the socket drops or stops answering
//! pings, then reconnect after an exponential, jittered delay (1 s → 60 s by default).
//! Results are cut to `xiaozhi.max_result_bytes` (1024). The state of every bridge is kept
//! here for the admin API.
//!
//! With several instances, each bridge runs on exactly one: the one that saved it last,
//! or, once that one stops, whichever claims it first (`reconcile`, every heartbeat).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures::{SinkExt, StreamExt};
use rmcp::ServiceExt;
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use serde::Serialize;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::GatewayHandler;
use crate::cluster::{Cluster, Note};
use crate::config::Settings;
use crate::domain::{AssistantId, InstanceId, UserId};
use crate::error::{Error, Resource, Result};
use crate::security::UrlPolicy;
use crate::services::{GatewayChannel, GatewayPrincipal, GatewayService};
use crate::store::{Store, XiaozhiBridge};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BridgeState {
    Connecting,
    Connected,
    /// Waiting before the next attempt.
    Reconnecting,
    Disabled,
    /// Enabled, and run by another instance of the service.
    Elsewhere,
}

/// What the admin API shows about one bridge.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BridgeStatus {
    pub user_id: String,
    pub assistant_id: String,
    pub state: BridgeState,
    /// Scheme, host and path only: the endpoint's query holds its token.
    pub endpoint: String,
    pub connected_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Connections made since the bridge started (the first included).
    pub connections: u64,
    pub last_error: Option<String>,
    pub next_attempt_in_ms: Option<u64>,
}

struct Running {
    cancel: CancellationToken,
    status: Arc<Mutex<BridgeStatus>>,
}

type Key = (UserId, AssistantId);

#[derive(Clone)]
pub struct XiaozhiBridges {
    gateway: GatewayService,
    store: Store,
    settings: Arc<Settings>,
    url_policy: Arc<UrlPolicy>,
    running: Arc<Mutex<HashMap<Key, Running>>>,
    shutdown: CancellationToken,
    cluster: Cluster,
}

/// The endpoint without its query (which carries the token) and its userinfo.
pub fn redacted(endpoint: &str) -> String {
    match url::Url::parse(endpoint) {
        Ok(mut url) => {
            let had_query = url.query().is_some();
            url.set_query(None);
            let _ = url.set_password(None);
            let _ = url.set_username("");
            if had_query {
                format!("{url}?…")
            } else {
                url.to_string()
            }
        }
        Err(_) => "(invalid URL)".into(),
    }
}

impl XiaozhiBridges {
    pub fn new(
        gateway: GatewayService,
        store: Store,
        settings: Arc<Settings>,
        url_policy: Arc<UrlPolicy>,
        cluster: Cluster,
    ) -> Self {
        Self {
            gateway,
            store,
            settings,
            url_policy,
            running: Arc::default(),
            shutdown: CancellationToken::new(),
            cluster,
        }
    }

    /// Runs the enabled bridges this instance owns or can claim (their owner is dead or
    /// there is none) and stops the ones another instance took over or that are gone.
    /// Called at start and every heartbeat; returns how many it started.
    pub(crate) async fn reconcile(&self, live: &[InstanceId]) -> Result<usize> {
        let me = self.cluster.me();
        let repo = self.store.gateway();
        let bridges = repo.enabled_bridges().await?;
        let wanted: std::collections::HashSet<Key> = bridges
            .iter()
            .map(|b| (b.user_id.clone(), b.assistant_id.clone()))
            .collect();
        let stale: Vec<Key> = self
            .running
            .lock()
            .expect("bridges lock")
            .keys()
            .filter(|key| !wanted.contains(*key))
            .cloned()
            .collect();
        for key in stale {
            self.stop(key);
        }
        let mut started = 0;
        for bridge in bridges {
            let key = (bridge.user_id.clone(), bridge.assistant_id.clone());
            let running_here = self
                .running
                .lock()
                .expect("bridges lock")
                .contains_key(&key);
            let held_by_live_other = bridge
                .owner_instance
                .is_some_and(|owner| owner != me && live.contains(&owner));
            if held_by_live_other {
                if running_here {
                    tracing::info!(user = %key.0, assistant = %key.1.as_str(), "a Xiaozhi bridge moved to another instance");
                    self.stop(key);
                }
                continue;
            }
            if bridge.owner_instance == Some(me) && running_here {
                continue;
            }
            if repo.claim_bridge(bridge.id, me, live).await? {
                if !running_here {
                    self.spawn(bridge);
                    started += 1;
                }
            } else if running_here {
                tracing::info!(user = %key.0, assistant = %key.1.as_str(), "a Xiaozhi bridge moved to another instance");
                self.stop(key);
            }
        }
        Ok(started)
    }

    /// Another instance saved or deleted the bridge (and runs it now, if anyone does).
    pub(crate) fn changed_elsewhere(&self, user: &UserId, assistant: &AssistantId) {
        self.stop((user.clone(), assistant.clone()));
    }

    /// Creates or replaces the assistant's bridge and (re)starts it.
    pub async fn put(
        &self,
        user: &UserId,
        assistant: &AssistantId,
        endpoint: &str,
        enabled: bool,
    ) -> Result<XiaozhiBridge> {
        if endpoint.len() > 4096 {
            return Err(Error::validation(
                "endpoint must be at most 4096 characters",
            ));
        }
        let url = self
            .url_policy
            .check_field(endpoint, "endpoint", &["ws", "wss"])
            .await?;
        let repo = self.store.gateway();
        let now = crate::domain::now();
        let existing = repo.bridge_of(user, assistant).await?;
        let bridge = XiaozhiBridge {
            id: existing.as_ref().map_or_else(Uuid::now_v7, |b| b.id),
            user_id: user.clone(),
            assistant_id: assistant.clone(),
            endpoint: url.to_string(),
            enabled,
            owner_instance: Some(self.cluster.me()),
            created_at: existing.as_ref().map_or(now, |b| b.created_at),
            updated_at: now,
        };
        repo.upsert_bridge(&bridge).await?;
        self.stop((user.clone(), assistant.clone()));
        if enabled {
            self.spawn(bridge.clone());
        }
        self.cluster.tell(Note::BridgeChanged {
            user: user.to_string(),
            assistant: assistant.as_str().to_owned(),
        });
        Ok(bridge)
    }

    pub async fn get(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<(XiaozhiBridge, BridgeStatus)> {
        let bridge = self
            .store
            .gateway()
            .bridge_of(user, assistant)
            .await?
            .ok_or_else(|| {
                Error::NotFound(Resource::XiaozhiBridge, assistant.as_str().to_owned())
            })?;
        let status = self
            .running
            .lock()
            .expect("bridges lock")
            .get(&(user.clone(), assistant.clone()))
            .map(|r| r.status.lock().expect("status lock").clone())
            .unwrap_or_else(|| BridgeStatus {
                user_id: user.to_string(),
                assistant_id: assistant.as_str().to_owned(),
                state: if bridge.enabled {
                    BridgeState::Elsewhere
                } else {
                    BridgeState::Disabled
                },
                endpoint: redacted(&bridge.endpoint),
                connected_at: None,
                connections: 0,
                last_error: None,
                next_attempt_in_ms: None,
            });
        Ok((bridge, status))
    }

    pub async fn delete(&self, user: &UserId, assistant: &AssistantId) -> Result<()> {
        self.stop((user.clone(), assistant.clone()));
        if !self.store.gateway().delete_bridge(user, assistant).await? {
            return Err(Error::NotFound(
                Resource::XiaozhiBridge,
                assistant.as_str().to_owned(),
            ));
        }
        self.cluster.tell(Note::BridgeChanged {
            user: user.to_string(),
            assistant: assistant.as_str().to_owned(),
        });
        Ok(())
    }

    /// Every running bridge, for the admin.
    pub fn statuses(&self) -> Vec<BridgeStatus> {
        let running = self.running.lock().expect("bridges lock");
        let mut statuses: Vec<BridgeStatus> = running
            .values()
            .map(|r| r.status.lock().expect("status lock").clone())
            .collect();
        statuses.sort_by(|a, b| (&a.user_id, &a.assistant_id).cmp(&(&b.user_id, &b.assistant_id)));
        statuses
    }

    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    fn stop(&self, key: Key) {
        if let Some(running) = self.running.lock().expect("bridges lock").remove(&key) {
            running.cancel.cancel();
        }
    }

    fn spawn(&self, bridge: XiaozhiBridge) {
        let key = (bridge.user_id.clone(), bridge.assistant_id.clone());
        let cancel = self.shutdown.child_token();
        let status = Arc::new(Mutex::new(BridgeStatus {
            user_id: bridge.user_id.to_string(),
            assistant_id: bridge.assistant_id.as_str().to_owned(),
            state: BridgeState::Connecting,
            endpoint: redacted(&bridge.endpoint),
            connected_at: None,
            connections: 0,
            last_error: None,
            next_attempt_in_ms: None,
        }));
        let task = BridgeTask {
            handler: GatewayHandler::new(
                self.gateway.clone(),
                Some(GatewayPrincipal {
                    user: bridge.user_id.clone(),
                    assistant: bridge.assistant_id.clone(),
                    channel: GatewayChannel::Xiaozhi,
                    // Xiaozhi devices speak 2024-11-05.
                    older_client: true,
                    credential: Some(bridge.id),
                }),
                self.settings.xiaozhi.max_result_bytes,
            ),
            endpoint: bridge.endpoint.clone(),
            url_policy: self.url_policy.clone(),
            settings: self.settings.clone(),
            status: status.clone(),
            cancel: cancel.clone(),
        };
        tokio::spawn(task.run());
        if let Some(previous) = self
            .running
            .lock()
            .expect("bridges lock")
            .insert(key, Running { cancel, status })
        {
            previous.cancel.cancel();
        }
    }
}

struct BridgeTask {
    handler: GatewayHandler,
    endpoint: String,
    /// Applied to every address each (re)connect dials: the endpoint was checked when it
    /// was saved, perhaps under another policy or before its name resolved.
    url_policy: Arc<UrlPolicy>,
    settings: Arc<Settings>,
    status: Arc<Mutex<BridgeStatus>>,
    cancel: CancellationToken,
}

impl BridgeTask {
    fn update(&self, change: impl FnOnce(&mut BridgeStatus)) {
        change(&mut self.status.lock().expect("status lock"));
    }

    async fn run(self) {
        let xiaozhi = &self.settings.xiaozhi;
        let backoff = || {
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_secs(xiaozhi.reconnect_min_secs))
                .with_max_delay(Duration::from_secs(
                    xiaozhi.reconnect_max_secs.max(xiaozhi.reconnect_min_secs),
                ))
                .with_jitter()
                .without_max_times()
                .build()
        };
        let mut delays = backoff();
        loop {
            self.update(|s| {
                s.state = BridgeState::Connecting;
                s.next_attempt_in_ms = None;
            });
            let connect = self.connect();
            let attempt = tokio::select! {
                attempt = tokio::time::timeout(Duration::from_secs(30), connect) => attempt,
                () = self.cancel.cancelled() => return,
            };
            let reason = match attempt {
                Ok(Ok(socket)) => {
                    delays = backoff();
                    self.update(|s| {
                        s.state = BridgeState::Connected;
                        s.connected_at = Some(crate::domain::now());
                        s.connections += 1;
                        s.last_error = None;
                    });
                    tracing::info!(endpoint = %redacted(&self.endpoint), "Xiaozhi bridge connected");
                    let reason = self.serve(socket).await;
                    if self.cancel.is_cancelled() {
                        return;
                    }
                    reason
                }
                Ok(Err(error)) => format!("connect failed: {error}"),
                Err(_) => "connect timed out after 30 s".into(),
            };
            let delay = delays.next().unwrap_or(Duration::from_secs(60));
            tracing::info!(endpoint = %redacted(&self.endpoint), %reason, ?delay, "Xiaozhi bridge reconnecting");
            self.update(|s| {
                s.state = BridgeState::Reconnecting;
                s.connected_at = None;
                s.last_error = Some(reason);
                s.next_attempt_in_ms = Some(delay.as_millis() as u64);
            });
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.cancel.cancelled() => return,
            }
        }
    }

    /// Serves MCP over one socket until it ends; returns why it ended.
    /// The WebSocket handshake over a socket the URL policy dialled.
    async fn connect(
        &self,
    ) -> Result<
        tokio_tungstenite::WebSocketStream<
            tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
        >,
        String,
    > {
        let url = url::Url::parse(&self.endpoint).map_err(|e| e.to_string())?;
        let stream = self
            .url_policy
            .dial(&url)
            .await
            .map_err(|e| e.to_string())?;
        let (socket, _) = tokio_tungstenite::client_async_tls_with_config(
            self.endpoint.as_str(),
            stream,
            None,
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(socket)
    }

    async fn serve<S>(&self, socket: tokio_tungstenite::WebSocketStream<S>) -> String
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (mut outgoing, mut incoming) = socket.split();
        let (to_server, server_rx) =
            futures::channel::mpsc::channel::<RxJsonRpcMessage<RoleServer>>(64);
        let (server_tx, mut from_server) =
            futures::channel::mpsc::channel::<TxJsonRpcMessage<RoleServer>>(64);
        let handler = self.handler.clone();
        let server = tokio::spawn(async move {
            match handler.serve((server_tx, server_rx)).await {
                Ok(running) => {
                    let _ = running.waiting().await;
                }
                Err(error) => tracing::info!(%error, "Xiaozhi session ended during initialize"),
            }
        });
        let mut to_server = to_server;
        let ping_every = Duration::from_secs(self.settings.xiaozhi.ping_interval_secs);
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
        let mut awaiting_pong = false;
        let reason = loop {
            tokio::select! {
                frame = incoming.next() => match frame {
                    Some(Ok(Message::Text(text))) => {
                        match serde_json::from_str::<RxJsonRpcMessage<RoleServer>>(&text) {
                            Ok(message) => {
                                if to_server.send(message).await.is_err() {
                                    break "the MCP session ended".to_owned();
                                }
                            }
                            Err(error) => tracing::warn!(%error, "ignored a frame that is not JSON-RPC"),
                        }
                    }
                    Some(Ok(Message::Pong(_))) => awaiting_pong = false,
                    Some(Ok(Message::Close(frame))) => {
                        break format!("closed by the endpoint{}", frame.map(|f| format!(": {}", f.reason)).unwrap_or_default());
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => break format!("socket error: {error}"),
                    None => break "the endpoint closed the socket".to_owned(),
                },
                message = from_server.next() => match message {
                    Some(message) => {
                        let text = match serde_json::to_string(&message) {
                            Ok(text) => text,
                            Err(error) => break format!("could not encode a message: {error}"),
                        };
                        if let Err(error) = outgoing.send(Message::text(text)).await {
                            break format!("send failed: {error}");
                        }
                    }
                    None => break "the MCP session ended".to_owned(),
                },
                _ = ping.tick() => {
                    if awaiting_pong {
                        break format!("no pong within {} s", ping_every.as_secs());
                    }
                    awaiting_pong = true;
                    if let Err(error) = outgoing.send(Message::Ping(Vec::new().into())).await {
                        break format!("ping failed: {error}");
                    }
                }
                () = self.cancel.cancelled() => {
                    let _ = outgoing.send(Message::Close(None)).await;
                    break "stopped".to_owned();
                }
            }
        };
        drop(to_server);
        server.abort();
        reason
    }
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn redacted_endpoints_show_no_credentials() {
        assert_eq!(
            redacted("wss://user:pw@api.example/mcp/?token=t0k"),
            "wss://api.example/mcp/?…"
        );
        assert_eq!(redacted("wss://api.example/mcp/"), "wss://api.example/mcp/");
    }
}
