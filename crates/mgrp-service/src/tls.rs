//! How the services speak TLS as clients — route control to a member's API (its
//! `ca-file`), mgrpd and the overlay to the server of a mesh description
//! (`mesh-ca-file`): rustls with the ring provider, TLS 1.2 and 1.3, the server's
//! certificate checked against the authority given and the name given. The overlay
//! serves its API with the same provider and PEM reading.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};

/// rustls with the ring provider, for both ends.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates in the PEM file `path`, at least one.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| format!("{}: {e} (a PEM file of certificates)", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// How one server is spoken to over TLS: the certificates that may have signed its
/// certificate, and the name it must carry.
#[derive(Clone)]
pub struct ClientTls {
    /// The authority's file (`ca-file`, `mesh-ca-file`).
    pub ca: PathBuf,
    name: ServerName<'static>,
    config: Arc<rustls::ClientConfig>,
}

impl PartialEq for ClientTls {
    fn eq(&self, other: &Self) -> bool {
        self.ca == other.ca && self.name == other.name
    }
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("ca", &self.ca)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Trusts the certificates in `ca` (PEM) for a server named `name`: a DNS name,
    /// or an IP address its certificate names.
    pub fn load(ca: &Path, name: &str) -> Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        for c in certificates(ca)? {
            roots.add(c).map_err(|e| format!("{}: {e}", ca.display()))?;
        }
        let name = ServerName::try_from(name.to_string())
            .map_err(|e| format!("{name:?} is not a DNS name or an IP address: {e}"))?;
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            ca: ca.to_path_buf(),
            name,
            config: Arc::new(config),
        })
    }

    /// The name the server's certificate must carry.
    pub fn name(&self) -> String {
        self.name.to_str().into_owned()
    }

    /// A TLS stream over `tcp`; the handshake happens on first use.
    pub fn wrap(&self, tcp: TcpStream) -> Result<impl Read + Write, String> {
        let conn = rustls::ClientConnection::new(self.config.clone(), self.name.clone())
            .map_err(|e| e.to_string())?;
        Ok(rustls::StreamOwned::new(conn, tcp))
    }
}
