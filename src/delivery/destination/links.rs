//! The connections to destination servers of kinds other than HTTP, one per
//! destination: made on first use (an attempt, or the background check), made again
//! after they break, and each with what was last seen of its server ([`Reach`]), for
//! `/readyz`, `/overview` and the log at start. A reload keeps a destination's link
//! while its kind and URL stay the same.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;

use super::{Answer, Message, amqp, nats, postgres, redis_stream};
use crate::config::{Destination, ServerUrl, Target};
use crate::outcome::AttemptResult;
use crate::state::Routing;

/// How often the background check looks at every destination's server.
pub const CHECK_EVERY: Duration = Duration::from_secs(5);

/// How long the background check waits for a server.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// What was last seen of a destination's server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reach {
    /// `None` until the server was first tried.
    pub reachable: Option<bool>,
    /// Why it was not, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Unix milliseconds when it was last seen.
    pub at_ms: u64,
}

/// One destination's connection to its server.
#[derive(Debug)]
pub struct Link {
    url: ServerUrl,
    kind: &'static str,
    conn: Conn,
    reach: Mutex<Reach>,
}

#[derive(Debug)]
enum Conn {
    Postgres(postgres::Conn),
    Nats(nats::Conn),
    Amqp(amqp::Conn),
    RedisStream(redis_stream::Conn),
}

impl Link {
    fn new(target: &Target) -> Option<Self> {
        let (conn, url) = match target {
            Target::Http(_) | Target::Pull(_) => return None,
            Target::Postgres(p) => (Conn::Postgres(postgres::Conn::default()), &p.url),
            Target::Nats(n) => (Conn::Nats(nats::Conn::default()), &n.url),
            Target::Amqp(a) => (Conn::Amqp(amqp::Conn::default()), &a.url),
            Target::RedisStream(r) => (Conn::RedisStream(redis_stream::Conn::default()), &r.url),
        };
        Some(Self {
            url: url.clone(),
            kind: target.kind(),
            conn,
            reach: Mutex::new(Reach {
                reachable: None,
                error: None,
                at_ms: 0,
            }),
        })
    }

    /// Delivers one message into the server `target` names (this link's).
    pub(super) async fn deliver(
        &self,
        target: &Target,
        m: &Message,
        dedup_ttl: Duration,
    ) -> Answer {
        match (&self.conn, target) {
            (Conn::Postgres(c), Target::Postgres(t)) => c.deliver(t, m).await,
            (Conn::Nats(c), Target::Nats(t)) => c.deliver(t, m).await,
            (Conn::Amqp(c), Target::Amqp(t)) => c.deliver(t, m).await,
            (Conn::RedisStream(c), Target::RedisStream(t)) => c.deliver(t, m, dedup_ttl).await,
            _ => Answer::refused("the destination's kind changed on reload; tried again".into()),
        }
    }

    /// Connects if it is not connected, and asks the server for a sign of life.
    async fn check(&self) -> Result<(), String> {
        let checked = async {
            match &self.conn {
                Conn::Postgres(c) => c.check(&self.url).await,
                Conn::Nats(c) => c.check(&self.url).await,
                Conn::Amqp(c) => c.check(&self.url).await,
                Conn::RedisStream(c) => c.check(&self.url).await,
            }
        };
        let result = match tokio::time::timeout(CHECK_TIMEOUT, checked).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "no answer within {}",
                humantime::format_duration(CHECK_TIMEOUT)
            )),
        };
        self.set_reach(result.as_ref().err().cloned());
        result
    }

    /// Notes what an attempt's answer says of the server: any answer from it means it
    /// is reachable; no connection means it is not.
    pub(super) fn saw(&self, answer: &Answer) {
        match answer.result {
            AttemptResult::Connect | AttemptResult::Timeout => self.set_reach(answer.error.clone()),
            _ => self.set_reach(None),
        }
    }

    fn set_reach(&self, error: Option<String>) {
        let mut r = self.reach.lock().unwrap_or_else(PoisonError::into_inner);
        r.reachable = Some(error.is_none());
        r.error = error;
        r.at_ms = crate::time::now_ms();
    }

    /// What was last seen of the server.
    pub fn reach(&self) -> Reach {
        self.reach
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The kind's name.
    pub fn kind(&self) -> &'static str {
        self.kind
    }
}

/// Every destination's link, by route and destination name.
#[derive(Debug, Default)]
pub struct Links {
    map: Mutex<HashMap<(String, String), Arc<Link>>>,
}

impl Links {
    /// The link of `dest` on `route`, made now if it has none (or its kind or URL
    /// changed); `None` for an HTTP destination.
    pub fn get(&self, route: &str, dest: &Destination) -> Option<Arc<Link>> {
        let url = dest.target.server()?;
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (route.to_owned(), dest.name.clone());
        match map.get(&key) {
            Some(l) if l.url == *url && l.kind == dest.target.kind() => Some(l.clone()),
            _ => {
                let link = Arc::new(Link::new(&dest.target)?);
                map.insert(key, link.clone());
                Some(link)
            }
        }
    }

    /// The link of `dest` on `route` if one was made.
    pub fn existing(&self, route: &str, dest: &str) -> Option<Arc<Link>> {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(route.to_owned(), dest.to_owned()))
            .cloned()
    }

    /// Drops the links of destinations `routing` no longer has (after a reload); their
    /// connections close once no attempt holds them.
    pub fn keep_only(&self, routing: &Routing) {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(route, dest), link| {
                routing
                    .route(route)
                    .and_then(|r| r.destination(dest))
                    .and_then(|d| d.target.server())
                    .is_some_and(|url| *url == link.url)
            });
    }

    /// Checks every destination of another kind than HTTP in `routing`, at once;
    /// each with its route, its name, and what was found.
    pub async fn check_all(
        &self,
        routing: &Routing,
    ) -> Vec<(String, String, Arc<Link>, Result<(), String>)> {
        let mut links = Vec::new();
        for route in routing.routes.values() {
            for d in &route.destinations {
                if let Some(link) = self.get(&route.name, d) {
                    links.push((route.name.clone(), d.name.clone(), link));
                }
            }
        }
        let checks = links.into_iter().map(|(route, dest, link)| async move {
            let result = link.check().await;
            (route, dest, link, result)
        });
        futures_util::future::join_all(checks).await
    }
}

/// Checks every destination's server now, logs what was found, and again every
/// `every` while `stop` is not cancelled, logging changes only.
pub async fn watch(
    links: Arc<Links>,
    routing: Arc<arc_swap::ArcSwap<Routing>>,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut last: HashMap<(String, String), bool> = HashMap::new();
    loop {
        let current = routing.load_full();
        links.keep_only(&current);
        for (route, dest, link, result) in links.check_all(&current).await {
            let up = result.is_ok();
            if last.insert((route.clone(), dest.clone()), up) == Some(up) {
                continue;
            }
            match result {
                Ok(()) => tracing::info!(
                    route,
                    destination = dest,
                    kind = link.kind(),
                    "destination's server is reachable"
                ),
                Err(e) => {
                    tracing::warn!(route, destination = dest, kind = link.kind(), error = %e, "destination's server is not reachable; its events wait in the queue (a sync route answers 503 until it is back)")
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}
