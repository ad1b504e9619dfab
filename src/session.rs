//! The fixed-capacity table of legacy downstream sessions.
//!
//! Legacy revisions (2025-03-26 … 2025-11-25) give each `initialize` a
//! session named by `Mcp-Session-Id` (`../shared/spec/2025-11-25/transports.mdx`
//! §Session Management). The table is one allocation made at start-up with
//! `capacity` slots and never grows. The current time is an argument of every
//! method (no clock inside), so tests drive expiry without sleeping.
//!
//! A session id is 32 hex digits of CSPRNG output followed by 4 hex digits of
//! slot index: lookup is O(1) (parse the slot, compare the secret in constant
//! time), and the id stays unguessable (128 random bits).

use crate::protocol::ProtocolVersion;
use std::time::Duration;
use tokio::time::Instant;

/// A session id as sent in `Mcp-Session-Id`: 36 visible ASCII characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionId {
    secret: [u8; 16],
    slot: u16,
}

impl SessionId {
    /// The header value (lowercase hex: 32 secret digits + 4 slot digits).
    pub fn to_header(&self) -> String {
        let mut s = String::with_capacity(36);
        for b in self.secret {
            s.push_str(&format!("{b:02x}"));
        }
        s.push_str(&format!("{:04x}", self.slot));
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

/// What one legacy session holds: fixed-size, no heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// The negotiated legacy protocol version.
    pub version: ProtocolVersion,
    /// When the last client request arrived (idle clock).
    pub last_seen: Instant,
    /// Whether `notifications/initialized` arrived.
    pub initialized: bool,
}

#[derive(Debug)]
struct Slot {
    secret: [u8; 16],
    session: Option<Session>,
}

/// Errors of [`Table`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
    /// Every slot holds a live (not idle-expired) session: HTTP 503.
    #[error("session table full ({capacity} sessions)")]
    Full {
        /// The table's fixed capacity.
        capacity: usize,
    },
    /// Unknown, deleted or expired id: HTTP 404.
    #[error("unknown or ended session")]
    NotFound,
    /// The CSPRNG failed (getrandom).
    #[error("no randomness for a session id: {0}")]
    Random(String),
}

/// Fixed-capacity session table.
#[derive(Debug)]
pub struct Table {
    slots: Box<[Slot]>,
    idle_timeout: Duration,
    live: usize,
}

impl Table {
    /// A table with `capacity` slots (allocated now, never grown; at most 65,536)
    /// whose sessions expire after `idle_timeout` without a client request.
    pub fn new(capacity: usize, idle_timeout: Duration) -> Self {
        let capacity = capacity.clamp(1, u16::MAX as usize + 1);
        let slots = (0..capacity)
            .map(|_| Slot {
                secret: [0; 16],
                session: None,
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Table {
            slots,
            idle_timeout,
            live: 0,
        }
    }

    /// The fixed capacity.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Sessions currently held (expired ones count until evicted).
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when no session is held.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn expired(&self, s: &Session, now: Instant) -> bool {
        now.saturating_duration_since(s.last_seen) >= self.idle_timeout
    }

    /// Creates a session for an `initialize` that negotiated `version`.
    /// Uses a free slot, else the slot of the session idle the longest if it
    /// has expired. Errors: [`SessionError::Full`], [`SessionError::Random`].
    pub fn insert(
        &mut self,
        version: ProtocolVersion,
        now: Instant,
    ) -> Result<SessionId, SessionError> {
        let mut free = None;
        let mut oldest: Option<(usize, Instant)> = None;
        for (i, slot) in self.slots.iter().enumerate() {
            match &slot.session {
                None => {
                    free = Some(i);
                    break;
                }
                Some(s) if self.expired(s, now) => {
                    if oldest.is_none_or(|(_, t)| s.last_seen < t) {
                        oldest = Some((i, s.last_seen));
                    }
                }
                Some(_) => {}
            }
        }
        let idx = match (free, oldest) {
            (Some(i), _) => i,
            (None, Some((i, _))) => {
                self.slots[i].session = None;
                self.live -= 1;
                metrics::counter!(crate::metrics::SESSIONS_EVICTED, "reason" => "idle")
                    .increment(1);
                i
            }
            (None, None) => {
                metrics::counter!(crate::metrics::REFUSED, "limit" => "session_capacity")
                    .increment(1);
                return Err(SessionError::Full {
                    capacity: self.capacity(),
                });
            }
        };
        let mut secret = [0u8; 16];
        getrandom::fill(&mut secret).map_err(|e| SessionError::Random(e.to_string()))?;
        let slot = &mut self.slots[idx];
        slot.secret = secret;
        slot.session = Some(Session {
            version,
            last_seen: now,
            initialized: false,
        });
        self.live += 1;
        Ok(SessionId {
            secret,
            slot: idx as u16,
        })
    }

    fn find(&mut self, id: &SessionId) -> Option<&mut Slot> {
        let slot = self.slots.get_mut(id.slot as usize)?;
        // Constant-time comparison of the secret.
        let diff = slot
            .secret
            .iter()
            .zip(id.secret.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        (diff == 0 && slot.session.is_some()).then_some(slot)
    }

    /// Looks up a session for a client request and marks it active at `now`.
    /// An expired session is removed and reported as [`SessionError::NotFound`].
    pub fn touch(&mut self, id: &SessionId, now: Instant) -> Result<Session, SessionError> {
        let timeout = self.idle_timeout;
        let slot = self.find(id).ok_or(SessionError::NotFound)?;
        let s = slot.session.as_mut().expect("find checks presence");
        if now.saturating_duration_since(s.last_seen) >= timeout {
            slot.session = None;
            self.live -= 1;
            metrics::counter!(crate::metrics::SESSIONS_EVICTED, "reason" => "idle").increment(1);
            return Err(SessionError::NotFound);
        }
        s.last_seen = now;
        Ok(*s)
    }

    /// Looks up a session without touching its idle clock (used by GET streams).
    pub fn peek(&mut self, id: &SessionId, now: Instant) -> Option<Session> {
        let timeout = self.idle_timeout;
        let s = self.find(id)?.session?;
        (now.saturating_duration_since(s.last_seen) < timeout).then_some(s)
    }

    /// Records `notifications/initialized`.
    pub fn mark_initialized(&mut self, id: &SessionId) {
        if let Some(s) = self.find(id).and_then(|slot| slot.session.as_mut()) {
            s.initialized = true;
        }
    }

    /// Ends a session (HTTP DELETE); its slot is free at once. Returns false
    /// if the id was unknown.
    pub fn remove(&mut self, id: &SessionId) -> bool {
        match self.find(id) {
            Some(slot) => {
                slot.session = None;
                slot.secret = [0; 16];
                self.live -= 1;
                metrics::counter!(crate::metrics::SESSIONS_EVICTED, "reason" => "deleted")
                    .increment(1);
                true
            }
            None => false,
        }
    }

    /// Removes every session idle for `idle_timeout` or longer; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let timeout = self.idle_timeout;
        let mut n = 0;
        for slot in self.slots.iter_mut() {
            if let Some(s) = &slot.session {
                if now.saturating_duration_since(s.last_seen) >= timeout {
                    slot.session = None;
                    n += 1;
                }
            }
        }
        self.live -= n;
        if n > 0 {
            metrics::counter!(crate::metrics::SESSIONS_EVICTED, "reason" => "idle")
                .increment(n as u64);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: ProtocolVersion = ProtocolVersion::V2025_11_25;

    #[test]
    fn id_round_trips_and_rejects_garbage() {
        let mut t = Table::new(4, Duration::from_secs(60));
        let id = t.insert(V, Instant::now()).unwrap();
        let h = id.to_header();
        assert_eq!(h.len(), 36);
        assert_eq!(SessionId::parse(&h), Some(id));
        assert_eq!(SessionId::parse("nope"), None);
        assert_eq!(
            SessionId::parse(&h.replace(|c: char| c.is_ascii_digit(), "g")),
            None
        );
    }

    #[test]
    fn full_table_refuses_then_reuses_expired_slot() {
        let t0 = Instant::now();
        let mut t = Table::new(2, Duration::from_secs(60));
        let a = t.insert(V, t0).unwrap();
        let _b = t.insert(V, t0 + Duration::from_secs(1)).unwrap();
        assert_eq!(
            t.insert(V, t0 + Duration::from_secs(2)),
            Err(SessionError::Full { capacity: 2 })
        );
        // After a's idle timeout its slot is taken over; a is gone.
        let c = t.insert(V, t0 + Duration::from_secs(60)).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            t.touch(&a, t0 + Duration::from_secs(60)),
            Err(SessionError::NotFound)
        );
        assert!(t.touch(&c, t0 + Duration::from_secs(61)).is_ok());
    }

    #[test]
    fn delete_frees_at_once_and_id_is_dead() {
        let now = Instant::now();
        let mut t = Table::new(1, Duration::from_secs(60));
        let a = t.insert(V, now).unwrap();
        assert!(t.remove(&a));
        assert!(!t.remove(&a));
        assert_eq!(t.touch(&a, now), Err(SessionError::NotFound));
        let b = t.insert(V, now).unwrap();
        assert_ne!(a, b, "a reused slot gets a fresh secret");
        assert_eq!(t.touch(&a, now), Err(SessionError::NotFound));
    }

    #[test]
    fn touch_keeps_alive_and_expire_sweeps() {
        let t0 = Instant::now();
        let mut t = Table::new(8, Duration::from_secs(10));
        let a = t.insert(V, t0).unwrap();
        let b = t.insert(V, t0).unwrap();
        assert!(t.touch(&a, t0 + Duration::from_secs(9)).is_ok());
        assert_eq!(t.expire(t0 + Duration::from_secs(12)), 1);
        assert_eq!(t.len(), 1);
        assert_eq!(
            t.touch(&b, t0 + Duration::from_secs(12)),
            Err(SessionError::NotFound)
        );
        assert_eq!(
            t.touch(&a, t0 + Duration::from_secs(19)),
            Err(SessionError::NotFound)
        );
        assert!(t.is_empty());
    }
}
