//! Presets verified by the HMAC-over-a-template scheme
//! ([`HmacScheme`](crate::provider::hmac_scheme::HmacScheme)): a MAC of the body,
//! sometimes with a timestamp, an ID or the URL, in one header.

use http::HeaderName;

use super::CredentialAt;
use super::{
    BASE, Build, DefaultId as Id, EventTypeAt as Type, PresetSpec, full, kv, plain, plain_list,
};
use crate::provider::event_id::CustomId;
use crate::provider::handshake::Handshake;
use crate::provider::hmac_scheme::{HmacScheme, SigFormat, TimestampSource};
use crate::provider::mac::Algorithm::{Sha1, Sha256, Sha512};
use crate::provider::mac::Encoding::{Base64 as B64, Base64Url, Hex};
use crate::provider::mac::{Algorithm, Encoding, MacKey, decode_base64};
use crate::provider::timestamp::TsFormat::{Iso8601, Millis, Seconds};
use crate::provider::{Scheme, Template};

fn hdr(name: &'static str) -> HeaderName {
    HeaderName::from_static(name)
}

pub(super) const PRESETS: &[PresetSpec] = &[
    PresetSpec {
        name: "stripe",
        scheme: "HMAC-SHA256 hex over t.body",
        headers: "Stripe-Signature (t=,v1=)",
        event_id: Id::Json("/id"),
        event_type: Some(Type::Json("/type")),
        tolerance: Some(300),
        build: |b| b.t_dot_body("stripe-signature"),
        ..BASE
    },
    PresetSpec {
        name: "github",
        scheme: "HMAC-SHA256 hex over body, sha256=",
        headers: "X-Hub-Signature-256",
        event_id: Id::Header(&["x-github-delivery"]),
        event_type: Some(Type::HeaderAndJson("x-github-event", "/action")),
        build: |b| b.body("x-hub-signature-256", "sha256=", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "shopify",
        scheme: "HMAC-SHA256 base64 over body",
        headers: "X-Shopify-Hmac-Sha256 | Shopify-Hmac-Sha256",
        event_id: Id::Header(&["x-shopify-webhook-id", "shopify-webhook-id"]),
        event_type: Some(Type::Header("x-shopify-topic")),
        build: |b| {
            let mut s = HmacScheme::body("x-shopify-hmac-sha256", "", B64, b.sha256()?);
            s.headers.push(hdr("shopify-hmac-sha256"));
            Ok(Scheme::Hmac(s))
        },
        ..BASE
    },
    PresetSpec {
        name: "slack",
        scheme: "HMAC-SHA256 hex over v0:ts:body, v0=",
        headers: "X-Slack-Signature, X-Slack-Request-Timestamp",
        event_id: Id::Json("/event_id"),
        event_type: Some(Type::Json("/event/type")),
        tolerance: Some(300),
        handshake: Handshake::Slack,
        build: |b| {
            Ok(full(
                "x-slack-signature",
                plain("v0="),
                Hex,
                Template::parse("v0:{timestamp}:{body}")?,
                TimestampSource::Header(hdr("x-slack-request-timestamp")),
                Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "paddle",
        scheme: "HMAC-SHA256 hex over ts:body",
        headers: "Paddle-Signature (ts=;h1=)",
        event_id: Id::Json("/event_id"),
        tolerance: Some(5),
        build: |b| {
            Ok(full(
                "paddle-signature",
                kv(&[';'], "ts", "h1"),
                Hex,
                Template::parse("{timestamp}:{body}")?,
                TimestampSource::SignatureHeader,
                Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "linear",
        scheme: "HMAC-SHA256 hex over body; body webhookTimestamp (ms)",
        headers: "Linear-Signature",
        event_id: Id::Header(&["linear-delivery"]),
        tolerance: Some(60),
        build: |b| {
            Ok(full(
                "linear-signature",
                plain(""),
                Hex,
                Template::body(),
                TimestampSource::Json("/webhookTimestamp"),
                Millis,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "twitch",
        scheme: "HMAC-SHA256 hex over id + ts + body, sha256=",
        headers: "Twitch-Eventsub-Message-Signature, -Id, -Timestamp",
        event_id: Id::Header(&["twitch-eventsub-message-id"]),
        event_type: Some(Type::Header("twitch-eventsub-subscription-type")),
        tolerance: Some(600),
        handshake: Handshake::Twitch,
        build: |b| {
            Ok(full(
                "twitch-eventsub-message-signature",
                plain("sha256="),
                Hex,
                Template::parse("{id}{timestamp}{body}")?,
                TimestampSource::Header(hdr("twitch-eventsub-message-timestamp")),
                Iso8601,
                Some(hdr("twitch-eventsub-message-id")),
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "zoom",
        scheme: "HMAC-SHA256 hex over v0:ts:body, v0=",
        headers: "x-zm-signature, x-zm-request-timestamp",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/event")),
        tolerance: Some(300),
        handshake: Handshake::Zoom,
        build: |b| {
            Ok(full(
                "x-zm-signature",
                plain("v0="),
                Hex,
                Template::parse("v0:{timestamp}:{body}")?,
                TimestampSource::Header(hdr("x-zm-request-timestamp")),
                Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "square",
        scheme: "HMAC-SHA256 base64 over notification URL + body",
        headers: "x-square-hmacsha256-signature",
        event_id: Id::Json("/event_id"),
        needs_public_url: true,
        build: |b| {
            Ok(full(
                "x-square-hmacsha256-signature",
                plain(""),
                B64,
                Template::parse("{url}{body}")?,
                TimestampSource::None,
                Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "meta",
        scheme: "HMAC-SHA256 hex over body, sha256= (app_secret)",
        headers: "X-Hub-Signature-256",
        credential: "{ app_secret, verify_token }",
        credential_at: &[CredentialAt::Query("hub.verify_token")],
        event_id: Id::Custom(CustomId::MetaMessages),
        handshake: Handshake::Meta {
            verify_tokens: Vec::new(),
        },
        build: |b| {
            let app = b
                .creds
                .iter()
                .map(|c| Ok(MacKey::new(Sha256, c.part("app_secret")?)))
                .collect::<Result<Vec<_>, String>>()?;
            Ok(Scheme::Hmac(HmacScheme::body(
                "x-hub-signature-256",
                "sha256=",
                Hex,
                app,
            )))
        },
        ..BASE
    },
    PresetSpec {
        name: "intercom",
        scheme: "HMAC-SHA1 hex over body, sha1=",
        headers: "X-Hub-Signature",
        event_id: Id::Json("/id"),
        build: |b| b.body("x-hub-signature", "sha1=", Hex, Sha1),
        ..BASE
    },
    PresetSpec {
        name: "bitbucket",
        scheme: "HMAC-SHA256 hex over body, sha256=",
        headers: "X-Hub-Signature",
        event_id: Id::Header(&["x-request-uuid"]),
        event_type: Some(Type::Header("x-event-key")),
        build: |b| b.body("x-hub-signature", "sha256=", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "typeform",
        scheme: "HMAC-SHA256 base64 over body, sha256=",
        headers: "Typeform-Signature",
        event_id: Id::Json("/event_id"),
        build: |b| b.body("typeform-signature", "sha256=", B64, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "lemonsqueezy",
        scheme: "HMAC-SHA256 hex over body",
        headers: "X-Signature",
        event_id: Id::BodySha256,
        build: |b| b.body("x-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "woocommerce",
        scheme: "HMAC-SHA256 base64 over body",
        headers: "X-WC-Webhook-Signature",
        event_id: Id::Header(&["x-wc-webhook-delivery-id"]),
        event_type: Some(Type::Header("x-wc-webhook-topic")),
        handshake: Handshake::WooCommerce,
        build: |b| b.body("x-wc-webhook-signature", "", B64, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "zendesk",
        scheme: "HMAC-SHA256 base64 over ts + body",
        headers: "X-Zendesk-Webhook-Signature, -Signature-Timestamp",
        event_id: Id::Custom(CustomId::ZendeskId),
        tolerance: Some(300),
        build: |b| {
            Ok(full(
                "x-zendesk-webhook-signature",
                plain(""),
                B64,
                Template::parse("{timestamp}{body}")?,
                TimestampSource::Header(hdr("x-zendesk-webhook-signature-timestamp")),
                Iso8601,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "calendly",
        scheme: "HMAC-SHA256 hex over t.body",
        headers: "Calendly-Webhook-Signature (t=,v1=)",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/event")),
        tolerance: Some(180),
        build: |b| b.t_dot_body("calendly-webhook-signature"),
        ..BASE
    },
    PresetSpec {
        name: "vercel",
        scheme: "HMAC-SHA1 hex over body",
        headers: "x-vercel-signature",
        event_id: Id::Json("/id"),
        build: |b| b.body("x-vercel-signature", "", Hex, Sha1),
        ..BASE
    },
    PresetSpec {
        name: "sentry",
        scheme: "HMAC-SHA256 hex over body",
        headers: "Sentry-Hook-Signature",
        event_id: Id::Header(&["request-id"]),
        event_type: Some(Type::Header("sentry-hook-resource")),
        build: |b| b.body("sentry-hook-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "adyen_platform",
        scheme: "HMAC-SHA256 base64 over body (hex key)",
        headers: "HmacSignature",
        credential: "HMAC key, hex",
        event_id: Id::BodySha256,
        build: |b| {
            Ok(Scheme::Hmac(HmacScheme::body(
                "hmacsignature",
                "",
                B64,
                b.hex_keys()?,
            )))
        },
        ..BASE
    },
    PresetSpec {
        name: "xero",
        scheme: "HMAC-SHA256 base64 over body",
        headers: "x-xero-signature",
        event_id: Id::BodySha256,
        handshake: Handshake::Xero,
        build: |b| b.body("x-xero-signature", "", B64, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "trello",
        scheme: "HMAC-SHA1 base64 over body + callback URL",
        headers: "X-Trello-Webhook",
        event_id: Id::Json("/action/id"),
        handshake: Handshake::Head,
        needs_public_url: true,
        build: |b| {
            Ok(full(
                "x-trello-webhook",
                plain(""),
                B64,
                Template::parse("{body}{url}")?,
                TimestampSource::None,
                Seconds,
                None,
                b.keys(Sha1)?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "coinbase_commerce",
        scheme: "HMAC-SHA256 hex over body",
        headers: "X-CC-Webhook-Signature",
        event_id: Id::Json("/event/id"),
        build: |b| b.body("x-cc-webhook-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "mux",
        scheme: "HMAC-SHA256 hex over t.body",
        headers: "Mux-Signature (t=,v1=)",
        event_id: Id::Json("/id"),
        tolerance: Some(300),
        build: |b| b.t_dot_body("mux-signature"),
        ..BASE
    },
    PresetSpec {
        name: "sanity",
        scheme: "HMAC-SHA256 base64url over t.body (t in ms)",
        headers: "sanity-webhook-signature (t=,v1=)",
        event_id: Id::Header(&["idempotency-key"]),
        build: |b| {
            Ok(full(
                "sanity-webhook-signature",
                kv(&[',', ' '], "t", "v1"),
                Base64Url,
                Template::parse("{timestamp}.{body}")?,
                TimestampSource::SignatureHeader,
                Millis,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "asana",
        scheme: "HMAC-SHA256 hex over body",
        headers: "X-Hook-Signature",
        credential_at: &[CredentialAt::Header("x-hook-secret")],
        event_id: Id::BodySha256,
        handshake: Handshake::Asana,
        build: |b| b.body("x-hook-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "dropbox",
        scheme: "HMAC-SHA256 hex over body",
        headers: "X-Dropbox-Signature",
        event_id: Id::BodySha256,
        handshake: Handshake::Dropbox,
        build: |b| b.body("x-dropbox-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "jira",
        scheme: "HMAC-SHA256 hex over body, sha256=",
        headers: "X-Hub-Signature",
        event_id: Id::Header(&["x-atlassian-webhook-identifier"]),
        build: |b| b.body("x-hub-signature", "sha256=", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "segment",
        scheme: "HMAC-SHA1 hex over body",
        headers: "X-Signature",
        event_id: Id::Json("/messageId"),
        build: |b| b.body("x-signature", "", Hex, Sha1),
        ..BASE
    },
    PresetSpec {
        name: "alchemy",
        scheme: "HMAC-SHA256 hex over body",
        headers: "X-Alchemy-Signature",
        event_id: Id::Json("/id"),
        build: |b| b.body("x-alchemy-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "webflow",
        scheme: "HMAC-SHA256 hex over ts:body (ts in ms)",
        headers: "x-webflow-signature, x-webflow-timestamp",
        event_id: Id::BodySha256,
        tolerance: Some(300),
        build: |b| {
            Ok(full(
                "x-webflow-signature",
                plain(""),
                Hex,
                Template::parse("{timestamp}:{body}")?,
                TimestampSource::Header(hdr("x-webflow-timestamp")),
                Millis,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "notion",
        scheme: "HMAC-SHA256 hex over body, sha256=",
        headers: "X-Notion-Signature",
        credential_at: &[CredentialAt::Json("/verification_token")],
        event_id: Id::Json("/id"),
        handshake: Handshake::Notion,
        build: |b| b.body("x-notion-signature", "sha256=", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "airtable",
        scheme: "HMAC-SHA256 hex over body, hmac-sha256= (base64 key)",
        headers: "X-Airtable-Content-MAC",
        credential: "macSecretBase64",
        event_id: Id::Custom(CustomId::AirtablePing),
        build: |b| {
            let keys = b
                .texts()?
                .into_iter()
                .map(|t| {
                    let raw = std::str::from_utf8(t)
                        .ok()
                        .and_then(decode_base64)
                        .ok_or("macSecretBase64 must be base64")?;
                    Ok(MacKey::new(Algorithm::Sha256, &raw))
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(Scheme::Hmac(HmacScheme::body(
                "x-airtable-content-mac",
                "hmac-sha256=",
                Hex,
                keys,
            )))
        },
        ..BASE
    },
    PresetSpec {
        name: "razorpay",
        scheme: "HMAC-SHA256 hex over body",
        headers: "X-Razorpay-Signature",
        event_id: Id::Header(&["x-razorpay-event-id"]),
        build: |b| b.body("x-razorpay-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "recurly",
        scheme: "HMAC-SHA256 hex over ts.body (ts in ms)",
        headers: "recurly-signature (ts,sig[,sig])",
        event_id: Id::Json("/id"),
        tolerance: Some(300),
        build: |b| {
            Ok(full(
                "recurly-signature",
                SigFormat::Positional { separator: ',' },
                Hex,
                Template::parse("{timestamp}.{body}")?,
                TimestampSource::SignatureHeader,
                Millis,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "calcom",
        scheme: "HMAC-SHA256 hex over body",
        headers: "X-Cal-Signature-256",
        event_id: Id::BodySha256,
        build: |b| b.body("x-cal-signature-256", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "frameio",
        scheme: "HMAC-SHA256 hex over v0:ts:body, v0=",
        headers: "X-Frameio-Signature, X-Frameio-Request-Timestamp",
        event_id: Id::BodySha256,
        tolerance: Some(300),
        build: |b| {
            Ok(full(
                "x-frameio-signature",
                plain("v0="),
                Hex,
                Template::parse("v0:{timestamp}:{body}")?,
                TimestampSource::Header(hdr("x-frameio-request-timestamp")),
                Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "pagerduty",
        scheme: "HMAC-SHA256 hex over body, v1= (several, comma-separated)",
        headers: "X-PagerDuty-Signature",
        event_id: Id::Json("/event/id"),
        event_type: Some(Type::Json("/event/event_type")),
        build: |b| {
            Ok(full(
                "x-pagerduty-signature",
                plain_list("v1=", ","),
                Hex,
                Template::body(),
                TimestampSource::None,
                Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "heroku",
        scheme: "HMAC-SHA256 base64 over body",
        headers: "Heroku-Webhook-Hmac-SHA256",
        event_id: Id::Json("/id"),
        build: |b| b.body("heroku-webhook-hmac-sha256", "", B64, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "circleci",
        scheme: "HMAC-SHA256 hex over body, v1= (other versions ignored)",
        headers: "circleci-signature",
        event_id: Id::Json("/id"),
        event_type: Some(Type::Header("circleci-event-type")),
        build: |b| {
            Ok(full(
                "circleci-signature",
                plain_list("v1=", ","),
                Hex,
                Template::body(),
                TimestampSource::None,
                Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "terraform",
        scheme: "HMAC-SHA512 hex over body (the notification token)",
        headers: "X-TFE-Notification-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/notifications/0/trigger")),
        build: |b| b.body("x-tfe-notification-signature", "", Hex, Sha512),
        ..BASE
    },
    PresetSpec {
        name: "launchdarkly",
        scheme: "HMAC-SHA256 hex over body",
        headers: "X-LD-Signature",
        event_id: Id::Json("/_id"),
        build: |b| b.body("x-ld-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "webex",
        scheme: "HMAC-SHA1 hex over body",
        headers: "X-Spark-Signature",
        event_id: Id::BodySha256,
        build: |b| b.body("x-spark-signature", "", Hex, Sha1),
        ..BASE
    },
    PresetSpec {
        name: "modern_treasury",
        scheme: "HMAC-SHA256 hex over body",
        headers: "X-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/event")),
        build: |b| b.body("x-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "msteams",
        scheme: "HMAC-SHA256 base64 over body, prefixed HMAC (base64 key)",
        headers: "Authorization",
        credential: "security token, base64",
        event_id: Id::Json("/id"),
        event_type: Some(Type::Json("/type")),
        build: |b| {
            Ok(Scheme::Hmac(HmacScheme::body(
                "authorization",
                "HMAC ",
                B64,
                b.base64_keys(Sha256, "the Teams security token")?,
            )))
        },
        ..BASE
    },
    PresetSpec {
        name: "workos",
        scheme: "HMAC-SHA256 hex over t.body (t in ms)",
        headers: "WorkOS-Signature (t=, v1=)",
        event_id: Id::Json("/id"),
        event_type: Some(Type::Json("/event")),
        tolerance: Some(300),
        build: |b| {
            Ok(full(
                "workos-signature",
                kv(&[','], "t", "v1"),
                Hex,
                Template::parse("{timestamp}.{body}")?,
                TimestampSource::SignatureHeader,
                Millis,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "tiktok",
        scheme: "HMAC-SHA256 hex over t.body (client secret)",
        headers: "TikTok-Signature (t=,s=)",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/event")),
        tolerance: Some(300),
        build: |b| {
            Ok(full(
                "tiktok-signature",
                kv(&[','], "t", "s"),
                Hex,
                Template::parse("{timestamp}.{body}")?,
                TimestampSource::SignatureHeader,
                Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "customerio",
        scheme: "HMAC-SHA256 hex over v0:ts:body",
        headers: "X-CIO-Signature, X-CIO-Timestamp",
        event_id: Id::Json("/event_id"),
        event_type: Some(Type::Json("/metric")),
        tolerance: Some(300),
        build: |b| {
            Ok(full(
                "x-cio-signature",
                plain(""),
                Hex,
                Template::parse("v0:{timestamp}:{body}")?,
                TimestampSource::Header(hdr("x-cio-timestamp")),
                Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "orb",
        scheme: "HMAC-SHA256 hex over v1:ts:body (ISO 8601 ts), v1= (space-separated)",
        headers: "X-Orb-Signature, X-Orb-Timestamp",
        event_id: Id::Json("/id"),
        event_type: Some(Type::Json("/type")),
        tolerance: Some(300),
        build: |b| {
            Ok(full(
                "x-orb-signature",
                plain_list("v1=", " "),
                Hex,
                Template::parse("v1:{timestamp}:{body}")?,
                TimestampSource::Header(hdr("x-orb-timestamp")),
                Iso8601,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "buildkite",
        scheme: "HMAC-SHA256 hex over timestamp.body (the webhook token)",
        headers: "X-Buildkite-Signature (timestamp=,signature=)",
        event_id: Id::BodySha256,
        event_type: Some(Type::Header("x-buildkite-event")),
        tolerance: Some(300),
        build: |b| {
            Ok(full(
                "x-buildkite-signature",
                kv(&[','], "timestamp", "signature"),
                Hex,
                Template::parse("{timestamp}.{body}")?,
                TimestampSource::SignatureHeader,
                Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "persona",
        scheme: "HMAC-SHA256 hex over t.body; one t=,v1= set per secret while rotating",
        headers: "Persona-Signature (t=,v1=[ t=,v1=])",
        event_id: Id::Json("/data/id"),
        event_type: Some(Type::Json("/data/attributes/name")),
        tolerance: Some(300),
        build: |b| {
            Ok(full(
                "persona-signature",
                kv(&[',', ' '], "t", "v1"),
                Hex,
                Template::parse("{timestamp}.{body}")?,
                TimestampSource::SignatureHeader,
                Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "tailscale",
        scheme: "HMAC-SHA256 hex over t.body",
        headers: "Tailscale-Webhook-Signature (t=,v1=)",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/0/type")),
        tolerance: Some(300),
        build: |b| b.t_dot_body("tailscale-webhook-signature"),
        ..BASE
    },
    PresetSpec {
        name: "pusher",
        scheme: "HMAC-SHA256 hex over body (app secret)",
        headers: "X-Pusher-Signature",
        event_id: Id::BodySha256,
        build: |b| b.body("x-pusher-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "chargify",
        scheme: "HMAC-SHA256 hex over body (site shared key)",
        headers: "X-Chargify-Webhook-Signature-Hmac-Sha-256",
        event_id: Id::BodySha256,
        build: |b| b.body("x-chargify-webhook-signature-hmac-sha-256", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "aftership",
        scheme: "HMAC-SHA256 base64 over body",
        headers: "aftership-hmac-sha256",
        event_id: Id::Json("/event_id"),
        event_type: Some(Type::Json("/event")),
        build: |b| b.body("aftership-hmac-sha256", "", B64, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "castle",
        scheme: "HMAC-SHA256 base64 over body (API secret)",
        headers: "X-Castle-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/type")),
        build: |b| b.body("x-castle-signature", "", B64, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "sonatype",
        scheme: "HMAC-SHA1 hex over body",
        headers: "X-Nexus-Webhook-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Header("x-nexus-webhook-id")),
        build: |b| b.body("x-nexus-webhook-signature", "", Hex, Sha1),
        ..BASE
    },
    PresetSpec {
        name: "pinwheel",
        scheme: "HMAC-SHA256 hex over v2:ts:body, v2= (API secret)",
        headers: "X-Pinwheel-Signature, X-Timestamp",
        event_id: Id::Json("/event_id"),
        event_type: Some(Type::Json("/event")),
        tolerance: Some(300),
        build: |b| {
            Ok(full(
                "x-pinwheel-signature",
                plain("v2="),
                Hex,
                Template::parse("v2:{timestamp}:{body}")?,
                TimestampSource::Header(hdr("x-timestamp")),
                Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "gocardless",
        scheme: "HMAC-SHA256 hex over body (endpoint secret)",
        headers: "Webhook-Signature",
        event_id: Id::Custom(CustomId::GocardlessEvents),
        build: |b| b.body("webhook-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "easypost",
        scheme: "HMAC-SHA256 hex over body, hmac-sha256-hex=",
        headers: "X-Hmac-Signature",
        credential: "string (normalised to NFKD at load, as EasyPost's libraries do)",
        event_id: Id::Json("/id"),
        event_type: Some(Type::Json("/description")),
        build: build_easypost,
        ..BASE
    },
    PresetSpec {
        name: "nylas",
        scheme: "HMAC-SHA256 hex over body (webhook secret)",
        headers: "X-Nylas-Signature",
        event_id: Id::Json("/id"),
        event_type: Some(Type::Json("/type")),
        // Nylas's `GET ?challenge=…` expects the challenge back as the body.
        handshake: Handshake::Dropbox,
        build: |b| b.body("x-nylas-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "mongodb_atlas",
        scheme: "HMAC-SHA1 base64 over body",
        headers: "X-MMS-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Header("x-mms-event")),
        build: |b| b.body("x-mms-signature", "", B64, Sha1),
        ..BASE
    },
    PresetSpec {
        name: "autodesk",
        scheme: "HMAC-SHA1 hex over body, sha1hash= (secret token)",
        headers: "x-adsk-signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/hook/event")),
        build: |b| b.body("x-adsk-signature", "sha1hash=", Hex, Sha1),
        ..BASE
    },
    PresetSpec {
        name: "clickup",
        scheme: "HMAC-SHA256 hex over body",
        headers: "X-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/event")),
        build: |b| b.body("x-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "fourthwall",
        scheme: "HMAC-SHA256 base64 over body",
        headers: "X-Fourthwall-Hmac-SHA256",
        event_id: Id::BodySha256,
        build: |b| b.body("x-fourthwall-hmac-sha256", "", B64, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "dub",
        scheme: "HMAC-SHA256 hex over body",
        headers: "Dub-Signature",
        event_id: Id::Json("/id"),
        event_type: Some(Type::Json("/event")),
        build: |b| b.body("dub-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "gitea",
        scheme: "HMAC-SHA256 hex over body",
        headers: "X-Gitea-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Header("x-gitea-event")),
        build: |b| b.body("x-gitea-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "x",
        scheme: "HMAC-SHA256 base64 over body, sha256= (consumer secret)",
        headers: "x-twitter-webhooks-signature",
        event_id: Id::BodySha256,
        handshake: Handshake::XCrc { keys: Vec::new() },
        build: |b| b.body("x-twitter-webhooks-signature", "sha256=", B64, Sha256),
        ..BASE
    },
    // Third round: FastSpring's "Message Security" page (X-FS-Signature: base64
    // HMAC-SHA256 of the payload under the webhook's HMAC SHA256 Secret). Each POST
    // batches events in `events[]`.
    PresetSpec {
        name: "fastspring",
        scheme: "HMAC-SHA256 base64 over body",
        headers: "X-FS-Signature",
        event_id: Id::Custom(CustomId::GocardlessEvents),
        build: |b| b.body("x-fs-signature", "", B64, Sha256),
        ..BASE
    },
    // Third round: Airwallex's "Listen for webhook events" page and its code examples
    // (x-signature: hex HMAC-SHA256 of x-timestamp followed by the payload). The page
    // gives no window and no unit for x-timestamp, so the preset checks none.
    PresetSpec {
        name: "airwallex",
        scheme: "HMAC-SHA256 hex over ts + body",
        headers: "x-signature, x-timestamp",
        event_id: Id::Json("/id"),
        build: |b| {
            Ok(full(
                "x-signature",
                plain(""),
                Hex,
                Template::parse("{timestamp}{body}")?,
                TimestampSource::Header(hdr("x-timestamp")),
                Millis,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    // Fourth round. Each row cites, in `SOURCES`, the provider's page or SDK its
    // scheme was read from and where its vectors come from.
    PresetSpec {
        name: "clearbit",
        scheme: "HMAC-SHA1 hex over body, sha1= (API key)",
        headers: "X-Request-Signature",
        event_id: Id::BodySha256,
        build: |b| b.body("x-request-signature", "sha1=", Hex, Sha1),
        ..BASE
    },
    PresetSpec {
        name: "nango",
        scheme: "HMAC-SHA256 hex over body (environment secret key)",
        headers: "X-Nango-Hmac-Sha256",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/type")),
        build: |b| b.body("x-nango-hmac-sha256", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "commercelayer",
        scheme: "HMAC-SHA256 base64 over body (shared secret)",
        headers: "X-CommerceLayer-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Header("x-commercelayer-topic")),
        build: |b| b.body("x-commercelayer-signature", "", B64, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "rutter",
        scheme: "HMAC-SHA256 base64 over body, sha256= (client secret)",
        headers: "X-Rutter-Signature",
        event_id: Id::BodySha256,
        build: |b| b.body("x-rutter-signature", "sha256=", B64, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "bolt",
        scheme: "HMAC-SHA256 base64 over body (signing secret)",
        headers: "X-Bolt-Hmac-Sha256",
        event_id: Id::BodySha256,
        build: |b| b.body("x-bolt-hmac-sha256", "", B64, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "checkout",
        scheme: "HMAC-SHA256 hex over body (the webhook's signature key)",
        headers: "Cko-Signature",
        event_id: Id::Json("/id"),
        event_type: Some(Type::Json("/type")),
        build: |b| b.body("cko-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "onfido",
        scheme: "HMAC-SHA256 hex over body (webhook token)",
        headers: "X-SHA2-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/payload/action")),
        build: |b| b.body("x-sha2-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "helpscout",
        scheme: "HMAC-SHA1 base64 over body (secret key)",
        headers: "X-HelpScout-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Header("x-helpscout-event")),
        build: |b| b.body("x-helpscout-signature", "", B64, Sha1),
        ..BASE
    },
    // Port documents no unit for x-port-timestamp and no window: the preset checks none.
    PresetSpec {
        name: "port",
        scheme: "HMAC-SHA256 base64 over ts.body, v1, (client secret)",
        headers: "x-port-signature, x-port-timestamp",
        event_id: Id::BodySha256,
        build: |b| {
            Ok(full(
                "x-port-signature",
                plain("v1,"),
                B64,
                Template::parse("{timestamp}.{body}")?,
                TimestampSource::Header(hdr("x-port-timestamp")),
                Millis,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "dwolla",
        scheme: "HMAC-SHA256 hex over body (webhook secret)",
        headers: "X-Request-Signature-SHA-256",
        event_id: Id::Json("/id"),
        event_type: Some(Type::Json("/topic")),
        build: |b| b.body("x-request-signature-sha-256", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "merge",
        scheme: "HMAC-SHA256 base64url over body (signature key)",
        headers: "X-Merge-Webhook-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/hook/event")),
        build: |b| b.body("x-merge-webhook-signature", "", Base64Url, Sha256),
        ..BASE
    },
    // ElevenLabs' example handler refuses a timestamp older than 30 minutes.
    PresetSpec {
        name: "elevenlabs",
        scheme: "HMAC-SHA256 hex over t.body, v0=",
        headers: "ElevenLabs-Signature (t=,v0=)",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/type")),
        tolerance: Some(1800),
        build: |b| {
            Ok(full(
                "elevenlabs-signature",
                kv(&[','], "t", "v0"),
                Hex,
                Template::parse("{timestamp}.{body}")?,
                TimestampSource::SignatureHeader,
                Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "snyk",
        scheme: "HMAC-SHA256 hex over body, sha256=",
        headers: "X-Hub-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Header("x-snyk-event")),
        build: |b| b.body("x-hub-signature", "sha256=", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "line",
        scheme: "HMAC-SHA256 base64 over body (channel secret)",
        headers: "X-Line-Signature",
        event_id: Id::BodySha256,
        build: |b| b.body("x-line-signature", "", B64, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "greenhouse",
        scheme: "HMAC-SHA256 hex over body, \"sha256 \" (secret key)",
        headers: "Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/action")),
        build: |b| b.body("signature", "sha256 ", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "attio",
        scheme: "HMAC-SHA256 hex over body (webhook secret)",
        headers: "Attio-Signature | X-Attio-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/events/0/event_type")),
        build: |b| {
            let mut s = HmacScheme::body("attio-signature", "", Hex, b.sha256()?);
            s.headers.push(hdr("x-attio-signature"));
            Ok(Scheme::Hmac(s))
        },
        ..BASE
    },
    // Cashfree documents no unit for x-webhook-timestamp and no window: the preset
    // checks none.
    PresetSpec {
        name: "cashfree",
        scheme: "HMAC-SHA256 base64 over ts + body (client secret)",
        headers: "x-webhook-signature, x-webhook-timestamp",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/type")),
        build: |b| {
            Ok(full(
                "x-webhook-signature",
                plain(""),
                B64,
                Template::parse("{timestamp}{body}")?,
                TimestampSource::Header(hdr("x-webhook-timestamp")),
                Millis,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "coinify",
        scheme: "HMAC-SHA256 hex over body (shared secret)",
        headers: "X-Coinify-Webhook-Signature",
        event_id: Id::BodySha256,
        build: |b| b.body("x-coinify-webhook-signature", "", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "loop_returns",
        scheme: "HMAC-SHA256 base64 over body (webhook secret)",
        headers: "X-Loop-Signature",
        event_id: Id::BodySha256,
        build: |b| b.body("x-loop-signature", "", B64, Sha256),
        ..BASE
    },
    // Fourth round, part A (issue 42, group 2). Each row's source is in `SOURCES`.
    PresetSpec {
        name: "squarespace",
        scheme: "HMAC-SHA256 hex over body (hex-encoded secret)",
        headers: "Squarespace-Signature",
        credential: "secret, hex (as Squarespace returns it)",
        event_id: Id::Json("/id"),
        event_type: Some(Type::Json("/topic")),
        build: |b| {
            Ok(Scheme::Hmac(HmacScheme::body(
                "squarespace-signature",
                "",
                Hex,
                b.hex_keys_for(Sha256)?,
            )))
        },
        ..BASE
    },
    PresetSpec {
        name: "onfleet",
        scheme: "HMAC-SHA512 hex over body (hex-encoded secret)",
        headers: "X-Onfleet-Signature",
        credential: "webhook secret, hex (as the dashboard shows it)",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/triggerName")),
        handshake: Handshake::Onfleet,
        build: |b| {
            Ok(Scheme::Hmac(HmacScheme::body(
                "x-onfleet-signature",
                "",
                Hex,
                b.hex_keys_for(Sha512)?,
            )))
        },
        ..BASE
    },
    PresetSpec {
        name: "ashby",
        scheme: "HMAC-SHA256 hex over body, sha256= (secret token)",
        headers: "Ashby-Signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/action")),
        build: |b| b.body("ashby-signature", "sha256=", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "npm",
        scheme: "HMAC-SHA256 hex over body, sha256= (hook secret)",
        headers: "x-npm-signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/event")),
        build: |b| b.body("x-npm-signature", "sha256=", Hex, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "quickbooks",
        scheme: "HMAC-SHA256 base64 over body (verifier token)",
        headers: "intuit-signature",
        event_id: Id::BodySha256,
        build: |b| b.body("intuit-signature", "", B64, Sha256),
        ..BASE
    },
    PresetSpec {
        name: "paystack",
        scheme: "HMAC-SHA512 hex over body (secret key)",
        headers: "x-paystack-signature",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/event")),
        build: |b| b.body("x-paystack-signature", "", Hex, Sha512),
        ..BASE
    },
    PresetSpec {
        name: "cronofy",
        scheme: "HMAC-SHA256 base64 over body (client secret)",
        headers: "Cronofy-HMAC-SHA256",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/notification/type")),
        build: |b| b.body("cronofy-hmac-sha256", "", B64, Sha256),
        ..BASE
    },
    // ConfigCat documents no window for its signed timestamp: the preset checks none.
    PresetSpec {
        name: "configcat",
        scheme: "HMAC-SHA256 base64 over id + ts + body (signing key), one per key, comma-separated",
        headers: "X-ConfigCat-Webhook-Signature-V1, -ID, -Timestamp",
        event_id: Id::BodySha256,
        build: |b| {
            Ok(full(
                "x-configcat-webhook-signature-v1",
                plain_list("", ","),
                B64,
                Template::parse("{id}{timestamp}{body}")?,
                TimestampSource::Header(hdr("x-configcat-webhook-timestamp")),
                Seconds,
                Some(hdr("x-configcat-webhook-id")),
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "knock",
        scheme: "HMAC-SHA256 base64 over t.body (t in ms)",
        headers: "x-knock-signature (t=,s=)",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/type")),
        tolerance: Some(300),
        build: |b| {
            Ok(full(
                "x-knock-signature",
                kv(&[','], "t", "s"),
                B64,
                Template::parse("{timestamp}.{body}")?,
                TimestampSource::SignatureHeader,
                Millis,
                None,
                b.sha256()?,
            ))
        },
        ..BASE
    },
    // Sinch's SDK checks no window on the signed timestamp, and none is documented.
    PresetSpec {
        name: "sinch",
        scheme: "HMAC-SHA256 base64 over body.nonce.ts (Conversation app's webhook secret)",
        headers: "x-sinch-webhook-signature, -signature-nonce, -signature-timestamp",
        event_id: Id::BodySha256,
        build: |b| {
            Ok(full(
                "x-sinch-webhook-signature",
                plain(""),
                B64,
                Template::parse("{body}.{id}.{timestamp}")?,
                TimestampSource::Header(hdr("x-sinch-webhook-signature-timestamp")),
                Seconds,
                Some(hdr("x-sinch-webhook-signature-nonce")),
                b.sha256()?,
            ))
        },
        ..BASE
    },
    PresetSpec {
        name: "ably",
        scheme: "HMAC-SHA256 base64 over body (the API key's secret part)",
        headers: "X-Ably-Signature, X-Ably-Key",
        credential: "API key appId.keyId:keyValue (or the keyValue alone)",
        event_id: Id::BodySha256,
        build: build_ably,
        ..BASE
    },
];

/// Ably signs with the secret part of an API key, after its `:` (`appId.keyId:keyValue`);
/// the whole key as Ably shows it, or the keyValue alone, is accepted.
fn build_ably(b: &Build<'_>) -> Result<Scheme, String> {
    let keys = b
        .texts()?
        .into_iter()
        .map(|t| {
            let value = t.rsplit(|c| *c == b':').next().unwrap_or(t);
            if value.is_empty() {
                return Err("the Ably key has no secret part after its ':'".to_string());
            }
            Ok(MacKey::new(Algorithm::Sha256, value))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Scheme::Hmac(HmacScheme::body(
        "x-ably-signature",
        "",
        Encoding::Base64,
        keys,
    )))
}

/// EasyPost's client libraries key the HMAC with the NFKD form of the webhook secret
/// (`sécret` and `se\u{301}cret` are one secret), so the route does the same at load:
/// a secret pasted from the dashboard in another normal form still verifies.
fn build_easypost(b: &Build<'_>) -> Result<Scheme, String> {
    let normaliser = icu_normalizer::DecomposingNormalizerBorrowed::new_nfkd();
    let keys = b
        .texts()?
        .into_iter()
        .map(|t| {
            let text = std::str::from_utf8(t)
                .map_err(|_| "the EasyPost webhook secret must be UTF-8 text".to_string())?;
            Ok(MacKey::new(
                Algorithm::Sha256,
                normaliser.normalize(text).as_bytes(),
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Scheme::Hmac(HmacScheme::body(
        "x-hmac-signature",
        "hmac-sha256-hex=",
        Encoding::Hex,
        keys,
    )))
}
