//! The session id of `Mcp-Session-Id`: the box's instance id, `.`, then 32
//! hex digits of CSPRNG output and 4 of slot index ([`super`] explains
//! why). The instance id lets a load balancer send a session's requests to
//! the box that holds it ([`crate::instance`]).

use crate::instance::InstanceId;

/// Hex digits after the instance id and its `.`.
const HEX_LEN: usize = 36;

/// A session id as sent in `Mcp-Session-Id`: `<instance>.<36 hex>`, visible
/// ASCII (at most 53 characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId {
    pub(super) instance: InstanceId,
    pub(super) secret: [u8; 16],
    pub(super) slot: u16,
}

impl SessionId {
    /// The header value (the instance id, `.`, lowercase hex: 32 secret
    /// digits + 4 slot digits).
    pub fn to_header(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let instance = self.instance.as_str();
        let mut s = String::with_capacity(instance.len() + 1 + HEX_LEN);
        s.push_str(instance);
        s.push('.');
        let slot = self.slot.to_be_bytes();
        for b in self.secret.iter().chain(&slot) {
            s.push(HEX[usize::from(b >> 4)] as char);
            s.push(HEX[usize::from(b & 0xf)] as char);
        }
        s
    }

    /// Parses a header value; `None` for anything not produced by
    /// [`SessionId::to_header`] (of any box).
    pub fn parse(s: &str) -> Option<SessionId> {
        let (instance, s) = InstanceId::split(s)?;
        if s.len() != HEX_LEN || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut secret = [0u8; 16];
        for (i, b) in secret.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        let slot = u16::from_str_radix(&s[32..], 16).ok()?;
        Some(SessionId {
            instance,
            secret,
            slot,
        })
    }

    /// The box that issued it.
    pub fn instance(&self) -> InstanceId {
        self.instance
    }
}

impl super::Table {
    /// The table of box `instance`: its ids start with it, and an id of
    /// another box is never found here.
    pub fn with_instance(mut self, instance: InstanceId) -> Self {
        self.instance = instance;
        self
    }

    /// The box whose ids these are.
    pub fn instance(&self) -> InstanceId {
        self.instance
    }
}
