//! Logging setup: `RUST_LOG` wins over `log.filter`; text or JSON lines; with the `otlp`
//! feature and `log.otlp_endpoint` set, the same spans also go to an OpenTelemetry
//! collector.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogFormat, LogSettings};

/// Keeps the span exporter running; dropping it sends what is still queued. Hold it until
/// the process ends.
#[must_use = "dropping the guard stops the span export"]
#[derive(Default)]
pub struct TelemetryGuard {
    #[cfg(feature = "otlp")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        #[cfg(feature = "otlp")]
        if let Some(provider) = self.provider.take()
            && let Err(error) = provider.shutdown()
        {
            eprintln!("mcp-pool: could not flush the OTLP span export: {error}");
        }
    }
}

/// Installs the global subscriber; a second call (tests) is a no-op.
pub fn init(settings: &LogSettings) -> TelemetryGuard {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&settings.filter));
    // stderr, so commands that print a result (a new key) keep stdout clean.
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match settings.format {
        LogFormat::Text => lines.boxed(),
        LogFormat::Json => lines.json().boxed(),
    };
    let (export, guard) = otlp::layer(settings);
    let _ = tracing_subscriber::registry()
        .with(export)
        .with(lines)
        .with(filter)
        .try_init();
    guard
}

#[cfg(feature = "otlp")]
mod otlp {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::WithExportConfig as _;
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
    use tracing_opentelemetry::OpenTelemetryLayer;
    use tracing_subscriber::Registry;

    use super::TelemetryGuard;
    use crate::config::LogSettings;

    type Export = Option<OpenTelemetryLayer<Registry, SdkTracer>>;

    pub fn layer(settings: &LogSettings) -> (Export, TelemetryGuard) {
        if settings.otlp_endpoint.is_empty() {
            return (None, TelemetryGuard::default());
        }
        // Like OTEL_EXPORTER_OTLP_ENDPOINT, the setting is the collector's base URL.
        let endpoint = format!("{}/v1/traces", settings.otlp_endpoint.trim_end_matches('/'));
        let exporter = match opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint)
            .build()
        {
            Ok(exporter) => exporter,
            Err(error) => {
                // Logging is not up yet; the service still runs, without the export.
                eprintln!("mcp-pool: OTLP span export disabled: {error}");
                return (None, TelemetryGuard::default());
            }
        };
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                Resource::builder()
                    .with_service_name(settings.otlp_service_name.clone())
                    .build(),
            )
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("mcp-pool"));
        (
            Some(layer),
            TelemetryGuard {
                provider: Some(provider),
            },
        )
    }
}

#[cfg(not(feature = "otlp"))]
mod otlp {
    use super::TelemetryGuard;
    use crate::config::LogSettings;

    /// Without the feature, config validation refuses `log.otlp_endpoint`.
    pub fn layer(_: &LogSettings) -> (Option<tracing_subscriber::layer::Identity>, TelemetryGuard) {
        (None, TelemetryGuard::default())
    }
}
