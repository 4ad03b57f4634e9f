//! What the overlay's loopback tests share: free ports, node B's configuration, its
//! API served on a thread, and plain HTTP/1.1 requests.

#![allow(dead_code, unreachable_pub)]

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use mgrp_overlay::api::http;
use mgrp_overlay::config::Config;
use mgrp_overlay::node::Node;
use serde_json::Value;
use tokio::sync::watch;

/// A port nothing uses now, for TCP or UDP on any address, and that no other test of
/// this binary was given. It is probed by binding the IPv6 wildcard (which covers IPv4
/// too), as the servers bind: a probe on 127.0.0.1 alone could be handed a port a
/// connection of the host's own address holds. The kernel hands a released port out
/// again, so two tests running side by side could otherwise both be given one port.
/// Where a test can let the kernel choose (port 0) and read the port back, it does
/// that instead: a port released here can still be taken before it is bound.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = mgrp_rt::lock(&GIVEN);
    loop {
        let tcp = TcpListener::bind("[::]:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        let udp_free = UdpSocket::bind(("::", port)).is_ok();
        if udp_free && !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// B's configuration, measuring from A on `a_port`, with an optional token file.
pub fn b_config(a_port: u16, token_file: Option<&Path>) -> Config {
    let token = token_file.map_or(String::new(), |p| {
        format!("token-file = \"{}\"\n", p.display())
    });
    let toml = format!(
        "name = \"b\"\n{token}probe-port-base = {}\n[serve]\ntransports = []\n\
         [[link]]\nname = \"from-a\"\nfrom = \"127.0.0.1\"\nport = {a_port}\ntransport = \"udp\"\n\
         interval = \"2s\"\ntime-limit = \"5s\"\n",
        free_port()
    );
    Config::from_toml(&toml, None).unwrap()
}

/// B's API served on a thread; dropping it shuts the server down.
pub struct Api {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub node: Option<Node>,
}

impl Api {
    pub fn start(config: Config) -> Self {
        Self::start_with(config, mgrp_overlay::api::conns::ConnLimits::default())
    }

    /// [`Self::start`] with other connection bounds.
    pub fn start_with(config: Config, limits: mgrp_overlay::api::conns::ConnLimits) -> Self {
        let tls = config.tls.clone();
        let node = Node::start(config).unwrap();
        let (stop, shutdown) = watch::channel(false);
        let app = http::router(node.shared(), shutdown.clone());
        let (addr, thread) = serve_app(app, tls, limits, shutdown);
        Self {
            addr,
            stop,
            thread: Some(thread),
            node: Some(node),
        }
    }
}

/// Serves `app` on a loopback port of its own, on a thread of its own (over TLS with
/// `tls`), until `shutdown` turns true; its address and the thread.
pub fn serve_app(
    app: axum::Router,
    tls: Option<mgrp_overlay::api::tls::ServerTls>,
    limits: mgrp_overlay::api::conns::ConnLimits,
    mut shutdown: watch::Receiver<bool>,
) -> (SocketAddr, std::thread::JoinHandle<()>) {
    let std_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_listener.local_addr().unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            mgrp_overlay::api::tls::serve_with(listener, app, tls.as_ref(), limits, async move {
                let _ = shutdown.wait_for(|s| *s).await;
            })
            .await
            .unwrap();
        });
    });
    (addr, thread)
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(n) = self.node.take() {
            n.stop();
        }
    }
}

/// One request; returns the status and the body.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &str) -> (u16, String) {
    mgrp_testbed::http::request(&addr.to_string(), method, path, headers)
        .unwrap_or_else(|e| panic!("{method} {path}: {e:#}"))
}

/// The first value of a query-API answer.
pub fn first_value(body: &str) -> Option<f64> {
    let v: Value = serde_json::from_str(body).ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// A request whose answer is JSON; a `POST` carries the header the API asks of it.
pub fn json(addr: SocketAddr, method: &str, path: &str) -> (u16, Value) {
    let headers = if method == "POST" {
        "X-MGRP-Request: 1\r\n"
    } else {
        ""
    };
    let (status, body) = request(addr, method, path, headers);
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body:?}")),
    )
}

/// Node A: serves plain-UDP measurements on a port the kernel chooses; returns the
/// node and that port.
pub fn node_a() -> (Node, u16) {
    let node = node_a_on(0);
    let port = node.serving()[0].1.port();
    (node, port)
}

/// Node A on a given port (0: the kernel chooses).
pub fn node_a_on(port: u16) -> Node {
    let toml = format!("name = \"a\"\n[serve]\ntransports = [\"udp\"]\nudp-port = {port}\n");
    Node::start(Config::from_toml(&toml, None).unwrap()).unwrap()
}

/// Waits up to `within` for `f` to hold, looking every 50 ms.
pub fn eventually(within: std::time::Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < within {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

/// A folder of this test's files, removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(mgrp_testbed::unique(tag));
        std::fs::create_dir_all(&d).unwrap();
        Self(d)
    }

    /// Writes `text` to `name`, readable by its owner only.
    pub fn private(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An authority and a certificate it signed for 127.0.0.1, in `dir`: the
/// authority's certificate, the server's certificate and its key.
pub fn authority_and_server(dir: &Dir, tag: &str) -> (PathBuf, PathBuf, PathBuf) {
    let authority = mgrp_testbed::tls::Authority::new(&dir.0, tag).unwrap();
    let (cert, key) = authority.server(tag, "127.0.0.1").unwrap();
    (authority.ca_file.clone(), cert, key)
}

/// A node named `name` that measures nothing and serves nothing, its API over TLS
/// with `cert` and `key`, asking for the token in `token`.
pub fn tls_node(name: &str, cert: &Path, key: &Path, token: &Path) -> Config {
    let toml = format!(
        "name = \"{name}\"\ntoken-file = \"{}\"\ntls-cert = \"{}\"\ntls-key = \"{}\"\n[serve]\ntransports = []\n",
        token.display(),
        cert.display(),
        key.display()
    );
    Config::from_toml(&toml, None).unwrap()
}
