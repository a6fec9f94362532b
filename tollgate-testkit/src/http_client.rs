//! A minimal HTTP/1.1 `GET` client for tests and examples: hyper 1.x over a real socket.
//!
//! - [`get_smol`]: smol's `async-net` socket through `smol-hyper`'s IO adapter. It needs no
//!   runtime of its own (async-io's reactor runs beside any executor), so it works under
//!   smol, `run_sync`, tokio or `futures::executor`.
//! - [`get_tokio`]: tokio's socket through `hyper-util`'s `TokioIo`, what a tokio application
//!   would write. It must run inside a tokio runtime.
//! - [`get`] picks `get_tokio` inside a tokio runtime, `get_smol` elsewhere. (Tests run on
//!   tokio only with tollgate's `tokio` feature, which this crate cannot see: it asks tokio
//!   whether a runtime is current instead.)
//! - [`get_ok`]: [`get`], then any status but `2xx` as [`ClientError::Status`], with the
//!   server's `Retry-After` (a delay in seconds or an HTTP date, see [`parse_retry_after`])
//!   read into [`ClientError::retry_after`]: what a retry policy needs to wait as told.
//! - [`get_response`]: as [`get`], with the status and every header field on the `http`
//!   crate's types ([`Response`]): what `tollgate::http::outcome` reads.
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
//! use tollgate_testkit::http_client;
//!
//! let page = http_client::get("http://127.0.0.1:8080/index.html").await?;
//! assert_eq!(page.status, 200);
//!
//! match http_client::get_ok("http://127.0.0.1:8080/index.html").await {
//!     Ok(body) => println!("{body}"),
//!     Err(error) => println!("status {:?}, try again after {:?}", error.status(), error.retry_after()),
//! }
//! ```

use std::fmt;
use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{HeaderMap, Request, StatusCode, Uri};

/// A response, read to the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// The status code, e.g. `200`.
    pub status: u16,
    /// The `Retry-After` header, if there is one and it parses (see [`parse_retry_after`]).
    pub retry_after: Option<Duration>,
    /// The body, as text (invalid UTF-8 replaced).
    pub body: String,
}

impl Page {
    /// The page itself for a `2xx` status, [`ClientError::Status`] for any other.
    ///
    /// # Errors
    ///
    /// [`ClientError::Status`] with the status and `Retry-After` when the status is not `2xx`.
    pub fn error_for_status(self) -> Result<Self, ClientError> {
        if (200..300).contains(&self.status) {
            Ok(self)
        } else {
            Err(ClientError::Status {
                status: self.status,
                retry_after: self.retry_after,
            })
        }
    }
}

/// A response with its header fields, read to the end, from [`get_response`].
#[derive(Clone, Debug)]
pub struct Response {
    /// The status.
    pub status: StatusCode,
    /// Every header field.
    pub headers: HeaderMap,
    /// The body, as text (invalid UTF-8 replaced).
    pub body: String,
}

impl From<Response> for Page {
    fn from(response: Response) -> Self {
        let retry_after = response
            .headers
            .get(hyper::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(parse_retry_after);
        Self {
            status: response.status.as_u16(),
            retry_after,
            body: response.body,
        }
    }
}

/// Why a [`get`] or [`get_ok`] failed.
#[derive(Debug)]
pub enum ClientError {
    /// The URL is not `http://host:port/path` (or `http://host/path`, port 80).
    Url(String),
    /// The TCP connection could not be made (refused, unreachable, ...).
    Connect(io::Error),
    /// The HTTP exchange failed (connection reset, malformed response, ...).
    Http(hyper::Error),
    /// The server answered with a status other than `2xx` (only from [`get_ok`] and
    /// [`Page::error_for_status`]; [`get`] returns every status as a [`Page`]).
    Status {
        /// The status code, e.g. `429`.
        status: u16,
        /// How long the server asked the client to wait (its `Retry-After`), if it did.
        retry_after: Option<Duration>,
    },
}

impl ClientError {
    /// Whether the host refused the connection.
    pub fn is_refused(&self) -> bool {
        matches!(self, Self::Connect(error) if error.kind() == io::ErrorKind::ConnectionRefused)
    }

    /// The status of a [`ClientError::Status`]; `None` for other errors.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The server's `Retry-After` of a [`ClientError::Status`]; `None` for other errors or
    /// when the server did not say.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Url(url) => write!(f, "unsupported url {url:?}"),
            Self::Connect(error) => write!(f, "connect failed: {error}"),
            Self::Http(error) => write!(f, "http error: {error}"),
            Self::Status {
                status,
                retry_after: Some(delay),
            } => write!(f, "status {status}, retry after {delay:?}"),
            Self::Status { status, .. } => write!(f, "status {status}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Url(_) | Self::Status { .. } => None,
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
    get_response(url).await.map(Page::from)
}

/// Fetches `url` as [`get`] does, keeping the status and the header fields on the `http`
/// crate's types.
///
/// # Errors
///
/// As [`get`].
pub async fn get_response(url: impl AsRef<str>) -> Result<Response, ClientError> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return response_tokio(url.as_ref()).await;
    }
    response_smol(url.as_ref()).await
}

/// Fetches `url` with [`get`] and returns the body of a `2xx` answer.
///
/// # Errors
///
/// As [`get`], and [`ClientError::Status`] (with the status and the server's `Retry-After`)
/// for any other status.
pub async fn get_ok(url: impl AsRef<str>) -> Result<String, ClientError> {
    Ok(get(url).await?.error_for_status()?.body)
}

/// Fetches `url` over smol's `async-net` socket; works under any executor.
///
/// # Errors
///
/// As [`get`].
pub async fn get_smol(url: impl AsRef<str>) -> Result<Page, ClientError> {
    response_smol(url.as_ref()).await.map(Page::from)
}

async fn response_smol(url: &str) -> Result<Response, ClientError> {
    let target = Target::parse(url)?;
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
pub async fn get_tokio(url: impl AsRef<str>) -> Result<Page, ClientError> {
    response_tokio(url.as_ref()).await.map(Page::from)
}

async fn response_tokio(url: &str) -> Result<Response, ClientError> {
    let target = Target::parse(url)?;
    let stream = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(ClientError::Connect)?;
    exchange(hyper_util::rt::TokioIo::new(stream), target).await
}

/// Sends one `GET` over `io` and reads the whole response.
async fn exchange<I>(io: I, target: Target) -> Result<Response, ClientError>
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
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        // `sender` drops here: hyper's connection then finishes once the exchange is done.
        Ok::<_, ClientError>(Response {
            status: parts.status,
            headers: parts.headers,
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

/// Reads a `Retry-After` value: delta-seconds (`"120"`) or an HTTP date in the IMF-fixdate
/// form (`"Sun, 06 Nov 1994 08:49:37 GMT"`), a date being turned into the time left until
/// then (zero if it is past). `None` for anything else, including the obsolete date forms.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    parse_retry_after_at(value, SystemTime::now())
}

/// [`parse_retry_after`] with `now` as the current time.
pub fn parse_retry_after_at(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|byte| byte.is_ascii_digit()) {
        return value.parse().ok().map(Duration::from_secs);
    }
    let at = UNIX_EPOCH + Duration::from_secs(parse_imf_fixdate(value)?);
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Seconds since the Unix epoch of an IMF-fixdate, `"Sun, 06 Nov 1994 08:49:37 GMT"`
/// (RFC 9110, section 5.6.7). The weekday is checked for form, not against the date.
fn parse_imf_fixdate(value: &str) -> Option<u64> {
    const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let number = |text: &str, digits: usize| -> Option<u64> {
        (text.len() == digits && text.bytes().all(|byte| byte.is_ascii_digit()))
            .then(|| text.parse().ok())
            .flatten()
    };
    let (weekday, rest) = value.split_once(", ")?;
    let mut parts = rest.split(' ');
    let (day, month, year, time, zone) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if !WEEKDAYS.contains(&weekday) || zone != "GMT" || parts.next().is_some() {
        return None;
    }
    let day = number(day, 2)?;
    let month = MONTHS.iter().position(|name| *name == month)? as u64 + 1;
    let year = number(year, 4)?;
    let mut clock = time.split(':');
    let (hour, minute, second) = (
        number(clock.next()?, 2)?,
        number(clock.next()?, 2)?,
        number(clock.next()?, 2)?,
    );
    if clock.next().is_some() || year < 1970 || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if day == 0 || day > month_days[month as usize - 1] {
        return None;
    }
    let leap_years_before = |year: u64| (year - 1) / 4 - (year - 1) / 100 + (year - 1) / 400;
    let days = (year - 1970) * 365 + leap_years_before(year) - leap_years_before(1970)
        + month_days[..month as usize - 1].iter().sum::<u64>()
        + (day - 1);
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second)
}
