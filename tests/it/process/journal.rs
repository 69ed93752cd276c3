//! The disk store's journal with the real binary: a gateway killed with a torn last
//! frame in its journal starts again without that frame and with every one before it.

use redb::ReadableDatabase as _;

use crate::process::binary::{Gateway, disk_sync, signed, write_config};
use crate::support::{Upstream, free_port, post, stripe_body};

/// Where each frame of the journal's live part starts and ends: from the start of the
/// file, the frames whose checksum holds and whose numbers follow on from the
/// checkpoint's (the format is in `src/store/disk/journal.rs`).
fn live_frames(journal: &[u8], checkpointed: u64) -> Vec<(usize, usize)> {
    let mut frames = Vec::new();
    let (mut at, mut next) = (0, checkpointed + 1);
    while let Some(header) = journal.get(at..at + 20) {
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let sum = u64::from_le_bytes(header[4..12].try_into().expect("8 bytes"));
        let seq = u64::from_le_bytes(header[12..20].try_into().expect("8 bytes"));
        let Some(covered) = journal.get(at + 12..at + 12 + len) else {
            break;
        };
        if len < 8 || seq != next || xxhash_rust::xxh3::xxh3_64(covered) != sum {
            break;
        }
        frames.push((at, at + 12 + len));
        at += 12 + len;
        next += 1;
    }
    frames
}

/// The number of the last frame the database file holds (its last checkpoint), read
/// from the file of a stopped gateway.
fn checkpointed(db: &std::path::Path) -> u64 {
    let db = redb::Database::open(db).expect("open the store's file");
    let txn = db.begin_read().expect("read");
    let table: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("journal_checkpoint");
    let t = txn.open_table(table).expect("the checkpoint's table");
    t.get("").expect("get").map_or(0, |v| v.value())
}

/// A power cut while the last batch's frame was being written: the frame is torn, and
/// its batch was never acknowledged. The next start replays every frame before it and
/// leaves it out, so the first deliveries are duplicates and the last one, never
/// stored, goes through again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_last_journal_frame_is_left_out_and_every_frame_before_it_replayed() {
    let up = Upstream::start().await;
    let port = free_port();
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(&dir, &disk_sync(port, &up));
    let db = dir.path().join("state/hookgate.db");
    let journal = dir.path().join("state/hookgate.db.journal");
    // A checkpoint (once a second) between the last delivery and the kill leaves no
    // live frame to tear: then another round.
    for round in 0..5 {
        let ids: Vec<String> = (0..5).map(|i| format!("evt_torn_{round}_{i}")).collect();
        let mut first = Gateway::spawn(&cfg, port);
        for id in &ids {
            let body = stripe_body(id);
            let r = post(&first.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
            assert_eq!(r.outcome(), "forwarded", "{}", r.body);
        }
        let _ = first.child.kill();
        let _ = first.child.wait();
        drop(first);

        let bytes = std::fs::read(&journal).expect("the journal");
        let frames = live_frames(&bytes, checkpointed(&db));
        let last = ids.last().expect("ids");
        let Some(&(start, end)) = frames.last() else {
            continue;
        };
        let holds = |(s, e): (usize, usize), id: &str| {
            bytes[s..e].windows(id.len()).any(|w| w == id.as_bytes())
        };
        if !holds((start, end), last) {
            continue;
        }
        // The earlier deliveries of this round in frames before it, or checkpointed.
        assert!(!ids[..4].iter().any(|id| holds((start, end), id)));
        let torn = std::fs::OpenOptions::new()
            .write(true)
            .open(&journal)
            .expect("open the journal");
        std::os::unix::fs::FileExt::write_all_at(&torn, &[0xa5; 16], (end - 16) as u64)
            .expect("tear the last frame");
        drop(torn);

        let second = Gateway::spawn(&cfg, port);
        for id in &ids[..4] {
            let body = stripe_body(id);
            let r = post(&second.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
            assert_eq!(r.outcome(), "duplicate", "{id}: {}", r.body);
            assert_eq!(up.count_for(id), 1, "{id}");
        }
        let body = stripe_body(last);
        let r = post(&second.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
        assert_eq!(
            r.outcome(),
            "forwarded",
            "the torn batch was never stored: {}",
            r.body
        );
        assert_eq!(up.count_for(last), 2);
        return;
    }
    panic!("in 5 rounds, a checkpoint always came between the last delivery and the kill");
}
