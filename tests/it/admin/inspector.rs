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
    // Long IDs are shown by their first 12 characters.
    b.wait_text("#deliveries", &id[..12]).await;
    b.click("#deliveries tr:first-child a").await;
    let dests = b.wait_text("#destinations", "dead").await;
    assert!(dests.contains("http_5xx"), "{dests}");
    b.goto(&gw.admin_url("/ui/#/queues/stripe?state=dead"))
        .await;
    let row = format!("tr[data-event-id=\"{id}\"]");
    let text = b.wait_text(&row, "dead").await;
    // The filters say what each choice lists, and offer the route's destinations.
    let choices = b
        .script(
            "return [...document.querySelectorAll(arguments[0])].map((o) => [o.value, o.textContent, o.selected]);",
            serde_json::json!(["#q-state option"]),
        )
        .await;
    let dead = choices
        .as_array()
        .and_then(|a| a.iter().find(|c| c[0] == "dead"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(dead[2], true, "{choices}");
    assert!(
        dead[1]
            .as_str()
            .is_some_and(|t| t.contains("waiting for an operator")),
        "{choices}"
    );
    let destinations = b
        .script(
            "return [...document.querySelectorAll('#q-destination option')].map((o) => o.value);",
            serde_json::json!([]),
        )
        .await;
    assert_eq!(
        destinations,
        serde_json::json!(["", "stripe"]),
        "{destinations}"
    );
    // Shortened: its first 12 characters, the whole in the title.
    assert!(text.contains(&id[..12]), "{text}");
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
    // Its link leads to the overview, where the request is counted (the routes page
    // loads its charts too: on a loaded machine, give it time).
    b.click("#log-off a").await;
    b.wait_text_for("#view", "forwarded", Duration::from_secs(30))
        .await;
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

    // The refused one: its reason, no body kept, nothing to replay.
    b.goto(&gw.admin_url("/ui/#/deliveries?outcome=bad_signature"))
        .await;
    b.wait_text("#deliveries", "bad_signature").await;
    // The outcome filter offers the outcomes as choices, the one shown chosen.
    let chosen = b
        .script(
            "const s = document.getElementById('f-outcome'); return [s.tagName, s.value, s.options.length];",
            serde_json::json!([]),
        )
        .await;
    assert_eq!(chosen[0], "SELECT", "{chosen}");
    assert_eq!(chosen[1], "bad_signature", "{chosen}");
    assert!(chosen[2].as_u64() > Some(10), "{chosen}");
    b.click("#deliveries tr:first-child a").await;
    let reason = b.wait_text("#reason", "Refused").await;
    assert!(reason.to_lowercase().contains("signature"), "{reason}");
    b.wait_text("#body-none", "refused").await;

    // A phone's width: the list still reads.
    b.resize(390, 844).await;
    b.goto(&gw.admin_url("/ui/#/deliveries")).await;
    b.wait_text("#deliveries", "evt_live").await;
    let v = assert_layout(&b, "the deliveries on a phone").await;
    assert!(v["rows"].as_u64() >= Some(2), "{v}");
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
        "inspector-refused.png",
        "inspector-queues.png",
        "inspector-queue.png",
        "inspector-event.png",
        "inspector-plan.png",
        "inspector-paused.png",
        "inspector-routes.png",
        "inspector-route.png",
        "inspector-route-day.png",
        "inspector-unrouted.png",
        "inspector-phone.png",
        "inspector-phone-queue.png",
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

// ---- Issue 38: the inspector on real data ----

/// A GitHub route (sync, its event IDs `sig-` + 64 hex digits: GitHub's delivery ID is
/// not signed) and a Stripe queue route fanned out to `billing` (an upstream that
/// answers), `audit` (one that fails: its events go dead after two attempts) and
/// `ledger` (a long URL nothing listens on: its attempts' errors are long), on the
/// disk store.
fn real_config(dir: &std::path::Path, ok: &Upstream, failing: &Upstream) -> String {
    format!(
        r#"[server]
shutdown_grace = "2s"
[store]
backend = "disk"
path = "{db}"
[[routes]]
name = "github"
path = "/webhooks/github"
provider = "github"
secrets = ["gh-secret"]
upstream = "{gh}"
[[routes]]
name = "shop"
path = "/webhooks/shop"
provider = "stripe"
secrets = ["whsec_test"]
delivery = "queue"
upstream_timeout = "2s"
retry = {{ max_attempts = 2, initial = "50ms", max_delay = "50ms", max_age = "1h" }}
[[routes.destinations]]
name = "billing"
upstream = "{billing}"
[[routes.destinations]]
name = "audit"
upstream = "{audit}"
[[routes.destinations]]
name = "ledger"
upstream = "http://127.0.0.1:1/ledger/v2/accounts/acme-production-eu-west-1/webhooks/stripe/events/ingest"
"#,
        db = dir.join("hookgate.db").display(),
        gh = ok.url("/hooks/github"),
        billing = ok.url("/billing"),
        audit = failing.url("/audit"),
    )
}

/// A GitHub push of about 64 KiB.
fn push_of_64_kib(n: usize) -> String {
    let commits: Vec<String> = (0..200)
        .map(|i| {
            format!(
                r#"{{"id":"{:040x}","message":"commit {i} of push {n}: {}","author":{{"name":"dev","email":"dev@example.com"}},"modified":["src/lib.rs"]}}"#,
                i * 7919 + n,
                "lorem ipsum ".repeat(20)
            )
        })
        .collect();
    format!(
        r#"{{"ref":"refs/heads/main","repository":{{"full_name":"acme/app"}},"commits":[{}]}}"#,
        commits.join(",")
    )
}

/// What a page's layout must hold at the window's width: no horizontal scroll, no table
/// wider than its box, every list row at most three lines high. `what` names the page.
async fn assert_layout(b: &Browser, what: &str) -> serde_json::Value {
    let v = b
        .script(
            "const de = document.documentElement; \
             const lh = parseFloat(getComputedStyle(document.body).lineHeight); \
             const rows = [...document.querySelectorAll('table.list tbody tr')].filter((r) => r.offsetParent !== null); \
             const tall = rows.filter((r) => r.getBoundingClientRect().height > 3 * lh + 0.5) \
               .map((r) => Math.round(r.getBoundingClientRect().height) + 'px: ' + r.innerText.slice(0, 80)); \
             const wide = [...document.querySelectorAll('.table-wrap')].filter((w) => w.offsetParent !== null && w.scrollWidth > w.clientWidth + 1) \
               .map((w) => w.scrollWidth + '>' + w.clientWidth + ': ' + w.innerText.slice(0, 80)); \
             return { scroll: de.scrollWidth, width: window.innerWidth, lh, rows: rows.length, tall, wide };",
            serde_json::json!([]),
        )
        .await;
    assert!(
        v["scroll"].as_f64() <= v["width"].as_f64(),
        "{what}: the page scrolls sideways: {v}"
    );
    assert_eq!(
        v["tall"],
        serde_json::json!([]),
        "{what}: rows over three lines: {v}"
    );
    assert_eq!(
        v["wide"],
        serde_json::json!([]),
        "{what}: a table wider than its box: {v}"
    );
    v
}

/// The status of an admin call and its JSON.
async fn admin(gw: &TestGateway, method: &str, path: &str) -> (u16, serde_json::Value) {
    crate::queue::delivery::admin(gw, method, path).await
}

/// Polls the admin API until `done` holds of the answer to `GET path`.
async fn admin_until(
    gw: &TestGateway,
    path: &str,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (status, v) = admin(gw, "GET", path).await;
        if status == 200 && done(&v) {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: GET {path} answered {status} {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The destination `d` of route `r` in `/overview`.
fn queue_of<'a>(overview: &'a serde_json::Value, r: &str, d: &str) -> &'a serde_json::Value {
    overview["routes"]
        .as_array()
        .and_then(|rs| rs.iter().find(|x| x["route"] == r))
        .and_then(|x| x["queues"].as_array())
        .and_then(|qs| qs.iter().find(|q| q["destination"] == d))
        .unwrap_or(&serde_json::Value::Null)
}

// Issue 38, "the inspector, on real data": GitHub digest IDs, 64 KiB bodies, refused and
// unrouted rows, a fan-out with one destination dead. Every page at 1280 × 800 and on
// a phone: no sideways scroll, rows of at most three lines; then each action from the
// page: pause (seen in the page and in /overview), resume, a bulk retry's plan shown
// before it runs, a per-event retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_holds_real_data_and_its_actions_work() {
    let ok = Upstream::start().await;
    let failing = Upstream::start().await;
    failing.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&real_config(dir.path(), &ok, &failing)).await;

    // GitHub pushes of 64 KiB: forwarded, each with a 68-character ID.
    for n in 0..4 {
        let body = push_of_64_kib(n);
        assert!(body.len() >= 64 << 10, "{}", body.len());
        let r = gw
            .deliver(
                "github",
                &body,
                &format!("5d0f5e7a-8b3c-11ee-9e5b-{n:012x}"),
            )
            .await;
        assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    }
    // Refused: forged signatures, and a body too old to trust.
    let url = gw.url("/webhooks/github");
    for n in 0..3 {
        let body = push_of_64_kib(100 + n);
        let mut headers = gw.sign("github", &body, &format!("forged-{n}"));
        for (name, v) in &mut headers {
            if name.eq_ignore_ascii_case("x-hub-signature-256") {
                *v = format!("sha256={}", "0".repeat(64));
            }
        }
        let r = crate::support::post(&url, &headers, body.into_bytes()).await;
        assert_eq!(r.status, 401, "{}", r.body);
    }
    // Requests for no route: a typo in the provider's settings, and a scanner.
    for (method, path, agent) in [
        ("POST", "/webhook/github", "GitHub-Hookshot/7d1c2a4"),
        ("POST", "/webhooks/shopify", "Shopify-Captain-Hook"),
        (
            "GET",
            "/wp-login.php?token=s3cret-in-query",
            "Mozilla/5.0 (scanner)",
        ),
    ] {
        let headers = [("user-agent".to_owned(), agent.to_owned())];
        let r = crate::support::send(method, &gw.url(path), &headers, b"{}".to_vec()).await;
        assert_eq!(r.status, 404, "{path}");
    }
    // The fan-out: billing delivers, audit fails twice and each event goes dead.
    let shop_ids: Vec<String> = (0..4).map(|i| format!("evt_shop_{i}")).collect();
    for id in &shop_ids {
        let r = gw.deliver("shop", &stripe_body(id), id).await;
        assert_eq!(r.outcome(), "queued", "{}", r.body);
    }
    // A copy of one.
    let r = gw
        .deliver("shop", &stripe_body(&shop_ids[0]), &shop_ids[0])
        .await;
    assert_eq!(r.outcome(), "duplicate", "{}", r.body);
    let overview = admin_until(&gw, "/overview", "audit's and ledger's events dead", |v| {
        queue_of(v, "shop", "audit")["dead"] == 4
            && queue_of(v, "shop", "ledger")["dead"] == 4
            && queue_of(v, "shop", "billing")["depth"] == 0
    })
    .await;
    assert!(
        queue_of(&overview, "shop", "audit")["paused"].is_null(),
        "{overview}"
    );
    assert_eq!(overview["unrouted"]["last_hour"], 3, "{overview}");
    gw.app.sample_queues().await;
    let refused = admin_until(
        &gw,
        "/deliveries?outcome=bad_signature",
        "refusals recorded",
        |v| v["deliveries"].as_array().is_some_and(|d| d.len() == 3),
    )
    .await;
    let refused_id = refused["deliveries"][0]["delivery_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let listed = admin_until(
        &gw,
        "/deliveries?route=github&outcome=forwarded",
        "pushes recorded",
        |v| v["deliveries"].as_array().is_some_and(|d| d.len() == 4),
    )
    .await;
    let push_id = listed["deliveries"][0]["delivery_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let github_id = listed["deliveries"][0]["event_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(github_id.len(), 68, "{github_id}");
    assert!(github_id.starts_with("sig-"), "{github_id}");

    let b = Browser::start(1280, 800).await;
    // The outcome classes, in one map in the page.
    b.goto(&gw.admin_url("/ui/#/routes")).await;
    b.wait_text("#routes", "github").await;
    let classes = b
        .script(
            "const c = window.hookgateInspector.outcomeClass; \
             return ['forwarded', 'queued', 'delivered', 'duplicate', 'in_flight', 'bad_signature', \
                     'stale_timestamp', 'too_large', 'malformed_header', 'no_route', 'upstream_error', \
                     'upstream_rejected', 'store_error', 'dead', 'retrying', 'no-such-word'].map(c);",
            serde_json::json!([]),
        )
        .await;
    assert_eq!(
        classes,
        serde_json::json!([
            "ok", "ok", "ok", "copy", "copy", "refused", "refused", "refused", "refused",
            "refused", "failed", "failed", "failed", "failed", "waiting", "unknown"
        ])
    );
    // On the routes page, each outcome in its class's colour: no longer all red.
    let colours = b
        .script(
            "const bg = (s) => { const e = document.querySelector(s); return e && [e.dataset.class, getComputedStyle(e).backgroundColor]; }; \
             return [bg('tr[data-route=\"github\"] .badge[data-outcome=\"forwarded\"]'), \
                     bg('tr[data-route=\"github\"] .badge[data-outcome=\"bad_signature\"]'), \
                     bg('tr[data-route=\"shop\"] .badge[data-outcome=\"queued\"]'), \
                     bg('tr[data-route=\"shop\"] .badge[data-outcome=\"duplicate\"]')];",
            serde_json::json!([]),
        )
        .await;
    let class_and_colour = |i: usize| (colours[i][0].clone(), colours[i][1].clone());
    assert_eq!(class_and_colour(0).0, "ok", "{colours}");
    assert_eq!(class_and_colour(1).0, "refused", "{colours}");
    assert_eq!(class_and_colour(2).0, "ok", "{colours}");
    assert_eq!(class_and_colour(3).0, "copy", "{colours}");
    assert_eq!(class_and_colour(0).1, class_and_colour(2).1, "{colours}");
    assert_ne!(class_and_colour(0).1, class_and_colour(1).1, "{colours}");
    assert_ne!(class_and_colour(1).1, class_and_colour(3).1, "{colours}");
    // The open incidents (GET /alerts): audit's and ledger's dead letters, above the
    // routes.
    admin_until(&gw, "/alerts", "audit's dead letters an incident", |v| {
        v["incidents"].as_array().is_some_and(|all| {
            all.iter()
                .any(|i| i["kind"] == "dead_letter" && i["destination"] == "audit")
        })
    })
    .await;
    b.goto(&gw.admin_url("/ui/#/queues")).await;
    // "Oldest" is named for what it is: the oldest undelivered event's age.
    b.wait_text(
        "#queues-legend",
        "Oldest: the age of the oldest undelivered event",
    )
    .await;
    b.goto(&gw.admin_url("/ui/#/routes")).await;
    let shown = b.wait_text("#incidents", "dead_letter").await;
    assert!(
        shown.contains("audit") && shown.contains("open incident"),
        "{shown}"
    );
    // A gateway without GET /alerts (404): the section stays hidden, and says nothing.
    b.script(
        "const real = window.fetch; \
         window.fetch = (url, opts) => String(url).startsWith('/alerts') \
           ? Promise.resolve(new Response('{\"error\":\"not found\"}', { status: 404, headers: { 'content-type': 'application/json' } })) \
           : real(url, opts); \
         return null;",
        serde_json::json!([]),
    )
    .await;
    b.click("#view .bar button").await;
    b.wait_true(
        "const s = document.getElementById('incidents'); return !!s && s.dataset.state === 'none';",
        serde_json::json!([]),
        "the incidents section learnt /alerts is not there",
    )
    .await;
    assert_eq!(
        b.script(
            "return document.getElementById('incidents').hidden;",
            serde_json::json!([])
        )
        .await,
        true
    );
    assert!(!b.page_text().await.contains("open incident"));
    b.wait_text("#routes", "bad_signature").await;
    // A page loaded anew: the real fetch again.
    b.goto(&gw.admin_url("/ui/?anew#/deliveries")).await;
    b.wait_text("#deliveries", "bad_signature").await;

    // Every page, on real data, at 1280 × 800 and then on a phone.
    let pages: Vec<(String, &str, &str, String)> = vec![
        (
            "#/deliveries".into(),
            "#deliveries",
            "bad_signature",
            "inspector-list.png".into(),
        ),
        (
            format!("#/delivery/{push_id}"),
            "#body",
            "acme/app",
            "inspector-detail.png".into(),
        ),
        (
            format!("#/delivery/{refused_id}"),
            "#reason",
            "Refused",
            "inspector-refused.png".into(),
        ),
        (
            "#/queues".into(),
            "#view",
            "audit",
            "inspector-queues.png".into(),
        ),
        (
            "#/queues/shop".into(),
            "#events",
            "dead",
            "inspector-queue.png".into(),
        ),
        (
            format!("#/queues/shop/{}", shop_ids[1]),
            "[data-destination=\"ledger\"]",
            "connect",
            "inspector-event.png".into(),
        ),
        (
            "#/routes".into(),
            "#routes",
            "bad_signature",
            "inspector-routes.png".into(),
        ),
        (
            "#/routes/shop".into(),
            "[data-chart=\"depth\"]",
            "audit",
            "inspector-route.png".into(),
        ),
        (
            "#/routes/github?window=1d".into(),
            "[data-chart=\"outcomes\"]",
            "in all",
            "inspector-route-day.png".into(),
        ),
        (
            "#/unrouted".into(),
            "#unrouted",
            "/webhook/github",
            "inspector-unrouted.png".into(),
        ),
    ];
    for (hash, css, needle, png) in &pages {
        b.goto(&gw.admin_url(&format!("/ui/{hash}"))).await;
        b.wait_text(css, needle).await;
        let v = assert_layout(&b, hash).await;
        eprintln!("{hash} at 1280: {v}");
        if png == "inspector-detail.png" || png == "inspector-route.png" {
            b.full_page_screenshot(&shot(png)).await;
        } else {
            b.screenshot(&shot(png)).await;
        }
    }
    // An attempt's error is shown whole, wrapped in its cell: nothing cut off.
    b.goto(&gw.admin_url(&format!("/ui/#/queues/shop/{}", shop_ids[2])))
        .await;
    let ledger = b
        .wait_text("[data-destination=\"ledger\"]", "connect")
        .await;
    assert!(
        ledger.contains("Connection refused (os error 111)"),
        "{ledger}"
    );
    let errors = b
        .script(
            "return [...document.querySelectorAll('[data-destination=\"ledger\"] .error-text')] \
               .map((e) => [e.innerText.length, e.scrollWidth <= e.clientWidth + 1]);",
            serde_json::json!([]),
        )
        .await;
    let errors = errors.as_array().cloned().unwrap_or_default();
    assert_eq!(errors.len(), 2, "{errors:?}");
    for e in &errors {
        assert!(e[0].as_u64() > Some(40) && e[1] == true, "{errors:?}");
    }

    // A long ID: its first 12 characters, the whole in its title, a copy button.
    b.goto(&gw.admin_url("/ui/#/deliveries?route=github&outcome=forwarded"))
        .await;
    let cell = format!("#deliveries tr[data-event-id=\"{github_id}\"] .id");
    b.wait_text(&cell, &github_id[..12]).await;
    let shown = b
        .script(
            "const e = document.querySelector(arguments[0]); \
             const t = e.querySelector('[title]'); \
             return [t.innerText.trim(), t.title, !!e.querySelector('button.copy')];",
            serde_json::json!([cell]),
        )
        .await;
    assert_eq!(shown[0], format!("{}…", &github_id[..12]), "{shown}");
    assert_eq!(shown[1], github_id, "{shown}");
    assert_eq!(shown[2], true, "{shown}");
    b.click(&format!("{cell} button.copy")).await;
    b.wait_true(
        "const b = document.querySelector(arguments[0]); return !!b && !!b.dataset.copied;",
        serde_json::json!([format!("{cell} button.copy")]),
        "the copy button answered",
    )
    .await;
    // The unrouted page: the paths beside, the closest one offered, no query kept.
    b.goto(&gw.admin_url("/ui/#/unrouted")).await;
    let unrouted = b.wait_text("#view", "did you mean").await;
    assert!(unrouted.contains("/webhooks/github"), "{unrouted}");
    assert!(unrouted.contains("/webhooks/shop"), "{unrouted}");
    assert!(!b.page_text().await.contains("s3cret"), "{unrouted}");

    b.resize(390, 844).await;
    for (hash, css, needle, png) in &pages {
        b.goto(&gw.admin_url(&format!("/ui/{hash}"))).await;
        b.wait_text(css, needle).await;
        let v = assert_layout(&b, &format!("{hash} on a phone")).await;
        eprintln!("{hash} at 390: {v}");
        if png == "inspector-list.png" {
            b.screenshot(&shot("inspector-phone.png")).await;
        }
        if png == "inspector-queue.png" {
            b.screenshot(&shot("inspector-phone-queue.png")).await;
        }
    }
    b.resize(1280, 800).await;

    // Pause billing with a reason, from the page: shown there and in /overview.
    b.goto(&gw.admin_url("/ui/#/queues/shop")).await;
    let billing = "#controls tr[data-destination=\"billing\"]";
    b.wait_text(billing, "running").await;
    b.fill(&format!("{billing} .reason-in"), "deploy 42").await;
    b.fill(&format!("{billing} .until-in"), "2h").await;
    b.click(&format!("{billing} button.pause")).await;
    b.wait_text(billing, "deploy 42").await;
    b.wait_text(billing, "paused").await;
    b.wait_text("#status", "Paused billing").await;
    b.full_page_screenshot(&shot("inspector-paused.png")).await;
    let v = admin_until(&gw, "/overview", "billing paused", |v| {
        queue_of(v, "shop", "billing")["paused"]["reason"] == "deploy 42"
    })
    .await;
    assert!(
        queue_of(&v, "shop", "billing")["paused"]["until"].is_string(),
        "{v}"
    );
    assert!(queue_of(&v, "shop", "audit")["paused"].is_null(), "{v}");
    b.goto(&gw.admin_url("/ui/#/routes")).await;
    b.wait_text(
        "tr[data-route=\"shop\"] [data-destination=\"billing\"]",
        "paused",
    )
    .await;
    // Resume it.
    b.goto(&gw.admin_url("/ui/#/queues/shop")).await;
    b.wait_text(billing, "deploy 42").await;
    b.click(&format!("{billing} button.resume")).await;
    b.wait_text(billing, "running").await;
    admin_until(&gw, "/overview", "billing resumed", |v| {
        let q = queue_of(v, "shop", "billing");
        q.is_object() && q["paused"].is_null()
    })
    .await;

    // A per-event retry of one dead event: audit takes it now.
    let one = &shop_ids[1];
    failing.set_status_for(one, Some(200));
    let row = format!("#events tr[data-event-id=\"{one}\"][data-destination=\"audit\"]");
    b.wait_text(&row, "dead").await;
    b.click(&format!("{row} button.retry")).await;
    b.wait_text("#status", "Queued again").await;
    assert!(
        eventually(Duration::from_secs(10), || failing.effects_for(one) == 1).await,
        "the retried event reaches audit"
    );

    // A bulk retry: the plan's count shown before anything runs, then the retry.
    b.goto(&gw.admin_url("/ui/#/queues/shop")).await;
    b.wait_text("#events", "dead").await;
    b.script(
        "const s = document.getElementById('b-destination'); s.value = 'audit'; \
         s.dispatchEvent(new Event('input', { bubbles: true })); \
         const t = document.getElementById('b-state'); t.value = 'dead'; \
         t.dispatchEvent(new Event('input', { bubbles: true })); return null;",
        serde_json::json!([]),
    )
    .await;
    b.click("#b-plan").await;
    let plan = b.wait_text("#plan", "would be retried").await;
    assert!(plan.starts_with("3 events"), "{plan}");
    let count = b
        .script(
            "return document.getElementById('plan-count').dataset.count;",
            serde_json::json!([]),
        )
        .await;
    assert_eq!(count, "3");
    b.wait_text("#b-run", "Retry 3 events").await;
    b.screenshot(&shot("inspector-plan.png")).await;
    // The plan changed nothing.
    let v = admin_until(&gw, "/overview", "still dead", |v| {
        queue_of(v, "shop", "audit")["dead"] == 3
    })
    .await;
    assert_eq!(queue_of(&v, "shop", "audit")["dead"], 3);
    failing.set_status(200);
    b.click("#b-run").await;
    b.wait_text("#status", "Retried 3 event").await;
    for id in &shop_ids {
        assert!(
            eventually(Duration::from_secs(10), || failing.effects_for(id) == 1).await,
            "{id} reaches audit once"
        );
    }
    admin_until(&gw, "/overview", "nothing dead", |v| {
        queue_of(v, "shop", "audit")["dead"] == 0
    })
    .await;
    drop(b);
    gw.stop().await;
}

// Issue 41, "Access": the Audit page shows every operator action, under the token's
// name, to a `read` token too; its filters narrow it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_page_shows_who_did_what() {
    let up = Upstream::start().await;
    let store = "[server]\nadmin_listen = \"127.0.0.1:0\"\n[[server.admin_tokens]]\nname = \"grafana\"\ntoken = \"inspector-read-token\"\nrole = \"read\"\n[[server.admin_tokens]]\nname = \"oncall\"\ntoken = \"inspector-operate-token\"\nrole = \"operate\"\n[store]\nbackend = \"memory\"";
    let gw = TestGateway::start(&stripe_config(&up, store, "")).await;
    let r = gw
        .deliver("stripe", &stripe_body("evt_audited"), "evt_audited")
        .await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    let forget = |token: &'static str| {
        client()
            .delete(gw.admin_url("/keys/stripe/evt_audited"))
            .bearer_auth(token)
            .send()
    };
    assert_eq!(
        forget("inspector-read-token")
            .await
            .expect("forget")
            .status(),
        403
    );
    assert_eq!(
        forget("inspector-operate-token")
            .await
            .expect("forget")
            .status(),
        200
    );

    let b = Browser::start(1280, 800).await;
    b.goto(&gw.admin_url("/ui/#/audit")).await;
    b.wait_text("#login", "Admin token").await;
    b.fill("#token", "inspector-read-token\u{E007}").await;
    b.wait_text("nav", "Audit").await;
    let row = b.wait_text("#audit", "forget").await;
    for shown in [
        "oncall",
        "operate",
        "stripe/evt_audited",
        "ok 200",
        "forgotten=true",
    ] {
        assert!(row.contains(shown), "{shown:?} in {row:?}");
    }
    assert!(
        !row.contains("grafana"),
        "a refused request is not an action: {row:?}"
    );
    let page = b.page_text().await;
    assert!(!page.contains("inspector-operate-token"), "{page}");
    // Filtered by an action nobody took: nothing.
    b.goto(&gw.admin_url("/ui/#/audit?action=reload")).await;
    b.wait_text("#view", "No action recorded").await;
    gw.stop().await;
}
