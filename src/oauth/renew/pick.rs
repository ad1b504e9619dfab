//! What one token request sends, chosen from the config, the metadata
//! and the token file: the client id, its authentication, `scope` and
//! `resource`.

use super::super::discovery::{canonical_resource, Metadata};
use super::super::token::Credentials;
use super::super::OAuthError;
use super::Renewal;
use crate::config::{ClientAuth, OAuthConfig, Secret};

impl Renewal {
    /// The client id: configured, else the one the login registered (at
    /// this authorization server), else the CIMD URL.
    pub(super) fn client_id(&self, cfg: &OAuthConfig) -> Result<String, OAuthError> {
        cfg.client_id
            .clone()
            .or_else(|| {
                (!self.foreign)
                    .then(|| self.stored.client_id.clone())
                    .flatten()
            })
            .or_else(|| cfg.client_metadata_url.clone())
            .ok_or_else(|| OAuthError::NeedsLogin("no client id: not logged in yet".into()))
    }

    /// `scope`: configured, else what challenges asked (their union), else
    /// the resource's `scopes_supported`, else none. A refresh asks for
    /// scopes only to step up.
    pub(super) fn scope(&self, cfg: &OAuthConfig, meta: &Metadata) -> Option<String> {
        let mut list: Vec<String> = match (&cfg.scopes, self.asked.is_empty()) {
            (Some(s), _) => s.clone(),
            (None, false) => Vec::new(),
            (None, true) if self.stored.refresh_token.is_some() => return None,
            (None, true) => meta.scopes_supported.clone().unwrap_or_default(),
        };
        for a in &self.asked {
            if !list.contains(a) {
                list.push(a.clone());
            }
        }
        (!list.is_empty()).then(|| list.join(" "))
    }

    /// How the client authenticates: the configured secret (Basic unless
    /// the server allows only `client_secret_post`) or key, else what a
    /// registration gave.
    pub(super) fn credentials(
        &self,
        cfg: &OAuthConfig,
        meta: &Metadata,
    ) -> Result<Credentials, OAuthError> {
        let methods = meta.auth_methods.as_deref().unwrap_or(&[]);
        let allows = |m: &str| methods.iter().any(|x| x == m);
        match &cfg.auth {
            ClientAuth::Secret(p) => {
                let s = Secret::new(crate::config::read_secret(p).map_err(OAuthError::ClientFile)?);
                Ok(
                    if !allows("client_secret_basic") && allows("client_secret_post") {
                        Credentials::Post(s)
                    } else {
                        Credentials::Basic(s)
                    },
                )
            }
            ClientAuth::PrivateKey(p) => Ok(Credentials::Jwt(p.clone())),
            ClientAuth::None if self.foreign => Ok(Credentials::Public),
            ClientAuth::None => Ok(
                match (
                    &self.stored.client_secret,
                    self.stored.auth_method.as_deref(),
                ) {
                    (Some(s), Some("client_secret_post")) => {
                        Credentials::Post(Secret::new(s.clone()))
                    }
                    (Some(s), _) => Credentials::Basic(Secret::new(s.clone())),
                    (None, _) => Credentials::Public,
                },
            ),
        }
    }

    /// RFC 8707 `resource`: configured (`""` leaves it out), else the
    /// protected resource's own `resource`, else the upstream's URL.
    pub(super) fn resource(&self, cfg: &OAuthConfig, meta: &Metadata, url: &str) -> Option<String> {
        match cfg.resource.as_deref() {
            Some("") => None,
            Some(r) => Some(r.to_string()),
            None => Some(
                meta.resource
                    .clone()
                    .unwrap_or_else(|| canonical_resource(url)),
            ),
        }
    }
}
