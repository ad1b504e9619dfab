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
        let mut s = String::with_capacity(self.instance.as_str().len() + 1 + HEX_LEN);
        crate::instance::write_id(&mut s, self.instance, &self.secret, self.slot);
        s
    }

    /// Parses a header value; `None` for anything not produced by
    /// [`SessionId::to_header`] (of any box).
    pub fn parse(s: &str) -> Option<SessionId> {
        let (instance, secret, slot) = crate::instance::read_id(s)?;
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
