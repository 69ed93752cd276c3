//! Resource limits and abuse: each limit gives its documented answer, and valid
//! deliveries keep passing while one route is flooded (bounded in time, loopback).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support::{TestGateway, Upstream, post, raw_http, stripe_body, stripe_config};

fn two_routes(up: &Upstream, server: &str, route_extra: &str) -> String {
    format!(
        "[server]\n{server}\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n{route_extra}\n[[routes]]\nname = \"github\"\npath = \"/webhooks/github\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\nupstream = \"{}\"\n",
        up.url("/stripe"),
        up.url("/github")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_or_too_large_headers_get_431() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&two_routes(
        &up,
        "max_headers = 10\nmax_header_bytes = \"8KiB\"",
        "",
    ))
    .await;
    let mut many =
        String::from("POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n");
    for i in 0..20 {
        many.push_str(&format!("x-h{i}: v\r\n"));
    }
    many.push_str("\r\n");
    let answer = raw_http(gw.addr, many.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    let big = format!(
        "POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\nx-big: {}\r\ncontent-length: 0\r\n\r\n",
        "a".repeat(10_000)
    );
    let answer = raw_http(gw.addr, big.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_431"), "x")
            .await
            .outcome(),
        "forwarded"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_beyond_max_in_flight_get_503_with_retry_after() {
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(600));
    let gw = Arc::new(TestGateway::start(&two_routes(&up, "max_in_flight = 2", "")).await);
    let mut tasks = Vec::new();
    for i in 0..3 {
        let gw = gw.clone();
        tasks.push(tokio::spawn(async move {
            gw.deliver("stripe", &stripe_body(&format!("evt_busy_{i}")), "x")
                .await
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        let r = t.await.expect("task");
        if r.status == 503 {
            assert_eq!(r.header("retry-after"), Some("5"));
        }
        outcomes.push(r.outcome().to_owned());
    }
    assert_eq!(
        outcomes.iter().filter(|o| *o == "forwarded").count(),
        2,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| *o == "overloaded").count(),
        1,
        "{outcomes:?}"
    );
    // Nothing was queued: the refused event was never claimed, so its retry goes through.
    up.set_delay(Duration::ZERO);
    let refused = (0..3)
        .find(|i| up.count_for(&format!("evt_busy_{i}")) == 0)
        .expect("one refused");
    assert_eq!(
        gw.deliver("stripe", &stripe_body(&format!("evt_busy_{refused}")), "x")
            .await
            .outcome(),
        "forwarded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_max_connections_are_answered_503_and_closed() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&two_routes(&up, "max_connections = 2", "")).await;
    let _a = tokio::net::TcpStream::connect(gw.addr).await.expect("a");
    let _b = tokio::net::TcpStream::connect(gw.addr).await.expect("b");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut c = tokio::net::TcpStream::connect(gw.addr).await.expect("c");
    let mut buf = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .expect("answer")
        .expect("read");
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains("retry-after"),
        "{answer}"
    );
    drop((_a, _b));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_conn"), "x")
            .await
            .outcome(),
        "forwarded"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_failure_budget_answers_429_and_spares_other_routes() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&two_routes(&up, "", "failure_budget = 5")).await;
    let body = stripe_body("evt_budget");
    let forged = vec![("stripe-signature".to_string(), "t=1,v1=00".to_string())];
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(
            post(
                &gw.url("/webhooks/stripe"),
                &forged,
                body.clone().into_bytes(),
            )
            .await
            .status,
        );
    }
    // Five failures spend the budget (it refills at 5/s meanwhile, so a few more 401s
    // may slip in); after that, 429 without verifying.
    assert_eq!(statuses[..5], [401; 5], "{statuses:?}");
    assert!(
        statuses.iter().all(|s| matches!(s, 401 | 429)),
        "{statuses:?}"
    );
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert!(limited >= 3, "{statuses:?}");
    // Another route is not affected.
    assert_eq!(
        gw.deliver("github", r#"{"zen":"ok"}"#, "gh-b-1")
            .await
            .outcome(),
        "forwarded"
    );
    assert_eq!(
        gw.metric("hookgate_deliveries_total{route=\"stripe\",outcome=\"rate_limited\"}")
            .await,
        limited as f64
    );
    // The budget refills (5 per second): the provider's retry of a valid delivery passes.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        gw.deliver("stripe", &body, "x").await.outcome(),
        "forwarded"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_deliveries_pass_while_a_route_is_flooded() {
    let up = Upstream::start().await;
    let cfg = two_routes(&up, "max_body = \"4KiB\"\nbody_timeout = \"500ms\"", "");
    let gw = Arc::new(TestGateway::start(&cfg).await);
    let stop_at = Instant::now() + Duration::from_secs(3);
    let mut flood = Vec::new();
    // Slow bodies that never finish.
    for _ in 0..20 {
        let addr = gw.addr;
        flood.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await {
                    let _ = s.write_all(b"POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n{\"id\"").await;
                    let mut buf = [0u8; 64];
                    let _ = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await;
                }
            }
        }));
    }
    // Oversize bodies and forged signatures.
    for kind in 0..2 {
        let url = gw.url("/webhooks/stripe");
        flood.push(tokio::spawn(async move {
            let big = vec![b'x'; 64 * 1024];
            let forged = vec![("stripe-signature".to_string(), "t=1,v1=00".to_string())];
            while Instant::now() < stop_at {
                let body = if kind == 0 {
                    big.clone()
                } else {
                    b"{\"id\":\"evt_forged\"}".to_vec()
                };
                let r = post(&url, &forged, body).await;
                assert!(matches!(r.status, 413 | 401 | 429), "{}", r.status);
            }
        }));
    }
    // Meanwhile, valid deliveries on both routes.
    let mut valid = 0;
    let mut i = 0;
    while Instant::now() < stop_at {
        i += 1;
        assert_eq!(
            // Distinct events have distinct bodies: GitHub's delivery ID is not
            // signed, so the same body under a new ID would be a replay.
            gw.deliver(
                "github",
                &format!(r#"{{"zen":"flood-{i}"}}"#),
                &format!("gh-flood-{i}")
            )
            .await
            .outcome(),
            "forwarded"
        );
        valid += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for f in flood {
        let _ = f.await;
    }
    assert!(
        valid >= 10,
        "only {valid} valid deliveries passed during the flood"
    );
    assert_eq!(
        up.count_for("evt_forged"),
        0,
        "nothing forged was forwarded"
    );
    // After the flood the flooded route serves valid deliveries again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_after_flood"), "x")
            .await
            .outcome(),
        "forwarded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_signature_on_another_path_query_or_body_is_never_forwarded() {
    let up = Upstream::start().await;
    let cfg = format!(
        "{}\n[[routes]]\nname = \"twilio\"\npath = \"/twilio\"\nprovider = \"twilio\"\nsecrets = [\"tw-token\"]\npublic_url = \"https://hooks.example/twilio\"\nupstream = \"{}\"\n",
        stripe_config(&up, "", ""),
        up.url("/tw")
    );
    let gw = TestGateway::start(&cfg).await;
    // A Stripe signature sent to the Twilio route.
    let body = stripe_body("evt_path");
    let h = gw.sign("stripe", &body, "x");
    assert_eq!(
        post(&gw.url("/twilio"), &h, body.clone().into_bytes())
            .await
            .status,
        401
    );
    // Twilio signs the URL: the same form body with another query is refused.
    let form = "From=%2B15551234567&Body=hi";
    let mut h = gw.sign("twilio", form, "tw-1");
    h.push((
        "content-type".into(),
        "application/x-www-form-urlencoded".into(),
    ));
    assert_eq!(
        post(
            &gw.url("/twilio?tenant=other"),
            &h,
            form.as_bytes().to_vec()
        )
        .await
        .status,
        401
    );
    assert_eq!(
        post(
            &gw.url("/twilio"),
            &h,
            b"From=%2B15550000000&Body=hi".to_vec()
        )
        .await
        .status,
        401
    );
    assert_eq!(
        post(&gw.url("/twilio"), &h, form.as_bytes().to_vec())
            .await
            .outcome(),
        "forwarded"
    );
    // A duplicated signature header is refused.
    let mut h = gw.sign("stripe", &body, "x");
    h.push(h[0].clone());
    assert_eq!(
        post(&gw.url("/webhooks/stripe"), &h, body.into_bytes())
            .await
            .status,
        401
    );
    assert_eq!(up.count(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_request_timeout_gets_503_and_its_forward_still_settles() {
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(800));
    let gw = TestGateway::start(&two_routes(
        &up,
        "request_timeout = \"300ms\"",
        "upstream_timeout = \"2s\"",
    ))
    .await;
    let body = stripe_body("evt_deadline");
    let r = gw.deliver("stripe", &body, "x").await;
    assert_eq!((r.status, r.outcome()), (503, "request_timeout"));
    assert_eq!(r.header("retry-after"), Some("5"));
    // The forward went on in its own task and the upstream answered 2xx: the provider's
    // retry is a duplicate, not a second effect.
    tokio::time::sleep(Duration::from_millis(900)).await;
    up.set_delay(Duration::ZERO);
    assert_eq!(
        gw.deliver("stripe", &body, "x").await.outcome(),
        "duplicate"
    );
    assert_eq!(up.count_for("evt_deadline"), 1);
    gw.stop().await;
}
