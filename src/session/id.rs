//! The session id of `Mcp-Session-Id`: 32 hex digits of CSPRNG output and
//! 4 of slot index ([`super`] explains why).

/// A session id as sent in `Mcp-Session-Id`: 36 visible ASCII characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId {
    pub(super) secret: [u8; 16],
    pub(super) slot: u16,
}

impl SessionId {
    /// The header value (lowercase hex: 32 secret digits + 4 slot digits).
    pub fn to_header(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(36);
        let slot = self.slot.to_be_bytes();
        for b in self.secret.iter().chain(&slot) {
            s.push(HEX[usize::from(b >> 4)] as char);
            s.push(HEX[usize::from(b & 0xf)] as char);
        }
        s
    }

    /// Parses a header value; `None` for anything not produced by [`SessionId::to_header`].
    pub fn parse(s: &str) -> Option<SessionId> {
        if s.len() != 36 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut secret = [0u8; 16];
        for (i, b) in secret.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        let slot = u16::from_str_radix(&s[32..], 16).ok()?;
        Some(SessionId { secret, slot })
    }
}
