//! The network rules across keys: the `[[client]]` list (count, no shared
//! names, tokens or subjects), the rule that a non-loopback `server.listen`
//! needs clients (or `server.allow_unauthenticated`), and `[audit]`.

use std::path::PathBuf;

use super::clients::client;
use super::ctx::{Ctx, Result};
use super::raw::{RawAudit, RawClient};
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
