//! Queue routes with the real binary: a `kill -9` with events queued, SIGTERM with
//! attempts in progress, and `hookgate events` against the running gateway.

use std::process::Command;
use std::time::Duration;

use crate::process::binary::{BIN, Gateway, signed, write_config};
use crate::support::{Upstream, eventually, free_port, post, stripe_body};

/// A gateway config with one Stripe queue route on a disk store beside the config.
fn disk_queue(port: u16, admin: u16, up: &Upstream, route_extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\nshutdown_grace = \"5s\"\n[store]\nbackend = \"disk\"\npath = \"state/hookgate.db\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\ndelivery = \"queue\"\nretry = {{ initial = \"100ms\", max_delay = \"300ms\" }}\nbreaker = false\n{route_extra}\n",
        up.url("/up")
    )
}

fn events_cli(config: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(BIN)
        .arg("events")
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .expect("run events");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_queued_before_a_kill_9_are_delivered_once_after_the_restart() {
    let up = Upstream::start().await;
    up.set_status(503);
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(&dir, &disk_queue(port, admin, &up, ""));
    let ids: Vec<String> = (0..20).map(|i| format!("evt_q_kill_{i}")).collect();
    let mut first = Gateway::spawn(&cfg, port);
    for id in &ids {
        let body = stripe_body(id);
        let r = post(&first.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
        assert_eq!((r.status, r.outcome()), (200, "queued"), "{}", r.body);
    }
    let (ok, listed) = events_cli(&cfg, &["list", "--route", "stripe"]);
    assert!(ok, "{listed}");
    assert!(
        listed.contains("evt_q_kill_0") && listed.contains("20 event(s)"),
        "{listed}"
    );
    assert!(eventually(Duration::from_secs(5), || up.count() >= 20).await);
    let _ = first.child.kill();
    let _ = first.child.wait();
    drop(first);
    assert_eq!(up.effects(), 0, "nothing acknowledged before the kill");

    up.set_status(200);
    let second = Gateway::spawn(&cfg, port);
    assert!(
        eventually(Duration::from_secs(15), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "every stored event is delivered after the restart"
    );
    for id in &ids {
        let body = stripe_body(id);
        let r = post(&second.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
        assert_eq!(r.outcome(), "duplicate", "{}", r.body);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(up.effects(), ids.len(), "none twice");
    let (ok, delivered) = events_cli(
        &cfg,
        &[
            "list",
            "--route",
            "stripe",
            "--state",
            "delivered",
            "--json",
        ],
    );
    assert!(ok, "{delivered}");
    let v: serde_json::Value = serde_json::from_str(delivered.trim()).expect("json");
    assert_eq!(v["events"].as_array().map(Vec::len), Some(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_attempts_finish_and_leaves_the_rest_stored_for_the_next_start() {
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(1500));
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(&dir, &disk_queue(port, admin, &up, "concurrency = 2"));
    let ids: Vec<String> = (0..6).map(|i| format!("evt_q_term_{i}")).collect();
    let mut gw = Gateway::spawn(&cfg, port);
    for id in &ids {
        let body = stripe_body(id);
        let r = post(&gw.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
        assert_eq!(r.outcome(), "queued", "{}", r.body);
    }
    assert!(eventually(Duration::from_secs(5), || up.count() == 2).await);
    let pid = gw.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let status = tokio::task::spawn_blocking(move || {
        let s = gw.child.wait();
        (s, gw)
    })
    .await
    .expect("wait");
    assert_eq!(status.0.expect("exit").code(), Some(0));
    drop(status.1);
    assert_eq!(up.effects(), 2, "the two attempts in progress finished");

    up.set_delay(Duration::ZERO);
    let _again = Gateway::spawn(&cfg, port);
    assert!(
        eventually(Duration::from_secs(15), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "the four left stored are delivered by the next start"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        up.effects(),
        6,
        "none twice: the finished two were recorded delivered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_command_shows_retries_and_recovers_dead_letters() {
    let up = Upstream::start().await;
    up.set_status(500);
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        &disk_queue(port, admin, &up, "").replace(
            "retry = { initial = \"100ms\", max_delay = \"300ms\" }",
            "retry = { max_attempts = 2, initial = \"50ms\", max_delay = \"50ms\" }",
        ),
    );
    let gw = Gateway::spawn(&cfg, port);
    for id in ["evt_cli_a", "evt_cli_b"] {
        let body = stripe_body(id);
        let r = post(&gw.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
        assert_eq!(r.outcome(), "queued");
    }
    assert!(eventually(Duration::from_secs(5), || up.count() == 4).await);
    let mut dead = String::new();
    for _ in 0..50 {
        dead = events_cli(&cfg, &["list", "--route", "stripe", "--state", "dead"]).1;
        if dead.contains("2 event(s)") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        dead.contains("evt_cli_a") && dead.contains("http_5xx"),
        "{dead}"
    );
    let (ok, shown) = events_cli(
        &cfg,
        &["show", "--route", "stripe", "--event-id", "evt_cli_a"],
    );
    assert!(ok, "{shown}");
    assert!(shown.contains("state:     dead"), "{shown}");
    assert!(shown.contains("http_5xx 500"), "{shown}");
    assert!(!shown.contains("whsec_test"), "no secret in the output");
    let (ok, missing) = events_cli(
        &cfg,
        &["show", "--route", "stripe", "--event-id", "evt_nope"],
    );
    assert!(!ok, "an unknown event exits 1: {missing}");

    up.set_status(200);
    let (ok, one) = events_cli(
        &cfg,
        &["retry", "--route", "stripe", "--event-id", "evt_cli_a"],
    );
    assert!(
        ok && one.trim()
            == "retried event evt_cli_a on route stripe: due now, delivered at the destination's rate_limit",
        "{one}"
    );
    assert!(eventually(Duration::from_secs(5), || up.effects_for("evt_cli_a") == 1).await);
    let (ok, all) = events_cli(&cfg, &["retry", "--route", "stripe", "--all-dead"]);
    assert!(
        ok && all.starts_with("retried 1 dead event(s) on route stripe"),
        "{all}"
    );
    assert!(eventually(Duration::from_secs(5), || up.effects_for("evt_cli_b") == 1).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.effects(), 2, "each retried event delivered once");
    let (ok, none) = events_cli(&cfg, &["purge", "--route", "stripe", "--all-dead"]);
    assert!(
        ok && none.trim() == "purged 0 dead event(s) on route stripe",
        "{none}"
    );
    let (ok, json) = events_cli(
        &cfg,
        &["purge", "--route", "stripe", "--all-dead", "--json"],
    );
    assert!(ok && json.contains("\"purged\":0"), "{json}");
    let (ok, _) = events_cli(&cfg, &["retry", "--route", "stripe"]);
    assert!(!ok, "retry needs --event-id or --all-dead");
    let (ok, wrong) = events_cli(&cfg, &["list", "--route", "nosuch"]);
    assert!(!ok && wrong.contains("no queue route"), "{wrong}");
}

fn redis_queue(
    port: u16,
    admin: u16,
    redis: &crate::support::RedisServer,
    up: &Upstream,
) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\nshutdown_grace = \"2s\"\n[store]\nbackend = \"redis\"\nurl = \"{}\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\nupstream_timeout = \"1s\"\ndelivery = \"queue\"\nretry = {{ initial = \"100ms\", max_delay = \"300ms\" }}\nbreaker = false\n",
        redis.url(),
        up.url("/up")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_sigkilled_replica_leaves_its_events_to_the_other_and_a_restart() {
    let redis = crate::support::RedisServer::start_with_aof(true);
    let up = Upstream::start().await;
    up.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let (pa, aa, pb, ab) = (free_port(), free_port(), free_port(), free_port());
    let cfg_a = write_config(&dir, &redis_queue(pa, aa, &redis, &up));
    let cfg_b = dir.path().join("b.toml");
    std::fs::write(&cfg_b, redis_queue(pb, ab, &redis, &up)).expect("write");
    let mut a = Gateway::spawn(&cfg_a, pa);
    let b = Gateway::spawn(&cfg_b, pb);
    let ids: Vec<String> = (0..30).map(|i| format!("evt_rq_{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let body = stripe_body(id);
        let url = if i % 2 == 0 { a.url("/s") } else { b.url("/s") };
        let r = post(&url, &signed(&cfg_a, &body), body.clone().into_bytes()).await;
        assert_eq!((r.status, r.outcome()), (200, "queued"), "{}", r.body);
        // A copy to the other replica is a duplicate: the claim is shared.
        let other = if i % 2 == 0 { b.url("/s") } else { a.url("/s") };
        let r = post(&other, &signed(&cfg_a, &body), body.into_bytes()).await;
        assert_eq!(r.outcome(), "duplicate", "{}", r.body);
    }
    // Both replicas are trying (and failing); then one dies mid-work.
    assert!(eventually(Duration::from_secs(10), || up.count() >= 60).await);
    let _ = a.child.kill();
    let _ = a.child.wait();
    drop(a);
    up.set_status(200);
    assert!(
        eventually(Duration::from_secs(30), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "the surviving replica delivers every event, the dead one's leased ones after their lease: {} of {}",
        ids.iter().filter(|id| up.effects_for(id) >= 1).count(),
        ids.len()
    );
    // The dead replica comes back; nothing is delivered again.
    let _back = Gateway::spawn(&cfg_a, pa);
    tokio::time::sleep(Duration::from_secs(2)).await;
    for id in &ids {
        assert_eq!(up.effects_for(id), 1, "{id} delivered once");
    }
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_events_queued_before_a_kill_9_are_delivered_after_the_restart() {
    let redis = crate::support::RedisServer::start_with_aof(true);
    let up = Upstream::start().await;
    up.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let (port, admin) = (free_port(), free_port());
    let cfg = write_config(&dir, &redis_queue(port, admin, &redis, &up));
    let mut first = Gateway::spawn(&cfg, port);
    let ids: Vec<String> = (0..20).map(|i| format!("evt_rk_{i}")).collect();
    for id in &ids {
        let body = stripe_body(id);
        let r = post(&first.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
        assert_eq!(r.outcome(), "queued", "{}", r.body);
    }
    assert!(eventually(Duration::from_secs(5), || up.count() >= 20).await);
    let _ = first.child.kill();
    let _ = first.child.wait();
    drop(first);
    up.set_status(200);
    let second = Gateway::spawn(&cfg, port);
    assert!(
        eventually(Duration::from_secs(30), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "every event is delivered after the restart"
    );
    let (ok, listed) = events_cli(&cfg, &["list", "--route", "stripe", "--state", "delivered"]);
    assert!(ok && listed.contains("20 event(s)"), "{listed}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(up.effects(), ids.len(), "none twice");
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_expects_queued_on_a_queue_route() {
    let up = Upstream::start().await;
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(&dir, &disk_queue(port, admin, &up, ""));
    let _gw = Gateway::spawn(&cfg, port);
    let file = dir.path().join("evt.json");
    let out = Command::new(BIN)
        .args(["sign", "--route", "stripe", "--config"])
        .arg(&cfg)
        .arg(stripe_body("evt_replay_q"))
        .output()
        .expect("sign");
    assert!(out.status.success());
    std::fs::write(&file, &out.stdout).expect("write");
    let replay = |expect: &str| {
        Command::new(BIN)
            .arg("replay")
            .arg(&file)
            .args(["--target", &format!("http://127.0.0.1:{port}")])
            .args(["--copies", "3", "--concurrency", "3", "--expect", expect])
            .output()
            .expect("replay")
    };
    let first = replay("queued");
    let text = String::from_utf8_lossy(&first.stdout);
    assert!(first.status.success(), "{text}");
    assert!(text.contains("queued: stored"), "{text}");
    let again = replay("duplicate");
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    assert!(
        eventually(Duration::from_secs(5), || up.effects_for("evt_replay_q")
            == 1)
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_delivered_before_a_kill_9_are_not_delivered_again() {
    let up = Upstream::start().await;
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(&dir, &disk_queue(port, admin, &up, ""));
    let mut first = Gateway::spawn(&cfg, port);
    let ids: Vec<String> = (0..10).map(|i| format!("evt_flushed_{i}")).collect();
    for id in &ids {
        let body = stripe_body(id);
        let r = post(&first.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
        assert_eq!(r.outcome(), "queued", "{}", r.body);
    }
    assert!(eventually(Duration::from_secs(5), || up.effects() == ids.len()).await);
    // Attempt results are written without an fsync and flushed once the store is idle
    // for 50 ms: after that, a kill loses none of them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = first.child.kill();
    let _ = first.child.wait();
    drop(first);
    let _second = Gateway::spawn(&cfg, port);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(up.effects(), ids.len(), "nothing delivered twice");
    let (ok, listed) = events_cli(&cfg, &["list", "--route", "stripe", "--state", "delivered"]);
    assert!(ok && listed.contains("10 event(s)"), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_holds_across_two_replicas_on_redis() {
    let redis = crate::support::RedisServer::start();
    let up = Upstream::start().await;
    up.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let (pa, aa, pb, ab) = (free_port(), free_port(), free_port(), free_port());
    let limited = |p, a| {
        redis_queue(p, a, &redis, &up).replace(
            "delivery = \"queue\"\n",
            "delivery = \"queue\"\nrate_limit = \"25/s\"\n",
        )
    };
    let cfg_a = write_config(&dir, &limited(pa, aa));
    let cfg_b = dir.path().join("b.toml");
    std::fs::write(&cfg_b, limited(pb, ab)).expect("write");
    let a = Gateway::spawn(&cfg_a, pa);
    let b = Gateway::spawn(&cfg_b, pb);
    let ids: Vec<String> = (0..150).map(|i| format!("evt_rl_{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let body = stripe_body(id);
        let url = if i % 2 == 0 { a.url("/s") } else { b.url("/s") };
        let r = post(&url, &signed(&cfg_a, &body), body.into_bytes()).await;
        assert_eq!(r.outcome(), "queued", "{}", r.body);
    }
    // A backlog builds while the upstream refuses; then both replicas drain it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    up.set_status(200);
    let before = up.count();
    assert!(
        eventually(Duration::from_secs(30), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await
    );
    let most = crate::queue::delivery::most_in_any_window(&up, Duration::from_secs(1));
    assert!(
        most <= 25,
        "{most} requests within one second (limit 25/s over two replicas)"
    );
    assert!(up.count() - before >= 150);
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_holds_across_two_replicas_on_redis() {
    let redis = crate::support::RedisServer::start();
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(150));
    let dir = tempfile::tempdir().expect("dir");
    let (pa, aa, pb, ab) = (free_port(), free_port(), free_port(), free_port());
    let one_at_a_time = |p, a| {
        redis_queue(p, a, &redis, &up).replace(
            "delivery = \"queue\"\n",
            "delivery = \"queue\"\nconcurrency = 1\n",
        )
    };
    let cfg_a = write_config(&dir, &one_at_a_time(pa, aa));
    let cfg_b = dir.path().join("b.toml");
    std::fs::write(&cfg_b, one_at_a_time(pb, ab)).expect("write");
    let a = Gateway::spawn(&cfg_a, pa);
    let b = Gateway::spawn(&cfg_b, pb);
    let ids: Vec<String> = (0..12).map(|i| format!("evt_c1_{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let body = stripe_body(id);
        let url = if i % 2 == 0 { a.url("/s") } else { b.url("/s") };
        let r = post(&url, &signed(&cfg_a, &body), body.into_bytes()).await;
        assert_eq!(r.outcome(), "queued", "{}", r.body);
    }
    assert!(
        eventually(Duration::from_secs(20), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await
    );
    assert_eq!(
        up.max_concurrent(),
        1,
        "concurrency = 1 over two replicas: never two requests open at once"
    );
    drop((a, b));
}

/// Five keys × eight events, queued while the upstream refuses; the gateway is killed
/// and started again with the upstream back: each key's events arrive in acceptance
/// order, each once.
async fn per_key_order_survives_a_kill_9(cfg: &std::path::Path, port: u16, up: &Upstream) {
    up.set_status(503);
    let keys: Vec<String> = (0..5).map(|k| format!("cus_{k}")).collect();
    let mut first = Gateway::spawn(cfg, port);
    for n in 0..8 {
        for key in &keys {
            let id = format!("evt_{key}_{n}");
            let body = format!(
                r#"{{"id":"{id}","object":"event","type":"invoice.paid","data":{{"object":{{"customer":"{key}"}}}}}}"#
            );
            let r = post(&first.url("/s"), &signed(cfg, &body), body.into_bytes()).await;
            assert_eq!((r.status, r.outcome()), (200, "queued"), "{}", r.body);
        }
    }
    // The first of each line is being retried; the rest wait behind it.
    assert!(eventually(Duration::from_secs(5), || up.count() >= 5).await);
    let _ = first.child.kill();
    let _ = first.child.wait();
    drop(first);
    let tried: std::collections::HashSet<String> = up
        .received()
        .iter()
        .filter_map(|r| r.header("idempotency-key").map(str::to_owned))
        .collect();
    assert!(
        tried.iter().all(|id| id.ends_with("_0")),
        "only the first of each key was tried: {tried:?}"
    );
    up.set_status(200);
    let _second = Gateway::spawn(cfg, port);
    assert!(
        eventually(Duration::from_secs(20), || up.effects() >= 40).await,
        "{} of 40",
        up.effects()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let delivered: Vec<String> = up
        .received()
        .iter()
        .filter(|r| (200..300).contains(&r.status))
        .filter_map(|r| r.header("idempotency-key").map(str::to_owned))
        .collect();
    assert_eq!(delivered.len(), 40, "each once");
    for key in &keys {
        let mine: Vec<&String> = delivered
            .iter()
            .filter(|id| id.starts_with(&format!("evt_{key}_")))
            .collect();
        let want: Vec<String> = (0..8).map(|n| format!("evt_{key}_{n}")).collect();
        assert_eq!(mine, want.iter().collect::<Vec<_>>(), "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_order_survives_a_kill_9_on_the_disk_store() {
    let up = Upstream::start().await;
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        &disk_queue(
            port,
            admin,
            &up,
            "order_by = \"json:/data/object/customer\"",
        ),
    );
    per_key_order_survives_a_kill_9(&cfg, port, &up).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_order_survives_a_kill_9_on_redis() {
    let redis = crate::support::RedisServer::start();
    let up = Upstream::start().await;
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        &redis_queue(port, admin, &redis, &up).replace(
            "delivery = \"queue\"\n",
            "delivery = \"queue\"\norder_by = \"json:/data/object/customer\"\n",
        ),
    );
    per_key_order_survives_a_kill_9(&cfg, port, &up).await;
}

/// libfaketime's preload library, where Debian's `libfaketime` package puts it.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_stepping_back_an_hour_delays_no_retry_nor_key_line_on_the_disk_store() {
    if !std::path::Path::new(LIBFAKETIME).exists() {
        eprintln!("SKIPPED: libfaketime is not installed (tests/run installs it)");
        return;
    }
    let up = Upstream::start().await;
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let text = disk_queue(
        port,
        admin,
        &up,
        "order_by = \"json:/data/object/customer\"\nrate_limit = \"1/s\"",
    )
    .replace(
        "retry = { initial = \"100ms\", max_delay = \"300ms\" }",
        "retry = { initial = \"2s\", max_delay = \"2s\" }",
    );
    let cfg = write_config(&dir, &text);
    // The gateway's wall clock is read from this file at every call; its monotonic
    // clock is the real one.
    let clock = dir.path().join("faketime");
    std::fs::write(&clock, "+0\n").expect("clock");
    let child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "warn")
        .env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME_TIMESTAMP_FILE", &clock)
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn hookgate");
    let gw = Gateway::adopt(child, port);
    // Two events of one customer: the second waits in the key's line behind the first,
    // whose first attempt fails and is retried 2 s later.
    up.set_status_for("evt_clock_1", Some(503));
    for id in ["evt_clock_1", "evt_clock_2"] {
        let body = format!(
            r#"{{"id":"{id}","object":"event","type":"invoice.paid","data":{{"object":{{"customer":"cus_1"}}}}}}"#
        );
        let r = post(&gw.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
        assert_eq!((r.status, r.outcome()), (200, "queued"), "{}", r.body);
    }
    assert!(eventually(Duration::from_secs(10), || up.count_for("evt_clock_1") >= 1).await);
    // The wall clock steps back an hour after the failed attempt.
    std::fs::write(&clock, "-3600\n").expect("step the clock");
    up.set_status_for("evt_clock_1", None);
    assert!(
        eventually(Duration::from_secs(15), || up.effects_for("evt_clock_1")
            == 1
            && up.effects_for("evt_clock_2") == 1)
        .await,
        "the retry, then the next event of the key, arrive within seconds: {} attempts of the first, {} of the second",
        up.count_for("evt_clock_1"),
        up.count_for("evt_clock_2")
    );
    drop(gw);
}

/// `hookgate events pause|resume|retry --plan` against the real binary on the disk
/// store: a pause is kept across a `kill -9`, and a plan is what the retry then does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_made_with_the_command_survives_a_kill_9_and_a_planned_retry_does_what_it_said() {
    let up = Upstream::start().await;
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        &disk_queue(port, admin, &up, "").replace(
            "retry = { initial = \"100ms\", max_delay = \"300ms\" }",
            "retry = { max_attempts = 1 }",
        ),
    );
    let mut first = Gateway::spawn(&cfg, port);
    let (ok, paused) = events_cli(
        &cfg,
        &["pause", "--route", "stripe", "--reason", "handler deploy"],
    );
    assert!(ok, "{paused}");
    assert!(
        paused.contains("stripe: paused: handler deploy, since"),
        "{paused}"
    );
    let ids: Vec<String> = (0..3).map(|i| format!("evt_pause_{i}")).collect();
    for id in &ids {
        let body = stripe_body(id);
        let r = post(&first.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
        assert_eq!((r.status, r.outcome()), (200, "queued"), "{}", r.body);
    }
    let _ = first.child.kill();
    let _ = first.child.wait();
    drop(first);

    let second = Gateway::spawn(&cfg, port);
    let (ok, listed) = events_cli(&cfg, &["list", "--route", "stripe"]);
    assert!(ok, "{listed}");
    assert!(
        listed.starts_with("stripe: paused: handler deploy") && listed.contains("3 event(s)"),
        "{listed}"
    );
    // The workers look at the pause at least every second (delivery/control.rs).
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert_eq!(up.count(), 0, "still paused after the kill and the restart");
    let (ok, resumed) = events_cli(&cfg, &["resume", "--route", "stripe"]);
    assert!(ok && resumed.contains("stripe: running"), "{resumed}");
    assert!(
        eventually(Duration::from_secs(10), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "delivered once resumed"
    );

    // Two events die at their one attempt; the plan names them, changes nothing, and the retry
    // then queues exactly those.
    up.set_status(500);
    let dying: Vec<String> = (0..2).map(|i| format!("evt_plan_{i}")).collect();
    let (ok, _) = events_cli(&cfg, &["pause", "--route", "stripe", "--until", "1h"]);
    assert!(ok);
    for id in &dying {
        let body = stripe_body(id);
        let r = post(&second.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
        assert_eq!(r.outcome(), "queued", "{}", r.body);
    }
    let (ok, _) = events_cli(&cfg, &["resume", "--route", "stripe"]);
    assert!(ok);
    assert!(eventually(Duration::from_secs(10), || up.count() >= 3 + 2).await);
    let (ok, plan) = events_cli(
        &cfg,
        &[
            "retry",
            "--route",
            "stripe",
            "--last-result",
            "http_5xx",
            "--plan",
        ],
    );
    assert!(ok, "{plan}");
    assert!(
        plan.starts_with("plan: 2 event(s) of route stripe would be retried; nothing was changed"),
        "{plan}"
    );
    assert!(
        plan.contains("evt_plan_0") && plan.contains("evt_plan_1"),
        "{plan}"
    );
    up.set_status(200);
    let (ok, done) = events_cli(
        &cfg,
        &["retry", "--route", "stripe", "--last-result", "http_5xx"],
    );
    assert!(ok, "{done}");
    assert!(
        done.starts_with("retried 2 of 2 matching event(s)"),
        "{done}"
    );
    assert!(
        eventually(Duration::from_secs(10), || dying
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "the planned events were delivered"
    );
    let (ok, bare) = events_cli(&cfg, &["retry", "--route", "stripe"]);
    assert!(!ok, "a retry names what it retries: {bare}");
}
