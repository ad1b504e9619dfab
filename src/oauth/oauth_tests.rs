//! The renewal rules against a scripted token endpoint on a loopback
//! socket (real time, lifetimes of a second or two): one request for many
//! callers, rotation stored before use, backoff and parking that keep
//! their hands off the endpoint, a stored token used without a request.

use super::*;
use crate::config::{ClientAuth, Grant, OAuthConfig};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What the endpoint answers next.
#[derive(Clone)]
enum Reply {
    /// A token `at-N` of this lifetime, with this refresh token.
    Token(u64, Option<&'static str>),
    /// An error answer.
    Error(u16, &'static str, Option<u64>),
}

struct Fake {
    url: String,
    hits: Arc<AtomicUsize>,
    script: Arc<Mutex<VecDeque<Reply>>>,
    /// Bodies received.
    forms: Arc<Mutex<Vec<String>>>,
    /// Refresh tokens presented; one presented twice revokes the grant.
    used: Arc<Mutex<Vec<String>>>,
}

impl Fake {
    #[allow(clippy::disallowed_methods)] // the test server's accept loop, a task of the test runtime
    async fn start(script: Vec<Reply>) -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", listener.local_addr().unwrap());
        let fake = Fake {
            url,
            hits: Arc::default(),
            script: Arc::new(Mutex::new(script.into())),
            forms: Arc::default(),
            used: Arc::default(),
        };
        let (hits, script, forms, used) = (
            fake.hits.clone(),
            fake.script.clone(),
            fake.forms.clone(),
            fake.used.clone(),
        );
        tokio::spawn(async move {
            loop {
                let (sock, _) = listener.accept().await.unwrap();
                let (hits, script, forms, used) =
                    (hits.clone(), script.clone(), forms.clone(), used.clone());
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (hits, script, forms, used) =
                            (hits.clone(), script.clone(), forms.clone(), used.clone());
                        async move {
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let form = String::from_utf8_lossy(&body).to_string();
                            let n = hits.fetch_add(1, Ordering::SeqCst) + 1;
                            forms.lock().unwrap().push(form.clone());
                            let reply = script
                                .lock()
                                .unwrap()
                                .pop_front()
                                .unwrap_or(Reply::Token(60, None));
                            Ok::<_, std::convert::Infallible>(answer(n, &form, reply, &used))
                        }
                    });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(sock), svc),
                );
            }
        });
        fake
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

fn answer(
    n: usize,
    form: &str,
    reply: Reply,
    used: &Mutex<Vec<String>>,
) -> http::Response<Full<Bytes>> {
    let presented = form
        .split('&')
        .find_map(|kv| kv.strip_prefix("refresh_token="))
        .map(str::to_string);
    let reply = match presented {
        Some(r) if used.lock().unwrap().contains(&r) => Reply::Error(400, "invalid_grant", None),
        Some(r) => {
            used.lock().unwrap().push(r);
            reply
        }
        None => reply,
    };
    let (status, body, retry) = match reply {
        Reply::Token(life, refresh) => {
            let mut b = json!({"access_token": format!("at-{n}"), "token_type": "Bearer", "expires_in": life});
            if let Some(r) = refresh {
                b["refresh_token"] = r.into();
            }
            (200, b, None)
        }
        Reply::Error(status, e, retry) => (status, json!({"error": e}), retry),
    };
    let mut resp = http::Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if let Some(r) = retry {
        resp = resp.header("retry-after", r.to_string());
    }
    resp.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

fn config(token_endpoint: &str, secret: &std::path::Path) -> OAuthConfig {
    OAuthConfig {
        grant: Grant::ClientCredentials,
        client_id: Some("edge-box".into()),
        auth: ClientAuth::Secret(secret.to_path_buf()),
        client_metadata_url: None,
        scopes: None,
        token_endpoint: Some(token_endpoint.to_string()),
        resource: None,
    }
}

struct Setup {
    fake: Fake,
    dir: tempfile::TempDir,
    oauth: Arc<OAuth>,
}

async fn setup(script: Vec<Reply>) -> Setup {
    let fake = Fake::start(script).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "s3cret-value").unwrap();
    let cfg = config(&fake.url, &secret);
    let oauth = Arc::new(OAuth::new(
        "crm",
        "http://127.0.0.1:9/mcp",
        &cfg,
        Some(dir.path()),
        Duration::from_secs(3600),
    ));
    Setup { fake, dir, oauth }
}

fn bearer(h: &HeaderValue) -> &str {
    h.to_str().unwrap().strip_prefix("Bearer ").unwrap()
}

#[tokio::test]
async fn fifty_callers_share_one_token_request() {
    let s = setup(vec![Reply::Token(60, None)]).await;
    let calls = (0..50).map(|_| s.oauth.authorization());
    let got = futures_util::future::join_all(calls).await;
    for g in &got {
        assert_eq!(bearer(g.as_ref().unwrap().as_ref().unwrap()), "at-1");
    }
    assert_eq!(s.fake.hits(), 1);
    let form = s.fake.forms.lock().unwrap()[0].clone();
    assert!(form.contains("grant_type=client_credentials"), "{form}");
    assert!(
        form.contains("resource=http%3A%2F%2F127.0.0.1%3A9%2Fmcp"),
        "{form}"
    );
    assert!(
        !form.contains("s3cret"),
        "the secret goes in the Basic header: {form}"
    );
    let status = s.oauth.status().to_string();
    assert!(
        status.contains("\"valid\"") && !status.contains("at-1"),
        "{status}"
    );
}

#[tokio::test]
async fn a_rotated_refresh_token_is_stored_before_it_is_used() {
    let s = setup(vec![
        Reply::Token(2, Some("rt-1")),
        Reply::Token(2, Some("rt-2")),
        Reply::Token(60, Some("rt-3")),
    ])
    .await;
    assert_eq!(
        bearer(&s.oauth.authorization().await.unwrap().unwrap()),
        "at-1"
    );
    for want in ["at-2", "at-3"] {
        tokio::time::sleep(Duration::from_millis(2000)).await; // expired (at 1.8 s)
        let h = s.oauth.authorization().await.unwrap().unwrap();
        assert_eq!(bearer(&h), want);
    }
    let forms = s.fake.forms.lock().unwrap().clone();
    assert!(forms[1].contains("refresh_token=rt-1"), "{forms:?}");
    assert!(forms[2].contains("refresh_token=rt-2"), "{forms:?}");
    let file = std::fs::read_to_string(store::path(s.dir.path(), "crm")).unwrap();
    assert!(file.contains("\"rt-3\""), "{file}");
}

#[tokio::test]
async fn a_failed_renewal_keeps_the_token_in_hand_and_backs_off() {
    let s = setup(vec![
        Reply::Token(10, None),
        Reply::Error(503, "temporarily_unavailable", Some(30)),
    ])
    .await;
    let first = s.oauth.authorization().await.unwrap().unwrap();
    // Past three quarters (7.5 s), before it is taken as expired (9 s).
    tokio::time::sleep(Duration::from_millis(7700)).await;
    assert_eq!(
        s.oauth.authorization().await.unwrap().unwrap(),
        first,
        "still valid: used"
    );
    for _ in 0..100 {
        if s.oauth.status()["token"] == "backing_off" {
            break; // the background renewal failed
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.fake.hits(), 2);
    assert_eq!(s.oauth.authorization().await.unwrap().unwrap(), first);
    tokio::time::sleep(Duration::from_millis(1500)).await; // expired now
    let e = s.oauth.authorization().await.unwrap_err();
    assert!(
        matches!(e, OAuthError::BackingOff { retry_in, .. } if retry_in > Duration::from_secs(20)),
        "{e}"
    );
    assert_eq!(
        s.fake.hits(),
        2,
        "Retry-After honoured: no request meanwhile"
    );
    assert!(s.oauth.status()["token"]
        .as_str()
        .unwrap()
        .contains("backing_off"));
}

#[tokio::test]
async fn invalid_client_parks_until_the_secret_file_changes() {
    let s = setup(vec![Reply::Error(401, "invalid_client", None)]).await;
    let e = s.oauth.authorization().await.unwrap_err();
    assert!(
        matches!(e, OAuthError::InvalidClient(_)) && e.parks(),
        "{e}"
    );
    for _ in 0..3 {
        assert!(s.oauth.authorization().await.is_err());
    }
    assert_eq!(s.fake.hits(), 1, "parked: no more requests");
    assert!(s.oauth.status()["token"]
        .as_str()
        .unwrap()
        .starts_with("parked"));
    std::fs::write(s.dir.path().join("secret"), "the-right-one").unwrap();
    let h = s.oauth.authorization().await.unwrap().unwrap();
    assert_eq!(bearer(&h), "at-2");
}

#[tokio::test]
async fn a_401_renews_once_for_every_caller_that_sent_the_refused_token() {
    let s = setup(vec![]).await;
    let t1 = s.oauth.authorization().await.unwrap();
    let (a, b) = tokio::join!(
        s.oauth.unauthorized(t1.as_ref(), None),
        s.oauth.unauthorized(t1.as_ref(), None)
    );
    assert_eq!(bearer(&a.unwrap()), "at-2");
    assert_eq!(bearer(&b.unwrap()), "at-2");
    assert_eq!(s.fake.hits(), 2);
}

#[tokio::test]
async fn a_restart_with_a_valid_stored_token_asks_for_none() {
    let s = setup(vec![]).await;
    let before = s.oauth.authorization().await.unwrap().unwrap();
    let cfg = config(&s.fake.url, &s.dir.path().join("secret"));
    let again = Arc::new(OAuth::new(
        "crm",
        "http://127.0.0.1:9/mcp",
        &cfg,
        Some(s.dir.path()),
        Duration::from_secs(3600),
    ));
    assert_eq!(again.authorization().await.unwrap().unwrap(), before);
    assert_eq!(s.fake.hits(), 1);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(store::path(s.dir.path(), "crm"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

fn write_store(dir: &std::path::Path, s: &store::Stored) {
    store::save(&store::path(dir, "crm"), s).unwrap();
}

fn login_config(token_endpoint: &str) -> OAuthConfig {
    OAuthConfig {
        grant: Grant::AuthorizationCode,
        client_id: None,
        auth: ClientAuth::None,
        client_metadata_url: Some("https://site.example/mcp-edge.json".into()),
        scopes: None,
        token_endpoint: Some(token_endpoint.to_string()),
        resource: None,
    }
}

#[tokio::test]
async fn a_refused_step_up_fails_its_call_only_and_keeps_the_token() {
    let s = setup(vec![
        Reply::Token(60, None),
        Reply::Error(400, "invalid_scope", None),
    ])
    .await;
    let t1 = s.oauth.authorization().await.unwrap().unwrap();
    let c = Challenge {
        scope: Some("admin".into()),
        error: Some("insufficient_scope".into()),
        resource_metadata: None,
    };
    let e = s.oauth.insufficient_scope(Some(&t1), c).await.unwrap_err();
    assert!(matches!(e, OAuthError::Refused(_)) && !e.parks(), "{e}");
    assert_eq!(s.oauth.authorization().await.unwrap().unwrap(), t1, "kept");
    assert_eq!(s.oauth.status()["token"], "valid");
    let forms = s.fake.forms.lock().unwrap().clone();
    assert!(forms[1].contains("scope=admin"), "{forms:?}");
    assert_eq!(s.fake.hits(), 2);
}

#[tokio::test]
async fn a_refusal_met_by_the_background_renewal_parks_for_the_supervisor() {
    let s = setup(vec![
        Reply::Token(4, None),
        Reply::Error(401, "invalid_client", None),
    ])
    .await;
    s.oauth.authorization().await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(3100)).await; // due (3 s), valid (3.6 s)
    s.oauth.authorization().await.unwrap().unwrap(); // starts the renewal
    for _ in 0..100 {
        if s.oauth.status()["token"]
            .as_str()
            .unwrap()
            .starts_with("parked")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await; // expired
    let e = s.oauth.authorization().await.unwrap_err();
    assert!(e.parks(), "{e}");
    assert_eq!(s.fake.hits(), 2);
}

#[tokio::test]
async fn expires_in_is_bounded_both_ways() {
    let s = setup(vec![Reply::Token(0, None), Reply::Token(u64::MAX, None)]).await;
    for _ in 0..5 {
        s.oauth.authorization().await.unwrap().unwrap();
    }
    assert_eq!(s.fake.hits(), 1, "a zero lifetime is taken as the minimum");
    tokio::time::sleep(limits::OAUTH_MIN_LIFETIME).await;
    assert_eq!(
        bearer(&s.oauth.authorization().await.unwrap().unwrap()),
        "at-2"
    );
    let file = store::load(&store::path(s.dir.path(), "crm"))
        .unwrap()
        .unwrap();
    assert!(file.expires_at.unwrap() < u64::MAX / 2, "no overflow");
}

#[tokio::test]
async fn a_login_after_a_refused_registration_is_picked_up() {
    let fake = Fake::start(vec![Reply::Error(401, "invalid_client", None)]).await;
    let dir = tempfile::tempdir().unwrap();
    let stored = store::Stored {
        refresh_token: Some("rt".into()),
        client_id: Some("dyn-1".into()),
        client_secret: Some("sec".into()),
        token_endpoint: Some(fake.url.clone()),
        ..Default::default()
    };
    write_store(dir.path(), &stored);
    let cfg = login_config(&fake.url);
    let o = Arc::new(OAuth::new(
        "crm",
        "http://127.0.0.1:9/mcp",
        &cfg,
        Some(dir.path()),
        Duration::from_secs(3600),
    ));
    assert!(o.authorization().await.unwrap_err().parks());
    tokio::time::sleep(Duration::from_millis(20)).await;
    let now = unix(SystemTime::now());
    write_store(
        dir.path(),
        &store::Stored {
            access_token: Some("fresh".into()),
            issued_at: Some(now),
            expires_at: Some(now + 3600),
            client_id: Some("dyn-2".into()),
            ..stored
        },
    );
    tokio::time::sleep(limits::OAUTH_FILE_CHECK_PERIOD).await;
    assert_eq!(bearer(&o.authorization().await.unwrap().unwrap()), "fresh");
    assert_eq!(fake.hits(), 1);
}

#[tokio::test]
async fn a_client_id_metadata_document_client_refreshes() {
    let fake = Fake::start(vec![Reply::Token(60, Some("rt-2"))]).await;
    let dir = tempfile::tempdir().unwrap();
    let now = unix(SystemTime::now());
    write_store(
        dir.path(),
        &store::Stored {
            access_token: Some("old".into()),
            issued_at: Some(now - 100),
            expires_at: Some(now - 10),
            refresh_token: Some("rt-1".into()),
            token_endpoint: Some(fake.url.clone()),
            ..Default::default()
        },
    );
    let cfg = login_config(&fake.url);
    let o = Arc::new(OAuth::new(
        "crm",
        "http://127.0.0.1:9/mcp",
        &cfg,
        Some(dir.path()),
        Duration::from_secs(3600),
    ));
    assert_eq!(bearer(&o.authorization().await.unwrap().unwrap()), "at-1");
    let form = fake.forms.lock().unwrap()[0].clone();
    assert!(
        form.contains("client_id=https%3A%2F%2Fsite.example%2Fmcp-edge.json"),
        "{form}"
    );
    assert!(form.contains("refresh_token=rt-1"), "{form}");
}

#[tokio::test]
async fn after_failures_callers_fail_at_once_with_the_cause_and_a_token_wakes_the_waiter() {
    let s = setup(vec![Reply::Error(503, "temporarily_unavailable", None)]).await;
    let e = s.oauth.authorization().await.unwrap_err();
    assert!(matches!(e, OAuthError::Unavailable { .. }), "{e}");
    let e = s.oauth.authorization().await.unwrap_err();
    assert!(
        e.to_string().contains("HTTP 503"),
        "the cause, not a generic line: {e}"
    );
    assert_eq!(s.fake.hits(), 1);
    let waiter = {
        let o = s.oauth.clone();
        async move { o.token_ready().await }
    };
    let retry = async {
        tokio::time::sleep(limits::OAUTH_BACKOFF_INITIAL.mul_f64(1.3)).await;
        // Fails at once; the retry it starts gets a token on its own.
        assert!(s.oauth.authorization().await.is_err());
    };
    let (woke, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(10), waiter), retry);
    assert!(woke.is_ok(), "the waiter was woken by the token");
    assert_eq!(s.fake.hits(), 2);
    assert_eq!(
        bearer(&s.oauth.authorization().await.unwrap().unwrap()),
        "at-2"
    );
}

#[tokio::test]
async fn step_ups_stop_at_the_limit() {
    let s = setup(vec![]).await;
    let mut sent = s.oauth.authorization().await.unwrap().unwrap();
    let c = || Challenge {
        scope: Some("more".into()),
        error: Some("insufficient_scope".into()),
        resource_metadata: None,
    };
    for _ in 0..limits::OAUTH_STEP_UPS {
        sent = s.oauth.insufficient_scope(Some(&sent), c()).await.unwrap();
    }
    let e = s
        .oauth
        .insufficient_scope(Some(&sent), c())
        .await
        .unwrap_err();
    assert!(matches!(e, OAuthError::StepUpLimit(_)) && !e.parks(), "{e}");
    assert_eq!(
        s.fake.hits(),
        1 + limits::OAUTH_STEP_UPS as usize,
        "no request past the limit"
    );
}
