//! The last step: turn a decision into the routing answer and start the request's lifecycle.
//!
//! The destination list (primary, then fallbacks), headers to set (a generated `x-request-id`) and to
//! remove (client-sent control headers), the forwarded body's length, the optional scores, the body with
//! its `model` spliced when rewritten, and the [`ActiveRequest`] that completes the request exactly once.

use std::time::Instant;

use super::{ActiveRequest, Decision, Director, IncomingRequest, Prepared, Routed, RoutingMutation};
use crate::flowcontrol::DispatchTicket;
use crate::request::{splice_model, ResponseReader};
use crate::scheduling::{Candidate, ProfileRunResult, SchedulingResult};
use crate::wire::{CONTROL_HEADERS, DESTINATION_KEY, PD_HEADERS, REQUEST_ID_HEADER};

impl Director {
    /// Builds the answer for a decided request and registers it as running; `ticket` (flow control's
    /// proof of dispatch) is released only then, so its load is never counted twice or not at all.
    pub fn finish(
        &self,
        req: &IncomingRequest,
        prepared: Prepared,
        decision: Decision,
        candidates: &[Candidate],
        ticket: Option<DispatchTicket>,
        processing_started: Instant,
    ) -> Routed {
        let Prepared { labels, parsed, .. } = prepared;
        let new_body = match &parsed {
            Some(p) if p.model != labels.target_model_name => {
                Some(splice_model(&req.body, p.model_span.clone(), &labels.target_model_name))
            }
            _ => None,
        };
        let content_length = new_body.as_ref().map_or(req.body.len(), Vec::len);
        let scores = self.options.emit_scores.then_some(candidates);
        let mut mutation = routing_mutation(req, &decision.result, content_length, scores);
        if let Some(trace) = &req.trace {
            trace.set_attribute(opentelemetry::KeyValue::new(
                "llm_d.epp.destination",
                mutation.destination.clone(),
            ));
            // The model server's spans continue this request's trace (set, so a client's copy is replaced).
            mutation.set_headers.extend(trace.upstream_headers());
        }
        tracing::debug!(
            request_id = %req.request_id,
            model = %labels.model_name,
            target_model = %labels.target_model_name,
            destination = %mutation.destination,
            scores = ?decision.result.primary().map(|r| scores_by_endpoint(r, candidates).collect::<Vec<_>>()),
            "scheduled"
        );
        let series = self.metrics.series(labels.as_labels());
        self.metrics.record_request(&series, req.body.len());
        let response = ResponseReader::new(
            parsed.as_ref().is_some_and(|p| p.stream),
            &labels.model_name,
            &labels.target_model_name,
        );
        let received_at = req.received_at.unwrap_or(processing_started);
        let active = ActiveRequest::start(self, decision.dispatch, labels, series, received_at, response);
        // Now running (and counted by whatever tracks in-flight load): no longer pending.
        drop(ticket);
        Routed { mutation, new_body, active }
    }
}

/// What the gateway sets and removes upstream for `result`; with `emit_scores`, the cycle's candidates
/// whose scores go in the scores header.
pub fn routing_mutation(
    req: &IncomingRequest,
    result: &SchedulingResult,
    content_length: usize,
    emit_scores: Option<&[Candidate]>,
) -> RoutingMutation {
    let targets = result.targets();
    let mut destination = String::with_capacity(targets.len() * 22);
    for (i, t) in targets.iter().enumerate() {
        if i > 0 {
            destination.push(',');
        }
        destination.push_str(&t.host_port);
    }
    let mut set_headers = Vec::new();
    if req.generated_id {
        set_headers.push((REQUEST_ID_HEADER.to_string(), req.request_id.clone()));
    }
    let upstream = &result.extras.upstream_headers;
    set_headers.extend(upstream.iter().map(|(k, v)| ((*k).to_string(), v.clone())));
    // A header that is set is overwritten (every client copy replaced), so it need not be removed too.
    // The P/D headers go whoever sent them: a client naming its own "prefiller" would have the decode
    // sidecar call any host it likes (llm-d never removes them; Dynamo's contract requires it).
    let remove_headers = CONTROL_HEADERS
        .iter()
        .chain(PD_HEADERS)
        .filter(|h| {
            **h != DESTINATION_KEY && !upstream.iter().any(|(k, _)| k == *h) && req.headers.contains(h)
        })
        .map(std::string::ToString::to_string)
        .collect();
    let scores = emit_scores.and_then(|candidates| result.primary().map(|r| scores_json(r, candidates)));
    RoutingMutation { destination, set_headers, remove_headers, content_length, scores }
}

fn scores_json(r: &ProfileRunResult, candidates: &[Candidate]) -> String {
    let map: serde_json::Map<String, serde_json::Value> =
        scores_by_endpoint(r, candidates).map(|(e, s)| (e.to_string(), serde_json::json!(s))).collect();
    serde_json::Value::Object(map).to_string()
}

/// Each scored endpoint's address with its total.
fn scores_by_endpoint<'a>(
    r: &'a ProfileRunResult,
    candidates: &'a [Candidate],
) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    r.scores.iter().filter_map(|s| Some((candidates.get(s.index)?.endpoint.host_port.as_str(), s.score)))
}
