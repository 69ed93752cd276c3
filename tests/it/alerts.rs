//! `[[alerts]]`: each incident is sent once when it opens and once when it resolves,
//! to a real receiving endpoint, signed with Standard Webhooks; `GET /alerts` lists
//! what is open. On the disk store (notifications through its queue), on Redis with
//! two replicas (each sent once, whichever replica saw it), and on the memory store
//! (sent directly).

use std::collections::BTreeMap;
use std::time::Duration;

use hookgate::provider::standard_webhooks::{StandardScheme, SwKey};

use crate::queue::delivery::admin;
use crate::support::{RedisServer, TestGateway, Upstream, eventually, stripe_body};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Two queue routes and an `[[alerts]]` section to `receiver`: `stripe` (to `up`, with
/// a quick breaker) and `other` (to `dead_up`, one attempt, no breaker: its events
/// die), and a route `quiet` with `silence` and a `refusals` rule.
fn config(store: &str, receiver: &Upstream, up: &Upstream, dead_up: &Upstream) -> String {
    format!(
        r#"[server]
shutdown_grace = "2s"
{store}
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_test"]
delivery = "queue"
upstream = "{}"
retry = {{ max_attempts = 50, initial = "50ms", max_delay = "100ms" }}
breaker = {{ failures = 3, probe = "1s" }}
[[routes]]
name = "other"
path = "/webhooks/other"
provider = "stripe"
secrets = ["whsec_test"]
delivery = "queue"
upstream = "{}"
retry = {{ max_attempts = 1 }}
breaker = false
[[alerts]]
name = "ops"
to = "{}"
format = "json"
secret = "{SECRET}"
on = ["destination_failing", "breaker_open", "dead_letter"]
"#,
        up.url("/up"),
        dead_up.url("/up"),
        receiver.url("/alerts")
    )
}

/// The notifications the receiver accepted: `(kind, route, state)` → how many.
fn notifications(receiver: &Upstream) -> BTreeMap<(String, String, String), usize> {
    let mut out = BTreeMap::new();
    for r in receiver.received().iter().filter(|r| r.status == 200) {
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
        let key = (
            v["kind"].as_str().unwrap_or("?").to_owned(),
            v["route"].as_str().unwrap_or("?").to_owned(),
            v["state"].as_str().unwrap_or("?").to_owned(),
        );
        *out.entry(key).or_insert(0) += 1;
    }
    out
}

/// The incidents of the scenario: `(kind, route)`.
const INCIDENTS: [(&str, &str); 4] = [
    ("breaker_open", "stripe"),
    ("dead_letter", "other"),
    ("destination_failing", "other"),
    ("destination_failing", "stripe"),
];

fn got(receiver: &Upstream, (kind, route): (&str, &str), state: &str) -> usize {
    notifications(receiver)
        .get(&(kind.to_owned(), route.to_owned(), state.to_owned()))
        .copied()
        .unwrap_or(0)
}

/// Every notification is signed: its `webhook-id` is its `id`, and its signature is
/// the Standard Webhooks one of that ID, its timestamp and its body.
fn signed_as_standard_webhooks(receiver: &Upstream) {
    let scheme = StandardScheme::with_prefix(
        "webhook",
        vec![SwKey::parse(SECRET.as_bytes()).expect("secret")],
    );
    for r in receiver.received() {
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
        let id = r.header("webhook-id").expect("webhook-id");
        assert_eq!(Some(id), v["id"].as_str());
        assert_eq!(r.header("idempotency-key"), Some(id));
        let ts: u64 = r
            .header("webhook-timestamp")
            .and_then(|t| t.parse().ok())
            .expect("webhook-timestamp");
        let want = scheme.sign(id, ts, &r.body).expect("sign");
        let signature = want
            .iter()
            .find(|(n, _)| n.as_str() == "webhook-signature")
            .map(|(_, v)| v.as_str());
        assert_eq!(r.header("webhook-signature"), signature, "{id}");
    }
}

/// `receiver` answering 503 at first: the first notifications are refused, retried
/// from the queue, and accepted once it answers 200.
async fn incidents_open_and_resolve_once(
    gateways: &[&TestGateway],
    receiver: &Upstream,
    up: &Upstream,
    dead_up: &Upstream,
) {
    let gw = gateways[0];
    // `destination_failing` is each replica's own streak of FAILING_AFTER failures:
    // enough events that one replica of two surely tries that many.
    let events =
        usize::try_from(hookgate::observe::alerts::FAILING_AFTER).unwrap_or(3) * gateways.len();
    for n in 0..events {
        let id = format!("evt_alert_{n}");
        let via = gateways[n % gateways.len()];
        assert_eq!(
            via.deliver("stripe", &stripe_body(&id), &id)
                .await
                .outcome(),
            "queued"
        );
        let other = format!("evt_alert_other_{n}");
        assert_eq!(
            via.deliver("other", &stripe_body(&other), &other)
                .await
                .outcome(),
            "queued"
        );
    }
    assert!(
        eventually(Duration::from_secs(30), || receiver.count() >= 1).await,
        "a notification was tried"
    );
    receiver.set_status(200);
    let opened = || INCIDENTS.iter().all(|i| got(receiver, *i, "open") >= 1);
    assert!(
        eventually(Duration::from_secs(30), opened).await,
        "each incident was sent when it opened: {:?}",
        notifications(receiver)
    );
    let (status, open) = admin(gw, "GET", "/alerts").await;
    assert_eq!(status, 200, "{open}");
    let mut kinds: Vec<(String, String)> = open["incidents"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| {
                    assert_eq!(i["state"], "open");
                    assert!(i["message"].as_str().is_some_and(|m| !m.is_empty()), "{i}");
                    assert!(i["opened_at"].is_string(), "{i}");
                    (
                        i["kind"].as_str().unwrap_or("").to_owned(),
                        i["route"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    kinds.sort();
    let want: Vec<(String, String)> = INCIDENTS
        .iter()
        .map(|(k, r)| ((*k).to_owned(), (*r).to_owned()))
        .collect();
    assert_eq!(kinds, want, "{open}");
    // The receivers are fixed: the breaker's probe is delivered, the dead events are
    // retried; each incident resolves.
    up.set_status(200);
    dead_up.set_status(200);
    let (status, retried) = admin(gw, "POST", "/events/other/retry?all_dead=true").await;
    assert_eq!(status, 200, "{retried}");
    let resolved = || INCIDENTS.iter().all(|i| got(receiver, *i, "resolved") >= 1);
    assert!(
        eventually(Duration::from_secs(30), resolved).await,
        "each incident was sent when it resolved: {:?}",
        notifications(receiver)
    );
    // Two more looks of every replica: nothing is sent again.
    tokio::time::sleep(hookgate::observe::alerts::EVERY * 2 + Duration::from_millis(500)).await;
    let sent = notifications(receiver);
    assert_eq!(sent.len(), INCIDENTS.len() * 2, "{sent:?}");
    for ((kind, route, state), n) in sent {
        assert_eq!(n, 1, "{kind} on {route}, {state}: sent {n} times");
    }
    signed_as_standard_webhooks(receiver);
    let (_, open) = admin(gw, "GET", "/alerts").await;
    assert_eq!(
        open["incidents"].as_array().map(Vec::len),
        Some(0),
        "{open}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incidents_open_and_resolve_once_on_the_disk_store() {
    let (receiver, up, dead_up) = (
        Upstream::start().await,
        Upstream::start().await,
        Upstream::start().await,
    );
    up.set_status(503);
    dead_up.set_status(500);
    receiver.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let store = format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"",
        dir.path().join("hookgate.db").display()
    );
    let gw = TestGateway::start(&config(&store, &receiver, &up, &dead_up)).await;
    incidents_open_and_resolve_once(&[&gw], &receiver, &up, &dead_up).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incidents_are_sent_once_across_two_replicas_on_redis() {
    let redis = RedisServer::start();
    let (receiver, up, dead_up) = (
        Upstream::start().await,
        Upstream::start().await,
        Upstream::start().await,
    );
    up.set_status(503);
    dead_up.set_status(500);
    receiver.set_status(503);
    let store = format!("[store]\nbackend = \"redis\"\nurl = \"{}\"", redis.url());
    let cfg = config(&store, &receiver, &up, &dead_up);
    let a = TestGateway::start(&cfg).await;
    let b = TestGateway::start(&cfg).await;
    incidents_open_and_resolve_once(&[&a, &b], &receiver, &up, &dead_up).await;
    a.stop().await;
    b.stop().await;
}

/// The texts a Slack-format receiver accepted.
fn slack_texts(receiver: &Upstream) -> Vec<String> {
    receiver
        .received()
        .iter()
        .filter(|r| r.status == 200)
        .filter_map(|r| {
            let v: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
            v["text"].as_str().map(str::to_owned)
        })
        .collect()
}

fn count(texts: &[String], needle: &str) -> usize {
    texts.iter().filter(|t| t.contains(needle)).count()
}

/// Delivers a verified event every half second until `until` holds (at most 40 s).
async fn keep_delivering(gw: &TestGateway, sent: &mut u32, until: impl Fn() -> bool) -> bool {
    for _ in 0..80 {
        *sent += 1;
        let id = format!("evt_good_{sent}");
        let r = gw.deliver("stripe", &stripe_body(&id), &id).await;
        assert_eq!(r.outcome(), "forwarded", "{}", r.body);
        if until() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    until()
}

/// On the memory store (no queue: sent directly), in Slack's format: a route gone
/// silent, and a rule on refusals (`bad_signature`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_provider_and_rising_refusals_open_and_resolve_once_in_slack_format() {
    let (receiver, up) = (Upstream::start().await, Upstream::start().await);
    let cfg = format!(
        r#"[store]
backend = "memory"
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_test"]
upstream = "{}"
silence = "3s"
refusals = {{ outcome = "bad_signature", over = 2, within = "10s" }}
[[alerts]]
to = "{}"
on = ["provider_silent", "refusals"]
"#,
        up.url("/up"),
        receiver.url("/slack")
    );
    let gw = TestGateway::start(&cfg).await;
    assert!(
        eventually(Duration::from_secs(20), || count(
            &slack_texts(&receiver),
            "provider_silent on stripe."
        ) == 1)
        .await,
        "silent: {:?}",
        slack_texts(&receiver)
    );
    let text = slack_texts(&receiver).join("\n");
    assert!(
        text.starts_with(":rotating_light: hookgate: provider_silent on stripe."),
        "{text}"
    );
    for n in 0..3 {
        let body = stripe_body(&format!("evt_bad_{n}"));
        let r = crate::support::post(
            &gw.url("/webhooks/stripe"),
            &[("Stripe-Signature".to_owned(), "t=1,v1=00".to_owned())],
            body.into_bytes(),
        )
        .await;
        assert_eq!(r.status, 401, "{}", r.body);
    }
    // The provider is back: a verified delivery every half second from now on.
    let mut sent = 0;
    assert!(
        keep_delivering(&gw, &mut sent, || {
            let t = slack_texts(&receiver);
            count(&t, "refusals on stripe.") == 1
                && count(&t, "resolved: provider_silent on stripe") == 1
        })
        .await,
        "refusals opened, silence resolved: {:?}",
        slack_texts(&receiver)
    );
    let (_, open) = admin(&gw, "GET", "/alerts").await;
    let kinds: Vec<&str> = open["incidents"]
        .as_array()
        .map(|a| a.iter().filter_map(|i| i["kind"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(kinds, ["refusals"], "{open}");
    let refusal = slack_texts(&receiver)
        .into_iter()
        .find(|t| t.contains("refusals on stripe."))
        .unwrap_or_default();
    assert!(
        refusal.contains("rotated"),
        "bad signatures name the usual cause: {refusal}"
    );
    // Ten seconds on, the refusals fall out of the window.
    assert!(
        keep_delivering(&gw, &mut sent, || count(
            &slack_texts(&receiver),
            "resolved: refusals on stripe"
        ) == 1)
        .await,
        "{:?}",
        slack_texts(&receiver)
    );
    // Nothing is sent twice (two more looks).
    let deadline = std::time::Instant::now() + hookgate::observe::alerts::EVERY * 2;
    keep_delivering(&gw, &mut sent, || std::time::Instant::now() > deadline).await;
    let texts = slack_texts(&receiver);
    assert_eq!(texts.len(), 4, "{texts:?}");
    gw.stop().await;
}

/// A store that stops answering opens `store_trouble` (sent directly: the store can
/// hold nothing), and it resolves once the store answers again for a while.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_trouble_opens_when_redis_goes_away_and_resolves_when_it_is_back() {
    let mut redis = RedisServer::start();
    let (receiver, up) = (Upstream::start().await, Upstream::start().await);
    let cfg = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n[[alerts]]\nto = \"{}\"\nformat = \"json\"\non = [\"store_trouble\"]\n",
        redis.url(),
        up.url("/up"),
        receiver.url("/alerts")
    );
    let gw = TestGateway::start(&cfg).await;
    redis.stop();
    assert!(
        eventually(Duration::from_secs(20), || got(
            &receiver,
            ("store_trouble", "?"),
            "open"
        ) == 1)
        .await,
        "{:?}",
        notifications(&receiver)
    );
    let (status, open) = admin(&gw, "GET", "/alerts").await;
    assert_eq!(status, 503, "the store's incidents cannot be read: {open}");
    redis.restart();
    assert!(
        eventually(Duration::from_secs(40), || got(
            &receiver,
            ("store_trouble", "?"),
            "resolved"
        ) == 1)
        .await,
        "{:?}",
        notifications(&receiver)
    );
    let (status, open) = admin(&gw, "GET", "/alerts").await;
    assert_eq!(
        (status, open["incidents"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{open}"
    );
    gw.stop().await;
}
