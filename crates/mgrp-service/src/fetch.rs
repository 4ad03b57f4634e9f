//! A mesh description read where `mesh` says (mgrpd and the overlay alike): a file,
//! or an `https://` URL fetched with one `GET`, the server's certificate checked
//! against `mesh-ca-file` and the URL's host, a bearer token when `mesh-token-file`
//! is given. Over HTTPS only: a description carries the members' public keys and
//! addresses, and whoever could change it in flight could point the node at hosts of
//! their choosing. No redirects are followed.

use std::net::{TcpStream, ToSocketAddrs as _};
use std::path::Path;
use std::time::Duration;

use crate::tls::ClientTls;

/// The largest description taken, bytes.
const MAX_DESCRIPTION: usize = 4 << 20;

/// How long connecting, and each read or write, may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Where a description is read from and how: `mesh` as given (a file, relative
/// paths from `dir`, or a URL), and for a URL the authority and the token file.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// The `mesh` setting.
    pub mesh: &'a str,
    /// `mesh-ca-file`.
    pub ca_file: Option<&'a Path>,
    /// `mesh-token-file`.
    pub token_file: Option<&'a Path>,
    /// The configuration file's directory, for relative paths.
    pub dir: Option<&'a Path>,
}

impl Source<'_> {
    /// The description's text, or why not (the file or URL named in it).
    pub fn read(&self) -> Result<String, String> {
        let in_dir = |p: &Path| match self.dir {
            Some(d) if p.is_relative() => d.join(p),
            _ => p.to_path_buf(),
        };
        if is_url(self.mesh) {
            let token = match self.token_file {
                Some(p) => Some(
                    crate::settings::read_token_file(p, self.dir)
                        .map_err(|e| e.0)?
                        .1,
                ),
                None => None,
            };
            let ca = self.ca_file.map(in_dir);
            return fetch(self.mesh, ca.as_deref(), token.as_deref());
        }
        if self.ca_file.is_some() || self.token_file.is_some() {
            return Err(
                "mesh-ca-file and mesh-token-file are for a mesh fetched over https://".into(),
            );
        }
        let p = in_dir(Path::new(self.mesh));
        std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    }
}

/// Whether `mesh` names a description to fetch rather than a file.
pub fn is_url(mesh: &str) -> bool {
    mesh.starts_with("https://") || mesh.starts_with("http://")
}

/// The host and port of `authority` (`host`, `host:port`, `[v6]`, `[v6]:port`).
fn host_port(authority: &str) -> Option<(String, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => 443,
            None => return None,
        };
        return Some((host.to_owned(), port));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) => Some((h.to_owned(), p.parse().ok()?)),
        None => Some((authority.to_owned(), 443)),
    }
}

/// The description at `url`, trusted through `ca`, asked for with `token`.
pub fn fetch(url: &str, ca: Option<&Path>, token: Option<&str>) -> Result<String, String> {
    let Some(rest) = url.strip_prefix("https://") else {
        return Err(format!(
            "{url}: fetch the description over https:// (it carries the members' public keys)"
        ));
    };
    let Some(ca) = ca else {
        return Err(format!(
            "{url}: give mesh-ca-file, the authority that signed its server's certificate"
        ));
    };
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
    let (host, port) = host_port(authority)
        .filter(|(h, _)| !h.is_empty())
        .ok_or_else(|| format!("{url}: no host and port in it"))?;
    let tls = ClientTls::load(ca, &host)?;
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| format!("{url}: cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{url}: {host} has no address"))?;
    let tcp =
        TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| format!("{url}: {addr}: {e}"))?;
    tcp.set_read_timeout(Some(TIMEOUT))
        .and_then(|()| tcp.set_write_timeout(Some(TIMEOUT)))
        .map_err(|e| e.to_string())?;
    crate::http::get(tls.wrap(tcp)?, authority, path, token, MAX_DESCRIPTION)
        .map_err(|e| format!("{url}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_read_whole_or_refused_before_anything_is_sent() {
        assert_eq!(
            host_port("[2001:db8::1]:8443"),
            Some(("2001:db8::1".into(), 8443))
        );
        assert_eq!(
            host_port("mesh.example.net"),
            Some(("mesh.example.net".into(), 443))
        );
        let e = fetch("http://mesh.example.net/mesh.toml", None, None).unwrap_err();
        assert!(e.contains("over https://"), "{e}");
        let e = fetch("https://mesh.example.net/mesh.toml", None, None).unwrap_err();
        assert!(e.contains("mesh-ca-file"), "{e}");
    }
}
