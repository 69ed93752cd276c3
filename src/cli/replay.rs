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
    /// Re-sign each delivery for this test secret with a fresh timestamp (a
    /// `whsk_` private key for Ed25519 providers: discord, standard_webhooks v1a).
    #[arg(long)]
    resign: Option<String>,
    /// The provider to re-sign as (default: the one the file names).
    #[arg(long, requires = "resign")]
    provider: Option<String>,
    /// The public URL to sign against, for URL-signing providers.
    #[arg(long, requires = "resign")]
    public_url: Option<String>,
    /// Send each delivery this many times.
    #[arg(long, default_value_t = 1)]
    copies: usize,
    /// How many copies are in flight at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Fail (exit 1) unless every delivery ends like this. With --copies N,
    /// `forwarded` means one copy forwarded and the rest duplicates or in flight.
    #[arg(long, value_enum)]
    expect: Option<crate::replay::Verdict>,
    /// One JSON object per line, then a summary object.
    #[arg(long)]
    json: bool,
}

pub(super) async fn run(args: ReplayArgs) -> anyhow::Result<i32> {
    let ReplayArgs {
        inputs,
        target,
        resign,
        provider,
        public_url,
        copies,
        concurrency,
        expect,
        json,
    } = args;
    let opts = ReplayOpts {
        target,
        resign,
        provider,
        public_url,
        copies: copies.max(1),
        concurrency: concurrency.max(1),
        expect,
        json,
    };
    replay_files(&inputs, &opts).await
}

/// The options of `hookgate replay`.
#[derive(Debug)]
struct ReplayOpts {
    target: String,
    resign: Option<String>,
    provider: Option<String>,
    public_url: Option<String>,
    copies: usize,
    concurrency: usize,
    expect: Option<Verdict>,
    json: bool,
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
    let mut totals: std::collections::BTreeMap<Verdict, usize> = std::collections::BTreeMap::new();
    let mut unexpected = 0;
    // A 404 means the target is not a route of the gateway: a mistake in --target, not
    // a verdict on the delivery, unless rejections are what the run expects.
    let mut not_found = 0;
    // Copies that could not be sent at all (no gateway there, no path to send to).
    let mut unsent = 0;
    for file in &files {
        let mut r = Replay::load(file)?;
        if let Some(secret) = &o.resign {
            crate::sign::resign(
                &mut r,
                o.provider.as_deref(),
                secret,
                Clock::System.now(),
                o.public_url.as_deref(),
            )
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        }
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
        if let Some(want) = o.expect
            && result != want
        {
            unexpected += 1;
            if !o.json {
                println!(
                    "{}  UNEXPECTED: expected {want}, got {result}",
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
    if unsent > 0 && o.expect != Some(Verdict::Error) {
        eprintln!("hookgate replay: {unsent} requests could not be sent");
        return Ok(1);
    }
    if not_found > 0 && o.expect != Some(Verdict::Rejected) {
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
