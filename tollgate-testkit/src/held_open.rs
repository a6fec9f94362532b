//! How long a client held each request open, as a loopback server sees it: the server
//! answers after a fixed latency and keeps its end of the connection until the client
//! closes its own, and records both instants per connection. A client whose request
//! futures are not polled (a stream whose consumer awaits other work between two `next()`
//! calls) leaves its requests open at the server, unwritten or unread, until it is polled
//! again: [`Open::held`] shows how long.
//!
//! The server runs on threads of its own (plain std sockets), the client ([`get`]) on
//! async-io's sockets, which work under every executor: smol, `run_sync`, tokio,
//! `futures::executor`.
//!
//! ```ignore
//! let server = HeldOpenServer::start(8, Duration::from_millis(10));
//! let addr = server.addr();
//! // ... 8 requests with `held_open::get(addr)` ...
//! let opens = server.finish();
//! let longest = opens.iter().map(Open::held).max();
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use async_io::Async;
use futures_lite::{AsyncReadExt, AsyncWriteExt};

/// The answer every request gets, whole.
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/// One connection as the server saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Open {
    /// When the server accepted it.
    pub accepted: Instant,
    /// When the client closed it (the server read the end of its stream).
    pub closed: Instant,
}

impl Open {
    /// How long the request was open at the server.
    pub fn held(&self) -> Duration {
        self.closed - self.accepted
    }

    /// Whether it was open from before `start` until after `end`.
    pub fn spans(&self, start: Instant, end: Instant) -> bool {
        self.accepted <= start && self.closed >= end
    }
}

/// A loopback server for a known number of connections (see the module docs).
pub struct HeldOpenServer {
    addr: SocketAddr,
    log: Arc<Mutex<Vec<Open>>>,
    accepting: Option<thread::JoinHandle<()>>,
}

impl HeldOpenServer {
    /// Listens on 127.0.0.1 (an ephemeral port) for `connections` connections, each
    /// answered `latency` after its request's head came in.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound.
    pub fn start(connections: usize, latency: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&log);
        let accepting = thread::spawn(move || {
            let mut handlers = Vec::new();
            for _ in 0..connections {
                let (socket, _) = listener.accept().expect("accept");
                let accepted = Instant::now();
                let log = Arc::clone(&kept);
                handlers.push(thread::spawn(move || {
                    serve(socket, accepted, latency, &log)
                }));
            }
            for handler in handlers {
                handler.join().expect("a connection's thread");
            }
        });
        Self {
            addr,
            log,
            accepting: Some(accepting),
        }
    }

    /// Where to send the requests.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every connection, once all of them were made and closed (it waits for that).
    ///
    /// # Panics
    ///
    /// If a thread of the server panicked.
    pub fn finish(mut self) -> Vec<Open> {
        self.accepting
            .take()
            .expect("finished once")
            .join()
            .expect("the server's thread");
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

/// Reads the request's head, answers after `latency`, and waits for the client to close
/// its end.
fn serve(mut socket: TcpStream, accepted: Instant, latency: Duration, log: &Mutex<Vec<Open>>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match socket.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    thread::sleep(latency);
    let _ = socket.write_all(ANSWER);
    let mut rest = Vec::new();
    let _ = socket.read_to_end(&mut rest); // until the client closes
    log.lock().unwrap().push(Open {
        accepted,
        closed: Instant::now(),
    });
}

/// One request to a [`HeldOpenServer`]: connect, send, read the whole answer, close.
/// Returns the answer's length.
///
/// # Errors
///
/// The socket's error, if any.
///
/// # Panics
///
/// If the answer is not the server's.
pub async fn get(addr: SocketAddr) -> std::io::Result<usize> {
    let mut socket = Async::<TcpStream>::connect(addr).await?;
    socket
        .write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        .await?;
    let mut answer = vec![0u8; ANSWER.len()];
    socket.read_exact(&mut answer).await?;
    assert_eq!(answer, ANSWER);
    Ok(answer.len())
}
