//! One destination server of any kind, as the tests of every kind use it: started and
//! prepared (the inbox table, a stream capturing the subjects, an exchange with a bound
//! queue), written into the config as the kind's key, read back in arrival order,
//! stopped and started again.

use std::time::Duration;

use crate::support::{NatsServer, PostgresServer, RabbitServer, RedisServer};

/// The kinds, as the config names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Postgres,
    Nats,
    Amqp,
    RedisStream,
}

/// The JetStream stream every NATS test publishes into.
pub const STREAM: &str = "WEBHOOKS";
/// The RabbitMQ exchange and queue.
pub const EXCHANGE: &str = "webhooks";
pub const QUEUE: &str = "inbox";

/// A running server of one kind.
pub enum Sink {
    Postgres(PostgresServer),
    Nats(NatsServer),
    Amqp(RabbitServer),
    RedisStream(RedisServer),
}

/// What a server holds of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub event_id: String,
    /// The headers it came with (names in lower case).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Held {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Sink {
    /// Starts a server of `kind` and prepares it to take events.
    pub async fn start(kind: Kind) -> Self {
        let sink = Self::start_bare(kind).await;
        sink.prepare().await;
        sink
    }

    /// Starts a server of `kind` with nothing prepared: no inbox table, no stream, no
    /// exchange or queue.
    pub async fn start_bare(kind: Kind) -> Self {
        match kind {
            Kind::Postgres => Self::Postgres(PostgresServer::start()),
            Kind::Nats => Self::Nats(NatsServer::start()),
            Kind::Amqp => Self::Amqp(RabbitServer::start()),
            Kind::RedisStream => Self::RedisStream(RedisServer::start_with_aof(true)),
        }
    }

    /// The kind's name, as attempts record it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Nats(_) => "nats",
            Self::Amqp(_) => "amqp",
            Self::RedisStream(_) => "redis_stream",
        }
    }

    /// Makes what the destination needs: the inbox table, a stream capturing the
    /// subjects, an exchange with a bound queue.
    pub async fn prepare(&self) {
        match self {
            Self::Postgres(pg) => {
                let schema = hookgate_inbox::schema("hookgate_inbox").expect("schema");
                pg.client()
                    .await
                    .batch_execute(&schema)
                    .await
                    .expect("create the inbox table");
            }
            Self::Nats(n) => {
                n.create_stream(STREAM, &["webhooks.>"], Duration::from_secs(120))
                    .await;
            }
            // A direct exchange: the routing keys the routes' events fill in.
            Self::Amqp(r) => {
                for key in ["stripe.invoice.paid", "stripe_sync.invoice.paid"] {
                    r.declare(EXCHANGE, QUEUE, key).await;
                }
            }
            Self::RedisStream(_) => {}
        }
    }

    /// The kind's key for a route or a destination (TOML).
    pub fn toml(&self) -> String {
        match self {
            Self::Postgres(pg) => {
                format!(
                    "postgres = {{ url = \"{}\", table = \"hookgate_inbox\" }}",
                    pg.url()
                )
            }
            Self::Nats(n) => format!(
                "nats = {{ url = \"{}\", subject = \"webhooks.{{route}}.{{event_type}}\" }}",
                n.url()
            ),
            Self::Amqp(r) => format!(
                "amqp = {{ url = \"{}\", exchange = \"{EXCHANGE}\", routing_key = \"{{route}}.{{event_type}}\" }}",
                r.url()
            ),
            Self::RedisStream(r) => format!(
                "redis_stream = {{ url = \"{}\", stream = \"webhooks:{{route}}\", maxlen = 100000 }}",
                r.url()
            ),
        }
    }

    /// Every event the server holds, in the order it took them.
    pub async fn held(&self) -> Vec<Held> {
        match self {
            Self::Postgres(pg) => {
                let rows = pg
                    .client()
                    .await
                    .query(
                        "SELECT event_id, headers::text, body FROM hookgate_inbox ORDER BY id",
                        &[],
                    )
                    .await
                    .expect("read the inbox");
                rows.iter()
                    .map(|r| {
                        let headers: String = r.get(1);
                        let map: serde_json::Map<String, serde_json::Value> =
                            serde_json::from_str(&headers).expect("headers are a JSON object");
                        Held {
                            event_id: r.get(0),
                            headers: map
                                .into_iter()
                                .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_owned()))
                                .collect(),
                            body: r.get(2),
                        }
                    })
                    .collect()
            }
            Self::Nats(n) => n
                .stream_messages(STREAM)
                .await
                .into_iter()
                .map(|m| {
                    let headers: Vec<(String, String)> = m
                        .headers
                        .iter()
                        .flat_map(|(k, vs)| {
                            vs.iter()
                                .map(|v| (k.to_string(), v.to_string()))
                                .collect::<Vec<_>>()
                        })
                        .collect();
                    let id = headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("nats-msg-id"))
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default();
                    Held {
                        event_id: id,
                        headers,
                        body: m.payload.to_vec(),
                    }
                })
                .collect(),
            Self::Amqp(r) => r
                .queue_messages(QUEUE)
                .await
                .into_iter()
                .map(|m| {
                    let headers = m
                        .properties
                        .headers()
                        .as_ref()
                        .map(|t| {
                            t.inner()
                                .iter()
                                .map(|(k, v)| {
                                    let text = match v {
                                        lapin::types::AMQPValue::LongString(s) => {
                                            String::from_utf8_lossy(s.as_bytes()).into_owned()
                                        }
                                        other => format!("{other:?}"),
                                    };
                                    (k.to_string(), text)
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    Held {
                        event_id: m
                            .properties
                            .message_id()
                            .as_ref()
                            .map(ToString::to_string)
                            .unwrap_or_default(),
                        headers,
                        body: m.data.clone(),
                    }
                })
                .collect(),
            Self::RedisStream(r) => {
                // The queue route's stream, then the sync route's.
                let mut entries: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
                for stream in ["webhooks:stripe", "webhooks:stripe_sync"] {
                    let part: Vec<(String, Vec<Vec<u8>>)> =
                        r.cmd(redis::cmd("XRANGE").arg(stream).arg("-").arg("+"));
                    entries.extend(part);
                }
                entries
                    .into_iter()
                    .map(|(_, fields)| {
                        let text = |name: &str| -> Vec<u8> {
                            fields
                                .chunks(2)
                                .find(|kv| kv[0] == name.as_bytes())
                                .and_then(|kv| kv.get(1).cloned())
                                .unwrap_or_default()
                        };
                        let headers: serde_json::Map<String, serde_json::Value> =
                            serde_json::from_slice(&text("headers")).unwrap_or_default();
                        Held {
                            event_id: String::from_utf8_lossy(&text("event_id")).into_owned(),
                            headers: headers
                                .into_iter()
                                .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_owned()))
                                .collect(),
                            body: text("body"),
                        }
                    })
                    .collect()
            }
        }
    }

    /// How many events the server holds (copies counted), read cheaply: a count, the
    /// stream's or the queue's length.
    pub async fn count(&self) -> usize {
        match self {
            Self::Postgres(pg) => {
                let n: i64 = pg
                    .client()
                    .await
                    .query_one("SELECT count(*) FROM hookgate_inbox", &[])
                    .await
                    .expect("count the inbox")
                    .get(0);
                usize::try_from(n).unwrap_or(0)
            }
            Self::Nats(n) => {
                let mut stream = n
                    .jetstream()
                    .await
                    .get_stream(STREAM)
                    .await
                    .expect("the stream");
                let info = stream.info().await.expect("stream info");
                usize::try_from(info.state.messages).unwrap_or(0)
            }
            Self::Amqp(r) => {
                let conn = r.connect().await;
                let ch = conn.create_channel().await.expect("channel");
                let passive = lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                };
                let q = ch
                    .queue_declare(QUEUE.into(), passive, lapin::types::FieldTable::default())
                    .await
                    .expect("look at the queue");
                let _ = conn.close(200, "counted".into()).await;
                q.message_count() as usize
            }
            Self::RedisStream(r) => {
                let n: usize = r.cmd(redis::cmd("XLEN").arg("webhooks:stripe"));
                n
            }
        }
    }

    /// The event IDs the server holds, in the order it took them.
    pub async fn ids(&self) -> Vec<String> {
        self.held().await.into_iter().map(|h| h.event_id).collect()
    }

    /// Stops the server (its data kept).
    pub fn stop(&mut self) {
        match self {
            Self::Postgres(s) => s.stop(),
            Self::Nats(s) => s.stop(),
            Self::Amqp(s) => s.stop(),
            Self::RedisStream(s) => s.stop(),
        }
    }

    /// Kills the server (SIGKILL), its data kept as the kill left it.
    pub fn kill(&mut self) {
        match self {
            Self::Postgres(s) => s.kill(),
            Self::Nats(s) => s.kill(),
            Self::Amqp(s) => s.kill(),
            Self::RedisStream(s) => s.signal("KILL"),
        }
    }

    /// Starts it again on the same port, with its data.
    pub fn restart(&mut self) {
        match self {
            Self::Postgres(s) => s.restart(),
            Self::Nats(s) => s.restart(),
            Self::Amqp(s) => s.restart(),
            Self::RedisStream(s) => s.restart(),
        }
    }
}
