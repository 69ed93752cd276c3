//! Who may use which admin endpoint: the tokens (`server.admin_token`, which acts as
//! an `operate` token named `admin`, and `[[server.admin_tokens]]`), each with its
//! role, and the one table of what each endpoint needs ([`required`]).
//!
//! - `read`: everything a `GET` reads (lists, details, the delivery log and its live
//!   stream, the overview and its charts, the alerts, `/metrics`, `/audit`) and the
//!   inspector;
//! - `operate`: also every request that changes state (every method but `GET` and
//!   `HEAD`: retry, purge, pause, resume, replay, forget, reload, clearing a
//!   handshake, a pull destination's leases) and every one that hands over a secret
//!   (`GET /handshakes/<route>`).
//!
//! The probes and the inspector's assets need no token; a pull destination's own
//! `pull.token` grants its endpoints only (`pull.rs`). A presented token is compared
//! with every configured one, as SHA-256 digests in constant time (the digest makes
//! the comparison's time independent of the lengths too); the tokens themselves are
//! not kept here, and nothing here can print one.

use http::Method;
use sha2::{Digest as _, Sha256};

use super::exchange::AdminRequest;
use crate::config::{AdminRole, ServerConfig};

/// The name requests act under on a listener with no token at all (the audit
/// records it).
pub(crate) const ANONYMOUS: &str = "anonymous";

/// The admin listener's tokens, as the last start or reload set them.
pub(crate) struct Access {
    tokens: Vec<Entry>,
}

/// One token: who presents it and what they may do; the token only as its digest.
struct Entry {
    name: String,
    digest: [u8; 32],
    role: AdminRole,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.tokens
                    .iter()
                    .map(|t| format!("{} ({}): [redacted]", t.name, t.role.as_str())),
            )
            .finish()
    }
}

/// Who made a request, as the token they presented says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    pub(crate) name: String,
    pub(crate) role: AdminRole,
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl Access {
    /// The tokens of `[server]`.
    pub(crate) fn of(server: &ServerConfig) -> Self {
        let admin = server.admin_token.iter().map(|t| Entry {
            name: crate::config::ADMIN_TOKEN_NAME.to_owned(),
            digest: digest(t.expose()),
            role: AdminRole::Operate,
        });
        let named = server.admin_tokens.iter().map(|t| Entry {
            name: t.name.clone(),
            digest: digest(t.token.expose()),
            role: t.role,
        });
        Self {
            tokens: admin.chain(named).collect(),
        }
    }

    /// Whether the listener asks for no token (none is configured): every request
    /// acts as an `operate` one named [`ANONYMOUS`].
    pub(crate) fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Who presents `presented` (an `Authorization: Bearer` value), if anyone: every
    /// token is compared, whichever matches.
    pub(crate) fn identify(&self, presented: Option<&[u8]>) -> Option<Caller> {
        if self.is_open() {
            return Some(Caller {
                name: ANONYMOUS.to_owned(),
                role: AdminRole::Operate,
            });
        }
        let given = digest(presented?);
        let mut found = None;
        for t in &self.tokens {
            if crate::provider::mac::ct_eq(&given, &t.digest) && found.is_none() {
                found = Some(Caller {
                    name: t.name.clone(),
                    role: t.role,
                });
            }
        }
        found
    }
}

/// What a request needs: `None` for the probes and the inspector's assets (no
/// token), otherwise the role ([`Access`] says which is which).
pub(crate) fn required(req: &AdminRequest) -> Option<AdminRole> {
    if req.is_probe() || super::ui::is_page(&req.path) {
        return None;
    }
    let reads = matches!(req.method, Method::GET | Method::HEAD);
    let hands_over_a_secret = req.endpoint == "handshakes";
    Some(if reads && !hands_over_a_secret {
        AdminRole::Read
    } else {
        AdminRole::Operate
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AdminToken;
    use crate::secret::Secret;

    fn req(method: Method, uri: &str) -> AdminRequest {
        AdminRequest::parse(&method, &uri.parse().expect("uri"))
    }

    #[test]
    fn reads_need_read_and_changes_and_secrets_need_operate() {
        use AdminRole::{Operate, Read};
        for (method, path, want) in [
            (Method::GET, "/healthz", None),
            (Method::GET, "/readyz", None),
            (Method::GET, "/ui/", None),
            (Method::GET, "/metrics", Some(Read)),
            (Method::GET, "/overview", Some(Read)),
            (Method::GET, "/deliveries/stream", Some(Read)),
            (Method::GET, "/events/stripe/evt_1", Some(Read)),
            (Method::GET, "/audit?limit=5", Some(Read)),
            (Method::GET, "/handshakes/asana", Some(Operate)),
            (Method::DELETE, "/handshakes/asana", Some(Operate)),
            (Method::POST, "/reload", Some(Operate)),
            (
                Method::POST,
                "/events/stripe/retry?plan=true",
                Some(Operate),
            ),
            (Method::POST, "/events/stripe/pause", Some(Operate)),
            (Method::POST, "/deliveries/x/replay", Some(Operate)),
            (Method::DELETE, "/keys/stripe/evt_1", Some(Operate)),
            (Method::POST, "/healthz", Some(Operate)),
            (Method::PUT, "/overview", Some(Operate)),
        ] {
            assert_eq!(
                required(&req(method.clone(), path)),
                want,
                "{method} {path}"
            );
        }
    }

    fn server(admin: Option<&str>, named: &[(&str, &str, AdminRole)]) -> ServerConfig {
        let mut cfg = crate::config::parse(
            "[[routes]]\nname = \"r\"\npath = \"/r\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nupstream = \"http://127.0.0.1:9/\"\n",
            std::path::Path::new("t.toml"),
            &|_: &str| None,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        cfg.server.admin_token = admin.map(|t| Secret::new(t.as_bytes().to_vec()));
        cfg.server.admin_tokens = named
            .iter()
            .map(|(name, token, role)| AdminToken {
                name: (*name).to_owned(),
                token: Secret::new(token.as_bytes().to_vec()),
                role: *role,
            })
            .collect();
        cfg.server
    }

    #[test]
    fn a_token_names_its_holder_and_role_and_is_never_shown() {
        let a = Access::of(&server(
            Some("adm-t0ken"),
            &[
                ("grafana", "read-t0ken", AdminRole::Read),
                ("oncall", "op-t0ken", AdminRole::Operate),
            ],
        ));
        assert!(!a.is_open());
        let who = |t: &str| a.identify(Some(t.as_bytes())).map(|c| (c.name, c.role));
        assert_eq!(who("adm-t0ken"), Some(("admin".into(), AdminRole::Operate)));
        assert_eq!(who("read-t0ken"), Some(("grafana".into(), AdminRole::Read)));
        assert_eq!(who("op-t0ken"), Some(("oncall".into(), AdminRole::Operate)));
        assert_eq!(who("op-t0ke"), None);
        assert_eq!(who(""), None);
        assert_eq!(a.identify(None), None);
        let shown = format!("{a:?}");
        assert!(shown.contains("grafana (read)"), "{shown}");
        assert!(!shown.contains("t0ken"), "{shown}");
        // No token at all: an open listener, every request an operator's.
        let open = Access::of(&server(None, &[]));
        assert_eq!(
            open.identify(None).map(|c| (c.name, c.role)),
            Some((ANONYMOUS.into(), AdminRole::Operate))
        );
    }
}
