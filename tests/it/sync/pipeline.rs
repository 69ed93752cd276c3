//! The state machine of a delivery, end to end: real signed requests to a real
//! gateway, a stub upstream that counts, on the memory store and on a real Redis.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::support::{
    RedisServer, TestGateway, Upstream, eventually, post, send, store_toml, stripe_body,
    stripe_config,
};

/// Runs a scenario on both stores.
macro_rules! both_stores {
    ($memory:ident, $redis:ident, $scenario:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $memory() {
            $scenario(None).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $redis() {
            let redis = RedisServer::start();
            $scenario(Some(&redis)).await;
        }
    };
}

async fn forwarded_once_then_duplicate(redis: Option<&RedisServer>) {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&stripe_config(&up, &store_toml(redis, ""), "")).await;
    let body = stripe_body("evt_once");
    let first = gw.deliver("stripe", &body, "ignored").await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.outcome(), "forwarded");
    assert_eq!(
        first.body, r#"{"ok":true}"#,
        "the upstream's own response is relayed"
    );
    assert_eq!(first.header("x-upstream"), Some("stub"));

    let again = gw.deliver("stripe", &body, "ignored").await;
    assert_eq!(again.status, 200);
    assert_eq!(
        again.json(),
        serde_json::json!({"status": "duplicate", "event_id": "evt_once"})
    );
    assert_eq!(up.count(), 1, "a replay must never be forwarded");

    let got = &up.received()[0];
    assert_eq!(got.method, "POST");
    assert_eq!(got.uri, "/hooks/stripe");
    assert_eq!(got.body.as_ref(), body.as_bytes(), "raw body byte for byte");
    assert_eq!(got.header("idempotency-key"), Some("evt_once"));
    assert_eq!(got.header("hookgate-event-id"), Some("evt_once"));
    assert_eq!(got.header("hookgate-route"), Some("stripe"));
    assert_eq!(got.header("x-forwarded-for"), Some("127.0.0.1"));
    assert!(
        got.header("stripe-signature").is_some(),
        "end-to-end headers are kept"
    );
    if let Some(r) = redis {
        let ttl: i64 = r.cmd(redis::cmd("PTTL").arg("hookgate:stripe:evt_once"));
        assert!(
            ttl > 23 * 3600 * 1000,
            "done record keeps the dedup_ttl, got {ttl} ms"
        );
    }
    gw.stop().await;
}
both_stores!(
    memory_forwards_once_then_duplicate,
    redis_forwards_once_then_duplicate,
    forwarded_once_then_duplicate
);

async fn fifty_concurrent_copies(redis: Option<&RedisServer>) {
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(300));
    let gw = Arc::new(TestGateway::start(&stripe_config(&up, &store_toml(redis, ""), "")).await);
    let body = stripe_body("evt_concurrent");
    let headers = gw.sign("stripe", &body, "x");
    let url = gw.url("/webhooks/stripe");
    let replies = join_all((0..50).map(|_| post(&url, &headers, body.clone().into_bytes()))).await;
    let forwarded = replies
        .iter()
        .filter(|r| r.outcome() == "forwarded")
        .count();
    let in_flight = replies.iter().filter(|r| r.status == 409).count();
    let duplicate = replies
        .iter()
        .filter(|r| r.outcome() == "duplicate")
        .count();
    assert_eq!(forwarded, 1, "exactly one copy is forwarded");
    assert_eq!(
        forwarded + in_flight + duplicate,
        50,
        "every copy gets 200 or 409"
    );
    for r in replies.iter().filter(|r| r.status == 409) {
        assert_eq!(r.header("retry-after"), Some("5"));
    }
    assert_eq!(up.count(), 1, "the upstream saw the event once");
}
both_stores!(
    memory_50_concurrent_copies_forwarded_once,
    redis_50_concurrent_copies_forwarded_once,
    fifty_concurrent_copies
);

async fn failed_forwards_release_the_claim(redis: Option<&RedisServer>) {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&stripe_config(
        &up,
        &store_toml(redis, ""),
        "upstream_timeout = \"300ms\"",
    ))
    .await;

    // Upstream answers 500: relayed, the key is freed, and the retry is forwarded.
    up.set_status(500);
    let body = stripe_body("evt_500");
    let r = gw.deliver("stripe", &body, "x").await;
    assert_eq!((r.status, r.outcome()), (500, "upstream_rejected"));
    up.set_status(200);
    let r = gw.deliver("stripe", &body, "x").await;
    assert_eq!(
        (r.status, r.outcome()),
        (200, "forwarded"),
        "the retry after a 500 is forwarded"
    );
    let r = gw.deliver("stripe", &body, "x").await;
    assert_eq!(r.outcome(), "duplicate");
    assert_eq!(up.count_for("evt_500"), 2);

    // Upstream slower than the timeout: 504, then the retry goes through.
    up.set_delay(Duration::from_millis(800));
    let body = stripe_body("evt_slow");
    let r = gw.deliver("stripe", &body, "x").await;
    assert_eq!(r.status, 504, "{}", r.body);
    assert_eq!(r.json()["error"], "upstream timed out");
    up.set_delay(Duration::ZERO);
    let r = gw.deliver("stripe", &body, "x").await;
    assert_eq!(
        (r.status, r.outcome()),
        (200, "forwarded"),
        "the retry after a timeout is forwarded"
    );
    assert_eq!(
        up.count_for("evt_slow"),
        2,
        "the timed-out attempt reached the upstream and the retry too"
    );
    gw.stop().await;
}
both_stores!(
    memory_failed_forwards_release_the_claim,
    redis_failed_forwards_release_the_claim,
    failed_forwards_release_the_claim
);

async fn unreachable_upstream_is_502_and_released(redis: Option<&RedisServer>) {
    // A port with nothing listening.
    let port = crate::support::free_port();
    let cfg = format!(
        "{}\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"http://127.0.0.1:{port}/x\"\n",
        store_toml(redis, "")
    );
    let gw = TestGateway::start(&cfg).await;
    let body = stripe_body("evt_down");
    let r = gw.deliver("stripe", &body, "x").await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.json()["error"], "upstream unreachable");
    // The key was released: the next copy is tried again (and fails again), not a 409.
    let r = gw.deliver("stripe", &body, "x").await;
    assert_eq!(r.status, 502);
    // Once the upstream is up, the provider's retry is forwarded.
    let up = Upstream::start_on(port).await;
    let r = gw.deliver("stripe", &body, "x").await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{}", r.body);
    assert_eq!(up.count_for("evt_down"), 1);
    gw.stop().await;
}
both_stores!(
    memory_unreachable_upstream_is_502,
    redis_unreachable_upstream_is_502,
    unreachable_upstream_is_502_and_released
);

async fn in_flight_then_duplicate(redis: Option<&RedisServer>) {
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(600));
    let gw = Arc::new(TestGateway::start(&stripe_config(&up, &store_toml(redis, ""), "")).await);
    let body = stripe_body("evt_inflight");
    let g = gw.clone();
    let b = body.clone();
    let first = tokio::spawn(async move { g.deliver("stripe", &b, "x").await });
    assert!(eventually(Duration::from_secs(5), || up.count() == 1).await);
    let during = gw.deliver("stripe", &body, "x").await;
    assert_eq!(during.status, 409);
    assert_eq!(during.header("retry-after"), Some("5"));
    assert_eq!(during.json()["status"], "in_flight");
    assert_eq!(first.await.expect("first").outcome(), "forwarded");
    let after = gw.deliver("stripe", &body, "x").await;
    assert_eq!((after.status, after.outcome()), (200, "duplicate"));
    assert_eq!(up.count(), 1);
}
both_stores!(
    memory_in_flight_then_duplicate,
    redis_in_flight_then_duplicate,
    in_flight_then_duplicate
);

async fn same_id_other_body_is_422(redis: Option<&RedisServer>) {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&stripe_config(&up, &store_toml(redis, ""), "")).await;
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_x"), "x")
            .await
            .outcome(),
        "forwarded"
    );
    let other = stripe_body("evt_x").replace("2000", "9999");
    let r = gw.deliver("stripe", &other, "x").await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["error"], "event id reused with a different body");
    assert_eq!(up.count(), 1);
    gw.stop().await;
}
both_stores!(
    memory_same_id_other_body_is_422,
    redis_same_id_other_body_is_422,
    same_id_other_body_is_422
);

async fn provider_hangs_up_mid_forward(redis: Option<&RedisServer>) {
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(700));
    let gw = TestGateway::start(&stripe_config(&up, &store_toml(redis, ""), "")).await;
    let body = stripe_body("evt_hangup");
    let headers = gw.sign("stripe", &body, "x");
    // The provider gives up after 150 ms, while the upstream is still working.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(150))
        .no_proxy()
        .build()
        .expect("client");
    let mut req = impatient
        .post(gw.url("/webhooks/stripe"))
        .body(body.clone());
    for (n, v) in &headers {
        req = req.header(n.as_str(), v.as_str());
    }
    assert!(
        req.send().await.is_err(),
        "the provider should have timed out"
    );
    // The upstream's 2xx still marks the event done: the next copy is a duplicate.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let r = gw.deliver("stripe", &body, "x").await;
    assert_eq!((r.status, r.outcome()), (200, "duplicate"), "{}", r.body);
    assert_eq!(up.count(), 1);
    gw.stop().await;
}
both_stores!(
    memory_provider_hangup_still_completes,
    redis_provider_hangup_still_completes,
    provider_hangs_up_mid_forward
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_rejects_with_503_or_forwards_by_route_then_recovers() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let cfg = format!(
        "{}\n[[routes]]\nname = \"strict\"\npath = \"/strict\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n\n[[routes]]\nname = \"open\"\npath = \"/open\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\non_error = \"forward\"\n",
        store_toml(Some(&redis), "timeout = \"300ms\""),
        up.url("/strict"),
        up.url("/open"),
    );
    let gw = TestGateway::start(&cfg).await;
    assert_eq!(
        gw.deliver("strict", &stripe_body("evt_before"), "x")
            .await
            .outcome(),
        "forwarded"
    );

    redis.stop();
    let r = gw.deliver("strict", &stripe_body("evt_during"), "x").await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("5"));
    assert_eq!(
        up.count_for("evt_during"),
        0,
        "reject mode forwards nothing while the store is down"
    );

    let r = gw.deliver("open", &stripe_body("evt_open"), "x").await;
    assert_eq!(
        (r.status, r.outcome()),
        (200, "forwarded_unclaimed"),
        "{}",
        r.body
    );
    assert_eq!(up.count_for("evt_open"), 1);
    assert_eq!(gw.app.unclaimed_forwards(), 1);

    redis.restart();
    // Back to normal service once Redis answers again: the rejected event goes through
    // on the provider's retry, and dedup works.
    let mut ok = false;
    for _ in 0..100 {
        let r = gw.deliver("strict", &stripe_body("evt_during"), "x").await;
        if r.outcome() == "forwarded" {
            ok = true;
            break;
        }
        assert_eq!(
            r.status, 503,
            "while reconnecting the answer stays 503: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "the gateway did not recover after redis came back");
    assert_eq!(
        gw.deliver("strict", &stripe_body("evt_during"), "x")
            .await
            .outcome(),
        "duplicate"
    );
    assert_eq!(up.count_for("evt_during"), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_its_documented_answer_and_is_never_forwarded() {
    let up = Upstream::start().await;
    let cfg = stripe_config(
        &up,
        "[server]\nmax_body = \"1KiB\"\n[store]\nbackend = \"memory\"",
        "",
    );
    let gw = TestGateway::start(&cfg).await;
    let body = stripe_body("evt_bad");
    let good = gw.sign("stripe", &body, "x");
    let url = gw.url("/webhooks/stripe");

    let r = post(&gw.url("/webhooks/nope"), &good, body.clone().into_bytes()).await;
    assert_eq!(r.status, 404);

    let r = send("GET", &url, &good, Vec::new()).await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST"));

    let big = format!(r#"{{"id":"evt_big","pad":"{}"}}"#, "x".repeat(2000));
    let big_headers = gw.sign("stripe", &big, "x");
    let r = post(&url, &big_headers, big.clone().into_bytes()).await;
    assert_eq!(r.status, 413, "declared Content-Length over max_body");
    // Without a Content-Length (chunked), the limit holds while reading.
    let mut raw =
        "POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n".to_string();
    for (n, v) in &big_headers {
        raw.push_str(&format!("{n}: {v}\r\n"));
    }
    raw.push_str("\r\n");
    for c in big.as_bytes().chunks(256) {
        raw.push_str(&format!(
            "{:x}\r\n{}\r\n",
            c.len(),
            String::from_utf8_lossy(c)
        ));
    }
    raw.push_str("0\r\n\r\n");
    let answer = crate::support::raw_http(gw.addr, raw.as_bytes()).await;
    assert!(
        answer.starts_with("HTTP/1.1 413"),
        "chunked body over max_body: {answer}"
    );

    let tampered = body.replace("2000", "2001");
    let r = post(&url, &good, tampered.into_bytes()).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"], "invalid signature");

    let r = post(&url, &[], body.clone().into_bytes()).await;
    assert_eq!(r.status, 401, "missing signature header");

    let wrong =
        TestGateway::start(&stripe_config(&up, "", "").replace("whsec_test", "whsec_other")).await;
    let r = post(
        &url,
        &wrong.sign("stripe", &body, "x"),
        body.clone().into_bytes(),
    )
    .await;
    assert_eq!(r.status, 401, "signed with another secret");

    // Stale and future timestamps (tolerance 300 s), correctly signed.
    for (offset, what) in [(-400i64, "stale"), (400, "future")] {
        let t = (hookgate::time::Clock::System.now() as i64 + offset) as u64;
        let route = &gw.config.routes[0];
        let h: Vec<(String, String)> = hookgate::sign::headers(
            &route.verifier,
            &route.event_id,
            body.as_bytes(),
            t,
            "x",
            None,
        )
        .expect("sign")
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
        let r = post(&url, &h, body.clone().into_bytes()).await;
        assert_eq!(r.status, 401, "{what} timestamp");
        assert_eq!(
            r.json()["error"],
            "timestamp outside the tolerance",
            "{what}"
        );
    }

    let no_id = r#"{"object":"event","type":"ping"}"#;
    let r = post(
        &url,
        &gw.sign("stripe", no_id, "x"),
        no_id.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "no event id in the delivery");

    let not_json = "this is not json";
    let r = post(
        &url,
        &gw.sign("stripe", not_json, "x"),
        not_json.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(r.status, 400, "a malformed body has no event id");

    assert_eq!(up.count(), 0, "no bad input reached the upstream");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_headers_are_dropped_and_forwarded_for_is_appended() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&stripe_config(&up, "", "")).await;
    let body = stripe_body("evt_headers");
    let mut h = gw.sign("stripe", &body, "x");
    h.push(("x-forwarded-for".into(), "203.0.113.7".into()));
    h.push(("connection".into(), "keep-alive, x-drop-me".into()));
    h.push(("x-drop-me".into(), "1".into()));
    h.push(("proxy-authorization".into(), "Basic Zm9vOmJhcg==".into()));
    h.push(("x-custom".into(), "kept".into()));
    let r = post(&gw.url("/webhooks/stripe?attempt=2"), &h, body.into_bytes()).await;
    assert_eq!(r.outcome(), "forwarded");
    let got = &up.received()[0];
    assert_eq!(
        got.uri, "/hooks/stripe?attempt=2",
        "the query string is passed on"
    );
    assert_eq!(
        got.header("x-forwarded-for"),
        Some("203.0.113.7, 127.0.0.1")
    );
    assert_eq!(got.header("x-custom"), Some("kept"));
    assert_eq!(got.header("x-drop-me"), None);
    assert_eq!(got.header("proxy-authorization"), None);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_secret_re_signs_with_standard_webhooks() {
    let up = Upstream::start().await;
    let fwd = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let gw = TestGateway::start(&stripe_config(
        &up,
        "",
        &format!("forward_secret = \"{fwd}\""),
    ))
    .await;
    let body = stripe_body("evt_resign");
    assert_eq!(
        gw.deliver("stripe", &body, "x").await.outcome(),
        "forwarded"
    );
    let got = &up.received()[0];
    let id = got.header("webhook-id").expect("webhook-id");
    let ts = got.header("webhook-timestamp").expect("webhook-timestamp");
    let sig = got.header("webhook-signature").expect("webhook-signature");
    assert_eq!(id, "evt_resign");
    // Verify independently of hookgate's code: HMAC-SHA256 over id.ts.body with the
    // base64-decoded secret, base64 in a "v1," entry.
    use base64::Engine as _;
    use hmac::{KeyInit, Mac};
    let key = base64::engine::general_purpose::STANDARD
        .decode(&fwd["whsec_".len()..])
        .expect("key");
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&key).expect("key");
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(&got.body);
    let want = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    assert_eq!(sig, want);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_event_id_overrides_and_slack_handshake() {
    let up = Upstream::start().await;
    let cfg = format!(
        r#"
[[routes]]
name = "rotated"
path = "/rotated"
provider = "github"
secrets = ["old-secret", "new-secret"]
upstream = "{u}"

[[routes]]
name = "byjson"
path = "/byjson"
provider = "github"
secrets = ["s"]
event_id = "json:/data/id"
upstream = "{u}"

[[routes]]
name = "byhash"
path = "/byhash"
provider = "github"
secrets = ["s"]
event_id = "body-sha256"
upstream = "{u}"

[[routes]]
name = "slack"
path = "/slack"
provider = "slack"
secrets = ["slack-secret"]
upstream = "{u}"

[[routes]]
name = "acme"
path = "/acme"
provider = "hmac"
secrets = ["acme"]
upstream = "{u}"
event_id = "header:X-Acme-Id"
hmac = {{ header = "X-Acme-Sig", algorithm = "sha512", encoding = "base64", prefix = "v1=", separator = " ", payload = "{{timestamp}}:{{id}}:{{body}}", timestamp_header = "X-Acme-Ts", id_header = "X-Acme-Id" }}
"#,
        u = up.url("/u")
    );
    let gw = TestGateway::start(&cfg).await;
    // Rotation: signed with the second secret.
    let other =
        TestGateway::start(&cfg.replace("[\"old-secret\", \"new-secret\"]", "[\"new-secret\"]"))
            .await;
    let body = r#"{"action":"opened"}"#;
    let h = other.sign("rotated", body, "delivery-1");
    let r = post(&gw.url("/rotated"), &h, body.as_bytes().to_vec()).await;
    assert_eq!(r.outcome(), "forwarded");
    // X-GitHub-Delivery is not signed: the key is the signed body's digest.
    let key = up.received()[0]
        .header("idempotency-key")
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(key.starts_with("sig-"), "{key}");
    assert_eq!(
        up.received()[0].header("x-github-delivery"),
        Some("delivery-1")
    );

    let body = r#"{"data":{"id":42}}"#;
    let r = gw.deliver("byjson", body, "unused").await;
    assert_eq!(r.outcome(), "forwarded");
    assert_eq!(up.received()[1].header("idempotency-key"), Some("42"));

    let body = r#"{"anything":true}"#;
    let r = gw.deliver("byhash", body, "unused").await;
    assert_eq!(r.outcome(), "forwarded");
    let hash = up.received()[2]
        .header("idempotency-key")
        .map(str::to_owned)
        .expect("key");
    assert_eq!(hash.len(), 64);
    assert_eq!(
        gw.deliver("byhash", body, "other").await.outcome(),
        "duplicate"
    );

    // The generic provider: several signatures in one header, the second valid.
    let body = r#"{"n":1}"#;
    let mut h = gw.sign("acme", body, "acme-1");
    for (n, v) in h.iter_mut() {
        if n == "x-acme-sig" {
            *v = format!("v1=AAAA {v}");
        }
    }
    let r = post(&gw.url("/acme"), &h, body.as_bytes().to_vec()).await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    // The {id} is signed: swapping the ID header breaks the signature.
    let h: Vec<_> = h
        .into_iter()
        .map(|(n, v)| {
            if n == "x-acme-id" {
                (n, "acme-2".to_string())
            } else {
                (n, v)
            }
        })
        .collect();
    assert_eq!(
        post(&gw.url("/acme"), &h, body.as_bytes().to_vec())
            .await
            .status,
        401
    );

    // Slack's url_verification is answered by the gateway and never forwarded.
    let before = up.count();
    let body = r#"{"token":"t","challenge":"abc123","type":"url_verification"}"#;
    let r = gw.deliver("slack", body, "unused").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), serde_json::json!({"challenge": "abc123"}));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(up.count(), before);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_trickles_in_gets_408_and_others_are_still_served() {
    let up = Upstream::start().await;
    let cfg = stripe_config(
        &up,
        "[server]\nbody_timeout = \"300ms\"\n[store]\nbackend = \"memory\"",
        "",
    );
    let gw = TestGateway::start(&cfg).await;
    let body = stripe_body("evt_slowloris");
    let headers = gw.sign("stripe", &body, "x");
    let mut head = format!(
        "POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (n, v) in &headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    // Headers and half the body, then silence.
    let partial = format!("{head}{}", &body[..body.len() / 2]);
    let slow = tokio::spawn({
        let addr = gw.addr;
        async move { crate::support::raw_http(addr, partial.as_bytes()).await }
    });
    // Meanwhile a normal delivery goes through.
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_fast"), "x")
            .await
            .outcome(),
        "forwarded"
    );
    let answer = slow.await.expect("slow request");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("connection: close"),
        "a trickled body closes the connection: {answer}"
    );
    assert_eq!(up.count_for("evt_slowloris"), 0);
    gw.stop().await;
}

/// HubSpot's v1 signs the body only: a route without `public_url` verifies it, and a
/// v3 delivery (which covers the URL) on that route is refused, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hubspot_route_without_public_url_verifies_v1_and_refuses_v3() {
    let up = Upstream::start().await;
    let route = |public_url: &str| {
        format!(
            "{}\n[[routes]]\nname = \"hubspot\"\npath = \"/webhooks/hubspot\"\nprovider = \"hubspot\"\nsecrets = [\"hs-secret\"]\nupstream = \"{}\"\n{public_url}",
            store_toml(None, ""),
            up.url("/hubspot")
        )
    };
    let gw = TestGateway::start(&route("")).await;
    let body = r#"[{"eventId":101,"subscriptionType":"contact.creation"}]"#;
    let v1 = gw.sign("hubspot", body, "ignored");
    assert!(
        v1.iter()
            .any(|(n, v)| n == "x-hubspot-signature-version" && v == "v1"),
        "{v1:?}"
    );
    let r = post(&gw.url("/webhooks/hubspot"), &v1, body.as_bytes().to_vec()).await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{}", r.body);
    assert_eq!(up.count(), 1);

    // The same body signed v3 for a URL: the route has no URL to check it against.
    let with_url = TestGateway::start(&route(
        "public_url = \"https://hooks.example.com/webhooks/hubspot\"\n",
    ))
    .await;
    let body3 = r#"[{"eventId":102,"subscriptionType":"contact.creation"}]"#;
    let v3 = with_url.sign("hubspot", body3, "ignored");
    assert!(
        v3.iter().any(|(n, _)| n == "x-hubspot-signature-v3"),
        "{v3:?}"
    );
    let r = post(&gw.url("/webhooks/hubspot"), &v3, body3.as_bytes().to_vec()).await;
    assert_eq!(
        (r.status, r.outcome()),
        (401, "needs_public_url"),
        "{}",
        r.body
    );
    assert_eq!(up.count(), 1, "nothing more was forwarded");
    // The route with a URL verifies it.
    let r = post(
        &with_url.url("/webhooks/hubspot"),
        &v3,
        body3.as_bytes().to_vec(),
    )
    .await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{}", r.body);
    gw.stop().await;
    with_url.stop().await;
}
