//! `hookgate keygen`: an Ed25519 key pair for testing.

pub(super) fn run() -> i32 {
    let key = crate::sign::PrivateKey::generate();
    println!(
        "private key (hookgate sign --private-key): {}",
        key.to_whsk()
    );
    println!(
        "public key, standard_webhooks:             {}",
        key.public_whpk()
    );
    println!(
        "public key, discord (hex):                 {}",
        key.public_hex()
    );
    println!(
        "public key, telnyx (base64):               {}",
        key.public_for("telnyx")
    );
    0
}
