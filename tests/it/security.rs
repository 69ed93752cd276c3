//! Attacks an attacker's review of hookgate reproduced (docs/security.md, "Threats
//! found by review"): each test sends the attack as real HTTP to a real gateway and
//! checks what the gateway answers and what the upstream saw.

use crate::support::{TestGateway, Upstream, post};

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn route(name: &str, provider: &str, secrets: &str, up: &Upstream, extra: &str) -> String {
    format!(
        "[[routes]]\nname = \"{name}\"\npath = \"/{name}\"\nprovider = \"{provider}\"\nsecrets = {secrets}\nupstream = \"{}\"\n{extra}\n",
        up.url(&format!("/{name}"))
    )
}

fn with(mut headers: Vec<(String, String)>, name: &str, value: &str) -> Vec<(String, String)> {
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    headers.push((name.to_owned(), value.to_owned()));
    headers
}

/// Linear's window is on the signed body field `webhookTimestamp`; an unsigned
/// `Linear-Timestamp` header must not move it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linear_windows_on_the_signed_body_time_never_the_header() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&route("linear", "linear", "[\"lin_wh_s\"]", &up, "")).await;
    let now_ms = now_secs() * 1000;
    let week_old = format!(
        r#"{{"action":"create","type":"Issue","data":{{"id":"i1"}},"webhookTimestamp":{}}}"#,
        now_ms - 7 * 86_400_000
    );
    // A week-old capture with a fresh unsigned header: refused.
    let h = with(
        gw.sign("linear", &week_old, "d-1"),
        "linear-timestamp",
        &now_ms.to_string(),
    );
    let r = post(&gw.url("/linear"), &h, week_old.into_bytes()).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.json()["error"], "timestamp outside the tolerance");
    assert_eq!(up.count(), 0);

    // A fresh body with a stale header: the header is ignored.
    let fresh = format!(
        r#"{{"action":"create","type":"Issue","data":{{"id":"i2"}},"webhookTimestamp":{now_ms}}}"#
    );
    let h = with(
        gw.sign("linear", &fresh, "d-2"),
        "linear-timestamp",
        &(now_ms - 7 * 86_400_000).to_string(),
    );
    let r = post(&gw.url("/linear"), &h, fresh.into_bytes()).await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{}", r.body);
    assert_eq!(up.count(), 1);
    gw.stop().await;
}

/// Runs a scenario on the memory store and on a real Redis.
macro_rules! both_stores {
    ($memory:ident, $redis:ident, $scenario:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $memory() {
            $scenario(None).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $redis() {
            let redis = crate::support::RedisServer::start();
            $scenario(Some(&redis)).await;
        }
    };
}

/// GitHub's `X-GitHub-Delivery` is not signed: a captured body resent under new IDs
/// is a replay, and a chosen ID never blocks the genuine event that later has it.
async fn unsigned_ids_neither_replay_nor_poison(redis: Option<&crate::support::RedisServer>) {
    let up = Upstream::start().await;
    let cfg = format!(
        "{}{}",
        crate::support::store_toml(redis, ""),
        route("gh", "github", "[\"gh-secret\"]", &up, "")
    );
    let gw = TestGateway::start(&cfg).await;
    let captured = r#"{"action":"opened","number":1}"#;
    let r = gw.deliver("gh", captured, "genuine-1").await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{}", r.body);
    let key = up.received()[0]
        .header("idempotency-key")
        .map(str::to_owned)
        .expect("an idempotency key");
    assert!(key.starts_with("sig-") && key.len() == 68, "{key}");

    // The same signed body under three new delivery IDs: acknowledged, not forwarded.
    for id in ["replay-1", "replay-2", "replay-3"] {
        let r = gw.deliver("gh", captured, id).await;
        assert_eq!((r.status, r.outcome()), (200, "duplicate"), "{}", r.body);
        assert_eq!(r.json()["event_id"], key.as_str());
    }
    assert_eq!(up.count(), 1, "a captured body must not be forwarded again");

    // The captured body under an ID the attacker guesses a future event will carry:
    // still a duplicate, and the genuine event with that ID is forwarded.
    let r = gw.deliver("gh", captured, "future-1").await;
    assert_eq!(r.outcome(), "duplicate");
    let genuine = r#"{"action":"closed","number":1}"#;
    let r = gw.deliver("gh", genuine, "future-1").await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{}", r.body);

    // A signed body the gateway has not seen (captured elsewhere, or older than
    // dedup_ttl) sent first under a chosen ID: forwarded once, and it cannot turn the
    // genuine event with that ID into a 422.
    let other = r#"{"action":"labeled","number":2}"#;
    let r = gw.deliver("gh", other, "future-2").await;
    assert_eq!(r.outcome(), "forwarded");
    let genuine = r#"{"action":"reopened","number":2}"#;
    let r = gw.deliver("gh", genuine, "future-2").await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{}", r.body);
    assert_eq!(up.count(), 4);
    // Provider retries of each (same body, same ID) stay duplicates.
    assert_eq!(
        gw.deliver("gh", genuine, "future-2").await.outcome(),
        "duplicate"
    );
    assert_eq!(up.count(), 4);

    if let Some(r) = redis {
        let ttl: i64 = r.cmd(redis::cmd("PTTL").arg(format!("hookgate:gh:{key}")));
        assert!(
            ttl > 23 * 3600 * 1000,
            "one done key per signed body, got {ttl}"
        );
    }
    gw.stop().await;
}
both_stores!(
    memory_unsigned_ids_neither_replay_nor_poison,
    redis_unsigned_ids_neither_replay_nor_poison,
    unsigned_ids_neither_replay_nor_poison
);

/// An ID the signature covers (Standard Webhooks' `webhook-id`) keeps the usual
/// contract: it is the key, and another body under it is refused with 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_ids_keep_their_key_and_the_422() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&route(
        "sw",
        "standard_webhooks",
        "[\"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\"]",
        &up,
        "",
    ))
    .await;
    let r = gw.deliver("sw", r#"{"n":1}"#, "msg_1").await;
    assert_eq!(r.outcome(), "forwarded");
    assert_eq!(up.received()[0].header("idempotency-key"), Some("msg_1"));
    let r = gw.deliver("sw", r#"{"n":2}"#, "msg_1").await;
    assert_eq!(r.status, 422, "{}", r.body);
    gw.stop().await;
}

/// A provider vector (`shared/providers/vectors.json`) by provider and case.
fn vector(provider: &str, case: &str) -> serde_json::Value {
    crate::vectors::vectors()
        .into_iter()
        .find(|v| v["provider"] == provider && v["case"] == case)
        .unwrap_or_else(|| panic!("no vector {provider} / {case}"))
}

fn vector_headers(v: &serde_json::Value) -> Vec<(String, String)> {
    v["headers"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// Sends a vector's delivery to a one-route gateway whose clock reads `now`.
async fn send_vector_at(
    v: &serde_json::Value,
    now: u64,
    route_extra: &str,
) -> (crate::support::Reply, usize) {
    let up = Upstream::start().await;
    let (cfg, query) =
        crate::vectors::vector_config(v, &up.url("/up")).expect("a supported vector");
    let gw = TestGateway::start_with_clock(
        &format!("{cfg}{route_extra}\n"),
        hookgate::server::Clock::Fixed(now),
    )
    .await;
    let body = v["body"].as_str().unwrap_or_default().as_bytes().to_vec();
    let r = post(&gw.url(&format!("/hook{query}")), &vector_headers(v), body).await;
    let n = up.count();
    gw.stop().await;
    (r, n)
}

/// Discord, SendGrid and PayPal sign a timestamp: it is now held to a window
/// (5 minutes by default, the route's `tolerance` otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_sendgrid_and_paypal_signed_times_have_a_window() {
    for (provider, case) in [
        ("discord", "valid interaction"),
        ("sendgrid", "valid batch"),
        ("paypal", "valid (self-verification)"),
    ] {
        let v = vector(provider, case);
        let signed_at = v["now"].as_u64().expect("now");
        // At its own time: forwarded.
        let (r, n) = send_vector_at(&v, signed_at, "").await;
        assert_eq!((r.status, n), (200, 1), "{provider}: {}", r.body);
        // An hour later, or an hour before: refused, never forwarded.
        for now in [signed_at + 3600, signed_at - 3600] {
            let (r, n) = send_vector_at(&v, now, "").await;
            assert_eq!((r.status, n), (401, 0), "{provider} at {now}: {}", r.body);
            assert_eq!(r.json()["error"], "timestamp outside the tolerance");
        }
        // A route may widen the window.
        let (r, n) = send_vector_at(&v, signed_at + 3600, "tolerance = \"2h\"").await;
        assert_eq!((r.status, n), (200, 1), "{provider}: {}", r.body);
    }
}

/// `prefix` + 12 letters from `@`..`O` + `suffix`, the letters chosen so the whole
/// has CRC-32 `target`: CRC-32 is affine over GF(2), so each letter's 4 free low
/// bits are solved for, as anyone holding one PayPal delivery can.
fn with_crc(prefix: &str, suffix: &str, target: u32) -> String {
    const N: usize = 12;
    let build = |bits: u64| {
        let letters: String = (0..N)
            .map(|i| char::from(0x40 | ((bits >> (4 * i)) & 0xF) as u8))
            .collect();
        format!("{prefix}{letters}{suffix}")
    };
    let base = crc32fast::hash(build(0).as_bytes());
    // Each free bit's effect on the CRC, with the set of bits that produce it.
    let mut basis: Vec<(u32, u64)> = Vec::new();
    for bit in 0..(4 * N) {
        let mut v = crc32fast::hash(build(1 << bit).as_bytes()) ^ base;
        let mut combo = 1u64 << bit;
        for (b, c) in &basis {
            if v ^ b < v {
                v ^= b;
                combo ^= c;
            }
        }
        if v != 0 {
            basis.push((v, combo));
            basis.sort_by_key(|b| std::cmp::Reverse(b.0));
        }
    }
    let mut want = base ^ target;
    let mut bits = 0u64;
    for (b, c) in &basis {
        if want ^ b < want {
            want ^= b;
            bits ^= c;
        }
    }
    assert_eq!(want, 0, "the letters span every CRC");
    let forged = build(bits);
    assert_eq!(crc32fast::hash(forged.as_bytes()), target);
    forged
}

/// PayPal signs `id|time|webhook_id|crc32(body)`: one capture's headers fit any
/// body with the same CRC-32. The gateway refuses a second body under a signed
/// transmission ID it has seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paypal_refuses_a_second_body_under_a_seen_transmission_id() {
    let v = vector("paypal", "valid (self-verification)");
    let up = Upstream::start().await;
    let (cfg, query) = crate::vectors::vector_config(&v, &up.url("/up")).expect("paypal");
    let gw = TestGateway::start_with_clock(
        &cfg,
        hookgate::server::Clock::Fixed(v["now"].as_u64().expect("now")),
    )
    .await;
    let url = gw.url(&format!("/hook{query}"));
    let headers = vector_headers(&v);
    let genuine = v["body"].as_str().expect("body").to_owned();
    let r = post(&url, &headers, genuine.clone().into_bytes()).await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{}", r.body);

    // A forged capture of 99 999.00 under a new event ID, with the genuine CRC-32:
    // its signature verifies, but its transmission ID already carried another body.
    let forged = with_crc(
        r#"{"id":"WH-FORGED-1","event_version":"1.0","create_time":"2025-12-31T23:59:54.000Z","resource_type":"capture","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"42311647XV020574X","status":"COMPLETED","amount":{"value":"99999.00","currency_code":"USD"}},"pad":""#,
        r#""}"#,
        crc32fast::hash(genuine.as_bytes()),
    );
    let r = post(&url, &headers, forged.into_bytes()).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(
        r.json()["error"],
        "transmission id reused with a different body"
    );
    assert_eq!(up.count(), 1, "the forged body must not reach the upstream");

    // The genuine transmission again is still a plain duplicate.
    let r = post(&url, &headers, genuine.into_bytes()).await;
    assert_eq!((r.status, r.outcome()), (200, "duplicate"), "{}", r.body);
    assert_eq!(up.count(), 1);
    gw.stop().await;
}

/// A form field that carries a signature, a signed payload or a verdict, sent twice:
/// the gateway would check one copy while a handler might read the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_signed_form_fields_are_refused() {
    let cases = [
        ("braintree", "valid", "&bt_payload=PHVuc2lnbmVkLz4%3D"),
        ("braintree", "valid", "&bt_signature=other%7Cdeadbeef"),
        (
            "mandrill",
            "valid",
            "&mandrill_events=%5B%7B%22event%22%3A%22hard_bounce%22%2C%22_id%22%3A%22x%22%7D%5D",
        ),
    ];
    for (provider, case, extra) in cases {
        let mut v = vector(provider, case);
        let signed_at = v["now"].as_u64().expect("now");
        // As sent by the provider: forwarded.
        let (r, n) = send_vector_at(&v, signed_at, "").await;
        assert_eq!((r.status, n), (200, 1), "{provider}: {}", r.body);
        // With the field repeated: refused, never forwarded.
        let body = format!("{}{extra}", v["body"].as_str().unwrap_or_default());
        v["body"] = serde_json::Value::String(body);
        let (r, n) = send_vector_at(&v, signed_at, "").await;
        assert_eq!((r.status, n), (401, 0), "{provider} {extra}: {}", r.body);
    }
}

/// Captures leave out every credential the preset knows, wherever it travels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captures_redact_credentials_in_the_query_and_the_body() {
    use std::time::Duration;
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let captures = dir.path().join("captures");
    let cfg = format!(
        "[capture]\ndir = \"{}\"\n{}{}{}",
        captures.display(),
        route("mc", "mailchimp", "[\"mc-token-S3CRET\"]", &up, ""),
        route("notion", "notion", "[]", &up, ""),
        route("figma", "figma", "[\"figma-pass-S3CRET\"]", &up, ""),
    );
    let gw = TestGateway::start(&cfg).await;
    let form = b"type=subscribe&data%5Bemail%5D=a%40b.c".to_vec();
    let r = post(&gw.url("/mc?token=mc-token-S3CRET&x=1"), &[], form).await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    let r = post(
        &gw.url("/notion"),
        &[("content-type".into(), "application/json".into())],
        br#"{"verification_token":"secret_notion_S3CRET"}"#.to_vec(),
    )
    .await;
    assert_eq!(r.outcome(), "handshake", "{}", r.body);
    let r = post(
        &gw.url("/figma"),
        &[],
        br#"{"event_type":"FILE_UPDATE","passcode":"figma-pass-S3CRET","file_key":"k1","timestamp":"2026-01-01T00:00:00Z","webhook_id":"7"}"#.to_vec(),
    )
    .await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    let written = crate::support::eventually(Duration::from_secs(5), || {
        std::fs::read_dir(&captures).map(|d| d.count()).unwrap_or(0) >= 3
    })
    .await;
    assert!(written, "three captures");
    for entry in std::fs::read_dir(&captures).expect("captures") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("read");
        assert!(
            !text.contains("S3CRET"),
            "a credential was captured:\n{text}"
        );
        assert!(text.contains("[redacted]"), "{text}");
    }
    // What is not a credential is kept as received.
    let files = hookgate::replay::collect(std::slice::from_ref(&captures)).expect("files");
    let loaded: Vec<_> = files
        .iter()
        .map(|f| hookgate::replay::Replay::load(f).expect("load"))
        .collect();
    let mc = loaded
        .iter()
        .find(|r| r.path == "/mc")
        .expect("mailchimp capture");
    assert_eq!(mc.query.as_deref(), Some("token=[redacted]&x=1"));
    let figma = loaded
        .iter()
        .find(|r| r.path == "/figma")
        .expect("figma capture");
    assert_eq!(
        figma.body.as_deref(),
        Some(
            r#"{"event_type":"FILE_UPDATE","passcode":"[redacted]","file_key":"k1","timestamp":"2026-01-01T00:00:00Z","webhook_id":"7"}"#
        )
    );
    gw.stop().await;
}

/// Asana and Notion hand their signing secret over in an unauthenticated set-up
/// request: only the first is kept until an operator clears it, never one on a route
/// with a configured secret; the rest are refused (409), logged and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handed_over_secrets_are_kept_once_until_cleared() {
    let up = Upstream::start().await;
    let cfg = format!(
        "{}{}{}",
        route("asana", "asana", "[]", &up, ""),
        route("asana_set", "asana", "[\"configured-secret\"]", &up, ""),
        route("notion", "notion", "[]", &up, ""),
    );
    let gw = TestGateway::start(&cfg).await;
    let handshake = |path: &'static str, secret: &'static str| {
        let url = gw.url(path);
        async move { post(&url, &[("x-hook-secret".into(), secret.into())], Vec::new()).await }
    };
    let held = |route: &'static str| {
        let url = gw.admin_url(&format!("/handshakes/{route}"));
        async move {
            let r = crate::support::send("GET", &url, &[], Vec::new()).await;
            (
                r.status,
                r.json()["secret"].as_str().unwrap_or_default().to_owned(),
            )
        }
    };

    let r = handshake("/asana", "first-secret").await;
    assert_eq!(
        (r.status, r.header("x-hook-secret")),
        (200, Some("first-secret"))
    );
    // Anyone's later set-up request: refused, nothing echoed, the first one kept.
    let r = handshake("/asana", "attacker-secret").await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.header("x-hook-secret"), None);
    assert_eq!(held("asana").await, (200, "first-secret".to_owned()));
    assert_eq!(
        gw.metric("hookgate_handed_secrets_total{route=\"asana\",result=\"refused_already_held\"}")
            .await,
        1.0
    );

    // The operator clears it; the next set-up request hands over a new one.
    let r = crate::support::send(
        "DELETE",
        &gw.admin_url("/handshakes/asana"),
        &[],
        Vec::new(),
    )
    .await;
    assert_eq!((r.status, r.json()["cleared"].as_bool()), (200, Some(true)));
    assert_eq!(handshake("/asana", "new-secret").await.status, 200);
    assert_eq!(held("asana").await, (200, "new-secret".to_owned()));

    // A route with a configured secret never takes one.
    let r = handshake("/asana_set", "attacker-secret").await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(held("asana_set").await.0, 404);
    assert_eq!(
        gw.metric(
            "hookgate_handed_secrets_total{route=\"asana_set\",result=\"refused_route_has_secret\"}"
        )
        .await,
        1.0
    );

    // Notion's verification_token: the same rule.
    let token = |t: &str| format!(r#"{{"verification_token":"{t}"}}"#).into_bytes();
    let url = gw.url("/notion");
    assert_eq!(post(&url, &[], token("secret_first")).await.status, 200);
    assert_eq!(post(&url, &[], token("secret_attacker")).await.status, 409);
    assert_eq!(held("notion").await, (200, "secret_first".to_owned()));
    assert_eq!(up.count(), 0, "handshakes are never forwarded");
    gw.stop().await;
}

/// Second review, 1: Shopify's topic is a header the signature does not cover. A
/// capture of a delivery the route filtered out (`orders/create`), sent again with the
/// topic changed to one the route takes (`orders/paid`) or removed, is a copy of an
/// event already recorded — never forwarded or queued. A delivery whose type cannot
/// be read goes nowhere a filter applies. On the memory store (sync) and on Redis
/// (sync and queue: the queue's records are elsewhere, and it looks at the filtered
/// record first).
async fn filtered_captures_are_not_reusable_under_another_type(
    redis: Option<&crate::support::RedisServer>,
) {
    let up = Upstream::start().await;
    let store = crate::support::store_toml(redis, "");
    let queue = if redis.is_some() {
        route(
            "shopq",
            "shopify",
            "[\"shop-secret\"]",
            &up,
            "events = [\"orders/paid\"]\ndelivery = \"queue\"",
        )
    } else {
        String::new()
    };
    let config = format!(
        "{store}{}{queue}",
        route(
            "shop",
            "shopify",
            "[\"shop-secret\"]",
            &up,
            "events = [\"orders/paid\"]"
        )
    );
    let gw = TestGateway::start(&config).await;
    let routes: &[&str] = if redis.is_some() {
        &["shop", "shopq"]
    } else {
        &["shop"]
    };
    for name in routes {
        let unpaid =
            format!(r#"{{"id":820982911946154508,"route":"{name}","financial_status":"pending"}}"#);
        let signed = gw.sign(name, &unpaid, "sh-cap-1");
        let url = gw.url(&format!("/{name}"));
        let r = post(
            &url,
            &with(signed.clone(), "X-Shopify-Topic", "orders/create"),
            unpaid.clone().into_bytes(),
        )
        .await;
        assert_eq!(
            (r.status, r.outcome()),
            (200, "filtered"),
            "{name}: {}",
            r.body
        );
        let relabelled = post(
            &url,
            &with(signed.clone(), "X-Shopify-Topic", "orders/paid"),
            unpaid.clone().into_bytes(),
        )
        .await;
        assert_eq!(
            relabelled.outcome(),
            "duplicate",
            "{name}: the same signed bytes under another topic: {}",
            relabelled.body
        );
        let mut bare = signed.clone();
        bare.retain(|(n, _)| !n.eq_ignore_ascii_case("X-Shopify-Topic"));
        let untyped = post(&url, &bare, unpaid.into_bytes()).await;
        assert_eq!(untyped.outcome(), "duplicate", "{name}: {}", untyped.body);
        // A fresh delivery without a topic: its type cannot be read, and the route
        // takes only orders/paid.
        let fresh = format!(r#"{{"id":2,"route":"{name}"}}"#);
        let mut bare = gw.sign(name, &fresh, "sh-cap-2");
        bare.retain(|(n, _)| !n.eq_ignore_ascii_case("X-Shopify-Topic"));
        let r = post(&url, &bare, fresh.into_bytes()).await;
        assert_eq!(r.outcome(), "filtered", "{name}: no type: {}", r.body);
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(up.count(), 0, "nothing reached the upstream");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtered_captures_are_not_reusable_under_another_type_on_memory() {
    filtered_captures_are_not_reusable_under_another_type(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtered_captures_are_not_reusable_under_another_type_on_redis() {
    let redis = crate::support::RedisServer::start();
    filtered_captures_are_not_reusable_under_another_type(Some(&redis)).await;
}

/// One request to the admin listener, raw: the status code.
async fn admin_status(gw: &TestGateway, method: &str, path: &str, headers: &[&str]) -> u16 {
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("Connection: close\r\nContent-Length: 0\r\n\r\n");
    let answer = crate::support::raw_http(gw.admin, req.as_bytes()).await;
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Second review, 3: without `admin_token`, a web page could use the admin listener
/// through an operator's browser — a cross-site form POSTing `/reload` or a purge, or a
/// name rebound to it reading `/handshakes/<route>`. Each is refused; the operator's own
/// requests (an IP address or `localhost`, a configured name, the command line's
/// `X-Requested-By`) go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_refuses_cross_site_requests_and_rebound_names() {
    let up = Upstream::start().await;
    let config = format!(
        "[server]\nadmin_hosts = [\"hookgate-admin.internal\"]\n{}",
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.toml");
    std::fs::write(&path, &config).expect("config");
    let gw = TestGateway::start_file(&path).await;
    let own = format!("Host: {}", gw.admin);
    let origin_own = format!("Origin: http://{}", gw.admin);
    let cases: [(&str, &str, Vec<&str>, u16); 10] = [
        // A simple POST, as a cross-site form sends it.
        ("POST", "/reload", vec![own.as_str()], 403),
        (
            "POST",
            "/events/stripe/purge?all_dead=true",
            vec![
                own.as_str(),
                "X-Requested-By: x",
                "Origin: http://evil.example",
            ],
            403,
        ),
        (
            "POST",
            "/reload",
            vec![
                own.as_str(),
                "X-Requested-By: x",
                "Sec-Fetch-Site: cross-site",
            ],
            403,
        ),
        (
            "POST",
            "/reload",
            vec![own.as_str(), "Origin: null", "X-Requested-By: x"],
            403,
        ),
        // DNS rebinding: the page's own name, resolving to the listener.
        (
            "GET",
            "/handshakes/stripe",
            vec!["Host: evil.example:9090"],
            421,
        ),
        ("GET", "/metrics", vec!["Host: evil.example"], 421),
        // The operator.
        (
            "POST",
            "/reload",
            vec![own.as_str(), "X-Requested-By: me"],
            200,
        ),
        (
            "POST",
            "/reload",
            vec![own.as_str(), "X-Requested-By: me", origin_own.as_str()],
            200,
        ),
        ("GET", "/metrics", vec!["Host: localhost:9090"], 200),
        (
            "GET",
            "/healthz",
            vec!["Host: hookgate-admin.internal:9090"],
            200,
        ),
    ];
    for (method, path, headers, want) in cases {
        assert_eq!(
            admin_status(&gw, method, path, &headers).await,
            want,
            "{method} {path} {headers:?}"
        );
    }
    gw.stop().await;
}

/// Second review, 4: silent connections to the admin listener were never closed and
/// needed no token, so they could use up the process's file descriptors. They are
/// closed after `header_read_timeout`, and at most 64 are held at once (16 from one
/// address; a few more for one probe each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_admin_connections_are_bounded_and_closed() {
    use tokio::io::AsyncReadExt as _;
    let up = Upstream::start().await;
    let config = format!(
        "[server]\nheader_read_timeout = \"1s\"\n{}",
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let gw = TestGateway::start(&config).await;
    let mut silent = Vec::new();
    for _ in 0..64 {
        silent.push(
            tokio::net::TcpStream::connect(gw.admin)
                .await
                .expect("connect"),
        );
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // One more is answered 503 at once.
    let over = admin_status(&gw, "GET", "/healthz", &[&format!("Host: {}", gw.admin)]).await;
    assert_eq!(over, 503, "past the bound");
    // The silent ones are closed by the listener.
    for s in &mut silent {
        let mut buf = [0u8; 64];
        let closed = tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut buf))
            .await
            .is_ok();
        assert!(closed, "a silent admin connection is closed");
    }
    drop(silent);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        admin_status(&gw, "GET", "/healthz", &[&format!("Host: {}", gw.admin)]).await,
        200
    );
    gw.stop().await;
}

/// One request to the admin listener from `from` (another client address): the
/// status code.
async fn admin_status_from(from: [u8; 4], admin: std::net::SocketAddr, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = connect_from(from, admin).await;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return 0;
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        s.read_to_end(&mut answer),
    )
    .await;
    String::from_utf8_lossy(&answer)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Third review, 3: the admin listener's 64 connections were shared by every client
/// and taken before any token check: 64 silent connections from one address made
/// `/healthz` and `/readyz` answer 503 (40 of 40 probes), which makes a liveness probe
/// restart the pod. One address holds at most 16, and past the bound a connection is
/// still read for one probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_admin_connections_from_one_address_never_blind_the_probes() {
    let up = Upstream::start().await;
    let config = format!(
        "[server]\nheader_read_timeout = \"30s\"\n{}",
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let gw = TestGateway::start(&config).await;
    let mut silent = Vec::new();
    for _ in 0..64 {
        silent.push(connect_from([127, 0, 0, 3], gw.admin).await);
    }
    let mut answered = 0;
    for i in 0..40 {
        let path = if i % 2 == 0 { "/healthz" } else { "/readyz" };
        if admin_status_from([127, 0, 0, 4], gw.admin, path).await == 200 {
            answered += 1;
        }
    }
    assert_eq!(answered, 40, "probes from another address");
    // Three addresses more fill the listener (16 each): probes are still answered,
    // anything else is refused until a connection frees.
    for from in 5..8 {
        for _ in 0..16 {
            silent.push(connect_from([127, 0, 0, from], gw.admin).await);
        }
    }
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            admin_status_from([127, 0, 0, 9], gw.admin, path).await,
            200,
            "{path}"
        );
    }
    assert_eq!(
        admin_status_from([127, 0, 0, 9], gw.admin, "/overview").await,
        503,
        "past the bound, probes only"
    );
    drop(silent);
    gw.stop().await;
}

/// Third review, 3: open `/deliveries/stream` readers held admin connections
/// indefinitely. Live streams have a bound of their own (16; beyond, 503), and a
/// stream that sends no record for ten minutes ends
/// (`admin::deliveries::tests::a_quiet_live_stream_keeps_alive_then_ends_and_frees_its_slot`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_streams_have_a_bound_of_their_own() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let up = Upstream::start().await;
    let gw = TestGateway::start(&route("stripe", "stripe", "[\"whsec_x\"]", &up, "")).await;
    let open_stream = async |from: [u8; 4]| {
        let mut s = connect_from(from, gw.admin).await;
        let req = format!(
            "GET /deliveries/stream HTTP/1.1\r\nHost: {}\r\n\r\n",
            gw.admin
        );
        s.write_all(req.as_bytes()).await.expect("write");
        let mut buf = vec![0u8; 1024];
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), s.read(&mut buf))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(0);
        (s, String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    let mut streams = Vec::new();
    for i in 0..16u8 {
        let (s, head) = open_stream([127, 0, 0, 10 + i / 8]).await;
        assert!(head.starts_with("HTTP/1.1 200"), "stream {i}: {head:?}");
        streams.push(s);
    }
    let (_s, head) = open_stream([127, 0, 0, 12]).await;
    assert!(head.starts_with("HTTP/1.1 503"), "the 17th: {head:?}");
    assert!(head.contains("live streams are open already"), "{head:?}");
    assert_eq!(
        admin_status_from([127, 0, 0, 12], gw.admin, "/healthz").await,
        200
    );
    // A closed stream frees its place.
    streams.pop();
    let mut reopened = false;
    for _ in 0..100 {
        let (s, head) = open_stream([127, 0, 0, 12]).await;
        if head.starts_with("HTTP/1.1 200") {
            reopened = true;
            streams.push(s);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(reopened, "a stream opens again once one closed");
    drop(streams);
    gw.stop().await;
}

/// A TCP connection to `addr` from a given loopback address (another client).
async fn connect_from(from: [u8; 4], addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(std::net::SocketAddr::from((from, 0)))
        .expect("bind a loopback address");
    socket.connect(addr).await.expect("connect")
}

/// Reads what arrives on a connection within two seconds.
async fn answer_on(stream: &mut tokio::net::TcpStream) -> String {
    answer_within(stream, std::time::Duration::from_secs(2)).await
}

/// Second review, 5: silent connections from one address were bounded only by
/// `max_connections` (and the process's file descriptors): ~1 100 from one address
/// blocked everyone. One address now holds at most `max_connections_per_client`;
/// another address is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_share_of_connections() {
    use tokio::io::AsyncWriteExt as _;
    let up = Upstream::start().await;
    let config = format!(
        "[server]\nmax_connections_per_client = 10\nheader_read_timeout = \"10s\"\n{}",
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let gw = TestGateway::start(&config).await;
    let addr: std::net::SocketAddr = gw
        .base_url()
        .trim_start_matches("http://")
        .parse()
        .expect("address");
    let mut silent = Vec::new();
    for _ in 0..10 {
        silent.push(connect_from([127, 0, 0, 1], addr).await);
    }
    let mut over = connect_from([127, 0, 0, 1], addr).await;
    let answer = answer_on(&mut over).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "the 11th: {answer:?}");
    let mut other = connect_from([127, 0, 0, 2], addr).await;
    other
        .write_all(
            b"POST /stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        )
        .await
        .expect("write");
    let answer = answer_on(&mut other).await;
    assert!(
        answer.starts_with("HTTP/1.1 401"),
        "another address is served: {answer:?}"
    );
    drop(silent);
    gw.stop().await;
}

/// Second review, 6: bodies being received were bounded per connection only
/// (`max_connections × max_body`): clients holding large bodies open took the
/// process's memory. Past `max_body_bytes_in_flight`, over every client, a body's next
/// bytes are answered 503 with `Retry-After`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_bytes_being_received_are_bounded_over_every_client() {
    use tokio::io::AsyncWriteExt as _;
    let up = Upstream::start().await;
    let config = format!(
        "[server]\nmax_body = \"1MiB\"\nmax_body_bytes_in_flight = \"2MiB\"\nbody_timeout = \"10s\"\n{}",
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let gw = TestGateway::start(&config).await;
    let addr: std::net::SocketAddr = gw
        .base_url()
        .trim_start_matches("http://")
        .parse()
        .expect("address");
    let head = b"POST /stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n";
    // Two clients each send 900 KiB of a 1 MiB body and hold it: 1.8 MiB held.
    let mut held = Vec::new();
    for from in [[127, 0, 0, 3], [127, 0, 0, 4]] {
        let mut s = connect_from(from, addr).await;
        s.write_all(head).await.expect("head");
        s.write_all(&[b'x'; 900 * 1024]).await.expect("some body");
        held.push(s);
    }
    // A third client's bytes find the budget held: 503, Retry-After.
    let mut third = connect_from([127, 0, 0, 5], addr).await;
    third.write_all(head).await.expect("head");
    let mut answer = String::new();
    for _ in 0..64 {
        // Its bytes go out until the gateway answers (and may close: a failed
        // write then is the answer arriving).
        if third.write_all(&[b'x'; 16 * 1024]).await.is_err() {
            break;
        }
        answer = answer_within(&mut third, std::time::Duration::from_millis(50)).await;
        if !answer.is_empty() {
            break;
        }
    }
    if answer.is_empty() {
        answer = answer_on(&mut third).await;
    }
    assert!(
        answer.starts_with("HTTP/1.1 503"),
        "past the bound: {answer:?}"
    );
    assert!(
        answer.to_ascii_lowercase().contains("retry-after"),
        "{answer:?}"
    );
    // Once they are gone, bodies are received again.
    drop(held);
    let later = async || {
        let mut later = connect_from([127, 0, 0, 6], addr).await;
        later
            .write_all(
                b"POST /stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
            )
            .await
            .expect("write");
        answer_on(&mut later).await
    };
    let mut answer = String::new();
    for _ in 0..50 {
        answer = later().await;
        if answer.starts_with("HTTP/1.1 401") {
            break;
        }
    }
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer:?}");
    gw.stop().await;
}

/// Reads what arrives on a connection within `limit`.
async fn answer_within(stream: &mut tokio::net::TcpStream, limit: std::time::Duration) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut buf = vec![0u8; 2048];
    let n = tokio::time::timeout(limit, stream.read(&mut buf))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The resident memory of a process, in bytes.
fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// A signed delivery sent from `from` (another client address) to the real binary.
async fn deliver_from(from: [u8; 4], url: &str, headers: &[(String, String)], body: &str) -> u16 {
    let client = reqwest::Client::builder()
        .no_proxy()
        .local_address(std::net::IpAddr::from(from))
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("client");
    let mut req = client.post(url).body(body.to_owned());
    for (n, v) in headers {
        req = req.header(n.as_str(), v.as_str());
    }
    req.send().await.map_or(0, |r| r.status().as_u16())
}

/// Third review, 1: the body budget was reserved from the declared `Content-Length`,
/// so 64 request heads from one address (about 6 KB sent), each declaring 1 MiB, held
/// the whole 64 MiB and every other client's delivery got 503 for `body_timeout`.
/// Bytes are held as they arrive, one address holds at most its share (a sixteenth),
/// and small bodies keep a reserve: with one address, then four more, holding all they
/// can, signed deliveries from another address are forwarded, and the process's memory
/// stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_spend_the_body_budget_of_every_client() {
    use crate::process::{Gateway, signed, write_config};
    use tokio::io::AsyncWriteExt as _;
    let up = Upstream::start().await;
    let port = crate::support::free_port();
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nbody_timeout = \"60s\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n",
            up.url("/up")
        ),
    );
    let gw = Gateway::spawn(&cfg, port);
    let url = gw.url("/s");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut sent = 0;
    let mut deliver = async |n: usize| {
        for _ in 0..n {
            sent += 1;
            let body = crate::support::stripe_body(&format!("evt_budget_{sent}"));
            let status = deliver_from([127, 0, 0, 9], &url, &signed(&cfg, &body), &body).await;
            assert_eq!(status, 200, "delivery {sent} from another address");
        }
    };
    deliver(2).await;
    let before = rss(gw.child.id());

    // 64 heads declaring 1 MiB from one address, each followed by 200 KiB of its body.
    let head = b"POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n";
    let mut open = Vec::new();
    let mut hold = async |from: [u8; 4]| {
        for _ in 0..64 {
            let mut s = connect_from(from, addr).await;
            let _ = s.write_all(head).await;
            let _ = s.write_all(&[b'x'; 200 * 1024]).await;
            open.push(s);
        }
    };
    hold([127, 0, 0, 3]).await;
    deliver(10).await;
    // Four addresses more, each holding its share.
    for from in 4..8 {
        hold([127, 0, 0, from]).await;
    }
    deliver(10).await;
    let after = rss(gw.child.id());
    assert!(
        up.count() == 22,
        "every delivery from the other address was forwarded: {}",
        up.count()
    );
    let grown = after.saturating_sub(before);
    eprintln!(
        "RSS {} MiB before, {} MiB with 320 large bodies open from 5 addresses",
        before >> 20,
        after >> 20
    );
    assert!(
        grown < 96 << 20,
        "memory is bounded by the shares held: grew {} MiB",
        grown >> 20
    );
    drop(open);
}

/// Opens `n` connections from `from`, sends one signed delivery on each (keep-alive,
/// with `X-Forwarded-For: 198.51.100.x` naming a client behind a proxy), and returns
/// the status each was answered (0: refused before a request could be sent).
async fn deliveries_on_open_connections(gw: &TestGateway, from: [u8; 4], n: usize) -> Vec<u16> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let addr: std::net::SocketAddr = gw
        .base_url()
        .trim_start_matches("http://")
        .parse()
        .expect("address");
    let mut open = Vec::new();
    for _ in 0..n {
        open.push(connect_from(from, addr).await);
    }
    let mut statuses = Vec::new();
    for (i, s) in open.iter_mut().enumerate() {
        let id = format!("evt_proxied_{}_{i}", from[3]);
        let body = crate::support::stripe_body(&id);
        let mut req = format!(
            "POST /stripe HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nX-Forwarded-For: 198.51.100.{}\r\n",
            body.len(),
            i % 250
        );
        for (name, value) in gw.sign("stripe", &body, &id) {
            req.push_str(&format!("{name}: {value}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(&body);
        if s.write_all(req.as_bytes()).await.is_err() {
            statuses.push(0);
            continue;
        }
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            match tokio::time::timeout(std::time::Duration::from_secs(10), s.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        statuses.push(
            String::from_utf8_lossy(&answer)
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
        );
    }
    // Every connection stays open until all were answered.
    drop(open);
    statuses
}

/// Third review, 9: behind `trusted_proxies` every connection comes from the proxy's
/// addresses, so `max_connections_per_client` (256) refused a busy ingress with 503.
/// Connections from a trusted proxy are bounded by `max_connections` only, and the
/// per-client limits count the client the proxy names; an untrusted address is still
/// bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_is_bounded_by_max_connections_not_by_one_clients_share() {
    let up = Upstream::start().await;
    let config = format!(
        "[server]\ntrusted_proxies = [\"127.0.0.20/32\"]\nheader_read_timeout = \"60s\"\nidle_timeout = \"60s\"\n{}",
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let gw = TestGateway::start(&config).await;
    let proxied = deliveries_on_open_connections(&gw, [127, 0, 0, 20], 300).await;
    let ok = proxied.iter().filter(|s| **s == 200).count();
    assert_eq!(ok, 300, "every delivery through the proxy: {proxied:?}");
    assert_eq!(up.count(), 300);
    let direct = deliveries_on_open_connections(&gw, [127, 0, 0, 21], 300).await;
    let ok = direct.iter().filter(|s| **s == 200).count();
    // Past its share a connection is answered 503 and closed at once (the request
    // sent on it may then find it reset).
    let refused = direct.iter().filter(|s| matches!(**s, 503 | 0)).count();
    assert_eq!(
        (ok, refused),
        (256, 44),
        "an untrusted address holds max_connections_per_client: {direct:?}"
    );
    gw.stop().await;
}

/// The capture files in `dir`: (size, mode).
fn capture_files(dir: &std::path::Path) -> Vec<(u64, u32)> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| (m.len(), m.permissions().mode() & 0o777))
                .collect()
        })
        .unwrap_or_default()
}

/// Second review, 7 (and 9 for captures): bodies of refused requests were captured,
/// JSON-escaped up to six times their size and bounded only by a file count: 40 MiB
/// sent became 240 MiB on disk. Refused requests are captured only when asked; files
/// are bounded in bytes, hold a body of control characters as base64, and are readable
/// by their owner only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captures_of_refused_requests_cannot_fill_the_disk() {
    use std::os::unix::fs::PermissionsExt as _;
    let up = Upstream::start().await;
    let junk = vec![1u8; 100 * 1024];
    let send_junk = |gw: &TestGateway| {
        let (url, body) = (gw.url("/stripe"), junk.clone());
        async move {
            let h = vec![("Stripe-Signature".to_owned(), "t=1,v1=00".to_owned())];
            post(&url, &h, body).await.status
        }
    };
    // By default: nothing of a refused request is written.
    let dir = tempfile::tempdir().expect("dir");
    let captures = dir.path().join("captures");
    let config = format!(
        "[capture]\ndir = \"{}\"\n{}",
        captures.display(),
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let gw = TestGateway::start(&config).await;
    for _ in 0..5 {
        assert_eq!(send_junk(&gw).await, 401);
    }
    let body = r#"{"id":"evt_cap"}"#;
    assert_eq!(
        gw.deliver("stripe", body, "evt_cap").await.outcome(),
        "forwarded"
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let files = capture_files(&captures);
    assert_eq!(files.len(), 1, "only the verified delivery: {files:?}");
    assert_eq!(files[0].1, 0o600, "owner only");
    let dir_mode = std::fs::metadata(&captures)
        .expect("dir")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    gw.stop().await;

    // Asked for: captured, each compactly, all within max_bytes.
    let dir = tempfile::tempdir().expect("dir");
    let captures = dir.path().join("captures");
    let config = format!(
        "[capture]\ndir = \"{}\"\nrefused = true\nmax_bytes = \"400KiB\"\n{}",
        captures.display(),
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let gw = TestGateway::start(&config).await;
    for _ in 0..20 {
        assert_eq!(send_junk(&gw).await, 401);
    }
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    let files = capture_files(&captures);
    let total: u64 = files.iter().map(|(n, _)| n).sum();
    assert!(!files.is_empty(), "refused requests captured when asked");
    assert!(
        files.iter().all(|(n, _)| *n < 2 * 100 * 1024),
        "a body of control characters is not escaped six-fold: {files:?}"
    );
    assert!(
        total <= 400 * 1024,
        "{total} bytes past max_bytes: {files:?}"
    );
    gw.stop().await;
}

/// Second review, 8: below `min_free_space` the disk store refused copies of events it
/// held like new events, so with `on_error = "forward"` a replay of an already
/// forwarded delivery was forwarded again. A copy is answered from what the store
/// holds; only new events are refused (and, with `on_error = "forward"`, forwarded
/// without a claim, as the operator chose).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_the_reserve_copies_are_answered_from_what_the_store_holds() {
    let Some(disk) = crate::queue::SmallDisk::mount("16m") else {
        eprintln!("SKIPPED: mounting a small tmpfs needs root; this test runs in CI");
        return;
    };
    let up = Upstream::start().await;
    let config = format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\nmin_free_space = \"4MiB\"\n{}{}",
        disk.path().join("hookgate.db").display(),
        route(
            "stripe",
            "stripe",
            "[\"whsec_x\"]",
            &up,
            "on_error = \"forward\""
        ),
        route(
            "stripeq",
            "stripe",
            "[\"whsec_x\"]",
            &up,
            "on_error = \"forward\"\ndelivery = \"queue\""
        ),
    );
    let gw = TestGateway::start(&config).await;
    let held = r#"{"id":"evt_held"}"#;
    let queued = r#"{"id":"evt_held_q"}"#;
    assert_eq!(gw.deliver("stripe", held, "x").await.outcome(), "forwarded");
    assert_eq!(gw.deliver("stripeq", queued, "x").await.outcome(), "queued");
    assert!(
        crate::support::eventually(std::time::Duration::from_secs(5), || up
            .effects_for("evt_held_q")
            == 1)
        .await
    );
    // Another process takes the space: 1 MiB left, below the 4 MiB reserve.
    let filler = crate::queue::fill_to_the_last_byte(disk.path());
    let len = std::fs::metadata(&filler).expect("filler").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .and_then(|f| f.set_len(len.saturating_sub(1 << 20)))
        .expect("free 1 MiB");
    for (name, body) in [("stripe", held), ("stripeq", queued)] {
        let r = gw.deliver(name, body, "x").await;
        assert_eq!(
            (r.status, r.outcome()),
            (200, "duplicate"),
            "{name}: a copy below the reserve: {}",
            r.body
        );
    }
    // A new event is refused by the store (and forwarded without a claim, as chosen).
    let r = gw.deliver("stripe", r#"{"id":"evt_new"}"#, "x").await;
    assert_eq!(r.outcome(), "forwarded_unclaimed", "{}", r.body);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(up.count_for("evt_held"), 1, "never forwarded again");
    assert_eq!(up.count_for("evt_held_q"), 1, "never forwarded again");
    drop(filler);
    gw.stop().await;
}

/// Second review, 9: the disk store's file (queued events' headers and bodies, e.g.
/// Postmark's Basic credentials) and its folder were created 0644 and 0755. They are
/// created 0600 and 0700, and an existing file is restricted at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_store_file_and_folder_are_their_owners_only() {
    use std::os::unix::fs::PermissionsExt as _;
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let folder = dir.path().join("data");
    let file = folder.join("hookgate.db");
    let config = format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\n{}",
        file.display(),
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    let gw = TestGateway::start(&config).await;
    assert_eq!(mode(&folder), 0o700, "folder");
    assert_eq!(mode(&file), 0o600, "file");
    gw.stop().await;
    // A file left readable by an earlier version is restricted when it is opened.
    let old = dir.path().join("old.db");
    drop(hookgate::store::DiskStore::open(&old).expect("open"));
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut reopened = None;
    for _ in 0..50 {
        // The first handle's writer lets go of the file as it stops.
        if let Ok(s) = hookgate::store::DiskStore::open(&old) {
            reopened = Some(s);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(reopened.is_some(), "reopened");
    assert_eq!(mode(&old), 0o600, "restricted when opened");
}

/// A route name sent percent-encoded (as the command line encodes every character but
/// letters and digits): its handed-over secret is read and cleared under the encoded
/// name, each endpoint decoding it the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handed_over_secrets_are_found_under_an_encoded_route_name() {
    let up = Upstream::start().await;
    let cfg = format!(
        "[[routes]]\nname = \"asana-hooks.v1\"\npath = \"/asana\"\nprovider = \"asana\"\nsecrets = []\nupstream = \"{}\"\n",
        up.url("/asana")
    );
    let gw = TestGateway::start(&cfg).await;
    let url = gw.url("/asana");
    let r = post(
        &url,
        &[("x-hook-secret".into(), "first-secret".into())],
        Vec::new(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);

    let admin = gw.admin_url("/handshakes/asana%2Dhooks%2Ev1");
    let r = crate::support::send("GET", &admin, &[], Vec::new()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["route"].as_str(), Some("asana-hooks.v1"));
    assert_eq!(r.json()["secret"].as_str(), Some("first-secret"));
    // The name as sent, undecoded, is no route's.
    let raw = gw.admin_url("/handshakes/asana%252Dhooks%2Ev1");
    assert_eq!(
        crate::support::send("GET", &raw, &[], Vec::new())
            .await
            .status,
        404
    );

    let r = crate::support::send("DELETE", &admin, &[], Vec::new()).await;
    assert_eq!((r.status, r.json()["cleared"].as_bool()), (200, Some(true)));
    let r = crate::support::send("GET", &admin, &[], Vec::new()).await;
    assert_eq!(r.status, 404, "{}", r.body);
    gw.stop().await;
}
