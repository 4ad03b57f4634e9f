//! The API over TLS, on loopback (no root): a node with `tls-cert` and `tls-key`
//! answers route control's member poll (`mgrp_route::control::http_get`, the token
//! inside TLS) when the poller trusts the authority that signed its certificate, and
//! answers nobody in clear HTTP or under another authority; a client that never
//! finishes its handshake holds up no other.

mod common;

use std::io::Write as _;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt as _;

use common::{Api, Dir, authority_and_server, tls_node};
use mgrp_overlay::config::Config;
use mgrp_route::control::http_get;
use mgrp_service::tls::ClientTls;
use mgrp_views::link::Links;

#[test]
fn the_api_over_tls_answers_who_trusts_its_authority_and_nobody_in_clear() {
    let dir = Dir::new("mgrp-tls");
    let (ca, cert, key) = authority_and_server(&dir, "node");
    let (other_ca, _, _) = authority_and_server(&dir, "other");
    let token = "0123456789abcdef0123";
    let token_file = dir.private("token", token);
    let api = Api::start(tls_node("t", &cert, &key, &token_file));
    let trusted = ClientTls::load(&ca, "127.0.0.1").unwrap();

    let links: Links = http_get(api.addr, "/v1/links", Some(token), Some(&trusted)).unwrap();
    assert_eq!(links.node, "t");
    // The token is still asked for inside TLS.
    let e = http_get::<Links>(api.addr, "/v1/links", None, Some(&trusted)).unwrap_err();
    assert!(e.contains("HTTP 401"), "{e}");
    // Another authority's client refuses the certificate; a clear client gets no
    // HTTP answer.
    let stranger = ClientTls::load(&other_ca, "127.0.0.1").unwrap();
    let e = http_get::<Links>(api.addr, "/v1/links", Some(token), Some(&stranger)).unwrap_err();
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    // The API closes on the first bytes that are no TLS: the client finds no HTTP
    // head in what came back, or has its connection cut (reset, broken pipe) first.
    let e = http_get::<Links>(api.addr, "/v1/links", Some(token), None).unwrap_err();
    assert!(
        !e.contains(": HTTP "),
        "a clear client got an HTTP answer: {e}"
    );
    // A name the certificate does not carry is refused too.
    let wrong_name = ClientTls::load(&ca, "node.example").unwrap();
    assert!(http_get::<Links>(api.addr, "/v1/links", Some(token), Some(&wrong_name)).is_err());

    // Connections from one host that never finish a handshake hold up no other host,
    // and that host gets no more than its share of handshakes under way.
    let from_other_host = || {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(
            &"127.0.0.2:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
        s.connect(&api.addr.into()).unwrap();
        let mut s: TcpStream = s.into();
        s.write_all(&[0x16, 0x03, 0x01]).unwrap();
        s
    };
    let stalled: Vec<TcpStream> = (0..mgrp_overlay::api::tls::MAX_HANDSHAKES_PER_HOST)
        .map(|_| from_other_host())
        .collect();
    let mut one_more = from_other_host();
    one_more
        .set_read_timeout(Some(std::time::Duration::from_secs(3)))
        .unwrap();
    let closed = std::io::Read::read(&mut one_more, &mut [0u8; 16]);
    assert!(
        matches!(closed, Ok(0))
            || closed
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "a connection over the host's handshakes was not closed: {closed:?}"
    );
    let links: Links = http_get(api.addr, "/v1/links", Some(token), Some(&trusted)).unwrap();
    assert_eq!(links.node, "t");
    drop(stalled);
}

#[test]
fn tls_files_are_checked_when_the_configuration_is_read() {
    let dir = Dir::new("mgrp-tls-config");
    let (ca, cert, key) = authority_and_server(&dir, "node");
    let err = |toml: String| Config::from_toml(&toml, None).unwrap_err().to_string();
    let e = err(format!("tls-cert = \"{}\"\n", cert.display()));
    assert!(e.contains("go together"), "{e}");
    // A key others may read is refused, as token and key files are.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = err(format!(
        "tls-cert = \"{}\"\ntls-key = \"{}\"\n",
        cert.display(),
        key.display()
    ));
    assert!(e.contains("chmod 600"), "{e}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    // A key that is not the certificate's.
    let (_, _, other_key) = authority_and_server(&dir, "other");
    let e = err(format!(
        "tls-cert = \"{}\"\ntls-key = \"{}\"\n",
        cert.display(),
        other_key.display()
    ));
    assert!(e.contains("tls-cert/tls-key"), "{e}");
    // A member's token never crosses the network in clear.
    let token = dir.private("member-token", "0123456789abcdef0123");
    let member = |extra: &str| {
        format!(
            "[routing]\naddress = \"10.0.0.1\"\ntun = \"mgrp0\"\n\
             [[routing.member]]\nname = \"m\"\naddress = \"10.0.0.2\"\ntoken-file = \"{}\"\n{extra}",
            token.display()
        )
    };
    let e = err(member(""));
    assert!(e.contains("in clear") && e.contains("ca-file"), "{e}");
    let ok = Config::from_toml(
        &member(&format!(
            "ca-file = \"{}\"\ntls-name = \"127.0.0.1\"\n",
            ca.display()
        )),
        None,
    );
    assert!(ok.is_ok(), "{ok:?}");
}
