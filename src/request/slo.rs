//! The request's latency objectives, from llm-d's SLO headers (llm-d/llm-d-router:pkg/epp/metadata/
//! consts.go): `x-llm-d-slo-ttft-ms` and `x-llm-d-slo-tpot-ms`, and the deprecated `x-slo-ttft-ms` /
//! `x-slo-tpot-ms` that GIE reads, in milliseconds.
//!
//! Why a malformed value is a 400 here, where llm-d parses it as 0: a typo in an SLO header would
//! otherwise silently turn SLO-aware routing off for that client, and the admitter would then never shed
//! its sheddable requests. The current name wins when both are present.

use crate::error::RequestError;

use super::Headers;

/// TTFT objective headers, current name first.
pub const SLO_TTFT_HEADERS: [&str; 2] = ["x-llm-d-slo-ttft-ms", "x-slo-ttft-ms"];
/// TPOT objective headers, current name first.
pub const SLO_TPOT_HEADERS: [&str; 2] = ["x-llm-d-slo-tpot-ms", "x-slo-tpot-ms"];

/// A request's latency objectives in milliseconds; 0 means none was given (llm-d's "absent parses as 0").
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Slo {
    pub ttft_ms: f64,
    pub tpot_ms: f64,
}

impl Slo {
    /// Reads the SLO headers; a value that is not a finite, non-negative number of milliseconds is a 400
    /// naming the header.
    pub fn from_headers(headers: &Headers) -> Result<Slo, RequestError> {
        Ok(Slo { ttft_ms: read(headers, &SLO_TTFT_HEADERS)?, tpot_ms: read(headers, &SLO_TPOT_HEADERS)? })
    }

    /// Whether either objective is set.
    pub fn any(&self) -> bool {
        self.ttft_ms > 0.0 || self.tpot_ms > 0.0
    }

    /// The TTFT objective, when set.
    pub fn ttft(&self) -> Option<std::time::Duration> {
        (self.ttft_ms > 0.0).then(|| std::time::Duration::from_secs_f64(self.ttft_ms / 1000.0))
    }
}

fn read(headers: &Headers, names: &[&str; 2]) -> Result<f64, RequestError> {
    let Some((name, value)) = names.iter().find_map(|n| headers.get(n).map(|v| (*n, v))) else {
        return Ok(0.0);
    };
    match value.trim().parse::<f64>() {
        Ok(ms) if ms.is_finite() && ms >= 0.0 => Ok(ms),
        _ => Err(RequestError::bad_request(format!(
            "header {name}: {value:?} is not a latency objective (a non-negative number of milliseconds)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs.iter().copied().collect()
    }

    #[test]
    fn absent_headers_are_no_objective() {
        let slo = Slo::from_headers(&Headers::new()).unwrap();
        assert_eq!(slo, Slo::default());
        assert!(!slo.any());
        assert_eq!(slo.ttft(), None);
    }

    #[test]
    fn current_and_deprecated_names_are_read_current_first() {
        let slo = Slo::from_headers(&headers(&[("x-slo-ttft-ms", "900"), ("x-slo-tpot-ms", "40")])).unwrap();
        assert_eq!(slo, Slo { ttft_ms: 900.0, tpot_ms: 40.0 });
        let both = headers(&[("x-slo-ttft-ms", "900"), ("X-LLM-D-SLO-TTFT-MS", " 250.5 ")]);
        let slo = Slo::from_headers(&both).unwrap();
        assert_eq!(slo.ttft_ms, 250.5);
        assert_eq!(slo.ttft(), Some(std::time::Duration::from_micros(250_500)));
    }

    #[test]
    fn malformed_values_are_a_400_naming_the_header() {
        for bad in ["fast", "-5", "NaN", "inf", ""] {
            let err = Slo::from_headers(&headers(&[("x-llm-d-slo-tpot-ms", bad)])).unwrap_err();
            assert_eq!(err.code.http_status(), 400, "{bad:?}");
            assert!(err.message.contains("x-llm-d-slo-tpot-ms"), "{}", err.message);
        }
    }
}
