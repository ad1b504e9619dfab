//! What an upstream's credentials are, for its owner and `/status`: the
//! files a parked upstream watches, the OAuth client a replacement keeps,
//! the OAuth state shown.

use super::Upstream;
use crate::config::UpstreamConfig;
use std::sync::Arc;

impl Upstream {
    /// When each credential file it depends on was last modified
    /// (`bearer_token_file`; `[upstream.oauth]`'s secret or key file and its
    /// token file, which `mcp-edge login` writes): a parked upstream tries
    /// again when one changes.
    pub fn credential_mtimes(&self) -> Vec<Option<std::time::SystemTime>> {
        let mtime = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let crate::config::Transport::Http {
            bearer_token_file,
            oauth,
            ..
        } = &self.config.transport
        else {
            return Vec::new();
        };
        let mut files: Vec<&std::path::Path> =
            bearer_token_file.iter().map(|p| p.as_path()).collect();
        if let Some(o) = oauth {
            if let crate::config::ClientAuth::Secret(p) | crate::config::ClientAuth::PrivateKey(p) =
                &o.auth
            {
                files.push(p);
            }
        }
        if let Some(p) = self.oauth.as_ref().and_then(|o| o.store_path()) {
            files.push(p);
        }
        files.into_iter().map(mtime).collect()
    }

    /// Its OAuth client, for an upstream of config `c` that replaces it:
    /// kept when the URL and `[upstream.oauth]` are the same (its tokens,
    /// its renewal lock and its failure schedule go on).
    pub fn oauth_for(&self, c: &UpstreamConfig) -> Option<Arc<crate::oauth::OAuth>> {
        use crate::config::Transport::Http;
        match (&self.config.transport, &c.transport) {
            (
                Http {
                    url: a,
                    oauth: Some(x),
                    ..
                },
                Http {
                    url: b,
                    oauth: Some(y),
                    ..
                },
            ) if a == b && x == y && self.config.retry_after_cap == c.retry_after_cap => {
                self.oauth.clone()
            }
            _ => None,
        }
    }

    /// Its OAuth client's state for `/status` (grant, token state, valid
    /// until, last token request); `null` without `[upstream.oauth]`.
    pub fn oauth_status(&self) -> serde_json::Value {
        self.oauth
            .as_ref()
            .map_or(serde_json::Value::Null, |o| o.status())
    }
}
