//! Typed readers of raw values: an integer, number or duration in its
//! documented range, or the default when the key is absent. The errors name
//! the key and the range.

use std::time::Duration;

use super::ctx::{Ctx, Result};
use super::toml_raw::{RawDuration, RawFloat, RawInt};

/// One integer key of a section: its name, the value as written, the
/// accepted range, and the field it fills (which holds the default).
pub(super) type IntKey<'a> = (&'a str, Option<RawInt>, (usize, usize), &'a mut usize);

/// One duration key of a section, like [`IntKey`].
pub(super) type DurationKey<'a> = (
    &'a str,
    Option<&'a RawDuration>,
    (Duration, Duration),
    &'a mut Duration,
);

/// Reads each of `keys` under `base` (`server`, `upstream[1]`) in order
/// with [`int`]; an absent key leaves its field at the default.
pub(super) fn ints<'a>(
    ctx: &Ctx,
    base: &str,
    keys: impl IntoIterator<Item = IntKey<'a>>,
) -> Result<()> {
    for (key, raw, range, field) in keys {
        *field = int(ctx, &format!("{base}.{key}"), raw, range, *field)?;
    }
    Ok(())
}

/// Reads each of `keys` under `base` in order with [`duration`]; an absent
/// key leaves its field at the default.
pub(super) fn durations<'a>(
    ctx: &Ctx,
    base: &str,
    keys: impl IntoIterator<Item = DurationKey<'a>>,
) -> Result<()> {
    for (key, raw, range, field) in keys {
        *field = duration(ctx, &format!("{base}.{key}"), raw, range, *field)?;
    }
    Ok(())
}

/// An integer in `min..=max`.
pub(super) fn int(
    ctx: &Ctx,
    key: &str,
    raw: Option<RawInt>,
    (min, max): (usize, usize),
    default: usize,
) -> Result<usize> {
    let Some(RawInt(v)) = raw else {
        return Ok(default);
    };
    match usize::try_from(v) {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ctx.err(key, format!("must be between {min} and {max} (got {v})"))),
    }
}

/// A finite number in `min..=max`.
pub(super) fn float(
    ctx: &Ctx,
    key: &str,
    raw: Option<RawFloat>,
    (min, max): (f64, f64),
    default: f64,
) -> Result<f64> {
    let Some(RawFloat(v)) = raw else {
        return Ok(default);
    };
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(ctx.err(
            key,
            format!("must be between {min:?} and {max:?} (got {v:?})"),
        ))
    }
}

/// A humantime duration in `min..=max`; zero is accepted only when `min` is
/// zero, and "off"-like words never are.
pub(super) fn duration(
    ctx: &Ctx,
    key: &str,
    raw: Option<&RawDuration>,
    (min, max): (Duration, Duration),
    default: Duration,
) -> Result<Duration> {
    let Some(RawDuration(s)) = raw else {
        return Ok(default);
    };
    let range = format!(
        "between {} and {}",
        humantime::format_duration(min),
        humantime::format_duration(max)
    );
    let t = s.trim();
    if ["off", "none", "never", "disabled", "infinite"]
        .iter()
        .any(|w| t.eq_ignore_ascii_case(w))
    {
        return Err(ctx.err(key, format!("can't be turned off; use a duration {range}")));
    }
    let d = humantime::parse_duration(t).map_err(|e| {
        ctx.err(
            key,
            format!("{s:?} is not a duration such as \"30s\" or \"5m\" ({e}); use {range}"),
        )
    })?;
    if d.is_zero() && !min.is_zero() {
        return Err(ctx.err(key, format!("must not be zero; use a duration {range}")));
    }
    if d < min || d > max {
        return Err(ctx.err(key, format!("must be {range} (got {s:?})")));
    }
    Ok(d)
}

/// A non-empty absolute path without NUL; the error completes "`<value>` …".
pub(super) fn absolute_dir(s: &str) -> std::result::Result<std::path::PathBuf, String> {
    if s.is_empty() {
        return Err("must not be empty (omit it for no state directory)".to_owned());
    }
    if s.contains('\0') {
        return Err("must not contain a NUL character".to_owned());
    }
    let p = std::path::PathBuf::from(s);
    if !p.is_absolute() {
        return Err("must be an absolute path".to_owned());
    }
    Ok(p)
}
