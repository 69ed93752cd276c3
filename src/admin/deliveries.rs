//! The delivery log's admin endpoints (behind the admin listener's guard; the fields
//! and answers are described in docs/operations.md, "The delivery log"):
//!
//! - `GET /deliveries?route=&outcome=&event_type=&event_id=&since=&before=&limit=&cursor=`
//!   — records newest first, without body and answer, and `next_cursor`;
//! - `GET /deliveries/<id>` — one record, with its queue event's per-destination state
//!   on a queue route;
//! - `GET /deliveries/stream?<the same filters>` — Server-Sent Events, one `delivery`
//!   event per new record, a `: keepalive` comment every 15 s;
//! - `POST /deliveries/<id>/replay[?destination=NAME]` — the recorded delivery again
//!   (`replay.rs`).
//!
//! `GET /overview` (`overview.rs`) reads the log too. The log's paths are read as
//! sent: a delivery's ID is not percent-decoded.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Frame;

use super::AdminContext;
use super::api::{self, DeliveryDetail, DeliveryPage, DeliverySummary, ErrorBody, EventView};
use super::exchange::{AdminAnswer, Frames, MAX_LIMIT, SseStream, unavailable};
use crate::observe::recorder::Written;
use crate::store::log::LogQuery;
use crate::store::{QueueStore as _, StoreError};

/// A live stream's comment when nothing happened for this long (proxies and browsers
/// close silent connections).
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Live streams open at once, over every client; beyond, 503.
use super::MAX_STREAMS;
/// A live stream that has sent no record for this long is ended (an inspector's page
/// reconnects by itself): an open reader holds its slot only while records flow.
const STREAM_IDLE: Duration = Duration::from_secs(600);
/// Records a list answers at most, and by default.
const DEFAULT_LIMIT: usize = 50;

/// A time bound: Unix milliseconds, or RFC 3339.
fn time(v: &str) -> Option<u64> {
    v.trim()
        .parse::<u64>()
        .ok()
        .or_else(|| crate::provider::timestamp::rfc3339_ms(v))
}

/// The filters of a list or a stream; an error names the bad parameter.
fn query_of(p: &HashMap<String, String>) -> Result<LogQuery, String> {
    let text = |k: &str| p.get(k).filter(|v| !v.is_empty()).cloned();
    let bound = |k: &str| -> Result<Option<u64>, String> {
        match text(k) {
            None => Ok(None),
            Some(v) => time(&v)
                .map(Some)
                .ok_or_else(|| format!("{k}={v:?}: use Unix milliseconds or RFC 3339")),
        }
    };
    let limit = match text("limit") {
        None => DEFAULT_LIMIT,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => return Err(format!("limit={v:?}: use 1 to {MAX_LIMIT}")),
        },
    };
    Ok(LogQuery {
        route: text("route"),
        outcome: text("outcome"),
        event_type: text("event_type"),
        event_id: text("event_id"),
        since: bound("since")?,
        before: bound("before")?,
        cursor: text("cursor"),
        limit,
    })
}

/// `GET /deliveries?…`: records newest first, without body and answer.
pub(super) async fn list(
    state: &AdminContext,
    p: &HashMap<String, String>,
    routes: &[String],
) -> AdminAnswer {
    let q = match query_of(p) {
        Ok(q) => q,
        Err(e) => return AdminAnswer::bad_request(e),
    };
    match state.recorder.log.list(&q, routes).await {
        Ok(page) => AdminAnswer::ok(&DeliveryPage {
            deliveries: page.records.into_iter().map(DeliverySummary).collect(),
            next_cursor: page.next_cursor,
        }),
        Err(e) => unavailable(&e),
    }
}

/// `GET /deliveries/<id>`: one record, with its queue event's state on a queue route.
pub(super) async fn show(state: &AdminContext, id: &str, routes: &[String]) -> AdminAnswer {
    match state.recorder.log.get(id, routes).await {
        Ok(Some(record)) => {
            let destinations = match &record.queue {
                Some(link) => match destinations(state, &link.route, &link.event_id).await {
                    Ok(d) => Some(d),
                    Err(e) => return unavailable(&e),
                },
                None => None,
            };
            AdminAnswer::ok(&DeliveryDetail {
                record,
                destinations,
            })
        }
        Ok(None) => AdminAnswer::not_found("no such delivery in the log"),
        Err(e) => unavailable(&e),
    }
}

/// The queue event's state in each of its route's destinations.
async fn destinations(
    state: &AdminContext,
    route: &str,
    event_id: &str,
) -> Result<Vec<EventView>, StoreError> {
    let routing = state.routing();
    let Some(config) = routing.routes.values().find(|r| r.name == route) else {
        return Ok(Vec::new());
    };
    if !state.store.keeps_queues() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for d in &config.destinations {
        let q = routing.queue(route, &d.name);
        if let Some((env, status)) = state.store.show(&q, event_id).await? {
            out.push(super::events::event_view(
                route,
                Some(d.name.clone()),
                &env,
                &status,
            ));
        }
    }
    Ok(out)
}

/// `GET /deliveries/stream?…`: each new record that passes the filters as a
/// `delivery` event, while one of the [`MAX_STREAMS`] slots is free.
pub(super) fn open_stream(state: &AdminContext, p: &HashMap<String, String>) -> AdminAnswer {
    let q = match query_of(p) {
        Ok(q) => q,
        Err(e) => return AdminAnswer::bad_request(e),
    };
    let Ok(slot) = state.live_streams.clone().try_acquire_owned() else {
        let why = format!("{MAX_STREAMS} live streams are open already: retry later");
        return AdminAnswer::Busy(api::to_json(&ErrorBody::new(why)));
    };
    AdminAnswer::Stream(Frames(live_frames(
        state.recorder.subscribe(),
        state.recorder.closing.clone(),
        q,
        STREAM_IDLE,
        slot,
    )))
}

/// The live stream's answer to `req`, written as the listener sends it (the
/// recorder's tests read it).
#[cfg(test)]
pub(crate) fn stream<B>(
    state: &AdminContext,
    req: &http::Request<B>,
) -> http::Response<super::exchange::AdminBody> {
    let req = super::exchange::AdminRequest::parse(req.method(), req.uri());
    super::exchange::response(open_stream(state, &req.query))
}

/// A live stream's place in the recorder's writes.
struct Live {
    rx: tokio::sync::broadcast::Receiver<Written>,
    closing: tokio_util::sync::CancellationToken,
    /// Whether the stream's first frame (`: open`) went out.
    open: bool,
    /// The write being sent, and the next of its records.
    write: Option<(Written, usize)>,
    /// The number of the record expected next: a write that starts further on
    /// follows writes this stream skipped.
    next: Option<u64>,
    /// How long the stream stays open without sending a record.
    idle: Duration,
    /// When it last sent one (or opened).
    quiet_since: tokio::time::Instant,
    /// The stream's place among the `MAX_STREAMS`, held until it ends.
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Live {
    /// The next frame: a record that passes `q`, a `lagged` event with the number of
    /// records skipped, or a keep-alive; `None` when the stream was idle for `idle`
    /// or the gateway stops.
    async fn next_frame(&mut self, q: &LogQuery) -> Option<Bytes> {
        use tokio::sync::broadcast::error::RecvError;
        if !self.open {
            // Sent at once, so the client sees the stream is open.
            self.open = true;
            return Some(Bytes::from_static(b": open\n\n"));
        }
        loop {
            if let Some((w, i)) = &mut self.write {
                while let Some(r) = w.records.get(*i) {
                    *i += 1;
                    if let Some(v) = r.view().filter(|v| q.matches(v)) {
                        self.quiet_since = tokio::time::Instant::now();
                        let data = api::to_json(&DeliverySummary(v.record(false)));
                        return Some(Bytes::from(format!("event: delivery\ndata: {data}\n\n")));
                    }
                }
                self.write = None;
            }
            let ends = self.quiet_since + self.idle;
            let wait = KEEPALIVE.min(ends.saturating_duration_since(tokio::time::Instant::now()));
            if wait.is_zero() {
                return None;
            }
            let next = tokio::select! {
                () = self.closing.cancelled() => return None,
                r = tokio::time::timeout(wait, self.rx.recv()) => r,
            };
            match next {
                Err(_) if tokio::time::Instant::now() >= ends => return None,
                Err(_) => return Some(Bytes::from_static(b": keepalive\n\n")),
                Ok(Ok(w)) => {
                    let skipped = self.next.map_or(0, |n| w.first.saturating_sub(n));
                    self.next = Some(w.first + w.records.len() as u64);
                    self.write = Some((w, 0));
                    // Fell behind: some records were skipped; the page reloads the
                    // list to catch up.
                    if skipped > 0 {
                        return Some(Bytes::from(format!("event: lagged\ndata: {skipped}\n\n")));
                    }
                }
                // The next write received tells how many records were skipped.
                Ok(Err(RecvError::Lagged(_))) => {}
                Ok(Err(RecvError::Closed)) => return None,
            }
        }
    }
}

/// A live stream's frames: an `open` comment at once, then each record `q` matches,
/// a `lagged` event with the number of records skipped when the stream fell more than
/// the recorder's backlog of writes behind, a keep-alive comment every [`KEEPALIVE`]
/// without a record, and the end after `idle` without one (or when the gateway
/// closes). `slot` is held until the end.
fn live_frames(
    rx: tokio::sync::broadcast::Receiver<Written>,
    closing: tokio_util::sync::CancellationToken,
    q: LogQuery,
    idle: Duration,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> SseStream {
    let live = Live {
        rx,
        closing,
        open: false,
        write: None,
        next: None,
        idle,
        quiet_since: tokio::time::Instant::now(),
        _slot: slot,
    };
    Box::pin(futures_util::stream::unfold(live, move |mut live| {
        let q = q.clone();
        async move {
            let frame = live.next_frame(&q).await?;
            Some((Ok(Frame::data(frame)), live))
        }
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use futures_util::StreamExt as _;

    #[tokio::test(start_paused = true)]
    async fn a_quiet_live_stream_keeps_alive_then_ends_and_frees_its_slot() {
        let (_tx, rx) = tokio::sync::broadcast::channel(4);
        let slots = Arc::new(tokio::sync::Semaphore::new(1));
        let slot = slots.clone().try_acquire_owned().expect("slot");
        let started = tokio::time::Instant::now();
        let mut frames = live_frames(
            rx,
            tokio_util::sync::CancellationToken::new(),
            LogQuery::default(),
            Duration::from_secs(60),
            slot,
        );
        let mut seen = Vec::new();
        while let Some(Ok(frame)) = frames.next().await {
            let data = frame.into_data().unwrap_or_default();
            seen.push(String::from_utf8_lossy(&data).into_owned());
        }
        assert_eq!(seen[0], ": open\n\n");
        assert_eq!(
            seen.len(),
            1 + 3,
            "keep-alives at 15, 30 and 45 s: {seen:?}"
        );
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(60),
            "ended when idle"
        );
        drop(frames);
        assert_eq!(slots.available_permits(), 1, "its slot is free again");
    }
}
