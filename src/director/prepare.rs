//! The first step: everything the director learns from the request itself, before any waiting.
//!
//! Synchronous and cheap: reject what cannot be routed (a malformed subset hint, unless hints are
//! ignored; a body that is not the API it claims; a malformed SLO header), parse the body once, apply the model rewrite (the
//! client's header, then the weighted rules), read the objective's priority and the fairness id, and
//! estimate the tokens.

use std::time::Instant;

use rand::rngs::SmallRng;

use super::{Director, IncomingRequest, OwnedLabels, Rejection};
use crate::datastore::SubsetMatch;
use crate::error::RequestError;
use crate::request::{is_inference_create, parse_request, Headers, ParsedRequest, Slo};
use crate::scheduling::SchedulingRequest;
use crate::wire::{DEFAULT_FAIRNESS_ID, FAIRNESS_HEADER, MODEL_REWRITE_HEADER, OBJECTIVE_HEADER};

/// A request the director has read: labels, the parsed body and the token estimate.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Model, target model, priority and fairness id, as the metrics label the request.
    pub labels: OwnedLabels,
    /// The parsed body; `None` for header-only requests and with the passthrough parser.
    pub parsed: Option<ParsedRequest>,
    /// Estimated prompt tokens.
    pub input_tokens: u64,
    /// Estimated prompt + output tokens.
    pub estimated_tokens: u64,
    /// The latency objectives from the SLO headers.
    pub slo: Slo,
}

impl Prepared {
    /// The `model` the client asked for (empty when the body was not parsed).
    pub fn incoming_model(&self) -> &str {
        &self.labels.model_name
    }

    /// The model the request is served as.
    pub fn target_model(&self) -> &str {
        &self.labels.target_model_name
    }

    /// The request as the scheduling plugins see it, at `now`.
    pub fn scheduling_request<'a>(&'a self, req: &'a IncomingRequest, now: Instant) -> SchedulingRequest<'a> {
        SchedulingRequest {
            request_id: &req.request_id,
            target_model: self.target_model(),
            headers: &req.headers,
            body: &req.body,
            parsed: self.parsed.as_ref(),
            priority: self.labels.priority,
            fairness_id: &self.labels.fairness_id,
            token_ids: None,
            input_tokens: self.input_tokens,
            estimated_tokens: self.estimated_tokens,
            slo: self.slo,
            now,
            dry_run: false,
        }
    }
}

impl Director {
    /// Reads `req`: the [`Prepared`] request, or why it cannot be routed at all (always a 400 here).
    pub fn prepare(&self, req: &IncomingRequest, rng: &mut SmallRng) -> Result<Prepared, Rejection> {
        let mut labels = OwnedLabels {
            fairness_id: req.headers.get(FAIRNESS_HEADER).unwrap_or(DEFAULT_FAIRNESS_ID).to_string(),
            ..Default::default()
        };
        // A hint epp is told to ignore cannot be wrong.
        if let Some(invalid) =
            req.invalid_subset.as_ref().filter(|_| self.options.subset_match != SubsetMatch::Disabled)
        {
            return Err((RequestError::bad_request(invalid.to_string()), labels));
        }
        // A POST with no body cannot be an inference request; forwarding it would only earn the model
        // server's error instead of epp's.
        if req.no_body
            && self.options.parse_bodies
            && req.headers.get(":method") == Some("POST")
            && is_inference_create(&req.path)
        {
            let message = format!("empty request body: a POST to {} needs a JSON body", req.path);
            return Err((RequestError::bad_request(message), labels));
        }
        let slo = match Slo::from_headers(&req.headers) {
            Ok(slo) => slo,
            Err(e) => return Err((e, labels)),
        };
        let parsed = if req.header_only || !self.options.parse_bodies {
            None
        } else {
            match parse_request(&req.path, &req.body) {
                Ok(parsed) => Some(parsed),
                Err(e) => return Err((e, labels)),
            }
        };
        let incoming_model = parsed.as_ref().map(|p| p.model.clone()).unwrap_or_default();
        labels.target_model_name = self.target_model(&incoming_model, &req.headers, rng);
        labels.model_name = incoming_model;
        labels.priority = req
            .headers
            .get(OBJECTIVE_HEADER)
            .and_then(|o| self.options.policies.load().priority(o))
            .unwrap_or(0);
        let (input_tokens, estimated_tokens) =
            self.options.token_estimator.estimate(req.body.len(), parsed.as_ref());
        Ok(Prepared { labels, parsed, input_tokens, estimated_tokens, slo })
    }

    /// The model to serve: the client's rewrite header if set, then the weighted rule for the incoming
    /// model (its exact rule, else the catch-all), if any. A request without a model is not rewritten.
    fn target_model(&self, incoming: &str, headers: &Headers, rng: &mut SmallRng) -> String {
        let requested =
            headers.get(MODEL_REWRITE_HEADER).filter(|_| !self.options.ignore_model_rewrite_header);
        let mut target = requested.filter(|m| !m.is_empty()).unwrap_or(incoming).to_string();
        let policies = self.options.policies.load();
        if let Some(rule) = policies.rewrite_for(incoming).filter(|_| !incoming.is_empty()) {
            if let Some(picked) = rule.pick(rng) {
                self.metrics.record_model_rewrite(&rule.name, incoming, picked);
                target = picked.to_string();
            }
        }
        target
    }
}
