//! The inspector page, served by the admin listener at `/ui/`: the delivery log's list
//! (with live updates), one delivery's detail and replay, the queues and their dead
//! letters with retry and purge, and the routes overview.
//!
//! The page is plain HTML, CSS and JavaScript embedded in the binary: it works offline
//! and needs no build step. It holds no data of its own: its script reads the admin
//! endpoints (`/deliveries`, `/deliveries/stream`, `/events/<route>`, `/overview`) with
//! `fetch`, sending `Authorization: Bearer <token>` when the operator gave one (kept in
//! the tab's `sessionStorage`, never in a cookie, so no other site can make the browser
//! send it) and `X-Requested-By: hookgate` on every POST, as the admin guard asks.
//!
//! The assets themselves carry nothing secret, so they are served before the token is
//! checked (the page must load to ask for it), but after the guard that refuses other
//! sites and hosts. Every answer carries a Content-Security-Policy that allows only the
//! listener's own scripts, styles and connections (no inline script or style, no
//! framing), and `X-Content-Type-Options: nosniff`.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body_util::Full;

use crate::pipeline::respond::Resp;

const INDEX: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");
const ICON: &[u8] = include_bytes!("ui/icon.svg");

/// The refusals' type: JSON, as every other admin refusal.
const JSON: &str = "application/json";

/// Only the listener's own assets and endpoints; nothing inline, nothing framed.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; \
                   frame-ancestors 'none'; object-src 'none'";

/// Whether `path` is the page's (`/ui` and below): [`serve`] answers it.
pub(crate) fn is_page(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// The page's answer to a request for `path` (one [`is_page`] takes).
pub(crate) fn serve(method: &Method, path: &str) -> Asset {
    if method != Method::GET && method != Method::HEAD {
        return Asset::new(
            StatusCode::METHOD_NOT_ALLOWED,
            JSON,
            Bytes::from_static(br#"{"error":"the inspector page answers GET only"}"#),
        );
    }
    let (ctype, body): (&'static str, Bytes) = match path {
        // A relative asset URL in the page resolves against `/ui/`, not `/`.
        "/ui" => {
            return Asset {
                location: Some("/ui/"),
                ..Asset::new(
                    StatusCode::MOVED_PERMANENTLY,
                    "text/plain; charset=utf-8",
                    Bytes::from_static(b"the inspector is at /ui/\n"),
                )
            };
        }
        "/ui/" | "/ui/index.html" => (
            "text/html; charset=utf-8",
            Bytes::from_static(INDEX.as_bytes()),
        ),
        "/ui/app.js" => (
            "text/javascript; charset=utf-8",
            Bytes::from_static(SCRIPT.as_bytes()),
        ),
        "/ui/app.css" => (
            "text/css; charset=utf-8",
            Bytes::from_static(STYLE.as_bytes()),
        ),
        "/ui/icon.svg" => ("image/svg+xml", Bytes::from_static(ICON)),
        _ => {
            return Asset::new(
                StatusCode::NOT_FOUND,
                JSON,
                Bytes::from_static(br#"{"error":"no such page: the inspector is at /ui/"}"#),
            );
        }
    };
    let body = if method == Method::HEAD {
        Bytes::new()
    } else {
        body
    };
    Asset::new(StatusCode::OK, ctype, body)
}

/// One of the page's answers: an asset, a redirect to the page, or a refusal; written
/// with the page's policy headers by [`Asset::response`].
#[derive(Debug)]
pub(crate) struct Asset {
    status: StatusCode,
    ctype: &'static str,
    body: Bytes,
    /// Where a redirect points.
    location: Option<&'static str>,
}

impl Asset {
    fn new(status: StatusCode, ctype: &'static str, body: Bytes) -> Self {
        Self {
            status,
            ctype,
            body,
            location: None,
        }
    }

    /// The asset with the page's headers.
    pub(crate) fn response(self) -> Resp {
        let mut r = Response::new(Full::new(self.body));
        *r.status_mut() = self.status;
        let h = r.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(self.ctype));
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
        h.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        // The older form of frame-ancestors, for browsers that read only this.
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        h.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        // The assets change with the binary: a browser asks again rather than keep an
        // old script beside a new listener.
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert(
            "cross-origin-opener-policy",
            HeaderValue::from_static("same-origin"),
        );
        h.insert(
            "cross-origin-resource-policy",
            HeaderValue::from_static("same-origin"),
        );
        if let Some(to) = self.location {
            h.insert(header::LOCATION, HeaderValue::from_static(to));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_and_its_assets_carry_a_strict_policy() {
        for path in [
            "/ui/",
            "/ui/app.js",
            "/ui/app.css",
            "/ui/icon.svg",
            "/ui/nope",
        ] {
            assert!(is_page(path));
            let r = serve(&Method::GET, path).response();
            let csp = r.headers()[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .expect("ascii");
            assert!(csp.contains("default-src 'self'"), "{path}: {csp}");
            assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
            assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
            assert_eq!(r.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        }
        let r = serve(&Method::GET, "/ui").response();
        assert_eq!(r.status(), StatusCode::MOVED_PERMANENTLY);
        assert_eq!(r.headers()[header::LOCATION], "/ui/");
        assert!(!is_page("/uix"));
        assert!(!is_page("/deliveries"));
        assert_eq!(
            serve(&Method::POST, "/ui/").response().status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }

    /// Every outcome the gateway writes, every verification refusal's reason, every
    /// queued event's state and every attempt's result. The matches are exhaustive: a
    /// new variant does not compile here until it is listed, and then must have a class
    /// in the page.
    fn every_word() -> Vec<&'static str> {
        use crate::outcome::{AttemptResult, Outcome};
        use crate::provider::VerifyError;
        use crate::store::State;
        let outcomes = [
            Outcome::Forwarded,
            Outcome::Queued,
            Outcome::Filtered,
            Outcome::ForwardedUnclaimed,
            Outcome::UpstreamRejected,
            Outcome::UpstreamError,
            Outcome::Duplicate,
            Outcome::InFlight,
            Outcome::Mismatch,
            Outcome::Handshake,
            Outcome::HandshakeRefused,
            Outcome::NoRoute,
            Outcome::MethodNotAllowed,
            Outcome::TooLarge,
            Outcome::BodyTimeout,
            Outcome::BadBody,
            Outcome::NoEventId,
            Outcome::StoreError,
            Outcome::Overloaded,
            Outcome::RateLimited,
            Outcome::ClientBusy,
            Outcome::RequestTimeout,
        ];
        for o in outcomes {
            // Exhaustive: a new outcome is listed above, or this does not compile.
            match o {
                Outcome::Forwarded
                | Outcome::Queued
                | Outcome::Filtered
                | Outcome::ForwardedUnclaimed
                | Outcome::UpstreamRejected
                | Outcome::UpstreamError
                | Outcome::Duplicate
                | Outcome::InFlight
                | Outcome::Mismatch
                | Outcome::Handshake
                | Outcome::HandshakeRefused
                | Outcome::NoRoute
                | Outcome::MethodNotAllowed
                | Outcome::TooLarge
                | Outcome::BodyTimeout
                | Outcome::BadBody
                | Outcome::Rejected(_)
                | Outcome::NoEventId
                | Outcome::StoreError
                | Outcome::Overloaded
                | Outcome::RateLimited
                | Outcome::ClientBusy
                | Outcome::RequestTimeout => {}
            }
        }
        let refusals = [
            VerifyError::MissingHeader(String::new()),
            VerifyError::Malformed(String::new()),
            VerifyError::Duplicated(String::new()),
            VerifyError::BadTimestamp,
            VerifyError::BadSignature,
            VerifyError::TimestampTooOld { by_ms: 0 },
            VerifyError::TimestampInFuture { by_ms: 0 },
            VerifyError::NeedsPublicUrl(""),
            VerifyError::CertificateUnavailable,
        ];
        for e in &refusals {
            match e {
                VerifyError::MissingHeader(_)
                | VerifyError::Malformed(_)
                | VerifyError::Duplicated(_)
                | VerifyError::BadTimestamp
                | VerifyError::BadSignature
                | VerifyError::TimestampTooOld { .. }
                | VerifyError::TimestampInFuture { .. }
                | VerifyError::NeedsPublicUrl(_)
                | VerifyError::CertificateUnavailable => {}
            }
        }
        let states = [
            State::Queued,
            State::Retrying,
            State::Dead,
            State::Delivered,
        ];
        for s in states {
            match s {
                State::Queued | State::Retrying | State::Dead | State::Delivered => {}
            }
        }
        let mut words: Vec<&'static str> = outcomes.iter().map(|o| o.as_str()).collect();
        words.extend(
            refusals
                .iter()
                .map(|e| Outcome::Rejected(e.reason()).as_str()),
        );
        words.extend(states.iter().map(|s| s.as_str()));
        words.extend(AttemptResult::ALL.iter().map(|r| r.as_str()));
        words.push(AttemptResult::Other.as_str());
        words
    }

    #[test]
    fn every_outcome_state_and_result_has_a_class_in_the_page() {
        // The one map (app.js, CLASS_OF): `word: 'class',`.
        let start = SCRIPT.find("const CLASS_OF").expect("the map");
        let map = &SCRIPT[start..start + SCRIPT[start..].find("});").expect("its end")];
        for word in every_word() {
            let entry = format!("{word}: '");
            let at = map
                .find(&format!(" {entry}"))
                .unwrap_or_else(|| panic!("{word:?} has no class in app.js's CLASS_OF"));
            let class: String = map[at + 1 + entry.len()..]
                .chars()
                .take_while(|c| *c != '\'')
                .collect();
            assert!(
                ["ok", "copy", "refused", "failed", "waiting", "unknown"].contains(&class.as_str()),
                "{word}: {class}"
            );
        }
    }

    #[test]
    fn the_page_has_no_inline_script_or_style() {
        // The policy would block them: the page would load without its behaviour.
        assert!(!INDEX.contains("<script>"));
        assert!(!INDEX.contains("style="));
        assert!(!INDEX.contains("<style"));
        // No inline event handlers (`onclick=`, `onload=`, …).
        for (at, _) in INDEX.match_indices(" on") {
            let name: String = INDEX[at + 3..]
                .chars()
                .take_while(char::is_ascii_alphabetic)
                .collect();
            assert!(
                !INDEX[at + 3 + name.len()..].starts_with('='),
                "an inline handler at byte {at}"
            );
        }
        assert!(INDEX.contains(r#"<script src="app.js" defer></script>"#));
        // And reaches no other host.
        // (SVG's namespace is a name, not an address: nothing is fetched from it.)
        for text in [INDEX, SCRIPT, STYLE] {
            let text = text.replace("'http://www.w3.org/2000/svg'", "");
            assert!(!text.contains("http://") && !text.contains("https://"));
        }
        // Content from deliveries is written as text, never parsed as markup.
        assert!(!SCRIPT.contains("innerHTML"));
        assert!(!SCRIPT.contains("insertAdjacentHTML"));
    }
}
