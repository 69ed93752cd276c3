//! Switching a destination's `on_dead` from `block` to `skip`: a dead event that held
//! its key's line under `block` gives it to the next event after the reload (and after
//! a restart), as a skip would have.

use std::time::Duration;

use crate::queue::delivery::admin;
use crate::support::{RedisServer, TestGateway, Upstream, eventually};

fn config(store: &str, up: &Upstream, on_dead: &str) -> String {
    format!(
        r#"[server]
shutdown_grace = "2s"
{store}
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_test"]
delivery = "queue"
[[routes.destinations]]
name = "ledger"
upstream = "{}"
order_by = "json:/data/object/customer"
on_dead = "{on_dead}"
retry = {{ max_attempts = 1, initial = "50ms", max_delay = "100ms" }}
"#,
        up.url("/ledger")
    )
}

fn body(id: &str) -> String {
    format!(
        r#"{{"id":"{id}","object":"event","type":"invoice.paid","data":{{"object":{{"customer":"cus_k"}}}}}}"#
    )
}

/// Two events of one key; the first dies under `block`, the second waits behind it;
/// a reload to `skip` lets the second through.
async fn a_switch_to_skip_releases_the_key(store: &str) {
    let up = Upstream::start().await;
    up.set_status_for("evt_k1", Some(500));
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.toml");
    std::fs::write(&path, config(store, &up, "block")).expect("write");
    let gw = TestGateway::start_file(&path).await;
    for id in ["evt_k1", "evt_k2"] {
        assert_eq!(
            gw.deliver("stripe", &body(id), id).await.outcome(),
            "queued"
        );
    }
    let state = async |id: &str| {
        admin(&gw, "GET", &format!("/events/stripe/{id}")).await.1["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while state("evt_k1").await != "dead" {
        assert!(tokio::time::Instant::now() < deadline, "evt_k1 dies");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Held behind the dead event under `block`.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(up.count_for("evt_k2"), 0);
    eprintln!(
        "on_dead = block: evt_k1 {}, evt_k2 {}",
        state("evt_k1").await,
        state("evt_k2").await
    );

    std::fs::write(&path, config(store, &up, "skip")).expect("write");
    let (status, reloaded) = admin(&gw, "POST", "/reload").await;
    assert_eq!(status, 200, "{reloaded}");
    assert!(
        eventually(Duration::from_secs(10), || up.effects_for("evt_k2") == 1).await,
        "the next event of the key is delivered after the switch to skip"
    );
    eprintln!(
        "after the reload to skip: evt_k1 {}, evt_k2 {}",
        state("evt_k1").await,
        state("evt_k2").await
    );
    assert_eq!(state("evt_k1").await, "dead", "the dead event stays dead");
    assert_eq!(up.effects_for("evt_k1"), 0);
    // As a skip: an operator's retry puts it back at the end of its key's line.
    up.set_status_for("evt_k1", None);
    let (status, retried) = admin(&gw, "POST", "/events/stripe/retry?event_id=evt_k1").await;
    assert_eq!((status, retried["retried"].as_u64()), (200, Some(1)));
    assert!(eventually(Duration::from_secs(10), || up.effects_for("evt_k1") == 1).await);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_from_block_to_skip_releases_the_key_on_the_disk_store() {
    let dir = tempfile::tempdir().expect("dir");
    let store = format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\n",
        dir.path().join("hookgate.db").display()
    );
    a_switch_to_skip_releases_the_key(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_from_block_to_skip_releases_the_key_on_redis() {
    let redis = RedisServer::start();
    let store = format!("[store]\nbackend = \"redis\"\nurl = \"{}\"\n", redis.url());
    a_switch_to_skip_releases_the_key(&store).await;
}

/// The same switch by a restart: the next start releases the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_skip_releases_a_key_a_dead_event_blocked() {
    let up = Upstream::start().await;
    up.set_status_for("evt_r1", Some(500));
    // On Redis: a stopped in-process gateway may still hold a disk store's file lock.
    let redis = RedisServer::start();
    let store = format!("[store]\nbackend = \"redis\"\nurl = \"{}\"\n", redis.url());
    let gw = TestGateway::start(&config(&store, &up, "block")).await;
    for id in ["evt_r1", "evt_r2"] {
        assert_eq!(
            gw.deliver("stripe", &body(id), id).await.outcome(),
            "queued"
        );
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while admin(&gw, "GET", "/events/stripe/evt_r1").await.1["state"] != "dead" {
        assert!(tokio::time::Instant::now() < deadline, "evt_r1 dies");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gw.stop().await;
    assert_eq!(up.count_for("evt_r2"), 0, "held behind the dead event");

    let gw = TestGateway::start(&config(&store, &up, "skip")).await;
    assert!(
        eventually(Duration::from_secs(10), || up.effects_for("evt_r2") == 1).await,
        "the start with skip releases the key"
    );
    gw.stop().await;
}
