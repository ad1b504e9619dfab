//! TLS on the downstream listener (`server.tls_cert`, `server.tls_key`,
//! `server.tls_client_ca`): the handshake of one accepted connection and
//! the peer identity it yields ([`super::app::Peer`]).
//!
//! The accept loop only accepts; the handshake runs in the connection's own
//! task ([`super::accept_loop`]), bounded by
//! [`crate::limits::TLS_HANDSHAKE_TIMEOUT`], so a slow or silent client
//! holds its own permit and nothing else. The rustls configuration (ring
//! provider, ALPN `http/1.1`, the client-certificate verifier) is built when
//! the config is loaded ([`crate::config::TlsConfig`]); the accept loop reads
//! the current one once per connection from [`super::app::App::tls`], so a reload
//! that installs a new certificate reaches new connections only.

use super::app::Peer;
use crate::limits::TLS_HANDSHAKE_TIMEOUT;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;
use x509_parser::der_parser::asn1_rs::Tag;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Why a TLS handshake ended without a connection.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The client spoke something else than TLS, offered nothing we accept,
    /// sent no (or an untrusted) client certificate under mTLS, or went away.
    #[error("TLS handshake with {addr} failed: {source}")]
    Failed {
        /// The client's address.
        addr: SocketAddr,
        /// What rustls (or the socket) said.
        source: std::io::Error,
    },
    /// The handshake did not finish within its bound.
    #[error("TLS handshake with {addr} not finished within {limit:?}")]
    TimedOut {
        /// The client's address.
        addr: SocketAddr,
        /// [`TLS_HANDSHAKE_TIMEOUT`].
        limit: Duration,
    },
}

/// Runs the server side of the TLS handshake on `io` (a connection accepted
/// from `addr`) with `config`, within [`TLS_HANDSHAKE_TIMEOUT`]. Returns
/// the encrypted stream and the peer: `tls: true`, and with mTLS the
/// verified leaf certificate's subject ([`cert_subject`]).
pub async fn accept<S>(
    config: Arc<rustls::ServerConfig>,
    io: S,
    addr: SocketAddr,
) -> Result<(TlsStream<S>, Peer), HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let stream = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
        Ok(Ok(s)) => s,
        Ok(Err(source)) => return Err(HandshakeError::Failed { addr, source }),
        Err(_) => {
            return Err(HandshakeError::TimedOut {
                addr,
                limit: TLS_HANDSHAKE_TIMEOUT,
            })
        }
    };
    let leaf = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first());
    let cert_subject = leaf.and_then(|der| {
        let s = cert_subject(der.as_ref());
        if s.is_none() {
            tracing::debug!(%addr, "TLS client certificate verified but its subject did not parse");
        }
        s
    });
    let peer = Peer {
        addr,
        tls: true,
        cert_subject,
    };
    Ok((stream, peer))
}

/// The subject of the DER certificate `der` as (attribute, value) pairs in
/// certificate order: attribute short names upper-cased (`CN`, `O`, `OU`,
/// `C`, `L`, `ST`, `DC`, `EMAIL`, …; an attribute without a known name as
/// its dotted OID), values as text (UTF-8, Printable, IA5, Numeric, BMP,
/// Universal and Teletex strings; anything else as `#` and the hex of its
/// content bytes). `None` when `der` is not a certificate.
pub fn cert_subject(der: &[u8]) -> Option<Vec<(String, String)>> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let registry = x509_parser::objects::oid_registry();
    let pairs = cert
        .subject()
        .iter_attributes()
        .map(|a| {
            let oid = a.attr_type();
            let name = match x509_parser::objects::oid2abbrev(oid, registry) {
                Ok(n) => n.to_ascii_uppercase(),
                Err(_) => oid.to_id_string(),
            };
            (name, attribute_text(a.attr_value()))
        })
        .collect();
    Some(pairs)
}

/// One attribute value as text (see [`cert_subject`]).
fn attribute_text(v: &x509_parser::der_parser::asn1_rs::Any<'_>) -> String {
    let data = v.data;
    let text = match v.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String | Tag::NumericString => {
            std::str::from_utf8(data).ok().map(str::to_string)
        }
        Tag::BmpString => {
            let units = data
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]));
            char::decode_utf16(units)
                .collect::<Result<String, _>>()
                .ok()
        }
        Tag::UniversalString => data
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        // T.61 as Latin-1, as OpenSSL reads it.
        Tag::TeletexString => Some(data.iter().map(|b| char::from(*b)).collect()),
        _ => None,
    };
    text.unwrap_or_else(|| {
        let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
        format!("#{hex}")
    })
}
