//! This box's name in a fleet: the instance id (`[server] instance_id`).
//!
//! Several mcp-edge boxes behind one load balancer (HAProxy, nginx, a
//! Kubernetes Service) each hold their own legacy sessions, parked MRTR
//! rounds and tasks. Every id a box hands out for such state starts with
//! its instance id and a `.` — `Mcp-Session-Id` (`e1.3f…`), task ids
//! (`task-e1.3f…`), `requestState` (`mcp-edge/1.e1.…`) — so a balancer can
//! route a request by what comes before the first `.` (README "Several
//! boxes"), and a box that gets another's id can say whose it is.
//!
//! An instance id is 1 to 16 characters of `[a-z0-9-]` (no `.`, so the
//! first `.` of an id always ends it). Unset, it is derived from the
//! machine id and the listen port ([`InstanceId::derived`]): stable across
//! restarts of one box, different between boxes, but not something an
//! operator wrote into a balancer's config — so `check-config` warns when a
//! fleet setting is made without it.

use std::fmt;

/// The most characters an instance id has.
pub const MAX_LEN: usize = 16;

/// The machine id files, systemd's first (machine-id(5)).
const MACHINE_ID_FILES: [&str; 2] = ["/etc/machine-id", "/var/lib/dbus/machine-id"];

/// An instance id: 1–16 characters of `[a-z0-9-]`, kept inline (`Copy`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct InstanceId {
    bytes: [u8; MAX_LEN],
    len: u8,
}

/// Why a string is not an instance id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InstanceError {
    /// Empty or longer than [`MAX_LEN`].
    #[error("must be 1 to {MAX_LEN} characters (got {0})")]
    Length(usize),
    /// A character outside `[a-z0-9-]`.
    #[error("may hold only a-z, 0-9 and '-' (got {0:?})")]
    Char(char),
}

impl InstanceId {
    /// The instance id of a box nothing names: `edge`. Tables built
    /// without one (unit tests, a single box) use it.
    pub const DEFAULT: InstanceId = InstanceId {
        bytes: *b"edge\0\0\0\0\0\0\0\0\0\0\0\0",
        len: 4,
    };

    /// Parses an operator's or a wire value.
    pub fn parse(s: &str) -> Result<InstanceId, InstanceError> {
        if s.is_empty() || s.len() > MAX_LEN {
            return Err(InstanceError::Length(s.chars().count()));
        }
        if let Some(c) = s.chars().find(|&c| !is_id_char(c)) {
            return Err(InstanceError::Char(c));
        }
        let mut bytes = [0u8; MAX_LEN];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Ok(InstanceId {
            bytes,
            len: s.len() as u8,
        })
    }

    /// The default of a box: the first 8 hex digits of its machine id, `-`,
    /// the listen port (`3f2a9c1b-8080`); `edge-<port>` when no machine id
    /// can be read.
    pub fn derived(port: u16) -> InstanceId {
        let machine = MACHINE_ID_FILES
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| s.len() >= 8 && s.bytes().all(|b| b.is_ascii_hexdigit()));
        Self::from_parts(machine.as_deref(), port)
    }

    /// [`InstanceId::derived`] from a machine id already read.
    pub fn from_parts(machine_id: Option<&str>, port: u16) -> InstanceId {
        let head = machine_id.map_or("edge", |m| &m[..8.min(m.len())]);
        Self::parse(&format!("{head}-{port}")).unwrap_or(Self::DEFAULT)
    }

    /// The id as written.
    pub fn as_str(&self) -> &str {
        // Only `parse` fills `bytes`, with ASCII.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("edge")
    }

    /// Splits a wire id at its first `.`: the instance before it (`None`
    /// when there is no `.` or what comes before is no instance id) and
    /// the rest.
    pub fn split(wire: &str) -> Option<(InstanceId, &str)> {
        let (head, rest) = wire.split_once('.')?;
        Some((Self::parse(head).ok()?, rest))
    }
}

/// The words and `data` of a refusal of state another box holds (`what`:
/// "requestState", "task task-e1.…"), the same for every kind of state.
pub fn elsewhere(what: &str, issued: InstanceId, here: InstanceId) -> (String, serde_json::Value) {
    let message = format!(
        "{what} was issued by mcp-edge instance \"{issued}\" and this is \"{here}\": \
         it is held by the box that issued it; send each caller's requests to one box \
         (balance by Authorization; README \"Several boxes\")"
    );
    let data = serde_json::json!({
        "reason": "other_instance",
        "instance": issued.as_str(),
        "here": here.as_str(),
    });
    (message, data)
}

/// The text of an id a box hands out for state it holds (a session, a
/// task) after its prefix: the instance id, `.`, 32 lowercase hex digits
/// of a secret and 4 of a slot index.
pub fn write_id(out: &mut String, instance: InstanceId, secret: &[u8; 16], slot: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str(instance.as_str());
    out.push('.');
    for b in secret.iter().chain(&slot.to_be_bytes()) {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 0xf)] as char);
    }
}

/// Reads what [`write_id`] wrote (of any box); `None` for anything else.
pub fn read_id(s: &str) -> Option<(InstanceId, [u8; 16], u16)> {
    let (instance, hex) = InstanceId::split(s)?;
    if hex.len() != 36 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut secret = [0u8; 16];
    for (i, b) in secret.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    let slot = u16::from_str_radix(&hex[32..], 16).ok()?;
    Some((instance, secret, slot))
}

/// A character an instance id may hold.
fn is_id_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
}

impl Default for InstanceId {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InstanceId({:?})", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_takes_the_documented_alphabet_only() {
        assert_eq!(InstanceId::parse("e1").unwrap().as_str(), "e1");
        assert_eq!(
            InstanceId::parse("plant-7-gw-a0123")
                .unwrap()
                .to_string()
                .len(),
            16
        );
        assert_eq!(InstanceId::parse(""), Err(InstanceError::Length(0)));
        assert_eq!(
            InstanceId::parse("a".repeat(17).as_str()),
            Err(InstanceError::Length(17))
        );
        assert_eq!(InstanceId::parse("E1"), Err(InstanceError::Char('E')));
        assert_eq!(InstanceId::parse("e.1"), Err(InstanceError::Char('.')));
        assert_eq!(InstanceId::parse("é"), Err(InstanceError::Char('é')));
    }

    #[test]
    fn derived_ids_follow_machine_and_port() {
        let m = "3f2a9c1b00112233445566778899aabb";
        assert_eq!(
            InstanceId::from_parts(Some(m), 8080).as_str(),
            "3f2a9c1b-8080"
        );
        assert_eq!(InstanceId::from_parts(None, 65535).as_str(), "edge-65535");
        assert_ne!(
            InstanceId::from_parts(Some(m), 8080),
            InstanceId::from_parts(Some(m), 8081)
        );
        let here = InstanceId::derived(1);
        assert!(here.as_str().ends_with("-1"), "{here}");
    }

    #[test]
    fn split_reads_the_box_before_the_first_dot() {
        let (i, rest) = InstanceId::split("e1.abc.def").unwrap();
        assert_eq!((i.as_str(), rest), ("e1", "abc.def"));
        assert_eq!(InstanceId::split("abcdef"), None);
        assert_eq!(InstanceId::split("E1.abc"), None);
        assert_eq!(InstanceId::split(".abc"), None);
    }
}
