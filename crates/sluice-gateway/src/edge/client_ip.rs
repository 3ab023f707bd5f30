//! Who the client is: the TCP peer, unless the peer is one of `server.trusted_proxies`, whose
//! `X-Forwarded-For` (else `Forwarded`, else `X-Real-IP`) names it. And the forwarded headers
//! the upstream gets: from an untrusted peer, its own `X-Forwarded-For`, `Forwarded` and
//! `X-Real-IP` are dropped and `X-Forwarded-For` is the peer; from a trusted one they are kept
//! and the peer is appended to `X-Forwarded-For`.
//!
//! The edge decides it as a [`ClientAddr`]; limits and logs use [`ClientAddr::ip`], which the
//! request path gets as an argument (`proxy::EdgeFacts`).

use std::net::{IpAddr, SocketAddr};

use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::config::IpNet;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
const FORWARDED: HeaderName = http::header::FORWARDED;

/// At most this many forwarded addresses are read from a request (right to left): a longer
/// chain is a client padding it.
const MAX_HOPS: usize = 32;

/// The client's address as the gateway decided it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClientAddr {
    /// The address limits and logs use.
    pub(crate) ip: IpAddr,
    /// The TCP peer.
    pub(crate) peer: SocketAddr,
    /// `ip` came from a trusted proxy's forwarded header.
    pub(crate) forwarded: bool,
}

/// `server.trusted_proxies`.
#[derive(Clone, Debug, Default)]
pub(crate) struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    pub(crate) fn new(nets: Vec<IpNet>) -> Self {
        TrustedProxies(nets)
    }

    /// Whether forwarded headers from `ip` are believed.
    pub(crate) fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|n| n.contains(ip))
    }

    /// Decides the client address of a request from `peer` and rewrites its forwarded
    /// headers for the upstream.
    #[cfg(test)]
    pub(crate) fn resolve(&self, peer: SocketAddr, headers: &mut HeaderMap) -> ClientAddr {
        self.resolve_with(peer, peer_header(peer).as_ref(), headers)
    }

    /// [`Self::resolve`], given the peer's address as a header value ([`peer_header`]), which a
    /// connection makes once for all its requests.
    pub(crate) fn resolve_with(
        &self,
        peer: SocketAddr,
        peer_header: Option<&HeaderValue>,
        headers: &mut HeaderMap,
    ) -> ClientAddr {
        let peer_ip = canonical(peer.ip());
        if !self.trusts(peer_ip) {
            // A look at the few names present is cheaper than two hashed removals of headers
            // a direct client seldom sends.
            if headers.keys().any(|n| *n == FORWARDED || *n == X_REAL_IP) {
                headers.remove(&FORWARDED);
                headers.remove(&X_REAL_IP);
            }
            if let Some(v) = peer_header {
                headers.insert(X_FORWARDED_FOR, v.clone());
            }
            return ClientAddr {
                ip: peer_ip,
                peer,
                forwarded: false,
            };
        }
        let chain = forwarded_chain(headers);
        // Right to left: the first address that is not a trusted proxy is the client; if every
        // hop is trusted, the leftmost is.
        let mut client = None;
        for ip in chain.iter().rev().take(MAX_HOPS) {
            client = Some(*ip);
            if !self.trusts(*ip) {
                break;
            }
        }
        let appended = match headers
            .get_all(&X_FORWARDED_FOR)
            .iter()
            .map(|v| v.to_str().ok())
            .collect::<Option<Vec<_>>>()
        {
            Some(parts) if !parts.is_empty() => {
                format!("{}, {}", parts.join(", "), peer_ip)
            }
            _ => peer_ip.to_string(),
        };
        headers.remove(&X_FORWARDED_FOR);
        if let Ok(v) = HeaderValue::from_str(&appended) {
            headers.insert(X_FORWARDED_FOR, v);
        }
        ClientAddr {
            ip: client.unwrap_or(peer_ip),
            peer,
            forwarded: client.is_some(),
        }
    }
}

/// An IPv4-mapped IPv6 address (a dual-stack listener's IPv4 peer) as its IPv4 address.
/// The peer's address (canonical: an IPv4-mapped IPv6 address as IPv4) as a header value.
pub(crate) fn peer_header(peer: SocketAddr) -> Option<HeaderValue> {
    let mut text = String::with_capacity(40);
    sluice_telemetry::access_log::push_ip(&mut text, canonical(peer.ip()));
    // An address is always a valid header value.
    HeaderValue::from_str(&text).ok()
}

pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The forwarded addresses, left (client) to right (last proxy): `X-Forwarded-For` if present,
/// else the `for=` of `Forwarded`, else `X-Real-IP`. Reading stops at the first entry that is
/// not an address (`unknown`, an obfuscated name, garbage): only the part to its right is
/// believed.
fn forwarded_chain(h: &HeaderMap) -> Vec<IpAddr> {
    let entries: Vec<String> = if h.contains_key(&X_FORWARDED_FOR) {
        h.get_all(&X_FORWARDED_FOR)
            .iter()
            .flat_map(|v| {
                v.to_str()
                    .unwrap_or("\u{0}")
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    } else if h.contains_key(&FORWARDED) {
        h.get_all(&FORWARDED)
            .iter()
            .flat_map(|v| {
                v.to_str()
                    .unwrap_or("\u{0}")
                    .split(',')
                    .map(|elem| {
                        elem.split(';')
                            .find_map(|pair| {
                                let (k, v) = pair.split_once('=')?;
                                k.trim()
                                    .eq_ignore_ascii_case("for")
                                    .then(|| v.trim().trim_matches('"').to_string())
                            })
                            .unwrap_or_default()
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    } else {
        h.get(&X_REAL_IP)
            .map(|v| vec![v.to_str().unwrap_or("\u{0}").trim().to_string()])
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for e in entries.iter().rev() {
        match parse_addr(e) {
            Some(ip) => out.push(ip),
            None => break,
        }
    }
    out.reverse();
    out
}

/// `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:80`.
fn parse_addr(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some(canonical(sa.ip()));
    }
    s.strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|r| r.parse::<IpAddr>().ok())
        .map(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(nets: &[&str]) -> TrustedProxies {
        TrustedProxies::new(nets.iter().map(|n| IpNet::parse(n).unwrap()).collect())
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    const PEER: &str = "10.0.0.5:40000";

    #[test]
    fn an_untrusted_peer_is_the_client_and_its_forwarded_headers_are_replaced() {
        let mut h = headers(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("forwarded", "for=1.2.3.4"),
            ("x-real-ip", "1.2.3.4"),
        ]);
        let c = TrustedProxies::default().resolve(PEER.parse().unwrap(), &mut h);
        assert_eq!(c.ip, "10.0.0.5".parse::<IpAddr>().unwrap());
        assert!(!c.forwarded);
        assert_eq!(h["x-forwarded-for"], "10.0.0.5");
        assert!(!h.contains_key("forwarded") && !h.contains_key("x-real-ip"));
    }

    #[test]
    fn a_trusted_peer_names_the_client_right_to_left_past_trusted_hops() {
        let p = proxies(&["10.0.0.0/8"]);
        let mut h = headers(&[("x-forwarded-for", "6.6.6.6, 1.2.3.4, 10.1.1.1")]);
        let c = p.resolve(PEER.parse().unwrap(), &mut h);
        assert_eq!(
            c.ip,
            "1.2.3.4".parse::<IpAddr>().unwrap(),
            "6.6.6.6 is what 1.2.3.4 claimed"
        );
        assert!(c.forwarded);
        assert_eq!(h["x-forwarded-for"], "6.6.6.6, 1.2.3.4, 10.1.1.1, 10.0.0.5");
        // Two header lines are one list.
        let mut h = headers(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-for", "10.1.1.1"),
        ]);
        assert_eq!(
            p.resolve(PEER.parse().unwrap(), &mut h).ip,
            "1.2.3.4".parse::<IpAddr>().unwrap()
        );
        // Garbage stops the walk: only the part to its right is believed.
        let mut h = headers(&[("x-forwarded-for", "1.2.3.4, bogus, 10.1.1.1")]);
        assert_eq!(
            p.resolve(PEER.parse().unwrap(), &mut h).ip,
            "10.1.1.1".parse::<IpAddr>().unwrap()
        );
        // No header: the peer.
        let mut h = HeaderMap::new();
        let c = p.resolve(PEER.parse().unwrap(), &mut h);
        assert_eq!((c.ip, c.forwarded), ("10.0.0.5".parse().unwrap(), false));
        assert_eq!(h["x-forwarded-for"], "10.0.0.5");
    }

    #[test]
    fn forwarded_and_x_real_ip_are_read_when_there_is_no_x_forwarded_for() {
        let p = proxies(&["10.0.0.0/8", "::1"]);
        let mut h = headers(&[(
            "forwarded",
            "for=\"[2001:db8::17]:4711\";proto=https, for=10.2.2.2",
        )]);
        assert_eq!(
            p.resolve(PEER.parse().unwrap(), &mut h).ip,
            "2001:db8::17".parse::<IpAddr>().unwrap()
        );
        let mut h = headers(&[("x-real-ip", "5.6.7.8")]);
        assert_eq!(
            p.resolve("[::1]:9".parse().unwrap(), &mut h).ip,
            "5.6.7.8".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn ipv4_mapped_peers_match_ipv4_ranges() {
        let p = proxies(&["127.0.0.0/8"]);
        assert!(p.trusts("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!p.trusts("::1".parse().unwrap()));
        assert_eq!(parse_addr("1.2.3.4:80"), Some("1.2.3.4".parse().unwrap()));
        assert_eq!(parse_addr("[::1]"), Some("::1".parse().unwrap()));
        assert_eq!(parse_addr("unknown"), None);
    }
}
