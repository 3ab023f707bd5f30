//! A metric family's handles, found by their label values without building the label set.
//!
//! `prometheus_client`'s `Family::get_or_create` takes the label set by value type: every call
//! on the request path allocated its `String` labels and hashed them with SipHash under the
//! family's lock — six times per request, about 4 % of a small call's instructions. Here the
//! label values are written into a stack buffer (each prefixed by its length, so no two label
//! sets share a key), hashed with foldhash, and looked up under a read lock; the family is asked
//! only the first time a label set is seen. A handle is the family's own metric (they share
//! their atomics), so `/metrics` shows the same numbers.

use std::collections::HashMap;

use parking_lot::RwLock;

/// Keys longer than this (very long route, upstream or model names) skip the cache.
const MAX_KEY: usize = 192;

/// Handles of one family by label values; `M` is the family's metric (`Counter`, `Histogram`).
pub(crate) struct Handles<M> {
    map: RwLock<HashMap<Box<[u8]>, M, foldhash::fast::FixedState>>,
}

impl<M> Default for Handles<M> {
    fn default() -> Self {
        Handles {
            map: RwLock::new(HashMap::with_hasher(foldhash::fast::FixedState::default())),
        }
    }
}

impl<M> std::fmt::Debug for Handles<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles")
            .field("label_sets", &self.map.read().len())
            .finish()
    }
}

impl<M: Clone> Handles<M> {
    /// Runs `f` on the handle of the label values `parts`; `make` gets it from the family the
    /// first time.
    pub(crate) fn with<R>(
        &self,
        parts: &[&[u8]],
        make: impl FnOnce() -> M,
        f: impl FnOnce(&M) -> R,
    ) -> R {
        let mut buf = [0u8; MAX_KEY];
        let Some(key) = encode(&mut buf, parts) else {
            return f(&make());
        };
        if let Some(m) = self.map.read().get(key) {
            return f(m);
        }
        let m = make();
        let r = f(&m);
        self.map.write().entry(key.into()).or_insert(m);
        r
    }
}

/// `parts`, each after its length (two bytes), into `buf`; `None` if they do not fit.
fn encode<'a>(buf: &'a mut [u8; MAX_KEY], parts: &[&[u8]]) -> Option<&'a [u8]> {
    let mut at = 0;
    for p in parts {
        let len = u16::try_from(p.len()).ok()?;
        let end = at + 2 + p.len();
        if end > MAX_KEY {
            return None;
        }
        buf[at..at + 2].copy_from_slice(&len.to_le_bytes());
        buf[at + 2..end].copy_from_slice(p);
        at = end;
    }
    Some(&buf[..at])
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;

    #[test]
    fn a_handle_is_the_familys_metric_and_label_sets_never_collide() {
        let family = Family::<Vec<(String, String)>, Counter>::default();
        let handles = Handles::<Counter>::default();
        let labels = |a: &str, b: &str| {
            vec![
                ("a".to_string(), a.to_string()),
                ("b".to_string(), b.to_string()),
            ]
        };
        let inc = |a: &str, b: &str| {
            handles.with(
                &[a.as_bytes(), b.as_bytes()],
                || family.get_or_create(&labels(a, b)).clone(),
                |c| c.inc(),
            );
        };
        for _ in 0..3 {
            inc("ab", "c");
        }
        // The same bytes split differently are another label set.
        inc("a", "bc");
        assert_eq!(family.get_or_create(&labels("ab", "c")).get(), 3);
        assert_eq!(family.get_or_create(&labels("a", "bc")).get(), 1);
        // Too long for the cache: still counted, in the family.
        let long = "x".repeat(MAX_KEY);
        inc(&long, "c");
        inc(&long, "c");
        assert_eq!(family.get_or_create(&labels(&long, "c")).get(), 2);
    }
}
