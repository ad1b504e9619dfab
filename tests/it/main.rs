//! The integration tests, one test binary (`cargo test --test it`): one
//! module per area, the shared helpers in [`support`]. One binary links once
//! (36 binaries used to link the same crate and its dependencies 36 times:
//! most of the test stage's build time and of `target/`'s size).
//!
//! The counting allocator is installed once for the whole binary; a test
//! that measures the heap runs alone in its process ([`support::heap`]).

mod support;

mod access;
mod admin;
mod audit;
mod budget;
mod builtin;
mod catalogs;
mod cli;
mod config;
mod connections;
mod cors;
mod eras;
mod fleet;
mod gateway;
mod heap;
mod interop;
mod interop_mrtr_legacy;
mod limits;
mod listen;
mod logs;
mod metrics_hot;
mod modern;
mod mrtr;
mod mrtr_bridge;
mod mrtr_heap;
mod notify;
mod oauth;
mod pins;
mod properties;
mod reaper;
mod relay;
mod reload;
mod resources;
mod resume;
mod shares;
mod sse_clients;
mod sse_upstreams;
mod startup;
mod streams;
mod structure;
mod supervisor;
mod systemd;
mod tasks;
mod tls;
mod upstream_errors;

/// Counts every allocation of the test process (`mcp_edge::alloc`): the
/// heap tests read it, alone in their process.
#[global_allocator]
static ALLOC: mcp_edge::alloc::Counting = mcp_edge::alloc::Counting;
