//! The destination servers the tests start: each keeps what it acknowledged when it is
//! killed (SIGKILL) or stopped, and comes back on the same port with it.

use crate::support::{NatsServer, PostgresServer, RabbitServer};
use async_nats::jetstream::message::PublishMessage;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Confirmation};
use std::time::Duration;

/// True if something listens on 127.0.0.1:`port`.
fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[tokio::test]
async fn postgres_keeps_committed_rows_across_a_kill_and_a_stop() {
    let mut pg = PostgresServer::start();
    let c = pg.client().await;
    c.batch_execute("CREATE TABLE inbox (event_id text PRIMARY KEY, body jsonb NOT NULL)")
        .await
        .expect("create table");
    c.execute(
        "INSERT INTO inbox VALUES ($1, $2)",
        &[&"evt_1", &serde_json::json!({"amount": 2000})],
    )
    .await
    .expect("insert");
    drop(c);

    pg.kill();
    assert!(
        !listening(pg.port),
        "the server still listens after SIGKILL"
    );
    pg.restart();
    let c = pg.client().await;
    c.execute("INSERT INTO inbox VALUES ('evt_2', '{}')", &[])
        .await
        .expect("insert after the crash");
    drop(c);

    pg.stop();
    assert!(!listening(pg.port), "the server still listens after stop");
    pg.restart();
    // Over its Unix socket this time.
    let (c, connection) = tokio_postgres::Config::new()
        .host_path(pg.socket_dir())
        .port(pg.port)
        .user("hookgate")
        .dbname("hookgate")
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connect over the Unix socket");
    tokio::spawn(connection);
    let rows = c
        .query("SELECT event_id, body FROM inbox ORDER BY event_id", &[])
        .await
        .expect("select");
    let got: Vec<(String, serde_json::Value)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        got,
        [
            ("evt_1".to_owned(), serde_json::json!({"amount": 2000})),
            ("evt_2".to_owned(), serde_json::json!({})),
        ]
    );
}

/// Publishes `body` with `event_id` as its `Nats-Msg-Id` and waits for the stream's
/// acknowledgement; true if the stream saw the id already.
async fn publish_acked(nats: &NatsServer, event_id: &str, body: &'static str) -> bool {
    let ack = nats
        .jetstream()
        .await
        .send_publish(
            "hooks.stripe",
            PublishMessage::build()
                .payload(body.into())
                .message_id(event_id)
                .header("Hookgate-Route", "stripe"),
        )
        .await
        .expect("publish")
        .await
        .expect("the stream's acknowledgement");
    assert_eq!(ack.stream, "HOOKS");
    ack.duplicate
}

#[tokio::test]
async fn nats_keeps_acknowledged_messages_across_a_kill_and_a_stop() {
    let mut nats = NatsServer::start();
    let info = nats
        .create_stream("HOOKS", &["hooks.>"], Duration::from_secs(600))
        .await;
    assert_eq!(info.config.duplicate_window, Duration::from_secs(600));
    assert!(!publish_acked(&nats, "evt_1", "one").await);

    nats.kill();
    assert!(
        !listening(nats.port),
        "the server still listens after SIGKILL"
    );
    nats.restart();
    // The duplicate window survives too: the same id is acknowledged, not stored.
    assert!(publish_acked(&nats, "evt_1", "one again").await);
    assert!(!publish_acked(&nats, "evt_2", "two").await);

    nats.stop();
    assert!(!listening(nats.port), "the server still listens after stop");
    nats.restart();
    let got: Vec<(u64, String, String, String)> = nats
        .stream_messages("HOOKS")
        .await
        .into_iter()
        .map(|m| {
            let header = |name: &str| {
                m.headers
                    .get(name)
                    .map(|v| v.as_str().to_owned())
                    .unwrap_or_default()
            };
            (
                m.sequence,
                String::from_utf8_lossy(&m.payload).into_owned(),
                header("Nats-Msg-Id"),
                header("Hookgate-Route"),
            )
        })
        .collect();
    let want =
        |seq: u64, body: &str, id: &str| (seq, body.to_owned(), id.to_owned(), "stripe".to_owned());
    assert_eq!(got, [want(1, "one", "evt_1"), want(2, "two", "evt_2")]);
}

/// Publishes a persistent message with `event_id` as its `message_id` to the exchange
/// `hooks` (routing key `stripe`, mandatory) and waits for the broker's confirm.
async fn publish_confirmed(rabbit: &RabbitServer, event_id: &str, body: &[u8]) {
    let conn = rabbit.connect().await;
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    let mut headers = FieldTable::default();
    headers.insert(
        "hookgate-route".into(),
        AMQPValue::LongString(LongString::from("stripe")),
    );
    let props = BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id(event_id.into())
        .with_headers(headers);
    let mandatory = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    let confirm = ch
        .basic_publish("hooks".into(), "stripe".into(), mandatory, body, props)
        .await
        .expect("publish");
    let confirmation = tokio::time::timeout(Duration::from_secs(10), confirm)
        .await
        .expect("a confirm within 10 s")
        .expect("the confirm");
    assert!(
        matches!(confirmation, Confirmation::Ack(None)),
        "not an ack of a routed message: {confirmation:?}"
    );
    let _ = conn.close(200, "published".into()).await;
}

/// Each message of `queue` as (message_id, hookgate-route header, body).
async fn rabbit_messages(rabbit: &RabbitServer, queue: &str) -> Vec<(String, String, String)> {
    rabbit
        .queue_messages(queue)
        .await
        .into_iter()
        .map(|d| {
            let id = d
                .properties
                .message_id()
                .as_ref()
                .map(|s| s.as_str().to_owned())
                .unwrap_or_default();
            let route = d
                .properties
                .headers()
                .as_ref()
                .and_then(|h| h.inner().get("hookgate-route").cloned())
                .and_then(|v| match v {
                    AMQPValue::LongString(s) => {
                        Some(String::from_utf8_lossy(s.as_bytes()).into_owned())
                    }
                    _ => None,
                })
                .unwrap_or_default();
            (id, route, String::from_utf8_lossy(&d.data).into_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_keeps_confirmed_persistent_messages_across_a_kill_and_a_stop() {
    let mut rabbit = RabbitServer::start();
    rabbit.declare("hooks", "inbox", "stripe").await;
    publish_confirmed(&rabbit, "evt_1", b"one").await;

    rabbit.kill();
    assert!(
        !listening(rabbit.port),
        "the node still listens after SIGKILL"
    );
    rabbit.restart();
    // A node recovering from a crash can come back with a durable binding missing
    // from its routing table (a known RabbitMQ recovery race, seen on a loaded
    // two-core machine as a `NO_ROUTE` return): clients redeclare their topology
    // after a reconnect, which leaves the queue and its messages as they are. hookgate
    // itself answers such a return as a refused attempt and tries again.
    rabbit.declare("hooks", "inbox", "stripe").await;
    let want = |id: &str, body: &str| (id.to_owned(), "stripe".to_owned(), body.to_owned());
    assert_eq!(
        rabbit_messages(&rabbit, "inbox").await,
        [want("evt_1", "one")]
    );
    publish_confirmed(&rabbit, "evt_2", b"two").await;

    rabbit.stop();
    assert!(!listening(rabbit.port), "the node still listens after stop");
    rabbit.restart();
    assert_eq!(
        rabbit_messages(&rabbit, "inbox").await,
        [want("evt_1", "one"), want("evt_2", "two")]
    );
}
