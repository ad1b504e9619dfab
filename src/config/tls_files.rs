//! `server.tls_cert`, `server.tls_key`, `server.tls_client_ca`: the PEM
//! files read and checked at load, and the rustls server configuration built
//! from them (ring provider, ALPN `http/1.1`; with a client CA a client
//! certificate is required). Every error names the key whose file is at
//! fault; key material is never echoed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::ctx::{Ctx, Result};
use super::fields::{bearer_token_file as expand_path, secret_file};
use super::TlsConfig;

const CERT: &str = "server.tls_cert";
const KEY: &str = "server.tls_key";
const CLIENT_CA: &str = "server.tls_client_ca";

/// The three keys as written; `None` = absent.
pub(super) struct RawTls<'a> {
    pub cert: Option<&'a str>,
    pub key: Option<&'a str>,
    pub client_ca: Option<&'a str>,
}

/// The TLS keys: `None` without `tls_cert`/`tls_key`, else the loaded
/// configuration.
pub(super) fn tls(ctx: &Ctx, raw: RawTls) -> Result<Option<TlsConfig>> {
    let (cert, key) = match (raw.cert, raw.key) {
        (None, None) => {
            return match raw.client_ca {
                Some(_) => Err(ctx.err(
                    CLIENT_CA,
                    "needs server.tls_cert and server.tls_key: client certificates are \
                     asked for on the HTTPS listener",
                )),
                None => Ok(None),
            };
        }
        (Some(_), None) => {
            return Err(ctx.err(
                KEY,
                "missing: server.tls_cert is set; HTTPS needs both tls_cert and tls_key",
            ))
        }
        (None, Some(_)) => {
            return Err(ctx.err(
                CERT,
                "missing: server.tls_key is set; HTTPS needs both tls_cert and tls_key",
            ))
        }
        (Some(c), Some(k)) => (expand_path(ctx, CERT, c)?, secret_file(ctx, KEY, k)?),
    };
    let client_ca = raw
        .client_ca
        .map(|c| expand_path(ctx, CLIENT_CA, c))
        .transpose()?;
    load(ctx, cert, key, client_ca).map(Some)
}

/// Reads the files and builds the rustls configuration.
fn load(ctx: &Ctx, cert: PathBuf, key: PathBuf, client_ca: Option<PathBuf>) -> Result<TlsConfig> {
    let cert_pem = read(ctx, CERT, &cert)?;
    let key_pem = read(ctx, KEY, &key)?;
    let ca_pem = client_ca
        .as_deref()
        .map(|p| read(ctx, CLIENT_CA, p))
        .transpose()?;
    let chain = certificates(ctx, CERT, &cert, &cert_pem)?;
    let (not_after, validity) = not_after(ctx, &cert, &chain[0])?;
    let private_key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| ctx.err(KEY, format!("no PEM private key in {} ({e})", shown(&key))))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ctx.err(CERT, format!("no TLS protocol version available ({e})")))?;
    let builder = match (&client_ca, &ca_pem) {
        (Some(path), Some(pem)) => {
            let verifier = client_verifier(ctx, path, pem, provider)?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut rustls = builder
        .with_single_cert(chain, private_key)
        .map_err(|e| key_error(ctx, &key, &cert, e))?;
    rustls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let digest = digest([Some(&cert_pem), Some(&key_pem), ca_pem.as_ref()]);
    Ok(TlsConfig {
        cert,
        key,
        client_ca,
        rustls: Arc::new(rustls),
        digest,
        not_after,
        validity,
    })
}

/// The file's bytes; an error names `key` and the path.
fn read(ctx: &Ctx, key: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| ctx.err(key, format!("cannot read {}: {e}", shown(path))))
}

/// Every PEM certificate in `pem`, at least one.
fn certificates(
    ctx: &Ctx,
    key: &str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| ctx.err(key, format!("{} is not valid PEM ({e})", shown(path))))?;
    if certs.is_empty() {
        return Err(ctx.err(key, format!("no PEM certificate in {}", shown(path))));
    }
    Ok(certs)
}

/// The verifier that requires a client certificate signed by one of the
/// CA certificates in `pem`.
fn client_verifier(
    ctx: &Ctx,
    path: &Path,
    pem: &[u8],
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>> {
    let mut roots = RootCertStore::empty();
    for ca in certificates(ctx, CLIENT_CA, path, pem)? {
        roots.add(ca).map_err(|e| {
            ctx.err(
                CLIENT_CA,
                format!("{}: not a usable CA certificate ({e})", shown(path)),
            )
        })?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| ctx.err(CLIENT_CA, format!("{}: {e}", shown(path))))
}

/// A key rustls refused: it does not match the certificate, or it is not
/// a key rustls can sign with.
fn key_error(ctx: &Ctx, key: &Path, cert: &Path, e: rustls::Error) -> super::ConfigError {
    let message = match e {
        rustls::Error::InconsistentKeys(_) => format!(
            "the private key in {} does not match the certificate in {} (server.tls_cert)",
            shown(key),
            shown(cert)
        ),
        other => format!("{}: unusable private key ({other})", shown(key)),
    };
    ctx.err(KEY, message)
}

/// The leaf certificate's `notAfter` as RFC 3339 (`2030-01-31T12:00:00Z`),
/// and its validity period in Unix seconds.
fn not_after(ctx: &Ctx, path: &Path, leaf: &CertificateDer) -> Result<(String, (i64, i64))> {
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref()).map_err(|e| {
        ctx.err(
            CERT,
            format!(
                "the first certificate in {} can't be parsed ({e})",
                shown(path)
            ),
        )
    })?;
    let v = parsed.validity();
    let validity = (v.not_before.timestamp(), v.not_after.timestamp());
    let t = v.not_after.to_datetime();
    let shown = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    Ok((shown, validity))
}

/// A note when the leaf certificate is not valid at `now` (Unix seconds):
/// clients will refuse it. Not an error: a board without a real-time clock
/// can start before its clock is set.
pub(super) fn validity_note(tls: &TlsConfig, now: i64) -> Option<String> {
    let (from, until) = tls.validity;
    if now > until {
        Some(format!(
            "server.tls_cert: the certificate expired at {}; clients will refuse it",
            tls.not_after
        ))
    } else if now < from {
        Some(
            "server.tls_cert: the certificate is not valid yet (is the clock set?); \
             clients will refuse it"
                .to_owned(),
        )
    } else {
        None
    }
}

/// SHA-256 over the files' contents, each preceded by its length (so the
/// split between files counts too).
fn digest(files: [Option<&Vec<u8>>; 3]) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for bytes in files.into_iter().flatten() {
        ctx.update(&(bytes.len() as u64).to_be_bytes());
        ctx.update(bytes);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

fn shown(p: &Path) -> String {
    p.display().to_string()
}

/// Test certificates (rcgen): a CA, a server certificate it signs, and
/// PEM files of them in a temporary directory.
#[cfg(test)]
pub(super) mod testing {
    use std::path::PathBuf;

    /// PEM files written into `dir`: `cert.pem` (leaf, then CA), `key.pem`,
    /// `ca.pem`, and `other_key.pem` (a key of no certificate here).
    pub(in super::super) struct Files {
        pub dir: tempfile::TempDir,
        pub cert: PathBuf,
        pub key: PathBuf,
        pub ca: PathBuf,
        pub other_key: PathBuf,
        /// A client certificate the CA signed (CN=build-agent) and its key.
        pub client_cert: PathBuf,
        pub client_key: PathBuf,
    }

    pub(in super::super) fn files() -> Files {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.not_after = rcgen::date_time_ymd(2040, 6, 30);
        let cert = params.signed_by(&key, &issuer).unwrap();
        let client_key = rcgen::KeyPair::generate().unwrap();
        let mut client = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        client
            .distinguished_name
            .push(rcgen::DnType::CommonName, "build-agent");
        let client_cert = client.signed_by(&client_key, &issuer).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: String| {
            use std::os::unix::fs::PermissionsExt;
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            // Private, as a key must be (a world-readable one is a note).
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            p
        };
        Files {
            cert: write("cert.pem", format!("{}{}", cert.pem(), ca_cert.pem())),
            key: write("key.pem", key.serialize_pem()),
            ca: write("ca.pem", ca_cert.pem()),
            other_key: write(
                "other_key.pem",
                rcgen::KeyPair::generate().unwrap().serialize_pem(),
            ),
            client_cert: write("client.pem", client_cert.pem()),
            client_key: write("client_key.pem", client_key.serialize_pem()),
            dir,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::testing::files;
    use super::*;
    use crate::config::{Config, ConfigError};

    fn load(server: &str) -> std::result::Result<Config, ConfigError> {
        let text =
            format!("[server]\n{server}\n[[upstream]]\nname = \"e\"\ntransport = \"builtin\"\n");
        let env = |_: &str| -> Option<OsString> { None };
        Config::from_toml_str_with_env(&text, Path::new("t.toml"), &env)
    }

    fn keys(cert: &Path, key: &Path) -> String {
        format!("tls_cert = {:?}\ntls_key = {:?}\n", cert, key)
    }

    fn key_of(server: &str) -> String {
        let e = load(server).unwrap_err();
        e.key().unwrap_or_else(|| panic!("{e}")).to_owned()
    }

    #[test]
    fn a_certificate_outside_its_validity_is_a_note() {
        let f = files();
        let cfg = load(&keys(&f.cert, &f.key)).unwrap();
        let tls = cfg.server.tls.as_ref().unwrap();
        assert!(cfg.notes.is_empty(), "{:?}", cfg.notes);
        let (from, until) = tls.validity;
        assert_eq!(validity_note(tls, from), None);
        let expired = validity_note(tls, until + 1).unwrap();
        assert!(
            expired.contains("expired at 2040-06-30T00:00:00Z"),
            "{expired}"
        );
        let early = validity_note(tls, from - 1).unwrap();
        assert!(early.contains("not valid yet"), "{early}");
    }

    #[test]
    fn cert_and_key_load_with_alpn_digest_and_not_after() {
        let f = files();
        let cfg = load(&keys(&f.cert, &f.key)).unwrap();
        let tls = cfg.server.tls.as_ref().unwrap();
        assert_eq!(tls.rustls.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert_eq!(tls.not_after, "2040-06-30T00:00:00Z");
        assert_eq!(tls.client_ca, None);
        let again = load(&keys(&f.cert, &f.key)).unwrap();
        assert_eq!(again.server.tls, cfg.server.tls);
        // A changed file changes the digest.
        let mut pem = std::fs::read_to_string(&f.cert).unwrap();
        pem.push('\n');
        std::fs::write(&f.cert, pem).unwrap();
        let changed = load(&keys(&f.cert, &f.key)).unwrap();
        assert_ne!(changed.server.tls.unwrap().digest, tls.digest);
    }

    #[test]
    fn client_ca_requires_a_client_certificate() {
        let f = files();
        let text = format!("{}tls_client_ca = {:?}\n", keys(&f.cert, &f.key), f.ca);
        let cfg = load(&text).unwrap();
        let tls = cfg.server.tls.unwrap();
        assert_eq!(tls.client_ca.as_deref(), Some(f.ca.as_path()));
        let without = client(&f, false);
        let e = handshake(tls.rustls.clone(), without).unwrap_err();
        assert!(matches!(e, rustls::Error::NoCertificatesPresented), "{e:?}");
        handshake(tls.rustls.clone(), client(&f, true)).unwrap();
        // Without tls_client_ca no certificate is asked for.
        let plain = load(&keys(&f.cert, &f.key)).unwrap().server.tls.unwrap();
        handshake(plain.rustls, client(&f, false)).unwrap();
    }

    /// A client trusting the test CA, with or without its certificate.
    fn client(f: &testing::Files, with_cert: bool) -> rustls::ClientConfig {
        let mut roots = RootCertStore::empty();
        let ca = std::fs::read(&f.ca).unwrap();
        roots
            .add(CertificateDer::from_pem_slice(&ca).unwrap())
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let b = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        if !with_cert {
            return b.with_no_client_auth();
        }
        let chain = vec![CertificateDer::from_pem_file(&f.client_cert).unwrap()];
        let key = PrivateKeyDer::from_pem_file(&f.client_key).unwrap();
        b.with_client_auth_cert(chain, key).unwrap()
    }

    /// An in-memory handshake; the first error either side reports.
    fn handshake(
        server: Arc<rustls::ServerConfig>,
        client: rustls::ClientConfig,
    ) -> std::result::Result<(), rustls::Error> {
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let mut c = rustls::ClientConnection::new(Arc::new(client), name).unwrap();
        let mut s = rustls::ServerConnection::new(server).unwrap();
        for _ in 0..10 {
            let mut buf = Vec::new();
            c.write_tls(&mut buf).unwrap();
            s.read_tls(&mut buf.as_slice()).unwrap();
            s.process_new_packets()?;
            let mut buf = Vec::new();
            s.write_tls(&mut buf).unwrap();
            c.read_tls(&mut buf.as_slice()).unwrap();
            c.process_new_packets()?;
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(());
            }
        }
        panic!("handshake did not finish")
    }

    #[test]
    fn cert_and_key_come_together() {
        let f = files();
        assert_eq!(key_of(&format!("tls_cert = {:?}", f.cert)), KEY);
        assert_eq!(key_of(&format!("tls_key = {:?}", f.key)), CERT);
        assert_eq!(key_of(&format!("tls_client_ca = {:?}", f.ca)), CLIENT_CA);
    }

    #[test]
    fn bad_files_name_their_key() {
        let f = files();
        let missing = f.dir.path().join("nope.pem");
        assert_eq!(key_of(&keys(&missing, &f.key)), CERT);
        assert_eq!(key_of(&keys(&f.cert, &missing)), KEY);
        // No certificate in the cert file, no key in the key file.
        assert_eq!(key_of(&keys(&f.key, &f.key)), CERT);
        assert_eq!(key_of(&keys(&f.cert, &f.cert)), KEY);
        let e = load(&keys(&f.cert, &f.other_key)).unwrap_err();
        assert_eq!(e.key(), Some(KEY), "{e}");
        assert!(e.to_string().contains("does not match"), "{e}");
        let text = format!("{}tls_client_ca = {:?}\n", keys(&f.cert, &f.key), f.key);
        assert_eq!(key_of(&text), CLIENT_CA);
        let text = format!("{}tls_client_ca = {:?}\n", keys(&f.cert, &f.key), missing);
        assert_eq!(key_of(&text), CLIENT_CA);
    }
}
