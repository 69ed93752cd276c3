//! The built-in presets, named by the provider keys of the provider catalogue. A
//! [`Preset`] is a handle on one row of the catalogue (`provider::presets`):
//! every answer here — its description, credential locations, event-ID source,
//! window, handshake, verifier — reads that row.

use http::HeaderName;

use super::event_id::EventIdSource;
use super::presets::{self, Build, PresetSpec};
pub use super::presets::{Auth, CredentialAt};
use super::{Credential, HmacOptions, Template, Verifier};

/// A built-in preset: a handle on its row of the catalogue.
#[derive(Clone, Copy)]
pub struct Preset(&'static PresetSpec);

impl PartialEq for Preset {
    fn eq(&self, other: &Self) -> bool {
        // Names are unique (a test checks it).
        self.0.name == other.0.name
    }
}

impl Eq for Preset {}

impl std::fmt::Debug for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Preset").field(&self.0.name).finish()
    }
}

/// The description of a preset.
#[derive(Debug, Clone)]
pub struct Info {
    pub name: &'static str,
    pub auth: Auth,
    pub scheme: &'static str,
    pub headers: &'static str,
    pub event_id: EventIdSource,
    /// Where the event type is, where the provider says so plainly.
    pub event_type: Option<presets::EventTypeAt>,
    pub tolerance: Option<u64>,
    pub handshake: &'static str,
    /// Whether the preset signs the public URL (the route then needs `public_url`).
    pub needs_public_url: bool,
    /// The credential shape, for error messages and docs.
    pub credential: &'static str,
    /// The default header of a token preset whose provider lets the operator name it
    /// (a route's `auth_header`).
    pub auth_header: Option<&'static str>,
}

impl Preset {
    /// The generic HMAC provider.
    pub const HMAC: Self = Self(&presets::generic::HMAC);

    /// Every preset name, in catalogue order.
    pub const NAMES: &'static [&'static str] = presets::NAMES;

    /// The preset name closest to `word` by edit distance, when close enough to be a
    /// typo of it (`githbu` → `github`), for "did you mean" hints.
    pub fn nearest(word: &str) -> Option<&'static str> {
        nearest(word, Self::NAMES.iter().copied())
    }

    /// Looks a preset up by its provider key.
    pub fn parse(name: &str) -> Option<Self> {
        Self::all().find(|p| p.name() == name)
    }

    /// Every preset, in catalogue order.
    pub fn all() -> impl Iterator<Item = Self> {
        presets::all().map(Self)
    }

    /// The provider key.
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// The preset's row of the catalogue.
    pub fn spec(self) -> &'static PresetSpec {
        self.0
    }

    /// Where the preset puts the event's type (`None`: it names none; a route may).
    pub fn default_event_type(self) -> Option<super::EventTypeSource> {
        self.0.event_type.map(super::EventTypeSource::of)
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
        Some(self.0.event_id.source())
    }

    /// The provider's timestamp window in seconds, or `None` if it signs no timestamp.
    pub fn default_tolerance(self, opts: Option<&HmacOptions>) -> Option<u64> {
        if self == Self::HMAC {
            return opts.and_then(|o| o.timestamp_header.as_ref()).map(|_| 300);
        }
        self.0.tolerance
    }

    /// Whether the provider hands out the secret in its handshake (Asana, Notion): a
    /// route may then start with no secret, answer the handshake, and refuse every
    /// delivery until the secret is configured.
    pub fn secret_from_handshake(self) -> bool {
        self.0.handshake.hands_over_secret()
    }

    /// Where this preset's credential (or the secret a handshake hands over) travels
    /// in a request. Captures redact every one of them; signatures are not listed:
    /// they are useless without the key, and replays re-sign.
    pub fn credential_locations(self) -> &'static [CredentialAt] {
        self.0.credential_at
    }

    /// Whether a route of this preset must set `public_url`.
    pub fn needs_public_url(self, opts: Option<&HmacOptions>) -> bool {
        if self == Self::HMAC {
            return opts
                .and_then(|o| o.payload.as_deref())
                .and_then(|p| Template::parse(p).ok())
                .is_some_and(|t| t.uses_url());
        }
        self.0.needs_public_url
    }

    /// The description of this preset.
    pub fn info(self) -> Info {
        let s = self.0;
        Info {
            name: s.name,
            auth: s.auth,
            scheme: s.scheme,
            headers: s.headers,
            event_id: s.event_id.source(),
            event_type: s.event_type,
            tolerance: s.tolerance,
            handshake: s.handshake.describe(),
            needs_public_url: s.needs_public_url,
            credential: s.credential,
            auth_header: s.auth_header,
        }
    }

    /// The header that carries the credential by default, when the provider lets the
    /// operator name it (a route's `auth_header`); `None` when it does not.
    pub fn auth_header(self) -> Option<&'static str> {
        self.0.auth_header
    }

    /// Builds the verifier for a route from its credentials.
    pub fn verifier(
        self,
        creds: &[Credential],
        opts: Option<&HmacOptions>,
        tolerance: Option<u64>,
    ) -> Result<Verifier, String> {
        self.verifier_with_header(creds, opts, tolerance, None)
    }

    /// [`verifier`](Self::verifier) for a route that names the header carrying its
    /// credential (`auth_header`; only presets with [`auth_header`](Self::auth_header)).
    pub fn verifier_with_header(
        self,
        creds: &[Credential],
        opts: Option<&HmacOptions>,
        tolerance: Option<u64>,
        auth_header: Option<&HeaderName>,
    ) -> Result<Verifier, String> {
        if auth_header.is_some() && self.0.auth_header.is_none() {
            return Err(format!(
                "provider {:?} sends its credential in a header of its own: auth_header is only for presets whose provider lets the operator name it",
                self.name()
            ));
        }
        let scheme = (self.0.build)(&Build {
            creds,
            opts,
            auth_header,
        })?;
        let handshake = self.0.handshake.with_keys(creds)?;
        Ok(Verifier::new(
            self,
            scheme,
            tolerance,
            handshake,
            self.0.reply.clone(),
        ))
    }
}

/// The candidate closest to `word` by edit distance, when close enough to be a typo
/// of it: at most a third of the candidate's length, and at least 2, apart.
pub(crate) fn nearest<'a>(
    word: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .map(|n| (edit_distance(word, n), n))
        .filter(|(d, n)| *d <= (n.len() / 3).max(2))
        .min()
        .map(|(_, n)| n)
}

/// Levenshtein distance between two strings, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The head of `docs/providers.md`, up to the table's header row.
const TABLE_HEAD: &str = "# Providers\n\n\
         Generated by `hookgate providers --markdown > docs/providers.md`; a test keeps this file in step\n\
         with the code. Each preset is named by its provider key; set it as a route's\n\
         `provider`. \"Window\" is the default `tolerance` (a route may change it, or set\n\
         \"off\"). \"Event type\" is where the provider puts the event's type, for the\n\
         presets whose documentation says so plainly (`a + b`: a header, then `.` and a\n\
         body field when there is one, as GitHub's `pull_request.opened`); the gateway\n\
         reads it into each delivery's log line, capture and queue record, and a route\n\
         may set its own with `event_type = \"header:NAME\" | \"json:/pointer\"`.\n\
         Where a provider gives no event\n\
         ID, the preset deduplicates on `body-sha256`; any route may override the\n\
         source with `event_id`. An event ID\n\
         taken from a header the signature does not cover (every `header:…` below but\n\
         `webhook-id`, `svix-id`, Finch's `finch-event-id` and Twitch's message ID, which are\n\
         signed) is not used\n\
         as the key: such a delivery is deduplicated on `sig-` + SHA-256 of the signed\n\
         bytes (see docs/security.md).\n\n\
         | preset | auth | scheme | headers | credential | event ID | event type | window | handshake |\n\
         |---|---|---|---|---|---|---|---|---|\n";

/// What `docs/providers.md` says after the table: the token presets, PayPal's
/// signature, credentials with several parts.
const NOTES: &str = "\n## What the token presets protect against\n\n\
         `gitlab`, `okta`, `postmark`, `chargebee`, `pipedrive`, `figma`, `mailchimp`,\n\
         `msgraph`, `monday`, `telegram`, `mixpanel`, `sparkpost`, `new_relic`, `fillout`,\n\
         `zapier`, `bigcommerce`, `datadog`, `brevo` and `mercado_pago` are marked *token*: the\n\
         provider signs nothing, or (monday) signs a JWT that does not cover the body, or\n\
         (mercado_pago) signs the query's `data.id`, `x-request-id` and a timestamp but not the\n\
         body. hookgate compares the shared value it offers (a header, Basic auth, a passcode or\n\
         clientState in the body, a query token, or the JWT) in constant time, and checks\n\
         Mercado Pago's HMAC, its 5-minute window, and that a body's `data.id` is the signed one;\n\
         its deliveries are deduplicated on the signed `x-request-id`, never on the body. Where the provider lets the operator name\n\
         the header (`okta`, `new_relic`, `fillout`, `zapier`, `bigcommerce`, `datadog`,\n\
         `brevo`), the route names it with `auth_header` (default `Authorization`), and each\n\
         credential is that header's whole value: a string as is, `{ username, password }` as\n\
         HTTP Basic auth, `{ bearer }` as `Bearer <token>`. Captures and the delivery log hide\n\
         that header's value whatever its name. That stops anyone who does not know the value. It\n\
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
         route with `secrets` takes none.\n";

/// The provider table of `hookgate providers --markdown` and `docs/providers.md`.
pub fn markdown_table() -> String {
    let mut s = String::from(TABLE_HEAD);
    for p in Preset::all() {
        let i = p.info();
        let auth = match i.auth {
            Auth::Signature => "signature",
            Auth::Token => "token",
        };
        let event_type = i.event_type.map_or("—".to_string(), |t| t.to_string());
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
            "| `{}` | {auth} | {}{url} | {} | {} | {} | {} | {window} | {} |\n",
            i.name,
            cell(i.scheme),
            cell(i.headers),
            cell(i.credential),
            cell(&i.event_id.to_string()),
            cell(&event_type),
            cell(i.handshake),
        ));
    }
    s.push_str(NOTES);
    s.push_str(AWS_SNS);
    s.push_str(
        "\n## Sources of the presets added or changed in the third and fourth rounds\n\n\
         Each row names where the scheme was read and where its test vectors\n\
         (`tests/vectors/vectors.json`) come from: *official* vectors are the provider's\n\
         own published messages or SDK test data; the others were generated with the\n\
         scheme described at the cited source.\n\n\
         | preset | scheme read at | vectors |\n\
         |---|---|---|\n",
    );
    for src in presets::SOURCES {
        s.push_str(&format!(
            "| `{}` | {} | {} |\n",
            src.preset, src.scheme, src.vectors
        ));
    }
    s.push_str(LEFT_OUT);
    s.push_str(LEFT_OUT_42A);
    s
}

/// The third round's named providers without a preset, and why: a scheme is added
/// only once the provider's own documentation or SDK confirms it.
const LEFT_OUT: &str = "\n## Named for the third round and left out\n\n\
    A preset is added only when the provider's own documentation or SDK confirms its\n\
    scheme; a guessed scheme would be a defect. These were named and are not presets yet:\n\n\
    - Svix-sent, not confirmed from the provider's own material: `beehiiv`, `guesty`,\n\
      `nash`, `psifi`, `safebase`, `sardine`.\n\
    - Own schemes not confirmed from the provider's documentation or SDK: `adobe_sign`,\n\
      `checkbook`, `orum`, `vapi`, `vgs`, `airship`, `go1`, `hostedhooks`, `orbit`,\n\
      `signal_sciences`, `trendmicro_conformity`, `vmware`, `fireblocks`,\n\
      `fusionauth`, `tiktok_shop`, `solidgate`, `wix` (`bigcommerce` has since become a\n\
      token preset: it signs nothing, and sends the headers the operator registers).\n\
    - Confirmed in part only: `front` (two schemes and a challenge whose reply is not\n\
      documented in full), `linkedin` (the challenge is documented, the event signature's\n\
      exact input is not), `hygraph` (signs a JSON re-serialisation of the body),\n\
      `smartcar` (its SDK signs a re-serialised body; the VERIFY event's shape is not\n\
      documented in the SDK), `strava` (signs nothing; only a subscription handshake),\n\
      `courier` (its page concatenates the timestamp and the body without saying whether a\n\
      separator stands between them), `veriff` (the header and key are documented, the\n\
      signature's encoding is not in the pages read), `pandadoc` (the signature travels in\n\
      the URL query, which the HMAC verifier does not read).\n\
    \n\
    ## Named in issue 42 (asymmetric, JWT and request signing) and left out\n\
    \n\
    `grafana`, `wise` and `falai` were added from their providers' own source. These were\n\
    named and are not presets yet; none is guessed:\n\n\
    - `messagebird` (a JWT in MessageBird-Signature-JWT whose claims bind the URL and the\n\
      body's hash) and `vonage` (a JWT whose `payload_hash` binds the body): the claims'\n\
      exact encoding and the window were not yet read from the providers' own SDKs.\n\
    - `jira_connect`: the `qsh` claim hashes a canonical request relative to the app's\n\
      base URL; that canonical form was not yet read from Atlassian's own library.\n\
    - `kinde`: the body is an RS256 JWT whose event ID lives inside it; the claims that\n\
      carry the ID and the type were not yet confirmed from Kinde's own SDK.\n\
    - `keygen`: its Ed25519 HTTP signature covers `(request-target)`, `host`, `date` and\n\
      `digest`; the exact signing string was not yet read from Keygen's own source.\n\
    - `constant_contact`: the detached JWS was not confirmed from Constant Contact's own\n\
      documentation.\n\
    - `smartcar`: still as above (its SDK signs a re-serialised body; the VERIFY\n\
      challenge's answer was not re-read from Smartcar's own source).\n";

/// Issue 42's groups 1 and 2 (Standard Webhooks under the provider's name, body
/// HMACs): the named providers without a preset, and why.
const LEFT_OUT_42A: &str = "\n## Named in issue 42 (Standard Webhooks and body HMACs) and left out\n\n\
    - Not settled from the provider's own material: `klaviyo` (its \"Working with system\n\
      webhooks\" names Klaviyo-Signature, Klaviyo-Timestamp and Klaviyo-Webhook-Id, but the\n\
      parts read state neither the signed input nor the timestamp's format, and other\n\
      sources disagree on the format), `front` (the application-webhook page names the\n\
      signing key, the millisecond timestamp and the x-front-challenge set-up request, but\n\
      not the reply the challenge expects), `deel` (HMAC-SHA256 of `POST` + the raw body is\n\
      documented, the signature's encoding is not in the parts read), `primer`\n\
      (X-Signature-Primary and -Secondary are base64 HMACs of the payload, the hash function\n\
      is not named in the parts read), `doppler` (X-Doppler-Signature is named, its format\n\
      was not in the parts read), `lob` and `checkr` (their pages' signature sections could\n\
      not be read; other code agrees, but is not theirs), `shippo` (HMAC is set up through\n\
      the account manager; header and input are not in the parts read).\n\
    - No scheme found in the provider's own documentation or SDK: `tally`, `framer`,\n\
      `sendbird`, `affirm`, `airship`, `checkbook`, `linkedin` (its documentation repository\n\
      could not be read here).\n\
    - `authorize_net`: X-ANET-Signature is `sha512=` + upper-case hex HMAC-SHA512 of the\n\
      body under the Signature Key, but Authorize.Net's own material does not settle the\n\
      key's bytes: its knowledge base (article 000001502) says the 128-hex-digit Signature\n\
      Key must be converted to binary, its SDKs and webhooks sample app verify no\n\
      webhook, and the only reproducible example (a merchant's post on its developer\n\
      forum) matches the key's ASCII text. Left out until Authorize.Net's own source says.\n\
    - `increase`, where the sources disagree, follows Increase's current SDK (Standard\n\
      Webhooks); its sources row above says what the older SDKs checked.\n";

const AWS_SNS: &str = "\n## AWS SNS\n\n\
    SNS signs the message's fields, not the body's bytes: `Message`, `MessageId`,\n\
    `Subject` (when present), `Timestamp`, `TopicArn` and `Type` for a `Notification`;\n\
    `Message`, `MessageId`, `SubscribeURL`, `Timestamp`, `Token`, `TopicArn` and `Type`\n\
    for a `SubscriptionConfirmation` or `UnsubscribeConfirmation`, each as\n\
    `name\\nvalue\\n`, with RSA and SHA-1 (`SignatureVersion` 1) or SHA-256 (2). Anything\n\
    else in the body (`MessageAttributes`, `UnsubscribeURL`, `SigningCertURL`) is not\n\
    signed: a handler must trust only the signed fields. A body with a key sent twice is\n\
    refused. The signature proves SNS sent the message, not from which topic, and anyone\n\
    can create a topic: each credential names the topic it accepts,\n\
    `secrets = [{ topic_arn = \"arn:aws:sns:eu-west-1:111122223333:orders\" }]` (`\"*\"`\n\
    accepts every topic's messages), and only a named topic's subscription is confirmed\n\
    by the gateway (with `\"*\"` it is logged for the operator, as with `confirm = \"manual\"`).\n\n\
    The certificate is fetched from `SigningCertURL` only when that is\n\
    `https://sns.<region>.amazonaws.com[.cn]/SimpleNotificationService-<hex>.pem`\n\
    (no other scheme, host, port, user, query or path), at most 16 KiB, within 5 s, at\n\
    most 4 fetches at once per route, and cached by URL (a failure is retried after\n\
    30 s). The request that needs a fetch waits for it; the runtime moves every other\n\
    request off that thread meanwhile. To run offline, pin the certificate:\n\
    `{ topic_arn = \"…\", cert_pem = \"file:/etc/hookgate/sns.pem\" }`; nothing is fetched\n\
    for that topic. A delivery whose certificate cannot be had is answered 503 with\n\
    `Retry-After` (SNS retries 5xx answers only).\n\n\
    A signed `SubscriptionConfirmation` is answered 200 and confirmed by fetching its\n\
    `SubscribeURL` (same host rule, in the background); with\n\
    `{ topic_arn = \"…\", confirm = \"manual\" }` the URL is only logged, for the\n\
    operator to open. An `UnsubscribeConfirmation` is answered 200 and logged. Neither is\n\
    forwarded. The event ID is `MessageId`; the event type is `Type`, and a route may\n\
    read a message attribute instead with\n\
    `event_type = \"json:/MessageAttributes/<name>/Value\"` (not signed). The window is\n\
    one hour: SNS retries an HTTP/S delivery for at most 3,600 s.\n";

#[cfg(test)]
mod nearest_tests {
    use super::Preset;

    #[test]
    fn a_typo_suggests_the_nearest_preset() {
        assert_eq!(Preset::nearest("githbu"), Some("github"));
        assert_eq!(Preset::nearest("strpie"), Some("stripe"));
        assert_eq!(Preset::nearest("zzzzzzzzzzzz"), None);
    }
}
