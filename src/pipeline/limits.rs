//! The limits a request spends on its way through the pipeline, per client address:
//! the bodies it is sending at once and the bytes they hold (spent in `admit`), and its
//! budget of failed verifications on routes whose verification is expensive (spent in
//! `verify`). One client's flood spends that client's share, never a route's or the
//! gateway's. (Open connections are the listener's: `ingress::limits`.)

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::client::client_key;

/// Entries past this many are pruned of those that no longer hold anything (a full
/// budget, no body being read), so a flood from many addresses cannot grow the maps
/// without bound.
const PRUNE_ABOVE: usize = 10_000;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Request bodies being received, by client address: at most `max` at once from one
/// address. A body beyond that waits for one of its client's to finish (backpressure,
/// never a refusal of a burst), for no longer than the body's own deadline.
#[derive(Debug, Default)]
pub(crate) struct ClientReads {
    clients: Arc<Mutex<HashMap<IpAddr, Arc<Semaphore>>>>,
}

/// One body being read; dropping it frees the client's slot.
#[derive(Debug)]
pub(crate) struct ReadSlot {
    permit: Option<OwnedSemaphorePermit>,
    clients: Arc<Mutex<HashMap<IpAddr, Arc<Semaphore>>>>,
    semaphore: Arc<Semaphore>,
    client: IpAddr,
}

impl ClientReads {
    /// A slot for one more body from `client`, waiting up to `wait` while it already
    /// sends `max` at once; `None` if none came free in time.
    pub(crate) async fn enter(
        &self,
        client: IpAddr,
        max: usize,
        wait: Duration,
    ) -> Option<ReadSlot> {
        let client = client_key(client);
        let semaphore = lock(&self.clients)
            .entry(client)
            .or_insert_with(|| Arc::new(Semaphore::new(max)))
            .clone();
        let permit = match semaphore.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => tokio::time::timeout(wait, semaphore.clone().acquire_owned())
                .await
                .ok()?
                .ok()?,
        };
        Some(ReadSlot {
            permit: Some(permit),
            clients: self.clients.clone(),
            semaphore,
            client,
        })
    }

    /// Addresses with a body in progress or waiting (tests and diagnostics).
    #[cfg(test)]
    fn tracked(&self) -> usize {
        lock(&self.clients).len()
    }
}

impl Drop for ReadSlot {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut clients = lock(&self.clients);
        // Forget an idle client: every body in progress or waiting holds a handle of
        // its own, so only the map's and this one left means none; a flood from many
        // addresses leaves nothing behind.
        if Arc::strong_count(&self.semaphore) == 2
            && clients
                .get(&self.client)
                .is_some_and(|s| Arc::ptr_eq(s, &self.semaphore))
        {
            clients.remove(&self.client);
        }
    }
}

/// The first bytes of every body may use the whole of the body budget; bytes past
/// them only what the reserve leaves. Deliveries are a few KiB: they are admitted
/// while large bodies hold everything else.
const SMALL_BODY: usize = 64 * 1024;

/// Body bytes being received, over every client (`server.max_body_bytes_in_flight`):
/// counted as they arrive, never from a declared `Content-Length` (a head costs a
/// few bytes to send and would otherwise hold a megabyte of budget). One client (an
/// address, an IPv6 /64) holds at most its share; bytes past a body's first
/// [`SMALL_BODY`] leave a reserve, so that small deliveries from everyone else are
/// still received while a few clients hold their shares.
#[derive(Debug)]
pub(crate) struct BodyBudget {
    total: usize,
    share: usize,
    /// What bytes past a body's first [`SMALL_BODY`] may hold in all.
    bulk: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    bytes: usize,
    bulk: usize,
    clients: HashMap<IpAddr, usize>,
}

/// Why a body's next bytes were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OverBudget {
    /// The client already receives its share of the budget.
    Share,
    /// Every client together holds the budget (or what the reserve leaves large
    /// bodies).
    Total,
}

impl OverBudget {
    /// The detail an answer and the delivery log give.
    pub(crate) fn detail(self) -> &'static str {
        match self {
            Self::Share => "this client's share of server.max_body_bytes_in_flight reached",
            Self::Total => "server.max_body_bytes_in_flight reached",
        }
    }
}

/// The bytes one body holds of the budget; dropping it gives them back.
#[derive(Debug)]
pub(crate) struct BodyBytes<'a> {
    budget: &'a BodyBudget,
    client: IpAddr,
    bytes: usize,
    bulk: usize,
}

impl BodyBudget {
    /// A budget of `total` bytes; one client's share is a sixteenth of it, or one
    /// whole body (`max_body`) if that is more, and an eighth is kept for the first
    /// bytes of bodies.
    /// A budget smaller than eight sevenths of `max_body` keeps no reserve: one whole
    /// body is always receivable.
    pub(crate) fn new(total: usize, max_body: usize) -> Self {
        let whole = max_body.min(total);
        let bulk = (total - total / 8).max(whole);
        Self {
            total,
            share: (total / 16).max(whole).min(bulk),
            bulk,
            held: Mutex::default(),
        }
    }

    /// An empty reservation for one body from `client`.
    pub(crate) fn body(&self, client: IpAddr) -> BodyBytes<'_> {
        BodyBytes {
            budget: self,
            client: client_key(client),
            bytes: 0,
            bulk: 0,
        }
    }

    /// Bytes held, over every client (tests and diagnostics).
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let held = lock(&self.held);
        (held.bytes, held.clients.len())
    }
}

impl BodyBytes<'_> {
    /// Holds `n` more bytes of the body, or says why they may not be held.
    pub(crate) fn grow(&mut self, n: usize) -> Result<(), OverBudget> {
        let b = self.budget;
        let bulk = n.saturating_sub(SMALL_BODY.saturating_sub(self.bytes));
        let mut held = lock(&b.held);
        let mine = held.clients.get(&self.client).copied().unwrap_or(0);
        if mine + n > b.share {
            return Err(OverBudget::Share);
        }
        if held.bytes + n > b.total || held.bulk + bulk > b.bulk {
            return Err(OverBudget::Total);
        }
        held.bytes += n;
        held.bulk += bulk;
        *held.clients.entry(self.client).or_insert(0) += n;
        self.bytes += n;
        self.bulk += bulk;
        Ok(())
    }
}

impl Drop for BodyBytes<'_> {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut held = lock(&self.budget.held);
        held.bytes -= self.bytes;
        held.bulk -= self.bulk;
        if let Some(mine) = held.clients.get_mut(&self.client) {
            *mine -= self.bytes;
            if *mine == 0 {
                held.clients.remove(&self.client);
            }
        }
    }
}

/// A token bucket: `rate` per second, at most `rate` banked.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// Budgets of failed verifications, per route and client address.
#[derive(Debug, Default)]
pub(crate) struct FailureBudgets {
    buckets: Mutex<HashMap<(String, IpAddr), Bucket>>,
}

impl FailureBudgets {
    /// Whether `client` may still spend verification on `route`.
    pub(crate) fn left(&self, route: &str, client: IpAddr, rate: u32) -> bool {
        let mut buckets = lock(&self.buckets);
        let now = Instant::now();
        let rate = f64::from(rate);
        match buckets.get_mut(&(route.to_owned(), client_key(client))) {
            // Absent is full.
            None => true,
            Some(b) => {
                b.tokens = (b.tokens + now.duration_since(b.last).as_secs_f64() * rate).min(rate);
                b.last = now;
                b.tokens >= 1.0
            }
        }
    }

    /// Spends one token of `client`'s budget on `route`.
    pub(crate) fn spend(&self, route: &str, client: IpAddr, rate: u32) {
        let mut buckets = lock(&self.buckets);
        let now = Instant::now();
        if buckets.len() >= PRUNE_ABOVE {
            // A bucket refills completely within a second: older ones hold nothing.
            buckets.retain(|_, b| now.duration_since(b.last) < Duration::from_secs(1));
        }
        let b = buckets
            .entry((route.to_owned(), client_key(client)))
            .or_insert(Bucket {
                tokens: f64::from(rate),
                last: now,
            });
        b.tokens = (b.tokens - 1.0).max(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[tokio::test]
    async fn a_client_reads_at_most_max_bodies_at_once_and_the_rest_wait() {
        let reads = ClientReads::default();
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        let short = Duration::from_millis(50);
        let first = reads.enter(a, 2, short).await.expect("first");
        let _second = reads.enter(a, 2, short).await.expect("second");
        assert!(
            reads.enter(a, 2, short).await.is_none(),
            "a third body from a waits, and gives up after its wait"
        );
        assert!(
            reads.enter(b, 2, short).await.is_some(),
            "another client is unaffected"
        );
        // A waiting body gets the slot the moment one comes free.
        let waiting = tokio::spawn({
            let clients = reads.clients.clone();
            async move {
                let reads = ClientReads { clients };
                reads.enter(a, 2, Duration::from_secs(5)).await.is_some()
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        assert!(
            waiting.await.expect("task"),
            "the waiter got the freed slot"
        );
    }

    #[tokio::test]
    async fn idle_clients_are_forgotten() {
        let reads = ClientReads::default();
        for i in 0..100u8 {
            let slot = reads
                .enter(ip(&format!("192.0.2.{i}")), 4, Duration::ZERO)
                .await;
            drop(slot);
        }
        assert_eq!(reads.tracked(), 0);
    }

    #[test]
    fn a_body_holds_the_bytes_it_received_within_its_clients_share() {
        const MIB: usize = 1024 * 1024;
        let budget = BodyBudget::new(64 * MIB, MIB);
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        // A declared length costs nothing: 64 bodies from one client hold nothing
        // until their bytes arrive.
        let mut bodies: Vec<_> = (0..64).map(|_| budget.body(a)).collect();
        assert_eq!(budget.held(), (0, 0));
        // Their bytes take the client's share (4 MiB), and no more.
        let mut held = 0;
        for body in &mut bodies {
            match body.grow(256 * 1024) {
                Ok(()) => held += 256 * 1024,
                Err(why) => assert_eq!(why, OverBudget::Share),
            }
        }
        assert_eq!(held, 4 * MIB);
        // Another client is received meanwhile.
        let mut other = budget.body(b);
        assert_eq!(other.grow(4096), Ok(()));
        drop(other);
        drop(bodies);
        assert_eq!(budget.held(), (0, 0), "everything given back");
    }

    #[test]
    fn small_bodies_keep_a_reserve_while_large_ones_hold_the_rest() {
        const MIB: usize = 1024 * 1024;
        let budget = BodyBudget::new(64 * MIB, MIB);
        // 14 clients each holding their 4 MiB share of large bodies fill what the
        // reserve leaves (56 MiB)...
        let mut large = Vec::new();
        for i in 0..16u8 {
            let mut body = budget.body(ip(&format!("192.0.2.{i}")));
            for _ in 0..4 {
                if body.grow(MIB).is_err() {
                    break;
                }
            }
            large.push(body);
        }
        let (held, _) = budget.held();
        assert!(held <= 56 * MIB + 16 * SMALL_BODY, "{held}");
        // ...and a small delivery from anyone else is still received.
        let mut small = budget.body(ip("198.51.100.1"));
        assert_eq!(small.grow(8 * 1024), Ok(()));
        // Past its first 64 KiB, a body is large: refused.
        assert_eq!(small.grow(2 * MIB), Err(OverBudget::Total));
    }

    #[test]
    fn a_budget_of_one_body_still_receives_a_whole_one() {
        const MIB: usize = 1024 * 1024;
        let budget = BodyBudget::new(MIB, MIB);
        let mut body = budget.body(ip("192.0.2.1"));
        assert_eq!(body.grow(MIB), Ok(()));
        let mut other = budget.body(ip("192.0.2.2"));
        assert_eq!(other.grow(1), Err(OverBudget::Total));
    }

    #[test]
    fn one_clients_failures_spend_only_its_own_budget() {
        let budgets = FailureBudgets::default();
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        for _ in 0..5 {
            assert!(budgets.left("r", a, 5));
            budgets.spend("r", a, 5);
        }
        assert!(!budgets.left("r", a, 5), "a spent its budget");
        assert!(budgets.left("r", b, 5), "b has its own");
        assert!(budgets.left("other", a, 5), "and so has another route");
    }
}
