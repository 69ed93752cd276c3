//! The `hookgate::testing` example of the docs, run for real.

use hookgate::replay::Replay;
use hookgate::testing::{Gateway, Recorder};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_testing_example_works() {
    let upstream = Recorder::start().await;
    let gateway = Gateway::start(&format!(
        r#"
        [[routes]]
        name = "stripe"
        path = "/webhooks/stripe"
        provider = "stripe"
        secrets = ["whsec_test"]
        upstream = "{}"
        "#,
        upstream.url("/stripe")
    ))
    .await;

    let body = r#"{"id":"evt_1","type":"invoice.paid"}"#;
    assert_eq!(
        gateway.deliver("stripe", body, "evt_1").await.outcome(),
        "forwarded"
    );
    assert_eq!(
        gateway.deliver("stripe", body, "evt_1").await.outcome(),
        "duplicate"
    );

    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/stripe/invoice.paid.json"
    );
    let mut captured = Replay::load(path.as_ref()).expect("fixture");
    hookgate::sign::resign(
        &mut captured,
        None,
        "whsec_test",
        hookgate::time::Clock::System.now(),
        None,
    )
    .expect("resign");
    assert_eq!(gateway.send(&captured).await.outcome(), "forwarded");

    assert_eq!(upstream.count_for("evt_1"), 1);
    let seen = upstream.received();
    assert_eq!(seen[0].body.as_ref(), body.as_bytes());
    assert_eq!(seen[1].body.as_ref(), captured.body_bytes().as_slice());
    gateway.stop().await;
}
