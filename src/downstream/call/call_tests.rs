//! Tests of [`super`].

use super::*;

#[test]
fn an_input_required_result_without_a_stream_is_a_clear_error() {
    let ir = json!({"resultType": "input_required", "inputRequests": {
            "a": {"method": "elicitation/create", "params": {}},
            "b": {"method": "roots/list"}}, "requestState": "s"});
    let e = no_stream(Ok(ir.into())).unwrap_err();
    assert_eq!(e.code, protocol::INVALID_REQUEST);
    assert!(
        e.message.contains("(elicitation/create, roots/list)"),
        "{}",
        e.message
    );
    assert!(e.message.contains("text/event-stream"), "{}", e.message);
    let done = json!({"resultType": "complete", "content": []});
    assert_eq!(
        no_stream(Ok(done.clone().into())).map(Payload::into_value),
        Ok(done)
    );
}
