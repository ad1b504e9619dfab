//! How the CLI reaches a running gateway: its operator socket (every
//! route) or its TCP admin listener (read-only routes), found from `--url`,
//! the config file, the packaged socket path or the gateway's own `/status`.

use anyhow::Context;
use mcp_edge::config::Config;
use std::path::PathBuf;

/// The admin address a config file names. A file that does not validate
/// (say, after an edit the running gateway rejected) is still read for its
/// `server.admin_listen` (or its deprecated alias `metrics_listen`) alone,
/// so `status` works when it is needed most.
fn admin_listen(p: &std::path::Path) -> anyhow::Result<Option<std::net::SocketAddr>> {
    match Config::load(p) {
        Ok(c) => Ok(c.server.admin_listen),
        Err(e) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let raw: toml::Table = toml::from_str(&text)
                .map_err(|_| e)
                .context("invalid config")?;
            let server = raw.get("server");
            let (key, listen) = ["admin_listen", "metrics_listen"]
                .into_iter()
                .find_map(|k| Some((k, server?.get(k)?.as_str())))
                .unwrap_or(("admin_listen", None));
            eprintln!(
                "mcp-edge: note: {} does not validate; asking the admin listener it names",
                p.display()
            );
            match listen {
                Some("off") => Ok(None),
                Some(a) => {
                    Ok(Some(a.parse().with_context(|| {
                        format!("{}: server.{key} {a:?}", p.display())
                    })?))
                }
                None => Ok(Some(mcp_edge::limits::DEFAULT_ADMIN_LISTEN.parse()?)),
            }
        }
    }
}

/// Where the CLI asks a running gateway: its operator socket (every
/// route) and its TCP admin listener (read-only routes).
struct Targets {
    socket: Option<PathBuf>,
    tcp: Option<String>,
}

/// The operator socket well known from the packaged unit
/// (`RuntimeDirectory=mcp-edge`), tried when nothing else names one.
const PACKAGED_SOCKET: &str = "/run/mcp-edge/admin.sock";

/// `--url` (`unix:PATH` or an http URL), else `--config`'s
/// `server.admin_socket` and `server.admin_listen`, else the defaults.
fn targets(config: &Option<PathBuf>, url: Option<String>) -> anyhow::Result<Targets> {
    if let Some(u) = url {
        return Ok(match u.strip_prefix("unix:") {
            Some(p) => Targets {
                socket: Some(p.into()),
                tcp: None,
            },
            None if u.contains("://") => Targets {
                socket: None,
                tcp: Some(u),
            },
            None => Targets {
                socket: None,
                tcp: Some(format!("http://{u}")),
            },
        });
    }
    let (socket, tcp) = match config {
        Some(p) => {
            let socket = match Config::load(p) {
                Ok(c) => c.server.admin_socket,
                Err(e) => {
                    eprintln!("mcp-edge: note: {e:#}; looking for the operator socket elsewhere");
                    None
                }
            };
            (socket, admin_listen(p)?.map(|a| format!("http://{a}")))
        }
        None => (
            None,
            Some(format!("http://{}", mcp_edge::limits::DEFAULT_ADMIN_LISTEN)),
        ),
    };
    let packaged = Some(PathBuf::from(PACKAGED_SOCKET));
    let socket = socket
        .filter(|p| p.exists())
        .or(packaged.filter(|p| p.exists()));
    Ok(Targets { socket, tcp })
}

/// One request to a running gateway; returns the body. Actions that change
/// state go to the operator socket (found from the config, the packaged
/// path, or the gateway's own `/status`); reads go there too and fall back
/// to the TCP admin listener when the socket cannot be used.
pub(crate) fn admin(
    config: &Option<PathBuf>,
    url: Option<String>,
    method: &str,
    path: &str,
    json: Option<serde_json::Value>,
) -> anyhow::Result<String> {
    let t = targets(config, url)?;
    let body = json.map(|v| v.to_string()).unwrap_or_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut socket = t.socket.clone();
        if let (None, Some(base)) = (&socket, &t.tcp) {
            socket = discover_socket(base).await;
        }
        if let Some(p) = &socket {
            match ask(Via::Socket(p), method, path, &body).await {
                Ok(b) => return Ok(b),
                Err(e) if method != "GET" || t.tcp.is_none() => return Err(e),
                Err(e) => eprintln!("mcp-edge: note: {e:#}; asking the TCP admin listener"),
            }
        }
        match &t.tcp {
            Some(base) => ask(Via::Tcp(base), method, path, &body).await,
            None => anyhow::bail!("no operator socket found and server.admin_listen is \"off\": nothing to ask (pass --url unix:PATH)"),
        }
    })
}

/// The operator socket a running gateway names in its `/status`, if it
/// exists here.
async fn discover_socket(base: &str) -> Option<PathBuf> {
    let body = ask(Via::Tcp(base), "GET", "/status", "").await.ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let p = PathBuf::from(v["admin_socket"].as_str()?);
    p.exists().then_some(p)
}

/// How one request reaches the gateway.
enum Via<'a> {
    Socket(&'a std::path::Path),
    Tcp(&'a str),
}

/// One request over `via`; the body of a 2xx answer, else an error with
/// the answer's reason.
async fn ask(via: Via<'_>, method: &str, path: &str, body: &str) -> anyhow::Result<String> {
    use http_body_util::{BodyExt, Full};
    let timeout = mcp_edge::limits::ADMIN_CLIENT_TIMEOUT;
    let (place, host) = match &via {
        Via::Socket(p) => (
            format!("the operator socket {}", p.display()),
            "localhost".to_owned(),
        ),
        Via::Tcp(base) => (
            format!("the admin listener at {}{path}", base.trim_end_matches('/')),
            host_of(base),
        ),
    };
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, &host)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(bytes::Bytes::from(body.to_owned())))?;
    let exchange = async {
        let mut sender = match &via {
            Via::Socket(p) => handshake(tokio::net::UnixStream::connect(p).await?).await?,
            Via::Tcp(_) => handshake(tokio::net::TcpStream::connect(&host).await?).await?,
        };
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await?.to_bytes();
        anyhow::Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    };
    let (status, body) = tokio::time::timeout(timeout, exchange)
        .await
        .with_context(|| format!("{place}: no answer within {timeout:?}"))?
        .with_context(|| format!("cannot reach {place} (is the gateway running? the operator socket serves root and the gateway's user)"))?;
    if !status.is_success() {
        // A JSON answer's "error", else the text; upstream text made printable.
        let v: Option<serde_json::Value> = serde_json::from_str(&body).ok();
        let why = v
            .as_ref()
            .and_then(|v| v["error"].as_str())
            .unwrap_or(body.trim());
        anyhow::bail!(
            "{place}: HTTP {status}: {}",
            mcp_edge::logline::printable(why)
        );
    }
    Ok(body)
}

/// `host:port` of an http base URL: the `Host` header and the address connected to.
fn host_of(base: &str) -> String {
    let rest = base.split_once("://").map_or(base, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// An HTTP/1.1 connection over `io`, driven on the current runtime.
async fn handshake<S>(
    io: S,
) -> anyhow::Result<hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await?;
    #[allow(clippy::disallowed_methods)] // the CLI's one connection, on its own runtime
    tokio::spawn(conn);
    Ok(sender)
}
