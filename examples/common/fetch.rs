//! What the reqwest examples share: one `GET` read into a [`Reply`] or a [`Failure`], and
//! the [`Outcome`] `tollgate::http::outcome` reads from it. (Each example uses part of it.)
#![allow(dead_code)]

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use tollgate::{CircuitBreakerError, Outcome};

/// An answer: from which host (its authority), its status and headers.
#[derive(Debug)]
pub struct Reply {
    pub authority: String,
    pub status: StatusCode,
    pub headers: HeaderMap,
}

/// Why an item failed.
#[derive(Debug)]
pub enum Failure {
    /// An answer other than 2xx.
    Status(Reply),
    /// No answer (connection, protocol).
    Request(#[allow(dead_code)] reqwest::Error),
    /// The host's breaker was open.
    Open(CircuitBreakerError),
}

impl From<CircuitBreakerError> for Failure {
    fn from(open: CircuitBreakerError) -> Self {
        Failure::Open(open)
    }
}

pub type Answer = Result<Reply, Failure>;

/// `GET url`, the body read and dropped: a 2xx is a [`Reply`], anything else a [`Failure`].
pub async fn fetch(client: &reqwest::Client, url: &str) -> Answer {
    let response = client.get(url).send().await.map_err(Failure::Request)?;
    let reply = Reply {
        authority: authority(url),
        status: response.status(),
        headers: response.headers().clone(),
    };
    response.bytes().await.map_err(Failure::Request)?;
    if reply.status.is_success() {
        Ok(reply)
    } else {
        Err(Failure::Status(reply))
    }
}

/// What the server said, success or not (`tollgate::http::outcome`); no answer is a plain
/// failure.
pub fn classify(answer: &Answer) -> Outcome {
    match answer {
        Ok(reply) | Err(Failure::Status(reply)) => {
            tollgate::http::outcome(reply.status, &reply.headers)
        }
        Err(_) => Outcome::failure(),
    }
}

/// The URL's authority: one port per host.
pub fn authority(url: &str) -> String {
    url.split('/').nth(2).unwrap_or_default().to_owned()
}
