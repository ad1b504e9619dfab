//! `[server]` keys for running several boxes behind one load balancer
//! (README "Several boxes"): `instance_id`, `state_key_file`,
//! `proxy_protocol`, `trusted_proxies`, `drain_grace`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::ctx::{Ctx, Result};
use super::fields::secret_file;
use super::toml_raw::RawServer;
use super::values::duration;
use super::Secret;
use crate::instance::InstanceId;
use crate::limits;

/// The fleet keys of `[server]`, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    /// `instance_id`: the prefix of this box's session ids, task ids and
    /// `requestState`; `None` = derived from the machine id and the bound
    /// port at start ([`InstanceId::derived`]).
    pub instance_id: Option<InstanceId>,
    /// `state_key_file` and the key read from it (its trimmed contents,
    /// at least [`limits::MIN_STATE_KEY_BYTES`]): signs `requestState`, so
    /// boxes sharing it verify each other's; `None` = a key drawn at start.
    pub state_key: Option<(PathBuf, Secret<Vec<u8>>)>,
    /// `proxy_protocol`: connections from `trusted_proxies` begin with a
    /// PROXY protocol header (v1 or v2) naming the client.
    pub proxy_protocol: bool,
    /// `trusted_proxies`: the load balancers whose word on the client's
    /// address is taken (PROXY header, or else `X-Forwarded-For`).
    pub trusted_proxies: Vec<Cidr>,
    /// `drain_grace`: after SIGTERM, `/readyz` answers 503 and new
    /// connections are still served for this long.
    pub drain_grace: Duration,
}

impl Default for Fleet {
    /// No fleet settings, [`limits::DEFAULT_DRAIN_GRACE`].
    fn default() -> Fleet {
        Fleet {
            instance_id: None,
            state_key: None,
            proxy_protocol: false,
            trusted_proxies: Vec::new(),
            drain_grace: limits::DEFAULT_DRAIN_GRACE,
        }
    }
}

impl Fleet {
    /// Whether `ip` is one of `trusted_proxies`.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|c| c.contains(ip))
    }
}

/// An address block of `trusted_proxies` (`10.0.0.5/32`, `fd00::/8`; an
/// address alone is its own block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    bits: u8,
}

/// Why a `trusted_proxies` entry is no address block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CidrError(String);

impl Cidr {
    /// Parses `a.b.c.d[/n]` or `v6[/n]` (an IPv4-mapped IPv6 block as the
    /// IPv4 block it maps).
    pub fn parse(s: &str) -> std::result::Result<Cidr, CidrError> {
        let c = Self::parse_as_written(s).map_err(CidrError)?;
        Ok(match c.addr {
            IpAddr::V6(v6) if c.bits >= 96 => match v6.to_ipv4_mapped() {
                Some(v4) => Cidr {
                    addr: IpAddr::V4(v4),
                    bits: c.bits - 96,
                },
                None => c,
            },
            _ => c,
        })
    }

    fn parse_as_written(s: &str) -> std::result::Result<Cidr, String> {
        let (ip, bits) = match s.split_once('/') {
            Some((ip, n)) => (ip, Some(n)),
            None => (s, None),
        };
        let addr: IpAddr = ip
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or block such as \"10.0.0.5/32\""))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(n) => n
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {max}"))?,
        };
        // Host bits cleared: the block as it is matched (and printed).
        let addr = match addr {
            IpAddr::V4(a) => IpAddr::V4((u32::from(a) & mask(bits, 32) as u32).into()),
            IpAddr::V6(a) => IpAddr::V6((u128::from(a) & mask(bits, 128)).into()),
        };
        Ok(Cidr { addr, bits })
    }

    /// Whether `ip` is in the block (an IPv4-mapped IPv6 address as its IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let m = mask(self.bits, 32) as u32;
                u32::from(a) & m == u32::from(b) & m
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let m = mask(self.bits, 128);
                u128::from(a) & m == u128::from(b) & m
            }
            _ => false,
        }
    }
}

/// The mask of a `bits`-long prefix of a `max`-bit address (low bits).
fn mask(bits: u8, max: u32) -> u128 {
    match u32::from(bits).min(max) {
        0 => 0,
        b => (u128::MAX << (128 - b)) >> (128 - max),
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

/// The fleet keys of `raw`; `check-config` notes a fleet set up without an
/// explicit `instance_id`.
pub(super) fn fleet(ctx: &Ctx, raw: &RawServer) -> Result<Fleet> {
    let instance_id = match raw.instance_id.as_deref() {
        Some(s) => Some(
            InstanceId::parse(s)
                .map_err(|e| ctx.err("server.instance_id", format!("{s:?} {e}")))?,
        ),
        None => None,
    };
    let state_key = match raw.state_key_file.as_deref() {
        Some(s) => Some(state_key(ctx, s)?),
        None => None,
    };
    let trusted_proxies = trusted(ctx, raw.trusted_proxies.as_deref())?;
    let proxy_protocol = raw.proxy_protocol.unwrap_or(false);
    if proxy_protocol && trusted_proxies.is_empty() {
        return Err(ctx.err(
            "server.proxy_protocol",
            "needs server.trusted_proxies: the load balancers that send the PROXY header",
        ));
    }
    let fleet = proxy_protocol || !trusted_proxies.is_empty() || state_key.is_some();
    if instance_id.is_none() && fleet {
        ctx.note(
            "server.instance_id: not set while server.proxy_protocol, server.trusted_proxies \
             or server.state_key_file is; the derived one (machine id and port) is not what a \
             balancer's config names, and boxes cloned from one image share it: set \
             instance_id on each box (README \"Several boxes\")"
                .into(),
        );
    }
    let drain_grace = duration(
        ctx,
        "server.drain_grace",
        raw.drain_grace.as_ref(),
        (Duration::ZERO, limits::MAX_DRAIN_GRACE),
        limits::DEFAULT_DRAIN_GRACE,
    )?;
    Ok(Fleet {
        instance_id,
        state_key,
        proxy_protocol,
        trusted_proxies,
        drain_grace,
    })
}

/// The fleet keys as `check-config` prints them (TOML that loads back).
pub(super) fn printed(f: &Fleet) -> String {
    let quote = |s: &str| toml::Value::String(s.to_owned()).to_string();
    let mut o = String::new();
    match f.instance_id {
        Some(i) => o.push_str(&format!("instance_id = {}\n", quote(i.as_str()))),
        None => o.push_str(
            "# instance_id: not set (derived at start from the machine id and the listen port)\n",
        ),
    }
    match &f.state_key {
        Some((p, _)) => o.push_str(&format!(
            "state_key_file = {}\n",
            quote(&p.display().to_string())
        )),
        None => o.push_str(
            "# state_key_file: not set (requestState is signed with a key drawn at start)\n",
        ),
    }
    let proxies: Vec<String> = f
        .trusted_proxies
        .iter()
        .map(|c| quote(&c.to_string()))
        .collect();
    o.push_str(&format!("proxy_protocol = {}\n", f.proxy_protocol));
    o.push_str(&format!("trusted_proxies = [{}]\n", proxies.join(", ")));
    let grace = humantime::format_duration(f.drain_grace).to_string();
    o.push_str(&format!("drain_grace = {}\n", quote(&grace)));
    o
}

/// `trusted_proxies`: at most [`limits::MAX_TRUSTED_PROXIES`] blocks.
fn trusted(ctx: &Ctx, raw: Option<&[String]>) -> Result<Vec<Cidr>> {
    let raw = raw.unwrap_or_default();
    let max = limits::MAX_TRUSTED_PROXIES;
    if raw.len() > max {
        let m = format!("at most {max} entries (got {})", raw.len());
        return Err(ctx.err("server.trusted_proxies", m));
    }
    (raw.iter().enumerate())
        .map(|(i, s)| {
            let key = format!("server.trusted_proxies[{i}]");
            if let Some(c) = Cidr::parse(s).ok().filter(|c| c.bits == 0) {
                ctx.note(format!(
                    "{key}: {c} trusts every address: anyone may name its own client address"
                ));
            }
            Cidr::parse(s)
                .map_err(|m| ctx.err(format!("server.trusted_proxies[{i}]"), m.to_string()))
        })
        .collect()
}

/// `state_key_file`: a secret file whose trimmed contents are the key.
fn state_key(ctx: &Ctx, s: &str) -> Result<(PathBuf, Secret<Vec<u8>>)> {
    const KEY: &str = "server.state_key_file";
    let path = secret_file(ctx, KEY, s)?;
    let shown = path.display();
    let bytes =
        std::fs::read(&path).map_err(|e| ctx.err(KEY, format!("cannot read {shown}: {e}")))?;
    let key = bytes.trim_ascii();
    let (min, max) = (limits::MIN_STATE_KEY_BYTES, limits::MAX_STATE_KEY_BYTES);
    if key.len() < min || key.len() > max {
        let m = format!(
            "{shown} holds {} bytes; the key must be {min} to {max} (make one with \
             `head -c 32 /dev/urandom | base64 > {shown}`, the same file on every box)",
            key.len()
        );
        return Err(ctx.err(KEY, m));
    }
    Ok((path, Secret::new(key.to_vec())))
}

#[cfg(test)]
mod tests {
    use super::Cidr;
    use crate::config::Config;
    use std::path::Path;

    fn load(server: &str) -> Result<Config, crate::config::ConfigError> {
        let text =
            format!("[server]\n{server}\n[[upstream]]\nname = \"edge\"\ntransport = \"builtin\"\n");
        Config::from_toml_str(&text, Path::new("t.toml"))
    }

    #[test]
    fn each_bad_key_is_named() {
        for (server, key) in [
            ("instance_id = \"E1\"", "server.instance_id"),
            ("instance_id = \"\"", "server.instance_id"),
            ("instance_id = \"abcdefghijklmnopq\"", "server.instance_id"),
            ("proxy_protocol = true", "server.proxy_protocol"),
            (
                "trusted_proxies = [\"10.0.0.1\", \"nope\"]",
                "server.trusted_proxies[1]",
            ),
            ("drain_grace = \"off\"", "server.drain_grace"),
            ("drain_grace = \"6m\"", "server.drain_grace"),
            (
                "state_key_file = \"/nonexistent/key\"",
                "server.state_key_file",
            ),
        ] {
            let e = load(server).unwrap_err();
            assert_eq!(e.key(), Some(key), "{server}: {e}");
        }
        let many = (0..65)
            .map(|i| format!("\"10.0.0.{i}\""))
            .collect::<Vec<_>>()
            .join(",");
        let e = load(&format!("trusted_proxies = [{many}]")).unwrap_err();
        assert_eq!(e.key(), Some("server.trusted_proxies"), "{e}");
    }

    #[test]
    fn a_fleet_without_instance_ids_is_noted_and_defaults_hold() {
        let c = load("trusted_proxies = [\"10.0.0.5/32\"]").unwrap();
        assert!(
            c.notes.iter().any(|n| n.starts_with("server.instance_id:")),
            "{:?}",
            c.notes
        );
        let f = &c.server.fleet;
        assert_eq!((f.instance_id, f.proxy_protocol), (None, false));
        assert_eq!(f.drain_grace, crate::limits::DEFAULT_DRAIN_GRACE);
        assert!(f.trusts("10.0.0.5".parse().unwrap()) && !f.trusts("10.0.0.6".parse().unwrap()));
        let c =
            load("instance_id = \"e1\"\nproxy_protocol = true\ntrusted_proxies = [\"10.0.0.5\"]")
                .unwrap();
        assert!(!c.notes.iter().any(|n| n.starts_with("server.instance_id:")));
        assert_eq!(
            c.server.fleet.instance_id.map(|i| i.to_string()),
            Some("e1".into())
        );
        // As check-config prints them: the same keys load back.
        let printed = super::printed(&c.server.fleet);
        assert!(
            printed.contains("trusted_proxies = [\"10.0.0.5/32\"]"),
            "{printed}"
        );
        let again = load(&printed).unwrap();
        assert_eq!(again.server.fleet, c.server.fleet, "{printed}");
    }

    #[test]
    fn the_state_key_file_is_a_secret_of_at_least_32_bytes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.key");
        std::fs::write(&p, "short\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = load(&format!("state_key_file = {p:?}")).unwrap_err();
        assert_eq!(e.key(), Some("server.state_key_file"));
        assert!(e.to_string().contains("5 bytes"), "{e}");
        std::fs::write(&p, "k".repeat(crate::limits::MAX_STATE_KEY_BYTES + 1)).unwrap();
        let e = load(&format!("state_key_file = {p:?}")).unwrap_err();
        assert_eq!(e.key(), Some("server.state_key_file"), "too long: {e}");
        std::fs::write(&p, format!("{}\n", "k".repeat(44))).unwrap();
        let c = load(&format!("state_key_file = {p:?}")).unwrap();
        let (path, key) = c.server.fleet.state_key.as_ref().unwrap();
        assert_eq!((path, key.expose().len()), (&p, 44), "trimmed");
        assert_eq!(format!("{key:?}"), "***");
    }

    #[test]
    fn blocks_hold_what_their_prefix_says() {
        let c = Cidr::parse("10.0.0.0/24").unwrap();
        assert!(c.contains("10.0.0.200".parse().unwrap()));
        assert!(!c.contains("10.0.1.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.0.0.7".parse().unwrap()), "mapped");
        assert!(!c.contains("fd00::1".parse().unwrap()));
        assert_eq!(
            Cidr::parse("127.0.0.5/24").unwrap().to_string(),
            "127.0.0.0/24"
        );
        assert_eq!(Cidr::parse("fd00::1/8").unwrap().to_string(), "fd00::/8");
        let one = Cidr::parse("127.0.0.1").unwrap();
        assert_eq!(one.to_string(), "127.0.0.1/32");
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        let mapped = Cidr::parse("::ffff:10.0.0.0/104").unwrap();
        assert_eq!(mapped.to_string(), "10.0.0.0/8");
        assert!(mapped.contains("10.1.2.3".parse().unwrap()));
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        for bad in [
            "10.0.0.1/33",
            "fd00::/129",
            "nope",
            "10.0.0.1/",
            "10.0.0.1/-1",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}
