//! Tests of [`super`]: the stdin writer.

use super::Stdin;
use serde_json::json;
use serde_json::Value;
use std::process::Stdio;
use tokio::io::AsyncReadExt;

/// `sh -c script` with its stdin behind a [`Stdin`] and its stdout.
fn piped(script: &str) -> (tokio::process::Child, Stdin, tokio::process::ChildStdout) {
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("sh");
    let stdin = Stdin::new(child.stdin.take());
    let stdout = child.stdout.take().expect("stdout");
    (child, stdin, stdout)
}

/// A writer dropped while the pipe is full (the child reads late)
/// leaves its batch half written; the next caller finishes it and
/// then writes its own line: both lines arrive whole, in order.
#[tokio::test]
async fn a_write_cut_short_is_finished_by_the_next_writer() {
    let (_child, stdin, mut stdout) = piped("sleep 0.5; cat");
    let big = json!({"x": "a".repeat(1 << 20)});
    // cat's output is read all along (a full stdout pipe would stop it
    // reading its stdin).
    let read = async {
        let mut out = String::new();
        stdout.read_to_string(&mut out).await.expect("read");
        out
    };
    let write = async {
        let cut =
            tokio::time::timeout(std::time::Duration::from_millis(50), stdin.message(&big)).await;
        assert!(cut.is_err(), "a 1 MiB line cannot fit the pipe at once");
        stdin.request(7, "ping", None).await.expect("written");
        stdin.close().await;
    };
    let (out, ()) = tokio::join!(read, write);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{} bytes", out.len());
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(lines[0]).unwrap(),
        big
    );
    assert_eq!(lines[1], r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#);
}

/// Requests made in the same turn of the runtime go out in one `write`,
/// whole and in the order they were made.
#[tokio::test]
async fn lines_queued_together_go_out_in_one_write() {
    let (_child, stdin, mut stdout) = piped("cat");
    let params = json!({"name": "echo", "arguments": {"text": "hi"}});
    let one = |id| stdin.request(id, "tools/call", Some(&params));
    let (a, b, c, d) = tokio::join!(one(1), one(2), one(3), one(4));
    for r in [a, b, c, d] {
        r.expect("written");
    }
    assert_eq!(stdin.pipe.lock().await.writes, 1, "four lines, one write");
    stdin.close().await;
    let mut out = String::new();
    stdout.read_to_string(&mut out).await.expect("read");
    let ids: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a whole line")["id"].clone())
        .collect();
    assert_eq!(ids, [json!(1), json!(2), json!(3), json!(4)]);
}
