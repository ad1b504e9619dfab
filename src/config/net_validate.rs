//! The network rules across keys: the `[[client]]` list (count, no shared
//! names, tokens or subjects), the rule that a non-loopback `server.listen`
//! needs clients (or `server.allow_unauthenticated`), and `[audit]`.

use std::path::PathBuf;

use super::clients::client;
use super::ctx::{Ctx, Result};
use super::toml_raw::{RawAudit, RawClient};
use super::values::int;
use super::{AuditConfig, AuditSink, ClientConfig, Credential, ServerConfig};
use crate::limits;

/// Every `[[client]]`, checked one by one and against each other.
pub(super) fn clients(
    ctx: &Ctx,
    server: &ServerConfig,
    raw: Vec<RawClient>,
) -> Result<Vec<ClientConfig>> {
    if raw.len() > limits::MAX_CLIENTS {
        return Err(ctx.err(
            "client",
            format!(
                "at most {} clients are allowed (got {})",
                limits::MAX_CLIENTS,
                raw.len()
            ),
        ));
    }
    let mtls = server.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
    let mut out: Vec<ClientConfig> = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let base = format!("client[{i}]");
        let c = client(ctx, &base, r, mtls)?;
        for (j, other) in out.iter().enumerate() {
            check_pair(ctx, &base, &c, j, other)?;
        }
        out.push(c);
    }
    Ok(out)
}

/// `c` (at `base`) against the earlier client `other` (`client[j]`):
/// distinct names, tokens and subjects.
fn check_pair(
    ctx: &Ctx,
    base: &str,
    c: &ClientConfig,
    j: usize,
    other: &ClientConfig,
) -> Result<()> {
    if c.name == other.name {
        return Err(ctx.err(
            format!("{base}.name"),
            format!("duplicate name {:?}: client[{j}] has it too", c.name),
        ));
    }
    let same = match (&c.credential, &other.credential) {
        (Credential::Token { sha256: a, file }, Credential::Token { sha256: b, .. }) => {
            let key = if file.is_some() {
                "token_file"
            } else {
                "token_sha256"
            };
            (a == b).then_some((key, "token"))
        }
        (Credential::CertSubject(a), Credential::CertSubject(b)) => {
            (sorted(a) == sorted(b)).then_some(("cert_subject", "certificate subject"))
        }
        _ => None,
    };
    match same {
        Some((key, what)) => Err(ctx.err(
            format!("{base}.{key}"),
            format!(
                "same {what} as client[{j}] ({:?}); every client needs its own",
                other.name
            ),
        )),
        None => Ok(()),
    }
}

fn sorted(pairs: &[(String, String)]) -> Vec<&(String, String)> {
    let mut v: Vec<_> = pairs.iter().collect();
    v.sort();
    v.dedup();
    v
}

/// The network rule: a `server.listen` other people can reach needs a
/// `[[client]]`, unless `server.allow_unauthenticated = true`.
pub(super) fn check_open_listen(
    ctx: &Ctx,
    server: &ServerConfig,
    clients: &[ClientConfig],
) -> Result<()> {
    if server.listen.ip().is_loopback() || !clients.is_empty() || server.allow_unauthenticated {
        return Ok(());
    }
    Err(ctx.err(
        "server.listen",
        format!(
            "{} is not a loopback address and there is no [[client]]: anyone who can reach \
             server.listen could call every tool. Add a [[client]] (`mcp-edge token new NAME` \
             prints one), or set server.allow_unauthenticated = true to serve without \
             authentication",
            server.listen
        ),
    ))
}

/// `[audit]`: `None` when the section is absent.
pub(super) fn audit(ctx: &Ctx, raw: Option<RawAudit>) -> Result<Option<AuditConfig>> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let path = raw.path.ok_or_else(|| {
        ctx.err(
            "audit.path",
            "missing; set an absolute file path or \"journal\" (or remove [audit])",
        )
    })?;
    let sink = if path == "journal" {
        AuditSink::Journal
    } else {
        let p = PathBuf::from(&path);
        if !p.is_absolute() || path.contains('\0') {
            return Err(ctx.err(
                "audit.path",
                format!("{path:?} must be an absolute path or \"journal\""),
            ));
        }
        AuditSink::File(p)
    };
    let max_bytes = int(
        ctx,
        "audit.max_bytes",
        raw.max_bytes,
        (limits::MIN_AUDIT_MAX_BYTES, limits::MAX_AUDIT_MAX_BYTES),
        limits::DEFAULT_AUDIT_MAX_BYTES,
    )?;
    let keep = int(
        ctx,
        "audit.keep",
        raw.keep,
        (1, limits::MAX_AUDIT_KEEP),
        limits::DEFAULT_AUDIT_KEEP,
    )?;
    Ok(Some(AuditConfig {
        sink,
        max_bytes: max_bytes as u64,
        keep: u32::try_from(keep).expect("audit.keep is at most MAX_AUDIT_KEEP"),
        arguments: raw.arguments.unwrap_or(false),
    }))
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::Path;

    use super::super::tls_files::testing::files;
    use super::super::{token_sha256, Config, ConfigError, Secret};
    use super::*;

    const UP: &str = "[[upstream]]\nname = \"e\"\ntransport = \"builtin\"\n";
    const HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    /// `text` with one builtin upstream added.
    fn load(text: &str) -> std::result::Result<Config, ConfigError> {
        load_as_is(&format!("{text}\n{UP}"))
    }

    fn load_as_is(text: &str) -> std::result::Result<Config, ConfigError> {
        let env = |_: &str| -> Option<OsString> { None };
        Config::from_toml_str_with_env(text, Path::new("t.toml"), &env)
    }

    fn key_of(text: &str) -> String {
        let e = load(text).unwrap_err();
        e.key().unwrap_or_else(|| panic!("{e}")).to_owned()
    }

    fn sha_client(name: &str, hex: &str) -> String {
        format!("[[client]]\nname = \"{name}\"\ntoken_sha256 = \"{hex}\"\n")
    }

    #[test]
    fn non_loopback_listen_needs_a_client_or_allow_unauthenticated() {
        for listen in ["0.0.0.0:8737", "[::]:8737", "192.168.1.20:8737"] {
            let server = format!("[server]\nlisten = \"{listen}\"\n");
            let e = load(&server).unwrap_err();
            assert_eq!(e.key(), Some("server.listen"), "{e}");
            let m = e.to_string();
            for says in [
                "server.listen",
                "[[client]]",
                "mcp-edge token new",
                "allow_unauthenticated = true",
            ] {
                assert!(m.contains(says), "{m}");
            }
            let open = load(&format!("{server}allow_unauthenticated = true\n")).unwrap();
            assert!(open.server.allow_unauthenticated);
            let with_client = load(&format!("{server}\n{}", sha_client("a", HEX))).unwrap();
            assert_eq!(with_client.clients.len(), 1);
            assert!(!with_client.server.allow_unauthenticated);
        }
        for listen in ["127.0.0.1:8737", "127.0.0.2:1", "[::1]:8737"] {
            load(&format!("[server]\nlisten = \"{listen}\"\n")).unwrap();
        }
    }

    #[test]
    fn admin_listen_must_be_loopback() {
        for key in ["admin_listen", "metrics_listen"] {
            let e = load(&format!("[server]\n{key} = \"0.0.0.0:9737\"\n")).unwrap_err();
            assert_eq!(e.key(), Some(format!("server.{key}").as_str()), "{e}");
            assert!(e.to_string().contains("loopback"), "{e}");
        }
        load("[server]\nadmin_listen = \"[::1]:9737\"\n").unwrap();
    }

    #[test]
    fn clients_are_distinct() {
        let two = format!(
            "{}{}",
            sha_client("a", HEX),
            sha_client("a", &HEX.to_uppercase())
        );
        assert_eq!(key_of(&two), "client[1].name");
        let two = format!(
            "{}{}",
            sha_client("a", HEX),
            sha_client("b", &HEX.to_uppercase())
        );
        let e = load(&two).unwrap_err();
        assert_eq!(e.key(), Some("client[1].token_sha256"), "{e}");
        assert!(e.to_string().contains("client[0]"), "{e}");
        // A file with the same token as a digest.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tok");
        std::fs::write(&p, "the-same-token-0123456789").unwrap();
        let hex: String = token_sha256("the-same-token-0123456789")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let text = format!(
            "{}[[client]]\nname = \"f\"\ntoken_file = {p:?}\n",
            sha_client("a", &hex)
        );
        assert_eq!(key_of(&text), "client[1].token_file");
        let f = files();
        let tls = format!(
            "[server]\ntls_cert = {:?}\ntls_key = {:?}\ntls_client_ca = {:?}\n",
            f.cert, f.key, f.ca
        );
        let subj =
            |n: &str, s: &str| format!("[[client]]\nname = \"{n}\"\ncert_subject = \"{s}\"\n");
        let text = format!("{tls}{}{}", subj("a", "CN=x, O=y"), subj("b", "o=y,CN=x"));
        assert_eq!(key_of(&text), "client[1].cert_subject");
        load(&format!(
            "{tls}{}{}",
            subj("a", "CN=x, O=y"),
            subj("b", "CN=x, O=z")
        ))
        .unwrap();
    }

    #[test]
    fn at_most_max_clients() {
        let many: String = (0..=limits::MAX_CLIENTS)
            .map(|i| sha_client(&format!("c{i}"), &format!("{i:064x}")))
            .collect();
        let e = load(&many).unwrap_err();
        assert_eq!(e.key(), Some("client"), "{e}");
        let fine: String = (0..limits::MAX_CLIENTS)
            .map(|i| sha_client(&format!("c{i}"), &format!("{i:064x}")))
            .collect();
        assert_eq!(load(&fine).unwrap().clients.len(), limits::MAX_CLIENTS);
    }

    #[test]
    fn unknown_client_and_audit_keys_are_named() {
        let text = format!("{}zzz = 1\n", sha_client("a", HEX));
        assert_eq!(key_of(&text), "client[0].zzz");
        assert_eq!(
            key_of("[audit]\npath = \"journal\"\nzzz = 1\n"),
            "audit.zzz"
        );
    }

    #[test]
    fn moot_or_not_yet_possible_settings_are_notes() {
        let moot = format!(
            "[server]\nallow_unauthenticated = true\n{}",
            sha_client("a", HEX)
        );
        let notes = load(&moot).unwrap().notes;
        assert!(
            notes
                .iter()
                .any(|n| n.contains("allow_unauthenticated has no effect")),
            "{notes:?}"
        );
        let missing = "[audit]\npath = \"/nonexistent-mcp-edge-dir/audit.jsonl\"\n";
        let notes = load(missing).unwrap().notes;
        assert!(
            notes
                .iter()
                .any(|n| n.contains("/nonexistent-mcp-edge-dir does not exist")),
            "{notes:?}"
        );
        assert!(load("[audit]\npath = \"/tmp/audit.jsonl\"\n")
            .unwrap()
            .notes
            .is_empty());
    }

    #[test]
    fn audit_section() {
        assert_eq!(load("").unwrap().audit, None);
        let a = load("[audit]\npath = \"journal\"\n")
            .unwrap()
            .audit
            .unwrap();
        let expected = AuditConfig {
            sink: AuditSink::Journal,
            max_bytes: limits::DEFAULT_AUDIT_MAX_BYTES as u64,
            keep: 5,
            arguments: false,
        };
        assert_eq!(a, expected);
        let text = "[audit]\npath = \"/var/log/a.jsonl\"\nmax_bytes = 4096\nkeep = 100\narguments = true\n";
        let a = load(text).unwrap().audit.unwrap();
        assert_eq!(a.sink, AuditSink::File("/var/log/a.jsonl".into()));
        assert_eq!((a.max_bytes, a.keep, a.arguments), (4096, 100, true));
        for (text, key) in [
            ("[audit]\n", "audit.path"),
            ("[audit]\npath = \"audit.jsonl\"\n", "audit.path"),
            ("[audit]\npath = \"\"\n", "audit.path"),
            (
                "[audit]\npath = \"journal\"\nmax_bytes = 4095\n",
                "audit.max_bytes",
            ),
            (
                "[audit]\npath = \"journal\"\nmax_bytes = 1073741825\n",
                "audit.max_bytes",
            ),
            ("[audit]\npath = \"journal\"\nkeep = 0\n", "audit.keep"),
            ("[audit]\npath = \"journal\"\nkeep = 101\n", "audit.keep"),
        ] {
            assert_eq!(key_of(text), key, "{text}");
        }
    }

    /// tls, clients of every credential kind and audit: rendered, loaded
    /// again, rendered the same; neither `Debug` nor the rendering shows a
    /// token, a header value or URL credentials.
    #[test]
    fn render_round_trips_and_shows_no_secret() {
        const TOKEN: &str = "mcpe_known-token-text-0123456789";
        let f = files();
        let tok = f.dir.path().join("build-agent");
        std::fs::write(&tok, format!("{TOKEN}\n")).unwrap();
        let text = format!(
            "[server]\nlisten = \"0.0.0.0:8737\"\ntls_cert = {:?}\ntls_key = {:?}\n\
             tls_client_ca = {:?}\n\n\
             [[client]]\nname = \"build-agent\"\ntoken_file = {tok:?}\n\
             allow = [\"files__read_*\", \"edge__*\"]\ndeny = [\"files__write_*\"]\nrate = \"20/s\"\n\n\
             {}allow = []\nrate = \"3/h\"\n\n\
             [[client]]\nname = \"site\"\ncert_subject = \"CN=build-agent, o=Site\\\\, Inc\"\n\n\
             [audit]\npath = \"/var/lib/mcp-edge/audit.jsonl\"\nkeep = 3\n\n\
             [[upstream]]\nname = \"r\"\nurl = \"https://user:known-password@h/mcp?key=known-query\"\n\
             headers = {{ \"X-Api-Key\" = \"known-secret\" }}\n",
            f.cert, f.key, f.ca, sha_client("ci", HEX)
        );
        let cfg = load(&text).unwrap();
        let out = cfg.render_masked();
        let again = load_as_is(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        assert_eq!(again.render_masked(), out);
        assert_eq!(again.clients, cfg.clients);
        assert_eq!(again.audit, cfg.audit);
        assert_eq!(again.server.tls, cfg.server.tls);
        for shown in [
            format!("token_file = {tok:?}"),
            format!("token_sha256 = \"{HEX}\""),
            "cert_subject = \"CN=build-agent, O=Site\\\\, Inc\"".to_owned(),
            "rate = \"20/s\"".to_owned(),
            "rate = \"3/h\"".to_owned(),
            "allow = []".to_owned(),
            "keep = 3".to_owned(),
            "allow_unauthenticated = false".to_owned(),
        ] {
            assert!(out.contains(&shown), "{shown} not in\n{out}");
        }
        let debug = format!("{cfg:?}");
        for secret in [TOKEN, "known-secret", "known-password", "known-query"] {
            assert!(!out.contains(secret), "{secret} in\n{out}");
            assert!(!debug.contains(secret), "{secret} in\n{debug}");
        }
        let Credential::Token { sha256, .. } = &cfg.clients[0].credential else {
            panic!()
        };
        assert_eq!(*sha256, Secret::new(token_sha256(TOKEN)));
    }
}
