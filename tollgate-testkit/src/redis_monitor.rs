//! What a Redis ran, on its own clock: its `MONITOR` feed, read on a thread of its own.
//!
//! The fleet tests judge the store's grants here rather than only at the target server. A
//! grant is a write one of the store's scripts makes (a new lease, a rate's next TAT), and
//! `MONITOR` stamps each write a script makes with Redis's clock as it runs: a window of a
//! second judged on those stamps judges the fleet's limits exactly, where the server's
//! arrivals also carry how late a busy machine ran each worker after its grant. (The
//! server still judges what holds at any speed: no more than the cap in flight, and no
//! arrival without a grant before it.)
//!
//! A log is complete from the moment [`CommandLog::attach`] returns for as long as it reads
//! the feed. Redis writes the feed as it writes replies, after running the commands: a
//! Redis killed while the feed lags (a busy machine runs the log's thread late) takes the
//! lines it had not sent with it. So a test that kills a logged Redis first holds its writes
//! and lets the log catch up ([`CommandLog::hold_writes`]). `RedisServer::restart_logged`
//! does that, and brings the server back with a new log attached before any client can
//! reach it, so that a restarted Redis's first grants are in its log too.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One command a Redis ran, as its `MONITOR` feed showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedCommand {
    /// When Redis ran it, on Redis's clock (the wall clock of this machine).
    pub at: SystemTime,
    /// Whether a script ran it (`[0 lua]`), rather than a client directly.
    pub by_script: bool,
    /// The command and its arguments, unquoted (`["ZADD", "key", "12", "id"]`).
    pub args: Vec<String>,
}

impl LoggedCommand {
    /// Whether this is `command` (any case) run by a script.
    pub fn is_script(&self, command: &str) -> bool {
        self.by_script
            && self
                .args
                .first()
                .is_some_and(|name| name.eq_ignore_ascii_case(command))
    }
}

/// The `MONITOR` feed of one Redis process, collected on a thread until that process (or
/// this log) goes away.
#[derive(Debug)]
pub struct CommandLog {
    addr: SocketAddr,
    shared: Arc<Shared>,
    reader: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    seen: Mutex<Vec<LoggedCommand>>,
    /// The feed's connection now, for `Drop` to cut.
    stream: Mutex<Option<TcpStream>>,
    /// Times the feed was cut and attached again: `(cut, attached again)`.
    gaps: Mutex<Vec<(SystemTime, SystemTime)>>,
    /// A line the log could not read: the log is not whole past it.
    unreadable: Mutex<Option<String>>,
    dropped: AtomicBool,
}

/// How long [`CommandLog::commands`] waits for its marker to come round.
const MARK_DEADLINE: Duration = Duration::from_secs(30);

/// How long a following log tries to attach again after its feed was cut.
const REATTACH_DEADLINE: Duration = Duration::from_secs(2);

impl CommandLog {
    /// Starts logging what the Redis at `addr` runs from now on, until its connection ends.
    ///
    /// # Errors
    ///
    /// If Redis cannot be reached or refuses `MONITOR`.
    pub fn attach(addr: SocketAddr) -> io::Result<Self> {
        Self::start(addr, false)
    }

    /// As [`attach`](Self::attach), but when Redis cuts the feed while it keeps running
    /// (a Sentinel promoting a replica kills its clients), attaches again at once and
    /// notes the gap ([`gaps`](Self::gaps)): what Redis ran meanwhile is not in the log.
    ///
    /// # Errors
    ///
    /// As [`attach`](Self::attach).
    pub fn attach_following(addr: SocketAddr) -> io::Result<Self> {
        Self::start(addr, true)
    }

    fn start(addr: SocketAddr, follow: bool) -> io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let mut feed = open_feed(addr, &shared)?;
        let sink = Arc::clone(&shared);
        let reader = std::thread::spawn(move || {
            loop {
                for line in (&mut feed).lines() {
                    let Ok(line) = line else { break };
                    let Some(command) = parse_line(&line) else {
                        // Losing a line silently would make a log look whole when it is not.
                        *lock(&sink.unreadable) = Some(line);
                        return;
                    };
                    lock(&sink.seen).push(command);
                }
                if !follow || sink.dropped.load(Ordering::SeqCst) {
                    return;
                }
                let cut = SystemTime::now();
                let until = Instant::now() + REATTACH_DEADLINE;
                feed = loop {
                    match open_feed(addr, &sink) {
                        Ok(feed) => break feed,
                        Err(_) if Instant::now() < until => {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Err(_) => return,
                    }
                };
                lock(&sink.gaps).push((cut, SystemTime::now()));
            }
        });
        Ok(Self {
            addr,
            shared,
            reader: Some(reader),
        })
    }

    /// Its Redis now listens on `addr` (`CONFIG SET port`): the log's markers and pauses go
    /// there.
    pub(crate) fn moved_to(&mut self, addr: SocketAddr) {
        self.addr = addr;
    }

    /// The times the feed was cut and attached again (a following log only).
    pub fn gaps(&self) -> Vec<(SystemTime, SystemTime)> {
        lock(&self.shared.gaps).clone()
    }

    /// Every command logged so far, in the order Redis ran them. While the process still
    /// runs, first waits until everything it ran before this call has come through (a
    /// marker command sent on another connection comes round on the feed); once it is gone,
    /// its log is whole already.
    ///
    /// # Panics
    ///
    /// If the marker does not come round within 30 s.
    ///
    /// # Panics
    ///
    /// If the marker does not come round within 30 s, or the feed had a line this log
    /// cannot read.
    pub fn commands(&self) -> Vec<LoggedCommand> {
        if !self.has_ended() {
            self.catch_up();
        }
        if let Some(line) = lock(&self.shared.unreadable).as_ref() {
            panic!("a MONITOR line this log cannot read: {line:?}");
        }
        lock(&self.shared.seen).clone()
    }

    /// Holds every write to this Redis (`CLIENT PAUSE WRITE`, scripts included: clients
    /// asking wait) and waits until the log has everything it ran: call it before killing
    /// the server, so that the kill takes no line of the log with it. Reads go on; the
    /// writes wait until the server dies (or a minute).
    ///
    /// # Panics
    ///
    /// If Redis refuses the pause or the log does not catch up within 30 s.
    pub fn hold_writes(&self) {
        let reply = send(self.addr, &["CLIENT", "PAUSE", "60000", "WRITE"])
            .expect("pause the writes of the logged Redis");
        assert_eq!(reply.trim_end(), "+OK", "CLIENT PAUSE answered {reply:?}");
        self.catch_up();
    }

    fn has_ended(&self) -> bool {
        self.reader.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Sends a marker (`ECHO`) and waits until it comes round on the feed: everything Redis
    /// ran before it is then in the log. Returns at once if the feed ends meanwhile.
    fn catch_up(&self) {
        static MARKS: AtomicU64 = AtomicU64::new(0);
        let marker = format!(
            "tollgate-log-mark-{}-{}",
            std::process::id(),
            MARKS.fetch_add(1, Ordering::Relaxed)
        );
        if send(self.addr, &["ECHO", &marker]).is_err() {
            return;
        }
        let until = Instant::now() + MARK_DEADLINE;
        loop {
            let seen = lock(&self.shared.seen);
            if seen
                .iter()
                .rev()
                .any(|c| c.args.get(1).is_some_and(|a| *a == marker))
            {
                return;
            }
            drop(seen);
            if self.has_ended() {
                return;
            }
            assert!(Instant::now() < until, "the log's marker never came round");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for CommandLog {
    fn drop(&mut self) {
        self.shared.dropped.store(true, Ordering::SeqCst);
        if let Some(stream) = lock(&self.shared.stream).as_ref() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// Connects to `addr` and turns the connection into a `MONITOR` feed, kept in `shared`
/// for `Drop` to cut.
fn open_feed(addr: SocketAddr, shared: &Shared) -> io::Result<BufReader<TcpStream>> {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    writer.write_all(&request(&["MONITOR"]))?;
    let mut feed = BufReader::new(stream.try_clone()?);
    let mut first = String::new();
    feed.read_line(&mut first)?;
    if first.trim_end() != "+OK" {
        return Err(io::Error::other(format!("MONITOR answered {first:?}")));
    }
    *lock(&shared.stream) = Some(stream.try_clone()?);
    // `Drop` sets the flag before it cuts the stream it finds: a feed opened meanwhile is
    // cut here.
    if shared.dropped.load(Ordering::SeqCst) {
        let _ = stream.shutdown(Shutdown::Both);
    }
    Ok(feed)
}

/// Sends one command to `addr` on a connection of its own and returns the first line of the
/// reply.
fn send(addr: SocketAddr, args: &[&str]) -> io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(&request(args))?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply)?;
    Ok(reply)
}

/// A command as RESP puts it on the wire: an array of bulk strings.
pub(crate) fn request(args: &[&str]) -> Vec<u8> {
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    request
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Parses `+1796406854.886225 [0 lua] "ZADD" "key" "5" "a\"b"`.
fn parse_line(line: &str) -> Option<LoggedCommand> {
    let rest = line.strip_prefix('+')?;
    let (stamp, rest) = rest.split_once(' ')?;
    let (secs, micros) = stamp.split_once('.')?;
    let at = UNIX_EPOCH
        + Duration::from_secs(secs.parse().ok()?)
        + Duration::from_micros(micros.parse().ok()?);
    let (client, rest) = rest.strip_prefix('[')?.split_once("] ")?;
    Some(LoggedCommand {
        at,
        by_script: client.ends_with(" lua"),
        args: unquote_all(rest)?,
    })
}

/// The arguments of a `MONITOR` line: each in double quotes, with `\"`, `\\`, `\n`, `\r`,
/// `\t`, `\a`, `\b` and `\xHH` escapes.
fn unquote_all(mut rest: &str) -> Option<Vec<String>> {
    let mut args = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return Some(args);
        }
        let mut chars = rest.strip_prefix('"')?.char_indices();
        let mut bytes = Vec::new();
        let end = loop {
            let (at, c) = chars.next()?;
            match c {
                '"' => break at + 1,
                '\\' => {
                    let (_, escaped) = chars.next()?;
                    match escaped {
                        'n' => bytes.push(b'\n'),
                        'r' => bytes.push(b'\r'),
                        't' => bytes.push(b'\t'),
                        'a' => bytes.push(7),
                        'b' => bytes.push(8),
                        'x' => {
                            let high = chars.next()?.1.to_digit(16)?;
                            let low = chars.next()?.1.to_digit(16)?;
                            bytes.push((high * 16 + low) as u8);
                        }
                        other => bytes.extend_from_slice(other.to_string().as_bytes()),
                    }
                }
                other => bytes.extend_from_slice(other.to_string().as_bytes()),
            }
        };
        args.push(String::from_utf8_lossy(&bytes).into_owned());
        rest = &rest[1 + end..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_line_parses_with_its_time_and_escapes() {
        let line = r#"+1796406854.000225 [0 lua] "ZADD" "{k}:lease:{5:hosts:h}" "5" "a\"b\x41\\""#;
        let command = parse_line(line).unwrap();
        assert!(command.by_script);
        assert!(command.is_script("zadd"));
        assert_eq!(
            command.args,
            ["ZADD", "{k}:lease:{5:hosts:h}", "5", "a\"bA\\"]
        );
        assert_eq!(
            command.at.duration_since(UNIX_EPOCH).unwrap(),
            Duration::from_micros(1_796_406_854_000_225)
        );
    }

    #[test]
    fn a_client_line_is_not_a_scripts() {
        let command = parse_line(r#"+1.5 [0 127.0.0.1:40990] "echo" "mark""#).unwrap();
        assert!(!command.by_script);
        assert_eq!(command.args, ["echo", "mark"]);
        assert_eq!(parse_line("-ERR no"), None);
    }
}
