//! Pull destinations (`pull = true`) and `hookgate listen`, the real binary, against
//! an in-process gateway on the disk store and on Redis: events that arrived while no
//! consumer ran are delivered in order and once when one starts; a consumer killed
//! mid-forward lets its lease run out and the event comes again with the same
//! `Idempotency-Key`; two consumers share the work, keeping per-key order; tokens.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::destinations::{store, typed};
use crate::process::binary::BIN;
use crate::support::{RedisServer, TestGateway, Upstream, eventually, send};

const ADMIN_TOKEN: &str = "admin-token-for-pull-tests";
const PULL_TOKEN: &str = "alice-pull-token";

/// A queue route with a pull destination `laptop` (its own token, a 2 s lease, per-key
/// order) and another, `ci`, with a token of its own.
fn config(store: &str) -> String {
    format!(
        r#"[server]
shutdown_grace = "2s"
admin_listen = "127.0.0.1:0"
admin_token = "{ADMIN_TOKEN}"
{store}
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_test"]
delivery = "queue"
retry = {{ max_attempts = 50, initial = "50ms", max_delay = "200ms" }}
[[routes.destinations]]
name = "laptop"
pull = {{ token = "{PULL_TOKEN}", lease = "2s" }}
order_by = "json:/data/object/customer"
[[routes.destinations]]
name = "ci"
pull = {{ token = "ci-token" }}
"#
    )
}

/// A running `hookgate listen`, killed when dropped (a failed test leaves none behind).
struct Listening(Option<Child>);

impl Listening {
    fn kill(mut self) {
        if let Some(c) = self.0.take() {
            crate::support::kill_group(c);
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            crate::support::kill_group(c);
        }
    }
}

/// `hookgate listen` to `up`, in a process group of its own.
fn listen(gw: &TestGateway, up: &Upstream, extra: &[&str]) -> Listening {
    use std::os::unix::process::CommandExt as _;
    Command::new(BIN)
        .args([
            "listen",
            "--route",
            "stripe",
            "--destination",
            "laptop",
            "--forward-to",
            &up.url("/local"),
            "--admin",
            &format!("http://{}", gw.admin),
            "--pull-token",
            PULL_TOKEN,
            "--concurrency",
            "4",
        ])
        .args(extra)
        .env_remove("HOOKGATE_ADMIN_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map(|c| Listening(Some(c)))
        .expect("start hookgate listen")
}

fn queue_events(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let key = format!("cus_{}", i % 2);
            (format!("evt_pull_{i:02}"), key)
        })
        .collect()
}

/// The event IDs the upstream acknowledged for one key, in order.
fn acknowledged(up: &Upstream, ids: &[(String, String)], key: &str) -> Vec<String> {
    let of_key: Vec<&String> = ids
        .iter()
        .filter(|(_, k)| k == key)
        .map(|(i, _)| i)
        .collect();
    up.received()
        .iter()
        .filter(|r| (200..300).contains(&r.status))
        .filter_map(|r| r.header("idempotency-key").map(str::to_owned))
        .filter(|id| of_key.contains(&id))
        .collect()
}

async fn pulled_in_order_and_once(redis: Option<&RedisServer>) {
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(20));
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&config(&store(redis, dir.path()))).await;
    // Nothing listens yet: the events wait.
    let ids = queue_events(10);
    for (id, key) in &ids {
        let r = gw
            .deliver("stripe", &typed(id, "invoice.paid", key), id)
            .await;
        assert_eq!((r.status, r.outcome()), (200, "queued"), "{}", r.body);
    }
    assert_eq!(up.count(), 0);
    let first = listen(&gw, &up, &[]);
    // A second consumer shares the work.
    let second = listen(&gw, &up, &[]);
    assert!(
        eventually(Duration::from_secs(30), || ids
            .iter()
            .all(|(id, _)| up.effects_for(id) == 1))
        .await,
        "every waiting event delivered: {}",
        up.count()
    );
    for key in ["cus_0", "cus_1"] {
        let want: Vec<String> = ids
            .iter()
            .filter(|(_, k)| k == key)
            .map(|(i, _)| i.clone())
            .collect();
        assert_eq!(
            acknowledged(&up, &ids, key),
            want,
            "per-key order across consumers"
        );
    }
    assert_eq!(up.count(), ids.len(), "each once");
    // The headers hookgate forwards, as a push would carry them.
    let r = &up.received()[0];
    assert!(r.header("idempotency-key").is_some());
    assert_eq!(r.header("hookgate-route"), Some("stripe"));
    // The inspector's data: the destination's consumers.
    let overview = send(
        "GET",
        &gw.admin_url("/overview"),
        &[("Authorization".into(), format!("Bearer {ADMIN_TOKEN}"))],
        Vec::new(),
    )
    .await;
    assert!(
        overview.body.contains("hookgate-listen"),
        "{}",
        overview.body
    );
    first.kill();
    second.kill();
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_waiting_for_two_listens_are_delivered_in_order_and_once_on_the_disk_store() {
    pulled_in_order_and_once(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_waiting_for_two_listens_are_delivered_in_order_and_once_on_redis() {
    let redis = RedisServer::start();
    pulled_in_order_and_once(Some(&redis)).await;
}

async fn a_killed_listen_lets_its_lease_run_out(redis: Option<&RedisServer>) {
    let up = Upstream::start().await;
    // The local handler hangs (and would fail): the listen is killed while it
    // forwards.
    up.set_delay(Duration::from_secs(20));
    up.set_status(500);
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&config(&store(redis, dir.path()))).await;
    let body = typed("evt_pull_killed", "invoice.paid", "cus_k");
    assert_eq!(
        gw.deliver("stripe", &body, "evt_pull_killed")
            .await
            .outcome(),
        "queued"
    );
    let first = listen(&gw, &up, &[]);
    assert!(
        eventually(Duration::from_secs(15), || up.count() == 1).await,
        "the first listen sent it"
    );
    first.kill();
    up.set_delay(Duration::ZERO);
    up.set_status(200);
    let second = listen(&gw, &up, &[]);
    assert!(
        eventually(Duration::from_secs(20), || up
            .effects_for("evt_pull_killed")
            == 1)
        .await,
        "delivered again once the lease ran out"
    );
    let keys: Vec<String> = up
        .received()
        .iter()
        .filter_map(|r| r.header("idempotency-key").map(str::to_owned))
        .collect();
    // Two requests for the one event, the first cut off with the killed listen, each
    // with the event's own Idempotency-Key.
    assert_eq!(up.count(), 2);
    assert_eq!(
        keys,
        ["evt_pull_killed", "evt_pull_killed"],
        "same Idempotency-Key"
    );
    second.kill();
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_killed_mid_forward_lets_its_lease_run_out_on_the_disk_store() {
    a_killed_listen_lets_its_lease_run_out(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_killed_mid_forward_lets_its_lease_run_out_on_redis() {
    let redis = RedisServer::start();
    a_killed_listen_lets_its_lease_run_out(Some(&redis)).await;
}

/// `POST` to the admin listener with a bearer token (or none).
async fn post(
    gw: &TestGateway,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, serde_json::Value) {
    let mut headers = vec![("X-Requested-By".to_owned(), "hookgate-tests".to_owned())];
    if let Some(t) = token {
        headers.push(("Authorization".into(), format!("Bearer {t}")));
    }
    let r = send(
        "POST",
        &gw.admin_url(path),
        &headers,
        body.as_bytes().to_vec(),
    )
    .await;
    (r.status, serde_json::from_str(&r.body).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_token_leases_only_its_destination_and_a_wrong_one_leases_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&config(&store(None, dir.path()))).await;
    let body = typed("evt_pull_auth", "invoice.paid", "cus_a");
    assert_eq!(
        gw.deliver("stripe", &body, "evt_pull_auth").await.outcome(),
        "queued"
    );
    for token in [None, Some("wrong"), Some("ci-token")] {
        let (status, v) = post(&gw, "/pull/stripe/laptop?max=10", token, "").await;
        assert_eq!(status, 401, "{token:?}: {v}");
    }
    // The destination's token reads nothing else: not another destination, not the
    // other admin endpoints.
    let (status, _) = post(&gw, "/pull/stripe/ci", Some(PULL_TOKEN), "").await;
    assert_eq!(status, 401);
    for path in [
        "/events/stripe",
        "/overview",
        "/deliveries",
        "/alerts",
        "/metrics",
    ] {
        let r = send(
            "GET",
            &gw.admin_url(path),
            &[("Authorization".into(), format!("Bearer {PULL_TOKEN}"))],
            Vec::new(),
        )
        .await;
        assert_eq!(r.status, 401, "{path}");
    }
    // Nothing was leased by the refused calls: the event is there for the right one.
    let (status, leased) = post(&gw, "/pull/stripe/laptop?max=10", Some(PULL_TOKEN), "").await;
    assert_eq!(status, 200, "{leased}");
    let events = leased["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 1, "{leased}");
    assert_eq!(events[0]["event_id"], "evt_pull_auth");
    let lease = events[0]["lease"].as_str().unwrap_or_default().to_owned();
    // Leased: another call finds nothing due (waiting a little for it).
    let (_, none) = post(&gw, "/pull/stripe/laptop?wait=300ms", Some(PULL_TOKEN), "").await;
    assert_eq!(none["events"].as_array().map(Vec::len), Some(0), "{none}");
    let body = serde_json::json!({ "leases": [lease] }).to_string();
    let (status, renewed) = post(&gw, "/pull/stripe/laptop/renew", Some(PULL_TOKEN), &body).await;
    assert_eq!(
        (status, renewed["done"].as_u64()),
        (200, Some(1)),
        "{renewed}"
    );
    let (status, acked) = post(&gw, "/pull/stripe/laptop/ack", Some(ADMIN_TOKEN), &body).await;
    assert_eq!((status, acked["done"].as_u64()), (200, Some(1)), "{acked}");
    // A second ack: the lease is no longer held; nothing changes, and it says so.
    let (status, again) = post(&gw, "/pull/stripe/laptop/ack", Some(PULL_TOKEN), &body).await;
    assert_eq!(status, 200);
    assert_eq!(again["done"], 0, "{again}");
    assert_eq!(again["lost"].as_array().map(Vec::len), Some(1), "{again}");
    let (status, bad) = post(
        &gw,
        "/pull/stripe/laptop/ack",
        Some(PULL_TOKEN),
        "{\"leases\": [\"x\"]}",
    )
    .await;
    assert_eq!(status, 400, "{bad}");
    gw.stop().await;
}
