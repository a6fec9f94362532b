//! HTTP/1.1 on one connection's socket: reading a request head (its path, or the status a
//! malformed one gets), noticing the client leave, and the bytes of a response.

use std::io;

use smol::io::AsyncReadExt;
use smol::net::TcpStream;

/// The longest request head the server reads before answering `431`.
const MAX_HEAD: usize = 16 * 1024;

/// A response to write.
pub(super) struct Answer {
    pub(super) status: u16,
    retry_after: Option<u64>,
    body: String,
}

impl Answer {
    pub(super) fn new(status: u16, retry_after: Option<u64>, body: impl Into<String>) -> Self {
        Self {
            status,
            retry_after,
            body: body.into(),
        }
    }

    /// The response, with `fields` (header lines, each ending in CRLF) among its headers.
    pub(super) fn to_http(&self, fields: &str) -> String {
        let Self {
            status,
            retry_after,
            body,
        } = self;
        let reason = match status {
            200 => "OK",
            400 => "Bad Request",
            429 => "Too Many Requests",
            431 => "Request Header Fields Too Large",
            503 => "Service Unavailable",
            _ => "Unknown",
        };
        let retry_after =
            retry_after.map_or_else(String::new, |secs| format!("Retry-After: {secs}\r\n"));
        format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             {retry_after}{fields}Connection: close\r\n\r\n{body}",
            body.len()
        )
    }
}

/// Reads a request head and returns its path, or the error status to answer with.
///
/// An `io::Error` (including end-of-file before the head is complete) means the client left.
pub(super) async fn read_request_path(stream: &mut TcpStream) -> io::Result<Result<String, u16>> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") {
        if head.len() > MAX_HEAD {
            return Ok(Err(431));
        }
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&chunk[..read]);
    }
    let line = head.split(|&byte| byte == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(_method), Some(path), Some(version), None)
            if path.starts_with('/') && version.starts_with("HTTP/1.") =>
        {
            Ok(Ok(path.to_owned()))
        }
        _ => Ok(Err(400)),
    }
}

/// Completes when the peer closes its side (end-of-file) or the connection fails.
///
/// Anything the client sends after the request head is read and ignored.
pub(super) async fn closed_by_peer(stream: &mut TcpStream) {
    let mut sink = [0; 512];
    while let Ok(1..) = stream.read(&mut sink).await {}
}
