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

/// POSTs from a given loopback address (127.0.0.2, …): another client to the gateway.
async fn post_from(
    local: &str,
    url: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
) -> crate::support::Reply {
    let client = reqwest::Client::builder()
        .no_proxy()
        .local_address(local.parse::<std::net::IpAddr>().expect("address"))
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let mut req = client.post(url).body(body);
    for (n, v) in headers {
        req = req.header(n.as_str(), v.as_str());
    }
    let resp = req.send().await.expect("request to the gateway");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.unwrap_or_default();
    crate::support::Reply {
        status,
        headers,
        body,
    }
}

/// A Discord route (Ed25519: verification costs tens of microseconds) beside Stripe.
fn costly_route(up: &Upstream, server: &str, route_extra: &str) -> String {
    let key = hookgate::sign::PrivateKey::generate();
    format!(
        "[server]\n{server}\n[[routes]]\nname = \"discord\"\npath = \"/webhooks/discord\"\nprovider = \"discord\"\nsecrets = [\"{}\"]\nupstream = \"{}\"\n{route_extra}\n",
        key.public_hex(),
        up.url("/discord")
    )
}

fn forged_discord() -> Vec<(String, String)> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    vec![
        ("x-signature-ed25519".to_string(), "00".repeat(64)),
        ("x-signature-timestamp".to_string(), now.to_string()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_failure_budget_answers_429_to_that_client_only() {
    let up = Upstream::start().await;
    // A small budget, so that its refill (2/s) cannot keep up even on a machine slow
    // enough to take a second over these requests.
    let gw = TestGateway::start(&costly_route(&up, "", "failure_budget = 2")).await;
    let url = gw.url("/webhooks/discord");
    let body = br#"{"type":2,"id":"1"}"#.to_vec();
    let mut statuses = Vec::new();
    for _ in 0..12 {
        statuses.push(
            post_from("127.0.0.2", &url, &forged_discord(), body.clone())
                .await
                .status,
        );
    }
    // Two failures spend the budget (it refills at 2/s meanwhile, so a few more 401s
    // may slip in); after that, 429 without verifying.
    assert_eq!(statuses[..2], [401; 2], "{statuses:?}");
    assert!(
        statuses.iter().all(|s| matches!(s, 401 | 429)),
        "{statuses:?}"
    );
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert!(limited >= 3, "{statuses:?}");
    // Another client on the same route is verified as usual.
    let other = post_from("127.0.0.3", &url, &forged_discord(), body.clone()).await;
    assert_eq!((other.status, other.outcome()), (401, "bad_signature"));
    assert_eq!(
        gw.metric("hookgate_deliveries_total{route=\"discord\",outcome=\"rate_limited\"}")
            .await,
        limited as f64
    );
    // The budget refills (2 per second).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let again = post_from("127.0.0.2", &url, &forged_discord(), body).await;
    assert_eq!(again.status, 401);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_the_budget_is_the_forwarded_clients() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&costly_route(
        &up,
        "trusted_proxies = [\"127.0.0.1\"]",
        "failure_budget = 3",
    ))
    .await;
    let url = gw.url("/webhooks/discord");
    let body = br#"{"type":2,"id":"1"}"#.to_vec();
    let from = |client: &str| {
        let mut h = forged_discord();
        h.push(("x-forwarded-for".into(), format!("198.51.100.1, {client}")));
        h
    };
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(post(&url, &from("203.0.113.9"), body.clone()).await.status);
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    // Another client behind the same proxy keeps its budget.
    let other = post(&url, &from("203.0.113.10"), body.clone()).await;
    assert_eq!(other.status, 401);
    gw.stop().await;
}

/// HMAC verification costs microseconds: a flood of forgeries from one address gets
/// 401s, never a 429 that would turn away a provider that does not retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_requests_never_stop_valid_ones_on_an_hmac_route() {
    let up = Upstream::start().await;
    let gw = Arc::new(TestGateway::start(&two_routes(&up, "", "failure_budget = 5")).await);
    let forger = {
        let gw = gw.clone();
        tokio::spawn(async move {
            let forged = vec![("stripe-signature".to_string(), "t=1,v1=00".to_string())];
            let mut statuses = Vec::new();
            for _ in 0..300 {
                let r = post_from(
                    "127.0.0.2",
                    &gw.url("/webhooks/stripe"),
                    &forged,
                    stripe_body("evt_forged").into_bytes(),
                )
                .await;
                statuses.push(r.status);
            }
            statuses
        })
    };
    let mut outcomes = Vec::new();
    for i in 0..20 {
        outcomes.push(
            gw.deliver("stripe", &stripe_body(&format!("evt_valid_{i}")), "x")
                .await
                .outcome()
                .to_owned(),
        );
    }
    let statuses = forger.await.expect("forger");
    assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
    assert!(outcomes.iter().all(|o| o == "forwarded"), "{outcomes:?}");
    assert_eq!(up.count_for("evt_forged"), 0);
}

/// Bodies being read hold their client's slots, not delivery capacity: a client that
/// trickles bodies on many connections cannot stop deliveries from another. Its bodies
/// beyond `max_reads_per_client` wait for a slot, and give up with 429 `client_busy`
/// when none comes free within `body_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_do_not_hold_delivery_capacity() {
    let up = Upstream::start().await;
    let gw = Arc::new(
        TestGateway::start(&two_routes(
            &up,
            "max_in_flight = 4\nmax_reads_per_client = 8\nbody_timeout = \"2s\"",
            "",
        ))
        .await,
    );
    // Twenty connections from 127.0.0.2, each a head announcing 60 000 bytes and one byte.
    let mut slow = Vec::new();
    for _ in 0..20 {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.2:0".parse().expect("addr"))
            .expect("bind");
        let mut s = socket.connect(gw.addr).await.expect("connect");
        s.write_all(b"POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-length: 60000\r\n\r\n{")
            .await
            .expect("write");
        slow.push(s);
    }
    // Meanwhile, deliveries from another client pass, more than max_in_flight of them.
    for i in 0..8 {
        assert_eq!(
            gw.deliver(
                "github",
                &format!(r#"{{"zen":"slow {i}"}}"#),
                &format!("gh-slow-{i}")
            )
            .await
            .outcome(),
            "forwarded"
        );
    }
    // Every slow body ends within its deadlines: 408 for the eight being read, 429
    // client_busy for the ones that found no slot in time.
    let mut answers = Vec::new();
    for s in &mut slow {
        let mut buf = [0u8; 512];
        let n = tokio::time::timeout(Duration::from_secs(8), s.read(&mut buf))
            .await
            .expect("an answer within the deadlines")
            .expect("read");
        let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
        answers.push(answer.lines().next().unwrap_or_default().to_owned());
        if answer.starts_with("HTTP/1.1 429") {
            assert!(answer.contains("hookgate-outcome: client_busy"), "{answer}");
        }
    }
    let busy = answers
        .iter()
        .filter(|a| a.starts_with("HTTP/1.1 429"))
        .count();
    let timed_out = answers
        .iter()
        .filter(|a| a.starts_with("HTTP/1.1 408"))
        .count();
    assert_eq!(busy + timed_out, 20, "{answers:?}");
    assert!(busy >= 4 && timed_out >= 8, "{answers:?}");
}

/// A burst of bodies from one address (a provider, or everything behind a load balancer)
/// is never refused for its size: bodies beyond `max_reads_per_client` wait their turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_bodies_from_one_address_waits_its_turn() {
    let up = Upstream::start().await;
    let gw = Arc::new(TestGateway::start(&two_routes(&up, "max_reads_per_client = 4", "")).await);
    let pad = "x".repeat(64 * 1024);
    let mut tasks = Vec::new();
    for i in 0..40 {
        let (gw, body) = (
            gw.clone(),
            format!(r#"{{"zen":"burst {i}","pad":"{pad}"}}"#),
        );
        tasks.push(tokio::spawn(async move {
            gw.deliver("github", &body, &format!("gh-burst-{i}"))
                .await
                .outcome()
                .to_owned()
        }));
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.expect("task"));
    }
    assert!(outcomes.iter().all(|o| o == "forwarded"), "{outcomes:?}");
    assert_eq!(up.count(), 40);
}

/// Every connection state has a deadline: silent, an HTTP/2 preface only, and idle
/// after a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_idle_connections_are_closed() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&two_routes(
        &up,
        "header_read_timeout = \"1s\"\nidle_timeout = \"1s\"",
        "",
    ))
    .await;
    // Reads until the gateway closes the connection; false if it is still open after 10 s.
    async fn closed_by_gateway(s: &mut tokio::net::TcpStream) -> bool {
        let mut buf = [0u8; 1024];
        let give_up = Instant::now() + Duration::from_secs(10);
        loop {
            match tokio::time::timeout_at(give_up.into(), s.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => {}
            }
        }
    }
    let mut silent = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    assert!(
        closed_by_gateway(&mut silent).await,
        "a silent connection stays open"
    );

    let mut preface = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    preface
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .expect("preface");
    assert!(
        closed_by_gateway(&mut preface).await,
        "an HTTP/2 preface alone stays open"
    );

    let mut idle = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    idle.write_all(b"GET /nowhere HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("request");
    assert!(
        closed_by_gateway(&mut idle).await,
        "an idle keep-alive stays open"
    );
    gw.stop().await;
}

/// HTTP/2 clients are told how many streams they may open at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_per_connection_are_bounded() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&two_routes(&up, "max_concurrent_streams = 16", "")).await;
    let tcp = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    let (_send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let conn = Arc::new(tokio::sync::Mutex::new(conn));
    // The server's SETTINGS arrive as the connection is driven.
    let limit = {
        let conn = conn.clone();
        let mut n = usize::MAX;
        for _ in 0..50 {
            {
                let mut c = conn.lock().await;
                let _ = tokio::time::timeout(Duration::from_millis(20), &mut *c).await;
                n = c.max_concurrent_send_streams();
            }
            if n != usize::MAX {
                break;
            }
        }
        n
    };
    assert_eq!(limit, 16);
    gw.stop().await;
}

/// A delivery whose provider hung up keeps its `max_in_flight` permit until its forward
/// and settle end: the upstream never sees more than `max_in_flight` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_bounds_forwards_when_providers_hang_up() {
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(800));
    let gw = Arc::new(TestGateway::start(&two_routes(&up, "max_in_flight = 2", "")).await);
    let impatient = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(150))
        .build()
        .expect("client");
    for i in 0..8 {
        let body = stripe_body(&format!("evt_hangup_{i}"));
        let mut req = impatient
            .post(gw.url("/webhooks/stripe"))
            .body(body.clone());
        for (n, v) in gw.sign("stripe", &body, "x") {
            req = req.header(n, v);
        }
        // Times out and drops the connection while the forward is still running (or,
        // with both permits held, is answered 503 at once).
        if let Ok(r) = req.send().await {
            assert_eq!(r.status(), 503);
        }
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(up.count() >= 2, "{} forwarded", up.count());
    assert!(
        up.max_concurrent() <= 2,
        "{} forwards at once with max_in_flight = 2",
        up.max_concurrent()
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_memory_store_refuses_new_deliveries_with_503_and_keeps_every_record() {
    let up = Upstream::start().await;
    let store = crate::support::store_toml(None, "max_records = 3");
    let gw = TestGateway::start(&stripe_config(&up, &store, "")).await;
    for i in 0..3 {
        let id = format!("evt_mem_{i}");
        let r = gw.deliver("stripe", &stripe_body(&id), &id).await;
        assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{}", r.body);
    }
    let r = gw
        .deliver("stripe", &stripe_body("evt_mem_3"), "evt_mem_3")
        .await;
    assert_eq!((r.status, r.outcome()), (503, "store_error"), "{}", r.body);
    assert!(r.header("retry-after").is_some(), "503 says when to retry");
    // The records it holds are not evicted: copies are still duplicates.
    let r = gw
        .deliver("stripe", &stripe_body("evt_mem_0"), "evt_mem_0")
        .await;
    assert_eq!((r.status, r.outcome()), (200, "duplicate"), "{}", r.body);
    assert_eq!(up.effects(), 3);
    assert_eq!(gw.metric("hookgate_store_refused_full_total").await, 1.0);
    gw.stop().await;
}
