//! Test support for the store's tests: a redis-server of the test's own (started on a free
//! loopback port without persistence, stopped, restarted, paused), and the runtime matrix.

#![allow(dead_code, unused_macros, unused_imports)]

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Instantiates each async test body once per runtime: `smol`, `run_sync` and, with the
/// `tokio` feature, `tokio_current` and `tokio_multi`. A body that makes no progress for
/// [`TEST_DEADLINE`] fails instead of hanging the run.
macro_rules! matrix {
    ($( $(#[$attr:meta])* async fn $name:ident() $body:block )*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $(#[$attr])*
            async fn body() $body

            async fn guarded() {
                tollgate::timeout($crate::common::TEST_DEADLINE, body())
                    .await
                    .expect("test body hung: no progress before the deadline");
            }

            #[test]
            fn smol() {
                smol::block_on(guarded());
            }

            #[test]
            fn run_sync() {
                tollgate::run_sync(guarded());
            }

            #[cfg(feature = "tokio")]
            #[test]
            fn tokio_current() {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(guarded());
            }

            #[cfg(feature = "tokio")]
            #[test]
            fn tokio_multi() {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(guarded());
            }
        }
    )*};
}
pub(crate) use matrix;

pub const TEST_DEADLINE: Duration = Duration::from_secs(60);

/// A Redis for one test: the CI's shared instance (`TOLLGATE_REDIS_URL`) when the test
/// does not stop it, else a redis-server of its own.
pub enum Redis {
    Shared(String),
    Own(RedisServer),
}

impl Redis {
    /// The CI's instance if there is one, else a new server.
    pub fn shared() -> Self {
        match std::env::var("TOLLGATE_REDIS_URL") {
            Ok(url) if !url.is_empty() => Redis::Shared(url),
            _ => Redis::Own(RedisServer::start()),
        }
    }

    pub fn url(&self) -> String {
        match self {
            Redis::Shared(url) => url.clone(),
            Redis::Own(server) => server.url(),
        }
    }
}

/// A namespace no other test (or earlier run against the shared instance) uses.
pub fn fresh_namespace(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "test:{test}:{}:{nanos}:{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A redis-server child process on 127.0.0.1, no persistence, killed on drop.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one on a free port and waits until it answers.
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = RedisServer { port, child: None };
        server.launch();
        server
    }

    fn launch(&mut self) {
        assert!(
            self.child.is_none(),
            "the test's redis-server is already running"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut child = Command::new("redis-server")
                .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
                .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed to run these tests (apt-get install redis-server)");
            // Up once it answers; a port still held by the previous instance makes it exit.
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if ping(self.port) {
                    self.child = Some(child);
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Kills it (its data is gone, as with a crash of a Redis without persistence).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A paused server must be thawed to die promptly on every platform.
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(child.id().to_string())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again, empty, on the same port.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    /// Freezes it (SIGSTOP): connections stay open but nothing answers, as with a Redis
    /// stuck or cut off by a partition that drops packets.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Thaws a [`pause`](Self::pause)d server (SIGCONT); its data is intact.
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let pid = self
            .child
            .as_ref()
            .expect("the test's redis-server is not running")
            .id();
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name} {pid} failed");
    }

    /// A plain connection for the test's own commands.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

/// Asks `check` again every few milliseconds until it holds; panics with `what` after
/// `timeout`. For state another thread (the keeper) changes.
pub async fn until<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "never happened within {timeout:?}: {what}"
        );
        tollgate::sleep(Duration::from_millis(5)).await;
    }
}
