//! Attacks on what each provider signs, as the reviews of hookgate found them
//! (docs/security.md, "Threats found by review"): windows on signed time only, event
//! IDs the signature does not cover, PayPal's CRC-32, repeated signed form fields,
//! secrets handed over in a set-up request, and a filtered delivery re-sent under
//! another type. Each test sends the attack as real HTTP to a real gateway and checks
//! what the gateway answers and what the upstream saw.

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
    crate::providers::vectors::vectors()
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
        crate::providers::vectors::vector_config(v, &up.url("/up")).expect("a supported vector");
    let gw = TestGateway::start_with_clock(
        &format!("{cfg}{route_extra}\n"),
        hookgate::time::Clock::Fixed(now),
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
    let (cfg, query) =
        crate::providers::vectors::vector_config(&v, &up.url("/up")).expect("paypal");
    let gw = TestGateway::start_with_clock(
        &cfg,
        hookgate::time::Clock::Fixed(v["now"].as_u64().expect("now")),
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
