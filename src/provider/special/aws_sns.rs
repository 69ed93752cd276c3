//! Amazon SNS over HTTP(S): the JSON body's fields, in a canonical string chosen by
//! the message's `Type`, signed with RSA (`SignatureVersion` 1 = SHA-1, 2 = SHA-256)
//! under the certificate at `SigningCertURL`.
//!
//! The signature proves that SNS sent the message, not which topic it came from:
//! anyone can create a topic and subscribe a URL to it. So every credential names the
//! topic it accepts (`topic_arn`), a message from any other topic is refused, and
//! only a configured topic's subscription is ever confirmed.
//!
//! The certificate is either pinned in the credential (`cert_pem`, for offline use)
//! or fetched once per URL, and only from `https://sns.<region>.amazonaws.com[.cn]/
//! SimpleNotificationService-<hex>.pem`: any other scheme, host, port, user, query or
//! path is refused before a connection is opened. A fetch is bounded in size and
//! time, and at most [`MAX_FETCHES`] run at once. Verification is synchronous, so a
//! request that needs a fetch runs it in `block_in_place`: that request waits, and the
//! runtime moves the worker's other tasks (every other route) to another thread.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use http::StatusCode;
use rsa::signature::Verifier as _;
use serde_json::Value;

use super::first;
use crate::provider::handshake::HandshakeReply;
use crate::provider::mac::decode_base64;
use crate::provider::timestamp::{TsFormat, check_window};
use crate::provider::{Credential, Inbound, VerifyError};

/// The largest certificate accepted from `SigningCertURL` (SNS's are about 2 KiB).
const MAX_CERT_BYTES: usize = 16 * 1024;
/// How long one certificate fetch (or one subscription confirmation) may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a failed fetch is remembered before the URL is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(30);
/// Certificates kept per route; SNS uses one per region at a time.
const MAX_CACHED: usize = 32;
/// Fetches running at once per route; a request beyond it is refused, not queued.
pub(crate) const MAX_FETCHES: usize = 4;

/// What the gateway does with a signed `SubscriptionConfirmation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Confirm {
    /// Fetch its `SubscribeURL` (same host rule as certificates).
    Auto,
    /// Log its `SubscribeURL` for the operator, who opens it.
    Manual,
}

/// One configured topic, with its pinned certificate if any.
#[derive(Debug, Clone)]
struct Topic {
    /// The accepted `TopicArn`; `None` = any topic (`topic_arn = "*"`).
    arn: Option<String>,
    pinned: Option<rsa::PublicKey>,
    confirm: Confirm,
}

/// The keys of an `aws_sns` route.
#[derive(Debug, Clone)]
pub struct AwsSns {
    topics: Vec<Topic>,
    certs: Arc<CertCache>,
}

impl AwsSns {
    /// Reads the route's credentials: `{ topic_arn, cert_pem?, confirm? }` each.
    pub fn from_credentials(creds: &[Credential]) -> Result<Self, String> {
        let mut topics = Vec::new();
        let mut origin = None;
        for c in creds {
            let Credential::Parts(parts) = c else {
                return Err(
                    "aws_sns takes a table per topic: { topic_arn = \"arn:aws:sns:…\" } (add cert_pem to pin the certificate)"
                        .into(),
                );
            };
            for name in parts.keys() {
                let known = matches!(name.as_str(), "topic_arn" | "cert_pem" | "confirm")
                    || (TEST_ORIGIN_ALLOWED && name == "test_cert_origin");
                if !known {
                    return Err(format!(
                        "unknown part `{name}` (aws_sns takes topic_arn, cert_pem and confirm)"
                    ));
                }
            }
            let arn = c.part_str("topic_arn")?;
            let arn = if arn == "*" {
                None
            } else if arn.starts_with("arn:aws") && arn.split(':').count() == 6 {
                Some(arn.to_owned())
            } else {
                return Err(format!(
                    "topic_arn must be a topic ARN (arn:aws:sns:<region>:<account>:<name>) or \"*\", not {arn:?}"
                ));
            };
            let pinned = match parts.get("cert_pem") {
                Some(pem) => Some(public_key_of(pem.expose())?),
                None => None,
            };
            let confirm = match parts.get("confirm").map(|s| s.expose()) {
                None | Some(b"auto") => Confirm::Auto,
                Some(b"manual") => Confirm::Manual,
                Some(_) => return Err("confirm must be \"auto\" or \"manual\"".into()),
            };
            if parts.contains_key("test_cert_origin") {
                origin = Some(
                    c.part_str("test_cert_origin")?
                        .trim_end_matches('/')
                        .to_owned(),
                );
            }
            topics.push(Topic {
                arn,
                pinned,
                confirm,
            });
        }
        if topics.is_empty() {
            return Err("aws_sns needs at least one { topic_arn = \"…\" }".into());
        }
        Ok(Self {
            topics,
            certs: Arc::new(CertCache::new(HostRule {
                test_origin: origin,
            })),
        })
    }

    pub(super) fn verify(
        &self,
        req: &Inbound<'_>,
        now: u64,
        tol: Option<u64>,
    ) -> Result<usize, VerifyError> {
        let msg = Message::parse(req.body)?;
        let sha256 = match msg.field("SignatureVersion")? {
            "1" => false,
            "2" => true,
            _ => return Err(VerifyError::Malformed("SignatureVersion".into())),
        };
        let canonical = msg.canonical()?;
        let sig = decode_base64(msg.field("Signature")?)
            .and_then(|s| rsa::pkcs1v15::Signature::try_from(s.as_slice()).ok())
            .ok_or_else(|| VerifyError::Malformed("Signature".into()))?;
        let cert_url = msg.field("SigningCertURL")?;
        if !self.certs.rule.cert_url(cert_url) {
            return Err(VerifyError::Malformed("SigningCertURL".into()));
        }
        let topic = msg.field("TopicArn")?;
        // The certificate is fetched only for a configured topic, and at most once.
        let mut fetched: Option<Result<Arc<rsa::PublicKey>, VerifyError>> = None;
        let mut unavailable = None;
        let verify = |key: &rsa::PublicKey| {
            if sha256 {
                rsa::pkcs1v15::VerifyingKey::<sha2::Sha256>::new(key.clone())
                    .verify(canonical.as_bytes(), &sig)
                    .is_ok()
            } else {
                rsa::pkcs1v15::VerifyingKey::<sha1::Sha1>::new(key.clone())
                    .verify(canonical.as_bytes(), &sig)
                    .is_ok()
            }
        };
        let found = first(&self.topics, |t| {
            if t.arn.as_deref().is_some_and(|a| a != topic) {
                return false;
            }
            match &t.pinned {
                Some(key) => verify(key),
                None => match fetched.get_or_insert_with(|| self.certs.get(cert_url)) {
                    Ok(key) => verify(key),
                    Err(e) => {
                        unavailable = Some(e.clone());
                        false
                    }
                },
            }
        });
        let i = match (found, unavailable) {
            (Ok(i), _) => i,
            (Err(_), Some(e)) => return Err(e),
            (Err(e), None) => return Err(e),
        };
        check_window(
            TsFormat::Iso8601.parse_ms(msg.field("Timestamp")?)?,
            now,
            tol,
        )?;
        Ok(i)
    }

    /// The handshake reply for a verified subscription message, `None` for a
    /// notification. A `SubscriptionConfirmation` is confirmed in the background (or
    /// logged, with `confirm = "manual"`); an `UnsubscribeConfirmation` is logged.
    pub(crate) fn handshake(
        &self,
        req: &Inbound<'_>,
        secret_index: usize,
    ) -> Option<HandshakeReply> {
        let msg = Message::parse(req.body).ok()?;
        let kind = msg.field("Type").ok()?;
        let topic = msg.field("TopicArn").unwrap_or_default();
        match kind {
            "SubscriptionConfirmation" => {
                let url = msg.field("SubscribeURL").ok()?;
                // `topic_arn = "*"` accepts any topic's messages, but never subscribes
                // the endpoint to a topic by itself: anyone can create a topic.
                let confirm = self.topics.get(secret_index).map(|t| match t.arn {
                    Some(_) => t.confirm,
                    None => Confirm::Manual,
                })?;
                match confirm {
                    Confirm::Manual => tracing::warn!(
                        topic,
                        subscribe_url = url,
                        "SNS subscription awaits confirmation: open its SubscribeURL"
                    ),
                    Confirm::Auto => self.certs.confirm(topic, url),
                }
                Some(HandshakeReply::empty(StatusCode::OK))
            }
            "UnsubscribeConfirmation" => {
                tracing::info!(topic, "SNS unsubscribed this endpoint from a topic");
                Some(HandshakeReply::empty(StatusCode::OK))
            }
            _ => None,
        }
    }
}

/// The test-only credential part `test_cert_origin` exists only in test builds and
/// with the `testing` feature: a release build refuses it as an unknown part.
const TEST_ORIGIN_ALLOWED: bool = cfg!(any(test, feature = "testing"));

/// Which URLs the gateway fetches.
#[derive(Debug)]
struct HostRule {
    /// A test's local server (`http://127.0.0.1:PORT`), honoured only where
    /// [`TEST_ORIGIN_ALLOWED`].
    test_origin: Option<String>,
}

impl HostRule {
    /// A certificate URL: SNS's host, and a `SimpleNotificationService-<hex>.pem` path.
    fn cert_url(&self, url: &str) -> bool {
        let Some(path) = self.path_of(url) else {
            return false;
        };
        path.strip_prefix("/SimpleNotificationService-")
            .and_then(|p| p.strip_suffix(".pem"))
            .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
    }

    /// A `SubscribeURL`: SNS's host, any path and query.
    fn subscribe_url(&self, url: &str) -> bool {
        self.path_of(url).is_some()
    }

    /// The path and query of a URL on SNS's host (or the test origin).
    fn path_of<'u>(&self, url: &'u str) -> Option<&'u str> {
        if TEST_ORIGIN_ALLOWED
            && let Some(origin) = &self.test_origin
            && let Some(rest) = url.strip_prefix(origin.as_str())
            && rest.starts_with('/')
        {
            return Some(rest);
        }
        let rest = url.strip_prefix("https://")?;
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (host, path) = rest.split_at(end);
        if !sns_host(host) || !path.starts_with('/') || path.contains('#') {
            return None;
        }
        Some(path)
    }
}

/// `sns.<region>.amazonaws.com` or `sns.<region>.amazonaws.com.cn`, lower case, with
/// a region of letters, digits and dashes: no port, no user, nothing else.
fn sns_host(host: &str) -> bool {
    let region = host
        .strip_prefix("sns.")
        .and_then(|h| {
            h.strip_suffix(".amazonaws.com")
                .or_else(|| h.strip_suffix(".amazonaws.com.cn"))
        })
        .unwrap_or_default();
    region.len() >= 3
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The RSA public key of a PEM certificate.
fn public_key_of(pem: &[u8]) -> Result<rsa::PublicKey, String> {
    use rsa::pkcs8::DecodePublicKey;
    use x509_cert::der::{DecodePem, Encode};
    let cert = x509_cert::Certificate::from_pem(pem)
        .map_err(|_| "cert_pem is not a PEM certificate".to_string())?;
    let spki = cert
        .tbs_certificate()
        .subject_public_key_info()
        .to_der()
        .map_err(|_| "cannot read the certificate's public key".to_string())?;
    rsa::PublicKey::from_public_key_der(&spki)
        .map_err(|_| "the certificate's key is not RSA".to_string())
}

/// The top level of an SNS message. A key sent twice is refused: the gateway would
/// verify one copy while a handler might read the other.
struct Message(BTreeMap<String, Value>);

impl Message {
    fn parse(body: &[u8]) -> Result<Self, VerifyError> {
        serde_json::from_slice::<UniqueKeys>(body)
            .map(|u| Self(u.0))
            .map_err(|_| VerifyError::Malformed("body".into()))
    }

    /// A field that must be a string.
    fn field(&self, name: &str) -> Result<&str, VerifyError> {
        match self.0.get(name) {
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(VerifyError::Malformed(name.into())),
            None => Err(VerifyError::MissingHeader(name.into())),
        }
    }

    /// `name\nvalue\n` for each signed field of the message's `Type`, in SNS's order.
    /// `Subject` is signed only when present.
    fn canonical(&self) -> Result<String, VerifyError> {
        const NOTIFICATION: &[&str] = &[
            "Message",
            "MessageId",
            "Subject",
            "Timestamp",
            "TopicArn",
            "Type",
        ];
        const SUBSCRIPTION: &[&str] = &[
            "Message",
            "MessageId",
            "SubscribeURL",
            "Timestamp",
            "Token",
            "TopicArn",
            "Type",
        ];
        let keys = match self.field("Type")? {
            "Notification" => NOTIFICATION,
            "SubscriptionConfirmation" | "UnsubscribeConfirmation" => SUBSCRIPTION,
            _ => return Err(VerifyError::Malformed("Type".into())),
        };
        let mut out = String::new();
        for k in keys {
            match self.field(k) {
                Ok(v) => {
                    out.push_str(k);
                    out.push('\n');
                    out.push_str(v);
                    out.push('\n');
                }
                Err(VerifyError::MissingHeader(_)) if *k == "Subject" => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// A JSON object whose keys are unique.
struct UniqueKeys(BTreeMap<String, Value>);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = UniqueKeys;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    if out.insert(k, v).is_some() {
                        return Err(serde::de::Error::custom("duplicate key"));
                    }
                }
                Ok(UniqueKeys(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A fetched certificate's key, or the time a fetch failed.
type Fetched = Result<Arc<rsa::PublicKey>, Instant>;

/// One URL's fetch, shared by every request that needs it at the same time.
#[derive(Debug, Default)]
struct Slot(tokio::sync::OnceCell<Fetched>);

/// Certificates by URL, fetched on first use.
struct CertCache {
    rule: HostRule,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    fetches: Arc<tokio::sync::Semaphore>,
    /// Built on first use: config loading (and `hookgate check`) opens nothing.
    client: OnceLock<Option<reqwest::Client>>,
}

impl std::fmt::Debug for CertCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self.slots.lock().map_or(0, |s| s.len());
        f.debug_struct("CertCache")
            .field("rule", &self.rule)
            .field("cached", &cached)
            .finish_non_exhaustive()
    }
}

impl CertCache {
    fn new(rule: HostRule) -> Self {
        Self {
            rule,
            slots: Mutex::new(HashMap::new()),
            fetches: Arc::new(tokio::sync::Semaphore::new(MAX_FETCHES)),
            client: OnceLock::new(),
        }
    }

    fn client(&self) -> Option<reqwest::Client> {
        self.client
            .get_or_init(|| {
                reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .no_proxy()
                    .connect_timeout(FETCH_TIMEOUT)
                    .timeout(FETCH_TIMEOUT)
                    .build()
                    .ok()
            })
            .clone()
    }

    /// The slot of `url`: the cached one, or a new one when there is none or its
    /// fetch failed more than [`RETRY_AFTER`] ago.
    fn slot(&self, url: &str) -> Arc<Slot> {
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(s) = slots.get(url) {
            match s.0.get() {
                Some(Err(at)) if at.elapsed() >= RETRY_AFTER => {}
                _ => return s.clone(),
            }
        }
        if slots.len() >= MAX_CACHED {
            // Failed and unfinished fetches go first, then any entry.
            let victim = slots
                .iter()
                .find(|(_, s)| !matches!(s.0.get(), Some(Ok(_))))
                .or_else(|| slots.iter().next())
                .map(|(k, _)| k.clone());
            if let Some(k) = victim {
                slots.remove(&k);
            }
        }
        let s = Arc::new(Slot::default());
        slots.insert(url.to_owned(), s.clone());
        s
    }

    /// The key of the certificate at `url` (already checked against the host rule).
    fn get(&self, url: &str) -> Result<Arc<rsa::PublicKey>, VerifyError> {
        let slot = self.slot(url);
        if let Some(done) = slot.0.get() {
            return done.clone().map_err(|_| unavailable());
        }
        let fetch = {
            let (slot, url, client, permits) = (
                slot.clone(),
                url.to_owned(),
                self.client(),
                self.fetches.clone(),
            );
            async move {
                // Without a permit nothing is cached: the provider's retry tries again.
                let _permit = permits.try_acquire_owned().map_err(|_| Instant::now())?;
                slot.0
                    .get_or_init(|| async move {
                        match client {
                            Some(c) => fetch_cert(&c, &url).await,
                            None => Err(Instant::now()),
                        }
                    })
                    .await
                    .clone()
            }
        };
        let handle = tokio::runtime::Handle::try_current().map_err(|_| unavailable())?;
        match handle.runtime_flavor() {
            // The request waits for its certificate; the worker's other tasks move on.
            tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| handle.block_on(fetch)).map_err(|_| unavailable())
            }
            // A single-threaded runtime cannot wait here: fetch in the background and
            // refuse this copy (SNS retries).
            _ => {
                handle.spawn(fetch);
                Err(unavailable())
            }
        }
    }

    /// Confirms a subscription by fetching its `SubscribeURL`, in the background.
    fn confirm(&self, topic: &str, url: &str) {
        if !self.rule.subscribe_url(url) {
            tracing::warn!(
                topic,
                "SNS SubscribeURL is not on SNS's host: not confirmed"
            );
            return;
        }
        let (Ok(handle), Some(client)) = (tokio::runtime::Handle::try_current(), self.client())
        else {
            tracing::warn!(topic, "cannot confirm the SNS subscription here");
            return;
        };
        let (topic, url) = (topic.to_owned(), url.to_owned());
        handle.spawn(async move {
            match client.get(&url).send().await {
                Ok(r) if r.status().is_success() => {
                    tracing::info!(topic, "SNS subscription confirmed");
                }
                Ok(r) => tracing::warn!(
                    topic,
                    status = r.status().as_u16(),
                    "SNS subscription confirmation refused"
                ),
                Err(e) => tracing::warn!(topic, error = %e, "SNS subscription confirmation failed"),
            }
        });
    }
}

fn unavailable() -> VerifyError {
    VerifyError::CertificateUnavailable
}

/// Fetches a certificate: status 200, at most [`MAX_CERT_BYTES`], within
/// [`FETCH_TIMEOUT`], an RSA key.
async fn fetch_cert(client: &reqwest::Client, url: &str) -> Fetched {
    let failed = |why: &str| {
        tracing::warn!(url, why, "SNS signing certificate not fetched");
        Instant::now()
    };
    let read = async {
        let mut resp = client.get(url).send().await.map_err(|_| "request failed")?;
        if resp.status() != StatusCode::OK {
            return Err("status is not 200");
        }
        if resp
            .content_length()
            .is_some_and(|n| n > MAX_CERT_BYTES as u64)
        {
            return Err("too large");
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|_| "read failed")? {
            if body.len() + chunk.len() > MAX_CERT_BYTES {
                return Err("too large");
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    let body = match tokio::time::timeout(FETCH_TIMEOUT, read).await {
        Ok(Ok(b)) => b,
        Ok(Err(why)) => return Err(failed(why)),
        Err(_) => return Err(failed("timed out")),
    };
    public_key_of(&body)
        .map(Arc::new)
        .map_err(|_| failed("not an RSA certificate"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sns_hosts_and_certificate_paths_are_fetched() {
        let rule = HostRule { test_origin: None };
        let ok = "https://sns.us-east-2.amazonaws.com/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem";
        assert!(rule.cert_url(ok));
        assert!(
            rule.cert_url(
                "https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-0a.pem"
            )
        );
        for bad in [
            "http://sns.us-east-2.amazonaws.com/SimpleNotificationService-7f.pem",
            "https://sns.us-east-2.amazonaws.com.evil.example/SimpleNotificationService-7f.pem",
            "https://evil.example/sns.us-east-2.amazonaws.com/SimpleNotificationService-7f.pem",
            "https://sns.us-east-2.amazonaws.com:8443/SimpleNotificationService-7f.pem",
            "https://user@sns.us-east-2.amazonaws.com/SimpleNotificationService-7f.pem",
            "https://sns.us-east-2.amazonaws.com@evil.example/SimpleNotificationService-7f.pem",
            "https://s3.us-east-2.amazonaws.com/SimpleNotificationService-7f.pem",
            "https://sns.amazonaws.com/SimpleNotificationService-7f.pem",
            "https://sns.US-EAST-2.amazonaws.com/SimpleNotificationService-7f.pem",
            "https://sns.us-east-2.amazonaws.com/bucket/SimpleNotificationService-7f.pem",
            "https://sns.us-east-2.amazonaws.com/SimpleNotificationService-7f.pem?x=1",
            "https://sns.us-east-2.amazonaws.com/SimpleNotificationService-.pem",
            "https://sns.us-east-2.amazonaws.com/SimpleNotificationService-7f.pem#x",
            "file:///etc/passwd",
            "http://127.0.0.1:1/SimpleNotificationService-7f.pem",
        ] {
            assert!(!rule.cert_url(bad), "{bad}");
        }
        assert!(rule.subscribe_url(
            "https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=a&Token=t"
        ));
        assert!(!rule.subscribe_url("https://example.com/?Action=ConfirmSubscription"));
    }

    #[test]
    fn the_test_origin_is_only_that_origin() {
        let rule = HostRule {
            test_origin: Some("http://127.0.0.1:5000".into()),
        };
        assert!(rule.cert_url("http://127.0.0.1:5000/SimpleNotificationService-ab.pem"));
        assert!(!rule.cert_url("http://127.0.0.1:50001/SimpleNotificationService-ab.pem"));
        assert!(!rule.cert_url("http://127.0.0.1:5000@evil/SimpleNotificationService-ab.pem"));
    }

    #[test]
    fn duplicate_keys_and_non_string_fields_are_refused() {
        assert!(Message::parse(br#"{"Type":"Notification","Type":"Notification"}"#).is_err());
        assert!(Message::parse(b"[]").is_err());
        let m = Message::parse(br#"{"Type":"Notification","Message":1}"#).expect("object");
        assert_eq!(m.canonical(), Err(VerifyError::Malformed("Message".into())));
    }

    #[test]
    fn credentials_name_a_topic_and_refuse_unknown_parts() {
        let parts = |kv: &[(&str, &str)]| {
            Credential::Parts(
                kv.iter()
                    .map(|(k, v)| {
                        (
                            k.to_string(),
                            crate::secret::Secret::new(v.as_bytes().to_vec()),
                        )
                    })
                    .collect(),
            )
        };
        assert!(
            AwsSns::from_credentials(&[parts(&[("topic_arn", "arn:aws:sns:us-east-1:1:t")])])
                .is_ok()
        );
        assert!(AwsSns::from_credentials(&[parts(&[("topic_arn", "*")])]).is_ok());
        assert!(AwsSns::from_credentials(&[parts(&[("topic_arn", "orders")])]).is_err());
        assert!(AwsSns::from_credentials(&[parts(&[("cert_pem", "x")])]).is_err());
        assert!(
            AwsSns::from_credentials(&[parts(&[("topic_arn", "*"), ("confirm", "yes")])]).is_err()
        );
        assert!(AwsSns::from_credentials(&[parts(&[("topic_arn", "*"), ("other", "x")])]).is_err());
        assert!(
            AwsSns::from_credentials(&[Credential::Text(crate::secret::Secret::new(
                b"x".to_vec()
            ))])
            .is_err()
        );
    }
}
