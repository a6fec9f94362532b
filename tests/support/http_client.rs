//! A minimal HTTP/1.1 `GET` client for tests and examples: hyper 1.x over a real socket.
//!
//! - [`get_smol`]: smol's `async-net` socket through `smol-hyper`'s IO adapter. It needs no
//!   runtime of its own (async-io's reactor runs beside any executor), so it works under
//!   smol, `run_sync`, tokio or `futures::executor`.
//! - [`get_tokio`] (feature `tokio`): tokio's socket through `hyper-util`'s `TokioIo`, what a
//!   tokio application would write. It must run inside a tokio runtime.
//! - [`get`] picks `get_tokio` inside a tokio runtime (with the feature), `get_smol` elsewhere.
//!
//! Each call opens one connection for one request, with hyper's connection API
//! (`client::conn::http1`) rather than a pooled client: nothing is spawned, here or in
//! tollgate. The connection future (hyper's I/O driver) is polled together with the request
//! inside the returned future, so **dropping that future closes the TCP connection** at
//! once: a lost race or a timeout really hangs up, and the server sees it.
//!
//! # Example
//!
//! ```ignore
//! #[path = "../tests/support/http_client.rs"]
//! mod http_client;
//!
//! let page = http_client::get("http://127.0.0.1:8080/index.html").await?;
//! assert_eq!(page.status, 200);
//! ```

#![allow(dead_code)]

use std::fmt;
use std::io;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, Uri};

/// A response, read to the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// The status code, e.g. `200`.
    pub status: u16,
    /// The body, as text (invalid UTF-8 replaced).
    pub body: String,
}

/// Why a [`get`] failed.
#[derive(Debug)]
pub enum ClientError {
    /// The URL is not `http://host:port/path` (or `http://host/path`, port 80).
    Url(String),
    /// The TCP connection could not be made (refused, unreachable, ...).
    Connect(io::Error),
    /// The HTTP exchange failed (connection reset, malformed response, ...).
    Http(hyper::Error),
}

impl ClientError {
    /// Whether the host refused the connection.
    pub fn is_refused(&self) -> bool {
        matches!(self, Self::Connect(error) if error.kind() == io::ErrorKind::ConnectionRefused)
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Url(url) => write!(f, "unsupported url {url:?}"),
            Self::Connect(error) => write!(f, "connect failed: {error}"),
            Self::Http(error) => write!(f, "http error: {error}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Url(_) => None,
            Self::Connect(error) => Some(error),
            Self::Http(error) => Some(error),
        }
    }
}

impl From<hyper::Error> for ClientError {
    fn from(error: hyper::Error) -> Self {
        Self::Http(error)
    }
}

/// Fetches `url` with the client that fits the current runtime (see the module docs).
///
/// `url` is anything string-like; pass a `String` for a `'static` future (to spawn it).
///
/// # Errors
///
/// [`ClientError`] when the URL is unsupported, the connection fails or the exchange fails.
/// Any status, including `503`, is a [`Page`], not an error.
pub async fn get(url: impl AsRef<str>) -> Result<Page, ClientError> {
    #[cfg(feature = "tokio")]
    if tokio::runtime::Handle::try_current().is_ok() {
        return get_tokio(url).await;
    }
    get_smol(url).await
}

/// Fetches `url` over smol's `async-net` socket; works under any executor.
///
/// # Errors
///
/// As [`get`].
pub async fn get_smol(url: impl AsRef<str>) -> Result<Page, ClientError> {
    let target = Target::parse(url.as_ref())?;
    let stream = smol::net::TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(ClientError::Connect)?;
    exchange(smol_hyper::rt::FuturesIo::new(stream), target).await
}

/// Fetches `url` over tokio's socket; must run inside a tokio runtime.
///
/// # Errors
///
/// As [`get`].
///
/// # Panics
///
/// Outside a tokio runtime (tokio's socket needs its reactor).
#[cfg(feature = "tokio")]
pub async fn get_tokio(url: impl AsRef<str>) -> Result<Page, ClientError> {
    let target = Target::parse(url.as_ref())?;
    let stream = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(ClientError::Connect)?;
    exchange(hyper_util::rt::TokioIo::new(stream), target).await
}

/// Sends one `GET` over `io` and reads the whole response.
async fn exchange<I>(io: I, target: Target) -> Result<Page, ClientError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    let request = Request::get(target.path)
        .header(hyper::header::HOST, target.authority)
        .body(Empty::<Bytes>::new())
        .map_err(|_| ClientError::Url(target.url))?;
    let page = async move {
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        // `sender` drops here: hyper's connection then finishes once the exchange is done.
        Ok::<_, ClientError>(Page {
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    };
    // Poll the connection (reads and writes the socket) and the exchange together, on the
    // caller's task: no spawn. The page decides; a connection error after a complete
    // response (e.g. the server closing first) does not spoil it.
    let (page, _connection) = futures_lite::future::zip(page, connection).await;
    page
}

/// The parts of an `http://` URL the client needs.
#[derive(Debug)]
struct Target {
    url: String,
    host: String,
    port: u16,
    authority: String,
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Self, ClientError> {
        let invalid = || ClientError::Url(url.to_owned());
        let uri: Uri = url.parse().map_err(|_| invalid())?;
        if uri.scheme_str() != Some("http") {
            return Err(invalid());
        }
        let authority = uri.authority().ok_or_else(invalid)?;
        Ok(Self {
            url: url.to_owned(),
            host: authority.host().to_owned(),
            port: authority.port_u16().unwrap_or(80),
            authority: authority.as_str().to_owned(),
            path: uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |path| path.as_str().to_owned()),
        })
    }
}
