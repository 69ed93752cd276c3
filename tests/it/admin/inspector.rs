//! The inspector page (`/ui/` on the admin listener) in a real browser: headless
//! Chromium over WebDriver against an in-process gateway and a recording upstream.
//! The screenshots in docs/ (shown by docs/inspector.md) are taken here:
//! `HOOKGATE_SCREENSHOTS=docs cargo test --test it inspector` refreshes them.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::queue::delivery::queue_config;
use crate::support::browser::Browser;
use crate::support::{TestGateway, Upstream, client, eventually, stripe_body, stripe_config};

/// Where the inspector page's screenshots are kept (docs/, committed).
fn docs(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("docs")
        .join(name)
}

/// Where a screenshot taken by a test goes: docs/ with `HOOKGATE_SCREENSHOTS=docs`
/// (to refresh docs/inspector.md's pictures), a temporary folder otherwise, so a test run
/// leaves the checkout as it found it.
fn shot(name: &str) -> PathBuf {
    if std::env::var_os("HOOKGATE_SCREENSHOTS").is_some_and(|v| v == "docs") {
        return docs(name);
    }
    let dir = std::env::temp_dir().join("hookgate-inspector-shots");
    let _ = std::fs::create_dir_all(&dir);
    dir.join(name)
}

// The page is served with a policy that allows no inline script or style, no other
// origin and no framing; the browser runs it under that policy (every test below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_embedded_and_served_with_a_strict_policy() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&stripe_config(&up, "[store]\nbackend = \"memory\"", "")).await;
    let http = client();
    let r = http.get(gw.admin_url("/ui")).send().await.expect("ui");
    assert_eq!(r.status(), 301);
    assert_eq!(r.headers()["location"], "/ui/");
    for (path, ctype) in [
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ] {
        let r = http.get(gw.admin_url(path)).send().await.expect("asset");
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers().clone();
        assert!(
            h["content-type"]
                .to_str()
                .unwrap_or_default()
                .starts_with(ctype)
        );
        let csp = h["content-security-policy"].to_str().unwrap_or_default();
        assert!(csp.contains("default-src 'self'"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert!(!r.text().await.unwrap_or_default().is_empty());
    }
    // The admin guard still stands in front of the page: another site's page cannot
    // load it through the operator's browser, nor a rebound host name.
    let r = http
        .get(gw.admin_url("/ui/"))
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .expect("ui");
    assert_eq!(r.status(), 403);
    let r = http
        .get(gw.admin_url("/ui/"))
        .header("host", "attacker.example")
        .send()
        .await
        .expect("ui");
    assert_eq!(r.status(), 421);
    gw.stop().await;
}

// Issue 25: "a dead event retried from the page reaches the upstream".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_event_retried_from_the_page_reaches_the_upstream() {
    let up = Upstream::start().await;
    up.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let retry = r#"{ max_attempts = 2, initial = "50ms", max_delay = "50ms" }"#;
    let gw = TestGateway::start(&queue_config(&up, dir.path(), retry, "")).await;
    let id = "evt_dead_then_retried";
    let r = gw.deliver("stripe", &stripe_body(id), id).await;
    assert_eq!(r.outcome(), "queued", "{}", r.body);
    let mut dead = false;
    for _ in 0..100 {
        let (_, v) =
            crate::queue::delivery::admin(&gw, "GET", &format!("/events/stripe/{id}")).await;
        if v["state"] == "dead" {
            dead = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(dead, "the event is dead after two failed attempts");
    assert_eq!(up.effects_for(id), 0);
    up.set_status(200);

    let b = Browser::start(1280, 800).await;
    // The delivery's detail shows its destination's state and attempts.
    b.goto(&gw.admin_url(&format!("/ui/#/deliveries?event_id={id}")))
        .await;
    b.wait_text("#deliveries", id).await;
    b.click("#deliveries tr:first-child a").await;
    let dests = b.wait_text("#destinations", "dead").await;
    assert!(dests.contains("http_5xx"), "{dests}");
    b.goto(&gw.admin_url("/ui/#/queues/stripe?state=dead"))
        .await;
    let row = format!("tr[data-event-id=\"{id}\"]");
    let text = b.wait_text(&row, "dead").await;
    assert!(text.contains(id), "{text}");
    b.screenshot(&shot("inspector-queue.png")).await;
    // Nothing reached the upstream until the operator asks.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.effects_for(id), 0);
    b.click(&format!("{row} button.retry")).await;
    b.wait_text("#status", "Queued again").await;
    assert!(
        eventually(Duration::from_secs(5), || up.effects_for(id) == 1).await,
        "the retried event reaches the upstream"
    );
    // The page, reloaded by the retry, no longer lists it as dead.
    b.goto(&gw.admin_url("/ui/#/queues/stripe?state=delivered"))
        .await;
    b.wait_text(&row, "delivered").await;
    drop(b);
    gw.stop().await;
}

// Issue 25: "with admin_token set and no token given, the page shows nothing but the
// prompt".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_admin_token_the_page_shows_only_the_prompt_until_given_it() {
    let up = Upstream::start().await;
    let store = "[server]\nadmin_listen = \"127.0.0.1:0\"\nadmin_token = \"inspector-test-token\"\n[store]\nbackend = \"memory\"";
    let gw = TestGateway::start(&stripe_config(&up, store, "")).await;
    let r = gw
        .deliver("stripe", &stripe_body("evt_private"), "evt_private")
        .await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);

    let b = Browser::start(1280, 800).await;
    b.goto(&gw.admin_url("/ui/")).await;
    b.wait_text("#login", "Admin token").await;
    let page = b.page_text().await;
    // The header and the prompt; no navigation, no data.
    for absent in ["Deliveries", "Queues", "Routes", "evt_private", "stripe"] {
        assert!(
            !page.contains(absent),
            "{absent:?} shown before the token:\n{page}"
        );
    }
    let shown = b
        .script(
            "return [document.getElementById('main').hidden, document.getElementById('nav').hidden, \
             document.getElementById('view').childElementCount];",
            serde_json::json!([]),
        )
        .await;
    assert_eq!(shown, serde_json::json!([true, true, 0]));
    b.screenshot(&shot("inspector-token.png")).await;

    // A wrong token is refused and the page stays closed.
    b.fill("#token", "not-the-token\u{E007}").await;
    b.wait_text("#login-error", "refused").await;
    assert!(b.text("#main").await.is_none());
    // The right one opens it, typed with the keyboard alone (the refused token is
    // selected, so typing replaces it), and is kept for this tab only.
    b.keys("inspector-test-token\u{E007}").await;
    b.wait_text("nav", "Deliveries").await;
    let kept = b
        .script(
            "return [sessionStorage.getItem('hookgate.admin_token'), document.cookie];",
            serde_json::json!([]),
        )
        .await;
    assert_eq!(kept, serde_json::json!(["inspector-test-token", ""]));
    assert!(b.text("#login").await.is_none());
    // The token outlives a reload of the tab; the keyboard alone reaches a section
    // (Tab to its link, Enter), and shows where it is.
    b.goto(&gw.admin_url("/ui/")).await;
    b.wait_text("nav", "Deliveries").await;
    let mut on_queues = false;
    for _ in 0..8 {
        b.keys("\u{E004}").await;
        let focus = b
            .script(
                "const e = document.activeElement; \
                 return [e.textContent, e.matches(':focus-visible'), getComputedStyle(e).outlineStyle];",
                serde_json::json!([]),
            )
            .await;
        assert_eq!(focus[1], true, "{focus}");
        assert_ne!(focus[2], "none", "{focus}");
        if focus[0] == "Queues" {
            on_queues = true;
            break;
        }
    }
    assert!(on_queues, "Tab reaches the Queues link");
    b.keys("\u{E007}").await;
    b.wait_text("#view h1", "Queues and dead letters").await;
    drop(b);
    gw.stop().await;
}

// With the log off, the deliveries page says so (and why the list stays empty)
// instead of showing an empty list as if nothing had come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_log_off_the_page_says_so() {
    let up = Upstream::start().await;
    let store = "[store]\nbackend = \"memory\"\n[log]\nenabled = false";
    let gw = TestGateway::start(&stripe_config(&up, store, "")).await;
    let r = gw
        .deliver("stripe", &stripe_body("evt_unlogged"), "evt_unlogged")
        .await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);

    let b = Browser::start(1280, 800).await;
    b.goto(&gw.admin_url("/ui/")).await;
    b.wait_text("#log-off", "The delivery log is off").await;
    let page = b.page_text().await;
    assert!(!page.contains("evt_unlogged"), "{page}");
    // Its link leads to the overview, where the request is counted.
    b.click("#log-off a").await;
    b.wait_text("#view", "forwarded").await;
    drop(b);
    gw.stop().await;
}

// Issue 25: "a signed delivery appears in the list within 2 s without a reload; its
// detail shows the body and a redacted signature; a refused delivery shows its
// reason".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_appear_live_and_show_their_body_redacted_signature_and_reason() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&stripe_config(&up, "[store]\nbackend = \"memory\"", "")).await;
    // One before the page opens: the list shows it from the log.
    let r = gw
        .deliver("stripe", &stripe_body("evt_before"), "evt_before")
        .await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);

    let b = Browser::start(1280, 800).await;
    b.goto(&gw.admin_url("/ui/")).await;
    b.wait_text("#deliveries", "evt_before").await;
    b.wait_text("#live", "Live").await;
    // Loaded once: a reload would lose this mark.
    b.script(
        "window.__loadedOnce = true; return null;",
        serde_json::json!([]),
    )
    .await;

    // A signed delivery, then a refused one, while the page is open.
    let body = stripe_body("evt_live");
    let signed = gw.sign("stripe", &body, "evt_live");
    let signature = signed
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("stripe-signature"))
        .and_then(|(_, v)| v.split("v1=").nth(1))
        .expect("a v1 signature")
        .to_owned();
    let url = gw.url("/webhooks/stripe");
    let sent = Instant::now();
    let r = crate::support::post(&url, &signed, body.clone().into_bytes()).await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    let row = b
        .wait_text_for(
            "#deliveries tr:first-child",
            "evt_live",
            Duration::from_secs(2),
        )
        .await;
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "{:?}",
        sent.elapsed()
    );
    assert!(row.contains("forwarded"), "{row}");
    let mut headers = gw.sign("stripe", &body, "evt_refused");
    for (n, v) in &mut headers {
        if n.eq_ignore_ascii_case("stripe-signature") {
            *v = v.replace("v1=", "v1=00");
        }
    }
    let r = crate::support::post(&url, &headers, body.clone().into_bytes()).await;
    assert_eq!(r.status, 401, "{}", r.body);
    b.wait_text("#deliveries tr:first-child", "bad_signature")
        .await;
    let reloaded = b
        .script(
            "return window.__loadedOnce === true;",
            serde_json::json!([]),
        )
        .await;
    assert_eq!(reloaded, true, "the list updated without a reload");
    b.screenshot(&shot("inspector-list.png")).await;

    // The forwarded delivery's detail: the body, pretty and raw, and the signature
    // header redacted.
    b.click("#deliveries tr[data-event-id=\"evt_live\"] a")
        .await;
    let detail = b.wait_text("#body", "\"amount\": 2000").await;
    assert!(detail.contains("\"id\": \"evt_live\""), "{detail}");
    b.click("#body .view-raw").await;
    b.wait_text("#body pre", &body).await;
    let headers = b.wait_text("#headers", "stripe-signature").await;
    let line = headers
        .lines()
        .find(|l| l.starts_with("stripe-signature"))
        .unwrap_or_default();
    assert!(line.contains("[redacted]"), "{headers}");
    assert!(!headers.contains("v1="), "{headers}");
    assert!(!b.page_text().await.contains(&signature));
    b.click("#body .view-pretty").await;
    b.full_page_screenshot(&shot("inspector-detail.png")).await;

    // The refused one: its reason, no body kept, nothing to replay.
    b.goto(&gw.admin_url("/ui/#/deliveries?outcome=bad_signature"))
        .await;
    b.wait_text("#deliveries", "bad_signature").await;
    b.click("#deliveries tr:first-child a").await;
    let reason = b.wait_text("#reason", "Refused").await;
    assert!(reason.to_lowercase().contains("signature"), "{reason}");
    b.wait_text("#body-none", "refused").await;

    // A phone's width: the list still reads.
    b.resize(390, 844).await;
    b.goto(&gw.admin_url("/ui/#/deliveries")).await;
    b.wait_text("#deliveries", "evt_live").await;
    b.screenshot(&shot("inspector-phone.png")).await;
    drop(b);
    gw.stop().await;
}

/// docs/inspector.md shows the screenshots the tests above take.
#[test]
fn the_inspector_page_shows_the_inspector_screenshots() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/inspector.md"))
        .expect("docs/inspector.md");
    assert!(page.contains("# The inspector"), "no inspector heading");
    for name in [
        "inspector-list.png",
        "inspector-detail.png",
        "inspector-queue.png",
        "inspector-phone.png",
        "inspector-token.png",
    ] {
        assert!(
            page.contains(&format!("]({name})")),
            "{name} not in docs/inspector.md"
        );
        let png = std::fs::read(docs(name)).unwrap_or_else(|e| panic!("docs/{name}: {e}"));
        assert!(png.starts_with(b"\x89PNG"), "docs/{name} is a PNG");
    }
}
