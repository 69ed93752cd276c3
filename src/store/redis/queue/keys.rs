//! A destination queue's keys in Redis (the key layout is in `store/redis/layout.rs`).

use crate::store::QueueRef;
use crate::store::redis::{QUEUES, layout::queue_base};

/// A destination queue's keys.
pub(super) struct Keys {
    /// `<prefix>#q:{<route>}:`, or `<prefix>#q:{<route>}/<destination>:` for a
    /// destination not named after the route (`layout.rs`).
    base: String,
}

impl Keys {
    pub(super) fn new(q: &QueueRef<'_>) -> Self {
        Self {
            base: queue_base(q, QUEUES),
        }
    }

    pub(super) fn ev_prefix(&self) -> String {
        format!("{}ev:", self.base)
    }

    pub(super) fn ev(&self, id: &str) -> String {
        format!("{}ev:{id}", self.base)
    }

    pub(super) fn stream(&self) -> String {
        format!("{}stream", self.base)
    }

    pub(super) fn delayed(&self) -> String {
        format!("{}delayed", self.base)
    }

    pub(super) fn all(&self) -> String {
        format!("{}all", self.base)
    }

    pub(super) fn dead(&self) -> String {
        format!("{}dead", self.base)
    }

    pub(super) fn delivered(&self) -> String {
        format!("{}delivered", self.base)
    }

    pub(super) fn rate(&self) -> String {
        format!("{}rate", self.base)
    }

    pub(super) fn pause(&self) -> String {
        format!("{}pause", self.base)
    }

    pub(super) fn busy(&self) -> String {
        format!("{}busy", self.base)
    }

    /// The queue's clock (`CLOCK`): the highest reading and the offset of a step back.
    pub(super) fn clock(&self) -> String {
        format!("{}clock", self.base)
    }

    /// An order key's line. The key comes after the route's hash tag, so whatever it
    /// holds, the line is in the route's slot.
    pub(super) fn line(&self, order_key: &str) -> String {
        format!("{}o:{order_key}", self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_route_carries_its_hash_tag() {
        let k = Keys::new(&QueueRef::new("hg:", "stripe", "stripe"));
        for key in [
            k.ev("evt_1"),
            k.stream(),
            k.delayed(),
            k.all(),
            k.dead(),
            k.delivered(),
        ] {
            assert!(key.starts_with("hg:#q:{stripe}:"), "{key}");
        }
        assert!(k.ev("evt_1").starts_with(&k.ev_prefix()));
        assert_eq!(k.line("cust_1"), "hg:#q:{stripe}:o:cust_1");
    }

    #[test]
    fn a_named_destination_keeps_the_route_hash_tag() {
        let q = QueueRef::new("hg:", "stripe", "billing");
        let k = Keys::new(&q);
        for key in [
            k.ev("evt_1"),
            k.stream(),
            k.delayed(),
            k.all(),
            k.dead(),
            k.delivered(),
            k.line("cust_1"),
            k.rate(),
            k.pause(),
            k.busy(),
        ] {
            assert!(key.starts_with("hg:#q:{stripe}/billing:"), "{key}");
        }
        // The route's own destination keeps the keys it had before destinations.
        assert_ne!(
            k.stream(),
            Keys::new(&QueueRef::new("hg:", "stripe", "stripe")).stream()
        );
    }
}
