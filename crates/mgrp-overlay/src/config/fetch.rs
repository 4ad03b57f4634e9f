//! A mesh description fetched over HTTPS (`mesh = "https://…"`): one `GET`, the
//! server's certificate checked against `mesh-ca-file` and the URL's host, a bearer
//! token when `mesh-token-file` is given. Over HTTPS only: a description carries the
//! members' public keys and addresses, and whoever could change it in flight could
//! point the node at hosts of their choosing. No redirects are followed.

use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::path::Path;
use std::time::Duration;

use mgrp_route::tls::ClientTls;

/// The largest description taken, bytes.
pub(super) const MAX_DESCRIPTION: usize = 4 << 20;

/// How long connecting, and each read or write, may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `mesh` names a description to fetch rather than a file.
pub(super) fn is_url(mesh: &str) -> bool {
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
pub(super) fn fetch(url: &str, ca: Option<&Path>, token: Option<&str>) -> Result<String, String> {
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
    let mut s = tls.wrap(tcp)?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/toml, text/plain, */*\r\n{auth}Connection: close\r\n\r\n"
    )
    .and_then(|()| s.flush())
    .map_err(|e| format!("{url}: {e}"))?;
    let mut raw = Vec::new();
    let limit = u64::try_from(MAX_DESCRIPTION + 64 * 1024).unwrap_or(u64::MAX);
    match s.take(limit).read_to_end(&mut raw) {
        Ok(_) => {}
        // A server that closes without TLS's close_notify: the body's length or its
        // last chunk says whether it all came.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(format!("{url}: {e}")),
    }
    body(&raw).map_err(|e| format!("{url}: {e}"))
}

/// The body of the HTTP/1.1 answer `raw` if it is a whole 200 in UTF-8.
fn body(raw: &[u8]) -> Result<String, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no answer (its head never ended)")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "an answer that is not text")?;
    let rest = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let code = status.split(' ').nth(1).unwrap_or_default();
    if code != "200" {
        return Err(format!("the server answered {status:?}"));
    }
    let header = |name: &str| {
        head.split("\r\n").skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    };
    let body = if header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if let Some(n) = header("content-length") {
        let n: usize = n
            .parse()
            .map_err(|_| "a content-length that is no number")?;
        if rest.len() < n {
            return Err(format!("{} of its {n} bytes came", rest.len()));
        }
        rest[..n].to_vec()
    } else {
        rest.to_vec()
    };
    if body.len() > MAX_DESCRIPTION {
        return Err(format!(
            "a description of more than {MAX_DESCRIPTION} bytes"
        ));
    }
    String::from_utf8(body).map_err(|_| "a description that is not UTF-8".to_owned())
}

/// A chunked body, whole (its last, empty chunk came).
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a chunk cut short")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).map_err(|_| "a bad chunk size")?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| "a bad chunk size")?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if rest.len() < size + 2 || out.len() + size > MAX_DESCRIPTION {
            return Err("a chunk cut short, or too much".into());
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_taken_whole_or_refused() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(body(ok).unwrap(), "hello");
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n";
        assert_eq!(body(chunked).unwrap(), "hello");
        for (raw, says) in [
            (&b"HTTP/1.1 404 Not Found\r\n\r\n"[..], "404"),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello",
                "5 of its 9",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n",
                "cut short",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n\xff\xfe",
                "UTF-8",
            ),
            (b"HTTP/1.1 200", "never ended"),
        ] {
            let e = body(raw).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
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
