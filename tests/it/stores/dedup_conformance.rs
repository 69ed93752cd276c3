//! One conformance suite for the claims' contract ([`DedupStore`]), run on the memory
//! store, the disk store and a real Redis: each property a test per store
//! (`<property>_on_<store>`). Expiry is tested with short TTLs and real sleeps (a
//! paused tokio clock does not move the memory store's `Instant`s nor Redis's clock).

use std::sync::Arc;
use std::time::Duration;

use hookgate::store::{
    Claim, DedupKey, DedupStore, DiskStore, MemoryStore, RedisStore, Settled, Store, Token,
};

use crate::support::RedisServer;

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(300);

fn key(name: &str) -> DedupKey {
    DedupKey::new("test:", "route", name)
}

fn claimed(c: Claim) -> Token {
    match c {
        Claim::Claimed(t) => t,
        other => panic!("expected Claimed, got {other:?}"),
    }
}

/// The whole contract on one store, property after property (each uses keys of its
/// own): for stores a test builds itself (a cluster, TLS, Sentinel).
pub(crate) async fn conformance(store: Store) {
    let s = &store;
    the_first_claim_wins_and_a_second_is_in_flight(s).await;
    another_token_settles_nothing(s).await;
    completing_makes_copies_duplicates_of_the_first_body(s).await;
    releasing_frees_the_key_for_the_next_copy(s).await;
    releasing_an_absent_key_counts_as_released(s).await;
    a_lease_expires_and_its_late_finisher_is_refused(s).await;
    a_finisher_whose_lease_ran_out_alone_still_records_the_effect(s).await;
    the_done_record_lives_for_its_own_ttl(s).await;
    the_dedup_window_ends(s).await;
    forget_frees_a_done_key(s).await;
    keys_of_different_routes_do_not_collide(s).await;
    the_store_answers_a_ping(s).await;
}

/// First claim wins; a second sees it in flight.
async fn the_first_claim_wins_and_a_second_is_in_flight(s: &Store) {
    let k = key("a");
    claimed(s.claim(&k, "fp1", LONG).await.expect("claim"));
    assert_eq!(
        s.claim(&k, "fp1", LONG).await.expect("claim"),
        Claim::InFlight
    );
}

/// Settling with another token leaves the claim alone.
async fn another_token_settles_nothing(s: &Store) {
    let k = key("stranger");
    claimed(s.claim(&k, "fp1", LONG).await.expect("claim"));
    let stranger = Token::random();
    assert_eq!(
        s.complete(&k, &stranger, "fp1", LONG)
            .await
            .expect("complete"),
        Settled::NotOwner
    );
    assert_eq!(
        s.release(&k, &stranger, "fp1").await.expect("release"),
        Settled::NotOwner
    );
    assert_eq!(
        s.claim(&k, "fp1", LONG).await.expect("claim"),
        Claim::InFlight
    );
}

/// Completing makes later copies duplicates carrying the first body's fingerprint.
/// Completing twice is harmless; releasing a completed claim does not undo it.
async fn completing_makes_copies_duplicates_of_the_first_body(s: &Store) {
    let k = key("done");
    let t = claimed(s.claim(&k, "fp1", LONG).await.expect("claim"));
    assert_eq!(
        s.complete(&k, &t, "fp1", LONG).await.expect("complete"),
        Settled::Applied
    );
    assert_eq!(
        s.claim(&k, "fp2", LONG).await.expect("claim"),
        Claim::Done {
            fingerprint: "fp1".into()
        }
    );
    assert_eq!(
        s.complete(&k, &t, "fp1", LONG).await.expect("complete"),
        Settled::Applied
    );
    assert_eq!(
        s.release(&k, &t, "fp1").await.expect("release"),
        Settled::NotOwner
    );
    assert!(matches!(
        s.claim(&k, "fp1", LONG).await.expect("claim"),
        Claim::Done { .. }
    ));
}

/// Releasing frees the key for the next copy.
async fn releasing_frees_the_key_for_the_next_copy(s: &Store) {
    let k = key("b");
    let t = claimed(s.claim(&k, "fp", LONG).await.expect("claim"));
    assert_eq!(
        s.release(&k, &t, "fp").await.expect("release"),
        Settled::Applied
    );
    let t2 = claimed(s.claim(&k, "fp", LONG).await.expect("claim"));
    assert_ne!(t, t2, "each claim gets its own token");
    // The old token cannot touch the new claim.
    assert_eq!(
        s.release(&k, &t, "fp").await.expect("release"),
        Settled::NotOwner
    );
    assert_eq!(
        s.complete(&k, &t, "fp", LONG).await.expect("complete"),
        Settled::NotOwner
    );
    assert_eq!(
        s.claim(&k, "fp", LONG).await.expect("claim"),
        Claim::InFlight
    );
}

/// Releasing an absent key counts as released.
async fn releasing_an_absent_key_counts_as_released(s: &Store) {
    assert_eq!(
        s.release(&key("absent"), &Token::random(), "fp")
            .await
            .expect("release"),
        Settled::Applied
    );
}

/// A lease expires: a crashed forward cannot block the event for ever.
async fn a_lease_expires_and_its_late_finisher_is_refused(s: &Store) {
    let k = key("c");
    let old = claimed(s.claim(&k, "fp", SHORT).await.expect("claim"));
    tokio::time::sleep(SHORT + Duration::from_millis(200)).await;
    let newer = claimed(
        s.claim(&k, "fp", LONG)
            .await
            .expect("claim after lease expiry"),
    );
    // The late finisher of the expired claim must not overwrite the newer claim.
    assert_eq!(
        s.complete(&k, &old, "fp", LONG).await.expect("complete"),
        Settled::NotOwner
    );
    assert_eq!(
        s.claim(&k, "fp", LONG).await.expect("claim"),
        Claim::InFlight
    );
    assert_eq!(
        s.complete(&k, &newer, "fp", LONG).await.expect("complete"),
        Settled::Applied
    );
}

/// A finisher whose lease ran out with nobody else claiming still records the effect.
async fn a_finisher_whose_lease_ran_out_alone_still_records_the_effect(s: &Store) {
    let k = key("d");
    let t = claimed(s.claim(&k, "fp", SHORT).await.expect("claim"));
    tokio::time::sleep(SHORT + Duration::from_millis(200)).await;
    assert_eq!(
        s.complete(&k, &t, "fp", LONG).await.expect("complete"),
        Settled::Applied
    );
    assert!(matches!(
        s.claim(&k, "fp", LONG).await.expect("claim"),
        Claim::Done { .. }
    ));
}

/// The done record lives for its own TTL, not the remainder of the lease it replaced.
async fn the_done_record_lives_for_its_own_ttl(s: &Store) {
    let k = key("e");
    let t = claimed(s.claim(&k, "fp", SHORT).await.expect("claim"));
    assert_eq!(
        s.complete(&k, &t, "fp", LONG).await.expect("complete"),
        Settled::Applied
    );
    tokio::time::sleep(SHORT + Duration::from_millis(200)).await;
    assert!(
        matches!(
            s.claim(&k, "fp", LONG).await.expect("claim"),
            Claim::Done { .. }
        ),
        "done record vanished with the lease"
    );
}

/// The dedup window ends: after dedup_ttl the key is free again.
async fn the_dedup_window_ends(s: &Store) {
    let k = key("f");
    let t = claimed(s.claim(&k, "fp", LONG).await.expect("claim"));
    assert_eq!(
        s.complete(&k, &t, "fp", SHORT).await.expect("complete"),
        Settled::Applied
    );
    tokio::time::sleep(SHORT + Duration::from_millis(200)).await;
    claimed(
        s.claim(&k, "fp", LONG)
            .await
            .expect("claim after dedup window"),
    );
}

/// forget frees a done key for a deliberate redelivery.
async fn forget_frees_a_done_key(s: &Store) {
    let k = key("g");
    let t = claimed(s.claim(&k, "fp", LONG).await.expect("claim"));
    s.complete(&k, &t, "fp", LONG).await.expect("complete");
    assert!(s.forget(&k).await.expect("forget"));
    assert!(!s.forget(&k).await.expect("forget again"));
    claimed(s.claim(&k, "fp", LONG).await.expect("claim after forget"));
}

/// Keys of different routes do not collide.
async fn keys_of_different_routes_do_not_collide(s: &Store) {
    let a = DedupKey::new("test:", "one", "same");
    let b = DedupKey::new("test:", "two", "same");
    claimed(s.claim(&a, "fp", LONG).await.expect("claim"));
    claimed(s.claim(&b, "fp", LONG).await.expect("claim"));
}

async fn the_store_answers_a_ping(s: &Store) {
    s.ping().await.expect("ping");
}

/// Fifty concurrent claims of one key: exactly one wins.
async fn fifty_concurrent_claims_have_one_winner(store: &Store) {
    let store = Arc::new(store.clone());
    let k = key("concurrent");
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (s, k) = (store.clone(), k.clone());
        tasks.push(tokio::spawn(async move { s.claim(&k, "fp", LONG).await }));
    }
    let mut winners = 0;
    for t in tasks {
        match t.await.expect("task").expect("claim") {
            Claim::Claimed(_) => winners += 1,
            Claim::InFlight => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(winners, 1, "exactly one of 50 concurrent claims must win");
}

// ---- The stores ----

fn memory() -> ((), Store) {
    ((), Store::Memory(MemoryStore::new()))
}

fn disk() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("dir");
    let store = DiskStore::open(&dir.path().join("data/hookgate.db")).expect("open");
    (dir, Store::Disk(store))
}

fn redis() -> (RedisServer, Store) {
    let redis = RedisServer::start();
    let store = RedisStore::new(&redis.url(), Duration::from_secs(2)).expect("store");
    (redis, Store::Redis(store))
}

/// Each property a test per store, `<property>_on_<store>`, so a failure names its
/// store. What a store needs kept (its folder, its Redis) lives as long as the test.
macro_rules! on_each_store {
    ($($property:ident: $memory:ident, $disk:ident, $redis:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $memory() {
            let (_held, store) = memory();
            $property(&store).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $disk() {
            let (_held, store) = disk();
            $property(&store).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $redis() {
            let (_held, store) = redis();
            $property(&store).await;
        }
    )*};
}

on_each_store! {
    the_first_claim_wins_and_a_second_is_in_flight:
        the_first_claim_wins_and_a_second_is_in_flight_on_memory,
        the_first_claim_wins_and_a_second_is_in_flight_on_disk,
        the_first_claim_wins_and_a_second_is_in_flight_on_redis;
    another_token_settles_nothing:
        another_token_settles_nothing_on_memory,
        another_token_settles_nothing_on_disk,
        another_token_settles_nothing_on_redis;
    completing_makes_copies_duplicates_of_the_first_body:
        completing_makes_copies_duplicates_of_the_first_body_on_memory,
        completing_makes_copies_duplicates_of_the_first_body_on_disk,
        completing_makes_copies_duplicates_of_the_first_body_on_redis;
    releasing_frees_the_key_for_the_next_copy:
        releasing_frees_the_key_for_the_next_copy_on_memory,
        releasing_frees_the_key_for_the_next_copy_on_disk,
        releasing_frees_the_key_for_the_next_copy_on_redis;
    releasing_an_absent_key_counts_as_released:
        releasing_an_absent_key_counts_as_released_on_memory,
        releasing_an_absent_key_counts_as_released_on_disk,
        releasing_an_absent_key_counts_as_released_on_redis;
    a_lease_expires_and_its_late_finisher_is_refused:
        a_lease_expires_and_its_late_finisher_is_refused_on_memory,
        a_lease_expires_and_its_late_finisher_is_refused_on_disk,
        a_lease_expires_and_its_late_finisher_is_refused_on_redis;
    a_finisher_whose_lease_ran_out_alone_still_records_the_effect:
        a_finisher_whose_lease_ran_out_alone_still_records_the_effect_on_memory,
        a_finisher_whose_lease_ran_out_alone_still_records_the_effect_on_disk,
        a_finisher_whose_lease_ran_out_alone_still_records_the_effect_on_redis;
    the_done_record_lives_for_its_own_ttl:
        the_done_record_lives_for_its_own_ttl_on_memory,
        the_done_record_lives_for_its_own_ttl_on_disk,
        the_done_record_lives_for_its_own_ttl_on_redis;
    the_dedup_window_ends:
        the_dedup_window_ends_on_memory,
        the_dedup_window_ends_on_disk,
        the_dedup_window_ends_on_redis;
    forget_frees_a_done_key:
        forget_frees_a_done_key_on_memory,
        forget_frees_a_done_key_on_disk,
        forget_frees_a_done_key_on_redis;
    keys_of_different_routes_do_not_collide:
        keys_of_different_routes_do_not_collide_on_memory,
        keys_of_different_routes_do_not_collide_on_disk,
        keys_of_different_routes_do_not_collide_on_redis;
    the_store_answers_a_ping:
        the_store_answers_a_ping_on_memory,
        the_store_answers_a_ping_on_disk,
        the_store_answers_a_ping_on_redis;
    fifty_concurrent_claims_have_one_winner:
        fifty_concurrent_claims_have_one_winner_on_memory,
        fifty_concurrent_claims_have_one_winner_on_disk,
        fifty_concurrent_claims_have_one_winner_on_redis;
}

/// On Redis the claim sets a PX lease, and the done record the dedup TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_keeps_the_done_record_for_the_dedup_ttl() {
    let (redis, s) = redis();
    let k = key("a");
    let t = claimed(s.claim(&k, "fp1", LONG).await.expect("claim"));
    assert_eq!(
        s.complete(&k, &t, "fp1", LONG).await.expect("complete"),
        Settled::Applied
    );
    let ttl: i64 = redis.cmd(redis::cmd("PTTL").arg("test:route:a"));
    assert!(ttl > 50_000 && ttl <= 60_000, "done record TTL {ttl} ms");
}

/// What the disk store answers is on disk: reopened (a restart), it holds every done
/// record it had, and a second process cannot open the same file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_store_keeps_its_records_across_a_reopen() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.db");
    let (done, leased) = (key("done"), key("leased"));
    {
        let s = DiskStore::open(&path).expect("open");
        let t = claimed(s.claim(&done, "fp-done", LONG).await.expect("claim"));
        assert_eq!(
            s.complete(&done, &t, "fp-done", LONG)
                .await
                .expect("complete"),
            Settled::Applied
        );
        claimed(s.claim(&leased, "fp", LONG).await.expect("claim"));
        assert!(
            DiskStore::open(&path).is_err(),
            "one process per database file"
        );
    }
    // The writer thread lets go of the file once the last handle is dropped.
    let mut reopened = None;
    for _ in 0..50 {
        if let Ok(s) = DiskStore::open(&path) {
            reopened = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s = reopened.expect("reopen after the first store is dropped");
    assert_eq!(
        s.claim(&done, "fp-done", LONG).await.expect("claim"),
        Claim::Done {
            fingerprint: "fp-done".into()
        }
    );
    // A claim in flight is a lease of the process that took it, held in that
    // process: its forward ended with it, and the next copy is forwarded (with the
    // same Idempotency-Key) without waiting for the lease.
    assert!(matches!(
        s.claim(&leased, "fp", LONG).await.expect("claim"),
        Claim::Claimed(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_fails_fast_when_redis_is_down_and_recovers() {
    let mut redis = RedisServer::start();
    let store =
        Store::Redis(RedisStore::new(&redis.url(), Duration::from_millis(500)).expect("store"));
    claimed(store.claim(&key("up"), "fp", LONG).await.expect("claim"));
    redis.stop();
    let started = std::time::Instant::now();
    let err = store.claim(&key("down"), "fp", LONG).await;
    assert!(
        err.is_err(),
        "claim against a stopped redis must fail, got {err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "store call was not bounded"
    );
    redis.restart();
    let mut ok = false;
    for _ in 0..100 {
        if matches!(
            store.claim(&key("back"), "fp", LONG).await,
            Ok(Claim::Claimed(_))
        ) {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "store did not recover after redis came back");
}
