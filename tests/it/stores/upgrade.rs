//! Upgrades: the store a previous release wrote is read by this one. For every
//! release's folder in `tests/fixtures/upgrade/` (written by its `make.sh`): a disk
//! store file and a Redis key space, each with three events queued behind a paused
//! destination. This build opens them, resumes the destination, and delivers each
//! event once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::queue::delivery::admin;
use crate::support::{RedisServer, TestGateway, Upstream, eventually};

/// Every release's fixtures, oldest first.
fn releases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upgrade");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("tests/fixtures/upgrade")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    assert!(
        !out.is_empty(),
        "no release's fixtures in {}",
        root.display()
    );
    out
}

/// The route the fixtures were written with, delivering to `up`.
fn config(store: &str, up: &Upstream) -> String {
    format!(
        r#"{store}
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_upgrade_fixture"]
delivery = "queue"
upstream = "{}"
retry = {{ max_attempts = 20, initial = "1s", max_delay = "1s", max_age = "3650d" }}
breaker = false
"#,
        up.url("/stripe")
    )
}

const EVENTS: [&str; 3] = ["evt_upgrade_1", "evt_upgrade_2", "evt_upgrade_3"];

/// The gateway sees the paused destination and its three events, and once resumed
/// delivers each once.
async fn delivers_what_it_holds(gw: &TestGateway, up: &Upstream, release: &Path) {
    let (status, listed) = admin(gw, "GET", "/events/stripe").await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        listed["events"].as_array().map(Vec::len),
        Some(EVENTS.len()),
        "{}: {listed}",
        release.display()
    );
    assert_eq!(up.count(), 0, "paused: nothing is sent before the resume");
    let (status, resumed) = admin(gw, "POST", "/events/stripe/resume").await;
    assert_eq!(status, 200, "{resumed}");
    assert!(
        eventually(Duration::from_secs(30), || EVENTS
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "{}: each event delivered: {:?}",
        release.display(),
        up.received()
            .iter()
            .map(|r| r.header("idempotency-key").map(str::to_owned))
            .collect::<Vec<_>>()
    );
    assert_eq!(up.count(), EVENTS.len(), "each once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_store_written_by_each_earlier_release_is_delivered() {
    for release in releases() {
        let dir = tempfile::tempdir().expect("dir");
        let db = dir.path().join("hookgate.db");
        std::fs::copy(release.join("hookgate.db"), &db).expect("copy the fixture");
        let up = Upstream::start().await;
        let store = format!("[store]\nbackend = \"disk\"\npath = \"{}\"", db.display());
        let gw = TestGateway::start(&config(&store, &up)).await;
        delivers_what_it_holds(&gw, &up, &release).await;
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_key_space_written_by_each_earlier_release_is_delivered() {
    for release in releases() {
        let redis = RedisServer::start_from_rdb(&release.join("dump.rdb"));
        let up = Upstream::start().await;
        let store = format!(
            "[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"hookgate:\"",
            redis.url()
        );
        let gw = TestGateway::start(&config(&store, &up)).await;
        delivers_what_it_holds(&gw, &up, &release).await;
        gw.stop().await;
    }
}
