//! OTLP trace export (`telemetry.otlp_endpoint`, docs/API.md §7): the `tracing` spans of requests,
//! batches and group commits, sent as OTLP/HTTP protobuf to a collector.
//!
//! Owns the OpenTelemetry tracer provider and the HTTP client its exporter sends through.
//! The SDK's batch processor runs on its own thread with no async runtime, and the
//! ready-made async reqwest client panics there ("no reactor running"), while the blocking
//! one builds and drops a runtime of its own per process, which panics when done from async
//! code. So the exporter gets [`RuntimeClient`]: each export is spawned on the server's
//! runtime with the reqwest client the rest of the binary uses, and the processor thread
//! waits on the join handle, which any executor can poll.
//!
//! Bounded: the batch processor keeps at most `OTEL_BSP_MAX_QUEUE_SIZE` (2048) finished
//! spans and drops the rest when the collector is slow or down; an export times out after
//! 10 s. Sampling follows the standard `OTEL_TRACES_SAMPLER`/`OTEL_TRACES_SAMPLER_ARG`.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// How long one export may take, connection included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for the last spans to leave.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// A collector's answer is a small protobuf; anything longer is not read.
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Why trace export cannot start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("telemetry.otlp_endpoint {endpoint:?} is not a URL: {reason}")]
    NotAUrl { endpoint: String, reason: String },
    #[error(
        "telemetry.otlp_endpoint {0:?} must be an http:// or https:// URL with a host (OTLP/HTTP, e.g. http://collector:4318)"
    )]
    NotHttp(String),
    #[error("cannot build the OTLP HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
}

/// The traces URL for a configured endpoint: like `OTEL_EXPORTER_OTLP_ENDPOINT`, a base URL
/// to which `/v1/traces` is appended, unless it already ends with it.
pub fn traces_url(endpoint: &str) -> Result<String, TelemetryError> {
    let endpoint = endpoint.trim();
    let url = reqwest::Url::parse(endpoint).map_err(|e| TelemetryError::NotAUrl {
        endpoint: endpoint.to_string(),
        reason: e.to_string(),
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(TelemetryError::NotHttp(endpoint.to_string()));
    }
    if url.path().trim_end_matches('/').ends_with("/v1/traces") {
        return Ok(endpoint.to_string());
    }
    Ok(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
}

/// Sends the exporter's requests on the server's runtime (see the module docs).
#[derive(Debug)]
pub struct RuntimeClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl RuntimeClient {
    async fn send(
        client: reqwest::Client,
        request: Request<Bytes>,
    ) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let mut resp = client
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .timeout(EXPORT_TIMEOUT)
            .send()
            .await?;
        let mut builder = Response::builder().status(resp.status());
        if let Some(h) = builder.headers_mut() {
            *h = std::mem::take(resp.headers_mut());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await? {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err("the collector's response is over 1 MiB".into());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(builder.body(Bytes::from(body))?)
    }
}

// `HttpClient` is an `async_trait`; this is the signature that macro would write.
impl HttpClient for RuntimeClient {
    fn send_bytes<'a, 'b>(
        &'a self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        let task = self.runtime.spawn(Self::send(self.client.clone(), request));
        Box::pin(async move { task.await? })
    }
}

/// The installed exporter; [`Telemetry::shutdown`] flushes what is left.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Build the exporter for `endpoint`, sending on `runtime`. Nothing is sent until spans
    /// end; an unreachable collector costs dropped spans and a log line, never a request.
    pub fn start(endpoint: &str, runtime: tokio::runtime::Handle) -> Result<Self, TelemetryError> {
        let url = traces_url(endpoint)?;
        let client = reqwest::Client::builder()
            .build()
            .map_err(TelemetryError::Client)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(RuntimeClient { client, runtime })
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(TelemetryError::Exporter)?;
        let resource = Resource::builder()
            .with_service_name("veltrix")
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        Ok(Self { provider })
    }

    pub fn tracer(&self) -> opentelemetry_sdk::trace::Tracer {
        self.provider.tracer("veltrix")
    }

    /// Export the spans still queued (bounded by a timeout); call from outside async code,
    /// while the runtime that sends is still alive.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::warn!(error = %e, "exporting the last spans failed");
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::traces_url;

    #[test]
    fn endpoint_is_a_base_url_like_otel_exporter_otlp_endpoint() {
        assert_eq!(
            traces_url("http://collector:4318").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://c.example/otlp").unwrap(),
            "https://c.example/otlp/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces").unwrap(),
            "http://c:4318/v1/traces"
        );
        for bad in ["collector:4318", "grpc://c:4317", "not a url", "http://"] {
            let err = traces_url(bad).expect_err(bad).to_string();
            assert!(err.contains("telemetry.otlp_endpoint"), "{err}");
        }
    }
}
