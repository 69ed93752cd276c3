//! `hookgate replay`: send replay files to a gateway and report each outcome.

use std::path::PathBuf;

use anyhow::bail;

use crate::replay::{Replay, Verdict};
use crate::state::Clock;

use super::text::printable;

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Replay files, or directories of them.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Where to send: the gateway's base URL (http://127.0.0.1:8080), to which each
    /// file's recorded path is appended, or a route's URL
    /// (http://127.0.0.1:8080/webhooks/github), used for every file.
    #[arg(long)]
    target: String,
    /// Re-sign each delivery with a fresh timestamp: `SECRET` for every file, or
    /// `ROUTE=SECRET` for the files captured on that route (repeat it for a folder
    /// that mixes providers). A `whsk_` private key for Ed25519 providers (discord,
    /// standard_webhooks v1a).
    #[arg(long, value_name = "[ROUTE=]SECRET")]
    resign: Vec<String>,
    /// Re-sign each delivery as its route in this config file does (its provider,
    /// options and first secret); `--resign ROUTE=SECRET` overrides a route.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The provider to re-sign as with --resign (default: the one the file names).
    #[arg(long)]
    provider: Option<String>,
    /// The public URL to sign against, for URL-signing providers.
    #[arg(long)]
    public_url: Option<String>,
    /// Send each delivery this many times.
    #[arg(long, default_value_t = 1)]
    copies: usize,
    /// How many copies are in flight at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Fail (exit 1) unless every delivery ends like this: forwarded, queued,
    /// filtered, duplicate, in_flight, handshake, rejected or error. With --copies N,
    /// `forwarded` means one copy forwarded and the rest duplicates or in flight.
    /// `first`: the first file of each event is forwarded, queued or filtered, and
    /// the later ones (the provider's own copies, in captures) are duplicates.
    #[arg(long, value_parser = parse_expect, value_name = "VERDICT|first")]
    expect: Option<Expect>,
    /// One JSON object per line, then a summary object.
    #[arg(long)]
    json: bool,
}

pub(super) async fn run(args: ReplayArgs) -> anyhow::Result<i32> {
    let ReplayArgs {
        inputs,
        target,
        resign,
        config,
        provider,
        public_url,
        copies,
        concurrency,
        expect,
        json,
    } = args;
    if resign.is_empty() && config.is_none() && (provider.is_some() || public_url.is_some()) {
        bail!("--provider and --public-url re-sign: give --resign too");
    }
    let config = match &config {
        Some(path) => Some(crate::config::load(path).map_err(|e| anyhow::anyhow!("{e}"))?),
        None => None,
    };
    let opts = ReplayOpts {
        target,
        resign,
        config,
        provider,
        public_url,
        copies: copies.max(1),
        concurrency: concurrency.max(1),
        expect,
        json,
    };
    replay_files(&inputs, &opts).await
}

/// What `--expect` asks of each file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Every file ends so.
    Each(Verdict),
    /// Each event's first file is taken, its later files are copies.
    First,
}

fn parse_expect(s: &str) -> Result<Expect, String> {
    if s == "first" {
        return Ok(Expect::First);
    }
    <Verdict as clap::ValueEnum>::from_str(s, true)
        .map(Expect::Each)
        .map_err(|_| {
            format!("{s:?}: forwarded, queued, filtered, duplicate, in_flight, handshake, rejected, error or first")
        })
}

/// The options of `hookgate replay`.
#[derive(Debug)]
struct ReplayOpts {
    target: String,
    resign: Vec<String>,
    config: Option<crate::config::Config>,
    provider: Option<String>,
    public_url: Option<String>,
    copies: usize,
    concurrency: usize,
    expect: Option<Expect>,
    json: bool,
}

/// How one file is re-signed.
enum Resign<'a> {
    No,
    Secret(&'a str),
    Route(&'a crate::config::Route),
}

impl ReplayOpts {
    /// `--resign` values: `(Some(route), secret)` for `ROUTE=SECRET`, where ROUTE is a
    /// route some file was captured on or the config names (a secret may hold `=`
    /// itself), `(None, secret)` otherwise.
    fn resign_values<'a>(
        &'a self,
        files: &[Replay],
    ) -> anyhow::Result<Vec<(Option<&'a str>, &'a str)>> {
        let is_route = |name: &str| {
            files.iter().any(|f| f.route.as_deref() == Some(name))
                || self
                    .config
                    .as_ref()
                    .is_some_and(|c| c.route(name).is_some())
        };
        let values: Vec<(Option<&str>, &str)> = self
            .resign
            .iter()
            .map(|v| match v.split_once('=') {
                Some((route, secret)) if is_route(route) => (Some(route), secret),
                _ => (None, v.as_str()),
            })
            .collect();
        if values.iter().filter(|(r, _)| r.is_none()).count() > 1 {
            bail!(
                "--resign: give one SECRET for every file, and ROUTE=SECRET for the others (ROUTE as the captures name it)"
            );
        }
        Ok(values)
    }

    /// How `file` is re-signed: its route's `--resign ROUTE=SECRET`, else the bare
    /// `--resign SECRET`, else its route in `--config`.
    fn resign_for<'a>(
        &'a self,
        values: &[(Option<&'a str>, &'a str)],
        file: &Replay,
    ) -> Result<Resign<'a>, String> {
        let route = file.route.as_deref();
        if let Some((_, secret)) = values.iter().find(|(r, _)| r.is_some() && *r == route) {
            return Ok(Resign::Secret(secret));
        }
        if let Some((_, secret)) = values.iter().find(|(r, _)| r.is_none()) {
            return Ok(Resign::Secret(secret));
        }
        let Some(cfg) = &self.config else {
            return Ok(Resign::No);
        };
        match route.and_then(|name| cfg.route(name)) {
            Some(r) => Ok(Resign::Route(r)),
            None => Err(match route {
                Some(name) => {
                    format!("its route {name:?} is not in the config: give --resign {name}=SECRET")
                }
                None => "it names no route: give --resign SECRET".to_owned(),
            }),
        }
    }
}

/// The event a file carries, as the gateway keys it: the route's event ID (the
/// config's, else its provider's default, else the body's digest).
fn event_key(file: &Replay, route: Option<&crate::config::Route>) -> String {
    use crate::provider::{EventIdSource, Preset};
    let source = route.map(|r| r.event_id.clone()).or_else(|| {
        file.provider
            .as_deref()
            .and_then(Preset::parse)
            .and_then(|p| p.default_event_id(None))
    });
    let mut headers = http::HeaderMap::new();
    for (n, v) in &file.headers {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::try_from(n.as_str()),
            http::HeaderValue::try_from(v.as_str()),
        ) {
            headers.append(n, v);
        }
    }
    let body = file.body_bytes();
    let id = source
        .and_then(|s| s.extract(&headers, &body))
        .or_else(|| EventIdSource::BodySha256.extract(&headers, &body))
        .map(|id| id.as_str().to_owned())
        .unwrap_or_default();
    format!("{}\n{id}", file.route.as_deref().unwrap_or(&file.path))
}

/// What happened to one file's delivery, over all its copies.
fn overall(verdicts: &[Verdict]) -> Verdict {
    let acked = |v: &Verdict| matches!(v, Verdict::Duplicate | Verdict::InFlight);
    // One copy forwarded (or queued), the rest duplicates or in flight.
    let first = [Verdict::Forwarded, Verdict::Queued]
        .into_iter()
        .find(|f| verdicts.iter().filter(|v| *v == f).count() == 1);
    if let Some(first) = first
        && verdicts.iter().all(|v| *v == first || acked(v))
    {
        first
    } else if verdicts.iter().all(|v| *v == Verdict::Duplicate) {
        Verdict::Duplicate
    } else if verdicts.iter().all(|v| *v == Verdict::Filtered) {
        Verdict::Filtered
    } else if verdicts.iter().all(|v| *v == Verdict::Rejected) {
        Verdict::Rejected
    } else if verdicts.iter().all(|v| *v == Verdict::Handshake) {
        Verdict::Handshake
    } else if verdicts.iter().all(acked) {
        Verdict::InFlight
    } else {
        Verdict::Error
    }
}

async fn replay_files(inputs: &[PathBuf], o: &ReplayOpts) -> anyhow::Result<i32> {
    use futures_util::stream::{self, StreamExt as _};
    let files = crate::replay::collect(inputs)?;
    if files.is_empty() {
        bail!("no replay files in {inputs:?}");
    }
    let client = crate::replay::client();
    let loaded = files
        .iter()
        .map(|f| Replay::load(f))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let resign_values = o.resign_values(&loaded)?;
    let mut seen = std::collections::HashSet::new();
    let mut totals: std::collections::BTreeMap<Verdict, usize> = std::collections::BTreeMap::new();
    let mut unexpected = 0;
    // A 404 means the target is not a route of the gateway: a mistake in --target, not
    // a verdict on the delivery, unless rejections are what the run expects.
    let mut not_found = 0;
    // Copies that could not be sent at all (no gateway there, no path to send to).
    let mut unsent = 0;
    for (file, mut r) in files.iter().zip(loaded) {
        let how = o
            .resign_for(&resign_values, &r)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        let route = match how {
            Resign::No => None,
            Resign::Secret(secret) => {
                crate::sign::resign(
                    &mut r,
                    o.provider.as_deref(),
                    secret,
                    Clock::System.now(),
                    o.public_url.as_deref(),
                )
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
                None
            }
            Resign::Route(route) => {
                crate::sign::resign_as_route(&mut r, route, Clock::System.now()).map_err(|e| {
                    anyhow::anyhow!("{}: route {}: {e}", file.display(), route.name)
                })?;
                Some(route)
            }
        };
        let route = route.or_else(|| {
            let cfg = o.config.as_ref()?;
            cfg.route(r.route.as_deref()?)
        });
        let first_of_its_event = seen.insert(event_key(&r, route));
        let sends = stream::iter(0..o.copies)
            .map(|_| r.send(&client, &o.target))
            .buffer_unordered(o.concurrency)
            .collect::<Vec<_>>()
            .await;
        let mut verdicts = Vec::new();
        for (i, sent) in sends.into_iter().enumerate() {
            let (url, status, verdict, meaning) = match sent {
                Ok(s) => (s.url.clone(), s.status, s.verdict(), s.meaning()),
                Err(e) => {
                    unsent += 1;
                    (String::new(), 0, Verdict::Error, format!("error: {e}"))
                }
            };
            if status == 404 {
                not_found += 1;
            }
            *totals.entry(verdict).or_default() += 1;
            verdicts.push(verdict);
            print_copy(
                file,
                i + 1,
                &r.method,
                &url,
                status,
                verdict,
                &meaning,
                o.json,
            );
        }
        let result = overall(&verdicts);
        let (met, wanted) = match o.expect {
            None => (true, String::new()),
            Some(Expect::Each(want)) => (result == want, want.to_string()),
            Some(Expect::First) if first_of_its_event => (
                matches!(
                    result,
                    Verdict::Forwarded | Verdict::Queued | Verdict::Filtered
                ),
                "forwarded, queued or filtered (the first of its event)".to_owned(),
            ),
            Some(Expect::First) => (
                matches!(result, Verdict::Duplicate | Verdict::InFlight),
                "duplicate (a later copy of an event already sent)".to_owned(),
            ),
        };
        if !met {
            unexpected += 1;
            if !o.json {
                println!(
                    "{}  UNEXPECTED: expected {wanted}, got {result}",
                    file.display()
                );
            }
        }
    }
    let summary: Vec<String> = totals.iter().map(|(v, n)| format!("{n} {v}")).collect();
    if o.json {
        println!(
            "{}",
            serde_json::json!({ "summary": totals.iter().map(|(v, n)| (v.as_str(), n)).collect::<std::collections::BTreeMap<_, _>>(), "files": files.len(), "unexpected": unexpected, "not_found": not_found })
        );
    } else {
        println!(
            "{} files, {} requests: {}; {unexpected} unexpected",
            files.len(),
            files.len() * o.copies,
            summary.join(", ")
        );
    }
    if unsent > 0 && o.expect != Some(Expect::Each(Verdict::Error)) {
        eprintln!("hookgate replay: {unsent} requests could not be sent");
        return Ok(1);
    }
    if not_found > 0 && o.expect != Some(Expect::Each(Verdict::Rejected)) {
        eprintln!(
            "hookgate replay: {not_found} requests answered 404: no route at that URL. Give --target the \
             gateway's base URL (http://host:port) for files that record their path, or a \
             route's URL (http://host:port/webhooks/<route>); --expect rejected accepts 404s"
        );
        return Ok(1);
    }
    Ok(if unexpected > 0 { 1 } else { 0 })
}

/// One copy's line: what was sent where, and what the gateway answered.
#[expect(clippy::too_many_arguments, reason = "one line's fields, each printed")]
fn print_copy(
    file: &std::path::Path,
    copy: usize,
    method: &str,
    url: &str,
    status: u16,
    verdict: Verdict,
    meaning: &str,
    json: bool,
) {
    if json {
        println!(
            "{}",
            serde_json::json!({ "file": file.display().to_string(), "copy": copy, "url": url, "status": status, "verdict": verdict, "meaning": meaning })
        );
    } else if url.is_empty() {
        println!("{}  copy {copy}: {}", file.display(), printable(meaning));
    } else {
        // The method, URL and answer come from the file and the target.
        println!(
            "{}  copy {copy}: {} {} → {status} {}",
            file.display(),
            printable(method),
            printable(url),
            printable(meaning)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_of_one_delivery_sum_up_to_what_the_first_got() {
        use Verdict::*;
        assert_eq!(overall(&[Forwarded, Duplicate, InFlight]), Forwarded);
        assert_eq!(overall(&[Duplicate, Queued, Duplicate]), Queued);
        assert_eq!(overall(&[Queued, Queued]), Error, "stored twice");
        assert_eq!(overall(&[Forwarded, Queued]), Error);
        assert_eq!(overall(&[Duplicate, Duplicate]), Duplicate);
        assert_eq!(overall(&[Filtered, Filtered]), Filtered);
    }
}
