//! A resumable call stream: priming, IDs, parking when its client goes,
//! replay after `Last-Event-ID`, a lost replay, a takeover, the window.

use super::*;
use http_body_util::BodyExt;
use serde_json::json;
use tokio::sync::oneshot;

const KEEPALIVE: Duration = Duration::from_secs(15);

fn session() -> SessionId {
    SessionId::parse(&format!("edge.{:036x}", 7)).unwrap()
}

/// A call answering what `answer` is sent, and the stream relaying `tx`'s
/// messages, resumable in `home`.
fn stream(
    home: &Home,
    priming: bool,
) -> (CallStream, mpsc::Sender<Relayed>, oneshot::Sender<Value>) {
    let (tx, rx) = mpsc::channel(8);
    let (answer, answered) = oneshot::channel::<Value>();
    let call: CallFuture = Box::pin(async move {
        let result = answered.await.unwrap_or(json!("dropped"));
        Outgoing::from(json!({"jsonrpc": "2.0", "id": 5, "result": result}))
    });
    let resumable = Resumable {
        session: session(),
        request: json!(5),
        home: home.clone(),
        priming,
        dropped: Default::default(),
    };
    let core = Core::running(call, rx, KEEPALIVE, Some(resumable));
    (CallStream::new(core), tx, answer)
}

fn progress(n: u64) -> Relayed {
    Relayed::Message(note(n))
}

fn note(n: u64) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": n}})
}

/// The next whole event of `body` as written (`None` at its end).
async fn event(body: &mut CallStream) -> Option<String> {
    let mut text = String::new();
    while !text.ends_with("\n\n") {
        let frame = body.frame().await?.unwrap();
        text.push_str(std::str::from_utf8(frame.data_ref().unwrap()).unwrap());
    }
    Some(text)
}

/// The stream number of an event's `id: <stream>-<n>` line.
fn stream_of(event: &str) -> u64 {
    let id = event
        .strip_prefix("id: ")
        .unwrap()
        .split('\n')
        .next()
        .unwrap();
    EventId::parse(id).unwrap().stream
}

#[tokio::test(start_paused = true)]
async fn a_stream_its_client_left_is_parked_and_resumed_after_the_last_event_it_got() {
    let home: Home = Arc::new(Parked::new(4));
    let (mut body, tx, answer) = stream(&home, true);
    tx.send(progress(1)).await.unwrap();
    let priming = event(&mut body).await.unwrap();
    let s = stream_of(&priming);
    assert_eq!(priming, format!("id: {s}-0\nretry: 1000\ndata: \n\n"));
    let first = event(&mut body).await.unwrap();
    assert!(
        first.starts_with(&format!("id: {s}-1\nevent: message\ndata: {{")),
        "{first}"
    );
    tx.send(progress(2)).await.unwrap();
    assert!(event(&mut body)
        .await
        .unwrap()
        .starts_with(&format!("id: {s}-2\n")));
    drop(body); // the client went
    assert_eq!(home.len(), 1, "parked, its call still running");
    tx.send(progress(3)).await.unwrap(); // while nobody reads

    let last = EventId { stream: s, n: 1 };
    let Resumed::Stream(mut body) = resumed(&home, &session(), last).await else {
        panic!("not resumed")
    };
    assert!(home.is_empty());
    let replayed = event(&mut body).await.unwrap();
    assert!(replayed.starts_with(&format!("id: {s}-2\n")), "{replayed}");
    assert!(replayed.contains(r#""progress":2"#), "{replayed}");
    let next = event(&mut body).await.unwrap();
    assert!(next.starts_with(&format!("id: {s}-3\n")) && next.contains(r#""progress":3"#));
    answer.send(json!({"done": true})).unwrap();
    let answered = event(&mut body).await.unwrap();
    assert!(answered.starts_with(&format!("id: {s}-4\n")), "{answered}");
    assert!(answered.contains(r#""result":{"done":true}"#), "{answered}");
    assert!(
        event(&mut body).await.is_none(),
        "the stream ends after its response"
    );
    drop(body);
    assert!(home.is_empty(), "a finished stream is not parked");
    // Once more, from the priming event: the response is still replayable
    // while parked; after the end nothing waits.
    let gone = resumed(&home, &session(), EventId { stream: s, n: 0 }).await;
    assert!(matches!(gone, Resumed::Unknown));
}

#[tokio::test(start_paused = true)]
async fn a_resumption_after_dropped_events_answers_the_call_with_an_error_and_cancels_it() {
    let home: Home = Arc::new(Parked::new(4));
    // A 2025-06-18 session: no priming event, the first event is 0.
    let (mut body, tx, answer) = stream(&home, false);
    let big = "x".repeat(crate::limits::SSE_REPLAY_BYTES / 2);
    let mut s = 0;
    for n in 0..3 {
        let mut m = note(n);
        m["params"]["message"] = json!(big);
        tx.send(Relayed::Message(m)).await.unwrap();
        let e = event(&mut body).await.unwrap();
        s = stream_of(&e);
        assert!(
            e.starts_with(&format!("id: {s}-{n}\n")),
            "no priming: {e:.40}"
        );
    }
    drop(body);
    let Resumed::Lost(lost) = resumed(&home, &session(), EventId { stream: s, n: 0 }).await else {
        panic!("event 1 was dropped from the replay buffer")
    };
    let lost = std::str::from_utf8(&lost).unwrap();
    assert!(
        lost.contains(r#""id":5"#) && lost.contains("-32603"),
        "{lost}"
    );
    assert!(lost.contains("replay buffer"), "{lost}");
    assert!(
        answer.is_closed(),
        "the call was dropped: cancelled upstream"
    );
    assert!(home.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_resumption_takes_a_stream_over_from_a_connection_that_died_silently() {
    let home: Home = Arc::new(Parked::new(4));
    let (mut body, tx, answer) = stream(&home, true);
    let s = stream_of(&event(&mut body).await.unwrap());
    tx.send(progress(1)).await.unwrap();
    event(&mut body).await.unwrap();
    // The old connection still looks open: the resumption tells it to
    // let go, its response ends, it is parked and taken.
    let old = async move {
        assert!(event(&mut body).await.is_none(), "the old response ends");
        drop(body);
    };
    let sid = session();
    let resuming = resumed(&home, &sid, EventId { stream: s, n: 1 });
    let (Resumed::Stream(mut body), ()) = tokio::join!(resuming, old) else {
        panic!("not taken over")
    };
    answer.send(json!(1)).unwrap();
    assert!(event(&mut body)
        .await
        .unwrap()
        .starts_with(&format!("id: {s}-2\n")));
    // A stream nobody writes or parks is not waited for past the bound.
    let t0 = Instant::now();
    let none = resumed(
        &home,
        &session(),
        EventId {
            stream: s + 1,
            n: 0,
        },
    )
    .await;
    assert!(matches!(none, Resumed::Unknown));
    assert_eq!(Instant::now(), t0, "nothing to let go: not waited for");
}

#[tokio::test(start_paused = true)]
async fn a_stream_not_resumed_in_time_is_dropped_with_its_call_and_a_modern_one_never_parks() {
    let home: Home = Arc::new(Parked::new(4));
    let (mut body, _tx, answer) = stream(&home, true);
    event(&mut body).await.unwrap();
    drop(body);
    let window = crate::limits::SSE_RESUME_WINDOW;
    assert!(home.sweep(Instant::now() + window / 2, |_| true).is_empty());
    assert!(!answer.is_closed(), "still waiting for its client");
    let swept = home.sweep(Instant::now() + window, |_| true);
    assert_eq!(swept.len(), 1);
    drop(swept);
    assert!(answer.is_closed(), "dropped: its call cancelled");

    // Without `Resumable` (a modern caller): no IDs, dropping it drops the call.
    let (tx, rx) = mpsc::channel(8);
    let (answer, answered) = oneshot::channel::<Value>();
    let call: CallFuture = Box::pin(async move {
        let _ = answered.await;
        Outgoing::from(json!({"jsonrpc": "2.0", "id": 1, "result": {}}))
    });
    let mut body = CallStream::new(Core::running(call, rx, KEEPALIVE, None));
    tx.send(progress(1)).await.unwrap();
    let e = event(&mut body).await.unwrap();
    assert!(e.starts_with("event: message\ndata: "), "{e}");
    drop(body);
    assert!(home.is_empty() && answer.is_closed());
}

#[tokio::test(start_paused = true)]
async fn an_upstream_closing_its_stream_to_be_polled_closes_a_primed_stream_too() {
    let home: Home = Arc::new(Parked::new(4));
    let (mut body, tx, answer) = stream(&home, true);
    let s = stream_of(&event(&mut body).await.unwrap()); // priming
    let t0 = Instant::now();
    tx.send(progress(1)).await.unwrap();
    tx.send(Relayed::Polled).await.unwrap();
    let first = event(&mut body).await.unwrap();
    assert!(first.starts_with(&format!("id: {s}-1\n")), "{first}");
    assert_eq!(
        event(&mut body).await.unwrap(),
        "retry: 1000\n\n",
        "retry before closing"
    );
    assert!(event(&mut body).await.is_none(), "closed to be polled");
    assert_eq!(
        Instant::now(),
        t0,
        "at once: no keep-alive tick was needed to see the cue"
    );
    drop(body);
    assert_eq!(home.len(), 1, "parked, its call in flight");
    let Resumed::Stream(mut body) = resumed(&home, &session(), EventId { stream: s, n: 1 }).await
    else {
        panic!("not resumed")
    };
    answer.send(json!("after the poll")).unwrap();
    let answered = event(&mut body).await.unwrap();
    assert!(answered.starts_with(&format!("id: {s}-2\n")) && answered.contains("after the poll"));
    assert!(event(&mut body).await.is_none());

    // A 2025-06-18 session's stream (not primed) stays open: its client
    // may not poll.
    let (mut body, tx, answer) = stream(&home, false);
    let t0 = Instant::now();
    tx.send(Relayed::Polled).await.unwrap();
    tx.send(progress(1)).await.unwrap();
    assert!(event(&mut body).await.unwrap().contains(r#""progress":1"#));
    assert_eq!(Instant::now(), t0, "the message behind the cue at once");
    answer.send(json!(2)).unwrap();
    assert!(event(&mut body).await.unwrap().contains(r#""result":2"#));
}

#[tokio::test(start_paused = true)]
async fn a_parked_stream_answers_only_what_it_can_and_its_cancellation_ends_it() {
    let home: Home = Arc::new(Parked::new(4));
    let (mut body, tx, answer) = stream(&home, true);
    let s = stream_of(&event(&mut body).await.unwrap());
    drop(body);
    // An event it never sent: refused, the stream left parked as it was.
    let future = resumed(&home, &session(), EventId { stream: s, n: 5 }).await;
    assert!(matches!(future, Resumed::NoSuchEvent));
    assert_eq!(home.len(), 1);
    // Its client cancels the call: the parked stream goes, the call with it.
    assert!(home.cancelled(&session(), "6").is_none(), "another request");
    drop(home.cancelled(&session(), "5"));
    assert!(answer.is_closed() && home.is_empty());
    drop(tx);

    // A 2025-06-18 stream that sent no event yet cannot be named: not parked.
    let (body, _tx, answer) = stream(&home, false);
    drop(body);
    assert!(home.is_empty() && answer.is_closed());

    // Messages dropped while it waited (the relay's queue full) are lost:
    // the resumption answers the call with an error.
    let dropped = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel(8);
    let (answer, answered) = oneshot::channel::<Value>();
    let call: CallFuture = Box::pin(async move {
        let _ = answered.await;
        Outgoing::from(json!({"jsonrpc": "2.0", "id": 5, "result": {}}))
    });
    let resumable = Resumable {
        session: session(),
        request: json!(5),
        home: home.clone(),
        priming: true,
        dropped: dropped.clone(),
    };
    let mut body = CallStream::new(Core::running(call, rx, KEEPALIVE, Some(resumable)));
    let s = stream_of(&event(&mut body).await.unwrap());
    drop(body);
    dropped.fetch_add(1, Relaxed);
    let Resumed::Lost(lost) = resumed(&home, &session(), EventId { stream: s, n: 0 }).await else {
        panic!("a message was lost while parked")
    };
    assert!(std::str::from_utf8(&lost)
        .unwrap()
        .contains("dropped while its stream waited"));
    assert!(answer.is_closed() && home.is_empty());
    drop(tx);
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_does_not_let_go_is_waited_for_only_up_to_the_takeover_bound() {
    let home: Home = Arc::new(Parked::new(4));
    // Attached, but never polled again (a connection hyper no longer writes).
    let (mut body, _tx, _answer) = stream(&home, true);
    let s = stream_of(&event(&mut body).await.unwrap());
    let t0 = Instant::now();
    let gone = resumed(&home, &session(), EventId { stream: s, n: 0 }).await;
    assert!(matches!(gone, Resumed::Unknown));
    assert_eq!(Instant::now() - t0, crate::limits::SSE_TAKEOVER_WAIT);
    drop(body);
    assert_eq!(
        home.len(),
        1,
        "parked once it let go, for a later resumption"
    );
}
