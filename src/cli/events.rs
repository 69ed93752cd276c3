//! `hookgate events list|show|retry|purge`: the events of a queue route, through the
//! admin listener.

use clap::Subcommand;

use super::admin::{AdminArgs, admin_call, admin_failed, answer, enc};
use super::text::{self, printable};
use crate::admin::api::{Attempt, Delivery, EventList, EventSummary, EventView};

/// Which events `retry` and `purge` act on.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct Which {
    /// One event.
    #[arg(long)]
    event_id: Option<String>,
    /// Every dead event of the route.
    #[arg(long)]
    all_dead: bool,
}

#[derive(Debug, Subcommand)]
pub enum EventsAction {
    /// Events of a route, oldest first.
    List {
        #[arg(long)]
        route: String,
        /// One of the route's destinations (default: all of them).
        #[arg(long)]
        destination: Option<String>,
        /// Only events in this state.
        #[arg(long, value_enum)]
        state: Option<crate::store::State>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Print the admin listener's JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// One event: its state, every attempt's result, the next try.
    Show {
        #[arg(long)]
        route: String,
        /// One of the route's destinations (default: all of them).
        #[arg(long)]
        destination: Option<String>,
        #[arg(long)]
        event_id: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Queue dead events (or one dead or retrying event) again, due now.
    Retry {
        #[arg(long)]
        route: String,
        /// One of the route's destinations (default: all of them).
        #[arg(long)]
        destination: Option<String>,
        #[command(flatten)]
        which: Which,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Delete dead events (or one undelivered event) and their dedup records.
    Purge {
        #[arg(long)]
        route: String,
        /// One of the route's destinations (default: all of them).
        #[arg(long)]
        destination: Option<String>,
        #[command(flatten)]
        which: Which,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

/// `hookgate events …`.
pub(super) async fn run(action: EventsAction) -> anyhow::Result<i32> {
    match action {
        EventsAction::List {
            route,
            destination,
            state,
            limit,
            json,
            admin,
        } => {
            let mut path = format!(
                "/events/{}?limit={limit}{}",
                enc(&route),
                only(destination.as_deref())
            );
            if let Some(s) = state {
                path.push_str(&format!("&state={}", s.as_str()));
            }
            let (ok, body) = admin_call(&admin, Some(&route), reqwest::Method::GET, &path).await?;
            if !ok {
                return Ok(admin_failed(&body));
            }
            let EventList {
                delivery, events, ..
            } = answer(&body)?;
            // A sync route stores nothing: "0 event(s)" would read as an empty queue.
            let sync = delivery == Delivery::Sync;
            if sync && events.is_empty() {
                eprintln!(
                    "hookgate events: route {:?} is not a queue route (delivery = \"sync\"): its deliveries are forwarded while the provider waits, never stored; `events` shows routes with delivery = \"queue\"",
                    printable(&route)
                );
                return Ok(1);
            }
            if json {
                println!("{}", printable(body.trim_end()));
            } else {
                print!("{}", events_table(&events, crate::time::now_ms()));
            }
            if sync {
                eprintln!(
                    "note: route {:?} is now a sync route; these events were stored while it was a queue route",
                    printable(&route)
                );
            }
            Ok(0)
        }
        EventsAction::Show {
            route,
            destination,
            event_id,
            json,
            admin,
        } => {
            let Some(event_id) =
                resolve_id(&admin, &route, destination.as_deref(), &event_id).await?
            else {
                return Ok(1);
            };
            let path = format!(
                "/events/{}/{}?{}",
                enc(&route),
                enc(&event_id),
                only(destination.as_deref())
            );
            let (ok, body) = admin_call(&admin, Some(&route), reqwest::Method::GET, &path).await?;
            if !ok {
                return Ok(admin_failed(&body));
            }
            if json {
                println!("{}", printable(body.trim_end()));
                return Ok(0);
            }
            let event: EventView = answer(&body)?;
            print!("{}", event_details(&event, crate::time::now_ms()));
            Ok(0)
        }
        EventsAction::Retry {
            route,
            destination,
            which,
            admin,
        } => act(&route, destination.as_deref(), "retry", &which, &admin).await,
        EventsAction::Purge {
            route,
            destination,
            which,
            admin,
        } => act(&route, destination.as_deref(), "purge", &which, &admin).await,
    }
}

/// The whole event ID that `given` is a unique prefix of, as git takes a commit's
/// (`events show|retry|purge`). An ID the route holds as given is taken as it is; a
/// prefix of several is refused with their list; a prefix of none is passed on as it
/// is, for the admin listener to answer. `None`: refused (said on stderr).
async fn resolve_id(
    admin: &AdminArgs,
    route: &str,
    destination: Option<&str>,
    given: &str,
) -> anyhow::Result<Option<String>> {
    // Undelivered events, then delivered ones (kept for the dedup window): `show`
    // looks at either.
    let mut ids: Vec<String> = Vec::new();
    for state in ["", "&state=delivered"] {
        let path = format!(
            "/events/{}?limit=100000{}{state}",
            enc(route),
            only(destination)
        );
        let (ok, body) = admin_call(admin, Some(route), reqwest::Method::GET, &path).await?;
        if !ok {
            admin_failed(&body);
            return Ok(None);
        }
        let listed: EventList = answer(&body)?;
        ids.extend(listed.events.into_iter().map(|e| e.event_id));
    }
    ids.sort_unstable();
    ids.dedup();
    if ids.iter().any(|id| id == given) {
        return Ok(Some(given.to_owned()));
    }
    let matching: Vec<&str> = ids
        .iter()
        .map(String::as_str)
        .filter(|id| id.starts_with(given))
        .collect();
    match matching.as_slice() {
        [] => Ok(Some(given.to_owned())),
        [one] => Ok(Some((*one).to_owned())),
        many => {
            eprintln!(
                "hookgate events: {:?} is the start of {} event IDs on route {:?}; give more of it:",
                printable(given),
                many.len(),
                printable(route)
            );
            for id in many.iter().take(20) {
                eprintln!("  {}", printable(id));
            }
            Ok(None)
        }
    }
}

/// The query parameter naming one destination (`&destination=NAME`), or nothing.
fn only(destination: Option<&str>) -> String {
    destination.map_or_else(String::new, |d| format!("&destination={}", enc(d)))
}

async fn act(
    route: &str,
    destination: Option<&str>,
    action: &str,
    which: &Which,
    admin: &AdminArgs,
) -> anyhow::Result<i32> {
    let query = match &which.event_id {
        Some(id) => match resolve_id(admin, route, destination, id).await? {
            Some(id) => format!("event_id={}", enc(&id)),
            None => return Ok(1),
        },
        None => "all_dead=true".to_owned(),
    };
    let path = format!(
        "/events/{}/{action}?{query}{}",
        enc(route),
        only(destination)
    );
    let (ok, body) = admin_call(admin, Some(route), reqwest::Method::POST, &path).await?;
    if !ok {
        return Ok(admin_failed(&body));
    }
    println!("{}", printable(body.trim_end()));
    Ok(0)
}

/// How long ago (or from now) a Unix-millisecond instant is, for people.
fn ago(at_ms: u64, now_ms: u64) -> String {
    let (d, future) = if at_ms > now_ms {
        (at_ms - now_ms, true)
    } else {
        (now_ms - at_ms, false)
    };
    let d = std::time::Duration::from_secs(d / 1000);
    let text = humantime::format_duration(d).to_string();
    let text = if d.is_zero() { "0s".to_owned() } else { text };
    if future {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

/// The table `hookgate events list` prints. Event IDs are shortened (`sig-d592421c…`);
/// `events show|retry|purge` take any unique prefix.
fn events_table(events: &[EventSummary], now_ms: u64) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    // A destination column on a route with named destinations.
    let width = events
        .iter()
        .filter_map(|e| e.destination.as_ref().map(|d| printable(d).chars().count()))
        .max()
        .map(|w| w.max("DESTINATION".len()));
    let dest = |name: &str| width.map_or_else(String::new, |w| format!("{:<w$} ", printable(name)));
    // The event ID comes last: some are long (`sig-` and 64 hex digits).
    let _ = writeln!(
        out,
        "{}{:<10} {:>8}  {:<14} {:<14} {:<12} EVENT ID",
        dest("DESTINATION"),
        "STATE",
        "ATTEMPTS",
        "RECEIVED",
        "NEXT TRY",
        "LAST RESULT"
    );
    for e in events {
        let _ = writeln!(
            out,
            "{}{:<10} {:>8}  {:<14} {:<14} {:<12} {}",
            dest(e.destination.as_deref().unwrap_or("")),
            e.state.as_str(),
            e.attempts,
            ago(e.received_at_ms, now_ms),
            e.next_at_ms
                .map_or_else(|| "-".to_owned(), |t| ago(t, now_ms)),
            printable(e.last_result.as_deref().unwrap_or("-")),
            text::short_id(&e.event_id),
        );
    }
    let _ = writeln!(out, "{} event(s)", events.len());
    out
}

/// What `hookgate events show` prints. Every value comes from a delivery or the
/// store, so each is printed through [`printable`].
fn event_details(v: &EventView, now_ms: u64) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "event {} on route {}",
        printable(&v.event_id),
        printable(&v.route)
    );
    if let Some(t) = &v.event_type {
        let _ = writeln!(out, "type:      {}", printable(t));
    }
    if let Some(d) = &v.destination {
        let _ = writeln!(out, "destination: {}", printable(d));
    }
    if let Some(k) = &v.order_key {
        let _ = writeln!(
            out,
            "order key: {} (holds its place in the key's line)",
            printable(k)
        );
    }
    let _ = writeln!(out, "state:     {}", v.state.as_str());
    if let Some(why) = &v.dead_reason {
        let _ = writeln!(out, "dead:      {}", printable(why));
    }
    let _ = writeln!(out, "received:  {}", ago(v.received_at_ms, now_ms));
    let attempts = v.attempts;
    let history = &v.history;
    // After an operator's retry the count starts again; the history keeps what came
    // before, so say which is which.
    let requeued = v.requeued_at_ms;
    match requeued {
        Some(r) => {
            let before = history.iter().filter(|a| a.at_ms < r).count();
            let _ = writeln!(
                out,
                "attempts:  {attempts} since the operator's retry {} ({before} before it, listed first below)",
                ago(r, now_ms)
            );
        }
        None => {
            let _ = writeln!(out, "attempts:  {attempts}");
        }
    }
    if let Some(next) = v.next_at_ms {
        let _ = writeln!(out, "next try:  {}", ago(next, now_ms));
    }
    if !history.is_empty() {
        let _ = writeln!(out, "history (oldest first):");
    }
    let mut marked = false;
    for a in history {
        if let Some(r) = requeued
            && !marked
            && a.at_ms >= r
        {
            let _ = writeln!(out, "  -- retried by the operator {} --", ago(r, now_ms));
            marked = true;
        }
        let _ = writeln!(out, "  - {} {}", ago(a.at_ms, now_ms), attempt(a));
    }
    // The other destinations, one line each (`--destination NAME` shows one in full).
    if let Some(all) = v.destinations.as_ref().filter(|a| a.len() > 1) {
        let _ = writeln!(out, "destinations:");
        for d in all {
            let _ = writeln!(
                out,
                "  {:<16} {:<10} {} attempt(s)",
                printable(d.destination.as_deref().unwrap_or("-")),
                d.state.as_str(),
                d.attempts
            );
        }
    }
    out
}

/// An attempt as `events show` and `deliveries show` list it, after its time: its
/// result, the upstream's status, the error and how long it took; on a destination of
/// another kind than HTTP, the kind and what its server said (`postgres: inbox row 42`).
pub(super) fn attempt(a: &Attempt) -> String {
    let status = a.status.map(|s| format!(" {s}")).unwrap_or_default();
    let kind = a
        .kind
        .as_ref()
        .map(|k| format!("{}: ", printable(k)))
        .unwrap_or_default();
    let receipt = a
        .receipt
        .as_ref()
        .map(|r| format!(" [{}]", printable(r)))
        .unwrap_or_default();
    let error = a
        .error
        .as_ref()
        .map(|e| format!(": {}", printable(e)))
        .unwrap_or_default();
    format!(
        "{kind}{}{status}{receipt}{error} ({} ms)",
        printable(a.result.as_str()),
        a.duration_ms
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_people_say_them() {
        assert_eq!(ago(1_000, 61_000), "1m ago");
        assert_eq!(ago(5_000, 1_000), "in 4s");
        assert_eq!(ago(1_000, 1_200), "0s ago");
    }
}
