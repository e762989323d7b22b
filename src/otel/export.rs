//! The tracer provider: the OTLP exporter (gRPC or HTTP) behind the SDK's batch processor, the sampler,
//! and the resource that names epp.
//!
//! The batch processor exports from its own thread, off the request path: a request only hands its
//! finished spans to a bounded queue (`OTEL_BSP_*` size it; spans beyond it are dropped and the SDK says
//! so). The gRPC exporter's channel is built here, on the runtime, and served by it; the HTTP exporter
//! goes through [`RuntimeHttpClient`], which runs epp's own reqwest client on the runtime too.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use opentelemetry::KeyValue;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{SpanExporter, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::resource::EnvResourceDetector;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tonic::transport::{Certificate, ClientTlsConfig};

use super::settings::{Exporter, Protocol, TracingConfigError, TracingSettings, DEFAULT_SERVICE_NAME};

/// Largest collector response read (an export answer is a few bytes; a partial-success message more).
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Builds the provider `settings` describe. Must run on the Tokio runtime (the gRPC channel is spawned
/// on it).
pub fn tracer_provider(settings: &TracingSettings) -> Result<SdkTracerProvider, TracingConfigError> {
    let builder = SdkTracerProvider::builder()
        .with_sampler(settings.sampler.sampler())
        .with_resource(resource(settings));
    let builder = match settings.exporter {
        Exporter::None => builder,
        Exporter::Otlp(protocol) => builder.with_batch_exporter(span_exporter(settings, protocol)?),
    };
    Ok(builder.build())
}

/// `service.name` from `OTEL_SERVICE_NAME`, else `OTEL_RESOURCE_ATTRIBUTES`'s, else llm-d's; the rest of
/// `OTEL_RESOURCE_ATTRIBUTES` as given; and epp's version.
fn resource(settings: &TracingSettings) -> Resource {
    let from_env = Resource::builder_empty().with_detector(Box::new(EnvResourceDetector::new())).build();
    let attribute_name =
        from_env.get(&opentelemetry::Key::from_static_str("service.name")).map(|v| v.to_string());
    let service_name =
        settings.service_name.clone().or(attribute_name).unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_string());
    let attributes = from_env.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone()));
    Resource::builder_empty()
        .with_attributes(attributes)
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_service_name(service_name)
        .build()
}

fn span_exporter(settings: &TracingSettings, protocol: Protocol) -> Result<SpanExporter, TracingConfigError> {
    let ca = settings
        .certificate
        .as_ref()
        .map(|(var, path)| {
            std::fs::read(path).map_err(|source| TracingConfigError::Certificate {
                var,
                path: path.clone(),
                source,
            })
        })
        .transpose()?;
    let built = match protocol {
        Protocol::Grpc => {
            let mut builder = SpanExporter::builder().with_tonic();
            // The exporter speaks TLS to an https endpoint; its default config trusts no root at all.
            if settings.endpoint.as_deref().is_some_and(|e| e.starts_with("https://")) {
                let mut tls = ClientTlsConfig::new().with_webpki_roots();
                if let Some(pem) = &ca {
                    tls = tls.ca_certificate(Certificate::from_pem(pem));
                }
                builder = builder.with_tls_config(tls);
            }
            builder.build()
        }
        Protocol::HttpProtobuf => {
            let client = RuntimeHttpClient::new(settings.timeout, ca.as_deref())?;
            SpanExporter::builder().with_http().with_http_client(client).build()
        }
    };
    built.map_err(|e| TracingConfigError::Exporter(e.to_string()))
}

/// OTLP/HTTP through epp's reqwest client, run on the Tokio runtime: the batch processor's thread polls
/// the export future with a plain executor, where an async client would find no reactor, so the request
/// itself is spawned onto the runtime and only its result awaited there.
#[derive(Debug)]
pub(super) struct RuntimeHttpClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl RuntimeHttpClient {
    fn new(timeout: Duration, ca_pem: Option<&[u8]>) -> Result<Self, TracingConfigError> {
        let mut builder = reqwest::Client::builder().timeout(timeout);
        if let Some(pem) = ca_pem {
            let certificate = reqwest::Certificate::from_pem(pem)
                .map_err(|e| TracingConfigError::Exporter(format!("the CA certificate: {e}")))?;
            builder = builder.add_root_certificate(certificate);
        }
        let client = builder.build().map_err(|e| TracingConfigError::Exporter(e.to_string()))?;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| TracingConfigError::Exporter(format!("no Tokio runtime: {e}")))?;
        Ok(Self { client, runtime })
    }
}

#[async_trait]
impl HttpClient for RuntimeHttpClient {
    async fn send_bytes(&self, request: http::Request<Bytes>) -> Result<http::Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let mut response = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let (status, headers) = (response.status(), response.headers().clone());
            // Read at most MAX_RESPONSE_BYTES: a misbehaving collector's endless answer is cut, not buffered.
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                let room = MAX_RESPONSE_BYTES - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if body.len() == MAX_RESPONSE_BYTES {
                    break;
                }
            }
            let mut out = http::Response::new(Bytes::from(body));
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            Ok::<_, HttpError>(out)
        });
        sent.await?
    }
}
