//! Admit: route, method, the client's and the gateway's limits, and the body.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};

use super::Ctx;
use super::PipelineContext;
use super::respond::Answer;
use crate::config::Delivery;
use crate::observe::RequestRecord;

/// Admit: the route (404), the method (405), the client's and the gateway's limits
/// (429, 503), and the body under `max_body` and `body_timeout` (413, 408).
pub(super) async fn admit(
    state: &Arc<PipelineContext>,
    req: Request<Incoming>,
    peer: SocketAddr,
    rec: &mut RequestRecord,
) -> Result<Ctx, Answer> {
    let routing = state.routing();
    let Some(route) = routing.routes.get(req.uri().path()).cloned() else {
        return Err(Answer::NoRoute);
    };
    rec.route = Some(route.name.clone());
    let route_metrics = state.metrics.route(&route.name);
    rec.metrics = Some(route_metrics.clone());
    rec.provider = Some(route.verifier.preset());
    rec.credential_header = route.verifier.credential_header().cloned();
    if !route.methods.contains(req.method()) {
        let allow = route
            .methods
            .iter()
            .map(Method::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Answer::MethodNotAllowed { allow });
    }

    // Worked out once, when the request's record began (`server.trusted_proxies`).
    let client = rec.client;
    let (parts, body) = req.into_parts();
    // Bodies being read hold a slot of their client's, never delivery capacity: a
    // client that trickles bodies slows itself only. Beyond max_reads_per_client, a
    // body waits for one of its client's to finish, for no longer than body_timeout.
    let Some(reading) = state
        .reads
        .enter(
            client,
            routing.server.max_reads_per_client,
            routing.server.body_timeout,
        )
        .await
    else {
        return Err(Answer::ClientBusy);
    };
    // Bytes being received are bounded over every client and per client, counted as
    // they arrive (a declared length costs the sender nothing).
    let mut receiving = state.body_bytes.body(client);
    let max_body = routing.server.max_body;
    let body = match read_body(body, max_body, routing.server.body_timeout, &mut receiving).await {
        Ok(body) => body,
        Err(Unread::Answer(answer)) => return Err(answer),
        Err(Unread::OverBudget(why)) => {
            rec.detail = Some(why.detail().into());
            return Err(Answer::Overloaded);
        }
    };
    drop(receiving);
    drop(reading);
    // Bounded, never queued: beyond server.max_in_flight the provider retries later.
    // The permit is held until the forward and its settle end, wherever they run.
    let Ok(permit) = state.in_flight.clone().try_acquire_owned() else {
        return Err(Answer::Overloaded);
    };
    rec.body = Some(body.clone());
    rec.queue = route.delivery == Delivery::Queue;
    Ok(Ctx {
        routing,
        route,
        route_metrics,
        client,
        peer,
        method: parts.method,
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers,
        body,
        now: state.clock.now(),
        _permit: permit,
    })
}

/// Why a body was not read whole.
enum Unread {
    Answer(Answer),
    OverBudget(super::limits::OverBudget),
}

/// Reads the body under the size limit and the body timeout, each frame's bytes held
/// of the body budget as it arrives. A declared `Content-Length` over the limit is
/// refused before anything is read; nothing is set aside for a declared length.
async fn read_body(
    body: Incoming,
    max: usize,
    limit: Duration,
    budget: &mut super::limits::BodyBytes<'_>,
) -> Result<Bytes, Unread> {
    if body.size_hint().upper().is_some_and(|n| n > max as u64) {
        return Err(Unread::Answer(Answer::TooLarge { limit: max }));
    }
    let read = async {
        let mut body = body;
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut len = 0usize;
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame
                .map_err(|_| Unread::Answer(Answer::BadBody))?
                .into_data()
            else {
                continue; // trailers carry nothing of the body
            };
            if data.is_empty() {
                continue;
            }
            len += data.len();
            if len > max {
                return Err(Unread::Answer(Answer::TooLarge { limit: max }));
            }
            budget.grow(data.len()).map_err(Unread::OverBudget)?;
            chunks.push(data);
        }
        Ok(match chunks.len() {
            0 => Bytes::new(),
            1 => chunks.swap_remove(0),
            _ => {
                let mut whole = bytes::BytesMut::with_capacity(len);
                for chunk in chunks {
                    whole.extend_from_slice(&chunk);
                }
                whole.freeze()
            }
        })
    };
    tokio::time::timeout(limit, read)
        .await
        .unwrap_or(Err(Unread::Answer(Answer::BodyTimeout)))
}
