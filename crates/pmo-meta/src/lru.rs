//! The least-recently-used map behind the process's key caches: [`crate::keys`]'s Argon2id
//! masters and [`crate::kept_keys`]'s derived PMO keys. Entries are found by a 32-byte
//! fingerprint, never by a key itself; the least recently used goes when a new one would pass
//! the bound, and is dropped (so wiped, for values that wipe themselves) under the lock.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// Fingerprint -> (value, last use), and the use clock.
type Map<V> = (HashMap<[u8; 32], (V, u64)>, u64);

/// A process-wide LRU of at most `max` entries (a `static`: `const` to make).
pub(crate) struct SharedLru<V> {
    inner: Mutex<Option<Map<V>>>,
    max: usize,
}

impl<V: Clone> SharedLru<V> {
    pub(crate) const fn new(max: usize) -> Self {
        SharedLru {
            inner: Mutex::new(None),
            max,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Map<V>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value under `k`, marked as used now.
    pub(crate) fn get(&self, k: &[u8; 32]) -> Option<V> {
        let mut g = self.lock();
        let (map, clock) = g.as_mut()?;
        let (v, used) = map.get_mut(k)?;
        *clock += 1;
        *used = *clock;
        Some(v.clone())
    }

    /// Keep `v` under `k`, the least recently used entry going if the map is full.
    pub(crate) fn put(&self, k: [u8; 32], v: V) {
        let mut g = self.lock();
        let (map, clock) = g.get_or_insert_with(|| (HashMap::new(), 0));
        if map.len() >= self.max && !map.contains_key(&k) {
            if let Some(lru) = map.iter().min_by_key(|(_, (_, u))| *u).map(|(k, _)| *k) {
                map.remove(&lru);
            }
        }
        *clock += 1;
        map.insert(k, (v, *clock));
    }

    /// Entries kept now.
    pub(crate) fn len(&self) -> usize {
        self.lock().as_ref().map_or(0, |(m, _)| m.len())
    }

    /// Whether `k` is kept (without marking it used).
    #[cfg(test)]
    pub(crate) fn contains(&self, k: &[u8; 32]) -> bool {
        self.lock().as_ref().is_some_and(|(m, _)| m.contains_key(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_goes_first() {
        let lru: SharedLru<u32> = SharedLru::new(2);
        assert_eq!(lru.get(&[1; 32]), None);
        lru.put([1; 32], 1);
        lru.put([2; 32], 2);
        assert_eq!(lru.get(&[1; 32]), Some(1), "1 used after 2");
        lru.put([3; 32], 3);
        assert!(lru.contains(&[1; 32]) && lru.contains(&[3; 32]));
        assert!(!lru.contains(&[2; 32]), "2 was the least recently used");
        lru.put([3; 32], 33);
        assert_eq!(
            (lru.len(), lru.get(&[3; 32])),
            (2, Some(33)),
            "replaced, not grown"
        );
    }
}
