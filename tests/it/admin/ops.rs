//! Operating the gateway: metrics, health and readiness, forgetting a key, reloads,
//! and trace context.

use std::time::Duration;

use crate::support::{
    RedisServer, TestGateway, Upstream, client, post, store_toml, stripe_body, stripe_config,
};

fn sample(outcome: &str) -> String {
    format!("hookgate_deliveries_total{{route=\"stripe\",outcome=\"{outcome}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_with_every_outcome() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&stripe_config(&up, "", "")).await;
    let body = stripe_body("evt_m1");
    assert_eq!(
        gw.deliver("stripe", &body, "x").await.outcome(),
        "forwarded"
    );
    assert_eq!(
        gw.deliver("stripe", &body, "x").await.outcome(),
        "duplicate"
    );
    assert_eq!(
        gw.deliver("stripe", &body, "x").await.outcome(),
        "duplicate"
    );
    let tampered = post(
        &gw.url("/webhooks/stripe"),
        &gw.sign("stripe", &body, "x"),
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(tampered.status, 401);
    let other = stripe_body("evt_m1").replace("2000", "1");
    assert_eq!(gw.deliver("stripe", &other, "x").await.status, 422);
    up.set_status(500);
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_m2"), "x")
            .await
            .status,
        500
    );

    assert_eq!(gw.metric(&sample("forwarded")).await, 1.0);
    assert_eq!(gw.metric(&sample("duplicate")).await, 2.0);
    assert_eq!(gw.metric(&sample("bad_signature")).await, 1.0);
    assert_eq!(gw.metric(&sample("mismatch")).await, 1.0);
    assert_eq!(gw.metric(&sample("upstream_rejected")).await, 1.0);
    assert_eq!(
        gw.metric("hookgate_matched_secret_total{route=\"stripe\",secret=\"0\"}")
            .await,
        5.0
    );
    assert_eq!(
        gw.metric("hookgate_delivery_duration_seconds_count{route=\"stripe\"}")
            .await,
        6.0
    );
    assert_eq!(
        gw.metric("hookgate_upstream_duration_seconds_count{route=\"stripe\"}")
            .await,
        2.0
    );
    assert!(
        gw.metric("hookgate_store_duration_seconds_count{op=\"claim\"}")
            .await
            >= 5.0
    );
    assert_eq!(gw.metric("hookgate_in_flight_deliveries").await, 0.0);
    let text = client()
        .get(gw.admin_url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(!text.contains("evt_m1"), "labels never carry event IDs");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_redis_and_healthz_the_process() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let gw = TestGateway::start(&stripe_config(
        &up,
        &store_toml(Some(&redis), "timeout = \"300ms\""),
        "",
    ))
    .await;
    let get = |path: &'static str| {
        let url = gw.admin_url(path);
        async move {
            client()
                .get(url)
                .send()
                .await
                .expect("admin")
                .status()
                .as_u16()
        }
    };
    assert_eq!(get("/readyz").await, 200);
    redis.stop();
    assert_eq!(get("/readyz").await, 503);
    assert_eq!(
        get("/healthz").await,
        200,
        "alive even when the store is down"
    );
    redis.restart();
    let mut ready = false;
    for _ in 0..100 {
        if get("/readyz").await == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "/readyz did not return to 200 after redis came back");
    // The admin endpoints are not reachable through the public listener.
    let r = client()
        .get(gw.url("/metrics"))
        .send()
        .await
        .expect("public");
    assert_eq!(r.status().as_u16(), 404);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgetting_a_key_allows_a_deliberate_redelivery() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&stripe_config(&up, "", "")).await;
    let body = stripe_body("evt_redeliver");
    assert_eq!(
        gw.deliver("stripe", &body, "x").await.outcome(),
        "forwarded"
    );
    assert_eq!(
        gw.deliver("stripe", &body, "x").await.outcome(),
        "duplicate"
    );
    let r = client()
        .delete(gw.admin_url("/keys/stripe/evt_redeliver"))
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status().as_u16(), 200);
    let v: serde_json::Value = serde_json::from_str(&r.text().await.expect("text")).expect("json");
    assert_eq!(v["forgotten"], true);
    assert_eq!(
        gw.deliver("stripe", &body, "x").await.outcome(),
        "forwarded",
        "redelivered after forget"
    );
    assert_eq!(up.count_for("evt_redeliver"), 2);
    let r = client()
        .delete(gw.admin_url("/keys/nosuch/evt"))
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status().as_u16(), 404);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_swaps_routes_and_keeps_the_old_config_on_errors() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.toml");
    let first = stripe_config(&up, "", "");
    std::fs::write(&path, &first).expect("write");
    let gw = TestGateway::start_file(&path).await;
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_r1"), "x")
            .await
            .outcome(),
        "forwarded"
    );

    let second = format!(
        "{first}\n[[routes]]\nname = \"gh\"\npath = \"/webhooks/gh\"\nprovider = \"github\"\nsecrets = [\"s\"]\nupstream = \"{}\"\n",
        up.url("/gh")
    );
    std::fs::write(&path, &second).expect("write");
    let r = client()
        .post(gw.admin_url("/reload"))
        .header("x-requested-by", "hookgate-tests")
        .send()
        .await
        .expect("reload");
    assert_eq!(r.status().as_u16(), 200);
    // The gateway signs with its startup config; sign the new route by hand.
    let body = r#"{"zen":"ok"}"#;
    let cfg = crate::support::parse_config(&second);
    let route = cfg.routes.iter().find(|r| r.name == "gh").expect("gh");
    let h: Vec<(String, String)> = hookgate::sign::headers(
        &route.verifier,
        &route.event_id,
        body.as_bytes(),
        0,
        "d-1",
        None,
    )
    .expect("sign")
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    let r = post(&gw.url("/webhooks/gh"), &h, body.as_bytes().to_vec()).await;
    assert_eq!(
        r.outcome(),
        "forwarded",
        "the new route is served without a restart"
    );

    std::fs::write(&path, "this is [not toml").expect("write");
    let r = client()
        .post(gw.admin_url("/reload"))
        .header("x-requested-by", "hookgate-tests")
        .send()
        .await
        .expect("reload");
    assert_eq!(r.status().as_u16(), 400);
    let v: serde_json::Value = serde_json::from_str(&r.text().await.expect("text")).expect("json");
    assert!(
        v["errors"][0]
            .as_str()
            .unwrap_or_default()
            .contains("TOML parse error"),
        "{v}"
    );
    assert_eq!(gw.metric("hookgate_config_last_reload_ok").await, 0.0);
    assert_eq!(
        gw.metric("hookgate_config_reloads_total{result=\"error\"}")
            .await,
        1.0
    );
    let r = post(&gw.url("/webhooks/gh"), &h, body.as_bytes().to_vec()).await;
    assert_eq!(r.outcome(), "duplicate", "the old config keeps serving");
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_r2"), "x")
            .await
            .outcome(),
        "forwarded"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_is_passed_on_or_created() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&stripe_config(&up, "", "")).await;
    let body = stripe_body("evt_trace1");
    let mut h = gw.sign("stripe", &body, "x");
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    h.push(("traceparent".into(), tp.into()));
    assert_eq!(
        post(&gw.url("/webhooks/stripe"), &h, body.into_bytes())
            .await
            .outcome(),
        "forwarded"
    );
    assert_eq!(up.received()[0].header("traceparent"), Some(tp));
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_trace2"), "x")
            .await
            .outcome(),
        "forwarded"
    );
    let created = up.received()[1]
        .header("traceparent")
        .map(str::to_owned)
        .expect("created");
    let parts: Vec<&str> = created.split('-').collect();
    assert_eq!(
        (parts.len(), parts[0], parts[1].len(), parts[2].len()),
        (4, "00", 32, 16),
        "{created}"
    );
    gw.stop().await;
}

/// A reload cannot see a variable exported after the gateway started: its error says
/// the environment is read at start and points at `file:` secrets, which a reload
/// reads again (and does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_says_why_it_cannot_see_a_variable_exported_after_start() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.toml");
    let first = stripe_config(&up, "", "");
    std::fs::write(&path, &first).expect("write");
    let gw = TestGateway::start_file(&path).await;
    let reload = || async {
        let r = client()
            .post(gw.admin_url("/reload"))
            .header("x-requested-by", "hookgate-tests")
            .send()
            .await
            .expect("reload");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    };
    std::fs::write(
        &path,
        first.replace("whsec_test", "${HOOKGATE_TEST_EXPORTED_AFTER_START}"),
    )
    .expect("write");
    let (status, said) = reload().await;
    assert_ne!(status, 200, "{said}");
    assert!(
        said.contains("${HOOKGATE_TEST_EXPORTED_AFTER_START} is not set")
            && said.contains("read once, when it starts")
            && said.contains("file:PATH"),
        "{said}"
    );
    // The running config stays; a `file:` secret is read by the reload.
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_env_1"), "x")
            .await
            .outcome(),
        "forwarded"
    );
    std::fs::write(dir.path().join("stripe.secret"), "whsec_test\n").expect("secret");
    std::fs::write(
        &path,
        first.replace("\"whsec_test\"", "\"file:stripe.secret\""),
    )
    .expect("write");
    let (status, said) = reload().await;
    assert_eq!(status, 200, "{said}");
    gw.stop().await;
}
