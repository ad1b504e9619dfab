//! The downstream face: the accept loop, the `/mcp` endpoint for both eras,
//! request checks, framing, and the admin routes. [`App`] is the narrow
//! state it needs; the composition root ([`crate::gateway`]) builds it and
//! runs the loops.
//!
//! Connections are limited by a semaphore whose permit is taken *before*
//! `accept` and moved into the connection's task, so excess clients wait in
//! the kernel backlog instead of costing memory here. When every place is
//! taken, the loop accepts anyway and makes room by closing the connection
//! that has sat longest without a request ([`conns`]): idle or half-sent
//! connections cannot lock clients out. With TLS
//! (`server.tls_cert`), that task does the handshake first ([`tls_accept`]); every
//! request carries who sent it as a [`Peer`] extension.

mod accept;
pub mod admin;
mod admission;
mod answered_here;
mod app;
mod call;
mod call_stream;
pub mod conns;
pub mod endpoint;
mod get_stream;
pub mod listen;
mod message;
pub mod modern;
pub mod operator_socket;
pub mod parked;
mod proxied;
mod receiving;
pub mod reply;
pub mod resume;
pub mod rounds;
mod session_verbs;
pub mod sessions;
mod sse_driver;
pub mod sse_links;
pub mod sse_transport;
pub mod streams;
mod subscribe;
mod sweep;
mod task_callers;
pub mod tls_accept;

pub use accept::accept_loop;
pub use app::{App, Body, LastReload, Peer, Who};
pub use sweep::sweep_sessions;
