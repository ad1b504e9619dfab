//! One legacy session per declared capability set ([`Lane`]).
//!
//! A legacy (2025-era) server learns its client's capabilities once, at
//! `initialize` (`../shared/spec/2025-11-25/basic/lifecycle.mdx`
//! §Capability Negotiation), and a careful one asks only what they allow
//! (`client/elicitation.mdx`: "Servers MUST NOT send elicitation requests to
//! clients that have not declared the capability"; the 2026-07-28 server
//! refuses such a call with -32021, `basic/utilities/mrtr.mdx`). mcp-edge's own
//! session declares everything it can relay ([`ClientCaps::RELAYED`]), which
//! is right for callers that declared as much but misleads the server about
//! the others: it asks, and the caller cannot answer. So a call from a caller
//! whose declared set differs runs in a session of that set: opened with
//! `initialize` on its first call, kept for later callers of the same set
//! (at most `limits::UPSTREAM_CAPABILITY_SESSIONS`; beyond that, or when the
//! server refuses a second session, calls use the main session and are
//! counted as refused, `limit="capability_sessions"`),
//! opened again if the server ends it (404), and ended with DELETE when the
//! connection closes. A lane is open to calls only once its
//! `notifications/initialized` was accepted; an open that fails (or whose
//! caller goes away) leaves it closed, to be opened by the next call. Each
//! open lane's GET stream is read (`super::notifications`): a server sends
//! what a session's calls caused there. The main session stays the one for
//! the catalog, probes and resource subscriptions.

use super::HttpConn;
use crate::limits::UPSTREAM_CAPABILITY_SESSIONS;
use crate::protocol::{ClientCaps, ProtocolVersion};
use crate::relay::{Lane, Relay};
use crate::upstream::era::{initialize_params, UpstreamEra};
use crate::upstream::SendError;
use bytes::Bytes;
use http::{HeaderValue, Method, Request};
use http_body_util::Full;
use serde_json::json;
use std::sync::Mutex;

struct Slot {
    caps: ClientCaps,
    /// Set when its `initialize` is answered (so `notifications/initialized`
    /// can carry it); `None` before, and after an open that failed.
    session: Option<HeaderValue>,
    /// `session` is open: `notifications/initialized` was accepted. Only
    /// then do calls and the GET stream use it.
    ready: bool,
    /// The server refused to open it: its callers use the main session
    /// while the connection lives.
    refused: bool,
}

/// What [`Lanes::find`] knows of a capability set.
enum Found {
    Open(Lane),
    /// Not open yet, or not any more.
    Closed(Lane),
    /// The server would not open a session for it.
    Refused,
}

/// The sessions of a legacy HTTP upstream other than the main one; slot
/// `i` is [`Lane`] `i + 1`. Slots are never reused for another set while
/// the connection lives (a call may still be running in one).
pub(super) struct Lanes {
    slots: Mutex<heapless::Vec<Slot, UPSTREAM_CAPABILITY_SESSIONS>>,
    /// Held while a session is opened, so concurrent first calls of one set
    /// open it once.
    opening: tokio::sync::Mutex<()>,
    /// Rung when a lane's session first opens, so its notification stream
    /// starts ([`HttpConn::read_all_notifications`]).
    opened: tokio::sync::Notify,
    /// Per lane: rung (to those waiting) each time its session opens, so a
    /// stream waiting to be asked again after the old session ended goes
    /// on at once with the new one.
    reopened: [tokio::sync::Notify; UPSTREAM_CAPABILITY_SESSIONS],
}

impl Lanes {
    pub(super) fn new() -> Lanes {
        Lanes {
            slots: Mutex::new(heapless::Vec::new()),
            opening: tokio::sync::Mutex::new(()),
            opened: tokio::sync::Notify::new(),
            reopened: std::array::from_fn(|_| tokio::sync::Notify::new()),
        }
    }

    /// The lane of `caps`, if it has one.
    fn find(&self, caps: ClientCaps) -> Option<Found> {
        let g = self.slots.lock().expect("lanes lock");
        let i = g.iter().position(|s| s.caps == caps)?;
        Some(match (g[i].refused, g[i].ready) {
            (true, _) => Found::Refused,
            (false, true) => Found::Open(lane_of(i)),
            (false, false) => Found::Closed(lane_of(i)),
        })
    }

    /// A new lane for `caps` (session not open yet); `None` when full.
    fn add(&self, caps: ClientCaps) -> Option<Lane> {
        let mut g = self.slots.lock().expect("lanes lock");
        g.push(Slot {
            caps,
            session: None,
            ready: false,
            refused: false,
        })
        .ok()?;
        Some(lane_of(g.len() - 1))
    }

    /// The session id of `lane` (not [`Lane::MAIN`]), open or being opened.
    fn session(&self, lane: Lane) -> Option<HeaderValue> {
        self.with(lane, |s| s.session.clone()).flatten()
    }

    /// The session id of `lane` once open.
    pub(super) fn open_session(&self, lane: Lane) -> Option<HeaderValue> {
        self.with(lane, |s| s.session.clone().filter(|_| s.ready))
            .flatten()
    }

    /// Records (or, with `None`, forgets) the session id of `lane`, not
    /// open yet.
    pub(super) fn set_session(&self, lane: Lane, session: Option<HeaderValue>) {
        self.with(lane, |s| {
            s.session = session;
            s.ready = false;
        });
    }

    /// The server refused to open `lane`'s session.
    pub(super) fn refused(&self, lane: Lane) -> bool {
        self.with(lane, |s| s.refused).unwrap_or(false)
    }

    /// `lane`'s session is open: calls and its stream may use it.
    fn set_ready(&self, lane: Lane) {
        self.with(lane, |s| s.ready = s.session.is_some());
    }

    fn with<T>(&self, lane: Lane, f: impl FnOnce(&mut Slot) -> T) -> Option<T> {
        let mut g = self.slots.lock().expect("lanes lock");
        let i = usize::from(lane.0).checked_sub(1)?;
        g.get_mut(i).map(f)
    }

    /// Waits until `lane`'s session (re)opens; only wakes waiters already
    /// registered (create and `enable` it before looking).
    pub(super) fn reopened(&self, lane: Lane) -> Option<tokio::sync::futures::Notified<'_>> {
        let i = usize::from(lane.0).checked_sub(1)?;
        Some(self.reopened.get(i)?.notified())
    }

    /// The capability set `lane` declares ([`ClientCaps::RELAYED`] for the main one).
    fn caps(&self, lane: Lane) -> ClientCaps {
        self.with(lane, |s| s.caps).unwrap_or(ClientCaps::RELAYED)
    }

    /// How many lanes there are (open or not); lanes are never removed.
    pub(super) fn len(&self) -> usize {
        self.slots.lock().expect("lanes lock").len()
    }

    /// Waits until a lane's session opened (a wake-up is kept if no one waits).
    pub(super) async fn opened(&self) {
        self.opened.notified().await
    }

    /// Takes every open session id (the connection closes).
    pub(super) fn take_all(&self) -> Vec<HeaderValue> {
        let mut g = self.slots.lock().expect("lanes lock");
        g.iter_mut()
            .filter_map(|s| {
                s.ready = false;
                s.session.take()
            })
            .collect()
    }
}

/// Forgets a lane's half-opened session unless the open completed
/// (an `initialize` answered, then a failure or the caller gone before
/// `notifications/initialized` was accepted).
struct Opening<'a> {
    lanes: &'a Lanes,
    lane: Lane,
    done: bool,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.lanes.set_session(self.lane, None);
        }
    }
}

/// Whether a failed `initialize` is the server saying no (a JSON-RPC error,
/// or an HTTP 4xx other than 408 and 429), not a passing failure.
fn refusal(e: &SendError) -> bool {
    match e {
        SendError::Rpc(_) => true,
        SendError::Http { status, .. } => {
            (400..500).contains(status) && ![408, 429].contains(status)
        }
        _ => false,
    }
}

pub(super) fn lane_of(index: usize) -> Lane {
    Lane(u8::try_from(index + 1).expect("UPSTREAM_CAPABILITY_SESSIONS < 255"))
}

impl HttpConn {
    /// The session a call of `method` from behind `relay` runs in: none
    /// in the modern era ([`Lane::STATELESS`]); in the legacy era, for a caller that can be asked (a legacy session, or a
    /// modern caller's call that can become an `InputRequiredResult`), the
    /// lane of what it declared; else the main session. `Err` names the
    /// set and version of a lane to open first ([`HttpConn::open_lane_of`]).
    pub(super) fn lane_for(
        &self,
        method: &str,
        era: UpstreamEra,
        relay: Option<&Relay>,
    ) -> Result<Lane, (ClientCaps, ProtocolVersion)> {
        if era == UpstreamEra::Modern {
            return Ok(Lane::STATELESS);
        }
        let asked = relay.filter(|r| r.session.is_some());
        let (UpstreamEra::Legacy(version), Some(caps)) = (era, asked.and_then(|r| r.declared))
        else {
            return Ok(Lane::MAIN);
        };
        // A server without sessions learns nothing from `initialize`.
        let sessionless = self.session.read().expect("session lock").is_none();
        if method == "initialize" || caps == ClientCaps::RELAYED || sessionless {
            return Ok(Lane::MAIN);
        }
        match self.lanes.find(caps) {
            Some(Found::Open(lane)) => Ok(lane),
            Some(Found::Refused) => Ok(Lane::MAIN),
            _ => Err((caps, version)),
        }
    }

    /// Opens the lane of `caps` (once, however many calls wait for it); the
    /// main session when the table is full (counted), and from then on when
    /// the server refuses to open it: many servers keep one session only
    /// (the TypeScript SDK's single transport answers a second `initialize`
    /// with 400 "Server already initialized"), and their callers must not
    /// lose every call for what they declared.
    pub(super) async fn open_lane_of(
        &self,
        caps: ClientCaps,
        version: ProtocolVersion,
    ) -> Result<Lane, SendError> {
        let _opening = self.lanes.opening.lock().await;
        let lane = match self.lanes.find(caps) {
            Some(Found::Open(lane)) => return Ok(lane),
            Some(Found::Refused) => return Ok(Lane::MAIN),
            Some(Found::Closed(lane)) => lane,
            None => match self.lanes.add(caps) {
                Some(lane) => lane,
                None => {
                    crate::metrics::refused("capability_sessions");
                    return Ok(Lane::MAIN);
                }
            },
        };
        match self.open_lane(lane, version).await {
            Ok(()) => Ok(lane),
            // Not a refusal (the network, a restart, a busy server): this
            // call goes to the main session, the next one tries again.
            Err(e) if !refusal(&e) => {
                tracing::debug!(
                    "{}: a caller's session could not be opened ({}); this call uses mcp-edge's",
                    self.shown_url,
                    crate::logline::printable(&e.to_string())
                );
                Ok(Lane::MAIN)
            }
            Err(e) => {
                self.lanes.with(lane, |s| s.refused = true);
                crate::metrics::refused("capability_sessions");
                tracing::info!(
                    "{}: a session for callers that declared other client capabilities was refused ({}); they share mcp-edge's session on this connection",
                    self.shown_url,
                    crate::logline::printable(&e.to_string())
                );
                Ok(Lane::MAIN)
            }
        }
    }

    /// `initialize` (declaring the lane's capabilities) and
    /// `notifications/initialized` in `lane`, in the legacy `version`
    /// negotiated by the main session.
    pub(super) async fn open_lane(
        &self,
        lane: Lane,
        version: ProtocolVersion,
    ) -> Result<(), SendError> {
        let era = UpstreamEra::Legacy(version);
        let mut opening = Opening {
            lanes: &self.lanes,
            lane,
            done: false,
        };
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let params = initialize_params(version, self.lanes.caps(lane));
        let msg = crate::protocol::request(json!(id), "initialize", Some(params));
        let req = self.build("initialize", &msg, era, None, lane)?;
        self.exchange(req, "initialize", id, None, lane, era)
            .await?;
        let Some(session) = self.lanes.session(lane) else {
            return Err(SendError::Transport(
                "initialize answered without an Mcp-Session-Id".into(),
            ));
        };
        let note = crate::protocol::notification("notifications/initialized", None);
        // The session is not open to calls yet: its id is set here.
        let mut req = self.build("notifications/initialized", &note, era, None, lane)?;
        req.headers_mut().insert("mcp-session-id", session);
        self.post_expecting_no_answer(req).await?;
        opening.done = true;
        self.lanes.set_ready(lane);
        self.lanes.opened.notify_one();
        if let Some(i) = usize::from(lane.0).checked_sub(1) {
            self.lanes.reopened[i].notify_waiters();
        }
        Ok(())
    }

    /// Opens `lane` again after the server ended its session (404), unless
    /// a concurrent call did already.
    pub(super) async fn reopen_lane(
        &self,
        lane: Lane,
        ended: Option<HeaderValue>,
        era: UpstreamEra,
    ) -> Result<(), SendError> {
        let UpstreamEra::Legacy(version) = era else {
            return Err(SendError::Transport("404 from a modern upstream".into()));
        };
        let _opening = self.lanes.opening.lock().await;
        match self.lanes.open_session(lane) {
            Some(now) if Some(&now) != ended.as_ref() => Ok(()), // opened again meanwhile
            _ => self.open_lane(lane, version).await,
        }
    }

    /// Ends the legacy sessions with DELETE (2025-11-25 transports.mdx
    /// §Session Management): the main one and every caller's lane.
    /// All at once, each within `limits::SESSION_DELETE_TIMEOUT`. Each
    /// carries the negotiated `MCP-Protocol-Version`, as every request after
    /// `initialize` must (2025-11-25 transports.mdx §Protocol Version
    /// Header; 2025-03-26 had no such header).
    pub async fn close(&self) {
        let main = self.session.write().expect("session lock").take();
        let all = main.into_iter().chain(self.lanes.take_all());
        let version = self.spoken_now().legacy;
        futures_util::future::join_all(all.map(|s| self.delete(s, version))).await;
    }

    /// Ends the main session an `initialize` in `version` opened when the
    /// handshake does not keep it (a dual-era probe that failed half-way):
    /// DELETE, and the connection has no session from then on.
    pub async fn drop_main_session(&self, version: ProtocolVersion) {
        let main = self.session.write().expect("session lock").take();
        self.expired
            .store(false, std::sync::atomic::Ordering::Release);
        if let Some(s) = main {
            self.delete(s, Some(version)).await;
        }
    }

    async fn delete(&self, s: HeaderValue, version: Option<ProtocolVersion>) {
        let mut req = Request::builder()
            .method(Method::DELETE)
            .uri(self.url.clone())
            .header("mcp-session-id", s)
            .body(Full::new(Bytes::new()))
            .expect("static request");
        for (k, v) in &self.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        if let Some(v) = version {
            if v.has_version_header() {
                let version = HeaderValue::from_static(v.as_str());
                req.headers_mut().insert("mcp-protocol-version", version);
            }
        }
        let _ =
            tokio::time::timeout(crate::limits::SESSION_DELETE_TIMEOUT, self.authorized(req)).await;
    }
}
