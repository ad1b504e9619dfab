//! A bounded reader of the HAProxy PROXY protocol header (PROXY protocol,
//! versions 1 and 2, haproxy.org proxy-protocol.txt, sections 2.1 and 2.2):
//! what a trusted load balancer (HAProxy `send-proxy` / `send-proxy-v2`)
//! sends first on a TCP connection to say whose connection it relays.
//!
//! [`read`] takes exactly one header off the socket and not one byte more:
//! the TLS ClientHello or HTTP request that follows on the same socket is
//! read later by rustls or hyper, so nothing may be read ahead into a buffer
//! of ours. It reads the 8 bytes both versions start with, then for v2 the
//! rest of the 16-byte fixed part and exactly the `len` bytes it announces,
//! and for v1 one byte at a time up to the line's `\n`.
//!
//! The bound: a v2 header is at most [`MAX_HEADER_BYTES`], and one whose
//! `len` says more is refused before the bytes after its fixed part are
//! read; a v1 line is at most 107 bytes (the spec's longest), and one with
//! no `\n` by then is refused after 107 bytes. The bytes go into one fixed
//! array of [`MAX_HEADER_BYTES`] in the future's state; nothing is
//! allocated. The caller bounds the time (a timeout around [`read`]).
//!
//! [`parse_v1`] and [`parse_v2`] are the pure parsers of a complete header.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use tokio::io::{AsyncRead, AsyncReadExt};
use ProxyHeaderError::{BadV1, BadV2, NotProxy, TooLong};

/// The most a header may take (v2's 16-byte fixed part + its length field's
/// bytes); more is refused. 16 + 520: v2 with the address block and some
/// TLVs; v1 is at most 107.
pub const MAX_HEADER_BYTES: usize = 536;

/// The longest v1 line, CRLF included (section 2.1: "PROXY UNKNOWN" with
/// two full IPv6 addresses and two 5-digit ports).
const V1_MAX: usize = 107;
/// The shortest v1 line: `PROXY UNKNOWN\r\n`.
const V1_MIN: usize = 15;
/// What every v1 line starts with.
const V1_PREFIX: &[u8; 6] = b"PROXY ";
/// v2's fixed part: the signature, version/command, family/protocol, `len`.
const V2_FIXED: usize = 16;
/// v2's 12-byte signature (section 2.2).
const V2_SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// What [`read`] reads before it knows the version.
const PEEK: usize = 8;

/// Whose connection this is, as the header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The client's address and port as the proxy saw them (v1 TCP4/TCP6, v2
    /// PROXY command with AF_INET/AF_INET6 over STREAM).
    Client(SocketAddr),
    /// No client address: v1 `UNKNOWN`, v2 `LOCAL` command (a proxy's own
    /// health check), or v2 PROXY with AF_UNSPEC/AF_UNIX or a non-STREAM
    /// protocol. The connection's own address stands.
    Local,
}

/// Why a connection's PROXY header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyHeaderError {
    /// The first bytes are neither `PROXY ` (v1) nor v2's signature.
    #[error("the connection did not start with a PROXY protocol header")]
    NotProxy,
    /// A v1 line that does not follow section 2.1.
    #[error("bad PROXY v1 header: {0}")]
    BadV1(&'static str),
    /// A v2 header that does not follow section 2.2.
    #[error("bad PROXY v2 header: {0}")]
    BadV2(&'static str),
    /// The header would take more than `max` bytes.
    #[error("the PROXY header is longer than {max} bytes")]
    TooLong {
        /// The bound: [`MAX_HEADER_BYTES`] for v2, 107 for v1.
        max: usize,
    },
    /// Reading failed, or the connection closed before the header ended
    /// ([`ErrorKind::UnexpectedEof`]).
    #[error("{}", IoMessage(*.0))]
    Io(ErrorKind),
}

/// The message of [`ProxyHeaderError::Io`].
struct IoMessage(ErrorKind);

impl std::fmt::Display for IoMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            ErrorKind::UnexpectedEof => {
                f.write_str("the connection closed inside the PROXY header")
            }
            other => write!(f, "reading the PROXY header failed: {other}"),
        }
    }
}

/// Reads exactly one header from `io` and nothing after it: 8 bytes first,
/// then for v2 the rest of the fixed part and exactly `len` bytes (refused
/// past [`MAX_HEADER_BYTES`] before they are read), for v1 7 more bytes and
/// then one byte at a time up to `\n` (at most 107 bytes in all).
pub async fn read<R: AsyncRead + Unpin>(io: &mut R) -> Result<Source, ProxyHeaderError> {
    let mut buf = [0u8; MAX_HEADER_BYTES];
    fill(io, &mut buf[..PEEK]).await?;
    if buf[..PEEK] == V2_SIG[..PEEK] {
        read_v2(io, &mut buf).await
    } else if buf.starts_with(V1_PREFIX) {
        read_v1(io, &mut buf).await
    } else {
        Err(NotProxy)
    }
}

/// v2 after its first 8 bytes (in `buf`): the fixed part, checked, then the
/// `len` bytes it announces.
async fn read_v2<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut [u8; MAX_HEADER_BYTES],
) -> Result<Source, ProxyHeaderError> {
    let (fixed, rest) = buf.split_at_mut(V2_FIXED);
    fill(io, &mut fixed[PEEK..]).await?;
    let mut head = [0u8; V2_FIXED];
    head.copy_from_slice(fixed);
    let len = v2_len(&head)?;
    let rest = rest.get_mut(..len).ok_or(TooLong {
        max: MAX_HEADER_BYTES,
    })?;
    fill(io, rest).await?;
    parse_v2(&head, rest)
}

/// v1 after its first 8 bytes (in `buf`): up to the shortest line's 15, then
/// one byte at a time until `\n` or 107 bytes.
async fn read_v1<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut [u8; MAX_HEADER_BYTES],
) -> Result<Source, ProxyHeaderError> {
    fill(io, &mut buf[PEEK..V1_MIN]).await?;
    if let Some(lf) = buf[..V1_MIN].iter().position(|&b| b == b'\n') {
        return parse_v1(&buf[..=lf]);
    }
    for n in V1_MIN..V1_MAX {
        fill(io, &mut buf[n..=n]).await?;
        if buf[n] == b'\n' {
            return parse_v1(&buf[..=n]);
        }
    }
    Err(TooLong { max: V1_MAX })
}

/// Fills `buf` from `io`, an early end being `Io(UnexpectedEof)`.
async fn fill<R: AsyncRead + Unpin>(io: &mut R, buf: &mut [u8]) -> Result<(), ProxyHeaderError> {
    match io.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) => Err(ProxyHeaderError::Io(e.kind())),
    }
}

/// Parses one whole v1 line, `line` ending in its `\r\n`
/// (`PROXY TCP4 <src> <dst> <sport> <dport>\r\n`, `PROXY UNKNOWN…\r\n`).
pub fn parse_v1(line: &[u8]) -> Result<Source, ProxyHeaderError> {
    if line.len() > V1_MAX {
        return Err(TooLong { max: V1_MAX });
    }
    let body = line.strip_prefix(V1_PREFIX).ok_or(NotProxy)?;
    let body = body
        .strip_suffix(b"\r\n")
        .ok_or(BadV1("the line does not end in CRLF"))?;
    if body.contains(&b'\n') {
        return Err(BadV1("a line feed inside the line"));
    }
    if body == b"UNKNOWN" || body.starts_with(b"UNKNOWN ") {
        return Ok(Source::Local);
    }
    let [family, src, dst, port, dport] = v1_fields(body)?;
    let ip = match family {
        b"TCP4" => v1_addrs::<Ipv4Addr>(src, dst)?,
        b"TCP6" => v1_addrs::<Ipv6Addr>(src, dst)?,
        _ => return Err(BadV1("the protocol is not TCP4, TCP6 or UNKNOWN")),
    };
    let port = v1_port(port)?;
    v1_port(dport)?;
    Ok(Source::Client(SocketAddr::new(ip, port)))
}

/// The five fields after `PROXY `, each non-empty, single spaces between.
fn v1_fields(body: &[u8]) -> Result<[&[u8]; 5], ProxyHeaderError> {
    let mut fields: [&[u8]; 5] = [&[]; 5];
    let mut n = 0;
    for field in body.split(|&b| b == b' ') {
        match fields.get_mut(n) {
            Some(slot) if !field.is_empty() => *slot = field,
            _ => return Err(BadV1("not six fields separated by single spaces")),
        }
        n += 1;
    }
    if n != fields.len() {
        return Err(BadV1("not six fields separated by single spaces"));
    }
    Ok(fields)
}

/// The source address of a v1 line, both addresses of the family `A`.
fn v1_addrs<A>(src: &[u8], dst: &[u8]) -> Result<IpAddr, ProxyHeaderError>
where
    A: std::str::FromStr + Into<IpAddr>,
{
    let parse = |f: &[u8]| {
        std::str::from_utf8(f)
            .ok()
            .and_then(|s| s.parse::<A>().ok())
            .ok_or(BadV1("an address that is not of the line's protocol"))
    };
    let ip = parse(src)?;
    parse(dst)?;
    Ok(ip.into())
}

/// A v1 port: decimal 0–65535, no sign, no leading zero ("0" alone is one).
fn v1_port(f: &[u8]) -> Result<u16, ProxyHeaderError> {
    const BAD: ProxyHeaderError = BadV1("a port that is not decimal 0-65535 without leading zeros");
    if f.is_empty() || f.len() > 5 || (f.len() > 1 && f.starts_with(b"0")) {
        return Err(BAD);
    }
    let mut n: u32 = 0;
    for &b in f {
        if !b.is_ascii_digit() {
            return Err(BAD);
        }
        n = n * 10 + u32::from(b - b'0');
    }
    u16::try_from(n).map_err(|_| BAD)
}

/// Parses a v2 header: its fixed part and the `len` bytes after it (the
/// address block, then TLVs, which are not read but must fit in `len`).
pub fn parse_v2(fixed: &[u8; 16], rest: &[u8]) -> Result<Source, ProxyHeaderError> {
    let len = v2_len(fixed)?;
    if rest.len() != len {
        return Err(BadV2("the bytes after the fixed part are not `len` long"));
    }
    if fixed[12] & 0x0f == 0 {
        return Ok(Source::Local);
    }
    let src = match fixed[13] {
        0x11 => v2_block::<4>(rest).map(|(ip, port)| (IpAddr::from(ip), port)),
        0x21 => v2_block::<16>(rest).map(|(ip, port)| (IpAddr::from(ip), port)),
        _ => return Ok(Source::Local),
    };
    let (ip, port) = src?;
    Ok(Source::Client(SocketAddr::new(ip, port)))
}

/// Checks a v2 fixed part (signature, version, command, family and
/// protocol, and that `len` fits the bound and the family's address block);
/// returns `len`.
fn v2_len(fixed: &[u8; 16]) -> Result<usize, ProxyHeaderError> {
    if fixed[..12] != V2_SIG[..] {
        return Err(NotProxy);
    }
    if fixed[12] >> 4 != 2 {
        return Err(BadV2("the version is not 2"));
    }
    let block = match (fixed[12] & 0x0f, fixed[13]) {
        (0, _) => 0,
        (1, 0x11) => 12,
        (1, 0x21) => 36,
        (1, 0x00 | 0x12 | 0x22 | 0x31 | 0x32) => 0,
        (1, _) => return Err(BadV2("an unknown address family or protocol")),
        _ => return Err(BadV2("the command is neither LOCAL nor PROXY")),
    };
    let len = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    if V2_FIXED + len > MAX_HEADER_BYTES {
        return Err(TooLong {
            max: MAX_HEADER_BYTES,
        });
    }
    if len < block {
        return Err(BadV2("the address block is shorter than the family needs"));
    }
    Ok(len)
}

/// The source address and port of an address block of two `N`-byte
/// addresses and two ports, the TLVs after it checked to fit.
fn v2_block<const N: usize>(rest: &[u8]) -> Result<([u8; N], u16), ProxyHeaderError> {
    const SHORT: ProxyHeaderError = BadV2("the address block is shorter than the family needs");
    let (src, after) = rest.split_first_chunk::<N>().ok_or(SHORT)?;
    let (_dst, after) = after.split_first_chunk::<N>().ok_or(SHORT)?;
    let (port, after) = after.split_first_chunk::<2>().ok_or(SHORT)?;
    let (_dport, mut tlvs) = after.split_first_chunk::<2>().ok_or(SHORT)?;
    while !tlvs.is_empty() {
        let (head, after) = tlvs
            .split_first_chunk::<3>()
            .ok_or(BadV2("a TLV runs past `len`"))?;
        let n = usize::from(u16::from_be_bytes([head[1], head[2]]));
        tlvs = after.get(n..).ok_or(BadV2("a TLV runs past `len`"))?;
    }
    Ok((*src, u16::from_be_bytes(*port)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const REQ: &[u8] = b"GET / HTTP/1.1\r\n";

    /// A v2 header: signature, `ver_cmd`, `fam`, `len` of `block`, `block`.
    fn v2(ver_cmd: u8, fam: u8, block: &[u8]) -> Vec<u8> {
        let len = u16::try_from(block.len()).unwrap().to_be_bytes();
        [&V2_SIG[..], &[ver_cmd, fam], &len, block].concat()
    }

    /// `parse_v2` on a whole header as bytes.
    fn parse(header: &[u8]) -> Result<Source, ProxyHeaderError> {
        let (fixed, rest) = header.split_first_chunk::<16>().unwrap();
        parse_v2(fixed, rest)
    }

    /// `read` on `input`, with what it left unread.
    async fn read_from(input: &[u8]) -> (Result<Source, ProxyHeaderError>, &[u8]) {
        let mut r = input;
        let got = read(&mut r).await;
        (got, r)
    }

    fn client(s: &str) -> Result<Source, ProxyHeaderError> {
        Ok(Source::Client(s.parse().unwrap()))
    }

    const TCP4_BLOCK: [u8; 12] = [192, 168, 0, 1, 10, 0, 0, 1, 0xd4, 0x31, 0x01, 0xbb];

    /// A v2 PROXY TCP4 header for 192.168.0.1:54321, `tlvs` after the block.
    fn tcp4(tlvs: &[u8]) -> Vec<u8> {
        v2(0x21, 0x11, &[&TCP4_BLOCK[..], tlvs].concat())
    }

    #[test]
    fn v2_tcp4_as_haproxy_sends_it() {
        let bytes = [
            0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, 0x21, 0x11,
            0x00, 0x0c, 0xc0, 0xa8, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x01, 0xd4, 0x31, 0x01, 0xbb,
        ];
        assert_eq!(bytes[..], v2(0x21, 0x11, &TCP4_BLOCK)[..]);
        assert_eq!(parse(&bytes), client("192.168.0.1:54321"));
    }

    #[test]
    fn v2_tcp6_gives_the_source() {
        let src: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let dst: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let block = [&src.octets()[..], &dst.octets(), &[0xff, 0xff, 0, 80]].concat();
        let want = client("[2001:db8::1]:65535");
        assert_eq!(parse(&v2(0x21, 0x21, &block)), want);
    }

    #[test]
    fn v2_tlvs_after_the_block_are_skipped_if_they_fit() {
        let tlvs = [1, 0, 2, b'h', b'2', 4, 0, 0, 5, 0, 1, 7];
        assert_eq!(parse(&tcp4(&tlvs)), client("192.168.0.1:54321"));
        let past = Err(BadV2("a TLV runs past `len`"));
        assert_eq!(parse(&tcp4(&[1, 0, 3, b'h'])), past);
        assert_eq!(parse(&tcp4(&[1, 0])), past);
    }

    #[test]
    fn v2_local_and_address_free_families_are_local() {
        assert_eq!(parse(&v2(0x20, 0x00, &[])), Ok(Source::Local));
        // LOCAL ignores the block and the family, whatever they hold.
        assert_eq!(parse(&v2(0x20, 0x11, &[1, 2, 3])), Ok(Source::Local));
        assert_eq!(parse(&v2(0x20, 0x45, &[0; 40])), Ok(Source::Local));
        assert_eq!(parse(&v2(0x21, 0x00, &[])), Ok(Source::Local));
        assert_eq!(parse(&v2(0x21, 0x00, &[9; 5])), Ok(Source::Local));
        assert_eq!(parse(&v2(0x21, 0x12, &TCP4_BLOCK)), Ok(Source::Local));
        assert_eq!(parse(&v2(0x21, 0x22, &[0; 36])), Ok(Source::Local));
        assert_eq!(parse(&v2(0x21, 0x31, &[0; 216])), Ok(Source::Local));
        assert_eq!(parse(&v2(0x21, 0x32, &[])), Ok(Source::Local));
    }

    #[test]
    fn v2_errors() {
        let mut sig = v2(0x21, 0x11, &TCP4_BLOCK);
        sig[11] = b'\r';
        assert_eq!(parse(&sig), Err(NotProxy));
        let version = BadV2("the version is not 2");
        assert_eq!(parse(&v2(0x11, 0x11, &TCP4_BLOCK)), Err(version.clone()));
        assert_eq!(parse(&v2(0x31, 0x11, &TCP4_BLOCK)), Err(version));
        let command = Err(BadV2("the command is neither LOCAL nor PROXY"));
        assert_eq!(parse(&v2(0x22, 0x11, &TCP4_BLOCK)), command);
        assert_eq!(parse(&v2(0x2f, 0x00, &[])), command);
        let short = Err(BadV2("the address block is shorter than the family needs"));
        assert_eq!(parse(&v2(0x21, 0x11, &TCP4_BLOCK[..11])), short);
        assert_eq!(parse(&v2(0x21, 0x21, &[0; 35])), short);
        assert_eq!(parse(&v2(0x21, 0x21, &TCP4_BLOCK)), short);
        let header = tcp4(&[]);
        let fixed = header.first_chunk::<16>().unwrap();
        let wrong = Err(BadV2("the bytes after the fixed part are not `len` long"));
        assert_eq!(parse_v2(fixed, &TCP4_BLOCK[..11]), wrong);
        assert_eq!(parse_v2(fixed, &[0; 13]), wrong);
        let too_long = Err(TooLong { max: 536 });
        assert_eq!(parse(&v2(0x21, 0x11, &[0; 521])), too_long);
        assert_eq!(parse(&v2(0x20, 0x00, &[0; 521])), too_long);
        let noop = [&[0x04, 0x01, 0xf9][..], &[0; 505]].concat();
        assert_eq!(parse(&tcp4(&noop)), client("192.168.0.1:54321"));
    }

    #[test]
    fn v2_every_family_byte() {
        let block = tcp4(&[&[0x04, 0x00, 21][..], &[0; 21]].concat()).split_off(16);
        for fam in 0..=255u8 {
            let got = parse(&v2(0x21, fam, &block));
            let want = match fam {
                0x11 => client("192.168.0.1:54321"),
                0x21 => client("[c0a8:1:a00:1:d431:1bb:400:1500]:0"),
                0x00 | 0x12 | 0x22 | 0x31 | 0x32 => Ok(Source::Local),
                _ => Err(BadV2("an unknown address family or protocol")),
            };
            assert_eq!(got, want, "{fam:#x}");
            assert_eq!(parse(&v2(0x20, fam, &block)), Ok(Source::Local));
        }
    }

    #[test]
    fn v1_lines() {
        let p = |s: &str| parse_v1(s.as_bytes());
        let tcp4 = p("PROXY TCP4 192.168.0.1 10.0.0.1 56324 443\r\n");
        assert_eq!(tcp4, client("192.168.0.1:56324"));
        let tcp6 = p("PROXY TCP6 2001:db8::1 ::1 0 65535\r\n");
        assert_eq!(tcp6, client("[2001:db8::1]:0"));
        let longest = "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff \
                       ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
        assert_eq!(longest.len(), 104);
        assert!(p(longest).is_ok());
        assert_eq!(p("PROXY UNKNOWN\r\n"), Ok(Source::Local));
        let worst = longest.replace("TCP6", "UNKNOWN");
        assert_eq!(worst.len(), 107);
        assert_eq!(p(&worst), Ok(Source::Local));
        assert_eq!(p("PROXY UNKNOWN what\rever\r\n"), Ok(Source::Local));
    }

    #[test]
    fn v1_errors() {
        let p = |s: &str| parse_v1(s.as_bytes());
        assert_eq!(p("PROXX TCP4 1.2.3.4 5.6.7.8 1 2\r\n"), Err(NotProxy));
        let crlf = Err(BadV1("the line does not end in CRLF"));
        assert_eq!(p("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"), crlf);
        assert_eq!(p("PROXY TCP4 1.2.3.4 5.6.7.8 1 2"), crlf);
        let lf = Err(BadV1("a line feed inside the line"));
        assert_eq!(p("PROXY UNKNOWN\n\r\n"), lf);
        let fields = Err(BadV1("not six fields separated by single spaces"));
        for line in [
            "PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
            "PROXY UNKNOWNx\r\n",
            "PROXY \r\n",
        ] {
            assert_eq!(p(line), fields, "{line:?}");
        }
        let family = Err(BadV1("the protocol is not TCP4, TCP6 or UNKNOWN"));
        assert_eq!(p("PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n"), family);
        assert_eq!(p("PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n"), family);
        let addr = Err(BadV1("an address that is not of the line's protocol"));
        for line in [
            "PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
            "PROXY TCP4 1.2.3.4 ::1 1 2\r\n",
            "PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
            "PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n",
            "PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n",
            "PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n",
            "PROXY TCP6 [::1] ::1 1 2\r\n",
        ] {
            assert_eq!(p(line), addr, "{line:?}");
        }
        let port = Err(BadV1(
            "a port that is not decimal 0-65535 without leading zeros",
        ));
        for ports in [
            "65536 1", "1 65536", "+80 1", "-1 1", "080 1", "1 00", "1 0x1", "1 999999",
        ] {
            let line = format!("PROXY TCP4 1.2.3.4 5.6.7.8 {ports}\r\n");
            assert_eq!(p(&line), port, "{line:?}");
        }
        let long = format!("PROXY UNKNOWN {}\r\n", "a".repeat(92));
        assert_eq!(long.len(), 108);
        assert_eq!(p(&long), Err(TooLong { max: 107 }));
    }

    #[tokio::test]
    async fn read_leaves_what_follows_the_header() {
        let lines: [&[u8]; 3] = [
            b"PROXY TCP4 192.168.0.1 10.0.0.1 56324 443\r\n",
            b"PROXY UNKNOWN\r\n",
            &tcp4(&[0x04, 0x00, 0x01, 0]),
        ];
        let want = [
            client("192.168.0.1:56324"),
            Ok(Source::Local),
            client("192.168.0.1:54321"),
        ];
        for (header, want) in lines.iter().zip(want) {
            let input = [header, REQ].concat();
            assert_eq!(read_from(&input).await, (want, REQ));
        }
        let local = v2(0x20, 0x00, &[1, 2, 3]);
        assert_eq!(read_from(&local).await, (Ok(Source::Local), &[][..]));
    }

    /// `read` on a stream written one byte at a time, with the rest read back.
    async fn read_trickled(input: &[u8]) -> (Result<Source, ProxyHeaderError>, Vec<u8>) {
        let (mut w, mut r) = tokio::io::duplex(1);
        let write = async move {
            for b in input {
                w.write_all(&[*b]).await.unwrap();
            }
        };
        let read = async {
            let got = read(&mut r).await;
            let mut after = Vec::new();
            r.read_to_end(&mut after).await.unwrap();
            (got, after)
        };
        tokio::join!(write, read).1
    }

    #[tokio::test]
    async fn read_takes_a_header_split_into_single_bytes() {
        let v1 = [&b"PROXY TCP6 2001:db8::1 ::1 443 8443\r\n"[..], REQ].concat();
        let got = read_trickled(&v1).await;
        assert_eq!(got, (client("[2001:db8::1]:443"), REQ.to_vec()));
        let v2 = [&tcp4(&[]), REQ].concat();
        let got = read_trickled(&v2).await;
        assert_eq!(got, (client("192.168.0.1:54321"), REQ.to_vec()));
    }

    #[tokio::test]
    async fn read_refuses_without_reading_on() {
        let eof = Err(ProxyHeaderError::Io(ErrorKind::UnexpectedEof));
        let header = tcp4(&[]);
        for cut in [0, 3, 8, 12, 16, 27] {
            assert_eq!(read_from(&header[..cut]).await, (eof.clone(), &[][..]));
        }
        let line = b"PROXY TCP4 192.168.0.1 10.0.0.1 56324 443\r\n";
        for cut in [5, 8, 14, 15, 30, line.len() - 1] {
            assert_eq!(read_from(&line[..cut]).await, (eof.clone(), &[][..]));
        }
        // `len` past the bound: refused after the fixed part, the rest unread.
        let long = v2(0x21, 0x11, &[0; 600]);
        let got = read_from(&long).await;
        assert_eq!(got, (Err(TooLong { max: 536 }), &long[16..]));
        let bad = [&v2(0x11, 0x11, &TCP4_BLOCK)[..], REQ].concat();
        let got = read_from(&bad).await;
        assert_eq!(got, (Err(BadV2("the version is not 2")), &bad[16..]));
        // v1 without a line feed within 107 bytes: 107 read, the rest left.
        let endless = [&b"PROXY UNKNOWN "[..], &[b'a'; 200]].concat();
        let got = read_from(&endless).await;
        assert_eq!(got, (Err(TooLong { max: 107 }), &endless[107..]));
        let http = [REQ, REQ].concat();
        assert_eq!(read_from(&http).await, (Err(NotProxy), &http[8..]));
    }

    #[test]
    fn messages() {
        let eof = ProxyHeaderError::Io(ErrorKind::UnexpectedEof).to_string();
        assert_eq!(eof, "the connection closed inside the PROXY header");
        let reset = ProxyHeaderError::Io(ErrorKind::ConnectionReset).to_string();
        assert_eq!(reset, "reading the PROXY header failed: connection reset");
        let not = "the connection did not start with a PROXY protocol header";
        assert_eq!(NotProxy.to_string(), not);
        let long = TooLong { max: 536 }.to_string();
        assert_eq!(long, "the PROXY header is longer than 536 bytes");
        let v2 = BadV2("the version is not 2").to_string();
        assert_eq!(v2, "bad PROXY v2 header: the version is not 2");
    }
}
