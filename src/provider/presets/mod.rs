//! The preset catalogue as data: one [`PresetSpec`] row per provider key holds
//! everything hookgate knows about that provider — its description, where its
//! credential travels, its event-ID and event-type sources, its window, its handshake
//! and required reply, and how to build its verifier from the route's credentials.
//! [`Preset`](super::Preset), verification, `hookgate sign`, `hookgate providers` and
//! `docs/providers.md` all read the same row.
//!
//! Rows are grouped by scheme family, one module each; `FAMILIES` lists the modules
//! in the order the catalogue (and its generated table) shows them. A row names what
//! is its own and takes the common rest from `BASE` with struct-update syntax; the
//! tests check that names are unique, every row describes itself and builds a verifier.
//!
//! Adding an HMAC preset is one row in `hmac.rs` (plus its line in the provider list of
//! `docs/configuration.md` and the regenerated `docs/providers.md`, which tests enforce).

use http::{HeaderName, Method};

use super::event_id::{CustomId, EventIdSource};
use super::handshake::{FixedReply, Handshake};
use super::hmac_scheme::{HmacScheme, SigFormat, TimestampSource};
use super::mac::{Algorithm, Encoding, MacKey};
use super::timestamp::TsFormat;
use super::{Credential, HmacOptions, Scheme, Template};
use crate::secret::Secret;

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

mod asymmetric;
mod body_embedded;
pub(super) mod generic;
mod header_hmac;
mod hmac;
mod standard;
mod token;
mod url_signed;

/// Everything about one preset, declared together.
#[derive(Debug)]
pub struct PresetSpec {
    /// The provider key a route sets as `provider`.
    pub name: &'static str,
    /// Whether the preset checks a signature or only a shared token.
    pub auth: Auth,
    /// The scheme, in words (`hookgate providers`, docs).
    pub scheme: &'static str,
    /// The headers (or body fields) the scheme reads, in words.
    pub headers: &'static str,
    /// The credential's shape, in words (error messages, docs).
    pub credential: &'static str,
    /// Where the credential (or a handed-over secret) travels in a request, so a
    /// capture can leave it out. Signatures are not listed: useless without the key.
    pub credential_at: &'static [CredentialAt],
    /// Where the event ID is when the route sets no `event_id`.
    pub event_id: DefaultId,
    /// Where the event type is, where the provider says so plainly.
    pub event_type: Option<EventTypeAt>,
    /// The timestamp window in seconds, or `None` if the provider signs no timestamp.
    pub tolerance: Option<u64>,
    /// The handshake the gateway answers itself; a keyed one (Meta, Braintree) gets
    /// its keys from the route's credentials (see [`Handshake::with_keys`]).
    pub handshake: Handshake,
    /// The answer the provider requires for a delivered event, instead of the upstream's.
    pub reply: Option<FixedReply>,
    /// Whether the signature covers the public URL (the route then needs `public_url`).
    pub needs_public_url: bool,
    /// Methods accepted by default besides POST and the handshake's own.
    pub extra_methods: &'static [Method],
    /// The header that carries the credential when the provider lets the operator name
    /// it (a route's `auth_header`; Okta, New Relic, …): its default. `None`: the
    /// header is the provider's own, and a route may not set `auth_header`.
    pub auth_header: Option<&'static str>,
    /// Builds the scheme, with its keys, from the route's credentials.
    pub build: fn(&Build<'_>) -> Result<Scheme, String>,
}

/// The fields most signature presets share: a string credential that travels in no
/// request, no event type, no window, no handshake, no fixed reply, POST only. A row
/// sets its own `name`, `scheme`, `headers`, `event_id` and `build` and what else
/// differs, and takes the rest with `..BASE`; a row that forgets one of the five is
/// caught by the catalogue tests (the placeholders are empty or refuse to build).
pub(super) const BASE: PresetSpec = PresetSpec {
    name: "",
    auth: Auth::Signature,
    scheme: "",
    headers: "",
    credential: "string",
    credential_at: &[],
    event_id: DefaultId::BodySha256,
    event_type: None,
    tolerance: None,
    handshake: Handshake::None,
    reply: None,
    needs_public_url: false,
    extra_methods: &[],
    auth_header: None,
    build: |_| Err("a preset row without its own build".into()),
};

/// Where a preset's event ID is, as a constant (see [`EventIdSource`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultId {
    /// The first of these headers present.
    Header(&'static [&'static str]),
    /// A JSON pointer into the body.
    Json(&'static str),
    /// No event ID from the provider: the SHA-256 of the body.
    BodySha256,
    /// A provider-specific list or composite.
    Custom(CustomId),
}

impl DefaultId {
    /// The source as the rest of hookgate uses it.
    pub fn source(self) -> EventIdSource {
        match self {
            Self::Header(names) => EventIdSource::headers(names),
            Self::Json(ptr) => EventIdSource::Json(ptr.into()),
            Self::BodySha256 => EventIdSource::BodySha256,
            Self::Custom(c) => EventIdSource::Custom(c),
        }
    }
}

/// Where a provider puts the event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventTypeAt {
    /// A header (lower-case name).
    Header(&'static str),
    /// A JSON pointer into the body.
    Json(&'static str),
    /// A header, then `.` and a JSON field when the body has it.
    HeaderAndJson(&'static str, &'static str),
}

impl std::fmt::Display for EventTypeAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Header(h) => write!(f, "header:{h}"),
            Self::Json(p) => write!(f, "json:{p}"),
            Self::HeaderAndJson(h, p) => write!(f, "header:{h} + json:{p}"),
        }
    }
}

/// The scheme families, in catalogue order.
const FAMILIES: &[&[PresetSpec]] = &[
    hmac::PRESETS,
    standard::PRESETS,
    url_signed::PRESETS,
    header_hmac::PRESETS,
    asymmetric::PRESETS,
    body_embedded::PRESETS,
    token::PRESETS,
    generic::PRESETS,
];

const COUNT: usize = {
    let (mut n, mut f) = (0, 0);
    while f < FAMILIES.len() {
        n += FAMILIES[f].len();
        f += 1;
    }
    n
};

const NAMES_ARRAY: [&str; COUNT] = {
    let mut out = [""; COUNT];
    let (mut i, mut f) = (0, 0);
    while f < FAMILIES.len() {
        let mut j = 0;
        while j < FAMILIES[f].len() {
            out[i] = FAMILIES[f][j].name;
            i += 1;
            j += 1;
        }
        f += 1;
    }
    out
};

/// Every provider key, in catalogue order.
pub const NAMES: &[&str] = &NAMES_ARRAY;

/// Every row, in catalogue order.
pub fn all() -> impl Iterator<Item = &'static PresetSpec> {
    FAMILIES.iter().flat_map(|f| f.iter())
}

/// What a row's `build` reads: the route's credentials, for the generic `hmac`
/// preset its `[routes.hmac]` table, and the route's `auth_header` when it sets one.
#[derive(Debug, Clone, Copy)]
pub struct Build<'a> {
    pub creds: &'a [Credential],
    pub opts: Option<&'a HmacOptions>,
    pub auth_header: Option<&'a HeaderName>,
}

impl Build<'_> {
    /// Every credential as a plain string.
    pub fn texts(&self) -> Result<Vec<&[u8]>, String> {
        self.creds.iter().map(Credential::text).collect()
    }

    /// Every credential as an HMAC key.
    pub fn keys(&self, alg: Algorithm) -> Result<Vec<MacKey>, String> {
        Ok(self
            .texts()?
            .into_iter()
            .map(|t| MacKey::new(alg, t))
            .collect())
    }

    /// Every credential as an HMAC-SHA256 key.
    pub fn sha256(&self) -> Result<Vec<MacKey>, String> {
        self.keys(Algorithm::Sha256)
    }

    /// Every credential as a value compared as is (tokens).
    pub fn raw(&self) -> Result<Vec<Secret>, String> {
        Ok(self
            .texts()?
            .into_iter()
            .map(|t| Secret::new(t.to_vec()))
            .collect())
    }

    /// The header a configurable-header token preset compares: the route's
    /// `auth_header`, else the row's default.
    pub fn token_header(&self, default: &'static str) -> HeaderName {
        self.auth_header
            .cloned()
            .unwrap_or_else(|| HeaderName::from_static(default))
    }

    /// Every credential as the exact value its header carries: a string as is,
    /// `{ username, password }` as HTTP Basic auth, `{ bearer }` as a Bearer token.
    pub fn header_values(&self) -> Result<Vec<Secret>, String> {
        self.creds
            .iter()
            .map(|c| match c {
                Credential::Text(s) => Ok(Secret::new(s.expose().to_vec())),
                Credential::Parts(parts) if parts.contains_key("bearer") => {
                    let mut v = b"Bearer ".to_vec();
                    v.extend_from_slice(c.part("bearer")?);
                    Ok(Secret::new(v))
                }
                Credential::Parts(_) => {
                    let mut pair = c.part("username")?.to_vec();
                    pair.push(b':');
                    pair.extend_from_slice(c.part("password")?);
                    Ok(super::special::basic_auth_header(&pair))
                }
            })
            .collect()
    }

    /// Every credential as a hex-encoded HMAC-SHA256 key (Adyen).
    pub fn hex_keys(&self) -> Result<Vec<MacKey>, String> {
        self.hex_keys_for(Algorithm::Sha256)
    }

    /// Every credential as a hex-encoded HMAC key for `alg` (Onfleet's SHA-512,
    /// Squarespace's SHA-256).
    pub fn hex_keys_for(&self, alg: Algorithm) -> Result<Vec<MacKey>, String> {
        self.texts()?
            .into_iter()
            .map(|t| {
                let raw = hex::decode(t).map_err(|_| "the key must be hex".to_string())?;
                Ok(MacKey::new(alg, &raw))
            })
            .collect()
    }

    /// Every credential as base64 that decodes to the HMAC key (Microsoft Teams).
    pub fn base64_keys(&self, alg: Algorithm, what: &str) -> Result<Vec<MacKey>, String> {
        self.texts()?
            .into_iter()
            .map(|t| {
                let raw = std::str::from_utf8(t)
                    .ok()
                    .and_then(super::mac::decode_base64)
                    .filter(|k| !k.is_empty())
                    .ok_or_else(|| format!("{what} must be base64"))?;
                Ok(MacKey::new(alg, &raw))
            })
            .collect()
    }

    /// An HMAC over the body alone, in one header.
    pub fn body(
        &self,
        header: &'static str,
        prefix: &str,
        encoding: Encoding,
        alg: Algorithm,
    ) -> Result<Scheme, String> {
        Ok(Scheme::Hmac(HmacScheme::body(
            header,
            prefix,
            encoding,
            self.keys(alg)?,
        )))
    }

    /// `t=…,v1=…` over `t.body`, HMAC-SHA256 hex: Stripe's scheme, shared by others.
    pub fn t_dot_body(&self, header: &'static str) -> Result<Scheme, String> {
        Ok(full(
            header,
            kv(&[','], "t", "v1"),
            Encoding::Hex,
            Template::parse("{timestamp}.{body}")?,
            TimestampSource::SignatureHeader,
            TsFormat::Seconds,
            None,
            self.sha256()?,
        ))
    }
}

/// An HMAC scheme, one argument per column.
#[expect(
    clippy::too_many_arguments,
    reason = "a table row: one argument per column"
)]
pub(super) fn full(
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

/// A `key=value` signature header (`t=…,v1=…`).
pub(super) fn kv(
    separators: &'static [char],
    timestamp_key: &'static str,
    signature_key: &'static str,
) -> SigFormat {
    SigFormat::KeyValue {
        separators,
        timestamp_key,
        signature_key,
    }
}

/// A signature header holding several `prefix` + signature items joined by
/// `separator` (PagerDuty's `v1=…,v1=…`); items with another prefix are ignored.
pub(super) fn plain_list(prefix: &str, separator: &str) -> SigFormat {
    SigFormat::Plain {
        prefix: prefix.into(),
        separator: Some(separator.into()),
    }
}

/// A signature header holding `prefix` + one encoded signature.
pub(super) fn plain(prefix: &str) -> SigFormat {
    SigFormat::Plain {
        prefix: prefix.into(),
        separator: None,
    }
}

/// Where the scheme of a preset added (or changed) in the third round was read, and where its
/// vectors come from (`docs/providers.md` lists them).
#[derive(Debug)]
pub struct Source {
    pub preset: &'static str,
    /// The provider's documentation or SDK the scheme was read from.
    pub scheme: &'static str,
    /// `official: …` for the provider's own messages, else how they were generated.
    pub vectors: &'static str,
}

/// The presets of the third and fourth rounds, in the order they were added.
pub const SOURCES: &[Source] = &[
    Source {
        preset: "aws_sns",
        scheme: "Amazon SNS Developer Guide, \"Verifying the signatures of Amazon SNS messages\" and \"Parsing message formats\"; AWS's message validators (aws-php-sns-message-validator `src/MessageValidator.php`, aws-js-sns-message-validator)",
        vectors: "official: the four SNS notifications (SignatureVersion 1 and 2, with and without Subject) and the SNS certificate of aws-php-sns-message-validator `tests/FunctionalValidationsTest.php`; subscription and unsubscribe confirmations generated under a test certificate",
    },
    Source {
        preset: "easypost",
        scheme: "EasyPost client libraries' validate-webhook (the secret is normalised to NFKD before it keys the HMAC: easypost-python, easypost-node, easypost-php, easypost-ruby, easypost-csharp)",
        vectors: "official: the libraries' validate-webhook test (secret \"sécret\", signature e93977c8…) over the first event-body fixture of EasyPost/examples; the others generated",
    },
    Source {
        preset: "stytch",
        scheme: "Stytch \"Webhooks\" guide: webhooks are sent through Svix and verified as Svix documents (svix-id, svix-timestamp, svix-signature)",
        vectors: "Svix's published verification example (the scheme owner's, not Stytch's own); the others generated",
    },
    Source {
        preset: "render",
        scheme: "Render's example receiver (render-examples/webhook-receiver `app.ts`): webhook-id, webhook-timestamp, webhook-signature, checked with the Standard Webhooks library; \"Render Webhooks\" docs",
        vectors: "Svix's published verification example under webhook-* names (the scheme owner's, not Render's own); the others generated",
    },
    Source {
        preset: "pleo",
        scheme: "Pleo \"Webhooks: authentication and authorisation\" (HMAC signature-based: webhook-id, webhook-timestamp, webhook-signature `v1,…`)",
        vectors: "Svix's published verification example, which Pleo's page reproduces under webhook-* names; the others generated",
    },
    Source {
        preset: "plivo",
        scheme: "Plivo's SDKs: plivo-python `plivo/utils/signature_v3.py` (V3) and `plivo/utils/__init__.py` `validate_signature` (V2); plivo-go `utils.go`",
        vectors: "official: plivo-go `utils_test.go` TestValidateSignatureV3Pass1-4 (POST and GET, with and without a query) and the V2 test of plivo-python `tests/resources/test_signature.py` / plivo-go; the rotation case generated",
    },
    Source {
        preset: "worldline",
        scheme: "Worldline Connect SDKs' webhooks helper (Worldline-Global-Collect/connect-sdk-php `WebhooksHelper`: X-GCS-Signature, base64 HMAC-SHA256 of the body under the secret X-GCS-KeyId names)",
        vectors: "official: Worldline-Global-Collect/connect-sdk-php `tests/Worldline/Connect/Sdk/V1/Webhooks/WebhooksHelperTest.php` (valid, invalid body, invalid secret, invalid signature, unknown key id); the two-key cases reuse its signature",
    },
    Source {
        preset: "fastspring",
        scheme: "FastSpring developer docs, \"Message Security\" (X-FS-Signature: base64 HMAC-SHA256 of the payload under the HMAC SHA256 Secret)",
        vectors: "generated with that scheme (FastSpring publishes no test vector)",
    },
    Source {
        preset: "airwallex",
        scheme: "Airwallex developer docs, \"Listen for webhook events\" and its code examples (x-signature: hex HMAC-SHA256 of x-timestamp + payload)",
        vectors: "generated with that scheme (Airwallex publishes no test vector)",
    },
    Source {
        preset: "circle",
        scheme: "Circle developer docs, \"How-to: Verify webhook signatures\" (v2 notifications: ECDSA_SHA_256 over the body, X-Circle-Signature base64, X-Circle-Key-Id; public key as base64 DER from the notifications publicKey endpoint); Circle Wallets' notification quickstart (the endpoint answers HEAD)",
        vectors: "generated with that scheme under a key made for the vectors (the docs' example is not complete enough to verify)",
    },
    Source {
        preset: "ebay",
        scheme: "eBay's event-notification SDKs (eBay/event-notification-nodejs-sdk `lib/validator.js`: X-EBAY-SIGNATURE is base64 JSON {alg, kid, signature, digest}, ECDSA with SHA-1 over the message; the challenge answer is hex SHA-256 of challenge code + verification token + endpoint)",
        vectors: "official: eBay/event-notification-nodejs-sdk `test/test.json` (VALID signature, message and one-line PEM key; its SIGNATURE_MISMATCH header); the tampered, unknown-kid and challenge cases generated",
    },
    Source {
        preset: "clearbit",
        scheme: "clearbit/clearbit-ruby `lib/clearbit/webhook_signature.rb` (X-Request-Signature: `sha1=` + hex HMAC-SHA1 of the body under the API key)",
        vectors: "official: clearbit-ruby `spec/lib/clearbit/webhook_signature_spec.rb` (key clearbit_key, body A-OK and its tampered body; the signature is what the spec's helper computes); the others generated",
    },
    Source {
        preset: "nango",
        scheme: "Nango's \"Receive webhooks from Nango\" and NangoHQ/nango `packages/node-client` `verifyIncomingWebhookRequest` (X-Nango-Hmac-Sha256: hex HMAC-SHA256 of the body under the environment's secret key; the legacy X-Nango-Signature alone is refused)",
        vectors: "official: NangoHQ/nango `packages/node-client/lib/index.unit.test.ts` (secret test-secret-key, its body, the HMAC header, the legacy-only and invalid-signature cases); the wrong-secret case generated",
    },
    Source {
        preset: "commercelayer",
        scheme: "Commerce Layer's \"Callbacks security\" (X-CommerceLayer-Signature: base64 HMAC-SHA256 of the raw body under the webhook's shared secret; the topic in X-CommerceLayer-Topic)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "rutter",
        scheme: "Rutter's \"Webhook Security\" (X-Rutter-Signature: `sha256=` + base64 HMAC-SHA256 of the payload under the organization's client secret)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "bolt",
        scheme: "Bolt's \"How to Verify Webhooks\" (X-Bolt-Hmac-Sha256: base64 HMAC-SHA256 of the payload under the signing secret); the bytes are verified before any parsing",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "checkout",
        scheme: "Checkout.com's \"Set up your webhook receiver\" (Cko-Signature: hex HMAC-SHA256 of the raw body under the webhook's signature key)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "onfido",
        scheme: "onfido/onfido-node `WebhookEventVerifier` (X-SHA2-Signature: hex HMAC-SHA256 of the raw body under the webhook token)",
        vectors: "official: onfido/onfido-node `test/webhook-event-verifier.test.ts` (token, event body, valid signature a0082d74… and the invalid b0082d74…); the others generated",
    },
    Source {
        preset: "helpscout",
        scheme: "Help Scout's \"Webhooks\" developer page (X-HelpScout-Signature: base64 HMAC-SHA1 of the body under the secret key; the event in X-HelpScout-Event)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "port",
        scheme: "Port's \"Validating webhook signatures\" (x-port-signature: `v1,` + base64 HMAC-SHA256 of `x-port-timestamp.body` under the client secret; no unit or window documented, so none is checked)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "dwolla",
        scheme: "Dwolla's \"Validating webhooks\" (X-Request-Signature-SHA-256: hex HMAC-SHA256 of the body under the subscription's secret)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "merge",
        scheme: "Merge's \"Merge webhooks sent to you\" (X-Merge-Webhook-Signature: base64url HMAC-SHA256 of the payload under the organization's signature key)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "elevenlabs",
        scheme: "ElevenLabs' webhooks guide (ElevenLabs-Signature: `t=timestamp,v0=` + hex HMAC-SHA256 of `timestamp.body`; its example refuses a timestamp older than 30 minutes)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "snyk",
        scheme: "Snyk's \"Validation and versioning of payloads\" (X-Hub-Signature: `sha256=` + hex HMAC-SHA256 of the body under the webhook secret; the event in X-Snyk-Event)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "line",
        scheme: "LINE's \"Verify webhook signature\" (developers.line.biz) and @line/bot-sdk `validateSignature` (X-Line-Signature: base64 HMAC-SHA256 of the body under the channel secret)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "greenhouse",
        scheme: "Greenhouse's web hooks documentation (developers.greenhouse.io: `Signature: sha256 <hex>`, HMAC-SHA256 of the whole body under the web hook's secret key)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "attio",
        scheme: "Attio's \"Webhooks\" guide (Attio-Signature, duplicated as X-Attio-Signature: hex HMAC-SHA256 of the body under the webhook secret)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "cashfree",
        scheme: "Cashfree's \"Webhook signature verification\" (x-webhook-signature: base64 HMAC-SHA256 of x-webhook-timestamp followed by the raw body under the client secret; no window documented, so none is checked)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "coinify",
        scheme: "Coinify's \"Webhook Signature\" (X-Coinify-Webhook-Signature: lowercase hex HMAC-SHA256 of the body under the shared secret)",
        vectors: "official: Coinify's published example (secret my-shared-secret, payload {\"examplePayload\":true}, signature bcdbb89e…); the others generated",
    },
    Source {
        preset: "loop_returns",
        scheme: "Loop's \"HMAC calculation\" (X-Loop-Signature: base64 HMAC-SHA256 of the JSON payload under the webhook secret)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "telegram",
        scheme: "The Telegram Bot API's setWebhook (`secret_token`, sent back in X-Telegram-Bot-Api-Secret-Token; the update itself is not signed)",
        vectors: "generated with that scheme: the configured token, another token, none",
    },
    // Issue 42, token presets (groups 4 and 5): nothing is signed; the
    // credential is compared in constant time.
    Source {
        preset: "mixpanel",
        scheme: "Mixpanel's \"Syncing cohorts to a custom webhook\" (docs.mixpanel.com, Cohort Sync → Webhooks: optional Basic Authentication; the body's `action` is members, add_members or remove_members; no event ID, so the body's SHA-256)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "sparkpost",
        scheme: "SparkPost's Webhooks API (auth_type basic with auth_credentials username and password; event webhooks are not signed; a batch carries no ID the body binds, so the body's SHA-256)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "new_relic",
        scheme: "New Relic's webhook notification destination (Basic authentication, a bearer token, or custom headers the operator names: `auth_header`); the payload is the operator's template, so the body's SHA-256",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "fillout",
        scheme: "Fillout's \"Send form submissions to a webhook\" and its REST API integration (the operator adds the headers a request carries: `auth_header`); no event ID in every payload shape, so the body's SHA-256",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "zapier",
        scheme: "Zapier's \"Webhooks by Zapier\" actions (POST, PUT, Custom Request: the operator sets the headers and Basic auth); the payload is the operator's, so the body's SHA-256",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "bigcommerce",
        scheme: "BigCommerce's Webhooks API (`headers` given when the hook is created are sent with every callback; the event in `scope`; the body's `hash` is a SHA-1 of the data, not an event ID, so the body's SHA-256)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "datadog",
        scheme: "Datadog's Webhooks integration (docs.datadoghq.com/integrations/webhooks: custom headers in JSON, set by the operator; the payload is the operator's template, so the body's SHA-256)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "brevo",
        scheme: "Brevo's \"Secure webhook calls\" (developers.brevo.com: username and password in the URL, sent as Basic auth, or `auth: { type: bearer, token }` sent as `Authorization: Bearer`; custom headers); the event in `event`",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "okta",
        scheme: "Okta's Event Hooks guide and management API (`channel.config.authScheme`: type HEADER, `key` the header's name, `value` its secret: the header is the operator's choice, `auth_header`, default Authorization)",
        vectors: "the third round's vectors; the chosen-header cases generated with that scheme",
    },
    // Issue 42, group 3: signatures.
    Source {
        preset: "grafana",
        scheme: "Grafana's own source, grafana/alerting `http/hmac.go` (the webhook contact point's HMAC settings: hex HMAC-SHA256 in X-Grafana-Alerting-Signature over the timestamp, \":\", then the body; the timestamp in the header the contact point names, which this preset takes to be X-Grafana-Alerting-Timestamp). Other catalogues list `ts.body`; Grafana's code writes `ts:body`, and that is followed",
        vectors: "official inputs: grafana/alerting `http/hmac_test.go` (secret `secret`, body `test message`, the mock clock's time 0) under the default header; the others generated, among them a `ts.body` signature that is refused",
    },
    Source {
        preset: "wise",
        scheme: "Wise's \"Event Handling\" page (docs.wise.com: X-Signature-SHA256, base64 RSA SHA-256 of the body; the production and sandbox public keys are published there; X-Delivery-Id is not signed, so the body's SHA-256 is the key)",
        vectors: "generated with that scheme under a test key pair made for the vectors (Wise signs with its own private key)",
    },
    Source {
        preset: "falai",
        scheme: "fal's \"Webhooks\" page, \"Verifying Your Webhook\" (docs.fal.ai: Ed25519, hex, over request ID, user ID, timestamp and the body's hex SHA-256 joined by newlines, from the X-Fal-Webhook-* headers; keys from fal's JWKS; a 5-minute window)",
        vectors: "generated with that scheme under a test key pair made for the vectors, configured as a JWKS (fal signs with its own private key)",
    },
    // Fourth round, part A (issue 42): Standard Webhooks under the provider's own name.
    Source {
        preset: "supabase",
        scheme: "Supabase \"Auth Hooks\" and \"Send Email Hook\" (supabase.com/docs/guides/auth/auth-hooks: Standard Webhooks, webhook-id, webhook-timestamp, webhook-signature; the secret is shown as v1,whsec_<base64> and the docs' example strips v1, before verifying). Database webhooks sign nothing and are not this preset",
        vectors: "generated with that scheme (Supabase publishes no complete signed example)",
    },
    Source {
        preset: "gemini",
        scheme: "The Gemini API \"Webhooks\" guide (ai.google.dev/gemini-api/docs/webhooks: static webhooks follow Standard Webhooks, HMAC-SHA256 under the signing secret returned once at creation). Dynamic webhooks, signed as RS256 JWTs, are not this preset",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "etsy",
        scheme: "Etsy's \"Webhooks\" essentials page (developers.etsy.com/documentation/essentials/webhooks: signing secrets; webhook-id, webhook-timestamp, webhook-signature) and Etsy's own release note (etsy/open-api discussion 1509); the event in event_type",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "loops",
        scheme: "Loops \"Webhooks\" (loops.so/docs/webhooks) and the webhooks block of Loops' OpenAPI document (webhook-id, webhook-timestamp, webhook-signature: HMAC-SHA256 over id.timestamp.body under the endpoint's signing secret); the event in eventName",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "vanta",
        scheme: "Vanta's \"Webhooks\" developer page (developer.vanta.com/docs/webhooks: webhooks are powered by Svix and verified as Svix documents, svix-id, svix-timestamp, svix-signature)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "finch",
        scheme: "Finch-API/finch-api-node `src/resources/webhooks.ts` `verifySignature` (finch-event-id, finch-timestamp, finch-signature: `v1,` + base64 HMAC-SHA256 of event-id.timestamp.body under the base64-decoded secret; 5-minute window both ways)",
        vectors: "official: finch-api-node `tests/api-resources/webhooks.test.ts` (payload, secret, Finch-Event-Id, timestamp and signature; its 6-minutes-later case); the others generated",
    },
    Source {
        preset: "dodopayments",
        scheme: "Dodo Payments \"Webhooks\" (docs.dodopayments.com/developer-resources/webhooks: the Standard Webhooks specification, webhook-id, webhook-timestamp, webhook-signature; the event in type)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    // Fourth round, part A (issue 42, group 2): body HMACs.
    Source {
        preset: "squarespace",
        scheme: "Squarespace \"Verifying notifications\" (developers.squarespace.com/webhooks/verifying-notifications: Squarespace-Signature, hex HMAC-SHA256 of the raw body under the hex-decoded subscription secret)",
        vectors: "generated with that scheme (the page's example has no complete payload)",
    },
    Source {
        preset: "onfleet",
        scheme: "Onfleet \"Webhook Authentication\" (docs.onfleet.com/reference/secrets: X-Onfleet-Signature, hex HMAC-SHA512 of the raw body under the hex-decoded webhook secret) and \"Webhook Validation\" (docs.onfleet.com/reference/validation: GET ?check=<string> answered with the string and HTTP 200)",
        vectors: "generated with that scheme, and the page's check validation (no published test vector was found)",
    },
    Source {
        preset: "ashby",
        scheme: "Ashby \"Authenticating Webhooks\" (developers.ashbyhq.com/docs/authenticating-webhooks: Ashby-Signature: sha256= + hex HMAC-SHA256 of the raw body under the secret token); the event in action",
        vectors: "generated with that scheme under the page's example secret (the page elides its payload)",
    },
    Source {
        preset: "npm",
        scheme: "npm's hook receiver (npm/npm-hook-receiver `index.js`: x-npm-signature is sha256= + hex HMAC-SHA256 of the raw body under the hook's shared secret); the event in event",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "quickbooks",
        scheme: "Intuit \"Managing webhooks notifications\", Validating the notification (developer.intuit.com: intuit-signature is the base64 HMAC-SHA256 of the payload under the app's verifier token)",
        vectors: "generated with that scheme over the page's sample payload",
    },
    Source {
        preset: "paystack",
        scheme: "Paystack's documentation snippets (PaystackOSS/doc-code-snippets `src/doc/payments/webhooks/verifying-transaction`: x-paystack-signature is the hex HMAC-SHA512 of the body under the secret key); the event in event",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "cronofy",
        scheme: "Cronofy's own verification examples (cronofy/notification-hmac-examples `node/index.js`, `ruby/server.rb`, `php/index.php`: Cronofy-HMAC-SHA256 is the base64 HMAC-SHA256 of the raw body under the OAuth client secret)",
        vectors: "generated with that scheme (the examples carry no fixed message)",
    },
    Source {
        preset: "configcat",
        scheme: "ConfigCat \"Notifications - Webhooks\", Verifying Webhook requests (configcat/docs `website/docs/advanced/notifications-webhooks.mdx`: X-ConfigCat-Webhook-Signature-V1, comma-separated base64 HMAC-SHA256 of webhook ID + timestamp + raw body, one per signing key; no window documented, so none is checked)",
        vectors: "official: the page's example (signing key configcat_whsk_VN3j…, request ID b616ca65…, timestamp 1669629035, body examplebody, signature Ks3cYsu9…); the others generated",
    },
    Source {
        preset: "knock",
        scheme: "Knock \"Outbound webhooks\", Verifying the signature (knocklabs/docs `content/developer-tools/outbound-webhooks/overview.mdx`: x-knock-signature t=<ms>,s=<base64 HMAC-SHA256 of t.body>; its example refuses a timestamp more than five minutes away)",
        vectors: "generated with that scheme (the page's example has no fixed message)",
    },
    Source {
        preset: "ably",
        scheme: "Ably \"Webhooks\", Webhook security (ably/docs `src/pages/docs/platform/integrations/webhooks/index.mdx`: X-Ably-Signature, base64 HMAC-SHA256 of the request body under the keyValue, the secret part of the API key after its `:`; X-Ably-Key names the key)",
        vectors: "generated with that scheme (no published test vector was found)",
    },
    Source {
        preset: "sinch",
        scheme: "Sinch's Node SDK (sinch/sinch-sdk-node `packages/sdk-client/src/utils/authorization.helper.ts` `validateWebhookSignature`: x-sinch-webhook-signature is the base64 HMAC-SHA256 of body.nonce.timestamp, nonce and timestamp from x-sinch-webhook-signature-nonce and -timestamp, under the Conversation app's webhook secret; no window)",
        vectors: "official: sinch-sdk-node `packages/sdk-client/tests/utils/authorization.helper.test.ts` (Conversation body, nonce 01FJA8B4…, timestamp 1634579353, secret foo_secret1234, signature 6bpJoRmF…, and its invalid-signature case); the others generated",
    },
    Source {
        preset: "increase",
        scheme: "Increase's own SDKs, which disagree over time: Increase/increase-python until March 2026 (`src/increase/resources/webhooks.py`, removed by \"chore: remove custom code\") verified `Increase-Webhook-Signature: t=<ISO 8601>,v1=<hex HMAC-SHA256 of t.body>` under the secret's text; the current `src/increase/resources/events.py` `unwrap` (release 0.424.0 on) verifies Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature) with the standardwebhooks library, the client's secret used as raw key bytes and a whsec_ string decoded. The preset follows the current SDK; the older header is not accepted",
        vectors: "generated with the current SDK's scheme, under the key of its unwrap test (b\"secret\\n\", given raw and as whsec_c2VjcmV0Cg==); the old SDKs' official example (t=2022-01-31T23:59:59Z, v1=3f9c3dcc…) is kept as a refused vector to mark the change",
    },
    // Fourth round, part A (issue 42, group 2): a query-signing HMAC.
    Source {
        preset: "mercado_pago",
        scheme: "Mercado Pago's Node SDK (mercadopago/sdk-nodejs `src/utils/webhook/index.ts` `WebhookSignatureValidator`: x-signature `ts=<seconds>,v1=<hex>`, HMAC-SHA256 under the secret of `id:<data.id from the query>;request-id:<x-request-id>;ts:<ts>;`, a part left out when absent; an optional window, 300 s suggested) and its \"Webhooks\" notifications page (the same manifest, an alphanumeric data.id lower-cased). The sources disagree on data.id's case (the SDK's \"preserve data.id case\" fix against the docs): both forms are accepted. The body is not signed: the key is the signed x-request-id, and a body data.id must equal the signed one",
        vectors: "inputs of sdk-nodejs `src/utils/webhook/webhook.spec.ts` (secret your_secret_key_here, x-request-id 2066ca19-…, data.id ORD01JQ4S4KY8HWQ6NA5PXB65B3D3, ts 1742505638) signed as received and lower-cased; the others generated",
    },
];

#[cfg(test)]
mod tests;
