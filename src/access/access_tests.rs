//! Tests of [`super`].

use super::*;
use crate::config::{Rate, Secret};

fn client(name: &str, credential: Credential) -> ClientConfig {
    ClientConfig {
        name: name.into(),
        credential,
        allow: None,
        deny: Vec::new(),
        rate: None,
        share: 1,
    }
}

fn token(name: &str, t: &str) -> ClientConfig {
    client(
        name,
        Credential::Token {
            sha256: Secret::new(sha256(t.as_bytes())),
            file: None,
        },
    )
}

fn access(clients: Vec<ClientConfig>) -> Access {
    let mut c = Config::embedded_default();
    c.clients = clients;
    Access::new(&c, Instant::now())
}

#[test]
fn without_clients_everyone_is_anonymous() {
    let a = access(vec![]);
    assert!(!a.required());
    assert_eq!(a.authenticate(None, None), Ok(Principal::Anonymous));
    assert_eq!(a.name(Principal::Anonymous), "-");
    assert_eq!(a.owner(Principal::Anonymous), 0);
}

#[test]
fn a_token_names_its_client_and_nothing_else_does() {
    let a = access(vec![
        token("a", "tok-a-0123456789"),
        token("b", "tok-b-0123456789"),
    ]);
    let auth = |h: &str| a.authenticate(Some(h.as_bytes()), None);
    assert_eq!(auth("Bearer tok-b-0123456789"), Ok(Principal::Client(1)));
    assert_eq!(auth("bearer  tok-a-0123456789 "), Ok(Principal::Client(0)));
    assert_eq!(auth("Bearer tok-c-0123456789"), Err(AuthError::Unknown));
    assert_eq!(auth("Basic dG9rLWE="), Err(AuthError::Malformed));
    assert_eq!(auth("Bearer"), Err(AuthError::Malformed));
    assert_eq!(a.authenticate(None, None), Err(AuthError::Missing));
    assert_ne!(a.owner(Principal::Client(0)), a.owner(Principal::Client(1)));
    assert_ne!(a.owner(Principal::Client(0)), 0);
}

#[test]
fn a_certificate_subject_matches_as_a_set() {
    let subject = |s: &[(&str, &str)]| {
        s.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    };
    let a = access(vec![
        token("t", "tok-t-0123456789"),
        client(
            "c",
            Credential::CertSubject(subject(&[("CN", "agent"), ("O", "Site")])),
        ),
    ]);
    let presented = subject(&[("O", "Site"), ("cn", "agent")]);
    assert_eq!(
        a.authenticate(None, Some(&presented)),
        Ok(Principal::Client(1))
    );
    let other = subject(&[("CN", "agent")]);
    assert_eq!(
        a.authenticate(None, Some(&other)),
        Err(AuthError::UnknownCertificate),
        "a subset is not the subject"
    );
    // An unmatched certificate still lets a token speak.
    let t = a.authenticate(Some(b"Bearer tok-t-0123456789"), Some(&other));
    assert_eq!(t, Ok(Principal::Client(0)));
}

#[test]
fn deny_wins_and_absent_allow_means_everything() {
    let p = Policy::new(
        Some(&["files__read_*".into(), "edge__*".into()]),
        &["edge__shell".into()],
    );
    assert!(p.allows("files__read_file"));
    assert!(p.allows("edge__status"));
    assert!(!p.allows("edge__shell"));
    assert!(!p.allows("files__write_file"));
    assert!(!p.is_open());
    let everything = Policy::new(None, &[]);
    assert!(everything.is_open() && everything.allows("anything"));
    let nothing = Policy::new(Some(&[]), &[]);
    assert!(!nothing.allows("edge__status"));
}

#[tokio::test(start_paused = true)]
async fn the_rate_is_a_bucket_with_a_burst_of_its_size() {
    let mut c = token("r", "tok-r-0123456789");
    c.rate = Some(Rate {
        count: 2,
        per: Duration::from_secs(1),
    });
    let a = access(vec![c, token("free", "tok-f-0123456789")]);
    let now = Instant::now();
    assert!(a.admit(Principal::Client(0), now).is_ok());
    assert!(a.admit(Principal::Client(0), now).is_ok());
    let wait = a.admit(Principal::Client(0), now).unwrap_err();
    assert_eq!(wait, Duration::from_millis(500));
    assert!(a.admit(Principal::Client(0), now + wait).is_ok());
    for _ in 0..100 {
        assert!(
            a.admit(Principal::Client(1), now).is_ok(),
            "no rate: no limit"
        );
    }
}

fn h(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut m = HeaderMap::new();
    for (k, v) in pairs {
        m.insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    m
}

#[test]
fn loopback_passes_foreign_fails() {
    let p = OriginPolicy::new(
        "127.0.0.1:8737".parse().unwrap(),
        &[],
        &["https://app.example".into()],
    );
    assert!(p.check(&h(&[("host", "127.0.0.1:8737")])).is_ok());
    assert!(p
        .check(&h(&[
            ("host", "localhost:1"),
            ("origin", "http://localhost:3000")
        ]))
        .is_ok());
    assert!(p.check(&h(&[("host", "[::1]:8737")])).is_ok());
    assert!(p.check(&h(&[("host", "evil.example")])).is_err());
    assert!(p
        .check(&h(&[
            ("host", "localhost"),
            ("origin", "http://evil.example")
        ]))
        .is_err());
    assert!(p
        .check(&h(&[
            ("host", "localhost"),
            ("origin", "https://app.example")
        ]))
        .is_ok());
    assert!(p
        .check(&h(&[("host", "localhost"), ("origin", "null")]))
        .is_err());
    assert!(p.check(&h(&[])).is_err());
}

#[test]
fn two_hosts_or_authorizations_are_malformed() {
    let p = OriginPolicy::new("127.0.0.1:8737".parse().unwrap(), &[], &[]);
    let uri: http::Uri = "/mcp".parse().unwrap();
    for name in ["host", "authorization"] {
        let mut m = h(&[("host", "localhost")]);
        m.append(name, "localhost".parse().unwrap());
        m.append(name, "evil.example".parse().unwrap());
        let e = p.check_head(&m, &uri).unwrap_err();
        assert!(
            matches!(
                e,
                HeadError::Malformed {
                    limit: "duplicate_header",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains(name), "{e}");
    }
    assert!(p.check_head(&h(&[("host", "localhost")]), &uri).is_ok());
}

#[test]
fn an_absolute_target_is_checked_as_host() {
    let p = OriginPolicy::new("127.0.0.1:8737".parse().unwrap(), &[], &[]);
    let evil: http::Uri = "http://evil.example:80/mcp".parse().unwrap();
    let e = p
        .check_head(&h(&[("host", "localhost")]), &evil)
        .unwrap_err();
    assert!(matches!(e, HeadError::Forbidden(_)), "{e}");
    let e = p.check_head(&h(&[]), &evil).unwrap_err();
    assert!(matches!(e, HeadError::Forbidden(_)), "{e}");
    let local: http::Uri = "http://127.0.0.1:8737/mcp".parse().unwrap();
    let e = p
        .check_head(&h(&[("host", "localhost:8737")]), &local)
        .unwrap_err();
    assert!(
        matches!(
            e,
            HeadError::Malformed {
                limit: "authority",
                ..
            }
        ),
        "{e}"
    );
    assert!(p
        .check_head(&h(&[("host", "127.0.0.1:8737")]), &local)
        .is_ok());
    assert!(p.check_head(&h(&[]), &local).is_ok());
}

#[test]
fn a_long_host_is_cut_in_the_reason() {
    let p = OriginPolicy::new("127.0.0.1:8737".parse().unwrap(), &[], &[]);
    let long = "e".repeat(8000);
    let why = p.check(&h(&[("host", &long)])).unwrap_err();
    assert!(why.len() < 400 && why.contains("[cut "), "{why}");
}

#[test]
fn allowed_hosts_extend_the_list() {
    let p = OriginPolicy::new("0.0.0.0:8737".parse().unwrap(), &["gw.local".into()], &[]);
    assert!(p.check(&h(&[("host", "GW.local:8737")])).is_ok());
    assert!(p.check(&h(&[("host", "other.local")])).is_err());
}
