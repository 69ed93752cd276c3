//! Durable delivery (`delivery = "queue"`) on the disk store, in process: the provider
//! is answered at once, the workers deliver until the upstream acknowledges, dead
//! letters wait for an operator. The Redis backend and the real binary (kill -9,
//! restart, replicas) are in `process.rs`.

use std::time::Duration;

use crate::support::{TestGateway, Upstream, eventually, stripe_body};

/// A queue route on a disk store in `dir`, with a fast retry schedule.
pub fn queue_config(up: &Upstream, dir: &std::path::Path, retry: &str, extra: &str) -> String {
    format!(
        r#"[server]
shutdown_grace = "2s"
[store]
backend = "disk"
path = "{}"
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_test"]
upstream = "{}"
upstream_timeout = "2s"
delivery = "queue"
retry = {retry}
breaker = false
{extra}
"#,
        dir.join("hookgate.db").display(),
        up.url("/hooks/stripe")
    )
}

/// Calls the admin listener: the status and the JSON body.
pub async fn admin(gw: &TestGateway, method: &str, path: &str) -> (u16, serde_json::Value) {
    // As the command line does: the admin listener refuses a POST without it.
    let headers = [("X-Requested-By".to_owned(), "hookgate-tests".to_owned())];
    let r = crate::support::send(method, &gw.admin_url(path), &headers, Vec::new()).await;
    (r.status, serde_json::from_str(&r.body).unwrap_or_default())
}

const FAST: &str =
    r#"{ max_attempts = 50, initial = "50ms", max_delay = "200ms", max_age = "1h" }"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_down_for_a_while_gets_each_event_once_when_it_returns() {
    let up = Upstream::start().await;
    up.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&queue_config(&up, dir.path(), FAST, "")).await;
    let ids: Vec<String> = (0..30).map(|i| format!("evt_down_{i}")).collect();
    for id in &ids {
        let body = stripe_body(id);
        for copy in 0..2 {
            let r = gw.deliver("stripe", &body, id).await;
            assert_eq!(r.status, 200, "{}", r.body);
            let want = if copy == 0 { "queued" } else { "duplicate" };
            assert_eq!(r.outcome(), want, "{}", r.body);
            if copy == 0 {
                assert_eq!(r.json()["status"], "queued");
                assert_eq!(r.json()["event_id"], id.as_str());
            }
        }
    }
    // The upstream keeps failing: attempts go on, nothing is acknowledged.
    assert!(eventually(Duration::from_secs(10), || up.count() >= 60).await);
    assert_eq!(up.effects(), 0);
    assert_eq!(
        gw.metric("hookgate_queue_depth{route=\"stripe\",destination=\"stripe\"}")
            .await,
        30.0
    );
    assert!(
        gw.metric("hookgate_delivery_attempts_total{route=\"stripe\",destination=\"stripe\",result=\"http_5xx\"}")
            .await
            >= 60.0
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(
        gw.metric("hookgate_queue_oldest_age_seconds{route=\"stripe\",destination=\"stripe\"}")
            .await
            >= 1.0,
        "the oldest undelivered event's age"
    );
    up.set_status(200);
    assert!(
        eventually(Duration::from_secs(15), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "every event reached the upstream once it was back"
    );
    // Nothing more arrives later, and a copy now is still a duplicate.
    tokio::time::sleep(Duration::from_millis(600)).await;
    for id in &ids {
        assert_eq!(up.effects_for(id), 1, "{id} acknowledged once");
    }
    let again = gw.deliver("stripe", &stripe_body(&ids[0]), &ids[0]).await;
    assert_eq!(again.outcome(), "duplicate");
    let other = gw
        .deliver("stripe", "{\"id\":\"evt_down_0\",\"x\":1}", "evt_down_0")
        .await;
    assert_eq!(other.status, 422, "another body under a queued ID");
    assert_eq!(
        gw.metric("hookgate_queue_deliveries_total{route=\"stripe\",destination=\"stripe\",outcome=\"delivered\"}")
            .await,
        30.0
    );
    assert_eq!(
        gw.metric("hookgate_queue_depth{route=\"stripe\",destination=\"stripe\"}")
            .await,
        0.0
    );
    assert_eq!(
        gw.metric("hookgate_queue_oldest_age_seconds{route=\"stripe\",destination=\"stripe\"}")
            .await,
        0.0
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_retries_land_in_dead_letters_and_retry_all_dead_delivers_each_once() {
    let up = Upstream::start().await;
    up.set_status(500);
    let dir = tempfile::tempdir().expect("dir");
    let retry = r#"{ max_attempts = 3, initial = "20ms", max_delay = "50ms", max_age = "1h" }"#;
    let gw = TestGateway::start(&queue_config(&up, dir.path(), retry, "")).await;
    let ids: Vec<String> = (0..5).map(|i| format!("evt_dead_{i}")).collect();
    for id in &ids {
        assert_eq!(
            gw.deliver("stripe", &stripe_body(id), id).await.outcome(),
            "queued"
        );
    }
    let list = |state: &'static str| {
        let gw = &gw;
        async move {
            let path = format!("/events/stripe?state={state}");
            let v = admin(gw, "GET", &path).await.1;
            v["events"].as_array().cloned().unwrap_or_default()
        }
    };
    let mut dead = Vec::new();
    for _ in 0..100 {
        dead = list("dead").await;
        if dead.len() == ids.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(dead.len(), ids.len(), "all five are dead: {dead:?}");
    assert_eq!(up.count(), 15, "three attempts each, then no more");
    assert!(
        dead.iter()
            .all(|e| e["attempts"] == 3 && e["last_result"] == "http_5xx")
    );
    // A dead event is still a duplicate to the provider: it is kept, not forgotten.
    assert_eq!(
        gw.deliver("stripe", &stripe_body(&ids[0]), &ids[0])
            .await
            .outcome(),
        "duplicate"
    );
    let shown: serde_json::Value = admin(&gw, "GET", "/events/stripe/evt_dead_0").await.1;
    assert_eq!(shown["state"], "dead");
    assert_eq!(shown["history"].as_array().map(Vec::len), Some(3));
    assert_eq!(shown["history"][0]["status"], 500);
    assert!(
        shown["dead_reason"]
            .as_str()
            .is_some_and(|r| r.contains("max_attempts"))
    );
    assert_eq!(
        gw.metric("hookgate_queue_dead{route=\"stripe\",destination=\"stripe\"}")
            .await,
        5.0,
        "the gauge counts them"
    );

    up.set_status(200);
    let retried: serde_json::Value = admin(&gw, "POST", "/events/stripe/retry?all_dead=true")
        .await
        .1;
    assert_eq!(retried["retried"], 5);
    assert!(
        eventually(Duration::from_secs(10), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.effects(), 5, "each retried event delivered once");
    assert_eq!(list("dead").await.len(), 0);
    assert_eq!(list("delivered").await.len(), 5);
    // A second retry finds nothing dead.
    let again: serde_json::Value = admin(&gw, "POST", "/events/stripe/retry?all_dead=true")
        .await
        .1;
    assert_eq!(again["retried"], 0);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purged_dead_letters_are_accepted_again_from_the_provider() {
    let up = Upstream::start().await;
    up.set_status(400);
    let dir = tempfile::tempdir().expect("dir");
    let retry = r#"{ max_attempts = 1 }"#;
    let gw = TestGateway::start(&queue_config(&up, dir.path(), retry, "")).await;
    let id = "evt_purge";
    assert_eq!(
        gw.deliver("stripe", &stripe_body(id), id).await.outcome(),
        "queued"
    );
    assert!(eventually(Duration::from_secs(5), || up.count() == 1).await);
    let mut purged = serde_json::Value::Null;
    for _ in 0..50 {
        purged = admin(&gw, "POST", "/events/stripe/purge?all_dead=true")
            .await
            .1;
        if purged["purged"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(purged["purged"], 1);
    let (status, _) = admin(&gw, "GET", "/events/stripe/evt_purge").await;
    assert_eq!(status, 404);
    up.set_status(200);
    assert_eq!(
        gw.deliver("stripe", &stripe_body(id), id).await.outcome(),
        "queued",
        "the provider's next copy is a new delivery"
    );
    assert!(eventually(Duration::from_secs(5), || up.effects_for(id) == 1).await);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_forward_like_a_sync_forward_within_the_route_concurrency() {
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(100));
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&queue_config(
        &up,
        dir.path(),
        FAST,
        "concurrency = 2\nforward_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"",
    ))
    .await;
    for i in 0..10 {
        let id = format!("evt_conc_{i}");
        let r = gw.deliver("stripe", &stripe_body(&id), &id).await;
        assert_eq!(r.outcome(), "queued");
    }
    assert!(eventually(Duration::from_secs(10), || up.effects() == 10).await);
    assert!(
        up.max_concurrent() <= 2,
        "at most `concurrency` at once: {}",
        up.max_concurrent()
    );
    let got = up.received();
    let first = got
        .iter()
        .find(|r| r.header("idempotency-key") == Some("evt_conc_0"))
        .expect("delivered");
    assert_eq!(first.body, stripe_body("evt_conc_0").into_bytes());
    assert_eq!(first.header("hookgate-event-id"), Some("evt_conc_0"));
    assert_eq!(first.header("hookgate-route"), Some("stripe"));
    assert!(
        first.header("stripe-signature").is_some(),
        "the provider's headers go through"
    );
    assert!(
        first.header("webhook-signature").is_some(),
        "re-signed with forward_secret"
    );
    assert_eq!(first.header("x-forwarded-for"), Some("127.0.0.1"));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_retry_after_is_honoured() {
    let up = Upstream::start().await;
    up.set_status(429);
    up.set_retry_after(Some(3));
    let dir = tempfile::tempdir().expect("dir");
    let retry = r#"{ initial = "50ms", max_delay = "10s" }"#;
    let gw = TestGateway::start(&queue_config(&up, dir.path(), retry, "")).await;
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_ra"), "evt_ra")
            .await
            .outcome(),
        "queued"
    );
    assert!(eventually(Duration::from_secs(5), || up.count() == 1).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let shown: serde_json::Value = admin(&gw, "GET", "/events/stripe/evt_ra").await.1;
    assert_eq!(shown["state"], "retrying");
    assert_eq!(shown["history"][0]["result"], "http_4xx");
    let tried = shown["history"][0]["at_ms"].as_u64().expect("at");
    let next = shown["next_at_ms"].as_u64().expect("next");
    assert!(
        next >= tried + 2_900,
        "waits the upstream's 3 s, not 50 ms: {}",
        next - tried
    );
    assert_eq!(up.count(), 1, "not tried again before then");
    gw.stop().await;
}

/// Sends 60 KiB events until the store refuses five with 503 + `Retry-After`; the
/// IDs it queued before.
async fn fill_until_refused(gw: &TestGateway, prefix: &str) -> Vec<String> {
    let pad = "x".repeat(60 * 1024);
    let (mut queued, mut refused) = (Vec::new(), 0);
    for i in 0..1000 {
        let id = format!("{prefix}_{i}");
        let body = format!(r#"{{"id":"{id}","type":"invoice.paid","pad":"{pad}"}}"#);
        let r = gw.deliver("stripe", &body, &id).await;
        match (r.status, r.outcome()) {
            (200, "queued") => queued.push(id),
            (503, "store_error") => {
                assert!(r.header("retry-after").is_some(), "503 says when to retry");
                refused += 1;
                if refused >= 5 {
                    break;
                }
            }
            other => panic!("unexpected answer {other:?}: {}", r.body),
        }
    }
    assert!(refused > 0, "the store filled up: {} queued", queued.len());
    assert!(!queued.is_empty());
    queued
}

/// Every event of `ids` reaches the upstream exactly once, and nothing else does.
async fn each_delivered_once(up: &Upstream, ids: &[String]) {
    assert!(
        eventually(Duration::from_secs(20), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "every event acknowledged before the store filled up is delivered: {} of {}",
        ids.iter().filter(|id| up.effects_for(id) == 1).count(),
        ids.len()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(up.effects(), ids.len(), "and nothing it refused, nor twice");
}

/// A tmpfs of `size` mounted at a fresh folder, unmounted on drop; `None` where this
/// machine does not let the tests mount one (they need root).
pub struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Its mount point.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Self { dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazily: the store's writer thread may still be letting go of its file.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_new_events_with_503_and_loses_none_it_acknowledged() {
    let Some(disk) = SmallDisk::mount("6m") else {
        eprintln!("SKIPPED: mounting a small tmpfs needs root; this test runs in CI");
        return;
    };
    let up = Upstream::start().await;
    up.set_status(503);
    let config = queue_config(&up, disk.dir.path(), FAST, "")
        .replace("[store]\n", "[store]\nmin_free_space = \"2MiB\"\n");
    let gw = TestGateway::start(&config).await;
    let queued = fill_until_refused(&gw, "evt_full").await;
    up.set_status(200);
    each_delivered_once(&up, &queued).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_back_to_sync_still_delivers_what_was_queued() {
    let up = Upstream::start().await;
    up.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.toml");
    let queued = queue_config(&up, dir.path(), FAST, "");
    std::fs::write(&path, &queued).expect("write");
    let gw = TestGateway::start_file(&path).await;
    let ids: Vec<String> = (0..5).map(|i| format!("evt_reload_{i}")).collect();
    for id in &ids {
        assert_eq!(
            gw.deliver("stripe", &stripe_body(id), id).await.outcome(),
            "queued"
        );
    }
    let sync = queued
        .replace("delivery = \"queue\"\n", "")
        .replace(&format!("retry = {FAST}\n"), "")
        .replace("breaker = false\n", "");
    std::fs::write(&path, sync).expect("write");
    let (status, body) = admin(&gw, "POST", "/reload").await;
    assert_eq!(status, 200, "{body}");
    up.set_status(200);
    let r = gw
        .deliver("stripe", &stripe_body("evt_after"), "evt_after")
        .await;
    assert_eq!(r.outcome(), "forwarded", "the route is sync now");
    assert!(
        eventually(Duration::from_secs(15), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "the events it queued before are still delivered"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_refuses_new_events_with_503_and_still_delivers_what_it_holds() {
    let redis = crate::support::RedisServer::start();
    let _: () = redis.cmd(
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg("noeviction"),
    );
    let up = Upstream::start().await;
    up.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let config = queue_config(&up, dir.path(), FAST, "").replace(
        &format!(
            "backend = \"disk\"\npath = \"{}\"",
            dir.path().join("hookgate.db").display()
        ),
        &format!("backend = \"redis\"\nurl = \"{}\"", redis.url()),
    );
    assert!(config.contains("backend = \"redis\""));
    let gw = TestGateway::start(&config).await;
    // A little room above what Redis uses now.
    let used: String = redis.cmd(redis::cmd("INFO").arg("memory"));
    let used: u64 = used
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    let _: () = redis.cmd(
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(used + 3 * 1024 * 1024),
    );
    let queued = fill_until_refused(&gw, "evt_oom").await;
    up.set_status(200);
    each_delivered_once(&up, &queued).await;
    // Delivered events dropped their bodies: there is room again.
    let r = gw
        .deliver("stripe", &stripe_body("evt_oom_after"), "evt_oom_after")
        .await;
    assert_eq!(r.outcome(), "queued", "{}", r.body);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preset_with_a_required_reply_keeps_it_in_queue_mode() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let config = format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\n[[routes]]\nname = \"graph\"\npath = \"/graph\"\nprovider = \"msgraph\"\nsecrets = [\"cs-secret\"]\nupstream = \"{}\"\ndelivery = \"queue\"\n",
        dir.path().join("q.db").display(),
        up.url("/graph")
    );
    let gw = TestGateway::start(&config).await;
    let body = br#"{"value":[{"subscriptionId":"s1","clientState":"cs-secret","changeType":"created","resource":"users/1"}]}"#;
    for want in ["queued", "duplicate"] {
        let r = crate::support::post(&gw.url("/graph"), &[], body.to_vec()).await;
        assert_eq!((r.status, r.outcome()), (202, want), "{}", r.body);
        assert_eq!(r.body, "", "Microsoft Graph gets its empty 202");
    }
    assert!(eventually(Duration::from_secs(5), || up.effects() == 1).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.count(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_event_records_its_type_from_the_preset_or_the_route() {
    let up = Upstream::start().await;
    up.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let config = format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\n[[routes]]\nname = \"github\"\npath = \"/gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\nupstream = \"{}\"\ndelivery = \"queue\"\n[[routes]]\nname = \"custom\"\npath = \"/custom\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\ndelivery = \"queue\"\nevent_type = \"json:/data/kind\"\n",
        dir.path().join("q.db").display(),
        up.url("/gh"),
        up.url("/custom")
    );
    let gw = TestGateway::start(&config).await;
    let body = r#"{"action":"opened","number":7}"#;
    let mut headers = gw.sign("github", body, "gh-type-1");
    headers.push(("X-GitHub-Event".into(), "pull_request".into()));
    let r = crate::support::post(&gw.url("/gh"), &headers, body.as_bytes().to_vec()).await;
    assert_eq!(r.outcome(), "queued", "{}", r.body);
    let id = r.json()["event_id"].as_str().expect("id").to_owned();
    let (_, shown) = admin(&gw, "GET", &format!("/events/github/{id}")).await;
    assert_eq!(shown["event_type"], "pull_request.opened", "{shown}");

    let body = r#"{"id":"evt_kind","type":"ignored","data":{"kind":"refund"}}"#;
    assert_eq!(gw.deliver("custom", body, "x").await.outcome(), "queued");
    let (_, shown) = admin(&gw, "GET", "/events/custom/evt_kind").await;
    assert_eq!(
        shown["event_type"], "refund",
        "the route's event_type wins: {shown}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_filter_acknowledges_other_types_without_forwarding_or_storing_them() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let config = format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\n[[routes]]\nname = \"stripe\"\npath = \"/sync\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\nevents = [\"invoice.*\"]\n[[routes]]\nname = \"queued\"\npath = \"/queue\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\ndelivery = \"queue\"\nevents = [\"invoice.*\"]\n[[routes]]\nname = \"github\"\npath = \"/gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\nupstream = \"{}\"\nevents = [\"pull_request.*\"]\n",
        dir.path().join("q.db").display(),
        up.url("/sync"),
        up.url("/queue"),
        up.url("/gh"),
    );
    let gw = TestGateway::start(&config).await;
    let paid = r#"{"id":"evt_f1","type":"invoice.paid"}"#;
    let created = r#"{"id":"evt_f2","type":"customer.created"}"#;
    let r = gw.deliver("stripe", paid, "x").await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    let r = gw.deliver("stripe", created, "x").await;
    assert_eq!((r.status, r.outcome()), (200, "filtered"), "{}", r.body);
    assert_eq!(r.json()["event_type"], "customer.created");
    assert_eq!(up.count(), 1, "a filtered event is not forwarded");
    // Recorded for the dedup window: a copy is a duplicate.
    assert_eq!(
        gw.deliver("stripe", created, "x").await.outcome(),
        "duplicate"
    );

    assert_eq!(
        gw.deliver("queued", created, "x").await.outcome(),
        "filtered"
    );
    assert_eq!(
        gw.deliver("queued", created, "x").await.outcome(),
        "duplicate"
    );
    let (_, listed) = admin(&gw, "GET", "/events/queued").await;
    assert_eq!(
        listed["events"].as_array().map(Vec::len),
        Some(0),
        "not stored: {listed}"
    );
    assert_eq!(gw.deliver("queued", paid, "x").await.outcome(), "queued");
    assert!(eventually(Duration::from_secs(5), || up.count() == 2).await);

    // GitHub: the header and the action; a delivery without the header has no type,
    // and a filter admits only what it can see.
    let body = r#"{"action":"opened"}"#;
    let mut headers = gw.sign("github", body, "gh-f1");
    headers.push(("X-GitHub-Event".into(), "pull_request".into()));
    let r = crate::support::post(&gw.url("/gh"), &headers, body.as_bytes().to_vec()).await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    // The same signed bytes under another type: a copy, not a new event.
    let mut headers = gw.sign("github", body, "gh-f2");
    headers.push(("X-GitHub-Event".into(), "issues".into()));
    let r = crate::support::post(&gw.url("/gh"), &headers, body.as_bytes().to_vec()).await;
    assert_eq!(r.outcome(), "duplicate", "{}", r.body);
    let other = r#"{"action":"closed"}"#;
    let mut headers = gw.sign("github", other, "gh-f4");
    headers.push(("X-GitHub-Event".into(), "issues".into()));
    let r = crate::support::post(&gw.url("/gh"), &headers, other.as_bytes().to_vec()).await;
    assert_eq!(r.outcome(), "filtered", "{}", r.body);
    let r = gw.deliver("github", r#"{"action":"x"}"#, "gh-f3").await;
    assert_eq!(r.outcome(), "filtered", "no type: filtered");
    assert_eq!(
        gw.metric("hookgate_deliveries_total{route=\"stripe\",outcome=\"filtered\"}")
            .await,
        1.0
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_redelivers_a_delivered_event_on_a_queue_route() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&queue_config(&up, dir.path(), FAST, "")).await;
    let body = stripe_body("evt_redeliver");
    assert_eq!(gw.deliver("stripe", &body, "x").await.outcome(), "queued");
    assert!(eventually(Duration::from_secs(5), || up.effects() == 1).await);
    // The delivery is recorded right after the upstream's 2xx.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        gw.deliver("stripe", &body, "x").await.outcome(),
        "duplicate"
    );
    let (status, v) = admin(&gw, "DELETE", "/keys/stripe/evt_redeliver").await;
    assert_eq!((status, v["forgotten"].as_bool()), (200, Some(true)), "{v}");
    assert_eq!(gw.deliver("stripe", &body, "x").await.outcome(), "queued");
    assert!(eventually(Duration::from_secs(5), || up.effects() == 2).await);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_raising_concurrency_takes_effect() {
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(300));
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.toml");
    let one = queue_config(&up, dir.path(), FAST, "concurrency = 1");
    std::fs::write(&path, &one).expect("write");
    let gw = TestGateway::start_file(&path).await;
    for i in 0..6 {
        let id = format!("evt_conc_reload_{i}");
        assert_eq!(
            gw.deliver("stripe", &stripe_body(&id), &id).await.outcome(),
            "queued"
        );
    }
    assert!(eventually(Duration::from_secs(3), || up.count() >= 1).await);
    assert_eq!(up.max_concurrent(), 1);
    std::fs::write(&path, one.replace("concurrency = 1", "concurrency = 4")).expect("write");
    let (status, _) = admin(&gw, "POST", "/reload").await;
    assert_eq!(status, 200);
    assert!(eventually(Duration::from_secs(10), || up.effects() == 6).await);
    assert!(up.max_concurrent() > 1, "more slots after the reload");
    assert!(up.max_concurrent() <= 4);
    gw.stop().await;
}

/// The most arrivals in any window of `len` (sliding, half-open).
pub fn most_in_any_window(up: &Upstream, len: Duration) -> usize {
    let mut at: Vec<std::time::Instant> = up.received().iter().map(|r| r.at).collect();
    at.sort();
    let (mut most, mut first) = (0, 0);
    for last in 0..at.len() {
        while at[last] - at[first] >= len {
            first += 1;
        }
        most = most.max(last - first + 1);
    }
    most
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_spaces_a_backlog_out() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&queue_config(
        &up,
        dir.path(),
        FAST,
        "rate_limit = \"20/s\"",
    ))
    .await;
    let ids: Vec<String> = (0..60).map(|i| format!("evt_rate_{i}")).collect();
    let started = std::time::Instant::now();
    for id in &ids {
        assert_eq!(
            gw.deliver("stripe", &stripe_body(id), id).await.outcome(),
            "queued"
        );
    }
    assert!(
        eventually(Duration::from_secs(15), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await
    );
    let most = most_in_any_window(&up, Duration::from_secs(1));
    assert!(most <= 20, "{most} deliveries within one second");
    assert!(most >= 10, "the limit is used, not starved: {most}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "60 at 20/s take more than 2 s"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_pauses_a_rate_limited_route() {
    let up = Upstream::start().await;
    up.set_status(429);
    up.set_retry_after(Some(2));
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&queue_config(
        &up,
        dir.path(),
        r#"{ initial = "50ms", max_delay = "10s" }"#,
        "rate_limit = \"100/s\"\nconcurrency = 1",
    ))
    .await;
    for i in 0..5 {
        let id = format!("evt_pause_{i}");
        assert_eq!(
            gw.deliver("stripe", &stripe_body(&id), &id).await.outcome(),
            "queued"
        );
    }
    assert!(eventually(Duration::from_secs(5), || up.count() >= 1).await);
    up.set_status(200);
    up.set_retry_after(None);
    assert!(eventually(Duration::from_secs(10), || up.effects() == 5).await);
    let got = up.received();
    let gap = got[1].at - got[0].at;
    assert!(
        gap >= Duration::from_millis(1800),
        "the other events waited for the upstream's Retry-After: {gap:?}"
    );
    gw.stop().await;
}

/// Fills the filesystem of `dir` to its last byte with a file of its own (another
/// process's data, as far as the gateway can tell); returns the file.
pub fn fill_to_the_last_byte(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write as _;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).expect("filler");
    for chunk in [1 << 20, 64 << 10, 4 << 10, 512, 1] {
        let block = vec![0u8; chunk];
        while f.write_all(&block).is_ok() {}
    }
    let _ = f.sync_all();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_filled_to_the_last_byte_holds_deliveries_back_instead_of_repeating_them() {
    let Some(disk) = SmallDisk::mount("24m") else {
        eprintln!("SKIPPED: mounting a small tmpfs needs root; this test runs in CI");
        return;
    };
    let up = Upstream::start().await;
    up.set_status(503);
    up.set_delay(Duration::from_millis(20));
    let config = queue_config(&up, disk.dir.path(), FAST, "concurrency = 8")
        .replace("[store]\n", "[store]\nmin_free_space = \"1MiB\"\n");
    let gw = TestGateway::start(&config).await;
    let ids: Vec<String> = (0..300).map(|i| format!("evt_fill_{i}")).collect();
    for id in &ids {
        let r = gw.deliver("stripe", &stripe_body(id), id).await;
        assert_eq!(r.outcome(), "queued", "{}", r.body);
    }
    // Deliveries run while another writer takes the filesystem's last byte.
    up.set_status(200);
    assert!(eventually(Duration::from_secs(10), || up.effects() >= 20).await);
    let filler = fill_to_the_last_byte(disk.dir.path());
    let failures_before = gw.metric("hookgate_store_write_failures_total").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let repeated: Vec<&String> = ids.iter().filter(|id| up.effects_for(id) > 1).collect();
    assert!(
        repeated.is_empty(),
        "no event is delivered again after its 2xx: {} were ({:?}…)",
        repeated.len(),
        repeated.first()
    );
    // The writer waits between attempts instead of spinning on the failing write.
    let failures = gw.metric("hookgate_store_write_failures_total").await - failures_before;
    assert!(failures >= 1.0, "the store did run out of space");
    assert!(
        failures < 40.0,
        "failed writes in 4 s of a full disk: {failures}"
    );
    // Space back: everything is delivered, each event once.
    std::fs::remove_file(&filler).expect("free the space");
    assert!(
        eventually(Duration::from_secs(30), || ids
            .iter()
            .all(|id| up.effects_for(id) >= 1))
        .await,
        "every event is delivered once space is back: {} of {}",
        ids.iter().filter(|id| up.effects_for(id) >= 1).count(),
        ids.len()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    for id in &ids {
        assert_eq!(up.effects_for(id), 1, "{id} delivered once");
    }
    assert_eq!(
        gw.metric("hookgate_queue_deliveries_held").await,
        0.0,
        "nothing held back any more"
    );
    gw.stop().await;
}
