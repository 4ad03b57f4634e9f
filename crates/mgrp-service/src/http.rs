//! One HTTP/1.1 `GET` over a stream already open (clear TCP, or TLS from
//! [`crate::tls::ClientTls`]): what route control asks of a member's API and what mgrpd
//! and the overlay fetch a mesh description with. The whole body of a 200, or why not.

use std::io::{Read, Write};

/// Asks `path` of `host` over `s` (with `token` as a bearer token) and reads the
/// answer: its body if it is a whole 200 of at most `limit` bytes in UTF-8.
pub fn get(
    mut s: impl Read + Write,
    host: &str,
    path: &str,
    token: Option<&str>,
    limit: usize,
) -> Result<String, String> {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    // One write: the request leaves whole, not a piece per formatted part.
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n");
    s.write_all(request.as_bytes())
        .and_then(|()| s.flush())
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    let head_room = 64 * 1024;
    let read = s
        .take(u64::try_from(limit.saturating_add(head_room)).unwrap_or(u64::MAX))
        .read_to_end(&mut raw);
    // A TLS peer that closes without close_notify still gave its whole answer when
    // its length (or its last chunk) says so.
    if let Err(e) = read
        && raw.is_empty()
    {
        return Err(e.to_string());
    }
    body(&raw, limit)
}

/// The body of the HTTP/1.1 answer `raw` if it is a whole 200 in UTF-8.
fn body(raw: &[u8], limit: usize) -> Result<String, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no answer (its head never ended)")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "an answer that is not text")?;
    let rest = &raw[end + 4..];
    let status = head.split("\r\n").next().unwrap_or_default();
    let code = status.split(' ').nth(1).unwrap_or_default();
    if code != "200" {
        return Err(format!("HTTP {code}"));
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
        dechunk(rest, limit)?
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
    if body.len() > limit {
        return Err(format!("an answer of more than {limit} bytes"));
    }
    String::from_utf8(body).map_err(|_| "an answer that is not UTF-8".to_owned())
}

/// A chunked body, whole (its last, empty chunk came).
fn dechunk(mut rest: &[u8], limit: usize) -> Result<Vec<u8>, String> {
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
        if rest.len() < size.saturating_add(2) || out.len().saturating_add(size) > limit {
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
        assert_eq!(body(ok, 100).unwrap(), "hello");
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n";
        assert_eq!(body(chunked, 100).unwrap(), "hello");
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
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nx",
                "cut short",
            ),
        ] {
            let e = body(raw, 100).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
        assert!(
            body(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 4)
                .unwrap_err()
                .contains("more than 4 bytes")
        );
    }
}
