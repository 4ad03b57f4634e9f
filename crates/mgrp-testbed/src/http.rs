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
    exchange(addr, method, path, headers).map(|(status, _, body)| (status, body))
}

/// [`request`] that also returns the response's head (status line and headers).
pub fn exchange(
    addr: &str,
    method: &str,
    path: &str,
    headers: &str,
) -> anyhow::Result<(u16, String, String)> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("cannot connect to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n{headers}\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (status, body) =
        response(&text).with_context(|| format!("not an HTTP response: {text:?}"))?;
    let head = text.split_once("\r\n\r\n").map_or("", |(h, _)| h);
    Ok((status, head.to_string(), body))
}

/// Sends `text` as it is (a request with headers of the caller's choosing) and
/// returns the whole response.
pub fn raw(addr: &str, text: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("cannot connect to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(text.as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// [`request`] from a thread in `ns`.
pub fn request_in(
    ns: &Netns,
    addr: &str,
    method: &str,
    path: &str,
) -> anyhow::Result<(u16, String)> {
    exchange_in(ns, addr, method, path, "").map(|(status, _, body)| (status, body))
}

/// [`exchange`] from a thread in `ns`.
pub fn exchange_in(
    ns: &Netns,
    addr: &str,
    method: &str,
    path: &str,
    headers: &str,
) -> anyhow::Result<(u16, String, String)> {
    let (addr, method, path, headers) = (
        addr.to_string(),
        method.to_string(),
        path.to_string(),
        headers.to_string(),
    );
    ns.run(move || exchange(&addr, &method, &path, &headers))?
}

/// A response header's value (names compared without case).
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Runs `promtool check metrics` on an exposition in the Prometheus text format: its
/// complaints, if any (missing HELP or TYPE, bad names, counters without `_total`).
pub fn promtool_check_metrics(text: &str) -> anyhow::Result<()> {
    crate::packages::require(&["promtool"])?;
    let promtool = crate::packages::find("promtool").context("promtool")?;
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("promtool's stdin")?
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
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
