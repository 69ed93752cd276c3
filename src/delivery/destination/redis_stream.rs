//! `redis_stream`: the event is added to a Redis stream (`XADD` of `event_id`,
//! `route`, `event_type`, `headers` (JSON), `body`), guarded in the same script by a
//! marker key for the event kept for the store's `dedup_ttl`: a repeat (an attempt
//! whose answer was lost, the gateway killed before it recorded one) adds no second
//! entry and answers with the first one's ID. `maxlen` trims approximately
//! (`MAXLEN ~`).
//!
//! The marker is `<stream>:hookgate:seen:<route>:<event ID>`, in the stream's hash
//! slot on a cluster (the stream's name is its hash tag).

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::Mutex;

use super::{Answer, Message};
use crate::config::{RedisStreamTarget, ServerUrl};
use crate::outcome::AttemptResult;

static STREAM_ADD: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("scripts/stream_add.lua")));

/// The connection, once made (it reconnects by itself after that).
#[derive(Default)]
pub(super) struct Conn {
    manager: Mutex<Option<ConnectionManager>>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("redis_stream::Conn").finish_non_exhaustive()
    }
}

impl Conn {
    async fn manager(&self, url: &ServerUrl) -> Result<ConnectionManager, String> {
        let mut slot = self.manager.lock().await;
        if let Some(m) = slot.as_ref() {
            return Ok(m.clone());
        }
        let shown = |e: redis::RedisError| format!("{}: {e}", url.shown());
        let client = redis::Client::open(url.expose()).map_err(shown)?;
        let cfg = ConnectionManagerConfig::new()
            .set_number_of_retries(1)
            .set_connection_timeout(Some(Duration::from_secs(5)));
        let m = ConnectionManager::new_with_config(client, cfg)
            .await
            .map_err(shown)?;
        *slot = Some(m.clone());
        Ok(m)
    }

    pub(super) async fn deliver(
        &self,
        t: &RedisStreamTarget,
        m: &Message,
        dedup_ttl: Duration,
    ) -> Answer {
        let mut conn = match self.manager(&t.url).await {
            Ok(c) => c,
            Err(e) => return Answer::failed(AttemptResult::Connect, e),
        };
        let stream = t.stream.fill(&m.route, m.event_type.as_deref());
        let marker = format!("{{{stream}}}:hookgate:seen:{}:{}", m.route, m.event_id);
        let headers = m.headers_json().to_string();
        let mut call = STREAM_ADD.key(&stream);
        call.key(&marker)
            .arg(dedup_ttl.as_secs().max(1))
            .arg(t.maxlen.unwrap_or(0))
            .arg("event_id")
            .arg(&m.event_id)
            .arg("route")
            .arg(&m.route)
            .arg("event_type")
            .arg(m.event_type.as_deref().unwrap_or(""))
            .arg("headers")
            .arg(&headers)
            .arg("body")
            .arg(m.body.as_ref());
        match call.invoke_async::<(i64, String)>(&mut conn).await {
            Ok((1, id)) => Answer::received(format!("stream {stream} entry {id}")),
            Ok((_, id)) => Answer::received(format!("stream {stream} entry {id} (already there)")),
            Err(e) if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() => {
                Answer::failed(AttemptResult::Broken, format!("{}: {e}", t.url.shown()))
            }
            Err(e) => Answer::refused(format!("{}: {e}", t.url.shown())),
        }
    }

    /// Connects if needed and sends a PING.
    pub(super) async fn check(&self, url: &ServerUrl) -> Result<(), String> {
        let mut conn = self.manager(url).await?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map(|_| ())
            .map_err(|e| format!("{}: {e}", url.shown()))
    }
}
