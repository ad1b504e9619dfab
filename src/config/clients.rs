//! One `[[client]]` table: raw → typed [`ClientConfig`]: its name, its one
//! credential (`token_file` read and reduced to its digest, `token_sha256`,
//! or `cert_subject`), `allow` / `deny` globs and `rate`. A token is never
//! echoed in an error, nor anything written under `token_sha256` (it may be
//! a token pasted in the wrong place).

use std::path::PathBuf;
use std::time::Duration;

use super::ctx::{Ctx, Result};
use super::fields::secret_file;
use super::toml_raw::RawClient;
use super::{check_client_name, token_sha256, ClientConfig, Credential, Rate, Secret};
use crate::limits;

/// The `[[client]]` table `raw` at key path `base` (`client[1]`); `mtls`:
/// whether `server.tls_client_ca` is set (`cert_subject` needs it).
pub(super) fn client(ctx: &Ctx, base: &str, raw: RawClient, mtls: bool) -> Result<ClientConfig> {
    let k = |f: &str| format!("{base}.{f}");
    let name = raw
        .name
        .ok_or_else(|| ctx.err(k("name"), "missing; every client needs a name"))?;
    check_client_name(&name).map_err(|m| ctx.err(k("name"), m))?;
    let credential = match (raw.token_file, raw.token_sha256, raw.cert_subject) {
        (Some(f), None, None) => token_file(ctx, &k("token_file"), &f)?,
        (None, Some(h), None) => Credential::Token {
            sha256: Secret::new(hex_digest(&h).ok_or_else(|| {
                ctx.err(
                    k("token_sha256"),
                    "must be 64 hex digits: the SHA-256 of the token \
                     (`mcp-edge token new NAME` prints it)",
                )
            })?),
            file: None,
        },
        (None, None, Some(s)) => {
            if !mtls {
                return Err(ctx.err(
                    k("cert_subject"),
                    "needs server.tls_client_ca (client certificates are only asked for \
                     with it); or use token_file / token_sha256",
                ));
            }
            Credential::CertSubject(subject(&s).map_err(|m| ctx.err(k("cert_subject"), m))?)
        }
        _ => {
            return Err(ctx.err(
                base,
                "needs exactly one of token_file, token_sha256, cert_subject",
            ))
        }
    };
    Ok(ClientConfig {
        name,
        credential,
        allow: raw.allow.map(|a| globs(ctx, &k("allow"), a)).transpose()?,
        deny: globs(ctx, &k("deny"), raw.deny.unwrap_or_default())?,
        rate: raw.rate.map(|r| rate(ctx, &k("rate"), &r)).transpose()?,
        share: share(ctx, &k("share"), raw.share)?,
    })
}

/// `token_file`: path expanded, file read, content trimmed and checked,
/// only its digest kept.
fn token_file(ctx: &Ctx, key: &str, s: &str) -> Result<Credential> {
    let path: PathBuf = secret_file(ctx, key, s)?;
    let shown = path.display();
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ctx.err(key, format!("cannot read {shown}: {e}")))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(ctx.err(key, format!("{shown} is empty")));
    }
    if !token.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ctx.err(
            key,
            format!("the token in {shown} must be printable ASCII without spaces"),
        ));
    }
    let min = limits::MIN_CLIENT_TOKEN_LEN;
    if token.len() < min {
        return Err(ctx.err(
            key,
            format!(
                "the token in {shown} is shorter than {min} characters, too easy to guess; \
                 make one with `mcp-edge token new NAME`"
            ),
        ));
    }
    if let Some(why) = weak(token) {
        return Err(ctx.err(
            key,
            format!(
                "the token in {shown} {why}, too easy to guess; \
                 make one with `mcp-edge token new NAME`"
            ),
        ));
    }
    Ok(Credential::Token {
        sha256: Secret::new(token_sha256(token)),
        file: Some(path),
    })
}

/// Why `token` (printable ASCII) is too weak, if it is: fewer than
/// [`limits::MIN_TOKEN_SYMBOLS`] distinct characters (repeated, or a tiny
/// alphabet), or fewer than [`limits::MIN_TOKEN_BITS`] bits estimated as
/// length × log2(alphabet), the alphabet being the character classes it
/// uses (26 lower, 26 upper, 10 digits, 32 symbols): generous to random
/// hex (`openssl rand -hex 16`: 165 bits), hard on short or one-class
/// tokens. `mcp-edge token new` makes 48 characters of four classes.
fn weak(token: &str) -> Option<String> {
    let b = token.as_bytes();
    let mut seen = [false; 128];
    b.iter().for_each(|&c| seen[usize::from(c & 0x7f)] = true);
    let distinct = seen.iter().filter(|&&s| s).count();
    if distinct < limits::MIN_TOKEN_SYMBOLS {
        return Some(format!(
            "has only {distinct} distinct characters (at least {} needed)",
            limits::MIN_TOKEN_SYMBOLS
        ));
    }
    let class = |f: fn(&u8) -> bool, n: u32| if b.iter().any(f) { n } else { 0 };
    let alphabet = class(u8::is_ascii_lowercase, 26)
        + class(u8::is_ascii_uppercase, 26)
        + class(u8::is_ascii_digit, 10)
        + class(u8::is_ascii_punctuation, 32);
    // A token that repeats a shorter run holds no more than that run.
    let run = period(b);
    let bits = run as f64 * f64::from(alphabet).log2();
    let repeated = if run < b.len() {
        format!(", repeating its first {run}")
    } else {
        String::new()
    };
    (bits < f64::from(limits::MIN_TOKEN_BITS)).then(|| {
        format!(
            "holds about {bits:.0} bits ({} characters{repeated} of an alphabet of {alphabet}; at least {} needed)",
            b.len(),
            limits::MIN_TOKEN_BITS
        )
    })
}

/// The shortest `p` with `b[i] == b[i - p]` for every `i ≥ p` (`b` is its
/// first `p` bytes over and over, the last time cut short); else its length.
fn period(b: &[u8]) -> usize {
    (1..b.len())
        .find(|&p| b[p..].iter().zip(b).all(|(x, y)| x == y))
        .unwrap_or(b.len())
}

/// 64 hex digits, either case → 32 bytes.
fn hex_digest(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Some(out)
}

/// `"CN=build-agent, O=Site"` → `[("CN", "build-agent"), ("O", "Site")]`:
/// split on unescaped `,` (`\,` is a comma, `\\` a backslash in a value),
/// attribute names upper-cased, values trimmed and otherwise as written.
pub(super) fn subject(s: &str) -> std::result::Result<Vec<(String, String)>, String> {
    const SHAPE: &str = "must be ATTR=value pairs separated by commas, \
                         such as \"CN=build-agent, O=Site\"";
    let mut pairs = Vec::new();
    for part in split_unescaped(s)? {
        let (attr, value) = part.split_once('=').ok_or(SHAPE)?;
        let attr = attr.trim();
        let value = value.trim();
        let attr_ok =
            !attr.is_empty() && attr.chars().all(|c| c.is_ascii_alphanumeric() || c == '.');
        if !attr_ok || value.is_empty() {
            return Err(SHAPE.to_owned());
        }
        pairs.push((attr.to_ascii_uppercase(), value.to_owned()));
    }
    if pairs.is_empty() {
        return Err(SHAPE.to_owned());
    }
    Ok(pairs)
}

/// The parts of `s` between unescaped commas, escapes resolved.
fn split_unescaped(s: &str) -> std::result::Result<Vec<String>, String> {
    let mut parts = vec![String::new()];
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        let current = parts.last_mut().expect("parts is never empty");
        match c {
            '\\' => match chars.next() {
                Some(e @ (',' | '\\')) => current.push(e),
                _ => return Err("\\ must be followed by , or \\ (\\, is a comma)".to_owned()),
            },
            ',' => parts.push(String::new()),
            c if c.is_control() => return Err("must not contain control characters".to_owned()),
            c => current.push(c),
        }
    }
    Ok(parts)
}

/// `allow` / `deny`: non-empty globs without control characters.
fn globs(ctx: &Ctx, key: &str, globs: Vec<String>) -> Result<Vec<String>> {
    for (i, g) in globs.iter().enumerate() {
        if g.is_empty() || g.chars().any(char::is_control) {
            return Err(ctx.err(
                format!("{key}[{i}]"),
                "must be a non-empty glob over exposed names (* any run, ? one character)",
            ));
        }
    }
    Ok(globs)
}

/// `share`: a weight in 1..=[`limits::MAX_CLIENT_SHARE`], default
/// [`limits::DEFAULT_CLIENT_SHARE`].
fn share(ctx: &Ctx, key: &str, raw: Option<super::toml_raw::RawInt>) -> Result<u32> {
    let (default, max) = (limits::DEFAULT_CLIENT_SHARE, limits::MAX_CLIENT_SHARE);
    let n = super::values::int(ctx, key, raw, (1, max as usize), default as usize)?;
    Ok(n as u32)
}

/// `"N/s"`, `"N/m"`, `"N/h"` (also `sec`, `min`, `hour`), N in
/// 1..=[`limits::MAX_CLIENT_RATE`].
pub(super) fn rate(ctx: &Ctx, key: &str, s: &str) -> Result<Rate> {
    let max = limits::MAX_CLIENT_RATE;
    let bad = || {
        ctx.err(
            key,
            format!(
                "{s:?} must be \"N/s\", \"N/m\" or \"N/h\" (requests per second, minute, \
                 hour; burst N) with N from 1 to {max}, such as \"20/s\""
            ),
        )
    };
    let (n, unit) = s.split_once('/').ok_or_else(bad)?;
    let count: u32 = n.trim().parse().map_err(|_| bad())?;
    if !(1..=max).contains(&count) {
        return Err(bad());
    }
    let secs = match unit.trim() {
        "s" | "sec" | "second" => 1,
        "m" | "min" | "minute" => 60,
        "h" | "hour" => 3600,
        _ => return Err(bad()),
    };
    Ok(Rate {
        count,
        per: Duration::from_secs(secs),
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::Path;

    use super::*;

    fn ctx_env(_: &str) -> Option<OsString> {
        None
    }

    fn one(text: &str, mtls: bool) -> Result<ClientConfig> {
        let raw: RawClient = toml::from_str(text).unwrap();
        let ctx = Ctx::new(Path::new("t.toml"), &ctx_env);
        client(&ctx, "client[2]", raw, mtls)
    }

    fn key_of(text: &str, mtls: bool) -> String {
        let e = one(text, mtls).unwrap_err();
        e.key().unwrap_or_else(|| panic!("{e}")).to_owned()
    }

    const HEX: &str = "ABCDEF0123456789abcdef0123456789ABCDEF0123456789abcdef0123456789";

    #[test]
    fn token_sha256_is_64_hex_digits_either_case() {
        let c = one(&format!("name = \"a\"\ntoken_sha256 = \"{HEX}\""), false).unwrap();
        let Credential::Token { sha256, file } = c.credential else {
            panic!()
        };
        assert_eq!(file, None);
        assert_eq!(sha256.expose()[0], 0xab);
        assert_eq!(sha256.expose()[31], 0x89);
        for bad in [&HEX[1..], "zz", &format!("{}g", &HEX[1..])] {
            let text = format!("name = \"a\"\ntoken_sha256 = \"{bad}\"");
            let e = one(&text, false).unwrap_err();
            assert_eq!(e.key(), Some("client[2].token_sha256"));
            assert!(!e.to_string().contains(bad), "echoed: {e}");
        }
    }

    #[test]
    fn name_rules() {
        assert_eq!(
            key_of(&format!("token_sha256 = \"{HEX}\""), false),
            "client[2].name"
        );
        let long = "x".repeat(33);
        for bad in ["", "a b", long.as_str()] {
            let text = format!("name = \"{bad}\"\ntoken_sha256 = \"{HEX}\"");
            assert_eq!(key_of(&text, false), "client[2].name");
        }
    }

    #[test]
    fn exactly_one_credential() {
        assert_eq!(key_of("name = \"a\"", false), "client[2]");
        let both = format!("name = \"a\"\ntoken_sha256 = \"{HEX}\"\ncert_subject = \"CN=a\"");
        let e = one(&both, true).unwrap_err();
        assert_eq!(e.key(), Some("client[2]"));
        let m = e.to_string();
        assert!(
            m.contains("token_file") && m.contains("token_sha256") && m.contains("cert_subject")
        );
    }

    #[test]
    fn cert_subject_parses_and_needs_client_ca() {
        let text = "name = \"a\"\ncert_subject = \"cn=build-agent, O=Site\\\\, Inc , ou = x\"";
        let c = one(text, true).unwrap();
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            c.credential,
            Credential::CertSubject(pairs(&[
                ("CN", "build-agent"),
                ("O", "Site, Inc"),
                ("OU", "x")
            ]))
        );
        assert_eq!(key_of(text, false), "client[2].cert_subject");
        for bad in ["", "CN", "=x", "CN=", "CN=a,,O=b", "C N=a", "CN=a\\\\x"] {
            let text = format!("name = \"a\"\ncert_subject = \"{bad}\"");
            assert_eq!(key_of(&text, true), "client[2].cert_subject", "{bad}");
        }
    }

    #[test]
    fn token_file_is_read_trimmed_and_kept_as_digest() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tok");
        std::fs::write(&p, "  mcpe_0123456789abcdefghijk\n").unwrap();
        let c = one(&format!("name = \"a\"\ntoken_file = {p:?}"), false).unwrap();
        assert_eq!(
            c.credential,
            Credential::Token {
                sha256: Secret::new(token_sha256("mcpe_0123456789abcdefghijk")),
                file: Some(p.clone()),
            }
        );
        let text = format!("name = \"a\"\ntoken_file = {p:?}");
        for (content, says) in [
            ("\n", "is empty"),
            ("short-token", "mcp-edge token new"),
            ("with space 0123456789", "printable ASCII"),
            ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "only 1 distinct"),
            (
                "abababababababababababababababababababab",
                "mcp-edge token new",
            ),
            ("0123456789012345", "repeating its first 10"),
            (
                "abcdefghabcdefghabcdefghabcdefghabcdefgh",
                "repeating its first 8",
            ),
            ("Kq3ZtR8wLmP2xY7v", "about 95 bits"),
        ] {
            std::fs::write(&p, content).unwrap();
            let e = one(&text, false).unwrap_err();
            assert_eq!(e.key(), Some("client[2].token_file"), "{e}");
            assert!(e.to_string().contains(says), "{e}");
            assert!(!e.to_string().contains(content.trim()) || content.trim().is_empty());
        }
        let gone = dir.path().join("gone");
        let e = one(&format!("name = \"a\"\ntoken_file = {gone:?}"), false).unwrap_err();
        assert_eq!(e.key(), Some("client[2].token_file"));
        assert!(e.to_string().contains(&gone.display().to_string()), "{e}");
    }

    #[test]
    fn share_is_a_positive_weight_defaulting_to_one() {
        let base = format!("name = \"a\"\ntoken_sha256 = \"{HEX}\"\n");
        assert_eq!(one(&base, false).unwrap().share, 1);
        assert_eq!(one(&format!("{base}share = 3"), false).unwrap().share, 3);
        for bad in ["0", "-1", "1001", "\"2\""] {
            let text = format!("{base}share = {bad}");
            match toml::from_str::<RawClient>(&text) {
                Ok(_) => {
                    let e = one(&text, false).unwrap_err();
                    assert_eq!(e.key(), Some("client[2].share"), "{bad}");
                    assert!(e.to_string().contains("between 1 and 1000"), "{e}");
                }
                Err(e) => assert!(e.to_string().contains("share"), "{bad}: {e}"),
            }
        }
        let unknown = toml::from_str::<RawClient>(&format!("{base}weight = 2"));
        assert!(unknown.is_err(), "unknown keys are refused");
    }

    #[test]
    fn globs_and_rates() {
        let base = format!("name = \"a\"\ntoken_sha256 = \"{HEX}\"\n");
        let c = one(&base, false).unwrap();
        assert_eq!((c.allow, c.deny, c.rate), (None, vec![], None));
        let c = one(
            &format!("{base}allow = []\ndeny = [\"x_*\"]\nrate = \"5/min\""),
            false,
        )
        .unwrap();
        assert_eq!(c.allow, Some(vec![]));
        assert_eq!(c.deny, vec!["x_*".to_owned()]);
        let per = Duration::from_secs(60);
        assert_eq!(c.rate, Some(Rate { count: 5, per }));
        assert_eq!(
            key_of(&format!("{base}allow = [\"a\", \"\"]"), false),
            "client[2].allow[1]"
        );
        assert_eq!(
            key_of(&format!("{base}deny = [\"\"]"), false),
            "client[2].deny[0]"
        );
        for ok in ["1/s", "1000000/h", "20 / sec", "3/hour"] {
            one(&format!("{base}rate = \"{ok}\""), false).unwrap();
        }
        for bad in ["0/s", "1000001/s", "20", "20/d", "-1/s", "x/s", "20/"] {
            let e = one(&format!("{base}rate = \"{bad}\""), false).unwrap_err();
            assert_eq!(e.key(), Some("client[2].rate"), "{bad}");
            assert!(e.to_string().contains("\"N/s\""), "{e}");
        }
    }
}
