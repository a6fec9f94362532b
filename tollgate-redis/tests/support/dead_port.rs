//! A listener that takes the port of a Redis that was killed, and counts who knocks: every
//! connection attempt a store makes while Redis is gone lands here instead of being refused
//! unseen. Each connection is accepted, counted and closed at once without a word (a client
//! sees its connection dropped, and may try again at once: the harshest case for a store
//! that should not hammer).
//!
//! To tell processes apart, give each its own loopback address for Redis (Linux routes all
//! of 127.0.0.0/8 to the loopback interface): a Redis started with
//! [`RedisServer::start_with`](super::redis_server::RedisServer::start_with)`(&["--bind",
//! "127.0.0.1", "127.0.0.2", ...])` listens on each, worker `k` connects to its own, and the
//! dead port is taken on every one of them. A knock is then put down to a worker by the
//! address it knocked on: exact, whatever the load, where looking a connection's owner up
//! in `/proc` loses the race against a client that gives up first.

#![allow(dead_code)]

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One connection attempt that reached the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Knock {
    /// When it was accepted.
    pub at: Instant,
    /// The address it knocked on.
    pub on: SocketAddr,
}

/// The listeners on a dead Redis's port (see the module docs). Dropping it frees the port.
#[derive(Debug)]
pub struct DeadPort {
    addrs: Vec<SocketAddr>,
    knocks: Arc<Mutex<Vec<Knock>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl DeadPort {
    /// Binds every one of `addrs` (trying for a few seconds each: the port may still be
    /// held for a moment after its Redis died) and counts the connections.
    ///
    /// # Panics
    ///
    /// If an address cannot be bound.
    pub fn take(addrs: &[SocketAddr]) -> Self {
        let knocks = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = addrs
            .iter()
            .map(|&addr| {
                let listener = bind(addr);
                let (knocks, stop) = (Arc::clone(&knocks), Arc::clone(&stop));
                // A blocking accept, so each connection is counted the moment it arrives
                // (`Drop` wakes it with a connection of its own).
                std::thread::spawn(move || {
                    loop {
                        let accepted = listener.accept();
                        let at = Instant::now();
                        if stop.load(Ordering::Acquire) {
                            return;
                        }
                        match accepted {
                            Ok((stream, _)) => {
                                drop(stream);
                                knocks.lock().unwrap().push(Knock { at, on: addr });
                            }
                            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                            Err(error) => panic!("accept on {addr}: {error}"),
                        }
                    }
                })
            })
            .collect();
        Self {
            addrs: addrs.to_vec(),
            knocks,
            stop,
            threads,
        }
    }

    /// Every knock so far.
    pub fn knocks(&self) -> Vec<Knock> {
        self.knocks.lock().unwrap().clone()
    }

    /// The instants someone knocked on `addr`.
    pub fn knocks_on(&self, addr: SocketAddr) -> Vec<Instant> {
        self.knocks()
            .into_iter()
            .filter(|knock| knock.on == addr)
            .map(|knock| knock.at)
            .collect()
    }
}

impl Drop for DeadPort {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for addr in &self.addrs {
            let _ = TcpStream::connect_timeout(addr, Duration::from_secs(1));
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn bind(addr: SocketAddr) -> TcpListener {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpListener::bind(addr) {
            Ok(listener) => return listener,
            Err(error) if Instant::now() > until => panic!("cannot take {addr}: {error}"),
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// The most of `times` (sorted or not) that fall within any one `window`.
pub fn most_within(times: &[Instant], window: Duration) -> usize {
    let mut times = times.to_vec();
    times.sort();
    let mut most = 0;
    let mut first = 0;
    for last in 0..times.len() {
        while times[last].duration_since(times[first]) >= window {
            first += 1;
        }
        most = most.max(last - first + 1);
    }
    most
}
