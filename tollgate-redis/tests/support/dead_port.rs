//! A listener that takes the port of a Redis that was killed, and counts who knocks: every
//! connection attempt a store makes while Redis is gone lands here instead of being refused
//! unseen. Each connection is accepted, put down to the process that opened it, and closed
//! at once without a word (a client sees its connection dropped, and may try again at once:
//! the harshest case for a store that should not hammer).
//!
//! Which process opened a connection is read from Linux's `/proc`: the client's socket is
//! the one whose local address is the connection's peer address in `/proc/net/tcp`, and its
//! inode is among the open files (`/proc/<pid>/fd`) of exactly one of the candidate
//! processes. The lookup is made while the client still waits for an answer, so its socket
//! is still open.

#![allow(dead_code)]

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One connection attempt that reached the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Knock {
    /// When it was accepted.
    pub at: Instant,
    /// The candidate process that opened it, if it was one of them.
    pub pid: Option<u32>,
}

/// The listener on a dead Redis's port (see the module docs). Dropping it frees the port.
#[derive(Debug)]
pub struct DeadPort {
    addr: SocketAddr,
    knocks: Arc<Mutex<Vec<Knock>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DeadPort {
    /// Binds `addr` (trying for a few seconds: the port may still be held for a moment
    /// after its Redis died) and counts the connections of the processes `candidates`.
    ///
    /// # Panics
    ///
    /// If the port cannot be bound.
    pub fn take(addr: SocketAddr, candidates: Vec<u32>) -> Self {
        let until = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(addr) {
                Ok(listener) => break listener,
                Err(error) if Instant::now() > until => panic!("cannot take {addr}: {error}"),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        let knocks = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (knocks, stop) = (Arc::clone(&knocks), Arc::clone(&stop));
            // A blocking accept, so each connection is looked at the moment it arrives
            // (`Drop` wakes it with a connection of its own).
            std::thread::spawn(move || {
                loop {
                    let accepted = listener.accept();
                    let at = Instant::now();
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    match accepted {
                        Ok((stream, peer)) => {
                            let pid = owner(peer, addr.port(), &candidates);
                            drop(stream);
                            knocks.lock().unwrap().push(Knock { at, pid });
                        }
                        Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                        Err(error) => panic!("accept on {addr}: {error}"),
                    }
                }
            })
        };
        Self {
            addr,
            knocks,
            stop,
            thread: Some(thread),
        }
    }

    /// Every knock so far.
    pub fn knocks(&self) -> Vec<Knock> {
        self.knocks.lock().unwrap().clone()
    }

    /// The knocks of no candidate (a client that gave up before it could be looked at,
    /// or another process).
    pub fn strangers(&self) -> usize {
        self.knocks()
            .iter()
            .filter(|knock| knock.pid.is_none())
            .count()
    }

    /// The instants `pid` knocked.
    pub fn knocks_of(&self, pid: u32) -> Vec<Instant> {
        self.knocks()
            .into_iter()
            .filter(|knock| knock.pid == Some(pid))
            .map(|knock| knock.at)
            .collect()
    }
}

impl Drop for DeadPort {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = std::net::TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
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

/// Which of `candidates` holds the client end of a connection from `peer` to `port`.
fn owner(peer: SocketAddr, port: u16, candidates: &[u32]) -> Option<u32> {
    let inode = client_inode(peer, port)?;
    let wanted = format!("socket:[{inode}]");
    candidates.iter().copied().find(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|target| target.as_os_str() == wanted.as_str())
            })
    })
}

/// The inode of the socket whose local address is `peer` and remote port `port`, from
/// `/proc/net/tcp`.
fn client_inode(peer: SocketAddr, port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local, remote, inode) = (fields.get(1)?, fields.get(2)?, fields.get(9)?);
        (parse(local)? == peer && parse(remote)?.port() == port).then(|| inode.parse().ok())?
    })
}

/// `0100007F:1F90` (the address as the kernel's native-endian word, the port big-endian).
fn parse(field: &str) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let ip = u32::from_str_radix(ip, 16).ok()?;
    let port = u16::from_str_radix(port, 16).ok()?;
    Some(SocketAddr::from((Ipv4Addr::from(ip.to_ne_bytes()), port)))
}
