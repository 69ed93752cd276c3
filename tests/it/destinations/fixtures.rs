//! The destination servers the tests start: each keeps what it acknowledged when it is
//! killed (SIGKILL) or stopped, and comes back on the same port with it.

use crate::support::PostgresServer;

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
