//! The Redis URL of the state config: which topology, and where.
//!
//! `redis://` is one server and the redis crate parses it. `redis+sentinel://` and
//! `redis+cluster://` list several hosts (`h1:26379,h2:26379`), which no URL parser accepts, so
//! they are parsed here into what the connection needs: hosts, credentials, master name, db.
//!
//! Errors never quote the URL: it may hold a password.

use crate::ConfigError;

/// Where the state lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One server (or a primary whose replicas are not used): `redis://`.
    Single,
    /// The primary named `master`, found through the listed sentinels: `redis+sentinel://`.
    Sentinel {
        /// The name the sentinels monitor it under (`sentinel monitor <name> ...`).
        master: String,
    },
    /// A Redis Cluster, found through any of the listed nodes: `redis+cluster://`.
    Cluster,
}

/// A parsed state URL.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RedisUrl {
    pub topology: Topology,
    /// Sentinels or seed nodes; empty for [`Topology::Single`] (the crate parses that URL).
    pub hosts: Vec<(String, u16)>,
    /// Credentials of the data nodes (the primary and replicas, or the cluster's nodes).
    pub username: Option<String>,
    pub password: Option<String>,
    pub db: i64,
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisUrl")
            .field("topology", &self.topology)
            .field("hosts", &self.hosts)
            .field("username", &self.username.as_ref().map(|_| "***"))
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .finish()
    }
}

const SINGLE_FORM: &str = "redis://[user:password@]host:port[/db]";
const SENTINEL_FORM: &str =
    "redis+sentinel://[user:password@]host:26379[,host:26379...]/<master name>[/db]";
const CLUSTER_FORM: &str = "redis+cluster://[user:password@]host:6379[,host:6379...]";

fn invalid(reason: impl Into<String>) -> ConfigError {
    ConfigError {
        field: "redis.url",
        reason: reason.into(),
    }
}

impl RedisUrl {
    /// Parses and checks a state URL.
    ///
    /// # Errors
    /// `redis.url` with what is wrong and the form expected.
    pub fn parse(url: &str) -> Result<RedisUrl, ConfigError> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(invalid(format!(
                "not a Redis URL: expected {SINGLE_FORM}, {SENTINEL_FORM} or {CLUSTER_FORM}"
            )));
        };
        match scheme {
            "rediss" | "rediss+sentinel" | "rediss+cluster" => Err(invalid(
                "TLS to Redis (rediss) is not built into Sluice: use redis:// (or \
                 redis+sentinel://, redis+cluster://) on a private network, or a TLS tunnel",
            )),
            "redis+sentinel" => {
                let (username, password, hosts, path) = split(rest, 26379, SENTINEL_FORM)?;
                let mut parts = path.split('/');
                let master = parts.next().unwrap_or_default();
                if master.is_empty() {
                    return Err(invalid(format!(
                        "the master name is missing: the sentinels are asked for the primary \
                         by its name ({SENTINEL_FORM})"
                    )));
                }
                let master = decode(master)?;
                let db = match parts.next() {
                    None | Some("") => 0,
                    Some(db) => parse_db(db, SENTINEL_FORM)?,
                };
                if parts.next().is_some() {
                    return Err(invalid(format!(
                        "unexpected path after the db: expected {SENTINEL_FORM}"
                    )));
                }
                Ok(RedisUrl {
                    topology: Topology::Sentinel { master },
                    hosts,
                    username,
                    password,
                    db,
                })
            }
            "redis+cluster" => {
                let (username, password, hosts, path) = split(rest, 6379, CLUSTER_FORM)?;
                let db = match path {
                    "" => 0,
                    db => parse_db(db, CLUSTER_FORM)?,
                };
                if db != 0 {
                    return Err(invalid(
                        "Redis Cluster has only db 0: remove the /db from the URL (use \
                         `prefix` to separate deployments sharing a cluster)",
                    ));
                }
                Ok(RedisUrl {
                    topology: Topology::Cluster,
                    hosts,
                    username,
                    password,
                    db,
                })
            }
            _ => {
                if host_part(rest).contains(',') {
                    return Err(invalid(format!(
                        "several hosts need redis+sentinel:// or redis+cluster://: \
                         {SENTINEL_FORM} or {CLUSTER_FORM}"
                    )));
                }
                if scheme.starts_with("redis") && scheme.contains('+') && scheme != "redis+unix" {
                    // Only the scheme is quoted: the rest may hold a password.
                    return Err(invalid(format!(
                        "unknown scheme `{scheme}`: expected {SINGLE_FORM}, {SENTINEL_FORM} or \
                         {CLUSTER_FORM}"
                    )));
                }
                // The parser's message may quote the URL, which may hold a password.
                redis::Client::open(url)
                    .map_err(|_| invalid(format!("not a valid redis:// URL ({SINGLE_FORM})")))?;
                Ok(RedisUrl {
                    topology: Topology::Single,
                    hosts: Vec::new(),
                    username: None,
                    password: None,
                    db: 0,
                })
            }
        }
    }
}

/// `[userinfo@]hosts[/path]` minus the userinfo: what follows the last `@`, up to the path.
fn host_part(rest: &str) -> &str {
    let after = rest.rfind('@').map_or(rest, |at| &rest[at + 1..]);
    after.split('/').next().unwrap_or_default()
}

type Split<'a> = (Option<String>, Option<String>, Vec<(String, u16)>, &'a str);

/// Splits `[user:password@]h1:p1,h2:p2[/path]` into credentials, hosts and the path (without
/// its leading `/`).
fn split<'a>(rest: &'a str, default_port: u16, form: &str) -> Result<Split<'a>, ConfigError> {
    // The last `@`: an unencoded `@` in a password belongs to the password.
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (hosts, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash + 1..]),
        None => (rest, ""),
    };
    if path.contains('?') || hosts.contains('?') {
        return Err(invalid(format!(
            "query parameters are not supported: expected {form}"
        )));
    }
    let (username, password) = match userinfo {
        None => (None, None),
        Some(info) => {
            let (user, pass) = match info.split_once(':') {
                Some((user, pass)) => (user, Some(pass)),
                None => (info, None),
            };
            let user = Some(decode(user)?).filter(|u| !u.is_empty());
            let pass = pass.map(decode).transpose()?.filter(|p| !p.is_empty());
            (user, pass)
        }
    };
    let mut list = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err(invalid(format!(
                "a host is missing (an empty entry in the host list): expected {form}"
            )));
        }
        list.push(host_port(host, default_port, form)?);
    }
    Ok((username, password, list, path))
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn host_port(host: &str, default_port: u16, form: &str) -> Result<(String, u16), ConfigError> {
    let (name, port) = if let Some(v6) = host.strip_prefix('[') {
        let Some((name, tail)) = v6.split_once(']') else {
            return Err(invalid(format!(
                "an IPv6 host lacks its closing `]`: expected {form}"
            )));
        };
        match tail {
            "" => (name, None),
            _ => match tail.strip_prefix(':') {
                Some(port) => (name, Some(port)),
                None => return Err(invalid(format!("expected `:port` after `]`: {form}"))),
            },
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if name.is_empty() {
        return Err(invalid(format!("a host name is empty: expected {form}")));
    }
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(port) if port != 0 => port,
            _ => {
                return Err(invalid(format!(
                    "a port is not a number from 1 to 65535: expected {form}"
                )))
            }
        },
    };
    Ok((name.to_string(), port))
}

fn parse_db(db: &str, form: &str) -> Result<i64, ConfigError> {
    db.parse::<i64>()
        .ok()
        .filter(|db| *db >= 0)
        .ok_or_else(|| invalid(format!("the db is not a number from 0 up: expected {form}")))
}

/// Percent-decoding (`%40` is `@`), as in `redis://` URLs, so a password may hold any byte.
fn decode(s: &str) -> Result<String, ConfigError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    invalid("a `%` in the user, password or master name is not followed by two hex digits")
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| invalid("the user, password or master name is not UTF-8 once decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &[(&str, u16)]) -> Vec<(String, u16)> {
        list.iter().map(|(h, p)| (h.to_string(), *p)).collect()
    }

    #[test]
    fn sentinel_urls_name_hosts_master_and_db() {
        let url =
            RedisUrl::parse("redis+sentinel://:p%40ss@s1:26380,s2,[::1]:26381/mymaster/2").unwrap();
        assert_eq!(
            url.topology,
            Topology::Sentinel {
                master: "mymaster".into()
            }
        );
        assert_eq!(
            url.hosts,
            hosts(&[("s1", 26380), ("s2", 26379), ("::1", 26381)])
        );
        assert_eq!(url.username, None);
        assert_eq!(url.password.as_deref(), Some("p@ss"));
        assert_eq!(url.db, 2);
        assert!(!format!("{url:?}").contains("p@ss"));

        let url = RedisUrl::parse("redis+sentinel://u:pw@s1:26379/m").unwrap();
        assert_eq!(url.username.as_deref(), Some("u"));
        assert_eq!(url.db, 0);
    }

    #[test]
    fn cluster_urls_name_seed_nodes() {
        let url = RedisUrl::parse("redis+cluster://u:pw@n1:7000,n2:7001,n3").unwrap();
        assert_eq!(url.topology, Topology::Cluster);
        assert_eq!(
            url.hosts,
            hosts(&[("n1", 7000), ("n2", 7001), ("n3", 6379)])
        );
        assert_eq!(url.password.as_deref(), Some("pw"));
        assert_eq!(RedisUrl::parse("redis+cluster://n1/0").unwrap().db, 0);
        assert_eq!(
            RedisUrl::parse("redis://:pw@10.0.0.5:6379/1")
                .unwrap()
                .topology,
            Topology::Single
        );
    }

    #[test]
    fn unworkable_urls_say_why_without_quoting_the_password() {
        let reason = |url: &str| {
            let e = RedisUrl::parse(url).unwrap_err();
            assert_eq!(e.field, "redis.url");
            assert!(!e.reason.contains("s3cret"), "{}", e.reason);
            e.reason
        };
        assert!(reason("redis+cluster://:s3cret@n1:7000/3").contains("only db 0"));
        assert!(reason("redis+sentinel://:s3cret@s1:26379").contains("master name is missing"));
        assert!(reason("redis+sentinel://:s3cret@s1:26379/").contains("master name is missing"));
        assert!(reason("redis+sentinel://:s3cret@/m").contains("host is missing"));
        assert!(reason("redis+cluster://:s3cret@n1,,n2").contains("host is missing"));
        assert!(reason("redis+cluster://:s3cret@n1:70000").contains("port"));
        assert!(reason("redis+sentinel://:s3cret@s1/m/x").contains("db"));
        assert!(reason("redis+sentinel://:s3cret@s1/m/0/x").contains("unexpected path"));
        assert!(reason("rediss+cluster://:s3cret@n1").contains("TLS"));
        assert!(reason("rediss://:s3cret@n1").contains("TLS"));
        assert!(reason("redis://:s3cret@n1:6379,n2:6379").contains("several hosts"));
        assert!(reason("http://:s3cret@n1").contains("not a valid redis:// URL"));
        assert!(reason("redis+sentinal://:s3cret@s1/m").contains("unknown scheme `redis+sentinal`"));
        assert!(reason("n1:6379").contains("not a Redis URL"));
        assert!(reason("redis+cluster://:s3cret@n1?x=1").contains("query"));
        assert!(reason("redis+sentinel://:s3cr%2@s1/m").contains("hex"));
    }
}
