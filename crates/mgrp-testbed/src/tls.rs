//! Certificates and an HTTPS server for tests of what speaks TLS as a client: an
//! authority that signs servers' certificates ([`Authority`]), and a server of one
//! document that asks for a bearer token ([`DocumentServer`]), as a mesh
//! description's server does. The server is blocking, in a thread of its own, on a
//! listener the test binds (in a namespace, if it likes).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Writes `text` to `dir/name`, readable by its owner only (keys, tokens).
pub fn private_file(dir: &Path, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let p = dir.join(name);
    std::fs::write(&p, text).with_context(|| format!("write {}", p.display()))?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))?;
    Ok(p)
}

/// A certificate authority of a test's own, its certificate in `ca_file`.
pub struct Authority {
    key: rcgen::KeyPair,
    cert: rcgen::Certificate,
    dir: PathBuf,
    /// The authority's certificate (PEM): what a client is told to trust.
    pub ca_file: PathBuf,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl Authority {
    /// A new authority, its files in `dir` named after `tag`.
    pub fn new(dir: &Path, tag: &str) -> anyhow::Result<Self> {
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key)?;
        let ca_file = private_file(dir, &format!("{tag}-ca.pem"), &cert.pem())?;
        Ok(Self {
            key,
            cert,
            dir: dir.to_path_buf(),
            ca_file,
        })
    }

    /// A server's certificate for `name` (a DNS name or an IP address) signed by this
    /// authority, and its key: two files named after `tag`.
    pub fn server(&self, tag: &str, name: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
        let key = rcgen::KeyPair::generate()?;
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])?
            .signed_by(&key, &self.cert, &self.key)?;
        Ok((
            private_file(&self.dir, &format!("{tag}-cert.pem"), &cert.pem())?,
            private_file(&self.dir, &format!("{tag}-key.pem"), &key.serialize_pem())?,
        ))
    }
}

/// Serves one document at one path over TLS, to requests that carry the bearer
/// token; anything else gets 404 or 401. The document can be changed while it
/// serves. Stops on drop.
pub struct DocumentServer {
    addr: SocketAddr,
    text: Arc<Mutex<String>>,
    served: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for DocumentServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DocumentServer")
            .field("addr", &self.addr)
            .field("served", &self.served())
            .finish_non_exhaustive()
    }
}

impl DocumentServer {
    /// Serves `text` at `path` on `listener` with the certificate and key in
    /// `cert` and `key` (PEM), to requests with `Authorization: Bearer {token}`.
    pub fn start(
        listener: TcpListener,
        cert: &Path,
        key: &Path,
        path: &str,
        token: &str,
        text: &str,
    ) -> anyhow::Result<Self> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)?
            .collect::<Result<_, _>>()
            .with_context(|| format!("{}", cert.display()))?;
        let key = PrivateKeyDer::from_pem_file(key)?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
        let config = Arc::new(config);
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let text = Arc::new(Mutex::new(text.to_owned()));
        let served = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (t, n, s) = (text.clone(), served.clone(), stop.clone());
        let (path, want) = (path.to_owned(), format!("Bearer {token}"));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let doc = mgrp_rt::lock(&t).clone();
                        if answer(stream, &config, &path, &want, &doc) {
                            n.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ok(Self {
            addr,
            text,
            served,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `text` from now on.
    pub fn set(&self, text: &str) {
        text.clone_into(&mut mgrp_rt::lock(&self.text));
    }

    /// How many times the document was served.
    pub fn served(&self) -> usize {
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for DocumentServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one connection; whether it served the document.
fn answer(
    stream: TcpStream,
    config: &Arc<rustls::ServerConfig>,
    path: &str,
    want: &str,
    doc: &str,
) -> bool {
    let Ok(conn) = rustls::ServerConnection::new(config.clone()) else {
        return false;
    };
    if stream.set_nonblocking(false).is_err()
        || stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .is_err()
    {
        return false;
    }
    let mut tls = rustls::StreamOwned::new(conn, stream);
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > 16 * 1024 {
            return false;
        }
    }
    let head = String::from_utf8_lossy(&head);
    let mut lines = head.split("\r\n");
    let asked = lines.next().unwrap_or_default().split(' ').nth(1) == Some(path);
    let authorized = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("authorization") && v.trim() == want
        })
    });
    let (status, body) = match (asked, authorized) {
        (false, _) => ("404 Not Found", ""),
        (true, false) => ("401 Unauthorized", ""),
        (true, true) => ("200 OK", doc),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let ok = tls.write_all(reply.as_bytes()).is_ok();
    tls.conn.send_close_notify();
    let _ = tls.flush();
    ok && asked && authorized
}
