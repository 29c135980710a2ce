//! The UDP flow table: which client address (address and port) has which flow. It holds at
//! most `cap` flows and each client (see [`Source`]) at most `per_source`; a new flow past
//! either takes the place of the least recently used one, of its own client's when the client
//! is at its share. So one client sending from many ports recycles its own flows and never
//! pushes out another client's.

use super::sources::Source;
use std::collections::HashMap;
use std::net::SocketAddr;

/// A flow's handle: `T` is what the table keeps for it (its queue and task).
struct Entry<T> {
    id: u64,
    used: u64,
    source: Source,
    value: T,
}

pub struct Flows<T> {
    cap: usize,
    per_source: u32,
    map: HashMap<SocketAddr, Entry<T>>,
    held: HashMap<Source, u32>,
    clock: u64,
    next_id: u64,
}

impl<T> Flows<T> {
    pub fn new(cap: u32, per_source: u32) -> Flows<T> {
        Flows {
            cap: cap.max(1) as usize,
            per_source: per_source.max(1),
            map: HashMap::new(),
            held: HashMap::new(),
            clock: 0,
            next_id: 0,
        }
    }

    /// The flow of `peer`, marked as just used.
    pub fn get(&mut self, peer: &SocketAddr) -> Option<&T> {
        self.clock += 1;
        let e = self.map.get_mut(peer)?;
        e.used = self.clock;
        Some(&e.value)
    }

    /// Add a flow for `peer` (which has none); returns its id (for [`Self::remove`]) and the
    /// flows it pushed out.
    pub fn insert(&mut self, peer: SocketAddr, value: T) -> (u64, Vec<T>) {
        let source = Source::ip(peer.ip());
        let mut out = Vec::new();
        if self.held.get(&source).copied().unwrap_or(0) >= self.per_source {
            out.extend(self.evict_lru(Some(source)));
        } else if self.map.len() >= self.cap {
            out.extend(self.evict_lru(None));
        }
        self.clock += 1;
        self.next_id += 1;
        *self.held.entry(source).or_insert(0) += 1;
        let old = self.map.insert(
            peer,
            Entry {
                id: self.next_id,
                used: self.clock,
                source,
                value,
            },
        );
        if let Some(old) = old {
            self.release(old.source);
            out.push(old.value);
        }
        (self.next_id, out)
    }

    /// Remove `peer`'s flow if it is still the one with this id (a flow that ended).
    pub fn remove(&mut self, peer: &SocketAddr, id: u64) -> Option<T> {
        if self.map.get(peer)?.id != id {
            return None;
        }
        let e = self.map.remove(peer)?;
        self.release(e.source);
        Some(e.value)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn release(&mut self, source: Source) {
        if let Some(n) = self.held.get_mut(&source) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&source);
            }
        }
    }

    /// Remove the least recently used flow (of `source`, if given).
    fn evict_lru(&mut self, source: Option<Source>) -> Option<T> {
        let peer = *self
            .map
            .iter()
            .filter(|(_, e)| source.is_none_or(|s| e.source == s))
            .min_by_key(|(_, e)| e.used)?
            .0;
        let e = self.map.remove(&peer)?;
        self.release(e.source);
        Some(e.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_client_at_its_share_recycles_its_own_oldest_flow() {
        let mut f = Flows::new(10, 2);
        f.insert(a("192.0.2.9:1"), "other");
        f.insert(a("192.0.2.1:1"), "p1");
        f.insert(a("192.0.2.1:2"), "p2");
        // p1 is used again, so p2 is now the oldest of that client's.
        assert_eq!(f.get(&a("192.0.2.1:1")), Some(&"p1"));
        let (_, out) = f.insert(a("192.0.2.1:3"), "p3");
        assert_eq!(out, vec!["p2"]);
        let (_, out) = f.insert(a("192.0.2.1:4"), "p4");
        assert_eq!(out, vec!["p1"]);
        assert_eq!(f.get(&a("192.0.2.9:1")), Some(&"other"));
        assert_eq!(f.len(), 3);
    }

    #[test]
    fn a_full_table_drops_the_least_recently_used_flow() {
        let mut f = Flows::new(2, 2);
        f.insert(a("192.0.2.1:1"), 1);
        f.insert(a("192.0.2.2:1"), 2);
        f.get(&a("192.0.2.1:1"));
        let (_, out) = f.insert(a("192.0.2.3:1"), 3);
        assert_eq!(out, vec![2]);
        assert_eq!(f.len(), 2);
    }

    #[test]
    fn an_ended_flow_is_removed_only_by_its_own_id() {
        let mut f = Flows::new(4, 4);
        let (id1, _) = f.insert(a("192.0.2.1:1"), 1);
        assert_eq!(f.remove(&a("192.0.2.1:1"), id1), Some(1));
        let (id2, _) = f.insert(a("192.0.2.1:1"), 2);
        assert_eq!(f.remove(&a("192.0.2.1:1"), id1), None);
        assert_eq!(f.remove(&a("192.0.2.1:1"), id2), Some(2));
        assert!(f.is_empty());
    }
}
