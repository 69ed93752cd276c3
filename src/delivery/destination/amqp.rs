//! `amqp`: the event is published to a RabbitMQ exchange with publisher confirms, as
//! a persistent, `mandatory` message whose `message_id` is the event ID and whose
//! headers are the forwarded ones. The broker's confirm is the attempt's success; a
//! nack, or a return (no queue is bound for the routing key: without `mandatory` the
//! broker would drop it silently), is a refused attempt, tried again.
//!
//! RabbitMQ keeps no record of message IDs: a publish whose confirm was lost (the
//! connection broke after the broker took it) is published again with the same
//! `message_id`, and the consumer sees it twice. docs/queue.md names this window.

use tokio::sync::Mutex;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};

use super::{Answer, Message};
use crate::config::{AmqpTarget, ServerUrl};
use crate::outcome::AttemptResult;

/// AMQP's persistent delivery mode.
const PERSISTENT: u8 = 2;

/// The connection and its confirm-mode channel, once made; made again once broken.
#[derive(Default)]
pub(super) struct Conn {
    open: Mutex<Option<(Connection, Channel)>>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("amqp::Conn").finish_non_exhaustive()
    }
}

impl Conn {
    async fn channel(&self, url: &ServerUrl) -> Result<Channel, String> {
        let mut slot = self.open.lock().await;
        if let Some((conn, ch)) = slot.as_ref()
            && conn.status().connected()
            && ch.status().connected()
        {
            return Ok(ch.clone());
        }
        *slot = None;
        let shown = |e: lapin::Error| format!("{}: {e}", url.shown());
        let conn = Connection::connect(url.expose(), ConnectionProperties::default())
            .await
            .map_err(shown)?;
        let ch = conn.create_channel().await.map_err(shown)?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(shown)?;
        *slot = Some((conn, ch.clone()));
        Ok(ch)
    }

    /// Forgets the channel, so the next attempt opens a new one (the broker closes a
    /// channel on some errors: a missing exchange).
    async fn drop_channel(&self) {
        *self.open.lock().await = None;
    }

    pub(super) async fn deliver(&self, t: &AmqpTarget, m: &Message) -> Answer {
        let ch = match self.channel(&t.url).await {
            Ok(c) => c,
            Err(e) => return Answer::failed(AttemptResult::Connect, e),
        };
        let routing_key = t.routing_key.fill(&m.route, m.event_type.as_deref());
        let mut headers = FieldTable::default();
        for (name, value) in m.titled_headers() {
            headers.insert(
                ShortString::from(name),
                AMQPValue::LongString(LongString::from(value.as_bytes())),
            );
        }
        let mut props = BasicProperties::default()
            .with_delivery_mode(PERSISTENT)
            .with_message_id(ShortString::from(m.event_id.as_str()))
            .with_timestamp(m.received_at_ms / 1000)
            .with_headers(headers);
        if let Some((_, ct)) = m.headers.iter().find(|(n, _)| n == "content-type") {
            props = props.with_content_type(ShortString::from(ct.as_str()));
        }
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let published = ch
            .basic_publish(
                ShortString::from(t.exchange.as_str()),
                ShortString::from(routing_key.as_str()),
                options,
                &m.body,
                props,
            )
            .await;
        let confirmed = match published {
            Ok(pending) => pending.await,
            Err(e) => Err(e),
        };
        match confirmed {
            Ok(Confirmation::Ack(None)) => Answer::received("confirmed".into()),
            Ok(Confirmation::Ack(Some(_))) => Answer::refused(format!(
                "unroutable: no queue is bound to exchange {:?} for routing key {routing_key:?}",
                t.exchange
            )),
            Ok(Confirmation::Nack(_)) => Answer::refused("the broker nacked the message".into()),
            Ok(Confirmation::NotRequested) => {
                self.drop_channel().await;
                Answer::failed(
                    AttemptResult::Broken,
                    "the channel was not in confirm mode".into(),
                )
            }
            Err(e) => {
                self.drop_channel().await;
                let text = format!("{}: {e}", t.url.shown());
                if text.contains("NOT_FOUND") || text.contains("ACCESS_REFUSED") {
                    Answer::refused(text)
                } else {
                    Answer::failed(AttemptResult::Broken, text)
                }
            }
        }
    }

    /// Connects if needed; the connection's state says whether the broker is there.
    pub(super) async fn check(&self, url: &ServerUrl) -> Result<(), String> {
        self.channel(url).await.map(|_| ())
    }
}
