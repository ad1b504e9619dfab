//! One `[[upstream]]` table: raw → typed [`UpstreamConfig`], every key
//! checked against its documented range (the table in `config/mod.rs`),
//! defaults from the validation context (built-ins or a board profile).

use std::time::Duration;

use super::fields::{
    bearer_token_file, check_args, check_command, check_cwd, check_env, check_headers, check_name,
    check_url,
};
use super::raw::RawUpstream;
use super::validate::{duration, float, foreign_keys, int, Ctx, Kind, HTTP_KEYS, STDIO_KEYS};
use super::{ConfigError, Era, Transport, UpstreamConfig};
use crate::limits;

type Result<T> = std::result::Result<T, ConfigError>;

// Documented ranges that have no constant in `limits` (yet).
const MIN_CALL_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(3600);
const MIN_RESULT_BYTES: usize = 1024;
const MAX_RESULT_BYTES_CEILING: usize = 256 * 1024 * 1024;
const MIN_HEALTH_INTERVAL: Duration = Duration::from_secs(1);
const MAX_HEALTH_INTERVAL: Duration = Duration::from_secs(3600);
const MIN_PROBE_TIMEOUT: Duration = Duration::from_millis(100);
const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
const MAX_PROBE_MISSES: usize = 100;
const MIN_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
const MAX_BACKOFF_INITIAL: Duration = Duration::from_secs(3600);
const MIN_BACKOFF_FACTOR: f64 = 1.0;
const MAX_BACKOFF_FACTOR: f64 = 10.0;
const MIN_BACKOFF_CAP: Duration = Duration::from_secs(1);
const MAX_BACKOFF_CAP: Duration = Duration::from_secs(24 * 3600);
const MAX_STABLE_PERIOD: Duration = Duration::from_secs(24 * 3600);
const MIN_RETRY_AFTER_CAP: Duration = Duration::from_secs(1);
const MAX_RETRY_AFTER_CAP: Duration = Duration::from_secs(24 * 3600);
const MIN_STARTUP_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_STARTUP_TIMEOUT: Duration = Duration::from_secs(10 * 60);

pub(super) fn upstream(ctx: &Ctx, base: &str, raw: RawUpstream) -> Result<UpstreamConfig> {
    let k = |f: &str| format!("{base}.{f}");
    let name = raw
        .name
        .ok_or_else(|| ctx.err(k("name"), "missing; every upstream needs a name"))?;
    check_name(ctx, &k("name"), &name)?;
    let kind = match raw.transport.as_deref() {
        Some("stdio") => Kind::Stdio,
        Some("http") => Kind::Http,
        Some("builtin") => Kind::Builtin,
        Some(_) => {
            return Err(ctx.err(k("transport"), "must be \"stdio\", \"http\" or \"builtin\""))
        }
        None => match (raw.command.is_some(), raw.url.is_some()) {
            (true, false) => Kind::Stdio,
            (false, true) => Kind::Http,
            (true, true) => {
                return Err(ctx.err(
                    k("transport"),
                    "missing, and both command and url are given; set transport",
                ))
            }
            (false, false) => {
                return Err(ctx.err(
                    k("transport"),
                    "missing; set transport = \"stdio\", \"http\" or \"builtin\"",
                ))
            }
        },
    };
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
    ];
    foreign_keys(
        ctx,
        base,
        "transport = ",
        kind,
        Kind::Stdio,
        &STDIO_KEYS,
        &stdio_present,
    )?;
    foreign_keys(
        ctx,
        base,
        "transport = ",
        kind,
        Kind::Http,
        &HTTP_KEYS,
        &http_present,
    )?;
    let transport = match kind {
        Kind::Stdio => {
            let command = raw.command.ok_or_else(|| {
                ctx.err(
                    k("command"),
                    "missing; a stdio upstream needs the command to run",
                )
            })?;
            Transport::Stdio {
                command: check_command(ctx, &k("command"), command)?,
                args: check_args(ctx, &k("args"), raw.args.unwrap_or_default())?,
                env: check_env(ctx, &k("env"), raw.env.unwrap_or_default())?,
                cwd: raw.cwd.map(|c| check_cwd(ctx, &k("cwd"), c)).transpose()?,
            }
        }
        Kind::Http => {
            let url = raw
                .url
                .ok_or_else(|| ctx.err(k("url"), "missing; an http upstream needs a url"))?;
            let bearer = raw
                .bearer_token_file
                .map(|b| bearer_token_file(ctx, &k("bearer_token_file"), &b))
                .transpose()?;
            Transport::Http {
                url: check_url(ctx, &k("url"), url)?,
                headers: check_headers(
                    ctx,
                    &k("headers"),
                    raw.headers.unwrap_or_default(),
                    bearer.is_some(),
                )?,
                bearer_token_file: bearer,
            }
        }
        Kind::Builtin => Transport::Builtin,
    };
    let mut up = ctx.upstream_defaults(name, transport);
    if let Some(prefix) = raw.prefix {
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
        None | Some("auto") => Era::Auto,
        Some("legacy") => Era::Legacy,
        Some("modern") => Era::Modern,
        Some(_) => {
            return Err(ctx.err(k("era"), "must be \"auto\", \"legacy\" or \"modern\""));
        }
    };
    up.call_timeout = duration(
        ctx,
        &k("call_timeout"),
        raw.call_timeout.as_ref(),
        (MIN_CALL_TIMEOUT, MAX_CALL_TIMEOUT),
        up.call_timeout,
    )?;
    up.max_in_flight = int(
        ctx,
        &k("max_in_flight"),
        raw.max_in_flight,
        (1, limits::MAX_IN_FLIGHT_CEILING),
        up.max_in_flight,
    )?;
    up.max_result_bytes = int(
        ctx,
        &k("max_result_bytes"),
        raw.max_result_bytes,
        (MIN_RESULT_BYTES, MAX_RESULT_BYTES_CEILING),
        up.max_result_bytes,
    )?;
    up.max_catalog_entries = int(
        ctx,
        &k("max_catalog_entries"),
        raw.max_catalog_entries,
        (1, limits::MAX_CATALOG_ENTRIES_CEILING),
        up.max_catalog_entries,
    )?;
    up.max_catalog_bytes = int(
        ctx,
        &k("max_catalog_bytes"),
        raw.max_catalog_bytes,
        (limits::MIN_CATALOG_BYTES, limits::MAX_CATALOG_BYTES_CEILING),
        up.max_catalog_bytes,
    )?;
    // Supervisor (reconnect policy).
    up.health_interval = duration(
        ctx,
        &k("health_interval"),
        raw.health_interval.as_ref(),
        (MIN_HEALTH_INTERVAL, MAX_HEALTH_INTERVAL),
        limits::DEFAULT_HEALTH_INTERVAL,
    )?;
    up.probe_timeout = duration(
        ctx,
        &k("probe_timeout"),
        raw.probe_timeout.as_ref(),
        (MIN_PROBE_TIMEOUT, MAX_PROBE_TIMEOUT),
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
        (1, MAX_PROBE_MISSES),
        limits::DEFAULT_PROBE_MISSES as usize,
    )?;
    up.probe_misses = u32::try_from(misses).expect("probe_misses is at most MAX_PROBE_MISSES");
    up.backoff_initial = duration(
        ctx,
        &k("backoff_initial"),
        raw.backoff_initial.as_ref(),
        (MIN_BACKOFF_INITIAL, MAX_BACKOFF_INITIAL),
        limits::DEFAULT_BACKOFF_INITIAL,
    )?;
    up.backoff_factor = float(
        ctx,
        &k("backoff_factor"),
        raw.backoff_factor,
        (MIN_BACKOFF_FACTOR, MAX_BACKOFF_FACTOR),
        limits::DEFAULT_BACKOFF_FACTOR,
    )?;
    up.backoff_cap = duration(
        ctx,
        &k("backoff_cap"),
        raw.backoff_cap.as_ref(),
        (MIN_BACKOFF_CAP, MAX_BACKOFF_CAP),
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
    up.stable_period = duration(
        ctx,
        &k("stable_period"),
        raw.stable_period.as_ref(),
        (Duration::ZERO, MAX_STABLE_PERIOD),
        limits::DEFAULT_STABLE_PERIOD,
    )?;
    up.retry_after_cap = duration(
        ctx,
        &k("retry_after_cap"),
        raw.retry_after_cap.as_ref(),
        (MIN_RETRY_AFTER_CAP, MAX_RETRY_AFTER_CAP),
        limits::DEFAULT_RETRY_AFTER_CAP,
    )?;
    up.connect_on_demand = raw.connect_on_demand.unwrap_or(false);
    up.startup_timeout = duration(
        ctx,
        &k("startup_timeout"),
        raw.startup_timeout.as_ref(),
        (MIN_STARTUP_TIMEOUT, MAX_STARTUP_TIMEOUT),
        limits::DEFAULT_STARTUP_TIMEOUT,
    )?;
    Ok(up)
}
