//! Limits per client address on the listeners: the connections one address holds
//! open, counted under its client key (an IPv6 address by its /64). One address
//! holding many silent connections takes its own share, never the listener's. (What a
//! request spends once it is read, bodies and failed verifications, is the
//! pipeline's: `pipeline::limits`.)

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub(crate) use crate::client::client_key;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Open connections by client address (the peer: a connection is accepted before any
/// header names another), at most `max` from one. One address holding many silent
/// connections then takes its own share, never the whole of `server.max_connections`
/// or the process's file descriptors.
#[derive(Debug, Default)]
pub(crate) struct ClientConnections {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One open connection; dropping it frees its client's place.
#[derive(Debug)]
pub(crate) struct ConnectionSlot {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
    client: IpAddr,
}

impl ClientConnections {
    /// A place for one more connection from `client`, if it has fewer than `max`.
    pub(crate) fn enter(&self, client: IpAddr, max: usize) -> Option<ConnectionSlot> {
        let mut open = lock(&self.open);
        let n = open.entry(client).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(ConnectionSlot {
            open: self.open.clone(),
            client,
        })
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        if let Some(n) = open.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.client);
            }
        }
    }
}
