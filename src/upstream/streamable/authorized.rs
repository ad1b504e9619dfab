//! Sending one request to a streamable-HTTP upstream with its credentials:
//! the access token of an `[upstream.oauth]` upstream, asked anew after a
//! 401 or a 403 `insufficient_scope` (MCP authorization §Access Token
//! Usage, §Scope Challenge Handling).

use super::HttpConn;
use crate::logline::error_chain as chain;
use crate::upstream::SendError;
use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::Full;
use std::sync::Arc;

/// A copy of a request with a body that is one buffer (every request
/// mcp-edge sends upstream), for sending it again with a new token.
fn copy_request(req: &Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let mut again = Request::new(req.body().clone());
    *again.method_mut() = req.method().clone();
    *again.uri_mut() = req.uri().clone();
    *again.headers_mut() = req.headers().clone();
    again
}

/// What sends an HTTP upstream's requests: the client (its connection
/// pool) and, with `[upstream.oauth]`, where its access tokens come from.
/// Shared by the connection and, for the 2024-11-05 transport, the reader
/// of its stream ([`super::sse_wire`]).
pub(super) struct Sender {
    pub(super) client: super::HttpsClient,
    pub(super) oauth: Option<Arc<crate::oauth::OAuth>>,
    /// The URL as shown in errors (credentials masked).
    pub(super) shown_url: String,
}

impl HttpConn {
    /// [`Sender::authorized`] with this connection's sender.
    pub(super) fn authorized(
        &self,
        req: Request<Full<Bytes>>,
    ) -> impl std::future::Future<Output = Result<http::Response<hyper::body::Incoming>, SendError>> + '_
    {
        self.sender.authorized(req)
    }
}

impl Sender {
    /// Sends `req`, with the upstream's access token when it has
    /// `[upstream.oauth]` (MCP authorization §Access Token Usage); after a
    /// 401, or a 403 `insufficient_scope`, once more with a new token
    /// (§Scope Challenge Handling). Other answers are returned as they came.
    pub(super) fn authorized(
        &self,
        req: Request<Full<Bytes>>,
    ) -> impl std::future::Future<Output = Result<http::Response<hyper::body::Incoming>, SendError>> + '_
    {
        use futures_util::future::{Either, TryFutureExt};
        match &self.oauth {
            // Boxed: the token dance is large and only OAuth upstreams pay for it.
            Some(oauth) => Either::Left(Box::pin(self.with_token(oauth, req))),
            // Sent at once: the caller's future holds only hyper's.
            None => {
                let method = req.method().clone();
                Either::Right(
                    self.client
                        .request(req)
                        .map_err(move |e| self.transport(&method, e)),
                )
            }
        }
    }

    async fn with_token(
        &self,
        oauth: &Arc<crate::oauth::OAuth>,
        mut req: Request<Full<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, SendError> {
        let sent = oauth
            .authorization()
            .await
            .map_err(|e| SendError::OAuth(Box::new(e)))?;
        let mut again = copy_request(&req);
        if let Some(h) = &sent {
            req.headers_mut().insert(header::AUTHORIZATION, h.clone());
        }
        let method = req.method().clone();
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| self.transport(&method, e))?;
        let status = resp.status().as_u16();
        if status != 401 && status != 403 {
            return Ok(resp);
        }
        let challenge = crate::oauth::Challenge::parse(
            resp.headers()
                .get_all(header::WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok()),
        );
        let step_up = status == 403;
        let next = match (status, challenge) {
            (401, c) => oauth.unauthorized(sent.as_ref(), c).await,
            (_, Some(c)) if c.insufficient_scope() => {
                oauth.insufficient_scope(sent.as_ref(), c).await
            }
            _ => return Ok(resp),
        };
        let next = next.map_err(|e| SendError::OAuth(Box::new(e)))?;
        drop(resp);
        again.headers_mut().insert(header::AUTHORIZATION, next);
        let resp = (self.client.request(again).await).map_err(|e| self.transport(&method, e))?;
        if step_up && resp.status() == http::StatusCode::FORBIDDEN {
            // Still not enough scope: this call's refusal, not the
            // upstream's credentials (other tools keep working).
            return Err(SendError::Http {
                status: 403,
                rpc: None,
            });
        }
        Ok(resp)
    }

    fn transport(&self, method: &Method, e: hyper_util::client::legacy::Error) -> SendError {
        SendError::Transport(format!("{method} {}: {}", self.shown_url, chain(&e)))
    }
}
