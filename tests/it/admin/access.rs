//! Named admin tokens and the audit (issue 41, "Access"): a `read` token lists and
//! shows and is refused (403) every operator action; an `operate` one acts; a wrong
//! token gets 401 and nothing is done or recorded; every action is in `GET /audit`
//! (newest first, with the token's name, the action, its target, when and its result)
//! on the memory, disk and Redis stores, kept across a restart on disk and shared by
//! two replicas on Redis; a full Redis loses the record, never the action; a reload
//! swaps the tokens. Real gateways over HTTP.

use std::time::Duration;

use serde_json::Value;

use crate::support::{RedisServer, TestGateway, Upstream, eventually, send, stripe_body};

const READ: &str = "read-t0ken-grafana";
const OPERATE: &str = "operate-t0ken-oncall";

/// The `[server]` table with a named `read` token (`grafana`) and an `operate` one
/// (`oncall`).
fn server() -> String {
    format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"2s\"\n[[server.admin_tokens]]\nname = \"grafana\"\ntoken = \"{READ}\"\nrole = \"read\"\n[[server.admin_tokens]]\nname = \"oncall\"\ntoken = \"{OPERATE}\"\nrole = \"operate\"\n"
    )
}

/// A queue route `stripe` on `store` (disk or Redis), or a sync one on memory.
fn config(up: &Upstream, store: &str, queue: bool) -> String {
    let delivery = if queue {
        "delivery = \"queue\"\nretry = { max_attempts = 1, initial = \"50ms\", max_delay = \"50ms\" }\nbreaker = false\n"
    } else {
        ""
    };
    format!(
        "{}{store}\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\nupstream_timeout = \"2s\"\n{delivery}",
        server(),
        up.url("/hooks")
    )
}

fn disk(dir: &std::path::Path) -> String {
    format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\n",
        dir.join("hookgate.db").display()
    )
}

fn redis(r: &RedisServer) -> String {
    format!("[store]\nbackend = \"redis\"\nurl = \"{}\"\n", r.url())
}

/// Calls the admin listener with `token` (none: no `Authorization`): the status and
/// the JSON body (`Null` if it is not JSON).
async fn call(gw: &TestGateway, token: Option<&str>, method: &str, path: &str) -> (u16, Value) {
    let mut headers = vec![("X-Requested-By".to_owned(), "hookgate-tests".to_owned())];
    if let Some(t) = token {
        headers.push(("Authorization".to_owned(), format!("Bearer {t}")));
    }
    let r = send(method, &gw.admin_url(path), &headers, Vec::new()).await;
    (r.status, serde_json::from_str(&r.body).unwrap_or_default())
}

/// `GET /audit` (with the read token) once it lists at least `n` records.
async fn audit(gw: &TestGateway, query: &str, n: usize) -> Vec<Value> {
    let mut last = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        let (status, body) = call(gw, Some(READ), "GET", &format!("/audit{query}")).await;
        assert_eq!(status, 200, "{body}");
        last = body["audit"].as_array().cloned().unwrap_or_default();
        if last.len() >= n {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("/audit{query}: {} of {n} records: {last:?}", last.len());
}

/// A sample of `/metrics`, read with the read token.
async fn metric(gw: &TestGateway, sample: &str) -> f64 {
    let r = send(
        "GET",
        &gw.admin_url("/metrics"),
        &[("Authorization".to_owned(), format!("Bearer {READ}"))],
        Vec::new(),
    )
    .await;
    assert_eq!(r.status, 200);
    r.body
        .lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// A dead event `id` on the queue route (its upstream answers 503, one attempt).
async fn dead_event(gw: &TestGateway, up: &Upstream, id: &str) {
    up.set_status(503);
    let r = gw.deliver("stripe", &stripe_body(id), id).await;
    assert_eq!(r.outcome(), "queued", "{}", r.body);
    let mut dead = false;
    for _ in 0..200 {
        let (_, v) = call(gw, Some(READ), "GET", &format!("/events/stripe/{id}")).await;
        if v["state"] == "dead" {
            dead = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(dead, "{id} died");
}

/// The operator actions a `read` token is refused: each changes state or hands over
/// a secret.
const OPERATOR_ACTIONS: [(&str, &str); 9] = [
    ("POST", "/events/stripe/retry?event_id=evt_dead"),
    ("POST", "/events/stripe/purge?event_id=evt_dead"),
    ("POST", "/events/stripe/pause?reason=deploy"),
    ("POST", "/events/stripe/resume"),
    ("POST", "/reload"),
    ("DELETE", "/keys/stripe/evt_dead"),
    ("POST", "/deliveries/000000000000-00000000/replay"),
    ("GET", "/handshakes/stripe"),
    ("DELETE", "/handshakes/stripe"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_reads_and_is_refused_every_operator_action() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&config(&up, &disk(dir.path()), true)).await;
    dead_event(&gw, &up, "evt_dead").await;

    // Reads: lists, details, the overview, the log, metrics, the audit, the page.
    for path in [
        "/overview",
        "/events/stripe",
        "/events/stripe/evt_dead",
        "/deliveries",
        "/alerts",
        "/audit",
    ] {
        let (status, body) = call(&gw, Some(READ), "GET", path).await;
        assert_eq!(status, 200, "GET {path}: {body}");
    }
    assert!(metric(&gw, "hookgate_config_last_reload_ok").await >= 1.0);
    // Every operator action: 403, a JSON error that says why, and nothing done.
    for (method, path) in OPERATOR_ACTIONS {
        let (status, body) = call(&gw, Some(READ), method, path).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
        let why = body["error"].as_str().unwrap_or_default();
        assert!(
            why.contains("grafana") && why.contains("operate"),
            "{method} {path}: {body}"
        );
        assert!(!why.contains(READ), "{body}");
    }
    let (_, v) = call(&gw, Some(READ), "GET", "/events/stripe/evt_dead").await;
    assert_eq!(
        v["state"], "dead",
        "a refused retry or purge changed nothing"
    );
    let (_, v) = call(&gw, Some(READ), "GET", "/events/stripe").await;
    assert!(v["destinations"][0]["paused"].is_null(), "{v}");
    assert!(
        metric(
            &gw,
            "hookgate_admin_actions_total{action=\"retry\",result=\"denied\"}"
        )
        .await
            >= 1.0
    );

    // No token, or a wrong one: 401, nothing done and nothing recorded as done.
    for token in [None, Some("operate-t0ken-oncalL"), Some("")] {
        let (status, _) = call(&gw, token, "POST", "/events/stripe/retry?event_id=evt_dead").await;
        assert_eq!(status, 401, "{token:?}");
        let (status, _) = call(&gw, token, "GET", "/overview").await;
        assert_eq!(status, 401, "{token:?}");
    }
    let (_, v) = call(&gw, Some(READ), "GET", "/events/stripe/evt_dead").await;
    assert_eq!(v["state"], "dead");

    // The operate token acts: pause, resume, retry (the event is delivered), forget.
    up.set_status(200);
    for (path, method) in [
        ("/events/stripe/pause?reason=deploy", "POST"),
        ("/events/stripe/resume", "POST"),
        ("/events/stripe/retry?event_id=evt_dead", "POST"),
    ] {
        let (status, body) = call(&gw, Some(OPERATE), method, path).await;
        assert_eq!(status, 200, "{method} {path}: {body}");
    }
    assert!(
        eventually(Duration::from_secs(10), || up.effects_for("evt_dead") == 1).await,
        "the retried event is delivered"
    );
    let (status, body) = call(&gw, Some(OPERATE), "DELETE", "/keys/stripe/evt_dead").await;
    assert_eq!(status, 200, "{body}");

    // Only the operate token's actions are in the audit (the refusals and 401s are
    // not), newest first.
    let records = audit(&gw, "", 4).await;
    assert_eq!(records.len(), 4, "{records:?}");
    let actions: Vec<&str> = records
        .iter()
        .map(|r| r["action"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(actions, ["forget", "retry", "resume", "pause"]);
    for r in &records {
        assert_eq!(r["name"], "oncall", "{r}");
        assert_eq!(r["role"], "operate", "{r}");
        assert_eq!(r["result"], "ok", "{r}");
        assert!(r["at"].as_str().is_some_and(|a| a.ends_with('Z')), "{r}");
    }
    assert_eq!(records[0]["target"], "stripe/evt_dead");
    assert_eq!(records[1]["target"], "stripe/evt_dead");
    assert_eq!(records[1]["message"], "retried=1");
    assert_eq!(records[3]["target"], "stripe");
    assert_eq!(records[3]["detail"], "reason=deploy");
    let ids: Vec<&str> = records
        .iter()
        .map(|r| r["id"].as_str().unwrap_or(""))
        .collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    // Filters: by action and by name.
    let only = audit(&gw, "?action=retry", 1).await;
    assert_eq!(only.len(), 1);
    assert!(audit(&gw, "?name=grafana", 0).await.is_empty());
    assert_eq!(audit(&gw, "?name=oncall&limit=2", 2).await.len(), 2);
    // No token in any answer.
    let (_, all) = call(&gw, Some(READ), "GET", "/audit").await;
    let text = all.to_string();
    assert!(!text.contains(READ) && !text.contains(OPERATE), "{text}");
    gw.stop().await;
}

/// A failed or refused action is recorded with its result and what the answer said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_action_is_recorded_with_its_result() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(&up, "[store]\nbackend = \"memory\"\n", false)).await;
    // A retry naming nothing, and a queue action on a route without a queue.
    let (status, _) = call(&gw, Some(OPERATE), "POST", "/events/stripe/retry").await;
    assert_eq!(status, 404);
    let (status, _) = call(&gw, Some(OPERATE), "DELETE", "/keys/nowhere/evt_1").await;
    assert_eq!(status, 404);
    let records = audit(&gw, "", 2).await;
    assert_eq!(records[0]["action"], "forget");
    assert_eq!(records[0]["target"], "nowhere/evt_1");
    assert_eq!(records[0]["result"], "refused");
    assert_eq!(records[0]["status"], 404);
    assert_eq!(records[0]["message"], "no such route");
    assert_eq!(records[1]["action"], "retry");
    assert_eq!(records[1]["result"], "refused");
    assert!(
        records[1]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no queue route")),
        "{}",
        records[1]
    );
    gw.stop().await;
}

/// On disk the audit outlives the process: the file holds it when reopened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_store_keeps_the_audit_across_a_restart() {
    use hookgate::store::AuditStore as _;
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&config(&up, &disk(dir.path()), true)).await;
    let (status, _) = call(
        &gw,
        Some(OPERATE),
        "POST",
        "/events/stripe/pause?reason=before",
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = call(&gw, Some(OPERATE), "POST", "/events/stripe/resume").await;
    assert_eq!(status, 200);
    assert_eq!(audit(&gw, "", 2).await.len(), 2);
    gw.stop().await;
    // The stopped gateway's last handles let go of the file as they stop.
    let file = dir.path().join("hookgate.db");
    let mut reopened = None;
    for _ in 0..250 {
        if let Ok(s) = hookgate::store::DiskStore::open(&file) {
            reopened = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let store = reopened.expect("the file is free again");
    let kept = store
        .audit_list("hookgate:#audit", 0, 10)
        .await
        .expect("list");
    let actions: Vec<String> = kept
        .iter()
        .map(|b| {
            let v: Value = serde_json::from_slice(b).expect("json");
            v["action"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(actions, ["resume", "pause"]);
}

/// On Redis two replicas write and read one audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_redis_share_one_audit() {
    let r = RedisServer::start();
    let up = Upstream::start().await;
    let text = config(&up, &redis(&r), true);
    let a = TestGateway::start(&text).await;
    let b = TestGateway::start(&text).await;
    let (status, _) = call(&a, Some(OPERATE), "POST", "/events/stripe/pause?reason=a").await;
    assert_eq!(status, 200);
    assert_eq!(audit(&a, "", 1).await.len(), 1);
    let (status, _) = call(&b, Some(OPERATE), "POST", "/events/stripe/resume").await;
    assert_eq!(status, 200);
    for gw in [&a, &b] {
        let records = audit(gw, "", 2).await;
        let actions: Vec<&str> = records
            .iter()
            .map(|r| r["action"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(actions, ["resume", "pause"]);
    }
    a.stop().await;
    b.stop().await;
}

/// A Redis past its `maxmemory` does not take the record: the action still happens,
/// and the loss is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_loses_the_record_but_never_the_action() {
    let r = RedisServer::start();
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(&up, &redis(&r), false)).await;
    assert_eq!(
        gw.deliver("stripe", &stripe_body("evt_full"), "evt_full")
            .await
            .outcome(),
        "forwarded"
    );
    let _: () = r.cmd(
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg("noeviction"),
    );
    let _: () = r.cmd(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("1"));
    let (status, body) = call(&gw, Some(OPERATE), "DELETE", "/keys/stripe/evt_full").await;
    assert_eq!(status, 200, "the action happens: {body}");
    assert_eq!(body["forgotten"], true);
    let mut lost = 0.0;
    for _ in 0..200 {
        lost = metric(&gw, "hookgate_audit_not_recorded_total{reason=\"store\"}").await;
        if lost >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(lost, 1.0);
    let _: () = r.cmd(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("0"));
    let (_, v) = call(&gw, Some(READ), "GET", "/audit").await;
    assert_eq!(v["audit"].as_array().map(Vec::len), Some(0), "{v}");
    gw.stop().await;
}

/// A reload swaps the tokens; one that would leave the listener without any is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_swaps_the_tokens() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("hookgate.toml");
    let text = config(&up, "[store]\nbackend = \"memory\"\n", false);
    std::fs::write(&file, &text).expect("write");
    let gw = TestGateway::start_file(&file).await;
    // The operate token becomes `rotated`; the read one goes.
    let rotated = text.replace(OPERATE, "rotated-t0ken").replace(
        &format!("name = \"grafana\"\ntoken = \"{READ}\"\nrole = \"read\"\n"),
        "name = \"grafana\"\ntoken = \"new-read-t0ken\"\nrole = \"read\"\n",
    );
    std::fs::write(&file, &rotated).expect("write");
    let (status, body) = call(&gw, Some(OPERATE), "POST", "/reload").await;
    assert_eq!(status, 200, "{body}");
    for (token, want) in [
        (OPERATE, 401),
        (READ, 401),
        ("rotated-t0ken", 200),
        ("new-read-t0ken", 200),
    ] {
        let (status, _) = call(&gw, Some(token), "GET", "/overview").await;
        assert_eq!(status, want, "{token}");
    }
    let (status, _) = call(&gw, Some("new-read-t0ken"), "POST", "/reload").await;
    assert_eq!(status, 403);
    // A file without tokens does not open the listener.
    let open = rotated
        .split("[[server.admin_tokens]]")
        .next()
        .unwrap_or_default()
        .to_owned()
        + &rotated[rotated.find("[store]").unwrap_or(0)..];
    std::fs::write(&file, &open).expect("write");
    let (status, body) = call(&gw, Some("rotated-t0ken"), "POST", "/reload").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("admin_tokens"), "{body}");
    let (status, _) = call(&gw, None, "GET", "/overview").await;
    assert_eq!(status, 401);
    // The reloads are in the audit, under the token that made them.
    let records = audit_with(&gw, "new-read-t0ken", 2).await;
    assert_eq!(records[0]["action"], "reload");
    assert_eq!(records[0]["result"], "refused");
    assert_eq!(records[1]["action"], "reload");
    assert_eq!(records[1]["name"], "oncall");
    assert_eq!(records[1]["result"], "ok");
    gw.stop().await;
}

/// `GET /audit` with `token`, once it lists at least `n` records.
async fn audit_with(gw: &TestGateway, token: &str, n: usize) -> Vec<Value> {
    let mut last = Vec::new();
    for _ in 0..400 {
        let (status, body) = call(gw, Some(token), "GET", "/audit").await;
        assert_eq!(status, 200, "{body}");
        last = body["audit"].as_array().cloned().unwrap_or_default();
        if last.len() >= n {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{} of {n} records: {last:?}", last.len());
}

/// `admin_token` acts as an operate token named `admin`; pull tokens still reach only
/// their own destination's endpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unnamed_token_acts_as_admin() {
    let up = Upstream::start().await;
    let text = config(&up, "[store]\nbackend = \"memory\"\n", false).replace(
        "shutdown_grace = \"2s\"\n",
        "shutdown_grace = \"2s\"\nadmin_token = \"the-admin-t0ken\"\n",
    );
    let gw = TestGateway::start(&text).await;
    let (status, _) = call(&gw, Some("the-admin-t0ken"), "DELETE", "/keys/stripe/evt_x").await;
    assert_eq!(status, 200);
    let records = audit(&gw, "", 1).await;
    assert_eq!(records[0]["name"], "admin");
    assert_eq!(records[0]["role"], "operate");
    assert_eq!(records[0]["forgotten"], Value::Null);
    assert_eq!(records[0]["message"], "forgotten=false");
    gw.stop().await;
}
