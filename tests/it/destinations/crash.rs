//! The real binary killed (SIGKILL) after the destination's server committed an event
//! and before the gateway recorded it: the restarted gateway tries the event again,
//! and the server's own deduplication makes the repeat harmless (the inbox's
//! conflict, the stream's marker).
//!
//! The window is made on purpose: the destination's write is held (a lock on the
//! inbox table; writes paused on the stream's Redis) until the attempt is in it, then
//! the gateway's store stops taking writes (`CLIENT PAUSE … WRITE` on its Redis), the
//! destination's write is let go, and once the server holds the event the gateway is
//! killed.

use std::time::Duration;

use super::sink::{Kind, Sink};
use crate::process::binary::{Gateway, signed, write_config};
use crate::support::{RedisServer, free_port, post};

/// A queue route into `sink` on the Redis store `store`, admin listener on `admin`.
fn config(sink: &Sink, store: &RedisServer, port: u16, admin: u16) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:{port}"
admin_listen = "127.0.0.1:{admin}"
shutdown_grace = "1s"
[store]
backend = "redis"
url = "{}"
[[routes]]
name = "stripe"
path = "/s"
provider = "stripe"
secrets = ["whsec_test"]
delivery = "queue"
upstream_timeout = "4s"
retry = {{ max_attempts = 100, initial = "100ms", max_delay = "500ms", max_age = "1h" }}
{}
"#,
        store.url(),
        sink.toml()
    )
}

async fn event_json(admin: u16, id: &str) -> serde_json::Value {
    let r = crate::support::send(
        "GET",
        &format!("http://127.0.0.1:{admin}/events/stripe/{id}"),
        &[],
        Vec::new(),
    )
    .await;
    serde_json::from_str(&r.body).unwrap_or_default()
}

/// Holds the destination's writes until `release`; `waiting` says when the gateway's
/// attempt is held in it.
enum Hold {
    /// An open transaction holding an exclusive lock on the inbox table.
    Table(tokio_postgres::Client),
    /// Writes paused on the stream's Redis.
    Paused,
}

async fn hold(sink: &Sink) -> Hold {
    match sink {
        Sink::Postgres(pg) => {
            let c = pg.client().await;
            c.batch_execute("BEGIN; LOCK TABLE hookgate_inbox IN ACCESS EXCLUSIVE MODE")
                .await
                .expect("lock the inbox");
            Hold::Table(c)
        }
        Sink::RedisStream(r) => {
            let _: () = r.cmd(redis::cmd("CLIENT").arg("PAUSE").arg(60_000).arg("WRITE"));
            Hold::Paused
        }
        _ => unreachable!("held only for the inbox and the stream"),
    }
}

/// Whether the gateway's write waits in the held server.
async fn waiting(sink: &Sink) -> bool {
    match sink {
        Sink::Postgres(pg) => {
            let rows = pg
                .client()
                .await
                .query(
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO%'",
                    &[],
                )
                .await
                .expect("read pg_stat_activity");
            !rows.is_empty()
        }
        Sink::RedisStream(r) => {
            let info: String = r.cmd(redis::cmd("INFO").arg("clients"));
            info.lines()
                .find_map(|l| {
                    l.strip_prefix("paused_clients:")
                        .or_else(|| l.strip_prefix("blocked_clients:"))
                })
                .and_then(|n| n.trim().parse::<u64>().ok())
                .is_some_and(|n| n > 0)
        }
        _ => false,
    }
}

async fn release(sink: &Sink, held: Hold) {
    match (sink, held) {
        (_, Hold::Table(c)) => c.batch_execute("COMMIT").await.expect("unlock"),
        (Sink::RedisStream(r), Hold::Paused) => {
            let _: () = r.cmd(redis::cmd("CLIENT").arg("UNPAUSE"));
        }
        _ => {}
    }
}

async fn until(limit: Duration, what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !f().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_kill_after_the_commit_repeats_harmlessly(kind: Kind) {
    let sink = Sink::start(kind).await;
    let store = RedisServer::start_with_aof(true);
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(&dir, &config(&sink, &store, port, admin));
    let mut first = Gateway::spawn(&cfg, port);
    let id = "evt_crash_window";
    let body = super::kinds::event(id, "cus_1");
    let held = hold(&sink).await;
    let r = post(
        &first.url("/s"),
        &signed(&cfg, &body),
        body.clone().into_bytes(),
    )
    .await;
    assert_eq!((r.status, r.outcome()), (200, "queued"), "{}", r.body);
    until(
        Duration::from_secs(10),
        "the attempt waits in the server",
        || waiting(&sink),
    )
    .await;
    let _: () = store.cmd(redis::cmd("CLIENT").arg("PAUSE").arg(60_000).arg("WRITE"));
    release(&sink, held).await;
    until(
        Duration::from_secs(10),
        "the server holds the event",
        async || sink.ids().await.len() == 1,
    )
    .await;
    let _ = first.child.kill();
    let _ = first.child.wait();
    let _: () = store.cmd(redis::cmd("CLIENT").arg("UNPAUSE"));
    let _second = Gateway::spawn(&cfg, port);
    // The killed attempt's lease runs out (upstream_timeout + 5 s); the event is
    // tried again and the server answers that it holds it already.
    let mut shown = serde_json::Value::Null;
    until(
        Duration::from_secs(60),
        "the event delivered after the restart",
        async || {
            shown = event_json(admin, id).await;
            shown["state"] == "delivered"
        },
    )
    .await;
    let receipts: Vec<String> = shown["history"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["receipt"].as_str().map(str::to_owned))
        .collect();
    assert!(
        receipts.iter().any(|r| r.contains("already there")),
        "the repeat found the event there: {shown}"
    );
    assert_eq!(sink.ids().await, vec![id.to_owned()], "one row or entry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_kill_between_commit_and_record_repeats_into_a_conflict() {
    a_kill_after_the_commit_repeats_harmlessly(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stream_a_kill_between_commit_and_record_repeats_into_the_marker() {
    a_kill_after_the_commit_repeats_harmlessly(Kind::RedisStream).await;
}
