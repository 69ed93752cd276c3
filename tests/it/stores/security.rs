//! The disk store against the reviews' findings (docs/security.md, "Threats found by
//! review"): below the disk's reserve a copy is answered from what the store holds, and
//! the store's file and folder are their owner's only. Real HTTP to a real gateway.

use crate::support::{TestGateway, Upstream};

fn route(name: &str, provider: &str, secrets: &str, up: &Upstream, extra: &str) -> String {
    format!(
        "[[routes]]\nname = \"{name}\"\npath = \"/{name}\"\nprovider = \"{provider}\"\nsecrets = {secrets}\nupstream = \"{}\"\n{extra}\n",
        up.url(&format!("/{name}"))
    )
}

/// Second review, 8: below `min_free_space` the disk store refused copies of events it
/// held like new events, so with `on_error = "forward"` a replay of an already
/// forwarded delivery was forwarded again. A copy is answered from what the store
/// holds; only new events are refused (and, with `on_error = "forward"`, forwarded
/// without a claim, as the operator chose).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_the_reserve_copies_are_answered_from_what_the_store_holds() {
    let Some(disk) = crate::queue::delivery::SmallDisk::mount("16m") else {
        eprintln!("SKIPPED: mounting a small tmpfs needs root; this test runs in CI");
        return;
    };
    let up = Upstream::start().await;
    let config = format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\nmin_free_space = \"4MiB\"\n{}{}",
        disk.path().join("hookgate.db").display(),
        route(
            "stripe",
            "stripe",
            "[\"whsec_x\"]",
            &up,
            "on_error = \"forward\""
        ),
        route(
            "stripeq",
            "stripe",
            "[\"whsec_x\"]",
            &up,
            "on_error = \"forward\"\ndelivery = \"queue\""
        ),
    );
    let gw = TestGateway::start(&config).await;
    let held = r#"{"id":"evt_held"}"#;
    let queued = r#"{"id":"evt_held_q"}"#;
    assert_eq!(gw.deliver("stripe", held, "x").await.outcome(), "forwarded");
    assert_eq!(gw.deliver("stripeq", queued, "x").await.outcome(), "queued");
    assert!(
        crate::support::eventually(std::time::Duration::from_secs(5), || up
            .effects_for("evt_held_q")
            == 1)
        .await
    );
    // Another process takes the space: 1 MiB left, below the 4 MiB reserve.
    let filler = crate::queue::delivery::fill_to_the_last_byte(disk.path());
    let len = std::fs::metadata(&filler).expect("filler").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .and_then(|f| f.set_len(len.saturating_sub(1 << 20)))
        .expect("free 1 MiB");
    for (name, body) in [("stripe", held), ("stripeq", queued)] {
        let r = gw.deliver(name, body, "x").await;
        assert_eq!(
            (r.status, r.outcome()),
            (200, "duplicate"),
            "{name}: a copy below the reserve: {}",
            r.body
        );
    }
    // A new event is refused by the store (and forwarded without a claim, as chosen).
    let r = gw.deliver("stripe", r#"{"id":"evt_new"}"#, "x").await;
    assert_eq!(r.outcome(), "forwarded_unclaimed", "{}", r.body);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(up.count_for("evt_held"), 1, "never forwarded again");
    assert_eq!(up.count_for("evt_held_q"), 1, "never forwarded again");
    drop(filler);
    gw.stop().await;
}

/// Second review, 9: the disk store's file (queued events' headers and bodies, e.g.
/// Postmark's Basic credentials) and its folder were created 0644 and 0755. They are
/// created 0600 and 0700, and an existing file is restricted at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_store_file_and_folder_are_their_owners_only() {
    use std::os::unix::fs::PermissionsExt as _;
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let folder = dir.path().join("data");
    let file = folder.join("hookgate.db");
    let config = format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\n{}",
        file.display(),
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    let gw = TestGateway::start(&config).await;
    assert_eq!(mode(&folder), 0o700, "folder");
    assert_eq!(mode(&file), 0o600, "file");
    // The journal holds the same bodies and headers until a checkpoint.
    assert_eq!(mode(&folder.join("hookgate.db.journal")), 0o600, "journal");
    gw.stop().await;
    // A file left readable by an earlier version is restricted when it is opened.
    let old = dir.path().join("old.db");
    drop(hookgate::store::DiskStore::open(&old).expect("open"));
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut reopened = None;
    for _ in 0..50 {
        // The first handle's writer lets go of the file as it stops.
        if let Ok(s) = hookgate::store::DiskStore::open(&old) {
            reopened = Some(s);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(reopened.is_some(), "reopened");
    assert_eq!(mode(&old), 0o600, "restricted when opened");
}
