//! The stream target's harness is not vacuous: its seeds reach routing (a destination among the two
//! endpoints, the body forwarded) and the protocol checks (INVALID_ARGUMENT), so mutations start deep.

use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Resp;
use envoy_types::pb::envoy::service::ext_proc::v3::ProcessingResponse;
use epp_fuzz::extproc_stream::answers;
use epp_fuzz::frames::*;
use epp_fuzz::seeds::seeds;

fn destination(answer: &ProcessingResponse) -> Option<String> {
    let Some(Resp::RequestHeaders(h)) = &answer.response else { return None };
    let mutation = h.response.as_ref()?.header_mutation.as_ref()?;
    mutation.set_headers.iter().find_map(|o| {
        let header = o.header.as_ref()?;
        (header.key == "x-gateway-destination-endpoint")
            .then(|| String::from_utf8_lossy(&header.raw_value).into())
    })
}

#[test]
fn the_first_seed_is_routed_to_one_of_the_endpoints_and_answered() {
    let seed = &seeds("extproc_stream")[0];
    let answers = answers(seed);
    let answers: Vec<ProcessingResponse> = answers.into_iter().map(|a| a.expect("no error status")).collect();
    let routed = answers.iter().find_map(destination).expect("a routing answer");
    assert!(["10.0.0.1:8000", "10.0.0.2:8000"].contains(&routed.as_str()), "routed to {routed}");
    assert!(answers.iter().any(|a| matches!(a.response, Some(Resp::ResponseBody(_)))), "the response passed");
}

#[test]
fn a_body_before_headers_ends_with_invalid_argument() {
    let input = Frames::new().frame(CONFIG, &[4, 4]).flagged(REQUEST_BODY, END_OF_STREAM, b"{}").into_bytes();
    let answers = answers(&input);
    let status = answers.last().expect("an answer").as_ref().expect_err("an error status");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
}

#[test]
fn frames_written_are_the_frames_read() {
    let input = Frames::new()
        .frame(CONFIG, &[2, 4])
        .headers(REQUEST_HEADERS, END_OF_STREAM, &[(":path", "/v1/models"), ("a", "b:c")])
        .into_bytes();
    let messages = decode(&input);
    assert_eq!(messages.len(), 1);
    let m = messages[0].as_ref().expect("decoded");
    assert_eq!(m.protocol_config.as_ref().map(|c| (c.request_body_mode, c.response_body_mode)), Some((2, 4)));
    let envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request::RequestHeaders(h) =
        m.request.as_ref().expect("a request")
    else {
        panic!("not request headers")
    };
    let pairs: Vec<(&str, &[u8])> = h
        .headers
        .as_ref()
        .expect("headers")
        .headers
        .iter()
        .map(|v| (v.key.as_str(), v.raw_value.as_slice()))
        .collect();
    assert_eq!(pairs, vec![(":path", &b"/v1/models"[..]), ("a", &b"b:c"[..])]);
    assert!(h.end_of_stream);
}

/// The framed KV-event seeds reach the decoder (payloads hold any byte, so frames are length-prefixed):
/// all parse as live messages (three frames), and those with an empty first frame as replays too.
#[test]
fn kv_event_seeds_parse_as_messages() {
    let seeds = epp_fuzz::seeds::seeds("kv_events");
    let framed: Vec<Vec<&[u8]>> =
        seeds.iter().filter(|s| s[0] == 1).map(|s| epp_fuzz::kv_events::split_frames(&s[1..])).collect();
    let live = framed.iter().filter(|f| epp::kvcache::parse_live(f).is_ok()).count();
    let replayed = framed.iter().filter(|f| epp::kvcache::parse_replay(f).is_ok()).count();
    assert_eq!((framed.len(), live, replayed), (8, 8, 4));
}
