//! OpenTelemetry traces: when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, the spans the engine and
//! the server open under the `sandlog::otel` target (one per HTTP request,
//! one per MCP tool call, one per execution) go to that OTLP receiver over HTTP with protobuf, as
//! the other standard `OTEL_*` variables say (headers, timeout, service
//! name, resource attributes, batch delays; `OTEL_TRACES_EXPORTER=none`
//! turns them off). Unset, nothing is set up and those spans are never
//! enabled, so they cost nothing.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Level;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

/// The target of the spans that are exported.
pub const TARGET: &str = "sandlog::otel";

/// Flushes and stops the exporter when dropped (at the end of `main`).
pub struct Guard(SdkTracerProvider);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Err(error) = self.0.shutdown() {
            crate::exit::stderr_line(&format!(
                "sandlog: warning: sending the last traces failed: {error}"
            ));
        }
    }
}

fn set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|value| !value.is_empty())
}

/// The layer exporting `sandlog::otel` spans, if the environment asks for
/// traces; a warning, and no traces, if the exporter cannot be made.
pub fn layer<S>() -> Option<(Box<dyn Layer<S> + Send + Sync>, Guard)>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    let wanted = set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    let off = std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|value| value == "none");
    if !wanted || off {
        return None;
    }
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
    {
        Ok(exporter) => exporter,
        Err(error) => {
            crate::exit::stderr_line(&format!(
                "sandlog: warning: no traces: the OTLP exporter could not be made: {error}"
            ));
            return None;
        }
    };
    let mut resource = Resource::builder();
    if !set("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name("sandlog");
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("sandlog");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(Targets::new().with_target(TARGET, Level::INFO))
        .boxed();
    Some((layer, Guard(provider)))
}
