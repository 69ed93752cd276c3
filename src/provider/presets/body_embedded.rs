//! Presets whose signature travels inside the body (Mailgun, Adyen, Braintree): the
//! gateway can verify them but `hookgate sign` cannot add them as headers.

use http::StatusCode;

use super::Auth;
use super::{DefaultId as Id, PresetSpec};
use crate::provider::Scheme;
use crate::provider::event_id::CustomId;
use crate::provider::handshake::{FixedReply, Handshake, braintree_keys};
use crate::provider::special::Special;

pub(super) const PRESETS: &[PresetSpec] = &[
    PresetSpec {
        name: "mailgun",
        auth: Auth::Signature,
        scheme: "HMAC-SHA256 hex over timestamp + token (in the body)",
        headers: "body signature{timestamp,token,signature}",
        credential: "string",
        credential_at: &[],
        event_id: Id::Custom(CustomId::MailgunEvent),
        event_type: None,
        tolerance: Some(300),
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| Ok(Scheme::Special(Special::Mailgun { keys: b.sha256()? })),
    },
    PresetSpec {
        name: "adyen",
        auth: Auth::Signature,
        scheme: "HMAC-SHA256 base64 per notification item (hex key)",
        headers: "additionalData.hmacSignature (body)",
        credential: "HMAC key, hex",
        credential_at: &[],
        event_id: Id::Custom(CustomId::AdyenItems),
        event_type: None,
        tolerance: None,
        handshake: Handshake::None,
        reply: Some(FixedReply {
            status: StatusCode::OK,
            body: "[accepted]",
        }),
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| {
            Ok(Scheme::Special(Special::Adyen {
                keys: b.hex_keys()?,
            }))
        },
    },
    PresetSpec {
        name: "braintree",
        auth: Auth::Signature,
        scheme: "HMAC-SHA1 (key SHA-1 of the private key) hex over bt_payload",
        headers: "form bt_signature, bt_payload",
        credential: "{ public_key, private_key }",
        credential_at: &[],
        event_id: Id::BodySha256,
        event_type: None,
        tolerance: None,
        handshake: Handshake::Braintree { keys: Vec::new() },
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| {
            Ok(Scheme::Special(Special::Braintree {
                keys: braintree_keys(b.creds)?,
            }))
        },
    },
];
