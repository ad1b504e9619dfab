//! The PROXY protocol on `listen` (`server.proxy_protocol`): a connection
//! from one of `server.trusted_proxies` begins with a header naming the
//! client ([`crate::protocol::proxy_header`], read before TLS and HTTP), and
//! the client's address is what per-peer limits, the audit log and log
//! lines see from then on. A trusted proxy that does not send a valid one
//! is refused (`refused{limit="proxy_header"}`); anyone else who sends one
//! is refused too (`refused{limit="proxy_untrusted"}`): a client must not
//! name its own address.

use crate::config::fleet::Fleet;
use crate::protocol::proxy_header::{self, Source};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpStream;

/// The first bytes of a v2 header and of a v1 one.
const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";
const V1_SIGNATURE: &[u8] = b"PROXY ";

/// Why a connection was refused before its first request.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refused {
    /// A trusted proxy's connection without a valid header.
    #[error("a trusted proxy's connection without a valid PROXY header: {0}")]
    Header(proxy_header::ProxyHeaderError),
    /// The header was not complete in time.
    #[error("a trusted proxy sent no complete PROXY header within {0:?}")]
    Timeout(Duration),
    /// A PROXY header from an address not in `trusted_proxies`.
    #[error("a PROXY header from an address not in server.trusted_proxies")]
    Untrusted,
}

impl Refused {
    /// The `limit` label it is counted under.
    pub(super) fn limit(&self) -> &'static str {
        match self {
            Refused::Untrusted => "proxy_untrusted",
            _ => "proxy_header",
        }
    }
}

/// The client of a connection from `addr`: `addr` itself, or, from a
/// trusted proxy under `proxy_protocol`, the address its header names (its
/// own for a `LOCAL` health check). Reads exactly the header and nothing
/// after it.
pub(super) async fn client_of(
    stream: &mut TcpStream,
    addr: SocketAddr,
    fleet: &Fleet,
) -> Result<SocketAddr, Refused> {
    if !fleet.proxy_protocol {
        return Ok(addr);
    }
    let wait = crate::limits::PROXY_HEADER_TIMEOUT;
    if !fleet.trusts(addr.ip()) {
        return match tokio::time::timeout(wait, starts_with_header(stream)).await {
            Ok(true) => Err(Refused::Untrusted),
            // Not a header, or undecided in time: HTTP's own timeout applies.
            _ => Ok(addr),
        };
    }
    match tokio::time::timeout(wait, proxy_header::read(stream)).await {
        Ok(Ok(Source::Client(client))) => Ok(client),
        Ok(Ok(Source::Local)) => Ok(addr),
        Ok(Err(e)) => Err(Refused::Header(e)),
        Err(_) => Err(Refused::Timeout(wait)),
    }
}

/// Whether the connection's first bytes are a PROXY header's signature,
/// looked at without reading them.
async fn starts_with_header(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 12];
    // A client sending its first bytes one at a time is looked at again
    // after a pause that doubles (the whole wait is bounded by the caller).
    let mut pause = crate::limits::PROXY_PEEK_PAUSE;
    loop {
        let n = match stream.peek(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        match signature(&buf[..n]) {
            Some(is) => return is,
            None => tokio::time::sleep(pause).await,
        }
        pause = (pause * 2).min(crate::limits::PROXY_PEEK_PAUSE_MAX);
    }
}

/// Whether `first` (a connection's first bytes) is a signature: `None`
/// while it is still only the start of one.
fn signature(first: &[u8]) -> Option<bool> {
    let starts = |sig: &[u8]| {
        let n = first.len().min(sig.len());
        first[..n] == sig[..n]
    };
    let whole = |sig: &[u8]| first.len() >= sig.len();
    match (starts(V1_SIGNATURE), starts(V2_SIGNATURE)) {
        (false, false) => Some(false),
        (true, _) if whole(V1_SIGNATURE) => Some(true),
        (_, true) if whole(V2_SIGNATURE) => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{client_of, signature, Refused};
    use crate::config::fleet::{Cidr, Fleet};
    use tokio::io::AsyncWriteExt;

    /// A connected pair on loopback: (the accepted side, its peer address, the client).
    async fn pair() -> (
        tokio::net::TcpStream,
        std::net::SocketAddr,
        tokio::net::TcpStream,
    ) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (s, addr) = l.accept().await.unwrap();
        (s, addr, c)
    }

    #[tokio::test(start_paused = true)]
    async fn a_trusted_proxy_gets_the_header_timeout_and_no_more() {
        let fleet = Fleet {
            proxy_protocol: true,
            trusted_proxies: vec![Cidr::parse("127.0.0.1").unwrap()],
            ..Fleet::default()
        };
        // Half a header, then silence: refused once PROXY_HEADER_TIMEOUT passes.
        let (mut s, addr, mut c) = pair().await;
        c.write_all(b"PROXY TCP4 192.0").await.unwrap();
        let r = client_of(&mut s, addr, &fleet).await;
        assert!(
            matches!(r, Err(Refused::Timeout(t)) if t == crate::limits::PROXY_HEADER_TIMEOUT),
            "{r:?}"
        );
        // From anyone else, the start of a signature and then silence is
        // given up on (not a header) within the same bound.
        let elsewhere = Fleet {
            trusted_proxies: vec![Cidr::parse("10.9.9.9").unwrap()],
            ..fleet
        };
        let (mut s, addr, mut c) = pair().await;
        c.write_all(b"P").await.unwrap();
        assert_eq!(client_of(&mut s, addr, &elsewhere).await.ok(), Some(addr));
    }

    #[test]
    fn only_a_whole_signature_is_a_header() {
        assert_eq!(signature(b"POST /mcp HTTP/1.1"), Some(false));
        assert_eq!(signature(b"GET /"), Some(false));
        assert_eq!(signature(b"\x16\x03\x01"), Some(false), "a TLS ClientHello");
        assert_eq!(signature(b"PROXY TCP4 "), Some(true));
        assert_eq!(signature(b"\r\n\r\n\0\r\nQUIT\n"), Some(true));
        assert_eq!(signature(b"P"), None);
        assert_eq!(signature(b"PROX"), None);
        assert_eq!(signature(b"\r\n\r\n"), None);
        assert_eq!(signature(b"PRI * HTTP/2.0"), Some(false));
    }
}
