//! A fixed-capacity byte ring: the last N bytes written, allocated once.
//! Keeps the tail of a stdio child's stderr for status output.

use std::collections::VecDeque;

/// The last `capacity` bytes pushed.
#[derive(Debug)]
pub struct Ring {
    buf: VecDeque<u8>,
    capacity: usize,
}

impl Ring {
    /// An empty ring of `capacity` bytes (allocated now).
    pub fn new(capacity: usize) -> Self {
        Ring {
            buf: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    /// Appends `line` and a newline, dropping the oldest bytes beyond capacity.
    pub fn push_line(&mut self, line: &[u8]) {
        let line = &line[line.len().saturating_sub(self.capacity.saturating_sub(1))..];
        let need = line.len() + 1;
        let over = (self.buf.len() + need).saturating_sub(self.capacity);
        self.buf.drain(..over.min(self.buf.len()));
        self.buf.extend(line);
        self.buf.push_back(b'\n');
    }

    /// The last non-empty line, if any (≤ 200 bytes shown).
    pub fn last_line(&self) -> Option<String> {
        let text = self.to_string_lossy();
        let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
        let mut l = line.to_string();
        if l.len() > 200 {
            let mut cut = 200;
            while !l.is_char_boundary(cut) {
                cut -= 1;
            }
            l.truncate(cut);
        }
        Some(l)
    }

    /// The contents as text (invalid UTF-8 replaced).
    pub fn to_string_lossy(&self) -> String {
        let (a, b) = self.buf.as_slices();
        let mut v = Vec::with_capacity(a.len() + b.len());
        v.extend_from_slice(a);
        v.extend_from_slice(b);
        String::from_utf8_lossy(&v).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_tail_and_never_grows() {
        let mut r = Ring::new(16);
        r.push_line(b"first line");
        r.push_line(b"second");
        assert_eq!(r.to_string_lossy(), "rst line\nsecond\n");
        r.push_line(&[b'x'; 100]);
        assert_eq!(r.to_string_lossy().len(), 16);
        assert!(r.buf.capacity() >= 16 && r.buf.capacity() < 64);
    }
}
