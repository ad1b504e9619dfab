//! One `[[upstream]]` table: raw → typed [`UpstreamConfig`], every key
//! checked against its documented range (the table in `config/mod.rs`),
//! defaults from the validation context (built-ins or a board profile).
//! Validate-and-fill runs per group of keys, in file-documentation order:
//! name and transport, identity (`prefix`, `enabled`, `required`, `era`),
//! capacities, probing, backoff, the rest of the reconnect policy.

use std::time::Duration;

use super::ctx::{Ctx, Result};
use super::fields::{
    check_args, check_command, check_cwd, check_env, check_headers, check_name, check_url,
    foreign_keys, secret_file, Kind, HTTP_KEYS, SANDBOX_KEYS, STDIO_KEYS,
};
use super::toml_raw::RawUpstream;
use super::values::{duration, durations, float, int, ints};
use super::{EraPreference, Transport, Trust, UpstreamConfig};
use crate::limits;

/// The `[[upstream]]` table `raw` at key path `base` (`upstream[1]`).
pub(super) fn upstream(ctx: &Ctx, base: &str, mut raw: RawUpstream) -> Result<UpstreamConfig> {
    let name = raw.name.take().ok_or_else(|| {
        ctx.err(
            format!("{base}.name"),
            "missing; every upstream needs a name",
        )
    })?;
    check_name(ctx, &format!("{base}.name"), &name)?;
    let kind = transport_kind(ctx, base, &raw)?;
    transport_keys(ctx, base, kind, &raw)?;
    let wire = match raw.transport.as_deref() {
        Some("sse") => super::transport::Wire::Sse,
        _ => super::transport::Wire::Streamable,
    };
    let transport = match kind {
        Kind::Stdio => stdio(ctx, base, &mut raw)?,
        Kind::Http => http(ctx, base, &mut raw, wire)?,
        Kind::Builtin => Transport::Builtin,
    };
    let mut up = ctx.upstream_defaults(name, transport);
    identity(ctx, base, &mut raw, &mut up)?;
    if up.era == EraPreference::Modern && wire == super::transport::Wire::Sse {
        return Err(ctx.err(
            format!("{base}.era"),
            "\"modern\" cannot be spoken over transport = \"sse\": the 2024-11-05 transport carries legacy sessions only",
        ));
    }
    capacities(ctx, base, &raw, &mut up)?;
    probing(ctx, base, &raw, &mut up)?;
    backoff(ctx, base, &raw, &mut up)?;
    lifecycle(ctx, base, &raw, &mut up)?;
    Ok(up)
}

/// `transport`, or when absent the one implied by `command` / `url`.
fn transport_kind(ctx: &Ctx, base: &str, raw: &RawUpstream) -> Result<Kind> {
    let key = format!("{base}.transport");
    match raw.transport.as_deref() {
        Some("stdio") => Ok(Kind::Stdio),
        Some("http" | "sse") => Ok(Kind::Http),
        Some("builtin") => Ok(Kind::Builtin),
        Some(_) => Err(ctx.err(
            key,
            "must be \"stdio\", \"http\", \"sse\" (the 2024-11-05 HTTP+SSE transport) or \"builtin\"",
        )),
        None => match (raw.command.is_some(), raw.url.is_some()) {
            (true, false) => Ok(Kind::Stdio),
            (false, true) => Ok(Kind::Http),
            (true, true) => Err(ctx.err(
                key,
                "missing, and both command and url are given; set transport",
            )),
            (false, false) => Err(ctx.err(
                key,
                "missing; set transport = \"stdio\", \"http\" or \"builtin\"",
            )),
        },
    }
}

/// Rejects a key of another transport than `kind` (`url` on a stdio upstream).
fn transport_keys(ctx: &Ctx, base: &str, kind: Kind, raw: &RawUpstream) -> Result<()> {
    let stdio_present = [
        raw.command.is_some(),
        raw.args.is_some(),
        raw.env.is_some(),
        raw.cwd.is_some(),
    ];
    let http_present = [
        raw.url.is_some(),
        raw.headers.is_some(),
        raw.bearer_token_file.is_some(),
        raw.oauth.is_some(),
    ];
    let sandbox_present = [
        raw.sandbox.is_some(),
        raw.paths_rw.is_some(),
        raw.paths_ro.is_some(),
        raw.network.is_some(),
    ];
    let owned: [(Kind, &[&str], &[bool]); 3] = [
        (Kind::Stdio, &SANDBOX_KEYS, &sandbox_present),
        (Kind::Stdio, &STDIO_KEYS, &stdio_present),
        (Kind::Http, &HTTP_KEYS, &http_present),
    ];
    for (owner, keys, present) in owned {
        foreign_keys(ctx, base, "transport = ", kind, owner, keys, present)?;
    }
    Ok(())
}

/// `command`, `args`, `env`, `cwd` and the sandbox keys, taken out of `raw`.
fn stdio(ctx: &Ctx, base: &str, raw: &mut RawUpstream) -> Result<Transport> {
    let k = |f: &str| format!("{base}.{f}");
    let command = raw.command.take().ok_or_else(|| {
        ctx.err(
            k("command"),
            "missing; a stdio upstream needs the command to run",
        )
    })?;
    Ok(Transport::Stdio {
        command: check_command(ctx, &k("command"), command)?,
        args: check_args(ctx, &k("args"), raw.args.take().unwrap_or_default())?,
        env: check_env(ctx, &k("env"), raw.env.take().unwrap_or_default())?,
        cwd: raw
            .cwd
            .take()
            .map(|c| check_cwd(ctx, &k("cwd"), c))
            .transpose()?,
        sandbox: super::sandbox_section::keys(ctx, base, raw)?,
    })
}

/// `url`, `headers`, `bearer_token_file`, `[upstream.oauth]`, taken out of `raw`.
fn http(
    ctx: &Ctx,
    base: &str,
    raw: &mut RawUpstream,
    wire: super::transport::Wire,
) -> Result<Transport> {
    let k = |f: &str| format!("{base}.{f}");
    let url = raw
        .url
        .take()
        .ok_or_else(|| ctx.err(k("url"), "missing; an http upstream needs a url"))?;
    let bearer = raw
        .bearer_token_file
        .take()
        .map(|b| secret_file(ctx, &k("bearer_token_file"), &b))
        .transpose()?;
    let oauth = raw
        .oauth
        .take()
        .map(|o| super::oauth_section::oauth(ctx, base, o))
        .transpose()?;
    if oauth.is_some() && bearer.is_some() {
        return Err(ctx.err(
            k("bearer_token_file"),
            "conflicts with [upstream.oauth]: tokens come from the authorization server; use one or the other",
        ));
    }
    let headers = raw.headers.take().unwrap_or_default();
    Ok(Transport::Http {
        url: check_url(ctx, &k("url"), url)?,
        wire,
        headers: check_headers(
            ctx,
            &k("headers"),
            headers,
            bearer.is_some() || oauth.is_some(),
        )?,
        bearer_token_file: bearer,
        oauth: oauth.map(Box::new),
    })
}

/// `prefix`, `enabled`, `required` (only of an enabled upstream), `era`,
/// `trust`.
fn identity(ctx: &Ctx, base: &str, raw: &mut RawUpstream, up: &mut UpstreamConfig) -> Result<()> {
    let k = |f: &str| format!("{base}.{f}");
    if let Some(prefix) = raw.prefix.take() {
        if !prefix.is_empty() {
            check_name(ctx, &k("prefix"), &prefix)?;
        }
        up.prefix = prefix;
    }
    up.enabled = raw.enabled.unwrap_or(true);
    up.required = raw.required.unwrap_or(false);
    if up.required && !up.enabled {
        return Err(ctx.err(
            k("required"),
            "a disabled upstream can't be required; enable it or drop required",
        ));
    }
    up.era = match raw.era.as_deref() {
        None | Some("auto") => EraPreference::Auto,
        Some("legacy") => EraPreference::Legacy,
        Some("modern") => EraPreference::Modern,
        Some(_) => {
            return Err(ctx.err(k("era"), "must be \"auto\", \"legacy\" or \"modern\""));
        }
    };
    up.trust = match raw.trust.as_deref() {
        None | Some("auto") => Trust::Auto,
        Some("pin") => Trust::Pin,
        Some(other) => {
            return Err(ctx.err(
                k("trust"),
                format!("must be \"auto\" or \"pin\" (got {other:?})"),
            ));
        }
    };
    Ok(())
}

/// `call_timeout` and the capacity keys (`max_in_flight`, `max_result_bytes`,
/// `max_catalog_entries`, `max_catalog_bytes`).
fn capacities(ctx: &Ctx, base: &str, raw: &RawUpstream, up: &mut UpstreamConfig) -> Result<()> {
    up.call_timeout = duration(
        ctx,
        &format!("{base}.call_timeout"),
        raw.call_timeout.as_ref(),
        (limits::MIN_CALL_TIMEOUT, limits::MAX_CALL_TIMEOUT),
        up.call_timeout,
    )?;
    let in_flight = (1, limits::MAX_IN_FLIGHT_CEILING);
    let result = (limits::MIN_RESULT_BYTES, limits::MAX_RESULT_BYTES_CEILING);
    let entries = (1, limits::MAX_CATALOG_ENTRIES_CEILING);
    let catalog = (limits::MIN_CATALOG_BYTES, limits::MAX_CATALOG_BYTES_CEILING);
    ints(
        ctx,
        base,
        [
            (
                "max_in_flight",
                raw.max_in_flight,
                in_flight,
                &mut up.max_in_flight,
            ),
            (
                "max_result_bytes",
                raw.max_result_bytes,
                result,
                &mut up.max_result_bytes,
            ),
            (
                "max_catalog_entries",
                raw.max_catalog_entries,
                entries,
                &mut up.max_catalog_entries,
            ),
            (
                "max_catalog_bytes",
                raw.max_catalog_bytes,
                catalog,
                &mut up.max_catalog_bytes,
            ),
        ],
    )
}

/// Liveness probing: `health_interval`, `probe_timeout` (never longer than
/// the interval), `probe_misses`.
fn probing(ctx: &Ctx, base: &str, raw: &RawUpstream, up: &mut UpstreamConfig) -> Result<()> {
    let k = |f: &str| format!("{base}.{f}");
    up.health_interval = duration(
        ctx,
        &k("health_interval"),
        raw.health_interval.as_ref(),
        (limits::MIN_HEALTH_INTERVAL, limits::MAX_HEALTH_INTERVAL),
        limits::DEFAULT_HEALTH_INTERVAL,
    )?;
    up.probe_timeout = duration(
        ctx,
        &k("probe_timeout"),
        raw.probe_timeout.as_ref(),
        (limits::MIN_PROBE_TIMEOUT, limits::MAX_PROBE_TIMEOUT),
        // Unset: the default, but never past a shorter health interval.
        limits::DEFAULT_PROBE_TIMEOUT.min(up.health_interval),
    )?;
    if up.probe_timeout > up.health_interval {
        return Err(ctx.err(
            k("probe_timeout"),
            format!(
                "must not be longer than {} ({}): a probe must finish before the next one is due",
                k("health_interval"),
                humantime::format_duration(up.health_interval)
            ),
        ));
    }
    let misses = int(
        ctx,
        &k("probe_misses"),
        raw.probe_misses,
        (1, limits::MAX_PROBE_MISSES as usize),
        limits::DEFAULT_PROBE_MISSES as usize,
    )?;
    up.probe_misses = u32::try_from(misses).expect("probe_misses is at most MAX_PROBE_MISSES");
    Ok(())
}

/// Reconnect backoff: `backoff_initial`, `backoff_factor`, `backoff_cap`
/// (never below the initial delay).
fn backoff(ctx: &Ctx, base: &str, raw: &RawUpstream, up: &mut UpstreamConfig) -> Result<()> {
    let k = |f: &str| format!("{base}.{f}");
    up.backoff_initial = duration(
        ctx,
        &k("backoff_initial"),
        raw.backoff_initial.as_ref(),
        (limits::MIN_BACKOFF_INITIAL, limits::MAX_BACKOFF_INITIAL),
        limits::DEFAULT_BACKOFF_INITIAL,
    )?;
    up.backoff_factor = float(
        ctx,
        &k("backoff_factor"),
        raw.backoff_factor,
        (limits::MIN_BACKOFF_FACTOR, limits::MAX_BACKOFF_FACTOR),
        limits::DEFAULT_BACKOFF_FACTOR,
    )?;
    up.backoff_cap = duration(
        ctx,
        &k("backoff_cap"),
        raw.backoff_cap.as_ref(),
        (limits::MIN_BACKOFF_CAP, limits::MAX_BACKOFF_CAP),
        // Unset: the default, but never below a longer initial delay.
        limits::DEFAULT_BACKOFF_CAP.max(up.backoff_initial),
    )?;
    if up.backoff_cap < up.backoff_initial {
        return Err(ctx.err(
            k("backoff_cap"),
            format!(
                "must not be shorter than {} ({})",
                k("backoff_initial"),
                humantime::format_duration(up.backoff_initial)
            ),
        ));
    }
    Ok(())
}

/// The rest of the reconnect policy: `stable_period`, `retry_after_cap`,
/// `startup_timeout`, `connect_on_demand`. Their defaults are the built-in
/// ones (a board profile does not set them).
fn lifecycle(ctx: &Ctx, base: &str, raw: &RawUpstream, up: &mut UpstreamConfig) -> Result<()> {
    let stable = (Duration::ZERO, limits::MAX_STABLE_PERIOD);
    let retry_after = (limits::MIN_RETRY_AFTER_CAP, limits::MAX_RETRY_AFTER_CAP);
    let startup = (limits::MIN_STARTUP_TIMEOUT, limits::MAX_STARTUP_TIMEOUT);
    durations(
        ctx,
        base,
        [
            (
                "stable_period",
                raw.stable_period.as_ref(),
                stable,
                &mut up.stable_period,
            ),
            (
                "retry_after_cap",
                raw.retry_after_cap.as_ref(),
                retry_after,
                &mut up.retry_after_cap,
            ),
            (
                "startup_timeout",
                raw.startup_timeout.as_ref(),
                startup,
                &mut up.startup_timeout,
            ),
        ],
    )?;
    up.connect_on_demand = raw.connect_on_demand.unwrap_or(false);
    Ok(())
}
