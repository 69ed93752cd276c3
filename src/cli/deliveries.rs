//! `hookgate deliveries list|show|tail|replay`: the delivery log of a running gateway,
//! through its admin listener (`GET /deliveries`, `/deliveries/<id>`,
//! `/deliveries/stream`, `POST /deliveries/<id>/replay`), with the same filters as the
//! API. Everything printed from a record came from outside (a provider's request, an
//! upstream's answer), so it goes through [`printable`] first.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context as _;
use clap::Subcommand;

use super::AdminArgs;
use super::admin::{admin_call, admin_failed, admin_request, answer, enc};
use super::text::printable;
use crate::admin::api::{
    self, DeliveryDetail, DeliveryPage, DeliveryRecord, DeliverySummary, Replayed,
};
use crate::time::now_ms;

/// The filters `list` and `tail` take (the API's query parameters).
#[derive(Debug, Default, clap::Args)]
pub struct Filters {
    /// Only this route's deliveries.
    #[arg(long)]
    route: Option<String>,
    /// Only deliveries with this outcome (as in the `hookgate-outcome` header:
    /// forwarded, duplicate, bad_signature, …).
    #[arg(long)]
    outcome: Option<String>,
    /// Only events of this type.
    #[arg(long)]
    event_type: Option<String>,
    /// Only deliveries of this event.
    #[arg(long)]
    event_id: Option<String>,
    /// Received at or after: Unix milliseconds, RFC 3339, or an age such as `15m`.
    #[arg(long)]
    since: Option<String>,
    /// Received before: Unix milliseconds, RFC 3339, or an age such as `1h`.
    #[arg(long)]
    before: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum DeliveriesAction {
    /// Recorded deliveries, newest first.
    List {
        #[command(flatten)]
        filters: Filters,
        /// At most this many (pages through the log beyond 500).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print the records as the admin listener's JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// One delivery in full: the request with its headers (credentials redacted), the
    /// body, why it was refused, what the gateway answered and, on a queue route, each
    /// destination's state and attempts.
    Show {
        /// The delivery's ID (as `list` prints it).
        delivery_id: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Print new deliveries as they arrive, until interrupted.
    Tail {
        #[command(flatten)]
        filters: Filters,
        /// One JSON record a line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Send a recorded delivery again, as an operator's deliberate repeat with the same
    /// Idempotency-Key: to the route's upstream, or on a queue route into the queues of
    /// the destinations whose `events` take its type (or one's). A copy's record
    /// (duplicate, in_flight, mismatch) sends the accepted delivery's record. The replay
    /// is recorded too (`replay_of`). Without a delivery ID, the deliveries the `list`
    /// filters select, each event once, oldest first (`--plan` first: what would be
    /// replayed, changing nothing).
    Replay {
        /// The delivery's ID (as `list` prints it).
        delivery_id: Option<String>,
        #[command(flatten)]
        filters: Filters,
        /// With filters: at most this many deliveries are read (newest first).
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// With filters: print what would be replayed, changing nothing.
        #[arg(long)]
        plan: bool,
        /// Only this destination, whatever its `events` filter.
        #[arg(long)]
        destination: Option<String>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

/// A delivery ID in a path: the characters IDs are made of go as they are (the
/// admin listener takes the path's ID as written), anything else percent-encoded.
fn path_id(id: &str) -> String {
    const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(id, KEEP).to_string()
}

/// Records the API answers at most in one page.
const PAGE: usize = 500;

/// A time bound as the API takes it: an age (`15m`) becomes Unix milliseconds; Unix
/// milliseconds and RFC 3339 go as given (the admin listener checks them).
pub(super) fn bound(v: &str, now_ms: u64) -> String {
    let v = v.trim();
    if v.parse::<u64>().is_err()
        && let Ok(age) = humantime::parse_duration(v)
    {
        let age = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
        return now_ms.saturating_sub(age).to_string();
    }
    v.to_owned()
}

impl Filters {
    /// Whether any filter is given.
    fn any(&self) -> bool {
        [
            &self.route,
            &self.outcome,
            &self.event_type,
            &self.event_id,
            &self.since,
            &self.before,
        ]
        .iter()
        .any(|f| f.is_some())
    }

    /// The query string (without `?`).
    fn query(&self, now_ms: u64) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("route", &self.route),
            ("outcome", &self.outcome),
            ("event_type", &self.event_type),
            ("event_id", &self.event_id),
        ] {
            if let Some(v) = v {
                q.append_pair(k, v);
            }
        }
        for (k, v) in [("since", &self.since), ("before", &self.before)] {
            if let Some(v) = v {
                q.append_pair(k, &bound(v, now_ms));
            }
        }
        q.finish()
    }
}

/// Runs one `hookgate deliveries …` command; the exit code.
pub(super) async fn run(action: DeliveriesAction) -> anyhow::Result<i32> {
    match action {
        DeliveriesAction::List {
            filters,
            limit,
            json,
            admin,
        } => list(&filters, limit, json, &admin).await,
        DeliveriesAction::Show {
            delivery_id,
            json,
            admin,
        } => {
            let path = format!("/deliveries/{}", path_id(&delivery_id));
            let (ok, body) = admin_call(&admin, None, reqwest::Method::GET, &path).await?;
            if !ok {
                return Ok(admin_failed(&body));
            }
            if json {
                println!("{}", printable(body.trim_end()));
                return Ok(0);
            }
            let detail: DeliveryDetail = answer(&body)?;
            print!("{}", details(&detail, now_ms()));
            Ok(0)
        }
        DeliveriesAction::Tail {
            filters,
            json,
            admin,
        } => {
            // Registered here, not inherited: a background job starts with SIGINT
            // ignored, and `kill -INT` must still stop it.
            let stop = crate::shutdown::Signals::install();
            tokio::select! {
                r = tail(&filters, json, &admin) => r,
                () = stop.stopped() => Ok(0),
            }
        }
        DeliveriesAction::Replay {
            delivery_id,
            filters,
            limit,
            plan,
            destination,
            json,
            admin,
        } => match delivery_id {
            Some(_) if filters.any() || plan => {
                eprintln!(
                    "hookgate deliveries replay: give a delivery ID, or filters (--plan first), not both"
                );
                Ok(2)
            }
            Some(id) => replay_one(&id, destination.as_deref(), json, &admin).await,
            None if !filters.any() => {
                eprintln!(
                    "hookgate deliveries replay: give a delivery ID, or filters that select deliveries (--route, --outcome, --event-type, --event-id, --since, --before; --plan first)"
                );
                Ok(2)
            }
            None => replay_many(&filters, limit, plan, destination.as_deref(), &admin).await,
        },
    }
}

/// `deliveries replay ID`.
async fn replay_one(
    delivery_id: &str,
    destination: Option<&str>,
    json: bool,
    admin: &AdminArgs,
) -> anyhow::Result<i32> {
    let mut path = format!("/deliveries/{}/replay", path_id(delivery_id));
    if let Some(d) = destination {
        let _ = write!(path, "?destination={}", enc(d));
    }
    let (ok, body) = admin_call(admin, None, reqwest::Method::POST, &path).await?;
    if !ok {
        return Ok(admin_failed(&body));
    }
    let replayed: Replayed = answer(&body)?;
    if json {
        println!("{}", printable(body.trim_end()));
    } else {
        println!(
            "replayed {} as {}: {} {}",
            printable(delivery_id),
            printable(&replayed.delivery_id),
            printable(&replayed.outcome),
            replayed.status
        );
    }
    Ok(0)
}

/// Which of the records the filters select a bulk replay sends: one per route and
/// event (its first record: a copy's would replay the accepted delivery anyway), in
/// the order they came, so each key's events go again in that order. Records without
/// an event ID (refused before one was read) cannot be replayed.
fn replay_selection(records: Vec<DeliverySummary>) -> Vec<DeliveryRecord> {
    let mut seen = std::collections::HashSet::new();
    records
        .into_iter()
        .rev()
        .map(|r| r.0)
        .filter(|r| {
            r.event_id
                .as_ref()
                .is_some_and(|id| seen.insert((r.route.clone(), id.clone())))
        })
        .collect()
}

/// `deliveries replay` with filters: the plan, or each replay's answer.
async fn replay_many(
    filters: &Filters,
    limit: usize,
    plan: bool,
    destination: Option<&str>,
    admin: &AdminArgs,
) -> anyhow::Result<i32> {
    let (records, cursor) = match fetch(filters, limit, admin).await? {
        Ok(found) => found,
        Err(code) => return Ok(code),
    };
    let chosen = replay_selection(records);
    let more = if cursor.is_some() {
        format!(" (more deliveries match beyond --limit {limit})")
    } else {
        String::new()
    };
    if plan {
        println!(
            "plan: {} event(s) would be replayed{more}; nothing was changed",
            chosen.len()
        );
        if !chosen.is_empty() {
            print!("{}", header());
            for r in &chosen {
                print!("{}", row(r));
            }
        }
        return Ok(0);
    }
    let (mut sent, mut refused) = (0, 0);
    for r in &chosen {
        let mut path = format!("/deliveries/{}/replay", path_id(&r.delivery_id));
        if let Some(d) = destination {
            let _ = write!(path, "?destination={}", enc(d));
        }
        let (ok, body) = admin_call(admin, None, reqwest::Method::POST, &path).await?;
        let id = r.event_id.as_deref().unwrap_or("");
        if ok {
            let replayed: Replayed = answer(&body)?;
            sent += 1;
            println!(
                "replayed {} ({} on {}) as {}: {} {}",
                printable(&r.delivery_id),
                printable(id),
                printable(&r.route),
                printable(&replayed.delivery_id),
                printable(&replayed.outcome),
                replayed.status
            );
        } else {
            refused += 1;
            println!(
                "not replayed {} ({} on {}): {}",
                printable(&r.delivery_id),
                printable(id),
                printable(&r.route),
                printable(body.trim_end())
            );
        }
    }
    println!("{sent} replayed, {refused} not replayed{more}");
    Ok(i32::from(refused > 0))
}

/// The records the filters select, newest first, up to `limit` (following the
/// listener's pages), and the cursor of the rest, if more match. `Err(code)`: the
/// listener refused.
async fn fetch(
    filters: &Filters,
    limit: usize,
    admin: &AdminArgs,
) -> anyhow::Result<Result<(Vec<DeliverySummary>, Option<String>), i32>> {
    let query = filters.query(now_ms());
    let mut records: Vec<DeliverySummary> = Vec::new();
    let mut cursor: Option<String> = None;
    // A page may hold fewer records than asked while the cursor goes on (the listener
    // reads a bounded number of records per request): follow it, within reason.
    let mut pages = 0;
    while records.len() < limit && pages < 10_000 {
        pages += 1;
        let want = (limit - records.len()).min(PAGE);
        let mut path = format!("/deliveries?limit={want}");
        if !query.is_empty() {
            let _ = write!(path, "&{query}");
        }
        if let Some(c) = &cursor {
            let _ = write!(path, "&cursor={}", enc(c));
        }
        let (ok, body) =
            admin_call(admin, filters.route.as_deref(), reqwest::Method::GET, &path).await?;
        if !ok {
            return Ok(Err(admin_failed(&body)));
        }
        let page: DeliveryPage = answer(&body)?;
        records.extend(page.deliveries);
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    Ok(Ok((records, cursor)))
}

async fn list(
    filters: &Filters,
    limit: usize,
    json: bool,
    admin: &AdminArgs,
) -> anyhow::Result<i32> {
    let (records, cursor) = match fetch(filters, limit, admin).await? {
        Ok(found) => found,
        Err(code) => return Ok(code),
    };
    let more = cursor.is_some();
    if json {
        let out = api::to_json(&DeliveryPage {
            deliveries: records,
            next_cursor: cursor,
        });
        println!("{}", printable(&out.to_string()));
        return Ok(0);
    }
    let mut out = String::new();
    if records.is_empty() {
        out.push_str("no deliveries match\n");
    } else {
        out.push_str(&header());
        for r in &records {
            out.push_str(&row(&r.0));
        }
        let _ = write!(out, "{} delivery(ies), newest first", records.len());
        if more {
            let last = records.last().map_or(0, |r| r.0.received_at);
            let _ = write!(
                out,
                "; older ones: --limit {} or --before {last}",
                limit * 2
            );
        }
        out.push('\n');
    }
    print!("{out}");
    Ok(0)
}

/// Follows `GET /deliveries/stream`, printing each new record; reconnects when the
/// stream breaks, until interrupted.
async fn tail(filters: &Filters, json: bool, admin: &AdminArgs) -> anyhow::Result<i32> {
    let query = filters.query(now_ms());
    let path = if query.is_empty() {
        "/deliveries/stream".to_owned()
    } else {
        format!("/deliveries/stream?{query}")
    };
    let mut first = true;
    let mut stdout = std::io::stdout();
    loop {
        let (req, base) =
            admin_request(admin, filters.route.as_deref(), reqwest::Method::GET, &path)?;
        let req = req.header("accept", "text/event-stream");
        let mut resp = match req.send().await {
            Ok(r) => r,
            Err(e) if first => {
                return Err(e)
                    .with_context(|| format!("cannot reach the admin listener at {base}"));
            }
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if !resp.status().is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Ok(admin_failed(&body));
        }
        if first && !json {
            print!("{}", header());
            let _ = stdout.flush();
        }
        first = false;
        let mut buf: Vec<u8> = Vec::new();
        while let Ok(Some(chunk)) = resp.chunk().await {
            buf.extend_from_slice(&chunk);
            while let Some(end) = find_blank_line(&buf) {
                let block = String::from_utf8_lossy(&buf[..end.0]).into_owned();
                buf.drain(..end.1);
                if let Some(skipped) = lagged_event(&block) {
                    eprintln!(
                        "hookgate: {skipped} deliveries were skipped: this reader fell behind (`deliveries list` shows them)"
                    );
                }
                if let Some(data) = delivery_event(&block) {
                    let Ok(record) = serde_json::from_str::<DeliverySummary>(&data) else {
                        continue;
                    };
                    let line = if json {
                        format!("{}\n", printable(&api::to_json(&record).to_string()))
                    } else {
                        row(&record.0)
                    };
                    // A closed pipe (`| head`) ends the command.
                    if stdout.write_all(line.as_bytes()).is_err() || stdout.flush().is_err() {
                        return Ok(0);
                    }
                }
            }
        }
        eprintln!("hookgate: the delivery stream ended; reconnecting");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Where the first event of an event stream ends: (its end, where the next begins).
fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| (i, i + 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The data of a `delivery` event, if the block is one (comments and other events are
/// skipped).
fn delivery_event(block: &str) -> Option<String> {
    event_data(block, "delivery")
}

/// How many records a `lagged` event says this reader missed, if the block is one.
fn lagged_event(block: &str) -> Option<u64> {
    event_data(block, "lagged").map(|n| n.trim().parse().unwrap_or(0))
}

/// The data of an event named `name`, if the block is one.
fn event_data(block: &str, name: &str) -> Option<String> {
    let mut event = "message";
    let mut data: Vec<&str> = Vec::new();
    for line in block.lines() {
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = value,
            "data" => data.push(value),
            _ => {}
        }
    }
    (event == name && !data.is_empty()).then(|| data.join("\n"))
}

fn time(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// Text from outside, printable.
fn text(s: &str) -> String {
    printable(s).into_owned()
}

/// Text from outside that may be absent: printable, `-` when absent.
fn opt(s: Option<&str>) -> String {
    s.map_or_else(|| "-".to_owned(), text)
}

/// At most `n` characters of `s`, with `…` when cut.
fn fit(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_owned();
    }
    let head: String = s.chars().take(n.saturating_sub(1)).collect();
    format!("{head}…")
}

fn header() -> String {
    format!(
        "{:<24} {:<22} {:<14} {:<18} {:>6} {:<24} {}\n",
        "RECEIVED", "DELIVERY", "ROUTE", "OUTCOME", "STATUS", "EVENT TYPE", "EVENT ID"
    )
}

/// One record as a line of `list` and `tail`.
fn row(r: &DeliveryRecord) -> String {
    format!(
        "{:<24} {:<22} {:<14} {:<18} {:>6} {:<24} {}\n",
        time(r.received_at),
        text(&r.delivery_id),
        fit(&text(&r.route), 14),
        fit(&text(&r.outcome), 18),
        r.status,
        fit(&opt(r.event_type.as_deref()), 24),
        opt(r.event_id.as_deref()),
    )
}

fn ago(at_ms: u64, now_ms: u64) -> String {
    let d = Duration::from_secs(now_ms.saturating_sub(at_ms) / 1000);
    if d.is_zero() {
        "just now".to_owned()
    } else {
        format!("{} ago", humantime::format_duration(d))
    }
}

/// Lines of text from outside, each made printable and indented.
fn block(out: &mut String, text: &str) {
    for line in text.lines() {
        let _ = writeln!(out, "  {}", printable(line));
    }
}

/// A body as `show` prints it: indented when it is JSON, with its keys in the order
/// received and its numbers and escapes as sent. Hand-written: a parse into
/// `serde_json::Value` sorts the keys and rounds numbers past 64 bits; this only
/// re-spaces the tokens of a text already checked to be JSON.
fn pretty(text: &str) -> String {
    if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                // An empty object or array stays on its line.
                while chars.peek().is_some_and(|c| c.is_ascii_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('}' | ']')) {
                    if let Some(close) = chars.next() {
                        out.push(close);
                    }
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_ascii_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

/// What `hookgate deliveries show` prints.
fn details(d: &DeliveryDetail, now_ms: u64) -> String {
    let v = &d.record;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "delivery {} on route {} ({})",
        text(&v.delivery_id),
        text(&v.route),
        text(&v.provider)
    );
    let _ = writeln!(
        out,
        "received:  {} ({}) from {}",
        time(v.received_at),
        ago(v.received_at, now_ms),
        text(&v.peer)
    );
    let took = format!(" in {:.1} ms", v.duration_us as f64 / 1000.0);
    let _ = writeln!(
        out,
        "outcome:   {}, answered {}{took}",
        text(&v.outcome),
        v.status
    );
    if let Some(reason) = &v.reason {
        let _ = writeln!(out, "refused:   {}", text(reason));
    }
    if let Some(event_id) = &v.event_id {
        let kind = v
            .event_type
            .as_ref()
            .map(|t| format!(" ({})", text(t)))
            .unwrap_or_default();
        let _ = writeln!(out, "event:     {}{kind}", text(event_id));
    }
    if let Some(id) = &v.provider_delivery_id {
        let _ = writeln!(out, "provider's delivery ID: {}", text(id));
    }
    if let Some(secret) = &v.secret {
        let _ = writeln!(out, "secret:    {}", text(secret));
    }
    if let Some(of) = &v.replay_of {
        let _ = writeln!(out, "replay of: {}", text(of));
    }
    if let Some(q) = &v.queue {
        let (event_id, route) = (text(&q.event_id), text(&q.route));
        let _ = writeln!(
            out,
            "queued:    event {event_id} on route {route} (hookgate events show --route {route} --event-id {event_id})",
        );
    }
    let _ = writeln!(out, "request:   {} {}", text(&v.method), text(&v.path));
    if !v.headers.is_empty() {
        let _ = writeln!(out, "headers:");
        for (name, value) in &v.headers {
            let _ = writeln!(out, "  {}: {}", printable(name), printable(value));
        }
    }
    body(&mut out, v);
    if let Some(answer) = v.answer.as_deref().filter(|a| !a.is_empty()) {
        let _ = writeln!(out, "answer:");
        block(&mut out, &pretty(answer));
    }
    if let Some(dests) = &d.destinations {
        destinations(&mut out, dests, v.queue.as_ref().map(|q| q.route.as_str()));
    }
    out
}

/// The body of a record, as `show` prints it.
fn body(out: &mut String, v: &DeliveryRecord) {
    let size = v.body_bytes;
    match &v.body {
        None => {
            let why = if v.reason.is_some() {
                "refused deliveries are recorded without it"
            } else {
                "not kept: log.bodies = \"none\""
            };
            let _ = writeln!(out, "body:      {size} bytes, {why}");
        }
        Some(body) => {
            let mut notes = Vec::new();
            if v.body_truncated {
                notes.push("cut at log.max_body");
            }
            if v.body_base64 {
                notes.push("base64: not UTF-8");
            }
            let notes = if notes.is_empty() {
                String::new()
            } else {
                format!(", {}", notes.join(", "))
            };
            let _ = writeln!(out, "body ({size} bytes{notes}):");
            if v.body_base64 {
                block(out, body);
            } else {
                block(out, &pretty(body));
            }
        }
    }
}

/// A queue event's state in each destination, as `show` prints it (one named apart
/// from the route is named by the route).
fn destinations(out: &mut String, dests: &[api::EventView], route: Option<&str>) {
    let _ = writeln!(out, "destinations:");
    for d in dests {
        let name = d.destination.as_deref().map_or_else(|| opt(route), text);
        let dead = d
            .dead_reason
            .as_ref()
            .map(|why| format!(" (dead: {})", text(why)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {name}: {}, {} attempt(s){dead}",
            d.state.as_str(),
            d.attempts
        );
        for a in &d.history {
            let _ = writeln!(out, "    - {} {}", time(a.at_ms), super::events::attempt(a));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_age_becomes_milliseconds_and_other_bounds_go_as_given() {
        assert_eq!(bound("15m", 1_000_000), (1_000_000 - 900_000).to_string());
        assert_eq!(bound("1764590000123", 5), "1764590000123");
        assert_eq!(bound("2026-12-01T14:02:00Z", 5), "2026-12-01T14:02:00Z");
        let f = Filters {
            route: Some("a b".into()),
            outcome: Some("bad_signature".into()),
            since: Some("1s".into()),
            ..Filters::default()
        };
        assert_eq!(
            f.query(10_000),
            "route=a+b&outcome=bad_signature&since=9000"
        );
    }

    #[test]
    fn a_json_body_is_indented_with_its_keys_and_numbers_as_received() {
        let body = r#"{"zeta":1,"alpha":{"b":[1, 2,{}],"a":"x,\"{y}\":"},"n":123456789012345678901234567890,"e":[]}"#;
        assert_eq!(
            pretty(body),
            "{\n  \"zeta\": 1,\n  \"alpha\": {\n    \"b\": [\n      1,\n      2,\n      {}\n    ],\n    \"a\": \"x,\\\"{y}\\\":\"\n  },\n  \"n\": 123456789012345678901234567890,\n  \"e\": []\n}"
        );
        assert_eq!(pretty("not json {"), "not json {");
        assert_eq!(pretty("a=1&b=2"), "a=1&b=2");
    }

    #[test]
    fn an_event_stream_is_cut_into_delivery_events() {
        let buf = b": keepalive\n\nevent: delivery\ndata: {\"a\":1}\n\nrest";
        let (end, next) = find_blank_line(buf).expect("a whole block");
        assert_eq!(delivery_event(&String::from_utf8_lossy(&buf[..end])), None);
        let rest = &buf[next..];
        let (end, _) = find_blank_line(rest).expect("a second block");
        assert_eq!(
            delivery_event(&String::from_utf8_lossy(&rest[..end])).as_deref(),
            Some("{\"a\":1}")
        );
        assert_eq!(find_blank_line(b"event: delivery\ndata: {"), None);
        assert_eq!(lagged_event("event: lagged\ndata: 12"), Some(12));
        assert_eq!(delivery_event("event: lagged\ndata: 12"), None);
    }

    #[test]
    fn show_prints_outside_text_without_its_control_characters() {
        let v = serde_json::json!({
            "delivery_id": "01-aa", "route": "stripe", "provider": "stripe",
            "received_at": 1_000u64, "peer": "127.0.0.1:1", "method": "POST", "path": "/s",
            "headers": [["stripe-signature", "[redacted]"], ["x-evil", "a\u{1b}[2Jb"]],
            "body": "{\"id\":\"evt\\u001b]0;x\\u0007\",\"n\":1}", "body_bytes": 30,
            "outcome": "bad_signature", "status": 401, "reason": "no configured secret matched",
            "answer": "{\"error\":\"invalid signature\"}", "event_id": "evt\u{1b}]0;x\u{7}",
            "body_base64": false, "body_truncated": false, "duration_us": 1_500,
        });
        let v: DeliveryDetail = serde_json::from_value(v).expect("a delivery's detail");
        let text = details(&v, 2_000);
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text}"
        );
        assert!(
            text.contains("refused:   no configured secret matched"),
            "{text}"
        );
        assert!(text.contains("stripe-signature: [redacted]"), "{text}");
        assert!(text.contains("x-evil: a\\u001b[2Jb"), "{text}");
        assert!(text.contains("\"n\": 1"), "pretty JSON: {text}");
        assert!(text.contains("answered 401"), "{text}");
    }
}
