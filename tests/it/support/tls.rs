//! TLS for the tests: certificates made by `rcgen` ([`Ca`], [`Issued`]),
//! their PEM files and the `[server]` lines naming them ([`Files`]), configs
//! with them loaded by the config loader ([`config`], [`start`]), and an
//! HTTP/1.1 client connection over `tokio-rustls` that trusts the test CA
//! and shows the server's certificate ([`Conn`]).

use super::Reply;
use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use mcp_edge::config::Config;
use mcp_edge::gateway::Gateway;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A test certificate authority.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// Its certificate, PEM.
    pub pem: String,
    der: CertificateDer<'static>,
}

/// A certificate issued by a [`Ca`], with its key.
pub struct Issued {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PEM (PKCS#8).
    pub key_pem: String,
    /// The certificate, DER (what a TLS peer sees).
    pub der: CertificateDer<'static>,
}

impl Ca {
    /// A fresh CA named `cn`.
    pub fn new(cn: &str) -> Ca {
        let mut p = CertificateParams::default();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: Issuer::new(p, key),
        }
    }

    /// A certificate with `subject`, for `names` (DNS names or IP
    /// addresses; empty for a client certificate).
    pub fn issue(&self, subject: &[(DnType, &str)], names: &[&str]) -> Issued {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut p = CertificateParams::new(names).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in subject {
            p.distinguished_name.push(t.clone(), *v);
        }
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// A server certificate for 127.0.0.1 and localhost named `cn`.
    pub fn server(&self, cn: &str) -> Issued {
        self.issue(&[(DnType::CommonName, cn)], &["127.0.0.1", "localhost"])
    }

    /// Writes the CA certificate to `path`.
    pub fn write(&self, path: &Path) -> PathBuf {
        std::fs::write(path, &self.pem).unwrap();
        path.to_path_buf()
    }
}

/// The PEM files of a TLS listener in a test's folder.
pub struct Files {
    /// `server.tls_cert`.
    pub cert: PathBuf,
    /// `server.tls_key`.
    pub key: PathBuf,
    /// `server.tls_client_ca`.
    pub client_ca: Option<PathBuf>,
}

impl Files {
    /// Writes `server` (and `client_ca`'s certificate) into `dir`, replacing
    /// what a previous call wrote there.
    pub fn write(dir: &Path, server: &Issued, client_ca: Option<&Ca>) -> Files {
        let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
        std::fs::write(&cert, &server.cert_pem).unwrap();
        std::fs::write(&key, &server.key_pem).unwrap();
        let client_ca = client_ca.map(|ca| ca.write(&dir.join("client-ca.pem")));
        Files {
            cert,
            key,
            client_ca,
        }
    }

    /// The `[server]` lines naming these files.
    pub fn toml(&self) -> String {
        let mut t = format!(
            "tls_cert = {:?}\ntls_key = {:?}\n",
            self.cert.display().to_string(),
            self.key.display().to_string()
        );
        if let Some(ca) = &self.client_ca {
            t.push_str(&format!("tls_client_ca = {:?}\n", ca.display().to_string()));
        }
        t
    }
}

/// The config text of [`super::start`] (`[server]` on an ephemeral
/// loopback port plus `server_extra`, then `upstreams`) with `files`'
/// `tls_*` lines (`None`: plain HTTP).
pub fn config_text(server_extra: &str, upstreams: &str, files: Option<&Files>) -> String {
    let tls = files.map(Files::toml).unwrap_or_default();
    format!("[server]\nlisten = \"127.0.0.1:0\"\n{server_extra}\n{tls}\n{upstreams}")
}

/// [`config_text`] loaded by the config loader (which reads the PEM files
/// and builds `server.tls`).
pub fn config(server_extra: &str, upstreams: &str, files: Option<&Files>) -> Config {
    let text = config_text(server_extra, upstreams, files);
    Config::from_toml_str(&text, &super::origin("tls.toml")).expect("valid test config")
}

/// [`super::start`] serving https with `files`.
pub async fn start(server_extra: &str, upstreams: &str, files: &Files) -> Gateway {
    let gw = Gateway::start(config(server_extra, upstreams, Some(files)))
        .await
        .expect("gateway starts");
    gw.wait_upstreams(std::time::Duration::from_secs(30)).await;
    gw
}

/// A client configuration trusting `ca`, presenting `client` if given.
pub fn client_config(ca: &Ca, client: Option<&Issued>) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der.clone()).unwrap();
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut c = match client {
        Some(id) => {
            let key = PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap();
            b.with_client_auth_cert(vec![id.der.clone()], key).unwrap()
        }
        None => b.with_no_client_auth(),
    };
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    c
}

/// One HTTP/1.1 connection over TLS to the gateway.
pub struct Conn {
    send: SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    /// The certificate the server showed (DER).
    pub server_cert: CertificateDer<'static>,
}

impl Conn {
    /// Connects to `addr` (name checked: 127.0.0.1), trusting `ca`, with
    /// the client certificate `client` if given; the handshake's error if
    /// it fails (a TLS 1.3 server refuses a client certificate only after
    /// the client's side finished: then the first request fails).
    pub async fn open(addr: SocketAddr, ca: &Ca, client: Option<&Issued>) -> Result<Conn, String> {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(ca, client)));
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = ServerName::IpAddress(addr.ip().into());
        let tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        let server_cert = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        Ok(Conn {
            send,
            addr,
            server_cert,
        })
    }

    /// POSTs `body` to `/mcp` with `headers`; the transport's error if the
    /// connection is gone.
    pub async fn try_post(
        &mut self,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> Result<Reply, hyper::Error> {
        let mut req = super::mcp_request("POST", self.addr, headers, &body.to_string(), true);
        *req.uri_mut() = "/mcp".parse().unwrap();
        let host = self.addr.to_string().parse().unwrap();
        req.headers_mut().insert(http::header::HOST, host);
        self.send.ready().await?;
        let resp = self.send.send_request(req).await?;
        Ok(super::reply(resp).await)
    }

    /// [`Conn::try_post`] that must reach the gateway.
    pub async fn post(&mut self, headers: &[(&str, &str)], body: &Value) -> Reply {
        self.try_post(headers, body)
            .await
            .expect("request over TLS")
    }
}
