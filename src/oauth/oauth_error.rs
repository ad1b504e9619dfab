//! Why no token could be had ([`OAuthError`]): what callers, the
//! supervisor (parking, a retry floor) and metrics read of a failure.

use crate::limits;
use std::time::Duration;

/// Why no token could be had. The message names the reason, never a token.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OAuthError {
    /// The HTTP client could not be set up.
    #[error("OAuth set-up: {0}")]
    Setup(String),
    /// Discovery failed or found something unacceptable.
    #[error("authorization server discovery: {0}")]
    Discovery(String),
    /// An authorization server could not be reached or did not answer.
    #[error("authorization server unreachable: {0}")]
    Unreachable(String),
    /// The token endpoint is overloaded or down (429/5xx).
    #[error("token endpoint unavailable: {reason}")]
    Unavailable {
        /// What it answered.
        reason: String,
        /// Its `Retry-After`.
        retry_after: Option<Duration>,
    },
    /// The client's credentials were refused (`invalid_client`): parked
    /// until the secret or key file changes.
    #[error("the authorization server refused the client ({0}); parked until the secret or key file changes")]
    InvalidClient(String),
    /// The client's secret or key file could not be read or used (no
    /// request was sent): parked until the file changes.
    #[error("the client's secret or key cannot be used ({0}); parked until the file changes")]
    ClientFile(String),
    /// The authorization response of `mcp-edge login` was refused (state,
    /// iss, an error from the server, no code).
    #[error("login refused: {0}")]
    Login(String),
    /// The grant was refused (`invalid_grant`): parked until a login.
    #[error("the authorization server refused the grant ({0}); needs `mcp-edge login`")]
    InvalidGrant(String),
    /// An `authorization_code` upstream without tokens, or whose server
    /// asks for scopes only a person can grant.
    #[error("needs a login ({0}); run `mcp-edge login` for this upstream")]
    NeedsLogin(String),
    /// The upstream asks for scope that only a person can grant (an
    /// `authorization_code` upstream's step-up): this call fails; the
    /// scope is written to the token file for the next `mcp-edge login`.
    #[error("needs a login for more scope ({0:?}); run `mcp-edge login` for this upstream")]
    MoreScope(String),
    /// Another refusal of a token request.
    #[error("the token request was refused ({0})")]
    Refused(String),
    /// The answer could not be used.
    #[error("unusable answer from the authorization server: {0}")]
    BadAnswer(String),
    /// A renewal failed recently; the next is not before `retry_in`.
    #[error("no valid access token ({reason}); next token request in {}s", retry_in.as_secs_f64().ceil() as u64)]
    BackingOff {
        /// The last failure.
        reason: String,
        /// Until the next attempt.
        retry_in: Duration,
    },
    /// The token file could not be read or written.
    #[error("{0}")]
    Store(String),
    /// More scope was asked for than [`limits::OAUTH_STEP_UPS`] allows.
    #[error("the upstream keeps asking for more scope ({0}); given up after {n} step-ups", n = limits::OAUTH_STEP_UPS)]
    StepUpLimit(String),
}

impl OAuthError {
    /// True when only a change of credentials or a login can help (the
    /// supervisor parks the upstream).
    pub fn parks(&self) -> bool {
        matches!(
            self,
            OAuthError::InvalidClient(_)
                | OAuthError::ClientFile(_)
                | OAuthError::InvalidGrant(_)
                | OAuthError::NeedsLogin(_)
        )
    }

    /// How long no token request is worth trying: the authorization
    /// server's `Retry-After`, or what is left of the backoff delay.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            OAuthError::Unavailable { retry_after, .. } => *retry_after,
            OAuthError::BackingOff { retry_in, .. } => Some(*retry_in).filter(|d| !d.is_zero()),
            _ => None,
        }
    }

    /// The metric outcome label of a failed token request.
    pub(super) fn outcome(&self) -> &'static str {
        match self {
            OAuthError::InvalidClient(_) => "invalid_client",
            OAuthError::InvalidGrant(_) => "invalid_grant",
            OAuthError::Unavailable { .. } => "unavailable",
            OAuthError::Unreachable(_) => "unreachable",
            OAuthError::Discovery(_) => "discovery_failed",
            OAuthError::ClientFile(_) => "client_file",
            OAuthError::NeedsLogin(_) | OAuthError::MoreScope(_) => "needs_login",
            _ => "refused",
        }
    }
}
