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
