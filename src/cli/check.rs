//! `hookgate check`: validate a config file and describe its routes.

use std::path::PathBuf;

use crate::config::{self, Backend, Config, OnError};

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The config file to check: every error with its file, line and key, then each
    /// route as the gateway would run it, and warnings (filters that match nothing the
    /// provider sends, stored queues no route names, a log larger than its store's
    /// room). Exit 1 on an error.
    #[arg(long, short, default_value = "config.toml")]
    config: PathBuf,
}

pub(super) async fn run(args: CheckArgs) -> anyhow::Result<i32> {
    match config::load(&args.config) {
        Ok(cfg) => {
            print!("{}", describe(&cfg));
            print!("{}", check_event_filters(&cfg));
            print!("{}", check_stranded(&cfg).await);
            print!("{}", check_log_budget(&cfg).await);
            Ok(0)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(1)
        }
    }
}

/// `hookgate check`: an `events` pattern (a route's or a destination's) that can take
/// nothing the route's provider sends, where the provider publishes its event names
/// (GitHub's `pull_requests` for `pull_request`): its events would all be filtered.
fn check_event_filters(cfg: &Config) -> String {
    use crate::provider::event_type::known_names;
    let mut out = String::new();
    for route in &cfg.routes {
        let Some((who, names)) = route.event_type.as_ref().and_then(known_names) else {
            continue;
        };
        let filters = std::iter::once(("events".to_owned(), route.events.as_ref())).chain(
            route
                .destinations
                .iter()
                .map(|d| (format!("destination {}: events", d.name), d.events.as_ref())),
        );
        for (key, filter) in filters {
            let Some(filter) = filter else { continue };
            for pattern in filter.unmatched(names) {
                let head = pattern.split_once('.').map_or(pattern, |(h, _)| h);
                let hint = crate::provider::catalogue::nearest(head, names.iter().copied())
                    .map(|n| format!("did you mean {n:?}? "))
                    .unwrap_or_default();
                out.push_str(&format!(
                    "route {}: warning: {key}: {pattern:?} can match no event {who} sends: {hint}(a name takes its dotted sub-types: \"pull_request\" takes \"pull_request.opened\")\n",
                    route.name
                ));
            }
        }
    }
    out
}

/// `hookgate check`: whether `log.max_size` is more than the store can give the log
/// (the disk's volume beside `store.min_free_space` and the log's margin; a quarter of
/// Redis's `maxmemory`), when the store can be reached.
async fn check_log_budget(cfg: &Config) -> String {
    use crate::store::Store;
    use crate::store::log::{Bounds, DeliveryLog};
    if !cfg.log.enabled {
        return String::new();
    }
    let warning = match &cfg.store.backend {
        Backend::Memory => None,
        Backend::Disk { path } => {
            crate::store::log::max_size_warning(path, cfg.store.min_free_space, cfg.log.max_size)
        }
        _ => {
            let Ok(store @ Store::Redis(_)) = Store::connect(&cfg.store) else {
                return String::new();
            };
            let bounds = Bounds {
                keep: cfg.log.keep,
                max_size: cfg.log.max_size,
            };
            let Ok(log) = DeliveryLog::open(&store, bounds, &cfg.store.key_prefix) else {
                return String::new();
            };
            tokio::time::timeout(std::time::Duration::from_secs(10), log.budget_warning())
                .await
                .ok()
                .flatten()
        }
    };
    warning.map_or_else(String::new, |w| format!("log: warning: {w}\n"))
}

/// `hookgate check`: the stored queues under the config's prefix that no route or
/// destination names (their events would never be delivered), when the store can be
/// reached. A disk store's file held by the running gateway cannot be opened: the
/// gateway's reloads check instead.
async fn check_stranded(cfg: &Config) -> String {
    use crate::config::Backend;
    use crate::store::{DiskStore, Store};
    let store = match &cfg.store.backend {
        Backend::Memory => return String::new(),
        Backend::Disk { path } if !path.exists() => return String::new(),
        Backend::Disk { path } => match DiskStore::open_with(path, cfg.store.min_free_space) {
            Ok(s) => Store::Disk(s),
            Err(e) => {
                return format!(
                    "store: could not look for stored queues that no route names: {} could not be opened ({e:#}); if the gateway is running it holds the file, and its reloads check them\n",
                    path.display()
                );
            }
        },
        _ => match Store::connect(&cfg.store) {
            Ok(s) => s,
            Err(e) => {
                return format!(
                    "store: could not look for stored queues that no route names ({e:#})\n"
                );
            }
        },
    };
    let found = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        crate::store::health::stranded::find(&store, &cfg.store.key_prefix, &cfg.routes),
    )
    .await;
    match found {
        Ok(Ok(found)) if found.is_empty() => {
            "store: every stored queue with events has its route and destination\n".to_owned()
        }
        Ok(Ok(found)) => found
            .iter()
            .map(|s| {
                format!(
                    "store: warning: {}, but no route or destination of this config names it: nothing would deliver them (keep the route or destination, or purge them)\n",
                    s.describe()
                )
            })
            .collect(),
        Ok(Err(e)) => {
            format!("store: could not look for stored queues that no route names ({e})\n")
        }
        Err(_) => "store: could not look for stored queues that no route names (timed out)\n"
            .to_owned(),
    }
}

/// A duration as a config would write it, in its largest whole unit: `72h`, not
/// humantime's `3days`; `90s`, not `1m 30s`.
fn short_duration(d: std::time::Duration) -> String {
    let (s, ms) = (d.as_secs(), d.subsec_millis());
    match (s, ms) {
        (0, ms) => format!("{ms}ms"),
        (s, 0) if s % 3600 == 0 => format!("{}h", s / 3600),
        (s, 0) if s % 60 == 0 => format!("{}m", s / 60),
        (s, 0) => format!("{s}s"),
        _ => format!("{}ms", d.as_millis()),
    }
}

/// The `check` report: one block per route.
pub fn describe(cfg: &Config) -> String {
    let mut s = format!(
        "{}: ok\nlisten {}  store {}  dedup_ttl {}  inflight_ttl {}  max_body {} bytes\n",
        cfg.source.display(),
        cfg.server.listen,
        match &cfg.store.backend {
            Backend::Memory => "memory".to_owned(),
            Backend::Disk { path } => format!("disk ({})", path.display()),
            Backend::Redis { .. } => "redis".to_owned(),
            Backend::RedisCluster { .. } => "redis cluster".to_owned(),
            Backend::RedisSentinel { .. } => "redis via sentinel".to_owned(),
        },
        short_duration(cfg.store.dedup_ttl),
        short_duration(cfg.store.inflight_ttl),
        cfg.server.max_body,
    );
    for r in &cfg.routes {
        let primary = r.primary();
        let single = r.only_own_destination();
        let (kind, upstream) = if single {
            target_line(primary)
        } else {
            (
                "upstream",
                format!("{} destinations (below)", r.destinations.len()),
            )
        };
        s.push_str(&format!(
            "\nroute {}\n  path       {} ({})\n  provider   {}\n  secrets    {}\n  event id   {}\n  tolerance  {}\n  {kind:<10} {}\n  on_error   {}{}\n",
            r.name,
            r.path,
            r.methods.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", "),
            r.verifier.preset().name(),
            r.secret_count,
            event_key(r),
            match r.tolerance {
                Some(t) => short_duration(std::time::Duration::from_secs(t)),
                None if r.verifier.preset().default_tolerance(None).is_some() => "off".to_string(),
                None => "none (the provider signs no timestamp)".to_string(),
            },
            upstream,
            match r.on_error {
                OnError::Reject => "reject",
                OnError::Forward => "forward",
            },
            if single && primary.forward_signer.is_some() { "\n  re-signs   Standard Webhooks (forward_secret)" } else { "" },
        ));
        if let Some(t) = &r.event_type {
            s.push_str(&format!("  event type {t}\n"));
        }
        if let Some(f) = &r.events {
            s.push_str(&format!(
                "  events     {} (others: 200 filtered)\n",
                f.patterns().join(", ")
            ));
        }
        let queue = r.delivery == config::Delivery::Queue;
        if single {
            s.push_str(&match queue {
                false => "  delivery   sync\n".to_owned(),
                true => format!("  delivery   queue ({})\n", pacing(primary)),
            });
            s.push_str(&ordering(primary, "  "));
            continue;
        }
        s.push_str(if queue {
            "  delivery   queue\n"
        } else {
            "  delivery   sync\n"
        });
        for d in &r.destinations {
            let (kind, target) = target_line(d);
            s.push_str(&format!(
                "  destination {}\n    {kind:<10} {target}{}\n",
                d.name,
                if d.forward_signer.is_some() {
                    "\n    re-signs   Standard Webhooks (forward_secret)"
                } else {
                    ""
                },
            ));
            if let Some(f) = &d.events {
                s.push_str(&format!(
                    "    events     {} (others: not sent here)\n",
                    f.patterns().join(", ")
                ));
            }
            if queue {
                s.push_str(&format!("    pacing     {}\n", pacing(d)));
                s.push_str(&ordering(d, "    "));
            }
        }
    }
    s
}

/// The key a route deduplicates on, for `hookgate check`.
fn event_key(r: &config::Route) -> String {
    r.verifier.key_description(&r.event_id)
}

/// A queue destination's limits and retry schedule, for `hookgate check`.
fn pacing(d: &config::Destination) -> String {
    let rate = d.rate_limit.map_or(String::new(), |l| {
        let unit = if l.window.as_secs() >= 60 { "m" } else { "s" };
        format!("; rate limit {}/{unit}", l.count)
    });
    format!(
        "concurrency {}{rate}; retry {} attempts, {} doubling to {}, for at most {}",
        d.concurrency,
        d.retry.max_attempts,
        short_duration(d.retry.initial),
        short_duration(d.retry.max_delay),
        short_duration(d.retry.max_age),
    )
}

/// A destination's per-key order, for `hookgate check`.
fn ordering(d: &config::Destination, indent: &str) -> String {
    match &d.order_by {
        None => String::new(),
        Some(key) => format!(
            "{indent}order by   {key}, one at a time per key (on_dead {})\n",
            match d.on_dead {
                crate::queue::OnDead::Skip => "skip",
                crate::queue::OnDead::Block => "block",
            }
        ),
    }
}

/// A destination's kind (the key that names it) and where it is, credentials
/// redacted, with its timeout.
fn target_line(d: &config::Destination) -> (&'static str, String) {
    let kind = match d.target.kind() {
        "http" => "upstream",
        other => other,
    };
    let shown = format!(
        "{} (timeout {})",
        d.target.shown(),
        short_duration(d.upstream_timeout)
    );
    (kind, shown)
}
