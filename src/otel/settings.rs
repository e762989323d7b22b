//! What `--tracing` and the standard `OTEL_*` variables ask for, checked before anything starts: a value
//! the OpenTelemetry SDK would quietly replace by its default is a start-up error here, naming the
//! variable (the SDKs log and carry on, so a typo in a sampler silently traces 100 % or nothing).
//!
//! The variables are the OpenTelemetry specification's
//! (<https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/>). The defaults
//! where epp and the specification differ are llm-d's, so a Deployment's environment keeps its meaning
//! when the image changes (`llm-d/llm-d-router:pkg/common/observability/tracing/telemetry.go`): OTLP over
//! gRPC, and `parentbased_traceidratio` at 0.1.

use std::path::PathBuf;
use std::time::Duration;

use opentelemetry_sdk::trace::Sampler;

/// The service name spans carry unless `OTEL_SERVICE_NAME` (or `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`) says otherwise: llm-d's, so trace queries written for it find epp.
pub const DEFAULT_SERVICE_NAME: &str = "llm-d-epp";
/// The fraction of new traces sampled when `OTEL_TRACES_SAMPLER_ARG` is unset (llm-d's default).
pub const DEFAULT_SAMPLE_RATIO: f64 = 0.1;
/// How long one export may take (`OTEL_EXPORTER_OTLP_TIMEOUT`'s default in the specification).
pub const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// A tracing variable that cannot be honoured.
#[derive(Debug, thiserror::Error)]
pub enum TracingConfigError {
    #[error("{var}={value:?} is not supported; use one of: {supported}")]
    Unsupported { var: &'static str, value: String, supported: &'static str },
    #[error("{var}={value:?}: {why}")]
    Invalid { var: &'static str, value: String, why: &'static str },
    #[error("{var}: reading the CA certificate {path}: {source}", path = path.display())]
    Certificate {
        var: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("building the OTLP span exporter: {0}")]
    Exporter(String),
}

/// How spans leave epp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exporter {
    /// OTLP to a collector (`OTEL_TRACES_EXPORTER=otlp`, the default).
    Otlp(Protocol),
    /// Spans are made (and `traceparent` propagated) but sent nowhere (`OTEL_TRACES_EXPORTER=none`).
    None,
}

/// The OTLP transport (`OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// Which traces are kept (`OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SamplerSetting {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
    /// The parent's decision when the request carries a `traceparent`; otherwise the inner one's.
    ParentBased(RootSampler),
}

/// The sampler a [`SamplerSetting::ParentBased`] applies to new traces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RootSampler {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
}

impl SamplerSetting {
    /// The SDK's sampler.
    pub fn sampler(self) -> Sampler {
        let root = |r: RootSampler| match r {
            RootSampler::AlwaysOn => Sampler::AlwaysOn,
            RootSampler::AlwaysOff => Sampler::AlwaysOff,
            RootSampler::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
        };
        match self {
            SamplerSetting::AlwaysOn => Sampler::AlwaysOn,
            SamplerSetting::AlwaysOff => Sampler::AlwaysOff,
            SamplerSetting::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
            SamplerSetting::ParentBased(r) => Sampler::ParentBased(Box::new(root(r))),
        }
    }
}

/// Everything tracing is built from, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingSettings {
    pub exporter: Exporter,
    pub sampler: SamplerSetting,
    /// `OTEL_SERVICE_NAME`, when set (else the resource's `service.name`, else [`DEFAULT_SERVICE_NAME`]).
    pub service_name: Option<String>,
    /// A PEM CA bundle that the collector's certificate must chain to
    /// (`OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE`); without it, the public web roots.
    pub certificate: Option<(&'static str, PathBuf)>,
    /// Where spans go when set (`OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`); the exporter reads it itself,
    /// this copy decides whether the gRPC channel needs TLS.
    pub endpoint: Option<String>,
    pub timeout: Duration,
}

const EXPORTERS: &str = "otlp, none";
const PROTOCOLS: &str = "grpc, http/protobuf";
const SAMPLERS: &str = "always_on, always_off, traceidratio, parentbased_always_on, \
                        parentbased_always_off, parentbased_traceidratio";

impl TracingSettings {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, TracingConfigError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// Reads the variables through `var` (the environment, or a table in tests). An empty value counts
    /// as unset, as the specification says.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, TracingConfigError> {
        let var = |name: &str| var(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        // The signal-specific variable wins over the general one.
        let either = |specific: &'static str, general: &'static str| {
            var(specific).map(|v| (specific, v)).or_else(|| var(general).map(|v| (general, v)))
        };
        let exporter = match var("OTEL_TRACES_EXPORTER").as_deref() {
            None | Some("otlp") => Exporter::Otlp(protocol(either(
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ))?),
            Some("none") => Exporter::None,
            Some(other) => return Err(unsupported("OTEL_TRACES_EXPORTER", other, EXPORTERS)),
        };
        let sampler = sampler(var("OTEL_TRACES_SAMPLER"), var("OTEL_TRACES_SAMPLER_ARG"))?;
        let certificate = either("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE")
            .map(|(name, path)| (name, PathBuf::from(path)));
        let endpoint =
            either("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT").map(|(_, v)| v);
        let timeout = match either("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT") {
            None => DEFAULT_EXPORT_TIMEOUT,
            Some((name, v)) => v.parse::<u64>().map(Duration::from_millis).map_err(|_| {
                TracingConfigError::Invalid { var: name, value: v, why: "must be whole milliseconds" }
            })?,
        };
        Ok(Self { exporter, sampler, service_name: var("OTEL_SERVICE_NAME"), certificate, endpoint, timeout })
    }
}

fn unsupported(var: &'static str, value: &str, supported: &'static str) -> TracingConfigError {
    TracingConfigError::Unsupported { var, value: value.to_string(), supported }
}

fn protocol(setting: Option<(&'static str, String)>) -> Result<Protocol, TracingConfigError> {
    match setting {
        None => Ok(Protocol::Grpc),
        Some((_, v)) if v == "grpc" => Ok(Protocol::Grpc),
        Some((_, v)) if v == "http/protobuf" => Ok(Protocol::HttpProtobuf),
        Some((name, v)) => Err(unsupported(name, &v, PROTOCOLS)),
    }
}

fn sampler(name: Option<String>, arg: Option<String>) -> Result<SamplerSetting, TracingConfigError> {
    let ratio = || match &arg {
        None => Ok(DEFAULT_SAMPLE_RATIO),
        Some(v) => v.parse::<f64>().ok().filter(|r| (0.0..=1.0).contains(r)).ok_or_else(|| {
            TracingConfigError::Invalid {
                var: "OTEL_TRACES_SAMPLER_ARG",
                value: v.clone(),
                why: "must be a number from 0 to 1",
            }
        }),
    };
    Ok(match name.as_deref().unwrap_or("parentbased_traceidratio") {
        "always_on" => SamplerSetting::AlwaysOn,
        "always_off" => SamplerSetting::AlwaysOff,
        "traceidratio" => SamplerSetting::Ratio(ratio()?),
        "parentbased_always_on" => SamplerSetting::ParentBased(RootSampler::AlwaysOn),
        "parentbased_always_off" => SamplerSetting::ParentBased(RootSampler::AlwaysOff),
        "parentbased_traceidratio" => SamplerSetting::ParentBased(RootSampler::Ratio(ratio()?)),
        other => return Err(unsupported("OTEL_TRACES_SAMPLER", other, SAMPLERS)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<TracingSettings, TracingConfigError> {
        TracingSettings::from_vars(|name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn defaults_are_llm_ds() {
        let s = settings(&[]).expect("defaults");
        assert_eq!(s.exporter, Exporter::Otlp(Protocol::Grpc));
        assert_eq!(s.sampler, SamplerSetting::ParentBased(RootSampler::Ratio(0.1)));
        assert_eq!((s.service_name, s.certificate, s.endpoint), (None, None, None));
        assert_eq!(s.timeout, DEFAULT_EXPORT_TIMEOUT);
    }

    #[test]
    fn the_signal_specific_variable_wins() {
        let s = settings(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:4318/v1/traces"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/ca.pem"),
            ("OTEL_TRACES_SAMPLER", "always_on"),
            ("OTEL_SERVICE_NAME", "epp-a"),
        ])
        .expect("valid");
        assert_eq!(s.exporter, Exporter::Otlp(Protocol::HttpProtobuf));
        assert_eq!(s.endpoint.as_deref(), Some("http://b:4318/v1/traces"));
        assert_eq!(s.timeout, Duration::from_millis(2500));
        assert_eq!(s.certificate, Some(("OTEL_EXPORTER_OTLP_CERTIFICATE", PathBuf::from("/ca.pem"))));
        assert_eq!(s.sampler, SamplerSetting::AlwaysOn);
        assert_eq!(s.service_name.as_deref(), Some("epp-a"));
        assert_eq!(settings(&[("OTEL_TRACES_EXPORTER", "none")]).expect("none").exporter, Exporter::None);
        let ratio = settings(&[("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "0.5")]);
        assert_eq!(ratio.expect("ratio").sampler, SamplerSetting::Ratio(0.5));
    }

    #[test]
    fn every_bad_value_names_its_variable() {
        let cases = [
            (("OTEL_TRACES_EXPORTER", "console"), "OTEL_TRACES_EXPORTER=\"console\" is not supported"),
            (("OTEL_TRACES_EXPORTER", "zipkin"), "use one of: otlp, none"),
            (("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"), "OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\""),
            (("OTEL_TRACES_SAMPLER", "jaeger_remote"), "OTEL_TRACES_SAMPLER=\"jaeger_remote\""),
            (
                ("OTEL_TRACES_SAMPLER_ARG", "1.5"),
                "OTEL_TRACES_SAMPLER_ARG=\"1.5\": must be a number from 0 to 1",
            ),
            (("OTEL_TRACES_SAMPLER_ARG", "ten"), "OTEL_TRACES_SAMPLER_ARG=\"ten\""),
            (("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"), "OTEL_EXPORTER_OTLP_TIMEOUT=\"10s\": must be whole"),
        ];
        for ((name, value), expected) in cases {
            let err = settings(&[(name, value)]).expect_err(name).to_string();
            assert!(err.contains(expected), "{name}={value}: {err}");
        }
    }

    #[test]
    fn an_empty_value_is_unset() {
        assert_eq!(
            settings(&[("OTEL_TRACES_EXPORTER", " ")]).expect("empty").exporter,
            Exporter::Otlp(Protocol::Grpc)
        );
    }
}
