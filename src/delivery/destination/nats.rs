//! `nats`: the event is published to a JetStream subject and the attempt succeeds on
//! the stream's acknowledgement.
//!
//! Each message carries `Nats-Msg-Id: <event ID>`: JetStream drops a repeat within
//! the stream's duplicate window and acknowledges it as a duplicate, which is success
//! too (an earlier attempt's acknowledgement was lost). No stream capturing the subject
//! is a refused attempt, tried again. The forwarded headers go as message headers.

use tokio::sync::Mutex;

use async_nats::jetstream;
use async_nats::jetstream::context::PublishErrorKind;

use super::{Answer, Message};
use crate::config::{NatsTarget, ServerUrl};
use crate::outcome::AttemptResult;

/// The client, once connected (it reconnects by itself after that).
#[derive(Debug, Default)]
pub(super) struct Conn {
    client: Mutex<Option<(async_nats::Client, jetstream::Context)>>,
}

impl Conn {
    async fn context(
        &self,
        url: &ServerUrl,
    ) -> Result<(async_nats::Client, jetstream::Context), String> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(std::time::Duration::from_secs(5))
            .connect(url.expose())
            .await
            .map_err(|e| format!("{}: {e}", url.shown()))?;
        let js = jetstream::new(client.clone());
        *slot = Some((client.clone(), js.clone()));
        Ok((client, js))
    }

    pub(super) async fn deliver(&self, t: &NatsTarget, m: &Message) -> Answer {
        let (client, js) = match self.context(&t.url).await {
            Ok(c) => c,
            Err(e) => return Answer::failed(AttemptResult::Connect, e),
        };
        if client.connection_state() != async_nats::connection::State::Connected {
            return Answer::failed(
                AttemptResult::Connect,
                format!("{}: not connected (reconnecting)", t.url.shown()),
            );
        }
        let subject = t.subject.fill(&m.route, m.event_type.as_deref());
        let mut headers = async_nats::HeaderMap::new();
        for (name, value) in m.titled_headers() {
            headers.append(name.as_str(), value);
        }
        headers.insert("Nats-Msg-Id", m.event_id.as_str());
        let ack = match js
            .publish_with_headers(subject.clone(), headers, m.body.clone())
            .await
        {
            Ok(pending) => pending.await,
            Err(e) => Err(e),
        };
        match ack {
            Ok(ack) if ack.duplicate => Answer::received(format!(
                "stream {} seq {} (duplicate)",
                ack.stream, ack.sequence
            )),
            Ok(ack) => Answer::received(format!("stream {} seq {}", ack.stream, ack.sequence)),
            Err(e) => match e.kind() {
                PublishErrorKind::StreamNotFound => Answer::refused(format!(
                    "no JetStream stream captures the subject {subject:?}: add one (docs/queue.md)"
                )),
                PublishErrorKind::TimedOut => Answer::failed(AttemptResult::Timeout, e.to_string()),
                _ => Answer::failed(AttemptResult::Broken, e.to_string()),
            },
        }
    }

    /// Connects if needed and flushes: the server answers a PING.
    pub(super) async fn check(&self, url: &ServerUrl) -> Result<(), String> {
        let (client, _) = self.context(url).await?;
        client
            .flush()
            .await
            .map_err(|e| format!("{}: {e}", url.shown()))
    }
}
