//! Log hygiene: text that came from outside (an upstream's stderr, stdout
//! noise, error messages) made printable before it is logged
//! ([`printable`]: no raw control byte reaches the journal, so no forged
//! log lines or terminal escapes), and the token bucket ([`Bucket`],
//! [`Throttle`]) that bounds per-message log lines (and client rates).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// An error with its sources, e.g. `client error (Connect): tcp connect
/// error: Connection refused (os error 111)`, so "refused", "unknown host"
/// and "TLS handshake" are told apart in logs and status.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// `text` with every control character escaped: `\n`, `\r`, `\t`, `\0`,
/// and `\xNN` for the rest of C0, DEL and C1 (U+0080–U+009F); Unicode
/// format characters (general category Cf: bidi overrides and isolates,
/// zero-width characters, U+00AD, U+FEFF, …) and the line and paragraph
/// separators (U+2028, U+2029) as `\u{XXXX}`, so nothing reorders, hides
/// or breaks what a reviewer reads; invalid UTF-8 becomes U+FFFD.
/// Printable text (any script) is kept as it is and not copied.
pub fn printable<T: AsRef<[u8]> + ?Sized>(text: &T) -> Cow<'_, str> {
    let text = String::from_utf8_lossy(text.as_ref());
    if !text.chars().any(|c| c.is_control() || is_format(c)) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02X}", u32::from(c));
            }
            c if is_format(c) => {
                let _ = write!(out, "\\u{{{:04X}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A Unicode format character (general category Cf, Unicode 16) or a line
/// or paragraph separator (Zl, Zp): invisible, yet they reorder (U+202E),
/// hide (U+200B) or break (U+2028) the text around them.
pub fn is_format(c: char) -> bool {
    matches!(u32::from(c),
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x890..=0x891 | 0x8E2
        | 0x180E | 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x2064
        | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD
        | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A
        | 0xE0001 | 0xE0020..=0xE007F)
}

/// `text` cut to at most `max` bytes (on a character boundary) and marked
/// `…[cut N bytes]` with the number of bytes left out, then made
/// [`printable`]: how a client-supplied field (a name, a URI) goes into an
/// audit or log line, so no client can make one line cost more than that.
pub fn capped(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return printable(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    Cow::Owned(format!("{}…[cut {cut} bytes]", printable(&text[..end])))
}

/// A token bucket: `count` at once, refilled at `count / per`.
pub struct Bucket {
    tokens: f64,
    capacity: f64,
    per_second: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket of `count` tokens at `now`, refilled at `count / per`.
    pub fn new(count: u32, per: Duration, now: Instant) -> Bucket {
        let capacity = f64::from(count);
        Bucket {
            tokens: capacity,
            capacity,
            per_second: capacity / per.as_secs_f64(),
            last: now,
        }
    }

    /// Takes a token at `now`, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let refill = now.saturating_duration_since(self.last).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + refill).min(self.capacity);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / self.per_second,
            ))
        }
    }
}

/// A log line budget: `burst` lines at once, then `per_second`; the lines
/// skipped are counted and named by the next one logged.
pub struct Throttle {
    state: Mutex<(Bucket, u64)>,
}

impl Throttle {
    /// A full budget at `now`.
    pub fn new(burst: u32, per_second: u32, now: Instant) -> Throttle {
        let per = Duration::from_secs(1) * burst / per_second.max(1);
        Throttle {
            state: Mutex::new((Bucket::new(burst, per, now), 0)),
        }
    }

    /// A full budget at `now` of `burst` lines, refilled over `per`.
    pub fn over(burst: u32, per: Duration, now: Instant) -> Throttle {
        Throttle {
            state: Mutex::new((Bucket::new(burst, per, now), 0)),
        }
    }

    /// `Some(n)` when a line may be logged at `now` (`n` lines were skipped
    /// since the last one); `None` when this one is skipped.
    pub fn allow(&self, now: Instant) -> Option<u64> {
        let mut g = self.state.lock().expect("throttle");
        match g.0.take(now) {
            Ok(()) => Some(std::mem::take(&mut g.1)),
            Err(_) => {
                g.1 += 1;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bytes_are_escaped() {
        assert_eq!(printable("a\r\nb"), "a\\r\\nb");
        assert_eq!(printable(b"nul\0end"), "nul\\0end");
        assert_eq!(printable("\x1b[31mred\x1b[0m"), "\\x1B[31mred\\x1B[0m");
        assert_eq!(printable("del\x7f tab\t"), "del\\x7F tab\\t");
        // C1 controls, in UTF-8 (NEL, CSI).
        assert_eq!(printable("x\u{85}y\u{9b}z"), "x\\x85y\\x9Bz");
        // Invalid UTF-8 (a lone continuation byte, a raw C1 byte).
        assert_eq!(printable(b"a\x80b\x9bc\xff"), "a\u{FFFD}b\u{FFFD}c\u{FFFD}");
    }

    #[test]
    fn format_characters_and_separators_are_escaped() {
        assert_eq!(printable("a\u{202E}b"), "a\\u{202E}b");
        assert_eq!(printable("x\u{2028}y\u{2029}"), "x\\u{2028}y\\u{2029}");
        assert_eq!(
            printable("\u{200B}\u{FEFF}\u{AD}"),
            "\\u{200B}\\u{FEFF}\\u{00AD}"
        );
        assert_eq!(
            printable("\u{2066}\u{61C}\u{E0041}"),
            "\\u{2066}\\u{061C}\\u{E0041}"
        );
        assert_eq!(printable("\u{85}"), "\\x85");
    }

    #[test]
    fn long_fields_are_cut_on_a_char_boundary_and_marked() {
        assert_eq!(capped("short", 8), "short");
        assert_eq!(capped("abcdefghij", 4), "abcd…[cut 6 bytes]");
        // "é" is two bytes: a cut inside it keeps the character out.
        assert_eq!(capped("aébc", 2), "a…[cut 4 bytes]");
        assert_eq!(capped("\u{202E}xyz", 4), "\\u{202E}x…[cut 2 bytes]");
        let huge = "n".repeat(1 << 20);
        assert!(capped(&huge, 256).len() < 300);
    }

    #[test]
    fn printable_text_is_kept_and_not_copied() {
        assert!(matches!(
            printable("plain text, ünïcödé ✓ \\n"),
            Cow::Borrowed(_)
        ));
        assert_eq!(printable("日本語 é"), "日本語 é");
        assert_eq!(printable(""), "");
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttle_logs_its_burst_then_its_rate_and_counts_the_rest() {
        let t0 = Instant::now();
        let t = Throttle::new(10, 2, t0);
        assert_eq!((0..100).filter(|_| t.allow(t0).is_some()).count(), 10);
        // 90 skipped, named by the next line allowed.
        assert_eq!(t.allow(t0 + Duration::from_millis(500)), Some(90));
        assert_eq!(t.allow(t0 + Duration::from_millis(500)), None);
    }
}
