//! Plain HTTP/1.1 requests for tests and benches of the HTTP services (the overlay's
//! API, Prometheus' query API, mgrpd's exporter), from the caller's namespace or
//! another one: one request per connection, the whole answer read.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::Context;

use crate::Netns;

/// One request to `addr` (`host:port`) with extra `headers` (each ending in `\r\n`):
/// the status and the body.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &str,
) -> anyhow::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("cannot connect to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: 0\r\n{headers}\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    response(&text).with_context(|| format!("not an HTTP response: {text:?}"))
}

/// [`request`] from a thread in `ns`.
pub fn request_in(
    ns: &Netns,
    addr: &str,
    method: &str,
    path: &str,
) -> anyhow::Result<(u16, String)> {
    let (addr, method, path) = (addr.to_string(), method.to_string(), path.to_string());
    ns.run(move || request(&addr, &method, &path, ""))?
}

/// The status and body of a whole HTTP/1.1 response (a chunked body put together).
pub fn response(text: &str) -> Option<(u16, String)> {
    let status = text.get(9..12)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    // Bodies of unknown length come chunked: keep the data, drop the chunk sizes.
    let body = if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body.split("\r\n")
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, c)| c)
            .collect()
    } else {
        body.to_string()
    };
    Some((status, body))
}

/// The query-API path of a PromQL expression.
pub fn promql_path(expr: &str) -> String {
    let q: String = expr
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!("/api/v1/query?query={q}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_read_whole_or_chunked() {
        assert_eq!(
            response("HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno"),
            Some((404, "no".into()))
        );
        assert_eq!(
            response(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
            ),
            Some((200, "abcde".into()))
        );
        assert_eq!(response("garbage"), None);
        assert_eq!(
            promql_path("up{a=\"b\"}"),
            "/api/v1/query?query=up%7Ba%3D%22b%22%7D"
        );
    }
}
