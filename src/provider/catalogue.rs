//! The built-in presets, named by the provider keys of the provider catalogue: for
//! each, how its credential is read, which scheme verifies it, where its event ID is,
//! its timestamp window and its handshake.

use http::{HeaderName, StatusCode};

use super::event_id::{CustomId, EventIdSource};
use super::handshake::{FixedReply, Handshake, braintree_key};
use super::hmac_scheme::{HmacScheme, SigFormat, TimestampSource};
use super::mac::{Algorithm, Encoding, MacKey, decode_base64};
use super::special::{Special, basic_auth_header};
use super::standard_webhooks::{StandardScheme, SwKey};
use super::timestamp::TsFormat;
use super::{Credential, HmacOptions, Scheme, Template, Verifier};

/// A built-in preset, by provider key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset(&'static str);

/// What a preset authenticates, for `hookgate providers` and the docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// A MAC or signature over the body (and more): tampering and forgery are caught.
    Signature,
    /// A shared token or password, not bound to the body: stops strangers, not a
    /// replay or a body changed in transit by someone who saw a request.
    Token,
}

/// Where a preset's credential travels in a request, so a capture can leave it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialAt {
    /// A header whose value is the credential (or carries it).
    Header(&'static str),
    /// A query-string parameter.
    Query(&'static str),
    /// A string field of the JSON body, by JSON pointer.
    Json(&'static str),
    /// A field of every element of a JSON array (pointer to the array, field name).
    JsonEach(&'static str, &'static str),
}

/// The description of a preset.
#[derive(Debug, Clone)]
pub struct Info {
    pub name: &'static str,
    pub auth: Auth,
    pub scheme: &'static str,
    pub headers: &'static str,
    pub event_id: EventIdSource,
    pub tolerance: Option<u64>,
    pub handshake: &'static str,
    /// Whether the preset signs the public URL (the route then needs `public_url`).
    pub needs_public_url: bool,
    /// The credential shape, for error messages and docs.
    pub credential: &'static str,
}

fn h(names: &[&'static str]) -> EventIdSource {
    EventIdSource::headers(names)
}

fn j(ptr: &str) -> EventIdSource {
    EventIdSource::Json(ptr.into())
}

const NONE: EventIdSource = EventIdSource::BodySha256;

impl Preset {
    /// The generic HMAC provider.
    pub const HMAC: Self = Self("hmac");

    /// Every preset name.
    pub const NAMES: &'static [&'static str] = &[
        "stripe",
        "github",
        "shopify",
        "slack",
        "standard_webhooks",
        "svix",
        "clerk",
        "resend",
        "twilio",
        "paddle",
        "linear",
        "discord",
        "sendgrid",
        "twitch",
        "zoom",
        "hubspot",
        "square",
        "mailgun",
        "gitlab",
        "meta",
        "intercom",
        "bitbucket",
        "typeform",
        "lemonsqueezy",
        "woocommerce",
        "zendesk",
        "calendly",
        "vercel",
        "sentry",
        "postmark",
        "plaid",
        "paypal",
        "adyen",
        "adyen_platform",
        "xero",
        "trello",
        "coinbase_commerce",
        "mux",
        "contentful",
        "sanity",
        "asana",
        "dropbox",
        "box",
        "docusign",
        "jira",
        "okta",
        "segment",
        "netlify",
        "alchemy",
        "webflow",
        "figma",
        "notion",
        "airtable",
        "razorpay",
        "braintree",
        "recurly",
        "chargebee",
        "calcom",
        "pipedrive",
        "monday",
        "frameio",
        "mandrill",
        "mailchimp",
        "msgraph",
        "hmac",
    ];

    /// Looks a preset up by its provider key.
    pub fn parse(name: &str) -> Option<Self> {
        Self::NAMES.iter().find(|n| **n == name).map(|n| Self(n))
    }

    /// Every preset.
    pub fn all() -> impl Iterator<Item = Self> {
        Self::NAMES.iter().map(|n| Self(n))
    }

    /// The provider key.
    pub fn name(self) -> &'static str {
        self.0
    }

    /// The event-ID source when the route sets none (`None` for `hmac` without an
    /// `id_header`: the route must say).
    pub fn default_event_id(self, opts: Option<&HmacOptions>) -> Option<EventIdSource> {
        if self == Self::HMAC {
            let name = opts?.id_header.as_deref()?;
            return Some(EventIdSource::Header(vec![
                HeaderName::try_from(name).ok()?,
            ]));
        }
        Some(self.info().event_id)
    }

    /// The provider's timestamp window in seconds, or `None` if it signs no timestamp.
    pub fn default_tolerance(self, opts: Option<&HmacOptions>) -> Option<u64> {
        if self == Self::HMAC {
            return opts.and_then(|o| o.timestamp_header.as_ref()).map(|_| 300);
        }
        self.info().tolerance
    }

    /// Whether the provider hands out the secret in its handshake (Asana, Notion): a
    /// route may then start with no secret, answer the handshake, and refuse every
    /// delivery until the secret is configured.
    pub fn secret_from_handshake(self) -> bool {
        matches!(self.0, "asana" | "notion")
    }

    /// Where this preset's credential (or the secret a handshake hands over) travels
    /// in a request. Captures redact every one of them; signatures are not listed:
    /// they are useless without the key, and replays re-sign.
    pub fn credential_locations(self) -> &'static [CredentialAt] {
        use CredentialAt::{Header, Json, JsonEach, Query};
        match self.0 {
            "gitlab" => &[Header("x-gitlab-token")],
            "okta" | "postmark" | "chargebee" | "pipedrive" | "monday" => {
                &[Header("authorization")]
            }
            "asana" => &[Header("x-hook-secret")],
            "notion" => &[Json("/verification_token")],
            "figma" => &[Json("/passcode")],
            "mailchimp" => &[Query("token")],
            "meta" => &[Query("hub.verify_token")],
            "msgraph" => &[JsonEach("/value", "clientState")],
            _ => &[],
        }
    }

    /// Whether a route of this preset must set `public_url`.
    pub fn needs_public_url(self, opts: Option<&HmacOptions>) -> bool {
        if self == Self::HMAC {
            return opts
                .and_then(|o| o.payload.as_deref())
                .and_then(|p| Template::parse(p).ok())
                .is_some_and(|t| t.uses_url());
        }
        self.info().needs_public_url
    }

    /// The description of this preset.
    pub fn info(self) -> Info {
        use Auth::{Signature as S, Token as T};
        let i = |auth, scheme, headers, event_id, tolerance, handshake: &Handshake| Info {
            name: self.0,
            auth,
            scheme,
            headers,
            event_id,
            tolerance,
            handshake: handshake.describe(),
            needs_public_url: false,
            credential: "string",
        };
        let mut info = match self.0 {
            "stripe" => i(
                S,
                "HMAC-SHA256 hex over t.body",
                "Stripe-Signature (t=,v1=)",
                j("/id"),
                Some(300),
                &Handshake::None,
            ),
            "github" => i(
                S,
                "HMAC-SHA256 hex over body, sha256=",
                "X-Hub-Signature-256",
                h(&["x-github-delivery"]),
                None,
                &Handshake::None,
            ),
            "shopify" => i(
                S,
                "HMAC-SHA256 base64 over body",
                "X-Shopify-Hmac-Sha256 | Shopify-Hmac-Sha256",
                h(&["x-shopify-webhook-id", "shopify-webhook-id"]),
                None,
                &Handshake::None,
            ),
            "slack" => i(
                S,
                "HMAC-SHA256 hex over v0:ts:body, v0=",
                "X-Slack-Signature, X-Slack-Request-Timestamp",
                j("/event_id"),
                Some(300),
                &Handshake::Slack,
            ),
            "standard_webhooks" => i(
                S,
                "HMAC-SHA256 (v1) / Ed25519 (v1a) base64 over id.ts.body",
                "webhook-id, webhook-timestamp, webhook-signature",
                h(&["webhook-id"]),
                Some(300),
                &Handshake::None,
            ),
            "svix" | "clerk" | "resend" => i(
                S,
                "Standard Webhooks, svix-* headers",
                "svix-id, svix-timestamp, svix-signature",
                h(&["svix-id"]),
                Some(300),
                &Handshake::None,
            ),
            "twilio" => i(
                S,
                "HMAC-SHA1 base64 over URL + sorted form params (or URL with bodySHA256)",
                "X-Twilio-Signature",
                h(&["i-twilio-idempotency-token"]),
                None,
                &Handshake::None,
            ),
            "paddle" => i(
                S,
                "HMAC-SHA256 hex over ts:body",
                "Paddle-Signature (ts=;h1=)",
                j("/event_id"),
                Some(5),
                &Handshake::None,
            ),
            "linear" => i(
                S,
                "HMAC-SHA256 hex over body; body webhookTimestamp (ms)",
                "Linear-Signature",
                h(&["linear-delivery"]),
                Some(60),
                &Handshake::None,
            ),
            "discord" => i(
                S,
                "Ed25519 hex over ts + body",
                "X-Signature-Ed25519, X-Signature-Timestamp",
                EventIdSource::Custom(CustomId::DiscordId),
                Some(300),
                &Handshake::Discord,
            ),
            "sendgrid" => i(
                S,
                "ECDSA P-256 SHA-256 (DER, base64) over ts + body",
                "X-Twilio-Email-Event-Webhook-Signature, -Timestamp",
                EventIdSource::Custom(CustomId::SendgridEvents),
                Some(300),
                &Handshake::None,
            ),
            "twitch" => i(
                S,
                "HMAC-SHA256 hex over id + ts + body, sha256=",
                "Twitch-Eventsub-Message-Signature, -Id, -Timestamp",
                h(&["twitch-eventsub-message-id"]),
                Some(600),
                &Handshake::Twitch,
            ),
            "zoom" => i(
                S,
                "HMAC-SHA256 hex over v0:ts:body, v0=",
                "x-zm-signature, x-zm-request-timestamp",
                NONE,
                Some(300),
                &Handshake::Zoom,
            ),
            "hubspot" => i(
                S,
                "v3: HMAC-SHA256 base64 over method + uri + body + ts (ms); v2: SHA-256 of secret + method + uri + body (both need `public_url`); v1: SHA-256 of secret + body (no URL)",
                "X-HubSpot-Signature-v3, X-HubSpot-Request-Timestamp",
                EventIdSource::Custom(CustomId::HubspotEvents),
                Some(300),
                &Handshake::None,
            ),
            "square" => i(
                S,
                "HMAC-SHA256 base64 over notification URL + body",
                "x-square-hmacsha256-signature",
                j("/event_id"),
                None,
                &Handshake::None,
            ),
            "mailgun" => i(
                S,
                "HMAC-SHA256 hex over timestamp + token (in the body)",
                "body signature{timestamp,token,signature}",
                EventIdSource::Custom(CustomId::MailgunEvent),
                Some(300),
                &Handshake::None,
            ),
            "gitlab" => i(
                T,
                "static token compare",
                "X-Gitlab-Token",
                h(&["idempotency-key", "x-gitlab-event-uuid"]),
                None,
                &Handshake::None,
            ),
            "meta" => i(
                S,
                "HMAC-SHA256 hex over body, sha256= (app_secret)",
                "X-Hub-Signature-256",
                EventIdSource::Custom(CustomId::MetaMessages),
                None,
                &Handshake::Meta {
                    verify_tokens: Vec::new(),
                },
            ),
            "intercom" => i(
                S,
                "HMAC-SHA1 hex over body, sha1=",
                "X-Hub-Signature",
                j("/id"),
                None,
                &Handshake::None,
            ),
            "bitbucket" => i(
                S,
                "HMAC-SHA256 hex over body, sha256=",
                "X-Hub-Signature",
                h(&["x-request-uuid"]),
                None,
                &Handshake::None,
            ),
            "typeform" => i(
                S,
                "HMAC-SHA256 base64 over body, sha256=",
                "Typeform-Signature",
                j("/event_id"),
                None,
                &Handshake::None,
            ),
            "lemonsqueezy" => i(
                S,
                "HMAC-SHA256 hex over body",
                "X-Signature",
                NONE,
                None,
                &Handshake::None,
            ),
            "woocommerce" => i(
                S,
                "HMAC-SHA256 base64 over body",
                "X-WC-Webhook-Signature",
                h(&["x-wc-webhook-delivery-id"]),
                None,
                &Handshake::WooCommerce,
            ),
            "zendesk" => i(
                S,
                "HMAC-SHA256 base64 over ts + body",
                "X-Zendesk-Webhook-Signature, -Signature-Timestamp",
                EventIdSource::Custom(CustomId::ZendeskId),
                Some(300),
                &Handshake::None,
            ),
            "calendly" => i(
                S,
                "HMAC-SHA256 hex over t.body",
                "Calendly-Webhook-Signature (t=,v1=)",
                NONE,
                Some(180),
                &Handshake::None,
            ),
            "vercel" => i(
                S,
                "HMAC-SHA1 hex over body",
                "x-vercel-signature",
                j("/id"),
                None,
                &Handshake::None,
            ),
            "sentry" => i(
                S,
                "HMAC-SHA256 hex over body",
                "Sentry-Hook-Signature",
                h(&["request-id"]),
                None,
                &Handshake::None,
            ),
            "postmark" => i(
                T,
                "HTTP Basic auth (user:password as configured)",
                "Authorization",
                EventIdSource::Custom(CustomId::PostmarkRecord),
                None,
                &Handshake::None,
            ),
            "plaid" => i(
                S,
                "JWT ES256 with request_body_sha256 (key: the JWK as a table)",
                "Plaid-Verification",
                NONE,
                Some(300),
                &Handshake::None,
            ),
            "paypal" => i(
                S,
                "SHA256withRSA over id|time|webhook_id|crc32(body)",
                "PAYPAL-TRANSMISSION-SIG, -ID, -TIME, -CERT-URL, AUTH-ALGO",
                j("/id"),
                Some(300),
                &Handshake::None,
            ),
            "adyen" => i(
                S,
                "HMAC-SHA256 base64 per notification item (hex key)",
                "additionalData.hmacSignature (body)",
                EventIdSource::Custom(CustomId::AdyenItems),
                None,
                &Handshake::None,
            ),
            "adyen_platform" => i(
                S,
                "HMAC-SHA256 base64 over body (hex key)",
                "HmacSignature",
                NONE,
                None,
                &Handshake::None,
            ),
            "xero" => i(
                S,
                "HMAC-SHA256 base64 over body",
                "x-xero-signature",
                NONE,
                None,
                &Handshake::Xero,
            ),
            "trello" => i(
                S,
                "HMAC-SHA1 base64 over body + callback URL",
                "X-Trello-Webhook",
                j("/action/id"),
                None,
                &Handshake::Head,
            ),
            "coinbase_commerce" => i(
                S,
                "HMAC-SHA256 hex over body",
                "X-CC-Webhook-Signature",
                j("/event/id"),
                None,
                &Handshake::None,
            ),
            "mux" => i(
                S,
                "HMAC-SHA256 hex over t.body",
                "Mux-Signature (t=,v1=)",
                j("/id"),
                Some(300),
                &Handshake::None,
            ),
            "contentful" => i(
                S,
                "HMAC-SHA256 hex over the canonical request",
                "x-contentful-signature, -signed-headers, -timestamp",
                h(&["x-contentful-idempotency-key"]),
                Some(30),
                &Handshake::None,
            ),
            "sanity" => i(
                S,
                "HMAC-SHA256 base64url over t.body (t in ms)",
                "sanity-webhook-signature (t=,v1=)",
                h(&["idempotency-key"]),
                None,
                &Handshake::None,
            ),
            "asana" => i(
                S,
                "HMAC-SHA256 hex over body",
                "X-Hook-Signature",
                NONE,
                None,
                &Handshake::Asana,
            ),
            "dropbox" => i(
                S,
                "HMAC-SHA256 hex over body",
                "X-Dropbox-Signature",
                NONE,
                None,
                &Handshake::Dropbox,
            ),
            "box" => i(
                S,
                "HMAC-SHA256 base64 over body + timestamp, two keys",
                "BOX-SIGNATURE-PRIMARY/SECONDARY, BOX-DELIVERY-TIMESTAMP",
                j("/id"),
                Some(600),
                &Handshake::None,
            ),
            "docusign" => i(
                S,
                "HMAC-SHA256 base64 over body, any of N headers",
                "X-DocuSign-Signature-1..100",
                NONE,
                None,
                &Handshake::None,
            ),
            "jira" => i(
                S,
                "HMAC-SHA256 hex over body, sha256=",
                "X-Hub-Signature",
                h(&["x-atlassian-webhook-identifier"]),
                None,
                &Handshake::None,
            ),
            "okta" => i(
                T,
                "static Authorization header compare",
                "Authorization",
                EventIdSource::Custom(CustomId::OktaEvents),
                None,
                &Handshake::Okta,
            ),
            "segment" => i(
                S,
                "HMAC-SHA1 hex over body",
                "X-Signature",
                j("/messageId"),
                None,
                &Handshake::None,
            ),
            "netlify" => i(
                S,
                "JWS HS256 with iss=netlify and the body's sha256",
                "X-Webhook-Signature",
                EventIdSource::Custom(CustomId::NetlifyDeploy),
                None,
                &Handshake::None,
            ),
            "alchemy" => i(
                S,
                "HMAC-SHA256 hex over body",
                "X-Alchemy-Signature",
                j("/id"),
                None,
                &Handshake::None,
            ),
            "webflow" => i(
                S,
                "HMAC-SHA256 hex over ts:body (ts in ms)",
                "x-webflow-signature, x-webflow-timestamp",
                NONE,
                Some(300),
                &Handshake::None,
            ),
            "figma" => i(
                T,
                "passcode in the body",
                "body passcode",
                NONE,
                None,
                &Handshake::Figma,
            ),
            "notion" => i(
                S,
                "HMAC-SHA256 hex over body, sha256=",
                "X-Notion-Signature",
                j("/id"),
                None,
                &Handshake::Notion,
            ),
            "airtable" => i(
                S,
                "HMAC-SHA256 hex over body, hmac-sha256= (base64 key)",
                "X-Airtable-Content-MAC",
                EventIdSource::Custom(CustomId::AirtablePing),
                None,
                &Handshake::None,
            ),
            "razorpay" => i(
                S,
                "HMAC-SHA256 hex over body",
                "X-Razorpay-Signature",
                h(&["x-razorpay-event-id"]),
                None,
                &Handshake::None,
            ),
            "braintree" => i(
                S,
                "HMAC-SHA1 (key SHA-1 of the private key) hex over bt_payload",
                "form bt_signature, bt_payload",
                NONE,
                None,
                &Handshake::Braintree { keys: Vec::new() },
            ),
            "recurly" => i(
                S,
                "HMAC-SHA256 hex over ts.body (ts in ms)",
                "recurly-signature (ts,sig[,sig])",
                j("/id"),
                Some(300),
                &Handshake::None,
            ),
            "chargebee" => i(
                T,
                "HTTP Basic auth (user:password as configured)",
                "Authorization",
                j("/id"),
                None,
                &Handshake::None,
            ),
            "calcom" => i(
                S,
                "HMAC-SHA256 hex over body",
                "X-Cal-Signature-256",
                NONE,
                None,
                &Handshake::None,
            ),
            "pipedrive" => i(
                T,
                "HTTP Basic auth (user:password as configured)",
                "Authorization",
                NONE,
                None,
                &Handshake::None,
            ),
            "monday" => i(
                T,
                "JWT HS256 in Authorization (the body is not covered)",
                "Authorization",
                j("/event/triggerUuid"),
                None,
                &Handshake::Monday,
            ),
            "frameio" => i(
                S,
                "HMAC-SHA256 hex over v0:ts:body, v0=",
                "X-Frameio-Signature, X-Frameio-Request-Timestamp",
                NONE,
                Some(300),
                &Handshake::None,
            ),
            "mandrill" => i(
                S,
                "HMAC-SHA1 base64 over URL + sorted form key+value",
                "X-Mandrill-Signature",
                EventIdSource::Custom(CustomId::MandrillEvents),
                None,
                &Handshake::Head,
            ),
            "mailchimp" => i(
                T,
                "token in the URL query (?token=)",
                "query token",
                NONE,
                None,
                &Handshake::Mailchimp,
            ),
            "msgraph" => i(
                T,
                "clientState in every notification",
                "body value[].clientState",
                NONE,
                None,
                &Handshake::MsGraph,
            ),
            _ => i(
                S,
                "HMAC as described in the route's [hmac] table",
                "hmac.header",
                NONE,
                None,
                &Handshake::None,
            ),
        };
        info.needs_public_url = matches!(
            self.0,
            // HubSpot's v1 signs no URL: a route without public_url verifies v1 only.
            "twilio" | "square" | "trello" | "contentful" | "mandrill"
        );
        info.credential = match self.0 {
            "meta" => "{ app_secret, verify_token }",
            "box" => "{ primary, secondary }",
            "braintree" => "{ public_key, private_key }",
            "paypal" => "{ webhook_id, cert_pem }",
            "plaid" => "the JWK as a table { kid, x, y, … }",
            "standard_webhooks" | "svix" | "clerk" | "resend" => {
                "whsec_<base64> (or whpk_<base64> public key)"
            }
            "discord" => "public key, hex",
            "sendgrid" => "public key, base64 DER or PEM",
            "adyen" | "adyen_platform" => "HMAC key, hex",
            "airtable" => "macSecretBase64",
            "postmark" | "chargebee" | "pipedrive" => "user:password",
            _ => "string",
        };
        info
    }

    /// Builds the verifier for a route from its credentials.
    pub fn verifier(
        self,
        creds: &[Credential],
        opts: Option<&HmacOptions>,
        tolerance: Option<u64>,
    ) -> Result<Verifier, String> {
        let texts = || {
            creds
                .iter()
                .map(Credential::text)
                .collect::<Result<Vec<_>, _>>()
        };
        let keys = |alg: Algorithm| -> Result<Vec<MacKey>, String> {
            Ok(texts()?.into_iter().map(|t| MacKey::new(alg, t)).collect())
        };
        let sha256 = || keys(Algorithm::Sha256);
        let raw = || -> Result<Vec<crate::secret::Secret>, String> {
            Ok(texts()?
                .into_iter()
                .map(|t| crate::secret::Secret::new(t.to_vec()))
                .collect())
        };
        let body = |header: &'static str,
                    prefix: &str,
                    enc: Encoding,
                    alg: Algorithm|
         -> Result<Scheme, String> {
            Ok(Scheme::Hmac(HmacScheme::body(
                header,
                prefix,
                enc,
                keys(alg)?,
            )))
        };
        let hex_keys = || -> Result<Vec<MacKey>, String> {
            texts()?
                .into_iter()
                .map(|t| {
                    let raw = hex::decode(t).map_err(|_| "the key must be hex".to_string())?;
                    Ok(MacKey::new(Algorithm::Sha256, &raw))
                })
                .collect()
        };
        let tmpl = |t: &str| Template::parse(t);
        let hdr = |n: &'static str| HeaderName::from_static(n);
        let kv = |separators: &'static [char], ts: &'static str, sig: &'static str| {
            SigFormat::KeyValue {
                separators,
                timestamp_key: ts,
                signature_key: sig,
            }
        };
        let plain = |prefix: &str| SigFormat::Plain {
            prefix: prefix.into(),
            separator: None,
        };
        #[expect(
            clippy::too_many_arguments,
            reason = "a table row: one argument per column"
        )]
        fn full(
            header: &'static str,
            format: SigFormat,
            encoding: Encoding,
            payload: Template,
            timestamp: TimestampSource,
            ts_format: TsFormat,
            id_header: Option<HeaderName>,
            keys: Vec<MacKey>,
        ) -> Scheme {
            Scheme::Hmac(HmacScheme {
                headers: vec![HeaderName::from_static(header)],
                format,
                encoding,
                payload,
                timestamp,
                ts_format,
                id_header,
                keys,
            })
        }
        // `t=…,v1=…` over `t.body`, HMAC-SHA256 hex: Stripe's scheme, shared by others.
        let t_dot_body = |header: &'static str| -> Result<Scheme, String> {
            Ok(full(
                header,
                kv(&[','], "t", "v1"),
                Encoding::Hex,
                tmpl("{timestamp}.{body}")?,
                TimestampSource::SignatureHeader,
                TsFormat::Seconds,
                None,
                sha256()?,
            ))
        };
        use Encoding::{Base64 as B64, Hex};
        use TsFormat::{Iso8601, Millis, Seconds};
        let mut handshake = Handshake::None;
        let mut reply = None;
        let scheme = match self.0 {
            "stripe" => t_dot_body("stripe-signature")?,
            "github" => body("x-hub-signature-256", "sha256=", Hex, Algorithm::Sha256)?,
            "shopify" => {
                let mut s = HmacScheme::body("x-shopify-hmac-sha256", "", B64, sha256()?);
                s.headers.push(hdr("shopify-hmac-sha256"));
                Scheme::Hmac(s)
            }
            "slack" => {
                handshake = Handshake::Slack;
                full(
                    "x-slack-signature",
                    plain("v0="),
                    Hex,
                    tmpl("v0:{timestamp}:{body}")?,
                    TimestampSource::Header(hdr("x-slack-request-timestamp")),
                    Seconds,
                    None,
                    sha256()?,
                )
            }
            "standard_webhooks" | "svix" | "clerk" | "resend" => {
                let keys = texts()?
                    .into_iter()
                    .map(SwKey::parse)
                    .collect::<Result<Vec<_>, _>>()?;
                let prefix = if self.0 == "standard_webhooks" {
                    "webhook"
                } else {
                    "svix"
                };
                Scheme::Standard(StandardScheme::with_prefix(prefix, keys))
            }
            "twilio" => Scheme::Special(Special::Twilio {
                keys: keys(Algorithm::Sha1)?,
            }),
            "paddle" => full(
                "paddle-signature",
                kv(&[';'], "ts", "h1"),
                Hex,
                tmpl("{timestamp}:{body}")?,
                TimestampSource::SignatureHeader,
                Seconds,
                None,
                sha256()?,
            ),
            "linear" => full(
                "linear-signature",
                plain(""),
                Hex,
                Template::body(),
                TimestampSource::Json("/webhookTimestamp"),
                Millis,
                None,
                sha256()?,
            ),
            "discord" => {
                handshake = Handshake::Discord;
                let keys = texts()?
                    .into_iter()
                    .map(|t| {
                        let raw: [u8; 32] = hex::decode(t)
                            .ok()
                            .and_then(|r| r.try_into().ok())
                            .ok_or("the public key must be 32 bytes in hex")?;
                        ed25519_dalek::VerifyingKey::from_bytes(&raw)
                            .map_err(|_| "not a valid Ed25519 public key".to_string())
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                Scheme::Special(Special::Discord { keys })
            }
            "sendgrid" => {
                use p256::pkcs8::DecodePublicKey;
                let keys = texts()?
                    .into_iter()
                    .map(|t| {
                        let text = std::str::from_utf8(t)
                            .map_err(|_| "the public key must be text".to_string())?;
                        if text.contains("BEGIN") {
                            p256::ecdsa::VerifyingKey::from_public_key_pem(text)
                                .map_err(|_| "not a P-256 public key (PEM)".to_string())
                        } else {
                            let der = decode_base64(text)
                                .ok_or("the public key must be base64 DER or PEM")?;
                            p256::ecdsa::VerifyingKey::from_public_key_der(&der)
                                .map_err(|_| "not a P-256 public key (DER)".to_string())
                        }
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                Scheme::Special(Special::SendGrid { keys })
            }
            "twitch" => {
                handshake = Handshake::Twitch;
                full(
                    "twitch-eventsub-message-signature",
                    plain("sha256="),
                    Hex,
                    tmpl("{id}{timestamp}{body}")?,
                    TimestampSource::Header(hdr("twitch-eventsub-message-timestamp")),
                    Iso8601,
                    Some(hdr("twitch-eventsub-message-id")),
                    sha256()?,
                )
            }
            "zoom" => {
                handshake = Handshake::Zoom;
                full(
                    "x-zm-signature",
                    plain("v0="),
                    Hex,
                    tmpl("v0:{timestamp}:{body}")?,
                    TimestampSource::Header(hdr("x-zm-request-timestamp")),
                    Seconds,
                    None,
                    sha256()?,
                )
            }
            "hubspot" => Scheme::Special(Special::HubSpot {
                keys: sha256()?,
                raw: raw()?,
            }),
            "square" => full(
                "x-square-hmacsha256-signature",
                plain(""),
                B64,
                tmpl("{url}{body}")?,
                TimestampSource::None,
                Seconds,
                None,
                sha256()?,
            ),
            "mailgun" => Scheme::Special(Special::Mailgun { keys: sha256()? }),
            "gitlab" => Scheme::Special(Special::Token {
                header: hdr("x-gitlab-token"),
                values: raw()?,
            }),
            "meta" => {
                let mut app = Vec::new();
                let mut verify = Vec::new();
                for c in creds {
                    app.push(MacKey::new(Algorithm::Sha256, c.part("app_secret")?));
                    verify.push(crate::secret::Secret::new(c.part("verify_token")?.to_vec()));
                }
                handshake = Handshake::Meta {
                    verify_tokens: verify,
                };
                Scheme::Hmac(HmacScheme::body("x-hub-signature-256", "sha256=", Hex, app))
            }
            "intercom" => body("x-hub-signature", "sha1=", Hex, Algorithm::Sha1)?,
            "bitbucket" | "jira" => body("x-hub-signature", "sha256=", Hex, Algorithm::Sha256)?,
            "typeform" => body("typeform-signature", "sha256=", B64, Algorithm::Sha256)?,
            "lemonsqueezy" => body("x-signature", "", Hex, Algorithm::Sha256)?,
            "woocommerce" => {
                handshake = Handshake::WooCommerce;
                body("x-wc-webhook-signature", "", B64, Algorithm::Sha256)?
            }
            "zendesk" => full(
                "x-zendesk-webhook-signature",
                plain(""),
                B64,
                tmpl("{timestamp}{body}")?,
                TimestampSource::Header(hdr("x-zendesk-webhook-signature-timestamp")),
                Iso8601,
                None,
                sha256()?,
            ),
            "calendly" => t_dot_body("calendly-webhook-signature")?,
            "vercel" => body("x-vercel-signature", "", Hex, Algorithm::Sha1)?,
            "sentry" => body("sentry-hook-signature", "", Hex, Algorithm::Sha256)?,
            "postmark" | "chargebee" | "pipedrive" => Scheme::Special(Special::BasicAuth {
                values: texts()?.into_iter().map(basic_auth_header).collect(),
            }),
            "plaid" => {
                let keys = creds.iter().map(plaid_key).collect::<Result<Vec<_>, _>>()?;
                Scheme::Special(Special::Plaid { keys })
            }
            "paypal" => {
                let keys = creds
                    .iter()
                    .map(paypal_key)
                    .collect::<Result<Vec<_>, _>>()?;
                Scheme::Special(Special::PayPal { keys })
            }
            "adyen" => {
                reply = Some(FixedReply {
                    status: StatusCode::OK,
                    body: "[accepted]",
                });
                Scheme::Special(Special::Adyen { keys: hex_keys()? })
            }
            "adyen_platform" => {
                Scheme::Hmac(HmacScheme::body("hmacsignature", "", B64, hex_keys()?))
            }
            "xero" => {
                handshake = Handshake::Xero;
                body("x-xero-signature", "", B64, Algorithm::Sha256)?
            }
            "trello" => {
                handshake = Handshake::Head;
                full(
                    "x-trello-webhook",
                    plain(""),
                    B64,
                    tmpl("{body}{url}")?,
                    TimestampSource::None,
                    Seconds,
                    None,
                    keys(Algorithm::Sha1)?,
                )
            }
            "coinbase_commerce" => body("x-cc-webhook-signature", "", Hex, Algorithm::Sha256)?,
            "mux" => t_dot_body("mux-signature")?,
            "contentful" => Scheme::Special(Special::Contentful { keys: sha256()? }),
            "sanity" => full(
                "sanity-webhook-signature",
                kv(&[',', ' '], "t", "v1"),
                Encoding::Base64Url,
                tmpl("{timestamp}.{body}")?,
                TimestampSource::SignatureHeader,
                Millis,
                None,
                sha256()?,
            ),
            "asana" => {
                handshake = Handshake::Asana;
                body("x-hook-signature", "", Hex, Algorithm::Sha256)?
            }
            "dropbox" => {
                handshake = Handshake::Dropbox;
                body("x-dropbox-signature", "", Hex, Algorithm::Sha256)?
            }
            "box" => {
                let keys = creds
                    .iter()
                    .map(|c| match c {
                        Credential::Parts(_) => {
                            let p = c
                                .part("primary")
                                .ok()
                                .map(|k| MacKey::new(Algorithm::Sha256, k));
                            let s = c
                                .part("secondary")
                                .ok()
                                .map(|k| MacKey::new(Algorithm::Sha256, k));
                            if p.is_none() && s.is_none() {
                                return Err(
                                    "the Box credential needs `primary` and/or `secondary`"
                                        .to_string(),
                                );
                            }
                            Ok((p, s))
                        }
                        Credential::Text(t) => {
                            Ok((Some(MacKey::new(Algorithm::Sha256, t.expose())), None))
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Scheme::Special(Special::Box { keys })
            }
            "docusign" => Scheme::Special(Special::DocuSign { keys: sha256()? }),
            "okta" => {
                handshake = Handshake::Okta;
                Scheme::Special(Special::Token {
                    header: hdr("authorization"),
                    values: raw()?,
                })
            }
            "segment" => body("x-signature", "", Hex, Algorithm::Sha1)?,
            "netlify" => Scheme::Special(Special::Netlify { keys: sha256()? }),
            "alchemy" => body("x-alchemy-signature", "", Hex, Algorithm::Sha256)?,
            "webflow" => full(
                "x-webflow-signature",
                plain(""),
                Hex,
                tmpl("{timestamp}:{body}")?,
                TimestampSource::Header(hdr("x-webflow-timestamp")),
                Millis,
                None,
                sha256()?,
            ),
            "figma" => {
                handshake = Handshake::Figma;
                Scheme::Special(Special::Passcode { values: raw()? })
            }
            "notion" => {
                handshake = Handshake::Notion;
                body("x-notion-signature", "sha256=", Hex, Algorithm::Sha256)?
            }
            "airtable" => {
                let keys = texts()?
                    .into_iter()
                    .map(|t| {
                        let raw = std::str::from_utf8(t)
                            .ok()
                            .and_then(decode_base64)
                            .ok_or("macSecretBase64 must be base64")?;
                        Ok(MacKey::new(Algorithm::Sha256, &raw))
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                Scheme::Hmac(HmacScheme::body(
                    "x-airtable-content-mac",
                    "hmac-sha256=",
                    Hex,
                    keys,
                ))
            }
            "razorpay" => body("x-razorpay-signature", "", Hex, Algorithm::Sha256)?,
            "braintree" => {
                let keys = creds
                    .iter()
                    .map(|c| {
                        Ok((
                            c.part_str("public_key")?.to_owned(),
                            braintree_key(c.part("private_key")?),
                        ))
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                handshake = Handshake::Braintree { keys: keys.clone() };
                Scheme::Special(Special::Braintree { keys })
            }
            "recurly" => full(
                "recurly-signature",
                SigFormat::Positional { separator: ',' },
                Hex,
                tmpl("{timestamp}.{body}")?,
                TimestampSource::SignatureHeader,
                Millis,
                None,
                sha256()?,
            ),
            "calcom" => body("x-cal-signature-256", "", Hex, Algorithm::Sha256)?,
            "monday" => {
                handshake = Handshake::Monday;
                Scheme::Special(Special::Monday { keys: sha256()? })
            }
            "frameio" => full(
                "x-frameio-signature",
                plain("v0="),
                Hex,
                tmpl("v0:{timestamp}:{body}")?,
                TimestampSource::Header(hdr("x-frameio-request-timestamp")),
                Seconds,
                None,
                sha256()?,
            ),
            "mandrill" => {
                handshake = Handshake::Head;
                Scheme::Special(Special::Mandrill {
                    keys: keys(Algorithm::Sha1)?,
                })
            }
            "mailchimp" => {
                handshake = Handshake::Mailchimp;
                Scheme::Special(Special::QueryToken { values: raw()? })
            }
            "msgraph" => {
                handshake = Handshake::MsGraph;
                reply = Some(FixedReply {
                    status: StatusCode::ACCEPTED,
                    body: "",
                });
                Scheme::Special(Special::ClientState { values: raw()? })
            }
            _ => {
                let o = opts.ok_or("provider \"hmac\" needs an [routes.hmac] table (header, algorithm, encoding, payload)")?;
                Scheme::Hmac(generic_scheme(o, &texts()?)?)
            }
        };
        Ok(Verifier::new(self, scheme, tolerance, handshake, reply))
    }
}

fn plaid_key(c: &Credential) -> Result<(String, p256::ecdsa::VerifyingKey), String> {
    use super::mac::decode_base64url;
    let kid = c.part_str("kid")?.to_owned();
    let x = decode_base64url(c.part_str("x")?).ok_or("JWK x must be base64url")?;
    let y = decode_base64url(c.part_str("y")?).ok_or("JWK y must be base64url")?;
    if x.len() != 32 || y.len() != 32 {
        return Err("JWK x and y must be 32 bytes (P-256)".into());
    }
    let point = [&[4u8][..], &x, &y].concat();
    let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(&point)
        .map_err(|_| "the JWK is not a P-256 point".to_string())?;
    Ok((kid, key))
}

fn paypal_key(
    c: &Credential,
) -> Result<(String, rsa::pkcs1v15::VerifyingKey<sha2::Sha256>), String> {
    use rsa::pkcs8::DecodePublicKey;
    use x509_cert::der::{DecodePem, Encode};
    let webhook_id = c.part_str("webhook_id")?.to_owned();
    let cert = x509_cert::Certificate::from_pem(c.part("cert_pem")?)
        .map_err(|_| "cert_pem is not a PEM certificate".to_string())?;
    let spki = cert
        .tbs_certificate()
        .subject_public_key_info()
        .to_der()
        .map_err(|_| "cannot read the certificate's public key".to_string())?;
    let key = rsa::PublicKey::from_public_key_der(&spki)
        .map_err(|_| "the certificate's key is not RSA".to_string())?;
    Ok((webhook_id, rsa::pkcs1v15::VerifyingKey::new(key)))
}

fn header_name(what: &str, s: &str) -> Result<HeaderName, String> {
    HeaderName::try_from(s).map_err(|_| format!("{what} {s:?} is not a valid header name"))
}

fn generic_scheme(o: &HmacOptions, secrets: &[&[u8]]) -> Result<HmacScheme, String> {
    let algorithm = match o.algorithm.as_deref() {
        None => Algorithm::Sha256,
        Some(a) => Algorithm::parse(a)
            .ok_or_else(|| format!("algorithm {a:?}: use sha1, sha256 or sha512"))?,
    };
    let encoding = match o.encoding.as_deref() {
        None => Encoding::Hex,
        Some(e) => Encoding::parse(e)
            .ok_or_else(|| format!("encoding {e:?}: use hex, base64 or base64url"))?,
    };
    let payload = Template::parse(o.payload.as_deref().unwrap_or("{body}"))?;
    let timestamp = match &o.timestamp_header {
        // A window on a header the signature does not cover could be bypassed by
        // sending a fresh value with an old capture.
        Some(_) if !payload.uses_timestamp() => {
            return Err(
                "timestamp_header is set but the payload template does not sign {timestamp}: a window on an unsigned header protects nothing; add {timestamp} to payload or remove timestamp_header".into(),
            );
        }
        Some(h) => TimestampSource::Header(header_name("timestamp_header", h)?),
        None if payload.uses_timestamp() => {
            return Err(
                "the payload template uses {timestamp} but no timestamp_header is set".into(),
            );
        }
        None => TimestampSource::None,
    };
    let id_header = match &o.id_header {
        Some(h) => Some(header_name("id_header", h)?),
        None if payload.uses_id() => {
            return Err("the payload template uses {id} but no id_header is set".into());
        }
        None => None,
    };
    if matches!(o.separator.as_deref(), Some("")) {
        return Err("separator must not be empty".into());
    }
    Ok(HmacScheme {
        headers: vec![header_name("header", &o.header)?],
        format: SigFormat::Plain {
            prefix: o.prefix.clone().unwrap_or_default(),
            separator: o.separator.clone(),
        },
        encoding,
        payload,
        timestamp,
        ts_format: TsFormat::Seconds,
        id_header,
        keys: secrets.iter().map(|s| MacKey::new(algorithm, s)).collect(),
    })
}

/// The provider table of `hookgate providers` and `docs/providers.md`.
pub fn markdown_table() -> String {
    let mut s = String::from(
        "# Providers\n\n\
         Generated by `hookgate providers > docs/providers.md`; a test keeps this file in step\n\
         with the code. Each preset is named by its provider key; set it as a route's\n\
         `provider`. \"Window\" is the default `tolerance` (a route may change it, or set\n\
         \"off\"). Where a provider gives no event ID, the preset deduplicates on\n\
         `body-sha256`; any route may override the source with `event_id`. An event ID\n\
         taken from a header the signature does not cover (every `header:…` below but\n\
         `webhook-id`, `svix-id` and Twitch's message ID, which are signed) is not used\n\
         as the key: such a delivery is deduplicated on `sig-` + SHA-256 of the signed\n\
         bytes (see docs/security.md).\n\n\
         | preset | auth | scheme | headers | credential | event ID | window | handshake |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for p in Preset::all() {
        let i = p.info();
        let auth = match i.auth {
            Auth::Signature => "signature",
            Auth::Token => "token",
        };
        let window = i.tolerance.map_or("—".to_string(), |t| format!("{t} s"));
        let url = if i.needs_public_url {
            " (needs `public_url`)"
        } else {
            ""
        };
        // Markdown cells: escape the column separator and angle brackets.
        let cell = |t: &str| {
            t.replace('|', "\\|")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
        };
        s.push_str(&format!(
            "| `{}` | {auth} | {}{url} | {} | {} | {} | {window} | {} |\n",
            i.name,
            cell(i.scheme),
            cell(i.headers),
            cell(i.credential),
            cell(&i.event_id.to_string()),
            cell(i.handshake),
        ));
    }
    s.push_str(
        "\n## What the token presets protect against\n\n\
         `gitlab`, `okta`, `postmark`, `chargebee`, `pipedrive`, `figma`, `mailchimp`,\n\
         `msgraph` and `monday` are marked *token*: the provider signs nothing, or (monday)\n\
         signs a JWT that does not cover the body. hookgate compares the shared value it\n\
         offers (a header, Basic auth, a passcode or clientState in the body, a query token,\n\
         or the JWT) in constant time. That stops anyone who does not know the value. It\n\
         does **not** stop someone who saw one request (a log, a proxy) from replaying it or\n\
         sending another body with the same value; dedup on the event ID still stops exact\n\
         replays within `dedup_ttl`. Keep these routes behind TLS, rotate the value if a\n\
         request leaks, and prefer a provider's signed mode where it has one.\n\n\
         ## What PayPal's signature protects\n\n\
         PayPal signs `transmission id|transmission time|webhook id|crc32(body)` with RSA.\n\
         The body is bound **only by its CRC-32**, which is not a cryptographic hash: from\n\
         one captured delivery anyone can build another body (another amount, another\n\
         event `id`) with the same CRC, and the captured headers verify it. hookgate\n\
         therefore (1) holds the signed transmission time to a window (5 minutes by\n\
         default, the route's `tolerance`; PayPal documents none), so a capture is usable\n\
         only that long; (2) remembers which body each signed transmission id carried, for\n\
         `dedup_ttl`, and answers 422 to any other body under it; (3) deduplicates on the\n\
         event `id` as usual. What remains: a forger who obtains a transmission within the\n\
         window and gets a different body to the gateway *before* the genuine one is\n\
         forwarded. Keep PayPal routes behind TLS, and where the amount matters, have the\n\
         handler read the resource back from PayPal's API (or use PayPal's\n\
         verify-webhook-signature call) instead of trusting the body.\n\n\
         ## Credentials with several parts\n\n\
         Written as inline tables in `secrets`, for example\n\
         `secrets = [{ app_secret = \"${META_APP_SECRET}\", verify_token = \"${META_VERIFY_TOKEN}\" }]`.\n\
         Every part accepts `${VAR}` and `file:PATH`. Asana and Notion hand out their secret in\n\
         the handshake: such a route may start with `secrets = []`, answers the handshake\n\
         (the secret is kept for the admin listener's `GET /handshakes/<route>`, never logged), and\n\
         refuses deliveries until it is configured. Only the first handed-over secret is kept\n\
         (later set-up requests get 409 until `DELETE /handshakes/<route>` clears it), and a\n\
         route with `secrets` takes none.\n",
    );
    s
}
