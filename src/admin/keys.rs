//! `DELETE /keys/<route>/<event id>`: frees one event's key for a deliberate
//! redelivery (`hookgate forget` calls it): the next delivery of the event is
//! forwarded (or queued) again.

use super::AdminContext;
use super::api::Forgotten;
use super::exchange::{AdminAnswer, AdminRequest};
use crate::provider::EventId;
use crate::store::{DedupKey, DedupStore as _, QueueStore as _};

/// `DELETE /keys/<route>/<event id>`.
pub(super) async fn forget(state: &AdminContext, req: &AdminRequest) -> AdminAnswer {
    let (Some(route), Some(raw_id)) = (req.args.first(), req.after_route()) else {
        return AdminAnswer::bad_request("use DELETE /keys/<route>/<event id>");
    };
    let routing = state.routing();
    if routing.route(route).is_none() || raw_id.is_empty() {
        return AdminAnswer::not_found("no such route");
    }
    let id = EventId::new(&raw_id);
    let key = DedupKey::new(&routing.store_cfg.key_prefix, route, id.as_str());
    let queue_route = routing
        .route(route)
        .filter(|r| r.delivery == crate::config::Delivery::Queue);
    let forgotten = if let Some(r) = queue_route {
        // A queue route: its destinations' delivered records are what answer copies.
        let mut any = Ok(false);
        for d in &r.destinations {
            let q = routing.queue(route, &d.name);
            match state.store.forget_delivered(&q, id.as_str()).await {
                Ok(f) => any = any.map(|a| a || f),
                Err(e) => any = Err(e),
            }
        }
        any
    } else {
        state.store.forget(&key).await
    };
    match forgotten {
        Ok(existed) => {
            tracing::info!(route, event_id = %id, existed, "key forgotten on request: the next delivery of this event is forwarded");
            AdminAnswer::ok(&Forgotten {
                route: route.clone(),
                event_id: id.as_str().to_owned(),
                forgotten: existed,
            })
        }
        Err(e) => {
            tracing::warn!(route, event_id = %id, error = %e, "forgetting a key failed: the store did not answer");
            AdminAnswer::unavailable("dedup store unavailable, retry later")
        }
    }
}
