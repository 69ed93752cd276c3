//! Redis's `maxmemory-policy`: a policy that evicts keys refuses queue routes unless
//! the operator allows it (`store.allow_eviction`), at start and at runtime.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::binary::{BIN, Gateway, signed, write_config};
use crate::support::{
    RedisServer, TestGateway, Upstream, client, free_port, post, store_toml, stripe_body,
    stripe_config,
};

/// A config with one Stripe queue route on `redis`.
fn queue_on(
    redis: &RedisServer,
    port: u16,
    admin: u16,
    up: &Upstream,
    store_extra: &str,
) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n[store]\nbackend = \"redis\"\nurl = \"{}\"\n{store_extra}\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\ndelivery = \"queue\"\n",
        redis.url(),
        up.url("/up")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_refuses_queue_routes_on_an_evicting_redis_unless_allowed() {
    let redis = RedisServer::start_with_args(false, &["--maxmemory-policy", "allkeys-lru"]);
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let (port, admin) = (free_port(), free_port());
    let cfg = write_config(&dir, &queue_on(&redis, port, admin, &up, ""));
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the gateway served queue routes on allkeys-lru");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("exit {status}; stderr:\n{stderr}");
    assert!(!status.success());
    assert!(
        stderr.contains("maxmemory-policy is allkeys-lru")
            && stderr.contains("noeviction")
            && stderr.contains("store.allow_eviction = true"),
        "{stderr}"
    );

    // The operator says so: it serves, and readiness names the policy.
    let cfg = write_config(
        &dir,
        &queue_on(&redis, port, admin, &up, "allow_eviction = true"),
    );
    let gw = Gateway::spawn(&cfg, port);
    let body = stripe_body("evt_evicting_allowed");
    let r = post(&gw.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
    eprintln!("allow_eviction = true: {} {}", r.status, r.body);
    assert_eq!((r.status, r.outcome()), (200, "queued"), "{}", r.body);
    let ready = client()
        .get(format!("http://127.0.0.1:{admin}/readyz"))
        .send()
        .await
        .expect("readyz");
    let status = ready.status().as_u16();
    let text = ready.text().await.unwrap_or_default();
    eprintln!("readyz: {status} {text}");
    assert_eq!(status, 200);
    assert!(text.contains("allkeys-lru"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_policy_set_at_runtime_makes_readyz_and_queue_routes_answer_503() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let gw = TestGateway::start(&stripe_config(
        &up,
        &store_toml(Some(&redis), ""),
        "delivery = \"queue\"",
    ))
    .await;
    let readyz = async || {
        let r = client()
            .get(gw.admin_url("/readyz"))
            .send()
            .await
            .expect("readyz");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    };
    assert_eq!(readyz().await.0, 200);
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_ev_1"), "evt_ev_1")
            .await
            .outcome(),
        "queued"
    );

    let _: () = redis.cmd(
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg("volatile-lru"),
    );
    let (status, text) = readyz().await;
    eprintln!("after CONFIG SET maxmemory-policy volatile-lru, readyz: {status} {text}");
    assert_eq!(status, 503);
    assert!(text.contains("volatile-lru"), "{text}");
    let r = gw
        .deliver("stripe", &stripe_body("evt_ev_2"), "evt_ev_2")
        .await;
    eprintln!("a delivery then: {} {}", r.status, r.body);
    assert_eq!(
        r.status, 503,
        "queue routes are refused, not exposed to eviction"
    );

    let _: () = redis.cmd(
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg("noeviction"),
    );
    assert_eq!(readyz().await.0, 200);
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_ev_2"), "evt_ev_2")
            .await
            .outcome(),
        "queued"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_routes_on_an_evicting_redis_start_and_readyz_reports_the_policy() {
    let redis = RedisServer::start_with_args(false, &["--maxmemory-policy", "volatile-ttl"]);
    let up = Upstream::start().await;
    let gw = TestGateway::start(&stripe_config(&up, &store_toml(Some(&redis), ""), "")).await;
    let r = gw
        .deliver("stripe", &stripe_body("evt_ev_sync"), "evt_ev_sync")
        .await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    let ready = client()
        .get(gw.admin_url("/readyz"))
        .send()
        .await
        .expect("readyz");
    let status = ready.status().as_u16();
    let text = ready.text().await.unwrap_or_default();
    eprintln!("sync routes on volatile-ttl, readyz: {status} {text}");
    assert_eq!(status, 200);
    assert!(text.contains("volatile-ttl"), "{text}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_unreachable_at_start_is_checked_when_it_answers() {
    let mut redis = RedisServer::start_with_args(false, &["--maxmemory-policy", "allkeys-lfu"]);
    redis.stop();
    let up = Upstream::start().await;
    let gw = TestGateway::start(&stripe_config(
        &up,
        &store_toml(Some(&redis), ""),
        "delivery = \"queue\"",
    ))
    .await;
    // Serving (the check at start found no Redis), then Redis comes up.
    let deadline = Instant::now() + Duration::from_secs(10);
    while client().get(gw.admin_url("/healthz")).send().await.is_err() {
        assert!(Instant::now() < deadline, "the gateway did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    redis.restart();
    let mut last = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let r = client()
            .get(gw.admin_url("/readyz"))
            .send()
            .await
            .expect("readyz");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        let named = text.contains("allkeys-lfu");
        last = Some((status, text));
        if named {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("Redis up after the start, readyz: {last:?}");
    assert!(
        matches!(&last, Some((503, t)) if t.contains("allkeys-lfu")),
        "{last:?}"
    );
    let r = gw
        .deliver("stripe", &stripe_body("evt_ev_late"), "evt_ev_late")
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    gw.stop().await;
}
