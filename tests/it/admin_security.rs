//! The admin API under the third review's findings: replays go where the config sends
//! an event and carry the accepted delivery's headers, malformed admin paths are
//! answered (never a panic), and no route name and event ID reaches another route's
//! keys in Redis. Real signed requests to a real gateway, recording upstreams, the
//! admin listener over HTTP, and a real `redis-server`.

use crate::support::{TestGateway, Upstream, raw_http, send};

/// Calls the admin listener: the status and the JSON body (`Null` if it is not JSON).
async fn admin(gw: &TestGateway, method: &str, path: &str) -> (u16, serde_json::Value) {
    let headers = [("X-Requested-By".to_owned(), "hookgate-tests".to_owned())];
    let r = send(method, &gw.admin_url(path), &headers, Vec::new()).await;
    (r.status, serde_json::from_str(&r.body).unwrap_or_default())
}

fn sync_route(up: &Upstream) -> String {
    format!(
        "[store]\nbackend = \"memory\"\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n",
        up.url("/hooks")
    )
}

/// `POST /deliveries/replay` (no ID) and its neighbours, over a real connection: each
/// gets 404 with a JSON error, and the listener goes on answering.
#[tokio::test]
async fn admin_paths_without_a_delivery_id_are_answered_not_found() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&sync_route(&up)).await;
    for path in [
        "/deliveries/replay",
        "/deliveries//replay",
        "/deliveries/a/b/replay",
        "/deliveries/%2F/replay/",
    ] {
        let raw = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Requested-By: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let answer = raw_http(gw.admin, raw.as_bytes()).await;
        assert!(
            answer.starts_with("HTTP/1.1 404"),
            "POST {path}: {answer:?}"
        );
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(body.trim())
            .unwrap_or_else(|e| panic!("POST {path}: not JSON ({e}): {body:?}"));
        assert!(v["error"].is_string(), "POST {path}: {v}");
    }
    let (status, _) = admin(&gw, "GET", "/healthz").await;
    assert_eq!(status, 200);
    gw.stop().await;
}
