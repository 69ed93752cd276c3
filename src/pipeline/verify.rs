//! Verify: the signature and timestamp (or a handshake), the event ID and type, and
//! the destinations the route's filters leave.

use std::sync::Arc;

use super::Ctx;
use super::PipelineContext;
use super::respond::Answer;
use crate::config::Destination;
use crate::observe::RequestRecord;
use crate::provider::{Accepted, BodyValues, Inbound, VerifiedDelivery, accept_reading};

/// What [`verify`] found in an admitted request.
pub(super) struct Verified {
    pub(super) delivery: VerifiedDelivery,
    pub(super) event_type: Option<String>,
    /// The route's destinations this event goes to, when its type's filters leave
    /// some out (`None`: all of them).
    pub(super) destinations: Option<Vec<Arc<Destination>>>,
    /// The route's JSON fields, read in the walk that found the event ID: the job
    /// takes its destinations' `order_by` keys from them.
    pub(super) fields: BodyValues,
}

/// Verify: the client's failure budget (429), the signature and timestamp (401) or a
/// handshake, the event ID (400), the event type, and the destinations its filters
/// leave.
#[expect(
    clippy::result_large_err,
    reason = "an answer ends the request: returned once, as the async stages return theirs"
)]
pub(super) fn verify(
    state: &Arc<PipelineContext>,
    ctx: &Ctx,
    rec: &mut RequestRecord,
) -> Result<Verified, Answer> {
    let route = &ctx.route;
    let url = route.public_url.as_ref().map(|u| match &ctx.query {
        Some(q) => format!("{u}?{q}"),
        None => u.clone(),
    });
    let inbound = Inbound {
        method: &ctx.method,
        headers: &ctx.headers,
        body: &ctx.body,
        query: ctx.query.as_deref(),
        url: url.as_deref(),
    };
    // Where verification is expensive (the asymmetric schemes), a client's failed
    // verifications spend its budget on the route; once spent, that client's requests
    // are refused before verification until it refills. HMAC costs microseconds and
    // needs no budget: forged requests never stop valid ones.
    let budgeted = route.verifier.is_costly();
    if budgeted
        && !state
            .budgets
            .left(&route.name, ctx.client, route.failure_budget)
    {
        return Err(Answer::RateLimited);
    }
    // The event ID, the event type and the order keys that are JSON fields are read in
    // one walk over the body, after the signature (one walk, not one each).
    let accepted = accept_reading(
        &route.verifier,
        &route.event_id,
        &route.body_fields,
        &inbound,
        ctx.now,
    );
    let (delivery, fields) = match accepted {
        Ok((Accepted::Delivery(d), fields)) => (d, fields),
        Ok((Accepted::Handshake(reply), _)) => return Err(handshake(state, ctx, reply, rec)),
        Err(rejection) => {
            if budgeted && matches!(rejection, crate::provider::Rejection::Verify(_)) {
                state
                    .budgets
                    .spend(&route.name, ctx.client, route.failure_budget);
            }
            rec.detail = Some(rejection.to_string());
            let source = route.event_id.to_string();
            rec.reason = Some(crate::provider::explain(&rejection, rec.provider, &source));
            return Err(Answer::Rejected(rejection));
        }
    };
    rec.event_id = Some(delivery.event_id().to_string());
    let event_type = route.event_type.as_ref().and_then(|t| {
        let read = route.body_fields.event_type(&fields);
        t.extract_read(&ctx.headers, &ctx.body, read)
    });
    // An event type the route does not take (its `events`, or no destination's) is
    // acknowledged and never forwarded or stored; its event ID is recorded as done for
    // the dedup window, because the type is often in a header the signature does not
    // cover: the same signed bytes sent again under another type are a copy, not a new
    // event. A type that cannot be read goes only where no filter applies: a filter
    // admits what it can see, nothing else.
    // `None`: every destination (the common case, no filter: nothing to collect).
    let destinations = match (&event_type, route.filters_events()) {
        (_, false) => None,
        (Some(t), true) => Some(route.destinations_for(t)),
        (None, true) => Some(route.destinations_for_untyped()),
    };
    rec.event_type.clone_from(&event_type);
    rec.secret_index = Some(delivery.secret_index());
    state
        .metrics
        .matched_secret(&ctx.route_metrics, delivery.secret_index());
    Ok(Verified {
        delivery,
        event_type,
        destinations,
        fields,
    })
}

/// A handshake's answer, once a secret it hands over is kept (or refused).
fn handshake(
    state: &Arc<PipelineContext>,
    ctx: &Ctx,
    mut reply: crate::provider::HandshakeReply,
    rec: &mut RequestRecord,
) -> Answer {
    if let Some(secret) = reply.handed_secret.take() {
        let configured = ctx.route.secret_count > 0;
        match state
            .handed
            .keep(&ctx.route.name, configured, secret, ctx.now)
        {
            super::handed::Handed::Kept => {}
            refused => {
                rec.detail = Some(format!("handed-over secret refused: {refused:?}"));
                return Answer::HandshakeRefused {
                    route_has_secret: configured,
                };
            }
        }
    }
    Answer::Handshake(reply)
}
