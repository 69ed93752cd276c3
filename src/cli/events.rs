//! `hookgate events list|show|retry|purge`: the events of a queue route, through the
//! admin listener.

use clap::Subcommand;

use super::admin::{AdminArgs, admin_call, admin_failed, answer, enc};
use super::text::{self, printable};
use crate::admin::api::{
    Attempt, BulkRetry, Controlled, Delivery, DestinationControl, EventList, EventSummary,
    EventView, EventsActed,
};

/// Which events `purge` acts on.
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

/// The filters of a bulk retry (the API's query parameters).
#[derive(Debug, Default, clap::Args)]
pub struct RetryFilters {
    /// Only events in this state (default: dead and retrying).
    #[arg(long, value_parser = ["dead", "retrying"])]
    state: Option<String>,
    /// Last failed at or after: an age (`2h`), RFC 3339 or Unix milliseconds.
    #[arg(long)]
    since: Option<String>,
    /// Last failed before: an age (`1h`), RFC 3339 or Unix milliseconds.
    #[arg(long)]
    until: Option<String>,
    /// Only events whose type matches this glob (`invoice.*`).
    #[arg(long)]
    event_type: Option<String>,
    /// Only events whose last attempt ended so: a result (`http_5xx`, `timeout`,
    /// `connect`, …) or the destination's status (`500`).
    #[arg(long)]
    last_result: Option<String>,
}

impl RetryFilters {
    fn any(&self) -> bool {
        self.state.is_some()
            || self.since.is_some()
            || self.until.is_some()
            || self.event_type.is_some()
            || self.last_result.is_some()
    }

    /// The query parameters (`&k=v…`).
    fn query(&self, now_ms: u64) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("state", &self.state),
            ("event_type", &self.event_type),
            ("last_result", &self.last_result),
        ] {
            if let Some(v) = v {
                q.append_pair(k, v);
            }
        }
        for (k, v) in [("since", &self.since), ("until", &self.until)] {
            if let Some(v) = v {
                q.append_pair(k, &super::deliveries::bound(v, now_ms));
            }
        }
        q.finish()
    }
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
    /// Queue events again, due now: one event, every dead event, or those the
    /// filters select (dead and retrying, unless --state says which). The workers
    /// deliver them at the destination's rate_limit, in per-key order. With --plan,
    /// prints how many would be retried and the first of them, changing nothing.
    Retry {
        #[arg(long)]
        route: String,
        /// One of the route's destinations (default: all of them).
        #[arg(long)]
        destination: Option<String>,
        /// One event (dead or retrying).
        #[arg(long, conflicts_with_all = ["all_dead", "state", "since", "until", "event_type", "last_result"])]
        event_id: Option<String>,
        /// Every dead event.
        #[arg(long, conflicts_with_all = ["state", "since", "until", "event_type", "last_result"])]
        all_dead: bool,
        #[command(flatten)]
        filters: RetryFilters,
        /// Print what would be retried, changing nothing.
        #[arg(long, conflicts_with = "event_id")]
        plan: bool,
        /// Print the admin listener's JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Pause a queue route's destinations (or one): events are still accepted and
    /// queued, none is delivered until it resumes (by `resume`, or at --until).
    Pause {
        #[arg(long)]
        route: String,
        /// One of the route's destinations (default: all of them).
        #[arg(long)]
        destination: Option<String>,
        /// Why, shown wherever the pause is (`events list`, the inspector, /overview).
        #[arg(long)]
        reason: Option<String>,
        /// Resume by itself: after a duration (`30m`) or at a time (RFC 3339).
        #[arg(long)]
        until: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Resume paused destinations (or an open breaker): what waited is delivered at
    /// the destination's rate_limit, in per-key order.
    Resume {
        #[arg(long)]
        route: String,
        /// One of the route's destinations (default: all of them).
        #[arg(long)]
        destination: Option<String>,
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
        /// Print the admin listener's JSON.
        #[arg(long)]
        json: bool,
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
                delivery,
                events,
                destinations,
                ..
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
                let now = crate::time::now_ms();
                // A paused destination is said first: its events wait for it.
                for d in destinations.iter().filter(|d| d.paused.is_some()) {
                    println!("{}", control_line(&route, d, now));
                }
                print!("{}", events_table(&events, now));
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
            event_id,
            all_dead,
            filters,
            plan,
            json,
            admin,
        } => {
            if all_dead && plan {
                // Every dead event: the plan is the filter `state=dead`.
                let dead = RetryFilters {
                    state: Some("dead".into()),
                    ..RetryFilters::default()
                };
                return bulk_retry(&route, destination.as_deref(), &dead, true, json, &admin).await;
            }
            if filters.any() || plan {
                return bulk_retry(&route, destination.as_deref(), &filters, plan, json, &admin)
                    .await;
            }
            let which = Which { event_id, all_dead };
            if which.event_id.is_none() && !which.all_dead {
                eprintln!(
                    "hookgate events retry: name what to retry: --event-id ID, --all-dead, or filters (--state, --since, --until, --event-type, --last-result; --plan first to see what they select)"
                );
                return Ok(2);
            }
            act(
                &route,
                destination.as_deref(),
                "retry",
                &which,
                json,
                &admin,
            )
            .await
        }
        EventsAction::Pause {
            route,
            destination,
            reason,
            until,
            admin,
        } => {
            let mut q = form_urlencoded::Serializer::new(String::new());
            if let Some(r) = &reason {
                q.append_pair("reason", r);
            }
            if let Some(u) = &until {
                q.append_pair("until", u);
            }
            control(&route, destination.as_deref(), "pause", &q.finish(), &admin).await
        }
        EventsAction::Resume {
            route,
            destination,
            admin,
        } => control(&route, destination.as_deref(), "resume", "", &admin).await,
        EventsAction::Purge {
            route,
            destination,
            which,
            json,
            admin,
        } => {
            act(
                &route,
                destination.as_deref(),
                "purge",
                &which,
                json,
                &admin,
            )
            .await
        }
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
    json: bool,
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
    if json {
        println!("{}", printable(body.trim_end()));
        return Ok(0);
    }
    let acted: EventsActed = answer(&body)?;
    println!("{}", acted_line(&acted, which, destination));
    Ok(0)
}

/// What `events retry` and `events purge` did, in a line.
fn acted_line(a: &EventsActed, which: &Which, destination: Option<&str>) -> String {
    let at = match destination {
        Some(d) => format!(
            "route {}, destination {}",
            printable(&a.route),
            printable(d)
        ),
        None => format!("route {}", printable(&a.route)),
    };
    let what = |n: u64| match &which.event_id {
        Some(id) if n > 0 => format!("event {}", printable(id)),
        Some(id) => format!(
            "no event {} (it is neither dead nor retrying)",
            printable(id)
        ),
        None => format!("{n} dead event(s)"),
    };
    match (a.retried, a.purged) {
        (Some(n), _) => format!(
            "retried {} on {at}: due now, delivered at the destination's rate_limit",
            what(n)
        ),
        (_, Some(n)) => format!("purged {} on {at}", what(n)),
        (None, None) => format!("done on {at}"),
    }
}

/// `events pause|resume`: prints each destination's state.
async fn control(
    route: &str,
    destination: Option<&str>,
    action: &str,
    query: &str,
    admin: &AdminArgs,
) -> anyhow::Result<i32> {
    let path = format!(
        "/events/{}/{action}?{query}{}",
        enc(route),
        only(destination)
    );
    let (ok, body) = admin_call(admin, Some(route), reqwest::Method::POST, &path).await?;
    if !ok {
        return Ok(admin_failed(&body));
    }
    let answer: Controlled = answer(&body)?;
    for d in &answer.destinations {
        println!("{}", control_line(&answer.route, d, crate::time::now_ms()));
    }
    Ok(0)
}

/// One destination's state, for people: `route/destination: paused since … (reason)`.
fn control_line(route: &str, d: &DestinationControl, now_ms: u64) -> String {
    let name = if crate::config::is_own_destination(route, &d.destination) {
        printable(route).into_owned()
    } else {
        format!("{}/{}", printable(route), printable(&d.destination))
    };
    let Some(p) = &d.paused else {
        return format!("{name}: running");
    };
    let at = |t: &str| {
        crate::provider::timestamp::rfc3339_ms(t)
            .map_or_else(|| printable(t).into_owned(), |ms| ago(ms, now_ms))
    };
    let until = p
        .until
        .as_deref()
        .map_or_else(String::new, |u| format!(", resumes {}", at(u)));
    let what = if p.breaker {
        "paused by its breaker (one event is probed per interval; a delivery resumes it)".to_owned()
    } else {
        format!("paused: {}", printable(&p.reason))
    };
    format!("{name}: {what}, since {}{until}", at(&p.since))
}

/// `events retry` with filters (or `--plan`): the plan, or what was retried.
async fn bulk_retry(
    route: &str,
    destination: Option<&str>,
    filters: &RetryFilters,
    plan: bool,
    json: bool,
    admin: &AdminArgs,
) -> anyhow::Result<i32> {
    let mut query = filters.query(crate::time::now_ms());
    if plan {
        if !query.is_empty() {
            query.push('&');
        }
        query.push_str("plan=true");
    }
    if query.is_empty() {
        // Dead and retrying: the default selection, named so the call is a bulk one.
        query.push_str("state=");
    }
    let path = format!("/events/{}/retry?{query}{}", enc(route), only(destination));
    let (ok, body) = admin_call(admin, Some(route), reqwest::Method::POST, &path).await?;
    if !ok {
        return Ok(admin_failed(&body));
    }
    if json {
        println!("{}", printable(body.trim_end()));
        return Ok(0);
    }
    let b: BulkRetry = answer(&body)?;
    print!("{}", bulk_text(&b, crate::time::now_ms()));
    Ok(0)
}

/// What `events retry --plan` (and a bulk retry) prints.
fn bulk_text(b: &BulkRetry, now_ms: u64) -> String {
    let mut out = String::new();
    let more = if b.more {
        " (more match beyond this call's bound: run it again once these are delivered)"
    } else {
        ""
    };
    match b.retried {
        None => out.push_str(&format!(
            "plan: {} event(s) of route {} would be retried{more}; nothing was changed\n",
            b.count,
            printable(&b.route)
        )),
        Some(n) => out.push_str(&format!(
            "retried {n} of {} matching event(s) of route {}, due now (delivered at the destination's rate_limit, in per-key order){more}\n",
            b.count,
            printable(&b.route)
        )),
    }
    if !b.sample.is_empty() {
        let shown = b.sample.len();
        out.push_str(&format!(
            "{}:\n",
            if u64::try_from(shown).unwrap_or(u64::MAX) < b.count {
                format!("the first {shown}")
            } else {
                "they are".to_owned()
            }
        ));
        out.push_str(&events_table(&b.sample, now_ms));
    }
    out
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
    // A fan-out event: every destination's state first, then the attempts in full of
    // each that has not delivered it (`--destination NAME` shows one alone).
    if let Some(all) = v.destinations.as_ref().filter(|a| a.len() > 1) {
        let _ = writeln!(out, "received:  {}", ago(v.received_at_ms, now_ms));
        let _ = writeln!(out, "destinations:");
        for d in all {
            let mut line = format!(
                "  {:<16} {:<10} {} attempt(s)",
                printable(d.destination.as_deref().unwrap_or("-")),
                d.state.as_str(),
                d.attempts
            );
            if let Some(next) = d.next_at_ms {
                let _ = write!(line, ", next try {}", ago(next, now_ms));
            }
            let _ = writeln!(out, "{line}");
        }
        for d in all
            .iter()
            .filter(|d| d.state != crate::store::State::Delivered)
        {
            let _ = writeln!(
                out,
                "\ndestination {}:",
                printable(d.destination.as_deref().unwrap_or("-"))
            );
            if let Some(k) = &d.order_key {
                let _ = writeln!(
                    out,
                    "order key: {} (holds its place in the key's line)",
                    printable(k)
                );
            }
            state_and_history(&mut out, d, now_ms);
        }
        return out;
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
    let _ = writeln!(out, "received:  {}", ago(v.received_at_ms, now_ms));
    state_and_history(&mut out, v, now_ms);
    out
}

/// One destination's record of an event: its state, why it is dead, its attempts
/// and their history.
fn state_and_history(out: &mut String, v: &EventView, now_ms: u64) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "state:     {}", v.state.as_str());
    if let Some(why) = &v.dead_reason {
        let _ = writeln!(out, "dead:      {}", printable(why));
    }
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
