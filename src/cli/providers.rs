//! `hookgate providers [NAME-OR-WORD]`: the presets as a terminal table, filtered by a
//! word; one preset in full with a route to paste; the nearest name for a typo.

use std::fmt::Write as _;

use crate::provider::catalogue::{Auth, Info};
use crate::provider::categories::{category, retries_poorly};
use crate::provider::{Credential, Preset};

#[derive(Debug, clap::Args)]
pub struct ProvidersArgs {
    /// A preset's name, or a word to look for (`challenge`, `ed25519`, `svix`).
    #[arg(value_name = "NAME-OR-WORD")]
    query: Option<String>,
    /// Print the whole catalogue as Markdown (`docs/providers.md`).
    #[arg(long, conflicts_with = "query")]
    markdown: bool,
}

/// `hookgate providers`: the exit code.
pub(super) fn run(args: ProvidersArgs) -> i32 {
    if args.markdown {
        print!("{}", crate::provider::catalogue::markdown_table());
        return 0;
    }
    let (out, found) = report(args.query.as_deref());
    if found {
        print!("{out}");
        0
    } else {
        eprint!("{out}");
        1
    }
}

/// What `hookgate providers` prints for `query`, and whether it found anything.
pub(crate) fn report(query: Option<&str>) -> (String, bool) {
    let Some(q) = query.map(str::trim).filter(|q| !q.is_empty()) else {
        return (table(Preset::all().map(Preset::info).collect()), true);
    };
    let wanted = q.to_ascii_lowercase();
    if let Some(p) = Preset::parse(&wanted) {
        return (details(&p.info()), true);
    }
    let found: Vec<Info> = Preset::all()
        .map(Preset::info)
        .filter(|i| matches(i, &wanted))
        .collect();
    if found.is_empty() {
        let mut s = format!("no provider preset matches {:?}", super::text::printable(q));
        if let Some(near) = Preset::nearest(&wanted) {
            let _ = write!(s, "; did you mean {near}?");
        }
        s.push_str(" (`hookgate providers` lists them all)\n");
        return (s, false);
    }
    (table(found), true)
}

/// Whether a word appears in a preset's name, category, scheme, headers, event ID,
/// event type or handshake (case-insensitive).
fn matches(i: &Info, word: &str) -> bool {
    let event_type = i.event_type.map(|t| t.to_string()).unwrap_or_default();
    [
        i.name,
        category(i.name),
        i.scheme,
        i.headers,
        &i.event_id.to_string(),
        &event_type,
        i.handshake,
    ]
    .iter()
    .any(|f| f.to_ascii_lowercase().contains(word))
}

/// Name, scheme, event ID and handshake, sorted by name, in aligned columns.
fn table(mut rows: Vec<Info>) -> String {
    rows.sort_by_key(|i| i.name);
    let cells: Vec<[String; 4]> = rows
        .iter()
        .map(|i| {
            [
                i.name.to_owned(),
                cut(i.scheme, 56),
                cut(&i.event_id.to_string(), 36),
                cut(i.handshake, 44),
            ]
        })
        .collect();
    let head = ["PROVIDER", "SCHEME", "EVENT ID", "HANDSHAKE"];
    let width = |c: usize| {
        cells
            .iter()
            .map(|r| r[c].chars().count())
            .chain([head[c].len()])
            .max()
            .unwrap_or(0)
    };
    let (w0, w1, w2) = (width(0), width(1), width(2));
    let mut s = String::new();
    let mut line = |r: [&str; 4]| {
        let row = format!("{:<w0$}  {:<w1$}  {:<w2$}  {}", r[0], r[1], r[2], r[3]);
        let _ = writeln!(s, "{}", row.trim_end());
    };
    line(head);
    for r in &cells {
        line([&r[0], &r[1], &r[2], &r[3]]);
    }
    let _ = writeln!(
        s,
        "{} preset(s); `hookgate providers NAME` shows one in full, with a route to paste",
        rows.len()
    );
    s
}

/// A cell of at most `max` characters: longer text is cut, with `…` (the preset's
/// own page, `hookgate providers NAME`, shows it whole).
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let head: String = text.chars().take(max - 1).collect();
    format!("{}…", head.trim_end())
}

/// The key a route of this preset deduplicates on: its event ID where the signature
/// covers it, else the digest of the signed bytes (as `hookgate check` says). Keys
/// the preset cannot be built without (PEM, JWKS) leave the source as the preset
/// names it.
fn event_key(i: &Info) -> String {
    let Some(p) = Preset::parse(i.name) else {
        return i.event_id.to_string();
    };
    let placeholder = [Credential::Text(crate::secret::Secret::new(
        b"whsec_cGxhY2Vob2xkZXItc2VjcmV0LWZvci1wcm92aWRlcnM=".to_vec(),
    ))];
    match p.verifier(&placeholder, None, p.default_tolerance(None)) {
        Ok(v) => v.key_description(&i.event_id),
        Err(_) => i.event_id.to_string(),
    }
}

/// One preset in full, and a `[[routes]]` entry that uses it.
fn details(i: &Info) -> String {
    let mut s = String::new();
    let none = |v: &str| {
        if v.is_empty() {
            "—".to_owned()
        } else {
            v.to_owned()
        }
    };
    let _ = writeln!(s, "provider   {} ({})", i.name, category(i.name));
    let _ = writeln!(
        s,
        "auth       {}",
        match i.auth {
            Auth::Signature => "signature (covers the body)",
            Auth::Token => "token (a shared value, not bound to the body; see docs/providers.md)",
        }
    );
    let _ = writeln!(s, "scheme     {}", i.scheme);
    let _ = writeln!(s, "headers    {}", none(i.headers));
    let _ = writeln!(s, "credential {}", i.credential);
    let _ = writeln!(s, "event id   {}", event_key(i));
    let _ = writeln!(
        s,
        "event type {}",
        i.event_type
            .map_or_else(|| "—".to_owned(), |t| t.to_string())
    );
    let _ = writeln!(
        s,
        "window     {}",
        i.tolerance.map_or_else(
            || "— (the provider signs no timestamp)".to_owned(),
            |t| format!("{t} s (the route's tolerance)")
        )
    );
    let _ = writeln!(s, "handshake  {}", i.handshake);
    let queue = retries_poorly(i.name);
    if let Some(why) = queue {
        let _ = writeln!(
            s,
            "delivery   queue suggested: {why}; a queue route keeps each event and retries it (docs/queue.md)"
        );
    }
    let var = i.name.to_ascii_uppercase();
    let secrets = match i
        .credential
        .strip_prefix("{ ")
        .and_then(|c| c.strip_suffix(" }"))
        .filter(|c| {
            c.split(", ")
                .all(|p| p.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        }) {
        Some(parts) => {
            let parts: Vec<String> = parts
                .split(", ")
                .map(|p| format!("{p} = \"${{{var}_{}}}\"", p.to_ascii_uppercase()))
                .collect();
            format!("secrets = [{{ {} }}]", parts.join(", "))
        }
        None if i.credential == "string" => format!("secrets = [\"${{{var}_SECRET}}\"]"),
        None => format!("secrets = [\"${{{var}_SECRET}}\"]   # {}", i.credential),
    };
    let _ = write!(
        s,
        "\n[[routes]]\nname = \"{n}\"\npath = \"/webhooks/{n}\"\nprovider = \"{n}\"\n{secrets}\n{delivery}upstream = \"http://127.0.0.1:3000/{n}\"\n",
        n = i.name,
        delivery = if queue.is_some() {
            "# delivery = \"queue\"           # suggested (above); needs a disk or Redis store\n"
        } else {
            ""
        }
    );
    if let Some(h) = i.auth_header {
        let h = if h == "authorization" {
            "Authorization"
        } else {
            h
        };
        let _ = writeln!(
            s,
            "# auth_header = \"{h}\"   # the header named on the provider's side (default {h})"
        );
    }
    if i.needs_public_url {
        let _ = writeln!(
            s,
            "public_url = \"https://hooks.example.com/webhooks/{}\"   # the URL the provider calls: it is signed",
            i.name
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::report;

    #[test]
    fn one_preset_shows_the_key_it_really_uses_and_suggests_a_queue_where_it_helps() {
        let (shopify, found) = report(Some("shopify"));
        assert!(found);
        assert!(
            shopify.contains(
                "event id   sig-<SHA-256 of the signed bytes>, not header:x-shopify-webhook-id"
            ),
            "{shopify}"
        );
        assert!(
            shopify.contains("delivery   queue suggested: Shopify"),
            "{shopify}"
        );
        assert!(shopify.contains("\n# delivery = \"queue\""), "{shopify}");
        let (stripe, _) = report(Some("stripe"));
        assert!(stripe.contains("event id   json:/id"), "{stripe}");
        assert!(!stripe.contains("queue suggested"), "{stripe}");
    }

    #[test]
    fn a_category_finds_its_providers() {
        let (out, found) = report(Some("payment"));
        assert!(found, "{out}");
        for name in ["stripe", "paddle", "adyen", "square"] {
            assert!(out.contains(&format!("\n{name} ")), "{name} in {out}");
        }
        assert!(!out.contains("\ngithub "), "{out}");
    }

    #[test]
    fn every_preset_has_a_category() {
        for name in crate::provider::Preset::NAMES {
            assert_ne!(
                crate::provider::categories::category(name),
                "other",
                "{name}"
            );
        }
    }

    #[test]
    fn a_word_filters_the_table_sorted_by_name() {
        let (out, found) = report(Some("challenge"));
        assert!(found);
        assert!(out.starts_with("PROVIDER"), "{out}");
        assert!(out.contains("slack") && !out.contains("\nstripe "), "{out}");
    }
}
