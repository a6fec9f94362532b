//! Where a store connects: one Redis at a fixed address, or the master that Redis Sentinel
//! names, asked again for every new connection so that a store follows a failover by
//! itself.
//!
//! Sentinel is asked with `SENTINEL get-master-addr-by-name`, each sentinel in turn until
//! one answers, every wait bounded by the store's call timeout; the server it names must
//! say it is a master (`INFO replication`) before the store uses it (during a failover a
//! sentinel may already name a replica that is not promoted yet). This is a few lines over
//! redis-rs's plain connections rather than its `sentinel` feature: that feature would
//! bring two more dependencies, and its blocking path connects without a timeout, which
//! the keeper thread cannot afford.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Connection, ConnectionAddr, RedisError, RedisResult};

/// Where a store connects (cheap to clone).
#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// One Redis.
    Direct(Client),
    /// The master the sentinels know by this name.
    Sentinel(Arc<Sentinel>),
}

#[derive(Debug)]
pub(crate) struct Sentinel {
    sentinels: Vec<Client>,
    master: String,
}

impl Target {
    /// The Redis at `url`.
    pub(crate) fn direct(url: &str) -> RedisResult<Self> {
        Client::open(url).map(Self::Direct)
    }

    /// The master named `master` by the sentinels at `urls`.
    pub(crate) fn sentinel(urls: &[String], master: &str) -> RedisResult<Self> {
        if urls.is_empty() {
            return Err(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no sentinel address to ask for the master",
            )));
        }
        let sentinels = urls
            .iter()
            .map(|url| Client::open(url.as_str()))
            .collect::<RedisResult<_>>()?;
        Ok(Self::Sentinel(Arc::new(Sentinel {
            sentinels,
            master: master.to_owned(),
        })))
    }

    /// How errors name it: `host:port`, or `<master> via sentinel <host:port>,...`.
    pub(crate) fn address(&self) -> String {
        match self {
            Self::Direct(client) => client.get_connection_info().addr().to_string(),
            Self::Sentinel(sentinel) => {
                let sentinels: Vec<String> = sentinel
                    .sentinels
                    .iter()
                    .map(|client| client.get_connection_info().addr().to_string())
                    .collect();
                format!("{} via sentinel {}", sentinel.master, sentinels.join(","))
            }
        }
    }

    /// A new connection for grants, each wait bounded by `wait`.
    pub(crate) async fn connect(&self, wait: Duration) -> RedisResult<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(wait))
            .set_response_timeout(Some(wait));
        match self {
            Self::Direct(client) => {
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
            }
            Self::Sentinel(sentinel) => {
                let mut last = None;
                for asked in &sentinel.sentinels {
                    let master = async {
                        let mut conn = asked
                            .get_multiplexed_async_connection_with_config(&config)
                            .await?;
                        let named = sentinel.master_cmd().query_async(&mut conn).await?;
                        let mut conn = sentinel
                            .named(named)?
                            .get_multiplexed_async_connection_with_config(&config)
                            .await?;
                        let info: String = redis::cmd("INFO")
                            .arg("replication")
                            .query_async(&mut conn)
                            .await?;
                        sentinel.is_master(&info)?;
                        Ok::<_, RedisError>(conn)
                    };
                    match master.await {
                        Ok(conn) => return Ok(conn),
                        Err(error) => last = Some(error),
                    }
                }
                Err(last.expect("at least one sentinel"))
            }
        }
    }

    /// A new blocking connection (the keeper's), each wait bounded by `wait`.
    pub(crate) fn connect_blocking(&self, wait: Duration) -> RedisResult<Connection> {
        let open = |client: &Client| -> RedisResult<Connection> {
            let conn = client.get_connection_with_timeout(wait)?;
            conn.set_read_timeout(Some(wait))?;
            conn.set_write_timeout(Some(wait))?;
            Ok(conn)
        };
        match self {
            Self::Direct(client) => open(client),
            Self::Sentinel(sentinel) => {
                let mut last = None;
                for asked in &sentinel.sentinels {
                    let master = || -> RedisResult<Connection> {
                        let named = sentinel.master_cmd().query(&mut open(asked)?)?;
                        let mut conn = open(&sentinel.named(named)?)?;
                        let info: String =
                            redis::cmd("INFO").arg("replication").query(&mut conn)?;
                        sentinel.is_master(&info)?;
                        Ok(conn)
                    };
                    match master() {
                        Ok(conn) => return Ok(conn),
                        Err(error) => last = Some(error),
                    }
                }
                Err(last.expect("at least one sentinel"))
            }
        }
    }
}

/// How errors name a Sentinel setting that did not make a [`Target`] (no sentinel given, or
/// a URL that does not parse): in the shape of [`Target::address`], with the URLs as given,
/// since no `host:port` could be read from them.
pub(crate) fn sentinel_setting(urls: &[String], master: &str) -> String {
    let sentinels = if urls.is_empty() {
        "(none given)".to_owned()
    } else {
        urls.join(",")
    };
    format!("{master} via sentinel {sentinels}")
}

impl Sentinel {
    fn master_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("get-master-addr-by-name").arg(&self.master);
        cmd
    }

    /// A client for the master a sentinel named (`None`: it knows no such master).
    fn named(&self, named: Option<(String, u16)>) -> RedisResult<Client> {
        let (host, port) = named.ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::Client,
                "unknown master",
                format!("the sentinel knows no master named {:?}", self.master),
            ))
        })?;
        Client::open(ConnectionAddr::Tcp(host, port))
    }

    /// Whether `INFO replication` says master: a sentinel may name a replica it is still
    /// promoting.
    fn is_master(&self, info: &str) -> RedisResult<()> {
        let role = info
            .lines()
            .find_map(|line| line.strip_prefix("role:"))
            .map(str::trim);
        match role {
            Some("master") => Ok(()),
            role => Err(RedisError::from((
                redis::ErrorKind::Client,
                "not a master yet",
                format!(
                    "the server the sentinel names for {:?} is a {}",
                    self.master,
                    role.unwrap_or("server of unknown role")
                ),
            ))),
        }
    }
}
