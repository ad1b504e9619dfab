//! The commands that need no running gateway: `check-config`, `token new`
//! and `login` (an upstream's OAuth authorization-code login).

use anyhow::Context;
use mcp_edge::budget::{mib, Estimate};
use mcp_edge::config::{Board, Config};
use std::process::ExitCode;

/// `login NAME`: the upstream's authorization-code login
/// ([`mcp_edge::oauth::login`]), tokens to its token file.
pub(crate) fn login(config: Option<&std::path::Path>, name: &str, port: u16) -> anyhow::Result<()> {
    use mcp_edge::config::{Grant, Transport};
    let path = config.context("login needs --config FILE (the gateway's config)")?;
    let cfg = Config::load(path)?;
    let up = cfg
        .upstreams
        .iter()
        .find(|u| u.name == name)
        .with_context(|| format!("{}: no upstream named {name:?}", path.display()))?;
    let Transport::Http {
        url,
        oauth: Some(oauth),
        ..
    } = &up.transport
    else {
        anyhow::bail!("upstream {name:?} has no [upstream.oauth] table: nothing to log in to");
    };
    if oauth.grant != Grant::AuthorizationCode {
        anyhow::bail!("upstream {name:?} uses grant = \"{}\": the gateway gets its tokens itself, no login needed", oauth.grant.as_str());
    }
    let dir = cfg
        .server
        .state_directory
        .as_deref()
        .context("server.state_directory is not set: the tokens have nowhere to go")?;
    let store = mcp_edge::oauth::store::path(dir, name);
    let login = mcp_edge::oauth::login::Login {
        name,
        url,
        cfg: oauth,
        store: &store,
        port,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(login.run(&mut std::io::stdout()))
        .with_context(|| format!("login to upstream {name:?}"))
}

/// `check-config`: the resolved config, its worst-case heap, and the
/// board budget verdict.
pub(crate) fn check_config(file: &std::path::Path, board: Option<&str>) -> ExitCode {
    let board = match board.map(Board::named).transpose() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("mcp-edge: {e}");
            return ExitCode::FAILURE;
        }
    };
    let c = match Config::load_for(file, board.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-edge: invalid config: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", c.render_masked());
    let estimate = Estimate::of(&c);
    print!("\n{}", estimate.render());
    match &c.board {
        None => ExitCode::SUCCESS,
        Some(b) if estimate.total() <= b.heap_budget_bytes => {
            println!(
                "# board {}: worst case {} is within the heap budget {}",
                b.name,
                mib(estimate.total()),
                mib(b.heap_budget_bytes)
            );
            ExitCode::SUCCESS
        }
        Some(b) => {
            eprintln!(
                "mcp-edge: {}: the worst-case live heap {} exceeds the {} budget of board {}; lower the capacities above",
                file.display(),
                mib(estimate.total()),
                mib(b.heap_budget_bytes),
                b.name
            );
            ExitCode::FAILURE
        }
    }
}

/// Prefix of tokens made by `token new`, so a leaked one is recognisable.
const TOKEN_PREFIX: &str = "mcpe_";

/// `token new NAME`: a fresh token and the `[[client]]` lines for it. Exit 2
/// for a bad name, 1 when the system has no randomness to give.
pub(crate) fn token_new(name: &str) -> ExitCode {
    use base64::Engine;
    if let Err(m) = mcp_edge::config::check_client_name(name) {
        eprintln!("mcp-edge: token new: the client name {m}");
        return ExitCode::from(2);
    }
    let mut bytes = [0u8; mcp_edge::limits::CLIENT_TOKEN_BYTES];
    if let Err(e) = getrandom::fill(&mut bytes) {
        eprintln!("mcp-edge: token new: no system randomness: {e}");
        return ExitCode::FAILURE;
    }
    let token = format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let digest: String = mcp_edge::config::token_sha256(&token)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    println!("# token for client {name:?}: give it to the client, it is not stored anywhere.");
    println!("# The client sends:  Authorization: Bearer {token}");
    println!("{token}");
    println!();
    println!("[[client]]");
    println!("name = {name:?}");
    println!("token_sha256 = \"{digest}\"");
    ExitCode::SUCCESS
}
