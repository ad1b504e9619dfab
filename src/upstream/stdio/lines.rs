//! Reading a child's output: bounded lines (an over-long one is skipped,
//! keeping only its head to find the id of the call it answers), and the
//! log rate limit of its stderr.

use crate::limits;
use crate::logline::{printable, Throttle};
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The `"id"` of a JSON-RPC message from the first bytes of its text (a number
/// or a string without escapes), for answering an over-long message's caller.
pub fn sniff_id(head: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(head).ok().or_else(|| {
        // The head may end inside a UTF-8 sequence.
        (1..4).find_map(|cut| std::str::from_utf8(&head[..head.len().saturating_sub(cut)]).ok())
    })?;
    let at = text.find("\"id\"")?;
    let rest = text[at + 4..].trim_start().strip_prefix(':')?.trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        let end = s.find('"')?;
        return Some(Value::String(s[..end].to_string()));
    }
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(rest.len());
    rest[..end].parse::<i64>().ok().map(Value::from)
}

/// Makes room for `more` bytes, growing by a quarter rather than doubling
/// (a line's buffer becomes its message: at most 1.25 bytes held per byte).
fn grow(buf: &mut Vec<u8>, more: usize) {
    if buf.capacity() - buf.len() < more {
        buf.reserve_exact(more.max(buf.len() / 4));
    }
}

/// Reads one line of at most `max` bytes into `buf` (without the newline).
/// Returns `Ok(false)` at EOF, and `Err(true)` after skipping an over-long
/// line (`buf` then holds its head).
///
/// Cancel-safe: what a dropped read consumed stays in `buf` and `cut` (an
/// over-long line in progress), and the next read goes on from there; the
/// caller empties both with [`line_done`] once it has handled the line.
pub(super) async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    cut: &mut bool,
    max: usize,
) -> std::io::Result<Result<bool, bool>> {
    let too_long = cut;
    loop {
        let avail = r.fill_buf().await?;
        if avail.is_empty() {
            return Ok(if *too_long {
                Err(true)
            } else {
                Ok(!buf.is_empty())
            });
        }
        let (chunk, done) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (&avail[..i], Some(i + 1)),
            None => (avail, None),
        };
        if !*too_long {
            if buf.len() + chunk.len() > max {
                // Keep only a short head (to find the id), drain the rest unbuffered.
                *too_long = true;
                let keep = limits::OVERLONG_LINE_HEAD_BYTES
                    .saturating_sub(buf.len())
                    .min(chunk.len());
                buf.extend_from_slice(&chunk[..keep]);
                buf.truncate(limits::OVERLONG_LINE_HEAD_BYTES);
            } else {
                grow(buf, chunk.len());
                buf.extend_from_slice(chunk);
            }
        }
        let used = done.unwrap_or(avail.len());
        r.consume(used);
        if done.is_some() {
            return Ok(if *too_long { Err(true) } else { Ok(true) });
        }
    }
}

/// Empties a line's buffer for the next line after it was handled; a
/// buffer grown past [`limits::LINE_BUFFER_KEEP`] (a large message that was
/// not an answer, which takes its buffer along) is freed.
pub(super) fn line_done(buf: &mut Vec<u8>, cut: &mut bool) {
    buf.clear();
    *cut = false;
    if buf.capacity() > limits::LINE_BUFFER_KEEP {
        *buf = Vec::new();
    }
}

/// The log rate limit of one child's stderr (a [`Throttle`] of
/// [`limits::STDERR_LOG_BURST`] lines at once, refilled at
/// [`limits::STDERR_LOG_PER_SECOND`]): a child printing without pause cannot
/// flood the journal or wear a Pi's SD card. Skipped lines are counted in
/// `mcp_edge_upstream_stderr_skipped_total` and named in the next line logged;
/// every line still reaches the stderr tail of `/status`. Lines are logged
/// [`printable`] (control bytes escaped).
/// The skipped count's handle is resolved once (a skip allocates nothing).
pub(super) struct LogBudget(Throttle, crate::metrics::LazyCounter);

impl LogBudget {
    pub(super) fn new(now: tokio::time::Instant) -> Self {
        LogBudget(
            Throttle::new(limits::STDERR_LOG_BURST, limits::STDERR_LOG_PER_SECOND, now),
            crate::metrics::LazyCounter::new(),
        )
    }

    /// Logs `line` (`cut`: only its head was kept) if the budget allows.
    pub(super) fn log(&self, name: &str, line: &[u8], cut: bool) {
        let Some(skipped) = self.0.allow(tokio::time::Instant::now()) else {
            self.1.increment(1, || {
                metrics::counter!(crate::metrics::STDERR_SKIPPED, "upstream" => name.to_string())
            });
            return;
        };
        let text = printable(line);
        let cut = if cut {
            " (line cut: longer than STDERR_LINE_BYTES)"
        } else {
            ""
        };
        match skipped {
            0 => tracing::info!(upstream = %name, "stderr: {text}{cut}"),
            n => {
                tracing::info!(upstream = %name, "stderr: {text}{cut} ({n} earlier lines not logged: rate limit)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{sniff_id, LogBudget};
    use serde_json::json;

    #[tokio::test(start_paused = true)]
    async fn a_chatty_child_is_logged_at_the_rate_limit() {
        let t0 = tokio::time::Instant::now();
        let b = LogBudget::new(t0);
        let burst = (0..1000).filter(|_| b.0.allow(t0).is_some()).count();
        assert_eq!(burst, crate::limits::STDERR_LOG_BURST as usize);
        // A simulated hour of 1,000 lines a second logs 5 a second.
        let mut logged = 0;
        for ms in 1..=3_600_000u64 {
            let now = t0 + std::time::Duration::from_millis(ms);
            if b.0.allow(now).is_some() {
                logged += 1;
            }
        }
        let per_s = crate::limits::STDERR_LOG_PER_SECOND as usize;
        assert!(
            (3600 * per_s - 1..=3600 * per_s + 1).contains(&logged),
            "{logged}"
        );
    }

    #[test]
    fn finds_ids_in_message_heads() {
        assert_eq!(
            sniff_id(br#"{"jsonrpc":"2.0","id":131072,"result":{"content":[{"te"#),
            Some(json!(131072))
        );
        assert_eq!(
            sniff_id(br#"{"id" : "abc", "result": "#),
            Some(json!("abc"))
        );
        assert_eq!(sniff_id(br#"{"jsonrpc":"2.0","result":{"#), None);
    }
}
