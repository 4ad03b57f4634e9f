//! The API's certificate and key (`tls-cert`, `tls-key`), read and checked with the
//! configuration: rustls with the ring provider, as route control's client side
//! (`mgrp_service::tls`). `api::tls` serves with them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mgrp_service::tls::{certificates, provider};
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject as _;

/// The API's certificate and key: what serves it over TLS.
#[derive(Clone)]
pub struct ServerTls {
    /// The certificate chain's file and the key's.
    pub files: (PathBuf, PathBuf),
    pub(crate) config: Arc<rustls::ServerConfig>,
}

impl PartialEq for ServerTls {
    fn eq(&self, other: &Self) -> bool {
        self.files == other.files
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert", &self.files.0)
            .field("key", &self.files.1)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads the certificate chain (PEM) and its private key (PEM, a file only its
    /// owner may read).
    pub fn load(cert: &Path, key: &Path) -> Result<Self, String> {
        let certs = certificates(cert)?;
        let key_text = mgrp_service::secret::read_private(key, "TLS key file")?;
        let private = PrivateKeyDer::from_pem_slice(key_text.as_bytes())
            .map_err(|e| format!("{}: {e} (a PEM private key)", key.display()))?;
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(certs, private)
            .map_err(|e| {
                format!(
                    "{} and {}: {e} (is the key the certificate's?)",
                    cert.display(),
                    key.display()
                )
            })?;
        Ok(Self {
            files: (cert.to_path_buf(), key.to_path_buf()),
            config: Arc::new(config),
        })
    }
}
