//! Building and running the service: the same code path for `main` and for tests.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppContext, AppState};
use crate::app::Services;
use crate::config::Settings;
use crate::pool::{Pool, PoolError};
use crate::security::{Cipher, CryptoError, UrlPolicy};
use crate::store::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    #[error("database: {0}")]
    Store(#[from] StoreError),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },
    #[error("connection pool: {0}")]
    Pool(#[from] PoolError),
    #[error("start-up failed: {0}")]
    Bootstrap(crate::error::Error),
    #[error("server error: {0}")]
    Serve(std::io::Error),
}

/// After the shutdown grace, how long the 503 answers to unfinished requests get to go out.
const ANSWER_GRACE: Duration = Duration::from_secs(1);

/// A built, listening service that has not started serving yet.
pub struct Application {
    listener: TcpListener,
    port: u16,
    state: AppState,
    shutdown: CancellationToken,
    generated_admin_key: Option<String>,
    /// The gRPC listener and its port, when `grpc.enabled`.
    grpc: Option<(TcpListener, u16)>,
}

/// Opens the database and applies pending migrations; shared by `serve` and `migrate`.
pub async fn open_store(settings: &Settings) -> Result<Store, StartupError> {
    let cipher = Arc::new(Cipher::load(
        &settings.security,
        &settings.storage.data_dir,
    )?);
    let store = Store::connect(settings, cipher).await?;
    store.migrate().await?;
    Ok(store)
}

impl Application {
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        let url_policy = UrlPolicy::from_settings(&settings.security);
        Self::build_with_policy(settings, url_policy).await
    }

    /// Like [`Application::build`], with the URL policy given: how a test hands the
    /// service a scripted DNS (`UrlPolicy::with_lookup`).
    pub async fn build_with_policy(
        settings: Settings,
        url_policy: UrlPolicy,
    ) -> Result<Self, StartupError> {
        let settings = Arc::new(settings);
        let store = open_store(&settings).await?;
        let cluster = crate::cluster::Cluster::join(
            store.clone(),
            settings.cluster.clone(),
            &settings.storage.data_dir,
        )
        .await?;
        let pool = Pool::start(
            settings.pool.clone(),
            Arc::new(crate::metrics::Metrics::new()),
        )
        .await?;
        let services = Services::new(store, settings.clone(), pool, cluster, Arc::new(url_policy))
            .await
            .map_err(StartupError::Bootstrap)?;
        // Calls a previous process left open are settled before anything is served.
        services
            .take_over_orphans()
            .await
            .map_err(StartupError::Bootstrap)?;
        // A first start fills the catalog with the built-in entries, all disabled. Not fatal:
        // another instance starting at the same moment may have seeded it first.
        if let Err(error) = services.catalog.seed().await {
            tracing::warn!(%error, "the built-in catalog entries were not imported");
        }
        let generated_admin_key = services
            .keys
            .bootstrap(settings.auth.bootstrap_admin_key.as_ref())
            .await
            .map_err(StartupError::Bootstrap)?;
        let address = format!("{}:{}", settings.server.host, settings.server.port);
        let listener = TcpListener::bind(&address)
            .await
            .map_err(|source| StartupError::Bind { address, source })?;
        let port = listener.local_addr().map_err(StartupError::Serve)?.port();
        services.oauth.listening_on(port);
        let grpc = if settings.grpc.enabled {
            let address = format!("{}:{}", settings.server.host, settings.grpc.port);
            let listener = TcpListener::bind(&address)
                .await
                .map_err(|source| StartupError::Bind { address, source })?;
            let port = listener.local_addr().map_err(StartupError::Serve)?.port();
            Some((listener, port))
        } else {
            None
        };
        let shutdown = CancellationToken::new();
        Ok(Self {
            listener,
            port,
            state: Arc::new(AppContext {
                services,
                settings,
                shutdown: shutdown.clone(),
                grace_over: CancellationToken::new(),
            }),
            shutdown,
            generated_admin_key,
            grpc,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The gRPC port, when `grpc.enabled`.
    pub fn grpc_port(&self) -> Option<u16> {
        self.grpc.as_ref().map(|(_, port)| *port)
    }

    /// The admin key generated on this first start, if one was; the caller shows it once.
    pub fn take_generated_admin_key(&mut self) -> Option<String> {
        self.generated_admin_key.take()
    }

    /// Cancel it to stop the service as SIGTERM would.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Serves until SIGINT/SIGTERM or the shutdown token; in-flight requests get
    /// `server.shutdown_grace_secs` to finish.
    pub async fn run_until_stopped(self) -> Result<(), StartupError> {
        let grace = Duration::from_secs(self.state.settings.server.shutdown_grace_secs);
        let store = self.state.services.store.clone();
        let pool = self.state.services.pool.clone();
        let confirmations = self.state.services.confirmations.clone();
        let bridges = self.state.services.xiaozhi.clone();
        let cluster = self.state.services.cluster.clone();
        let audit = self.state.services.audit.clone();
        self.state
            .services
            .start_cluster_duties(self.shutdown.child_token());
        let globals = &self.state.settings.global_servers;
        if !globals.file.trim().is_empty() {
            crate::services::GlobalServersReloader::new(
                self.state.services.upstream.globals().clone(),
                pool.clone(),
                globals.file.trim().into(),
                Duration::from_secs(globals.poll_secs.max(1)),
            )
            .start(self.shutdown.child_token())
            .await;
        }
        let shutdown = self.shutdown.clone();
        let on_signal = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = termination_signal() => {
                    tracing::info!("termination signal received; shutting down");
                    on_signal.cancel();
                }
                _ = on_signal.cancelled() => {}
            }
        });
        let grpc = self.grpc.map(|(listener, port)| {
            tracing::info!(port, "gRPC listening");
            tokio::spawn(crate::grpc::serve(
                listener,
                self.state.services.clone(),
                shutdown.clone(),
            ))
        });
        let stopping = shutdown.clone();
        let grace_over = self.state.grace_over.clone();
        let server = api::serve(self.listener, self.state, async move {
            stopping.cancelled().await
        });
        tracing::info!(port = self.port, "mcp-pool listening");
        let mut server = std::pin::pin!(server);
        tokio::select! {
            result = &mut server => result.map_err(StartupError::Serve)?,
            _ = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
                tracing::warn!(?grace, "requests still running after the grace period; answering them 503");
                grace_over.cancel();
                // Long enough to write those answers; streams still open are then closed.
                let _ = tokio::time::timeout(ANSWER_GRACE, &mut server).await;
            }
        }
        if let Some(grpc) = grpc {
            // Update streams end with the shutdown token; calls in flight get the grace.
            match tokio::time::timeout(grace, grpc).await {
                Ok(Ok(Err(error))) => tracing::error!(%error, "the gRPC server failed"),
                Err(_) => tracing::warn!("gRPC calls still running after the grace period"),
                _ => {}
            }
        }
        bridges.shutdown();
        // Parked calls are cancelled and stored; running ones are settled by the next sweep
        // of any instance, once this one has left.
        confirmations.shutdown().await;
        // Every connection actor closes its session; stdio children are killed and reaped.
        pool.shutdown().await;
        // Every call has ended: its audit row goes to the database (or waits in the journal).
        audit.shutdown().await;
        cluster.leave().await;
        store.close().await;
        tracing::info!("mcp-pool stopped");
        Ok(())
    }
}

async fn termination_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
}
