//! The destination servers the tests start: each keeps what it acknowledged when it is
//! killed (SIGKILL) or stopped, and comes back on the same port with it.

use crate::support::{NatsServer, PostgresServer};
use async_nats::jetstream::message::PublishMessage;
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
