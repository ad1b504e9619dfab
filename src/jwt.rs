//! `private_key_jwt` client authentication at the OAuth token endpoint
//! (RFC 7523 §2.2, OpenID Connect Core 1.0 §9).
//!
//! The gateway sends `client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer`
//! and `client_assertion=<JWT>`: a short-lived JWT (RFC 7519) signed with its
//! private key in JWS compact serialization (RFC 7515 §7.1), with the claims
//! of RFC 7523 §3: `iss` = `sub` = client id, `aud` = the authorization
//! server (its issuer; the token endpoint when unknown), `exp`,
//! `iat` and a single-use `jti`.
//!
//! Keys ([`SigningKey::from_pem`]): EC P-256 → ES256 (RFC 7518 §3.4) from
//! PKCS#8 (`PRIVATE KEY`, RFC 5958) or SEC1 (`EC PRIVATE KEY`, RFC 5915);
//! RSA of 2048 to 8192 bits → RS256 (RFC 7518 §3.3) from PKCS#8 or PKCS#1
//! (`RSA PRIVATE KEY`, RFC 8017 Appendix A.1.2). The JWS `kid` is the key's
//! JWK thumbprint (RFC 7638), matching the client's registered JWKS.
//! Signing uses `ring`; the module never reads the clock: callers pass `now`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::error::KeyRejected;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _, RsaKeyPair, RsaPublicKeyComponents};
use rustls_pki_types::pem::{self, PemObject as _};
use rustls_pki_types::PrivateKeyDer;

/// DER tags (X.690 §8) used by the key formats read here.
const TAG_INTEGER: u8 = 0x02;
const TAG_OCTET_STRING: u8 = 0x04;
const TAG_OID: u8 = 0x06;
const TAG_SEQUENCE: u8 = 0x30;
/// `[0]` EXPLICIT: the `parameters` of a SEC1 `ECPrivateKey` (RFC 5915 §3).
const TAG_CONTEXT_0: u8 = 0xa0;

/// `id-ecPublicKey`, 1.2.840.10045.2.1 (RFC 5480 §2.1.1), OID contents only.
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// `secp256r1` (P-256), 1.2.840.10045.3.1.7 (RFC 5480 §2.1.1.1).
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// `rsaEncryption`, 1.2.840.113549.1.1.1 (RFC 8017 Appendix C).
const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
/// Names of other key algorithms and curves, for error messages.
const KNOWN_OIDS: &[(&[u8], &str)] = &[
    (&[0x2b, 0x81, 0x04, 0x00, 0x22], "P-384"),
    (&[0x2b, 0x81, 0x04, 0x00, 0x23], "P-521"),
    (&[0x2b, 0x81, 0x04, 0x00, 0x0a], "secp256k1"),
    (&[0x2b, 0x65, 0x6e], "X25519"),
    (&[0x2b, 0x65, 0x70], "Ed25519"),
    (&[0x2b, 0x65, 0x71], "Ed448"),
    (OID_RSA_PSS, "RSASSA-PSS"),
];
/// `id-RSASSA-PSS`, 1.2.840.113549.1.1.10 (RFC 8017 Appendix C): not supported by ring.
const OID_RSA_PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];
/// What [`SigningKey::from_pem`] accepts, for error messages.
const SUPPORTED: &str = "supported: EC P-256 (ES256) and RSA (RS256)";

/// Why a key could not be loaded or an assertion could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The text holds no usable PEM private key block.
    #[error("not a PEM private key: {0}")]
    NotPem(String),
    /// The key is encrypted (PKCS#8 `ENCRYPTED PRIVATE KEY` or legacy PEM).
    #[error("encrypted private keys are not supported: decrypt it first (`openssl pkcs8 -topk8 -nocrypt`)")]
    Encrypted,
    /// The key's algorithm is neither EC nor RSA.
    #[error("unsupported key: {0} ({SUPPORTED})")]
    Unsupported(String),
    /// An EC key on a curve other than P-256 (ES256 is P-256 only, RFC 7518 §3.4).
    #[error("EC key is not P-256 (found {0}); ES256 needs a P-256 key")]
    NotP256(String),
    /// The DER inside the PEM block is not a well-formed key.
    #[error("malformed private key: {0}")]
    Malformed(&'static str),
    /// `ring` refused the key (e.g. an RSA modulus under 2048 bits).
    /// Holds the kind of key ("RSA" or "EC P-256") and ring's reason.
    #[error("{0} key rejected: {1}")]
    Rejected(&'static str, String),
    /// The operating system's random number generator failed.
    #[error("random number generator failed: {0}")]
    Random(String),
    /// Signing failed (only on a failure of the random number generator).
    #[error("signing the client assertion failed")]
    Sign,
}

/// The key pair behind a [`SigningKey`].
enum Inner {
    Es256(EcdsaKeyPair),
    Rs256(RsaKeyPair),
}

/// A private key for signing client assertions, loaded from a PEM file's text.
pub struct SigningKey {
    inner: Inner,
    /// The RFC 7638 thumbprint of the public key, sent as the JWS `kid`.
    kid: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for SigningKey {
    /// Shows the algorithm and the `kid` only, never key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("alg", &self.alg())
            .field("kid", &self.kid)
            .finish()
    }
}

impl SigningKey {
    /// Parses a PEM private key: PKCS#8 (`PRIVATE KEY`, RFC 5958) EC P-256 or
    /// RSA, PKCS#1 (`RSA PRIVATE KEY`) RSA, or SEC1 (`EC PRIVATE KEY`,
    /// RFC 5915) P-256. Other blocks (e.g. `EC PARAMETERS`) are skipped; the
    /// first private key block is used.
    pub fn from_pem(pem: &str) -> Result<SigningKey, KeyError> {
        if pem.contains("ENCRYPTED PRIVATE KEY") || pem.contains("Proc-Type: 4,ENCRYPTED") {
            return Err(KeyError::Encrypted);
        }
        let der = PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| match e {
            pem::Error::NoItemsFound => {
                KeyError::NotPem("no PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block".into())
            }
            other => KeyError::NotPem(other.to_string()),
        })?;
        let rng = SystemRandom::new();
        let inner = match &der {
            PrivateKeyDer::Pkcs8(key) => from_pkcs8(key.secret_pkcs8_der(), &rng)?,
            PrivateKeyDer::Pkcs1(key) => RsaKeyPair::from_der(key.secret_pkcs1_der())
                .map(Inner::Rs256)
                .map_err(rejected("RSA"))?,
            PrivateKeyDer::Sec1(key) => {
                p256_from_pkcs8(&sec1_to_pkcs8(key.secret_sec1_der())?, &rng)?
            }
            _ => return Err(KeyError::Unsupported("unknown private key encoding".into())),
        };
        let kid = match &inner {
            Inner::Es256(key) => ec_thumbprint(key.public_key().as_ref())?,
            Inner::Rs256(key) => {
                let public = RsaPublicKeyComponents::<Vec<u8>>::from(key.public());
                rsa_thumbprint(&public.n, &public.e)
            }
        };
        Ok(SigningKey { inner, kid, rng })
    }

    /// The JWS `alg` (RFC 7518 §3.1): "ES256" or "RS256".
    pub fn alg(&self) -> &'static str {
        match self.inner {
            Inner::Es256(_) => "ES256",
            Inner::Rs256(_) => "RS256",
        }
    }

    /// The RFC 7638 JWK thumbprint (SHA-256, base64url without padding) of the
    /// public key; sent as the JWS `kid` (RFC 7515 §4.1.4).
    pub fn thumbprint(&self) -> String {
        self.kid.clone()
    }

    /// A signed client assertion (RFC 7523 §2.2 and §3, OpenID Connect Core
    /// §9): header `{"alg", "typ":"JWT", "kid"}`; claims `iss` = `sub` =
    /// `client_id`, `aud` = `audience` (the token endpoint URL), `iat` =
    /// `now_unix`, `exp` = `now_unix + lifetime_secs` and `jti` = 16 random
    /// bytes in base64url, so the server can refuse a replay.
    pub fn client_assertion(
        &self,
        client_id: &str,
        audience: &str,
        now_unix: u64,
        lifetime_secs: u64,
    ) -> Result<String, KeyError> {
        let mut jti = [0u8; 16];
        getrandom::fill(&mut jti).map_err(|e| KeyError::Random(e.to_string()))?;
        let header = serde_json::json!({ "alg": self.alg(), "typ": "JWT", "kid": self.kid });
        let exp = now_unix.saturating_add(lifetime_secs);
        let claims = serde_json::json!({ "iss": client_id, "sub": client_id, "aud": audience,
            "iat": now_unix, "exp": exp, "jti": b64(&jti) });
        let signing_input = [header, claims].map(|part| b64(part.to_string().as_bytes()));
        let signing_input = signing_input.join(".");
        let signature = b64(&self.sign(signing_input.as_bytes())?);
        Ok(format!("{signing_input}.{signature}"))
    }

    /// The JWS signature over `message` (RFC 7515 §5.1): for ES256 the
    /// fixed-length `r || s` form (RFC 7518 §3.4), for RS256 RSASSA-PKCS1-v1_5
    /// with SHA-256 (RFC 7518 §3.3).
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, KeyError> {
        let signed = match &self.inner {
            Inner::Es256(key) => key.sign(&self.rng, message).map(|s| s.as_ref().to_vec()),
            Inner::Rs256(key) => {
                let mut sig = vec![0; key.public().modulus_len()];
                let alg = &signature::RSA_PKCS1_SHA256;
                key.sign(alg, &self.rng, message, &mut sig).map(|()| sig)
            }
        };
        signed.map_err(|_| KeyError::Sign)
    }
}

/// Loads a PKCS#8 `PrivateKeyInfo` (RFC 5958 §2) after reading its
/// `AlgorithmIdentifier`, so that a P-384 or Ed25519 key gets a clear error.
fn from_pkcs8(der: &[u8], rng: &SystemRandom) -> Result<Inner, KeyError> {
    let (body, _) = der_expect(der, TAG_SEQUENCE)?;
    let (_version, rest) = der_expect(body, TAG_INTEGER)?;
    let (algorithm, _) = der_expect(rest, TAG_SEQUENCE)?;
    let (oid, parameters) = der_expect(algorithm, TAG_OID)?;
    if oid == OID_RSA {
        return RsaKeyPair::from_pkcs8(der)
            .map(Inner::Rs256)
            .map_err(rejected("RSA"));
    }
    if oid != OID_EC_PUBLIC_KEY {
        return Err(KeyError::Unsupported(oid_name(oid)));
    }
    expect_p256(parameters)?;
    p256_from_pkcs8(der, rng)
}

/// Checks that EC domain parameters (RFC 5480 §2.1.1) name P-256.
fn expect_p256(parameters: &[u8]) -> Result<(), KeyError> {
    match der_expect(parameters, TAG_OID) {
        Ok((curve, _)) if curve == OID_P256 => Ok(()),
        Ok((curve, _)) => Err(KeyError::NotP256(oid_name(curve))),
        Err(_) => Err(KeyError::NotP256("explicit curve parameters".into())),
    }
}

/// Loads a PKCS#8 document holding a P-256 key for ES256.
fn p256_from_pkcs8(der: &[u8], rng: &SystemRandom) -> Result<Inner, KeyError> {
    EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, rng)
        .map(Inner::Es256)
        .map_err(rejected("EC P-256"))
}

/// Maps `ring`'s refusal of a key of `kind` into a [`KeyError`].
fn rejected(kind: &'static str) -> impl Fn(KeyRejected) -> KeyError {
    move |e| KeyError::Rejected(kind, e.to_string())
}

/// Wraps a SEC1 `ECPrivateKey` (RFC 5915 §3) into a PKCS#8 `PrivateKeyInfo`
/// (RFC 5958 §2), the only form `ring` reads for ECDSA:
/// `SEQUENCE { INTEGER 0, SEQUENCE { id-ecPublicKey, secp256r1 },
/// OCTET STRING { ECPrivateKey } }`. The curve named in the SEC1
/// `parameters`, when present, must be P-256; `ring` then checks the rest
/// (including that the optional public key is present).
fn sec1_to_pkcs8(sec1: &[u8]) -> Result<Vec<u8>, KeyError> {
    let (body, _) = der_expect(sec1, TAG_SEQUENCE)?;
    let (_version, rest) = der_expect(body, TAG_INTEGER)?;
    let (_private_key, rest) = der_expect(rest, TAG_OCTET_STRING)?;
    if rest.first() == Some(&TAG_CONTEXT_0) {
        expect_p256(der_expect(rest, TAG_CONTEXT_0)?.0)?;
    }
    let ec = der_wrap(TAG_OID, OID_EC_PUBLIC_KEY);
    let p256 = der_wrap(TAG_OID, OID_P256);
    let algorithm = der_wrap(TAG_SEQUENCE, &[ec, p256].concat());
    let key = der_wrap(TAG_OCTET_STRING, sec1);
    let version = der_wrap(TAG_INTEGER, &[0]);
    Ok(der_wrap(TAG_SEQUENCE, &[version, algorithm, key].concat()))
}

/// Splits one DER element (X.690 §8.1) off `input`: (tag, contents, rest).
/// Single-byte tags and definite lengths of up to 4 bytes only.
fn der_split(input: &[u8]) -> Result<(u8, &[u8], &[u8]), KeyError> {
    let malformed = || KeyError::Malformed("truncated or invalid DER");
    let (&tag, rest) = input.split_first().ok_or_else(malformed)?;
    let (&first, rest) = rest.split_first().ok_or_else(malformed)?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return Err(malformed());
        }
        let (bytes, rest) = rest.split_at(count);
        let len = bytes.iter().fold(0usize, |n, &b| (n << 8) | usize::from(b));
        (len, rest)
    };
    if rest.len() < len {
        return Err(malformed());
    }
    let (contents, rest) = rest.split_at(len);
    Ok((tag, contents, rest))
}

/// [`der_split`], requiring the element to have tag `tag`.
fn der_expect(input: &[u8], tag: u8) -> Result<(&[u8], &[u8]), KeyError> {
    match der_split(input)? {
        (found, contents, rest) if found == tag => Ok((contents, rest)),
        _ => Err(KeyError::Malformed("unexpected DER element")),
    }
}

/// One DER element (X.690 §8.1.3, definite length) with tag `tag`.
fn der_wrap(tag: u8, contents: &[u8]) -> Vec<u8> {
    let len = contents.len().to_be_bytes();
    let skip = len.iter().take_while(|&&b| b == 0).count();
    let mut out = vec![tag];
    match contents.len() {
        short @ 0..=0x7f => out.push(short as u8),
        _ => {
            out.push(0x80 | (len.len() - skip) as u8);
            out.extend_from_slice(&len[skip..]);
        }
    }
    out.extend_from_slice(contents);
    out
}

/// A readable name for an OID: a known algorithm or curve, else dotted form.
fn oid_name(oid: &[u8]) -> String {
    if let Some((_, name)) = KNOWN_OIDS.iter().find(|(known, _)| *known == oid) {
        return (*name).to_string();
    }
    let mut arcs = Vec::new();
    let mut value: u64 = 0;
    for &byte in oid {
        value = (value << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (value / 40).min(2);
                arcs.push(first);
                value -= first * 40;
            }
            arcs.push(value);
            value = 0;
        }
    }
    let dotted: Vec<String> = arcs.iter().map(u64::to_string).collect();
    format!("OID {}", dotted.join("."))
}

/// The RFC 7638 thumbprint of a P-256 public key given as the uncompressed
/// point `0x04 || x || y` (SEC 1 §2.3.3): members `crv`, `kty`, `x`, `y`
/// (RFC 7518 §6.2.1) in lexicographic order, no whitespace (RFC 7638 §3.2).
fn ec_thumbprint(point: &[u8]) -> Result<String, KeyError> {
    let xy = point.strip_prefix(&[0x04]).filter(|xy| xy.len() == 64);
    let malformed = KeyError::Malformed("public key is not an uncompressed point");
    let (x, y) = xy.map(|xy| xy.split_at(32)).ok_or(malformed)?;
    let (x, y) = (b64(x), b64(y));
    let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
    Ok(jwk_thumbprint(&canonical))
}

/// The RFC 7638 thumbprint of an RSA public key from its big-endian modulus
/// `n` and exponent `e`: members `e`, `kty`, `n` (RFC 7518 §6.3.1), with the
/// integers' leading zero bytes dropped (RFC 7518 §6.3.1.1).
fn rsa_thumbprint(n: &[u8], e: &[u8]) -> String {
    let trim = |b: &[u8]| -> String {
        let skip = b.iter().take_while(|&&x| x == 0).count();
        b64(&b[skip..])
    };
    let (e, n) = (trim(e), trim(n));
    jwk_thumbprint(&format!(r#"{{"e":"{e}","kty":"RSA","n":"{n}"}}"#))
}

/// SHA-256 of the canonical JWK JSON, base64url without padding (RFC 7638 §3.1).
fn jwk_thumbprint(canonical_jwk: &str) -> String {
    b64(ring::digest::digest(&ring::digest::SHA256, canonical_jwk.as_bytes()).as_ref())
}

/// base64url without padding (RFC 7515 §2, "Base64url Encoding").
fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{UnparsedPublicKey, VerificationAlgorithm};
    use serde_json::{json, Value};
    use std::path::PathBuf;
    use std::process::Command;

    type Alg = &'static dyn VerificationAlgorithm;

    const NOW: u64 = 1_700_000_000;
    const CLIENT: &str = "edge \"gw\"";
    const AUD: &str = "https://as.example/token";
    /// `n` of the RSA key in RFC 7638 §3.1 (`e` is "AQAB").
    const RFC7638_N: &str = "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw";
    /// RFC 7638 thumbprint of the key printed by `openssl pkey -text_pub`
    /// (argv[1]), computed independently of the code under test.
    const PY_THUMBPRINT: &str = r#"
import base64, hashlib, json, re, sys
t = sys.argv[1]
def hexblock(label):
    m = re.search(label + r":\s*\n((?:[ \t]+[0-9a-f:]+\n)+)", t)
    return bytes.fromhex(re.sub(r"[\s:]", "", m.group(1))).lstrip(b"\0")
b = lambda v: base64.urlsafe_b64encode(v).rstrip(b"=").decode()
if "pub:" in t:
    p = hexblock("pub")
    jwk = {"crv": "P-256", "kty": "EC", "x": b(p[1:33]), "y": b(p[33:])}
else:
    e = int(re.search(r"Exponent: (\d+)", t).group(1)).to_bytes(8, "big").lstrip(b"\0")
    jwk = {"e": b(e), "kty": "RSA", "n": b(hexblock("Modulus"))}
print(b(hashlib.sha256(json.dumps(jwk, sort_keys=True, separators=(",", ":")).encode()).digest()))
"#;

    /// A scratch directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(test: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("mcp-edge-jwt-{}-{test}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        /// Runs `program` in this directory; panics with its stderr if it
        /// fails; returns its stdout.
        fn run(&self, program: &str, args: &[&str]) -> Vec<u8> {
            let mut command = Command::new(program);
            let out = command.args(args).current_dir(&self.0).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{program} {args:?}: {stderr}");
            out.stdout
        }

        /// Runs `openssl` with whitespace-separated `args` in this directory.
        fn openssl(&self, args: &str) -> Vec<u8> {
            self.run("openssl", &args.split_whitespace().collect::<Vec<_>>())
        }

        fn read(&self, name: &str) -> String {
            std::fs::read_to_string(self.0.join(name)).unwrap()
        }

        fn key(&self, name: &str) -> SigningKey {
            SigningKey::from_pem(&self.read(name)).unwrap()
        }

        fn python_thumbprint(&self, name: &str) -> String {
            let text = self.openssl(&format!("pkey -in {name} -text_pub -noout"));
            let text = String::from_utf8(text).unwrap();
            let out = self.run("python3", &["-c", PY_THUMBPRINT, &text]);
            String::from_utf8(out).unwrap().trim().to_string()
        }

        /// Loads the key file `name`, signs two assertions, verifies them with
        /// the public key that openssl extracts and checks header and claims.
        fn check_key(&self, name: &str, alg: &str) -> SigningKey {
            let key = self.key(name);
            assert_eq!(key.alg(), alg);
            let (verification, public): (Alg, _) = if alg == "ES256" {
                // The point ends P-256's 91-byte SubjectPublicKeyInfo.
                let spki = self.openssl(&format!("pkey -in {name} -pubout -outform DER"));
                (&signature::ECDSA_P256_SHA256_FIXED, spki[26..].to_vec())
            } else {
                let args = format!("rsa -in {name} -RSAPublicKey_out -outform DER");
                (&signature::RSA_PKCS1_2048_8192_SHA256, self.openssl(&args))
            };
            let jtis = [(); 2].map(|()| {
                let jwt = key.client_assertion(CLIENT, AUD, NOW, 60).unwrap();
                check_parts(&verify(&jwt, verification, &public), alg, &key.thumbprint())
            });
            assert_ne!(jtis[0], jtis[1]);
            key
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Checks the signature over `header.claims` (and that a changed message
    /// fails); returns the decoded header and claims.
    fn verify(jwt: &str, alg: Alg, public: &[u8]) -> Vec<Value> {
        let (signed, sig) = jwt.rsplit_once('.').unwrap();
        let sig = URL_SAFE_NO_PAD.decode(sig).unwrap();
        let key = UnparsedPublicKey::new(alg, public);
        key.verify(signed.as_bytes(), &sig).unwrap();
        assert!(key.verify(format!("{signed}x").as_bytes(), &sig).is_err());
        let decode = |p: &str| serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p).unwrap());
        signed.split('.').map(|p| decode(p).unwrap()).collect()
    }

    /// Checks the JWS header and the RFC 7523 §3 claims; returns the `jti`.
    fn check_parts(parts: &[Value], alg: &str, kid: &str) -> Value {
        assert_eq!(parts[0], json!({ "alg": alg, "typ": "JWT", "kid": kid }));
        let c = &parts[1];
        assert_eq!([&c["iss"], &c["sub"], &c["aud"]], [CLIENT, CLIENT, AUD]);
        let times = [c["iat"].as_u64(), c["exp"].as_u64()];
        assert_eq!(times, [Some(NOW), Some(NOW + 60)]);
        assert_eq!(c.as_object().unwrap().len(), 6);
        let jti = URL_SAFE_NO_PAD.decode(c["jti"].as_str().unwrap());
        assert_eq!(jti.unwrap().len(), 16);
        c["jti"].clone()
    }

    #[test]
    fn es256_pkcs8_key_signs_verifiable_assertions() {
        let dir = TempDir::new("ec-pkcs8");
        dir.openssl("genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ec.pem");
        assert!(dir.read("ec.pem").contains("BEGIN PRIVATE KEY"));
        let key = dir.check_key("ec.pem", "ES256");
        let kid = key.thumbprint();
        assert_eq!(kid, dir.python_thumbprint("ec.pem"));
        let debug = format!("SigningKey {{ alg: \"ES256\", kid: \"{kid}\" }}");
        assert_eq!(format!("{key:?}"), debug);
    }

    #[test]
    fn es256_sec1_key_is_wrapped_into_pkcs8() {
        let dir = TempDir::new("ec-sec1");
        dir.openssl("ecparam -name prime256v1 -genkey -noout -out sec1.pem");
        assert!(dir.read("sec1.pem").contains("BEGIN EC PRIVATE KEY"));
        let kid = dir.check_key("sec1.pem", "ES256").thumbprint();
        assert_eq!(kid, dir.python_thumbprint("sec1.pem"));
        // The same key converted to PKCS#8 by openssl has the same kid.
        dir.openssl("pkcs8 -topk8 -nocrypt -in sec1.pem -out p8.pem");
        assert_eq!(dir.key("p8.pem").thumbprint(), kid);
        // Without -noout an EC PARAMETERS block comes first: it is skipped.
        dir.openssl("ecparam -name prime256v1 -genkey -out both.pem");
        assert!(dir.read("both.pem").contains("BEGIN EC PARAMETERS"));
        assert_eq!(dir.key("both.pem").alg(), "ES256");
    }

    #[test]
    fn rs256_pkcs8_and_pkcs1_keys_sign_verifiable_assertions() {
        let dir = TempDir::new("rsa");
        dir.openssl("genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out rsa8.pem");
        dir.openssl("pkey -traditional -in rsa8.pem -out rsa1.pem");
        assert!(dir.read("rsa1.pem").contains("BEGIN RSA PRIVATE KEY"));
        let kid = dir.check_key("rsa8.pem", "RS256").thumbprint();
        assert_eq!(dir.check_key("rsa1.pem", "RS256").thumbprint(), kid);
        assert_eq!(dir.python_thumbprint("rsa8.pem"), kid);
    }

    #[test]
    fn rsa_thumbprint_matches_rfc7638_example() {
        let n = URL_SAFE_NO_PAD.decode(RFC7638_N).unwrap();
        let expected = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs";
        assert_eq!(rsa_thumbprint(&n, &[1, 0, 1]), expected);
        // Leading zero bytes (as in a DER INTEGER) are not part of the value.
        let padded = [&[0][..], &n].concat();
        assert_eq!(rsa_thumbprint(&padded, &[0, 1, 0, 1]), expected);
        assert_ne!(rsa_thumbprint(&n, &[3]), expected);
    }

    #[test]
    fn unusable_keys_give_clear_errors() {
        let dir = TempDir::new("errors");
        let err = |pem: &str| SigningKey::from_pem(pem).unwrap_err().to_string();
        let file_err = |name: &str| err(&dir.read(name));
        let no_key =
            "not a PEM private key: no PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block";
        assert_eq!(err("garbage"), no_key);
        dir.openssl("genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-384 -out p384.pem");
        let not_p256 = "EC key is not P-256 (found P-384); ES256 needs a P-256 key";
        assert_eq!(file_err("p384.pem"), not_p256);
        dir.openssl("ecparam -name secp384r1 -genkey -noout -out sec1.pem");
        assert_eq!(file_err("sec1.pem"), not_p256);
        dir.openssl("genpkey -algorithm ed25519 -out ed.pem");
        let unsupported = "unsupported key: Ed25519 (supported: EC P-256 (ES256) and RSA (RS256))";
        assert_eq!(file_err("ed.pem"), unsupported);
        dir.openssl("pkey -in ed.pem -pubout -out pub.pem");
        assert_eq!(file_err("pub.pem"), no_key);
        dir.openssl("genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024 -out rsa.pem");
        assert_eq!(file_err("rsa.pem"), "RSA key rejected: TooSmall");
        dir.openssl("pkey -in p384.pem -aes-128-cbc -passout pass:x -out enc.pem");
        assert!(file_err("enc.pem").starts_with("encrypted private keys are not supported"));
        let not_der = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        let malformed = "malformed private key: unexpected DER element";
        assert_eq!(err(not_der), malformed);
        assert!(err(&not_der.replace("AAAA", "A!A")).starts_with("not a PEM private key: "));
    }

    #[test]
    fn der_lengths_and_oid_names() {
        for len in [0, 0x7f, 0x80, 0xff, 0x100, 0x1_0000] {
            let der = der_wrap(TAG_OCTET_STRING, &vec![7; len]);
            let (tag, value, rest) = der_split(&der).unwrap();
            assert_eq!((tag, rest.len()), (TAG_OCTET_STRING, 0));
            assert_eq!(value, vec![7; len]);
            assert!(der_split(&der[..der.len() - 1]).is_err());
        }
        let long = der_wrap(TAG_OCTET_STRING, &[0; 300]);
        assert_eq!(long[..4], [4, 0x82, 1, 0x2c]);
        assert_eq!(oid_name(&[0x2a, 0x03, 0x81, 0x00]), "OID 1.2.3.128");
        assert_eq!(oid_name(&[0x55, 0x04, 0x03]), "OID 2.5.4.3");
        assert_eq!(oid_name(&[0x2b, 0x65, 0x70]), "Ed25519");
    }

    /// `SigningKey` is shared across the gateway's tasks.
    fn _is_send_and_sync(key: SigningKey) -> impl Send + Sync {
        key
    }
}
