//! The server loop, on the server's own thread: accept on every host's port, judge each
//! arrival at once, and serve each connection (read the request, wait out the host's
//! latency, answer, close), all on that one thread.

use std::net::TcpListener as StdListener;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use futures::StreamExt;
use futures::stream::{FuturesUnordered, SelectAll};
use smol::future;
use smol::io::AsyncWriteExt;
use smol::net::{TcpListener, TcpStream};

use super::counts::bump;
use super::host::{Host, TOO_MANY_BODY, Ticket, UNAVAILABLE_BODY, page_body};
use super::wire::{Answer, closed_by_peer, read_request_path};

/// Accepts on every listener and serves every connection, all on the current thread.
pub(super) async fn serve_all(listeners: Vec<(StdListener, Arc<Host>)>) {
    let mut incoming = SelectAll::new();
    for (listener, host) in listeners {
        let listener = TcpListener::try_from(listener).expect("register a listener");
        let accepts = futures::stream::unfold(listener, |listener| async move {
            let accepted = listener.accept().await.map(|(stream, _)| stream);
            Some((accepted, listener))
        });
        incoming.push(Box::pin(
            accepts.map(move |accepted| (accepted, host.clone())),
        ));
    }
    let mut connections = FuturesUnordered::new();
    future::poll_fn(|cx| {
        loop {
            // Drive the open connections; an empty set is simply done for now.
            while let Poll::Ready(Some(())) = connections.poll_next_unpin(cx) {}
            match incoming.poll_next_unpin(cx) {
                Poll::Ready(Some((Ok(stream), host))) => {
                    // Judged here, in accept order, at the earliest instant the server knows.
                    let ticket = host.arrive(Instant::now());
                    connections.push(serve(stream, host, ticket));
                }
                // A failed accept (the client gave up in the backlog, or no file descriptor
                // was free) is the client's problem; keep accepting.
                Poll::Ready(Some((Err(_), _))) => {}
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await
}

/// Serves one request on `stream` and closes it.
async fn serve(mut stream: TcpStream, host: Arc<Host>, ticket: Ticket) {
    bump(&host.counters.connections);
    let host_active = host.gauge.enter();
    let global_active = host.global.enter();
    let answer = answer(&mut stream, &host, ticket).await;
    // Stop counting before anything else is recorded, so a test that sees the outcome
    // (a disconnect, a response) also sees the connection no longer active; and stop
    // before the client can see a response (see the `http_server` module docs).
    drop(host_active);
    drop(global_active);
    let Some(answer) = answer else {
        bump(&host.counters.disconnects);
        return;
    };

    let fields = host.record_answer(ticket, answer.status);
    if stream
        .write_all(answer.to_http(&fields).as_bytes())
        .await
        .is_err()
    {
        bump(&host.counters.disconnects);
        return;
    }
    // Half-close to send end-of-file now; the socket closes when `stream` drops. An error
    // here comes after the whole response was handed to the kernel: not a disconnect.
    let _ = stream.close().await;
}

/// Reads the request and waits out the latency; returns what to answer, or `None` when the
/// client left first. A refused request is answered `429` as soon as its head is read.
async fn answer(stream: &mut TcpStream, host: &Host, ticket: Ticket) -> Option<Answer> {
    let path = match read_request_path(stream).await {
        Ok(Ok(path)) => path,
        Ok(Err(status)) => return Some(Answer::new(status, None, "")),
        Err(_) => return None,
    };
    bump(&host.counters.requests);
    host.record_path(ticket, &path);
    if let Some(retry_after) = ticket.refuse {
        return Some(Answer::new(429, Some(retry_after), TOO_MANY_BODY));
    }
    // Wait out the latency, watching for the client to leave meanwhile.
    let left = future::or(
        async {
            async_io::Timer::after(host.latency).await;
            false
        },
        async {
            closed_by_peer(stream).await;
            true
        },
    )
    .await;
    if left {
        return None;
    }
    if ticket.unavailable {
        return Some(Answer::new(503, None, UNAVAILABLE_BODY));
    }
    Some(match host.status_for(&path) {
        503 => Answer::new(503, Some(host.flaky_retry_after), UNAVAILABLE_BODY),
        _ => Answer::new(200, None, page_body(&host.name, &path)),
    })
}
