//! Events no route would deliver: a reload that changes `store.key_prefix`, or removes a
//! destination whose queue still holds events, is refused; queues the config does not
//! name are counted at start (`hookgate_queue_stranded`) and by `hookgate check`.

use std::path::Path;
use std::time::Duration;

use crate::queue::delivery::admin;
use crate::support::{RedisServer, TestGateway, Upstream, eventually, stripe_body};

/// A Stripe queue route on `store` with these destinations (TOML, may be empty: the
/// route's own `upstream`), and `extra` routes after it.
fn config(store: &str, up: &Upstream, destinations: &str, extra: &str) -> String {
    format!(
        "[server]\nshutdown_grace = \"2s\"\n{store}\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\ndelivery = \"queue\"\nupstream = \"{}\"\nretry = {{ max_attempts = 1, initial = \"50ms\", max_delay = \"100ms\" }}\n{destinations}\n{extra}",
        up.url("/up")
    )
}

fn redis_store(r: &RedisServer, prefix: &str) -> String {
    format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{prefix}\"\n",
        r.url()
    )
}

fn disk_store(dir: &Path) -> String {
    format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\n",
        dir.join("hookgate.db").display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changing_the_key_prefix_is_refused_and_the_events_stay_delivered() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    up.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.toml");
    // Retried, not dead: the destination is down for a while.
    let text = config(&redis_store(&redis, "hg1:"), &up, "", "")
        .replace("max_attempts = 1", "max_attempts = 50");
    std::fs::write(&path, &text).expect("write");
    let gw = TestGateway::start_file(&path).await;
    let ids = ["evt_prefix_1", "evt_prefix_2"];
    for id in ids {
        assert_eq!(
            gw.deliver("stripe", &stripe_body(id), id).await.outcome(),
            "queued"
        );
    }
    std::fs::write(&path, text.replace("hg1:", "hg2:")).expect("write");
    let (status, body) = admin(&gw, "POST", "/reload").await;
    eprintln!("reload with key_prefix hg1: -> hg2: answered {status} {body}");
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string()
            .contains("store.key_prefix changed from \\\"hg1:\\\" to \\\"hg2:\\\""),
        "{body}"
    );
    assert_eq!(gw.metric("hookgate_config_last_reload_ok").await, 0.0);

    up.set_status(200);
    assert!(
        eventually(Duration::from_secs(15), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "the queued events are still delivered"
    );
    let copy = gw.deliver("stripe", &stripe_body(ids[0]), ids[0]).await;
    assert_eq!(copy.outcome(), "duplicate", "the dedup window is kept");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_removing_a_destination_with_dead_events_is_refused_until_they_are_purged() {
    let billing = Upstream::start().await;
    let audit = Upstream::start().await;
    audit.set_status(500);
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.toml");
    let both = format!(
        "[[routes.destinations]]\nname = \"billing\"\nupstream = \"{}\"\n[[routes.destinations]]\nname = \"audit\"\nupstream = \"{}\"\n",
        billing.url("/b"),
        audit.url("/a")
    );
    let text = config(&disk_store(dir.path()), &billing, &both, "").replace(
        &format!("upstream = \"{}\"\nretry", billing.url("/up")),
        "retry",
    );
    std::fs::write(&path, &text).expect("write");
    let gw = TestGateway::start_file(&path).await;
    for i in 0..3 {
        let id = format!("evt_dest_{i}");
        assert_eq!(
            gw.deliver("stripe", &stripe_body(&id), &id).await.outcome(),
            "queued"
        );
    }
    assert!(
        eventually(Duration::from_secs(15), || audit.count() >= 3
            && billing.effects() == 3)
        .await
    );
    // Dead at audit (one attempt), delivered to billing.
    let dead = async || {
        let (_, b) = admin(&gw, "GET", "/events/stripe?destination=audit&state=dead").await;
        b["events"].as_array().map_or(0, Vec::len)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while dead().await < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "three dead events at audit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let only_billing = format!(
        "[[routes.destinations]]\nname = \"billing\"\nupstream = \"{}\"\n",
        billing.url("/b")
    );
    std::fs::write(&path, text.replace(&both, &only_billing)).expect("write");
    let (status, body) = admin(&gw, "POST", "/reload").await;
    eprintln!("reload without destination audit answered {status} {body}");
    assert_eq!(status, 400, "{body}");
    let text_of = body.to_string();
    assert!(
        text_of.contains("destination audit")
            && text_of.contains("3 undelivered event(s) (0 waiting, 3 dead)"),
        "{body}"
    );

    let (status, purged) = admin(
        &gw,
        "POST",
        "/events/stripe/purge?destination=audit&all_dead=true",
    )
    .await;
    assert_eq!(status, 200, "{purged}");
    let (status, body) = admin(&gw, "POST", "/reload").await;
    eprintln!("after the purge, reload answered {status} {body}");
    assert_eq!(status, 200, "{body}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_without_a_route_that_holds_events_counts_them_as_stranded() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let down = Upstream::start().await;
    down.set_status(503);
    let other = format!(
        "[[routes]]\nname = \"other\"\npath = \"/webhooks/other\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\ndelivery = \"queue\"\nupstream = \"{}\"\nretry = {{ max_attempts = 50, initial = \"1s\", max_delay = \"5s\" }}\n",
        down.url("/other")
    );
    let store = redis_store(&redis, "hgs:");
    let gw = TestGateway::start(&config(&store, &up, "", &other)).await;
    for i in 0..3 {
        let id = format!("evt_stranded_{i}");
        assert_eq!(
            gw.deliver("other", &stripe_body(&id), &id).await.outcome(),
            "queued"
        );
    }
    gw.stop().await;

    // The next start's config has no route "other".
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.toml");
    std::fs::write(&path, config(&store, &up, "", "")).expect("write");
    let gw = TestGateway::start_file(&path).await;
    let sample = "hookgate_queue_stranded{queue=\"other\"}";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut value = 0.0;
    while tokio::time::Instant::now() < deadline {
        value = gw.metric(sample).await;
        if value > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("{sample} = {value}");
    assert_eq!(value, 3.0);

    // `hookgate check` says so too.
    let out = std::process::Command::new(crate::process::binary::BIN)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("hookgate check:\n{stdout}");
    assert!(out.status.success());
    assert!(
        stdout.contains("queue other holds 3 undelivered event(s) (3 waiting, 0 dead)"),
        "{stdout}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_when_the_running_gateway_holds_the_disk_store() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.toml");
    std::fs::write(&path, config(&disk_store(dir.path()), &up, "", "")).expect("write");
    let gw = TestGateway::start_file(&path).await;
    let id = "evt_held";
    assert_eq!(
        gw.deliver("stripe", &stripe_body(id), id).await.outcome(),
        "queued"
    );
    let out = std::process::Command::new(crate::process::binary::BIN)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("hookgate check while the gateway runs:\n{stdout}");
    assert!(out.status.success());
    assert!(
        stdout.contains("could not look for stored queues")
            && stdout.contains("its reloads check them"),
        "{stdout}"
    );
    gw.stop().await;
}
