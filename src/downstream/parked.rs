//! The parked-call table: a modern (2026-07-28) caller's call to a legacy
//! upstream that sent a server→client request (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`) while it ran. The caller got an
//! `InputRequiredResult`; the upstream call itself stays alive here — its
//! future (not polled while parked), the queue of what its upstream relays,
//! and the requests waiting for the caller's `inputResponses` — until the
//! caller's retry takes it back (`../shared/spec/2026-07-28/patterns-mrtr.mdx`
//! §Basic Workflow) or it expires.
//!
//! `requestState` is `mcp-edge/1.`, the box's instance id and `.`
//! ([`crate::instance`]: a state that reaches another box of a fleet is
//! refused naming the box that holds its call), then base64url (no padding) of 40 bytes —
//! slot (u32 LE), generation (u32), owner mark (u64: the `[[client]]`
//! credential's mark, 0 when anonymous), expiry (u64, milliseconds since the
//! table was made), the table's incarnation (u64, random at start: a state
//! of an earlier process under the same instance id and fleet key names
//! no call here, whatever its slot), identity (16 bytes: SHA-256 of method,
//! NUL, name or uri)
//! — then their HMAC-SHA256, over the instance id and those bytes, under
//! `[server] state_key_file`'s key (shared by a fleet) or one drawn at
//! start-up (32 bytes).
//! patterns-mrtr.mdx §Server Requirements, items 4–5: the state is
//! attacker-controlled input, so it is integrity-protected and binds the
//! principal, a short expiry and the originating request; the entry it
//! names is taken once (a replay finds nothing). The table takes `now` from
//! its caller.

use crate::config::Secret;
use crate::instance::InstanceId;
use crate::relay::Running;
use base64::Engine;
use ring::hmac;
use serde_json::Value;
use std::sync::Mutex;
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::time::Instant;

/// Prefix of every `requestState` mcp-edge issues (any other is an
/// upstream's own, passed through untouched).
pub const STATE_PREFIX: &str = "mcp-edge/1.";
/// Length of the identity digest kept in a state.
pub(super) const ID_LEN: usize = 16;
/// Signed part of a state: slot, generation, owner, expiry, identity.
const BODY_LEN: usize = 4 + 4 + 8 + 8 + 8 + ID_LEN;
/// HMAC-SHA256 tag length.
const TAG_LEN: usize = 32;

/// What a request is, for binding a state to it: method and name/uri.
pub(super) type Identity = [u8; ID_LEN];

/// One server→client request asked of the caller.
pub(super) struct Asked {
    /// Its key in `inputRequests` (and in the retry's `inputResponses`).
    pub key: String,
    /// The id the relay gave it (`mcp-edge:<upstream>:<slot>:<generation>`);
    /// answering it goes back to that upstream.
    pub id: Value,
    /// `{method, params}` as asked.
    pub request: Value,
}

/// A parked call.
pub(super) struct Parked {
    /// The call, resumed by the retry.
    pub running: Running,
    /// The requests waiting for the caller's answers.
    pub asked: Vec<Asked>,
    owner: u64,
    identity: Identity,
    expires: Instant,
}

struct Slot {
    generation: u32,
    entry: Option<Parked>,
}

/// Why a `requestState` was refused (each is `-32602` Invalid params to the
/// caller: patterns-mrtr.mdx §Server Requirements, item 4, "MUST reject").
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    /// Not base64 of the right length.
    #[error("Invalid params: requestState is malformed (not a state mcp-edge issued)")]
    Malformed,
    /// The tag does not match.
    #[error("Invalid params: requestState failed verification (altered, or issued by another mcp-edge process)")]
    Forged,
    /// Issued to another client.
    #[error("Invalid params: requestState was issued to another client")]
    OtherCaller,
    /// Issued for another method or name/uri.
    #[error("Invalid params: requestState was issued for another request (retry with the original method and name/uri)")]
    OtherRequest,
    /// Past its expiry.
    #[error("Invalid params: requestState has expired (a parked call waits at most {0:?} for its retry)")]
    Expired(Duration),
    /// Its call was resumed already, or expired and was dropped.
    #[error("Invalid params: requestState names no parked call (already resumed, or expired)")]
    Unknown,
    /// Issued by another box of the fleet (which holds its call).
    #[error("Invalid params: {}", crate::instance::elsewhere("requestState", *issued, *here).0)]
    OtherBox {
        /// The box that issued it.
        issued: InstanceId,
        /// This box.
        here: InstanceId,
    },
    /// The system gave no randomness for the key at start.
    #[error("mcp-edge cannot sign requestState: the system gave no randomness at start")]
    NoKey,
}

/// Why a call could not be parked; the call comes back with it.
pub(super) struct NotParked {
    pub parked: Parked,
    pub full: bool,
}

/// The fixed table of parked calls, with the key that signs their states.
pub struct ParkedCalls {
    slots: Mutex<Box<[Slot]>>,
    key: Option<hmac::Key>,
    /// The box whose states these are ([`ParkedCalls::of_fleet`]).
    instance: InstanceId,
    /// The key is the fleet's (`server.state_key_file`): another box's
    /// states verify here.
    shared: bool,
    /// Random at start: this process's states only.
    incarnation: u64,
    epoch: Instant,
    ttl: Duration,
}

impl ParkedCalls {
    /// A table of `capacity` slots (allocated now) whose calls wait `ttl`;
    /// `now` is the zero of the expiries written in states.
    pub fn new(capacity: usize, ttl: Duration, now: Instant) -> Self {
        let mut secret = [0u8; 32];
        let key = match getrandom::fill(&mut secret) {
            Ok(()) => Some(hmac::Key::new(hmac::HMAC_SHA256, &secret)),
            Err(e) => {
                tracing::error!("no system randomness for the requestState key: {e}");
                None
            }
        };
        let slots = (0..capacity.max(1))
            .map(|_| Slot {
                generation: 0,
                entry: None,
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        ParkedCalls {
            slots: Mutex::new(slots),
            incarnation: incarnation(),
            key,
            instance: InstanceId::DEFAULT,
            shared: false,
            epoch: now,
            ttl,
        }
    }

    /// The table of box `instance`, signing with `key` when the fleet
    /// shares one (`server.state_key_file`), else with the key drawn at
    /// start.
    pub fn of_fleet(mut self, instance: InstanceId, key: Option<&Secret<Vec<u8>>>) -> Self {
        self.instance = instance;
        if let Some(k) = key {
            self.key = Some(hmac::Key::new(hmac::HMAC_SHA256, k.expose()));
            self.shared = true;
        }
        self
    }

    /// The signature of `body` by box `instance`.
    fn tag(key: &hmac::Key, instance: InstanceId, body: &[u8]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(key);
        ctx.update(instance.as_str().as_bytes());
        ctx.update(b".");
        ctx.update(body);
        ctx.sign()
    }

    /// Slots in the table.
    pub fn capacity(&self) -> usize {
        self.slots.lock().expect("parked").len()
    }

    /// Calls parked now.
    pub fn len(&self) -> usize {
        let g = self.slots.lock().expect("parked");
        g.iter().filter(|s| s.entry.is_some()).count()
    }

    /// True when nothing is parked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How long a parked call waits.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Parks `running` with the requests `asked` of `owner` on the request
    /// `id`; returns its `requestState`, or the call back when the table is
    /// full (or there is no key).
    pub(super) fn park(
        &self,
        running: Running,
        asked: Vec<Asked>,
        owner: u64,
        id: Identity,
        now: Instant,
    ) -> Result<String, NotParked> {
        let expires = (now + self.ttl).min(running.started + self.ttl);
        let parked = Parked {
            running,
            asked,
            owner,
            identity: id,
            expires,
        };
        let Some(key) = &self.key else {
            return Err(NotParked {
                parked,
                full: false,
            });
        };
        let mut g = self.slots.lock().expect("parked");
        let Some((i, s)) = g.iter_mut().enumerate().find(|(_, s)| s.entry.is_none()) else {
            return Err(NotParked { parked, full: true });
        };
        s.entry = Some(parked);
        let ms = expires.saturating_duration_since(self.epoch).as_millis() as u64;
        let mut body = [0u8; BODY_LEN];
        body[0..4].copy_from_slice(&(i as u32).to_le_bytes());
        body[4..8].copy_from_slice(&s.generation.to_le_bytes());
        body[8..16].copy_from_slice(&owner.to_le_bytes());
        body[16..24].copy_from_slice(&ms.to_le_bytes());
        body[24..32].copy_from_slice(&self.incarnation.to_le_bytes());
        body[32..].copy_from_slice(&id);
        let tag = Self::tag(key, self.instance, &body);
        let mut raw = body.to_vec();
        raw.extend_from_slice(tag.as_ref());
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
        Ok(format!("{STATE_PREFIX}{}.{b64}", self.instance))
    }

    /// Verifies `state` for a retry by `owner` of request `id` at `now` and
    /// takes its call out of the table (once: a second retry with the same
    /// state finds nothing).
    pub(super) fn resume(
        &self,
        state: &str,
        owner: u64,
        id: Identity,
        now: Instant,
    ) -> Result<Parked, StateError> {
        let key = self.key.as_ref().ok_or(StateError::NoKey)?;
        let (issued, b64) = (state.strip_prefix(STATE_PREFIX))
            .and_then(InstanceId::split)
            .ok_or(StateError::Malformed)?;
        let raw = (base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(b64)
            .ok())
        .filter(|r| r.len() == BODY_LEN + TAG_LEN)
        .ok_or(StateError::Malformed)?;
        let (body, tag) = raw.split_at(BODY_LEN);
        // With the fleet's key another box's state verifies here, so the
        // box it names is known to have issued it; without, it is named
        // unverified (only that box could serve it anyway).
        if issued == self.instance || self.shared {
            let ok: bool = Self::tag(key, issued, body).as_ref().ct_eq(tag).into();
            if !ok {
                return Err(StateError::Forged);
            }
        }
        if issued != self.instance {
            let here = self.instance;
            return Err(StateError::OtherBox { issued, here });
        }
        let word = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b[..r.len()].copy_from_slice(&body[r]);
            u64::from_le_bytes(b)
        };
        let (slot, generation) = (word(0..4) as usize, word(4..8) as u32);
        if word(8..16) != owner {
            return Err(StateError::OtherCaller);
        }
        if word(24..32) != self.incarnation {
            return Err(StateError::Unknown);
        }
        if body[32..] != id {
            return Err(StateError::OtherRequest);
        }
        if now >= self.epoch + Duration::from_millis(word(16..24)) {
            return Err(StateError::Expired(self.ttl));
        }
        let mut g = self.slots.lock().expect("parked");
        let s = g.get_mut(slot).ok_or(StateError::Unknown)?;
        let ours = s.entry.as_ref().is_some_and(|e| {
            s.generation == generation && e.owner == owner && e.identity == id && now < e.expires
        });
        if !ours {
            return Err(StateError::Unknown);
        }
        s.generation = s.generation.wrapping_add(1);
        s.entry.take().ok_or(StateError::Unknown)
    }

    /// Takes every call whose time is up at `now` (the caller answers their
    /// upstreams' requests and drops them).
    pub(super) fn expire(&self, now: Instant) -> Vec<Parked> {
        let mut g = self.slots.lock().expect("parked");
        let mut out = Vec::new();
        for s in g.iter_mut() {
            if s.entry.as_ref().is_some_and(|e| now >= e.expires) {
                out.extend(s.entry.take());
                s.generation = s.generation.wrapping_add(1);
            }
        }
        out
    }
}

/// A random number for this process's table (not from the key: the body
/// of a state is readable).
fn incarnation() -> u64 {
    let mut n = [0u8; 8];
    // Without randomness there is no key either, and nothing is parked.
    let _ = getrandom::fill(&mut n);
    u64::from_le_bytes(n)
}

#[cfg(test)]
mod parked_tests;
