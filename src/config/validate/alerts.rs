//! `[[alerts]]`, and a route's `silence` and `refusals`.

use std::time::Duration;

use toml::Spanned;

use super::Validator;
use crate::config::alerts::{
    AlertFormat, AlertTarget, IncidentKind, REFUSAL_OUTCOMES, RefusalRule,
};
use crate::config::raw::{RawAlert, RawRefusals, is_absent};

/// The longest `refusals.within`: the counts are kept for an hour.
pub(crate) const MAX_WITHIN: Duration = Duration::from_secs(3600);

impl Validator<'_> {
    /// Every `[[alerts]]` section.
    pub(super) fn alerts(&mut self, raw: Vec<Spanned<RawAlert>>) -> Vec<AlertTarget> {
        let mut out: Vec<AlertTarget> = Vec::new();
        for (i, a) in raw.into_iter().enumerate() {
            let at = a.span();
            let a = a.into_inner();
            let k = |field: &str| format!("alerts[{i}].{field}");
            let name = match &a.name {
                None => format!("alerts-{i}"),
                Some(n) => {
                    let v = n.get_ref();
                    if v.is_empty()
                        || !v
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                    {
                        self.err(
                            n,
                            &k("name"),
                            format_args!("{v:?}: use letters, digits, '-', '_' and '.'"),
                        );
                    }
                    v.clone()
                }
            };
            if out.iter().any(|o| o.name == name) {
                let line = self.line(at.clone());
                self.err_at(
                    line,
                    &k("name"),
                    format_args!("{name:?} names another [[alerts]]"),
                );
            }
            let to = if is_absent(&a.to) {
                let line = self.line(at.clone());
                self.err_at(line, &k("to"), "missing: the URL notifications are sent to");
                None
            } else {
                match reqwest::Url::parse(a.to.get_ref()) {
                    Ok(u) if matches!(u.scheme(), "http" | "https") => Some(u),
                    _ => {
                        self.err(&a.to, &k("to"), "must be an http:// or https:// URL");
                        None
                    }
                }
            };
            let format = match a.format.as_ref().map(|f| (f, f.get_ref().as_str())) {
                None | Some((_, "slack")) => AlertFormat::Slack,
                Some((_, "json")) => AlertFormat::Json,
                Some((f, other)) => {
                    self.err(
                        f,
                        &k("format"),
                        format_args!("{other:?}: use \"slack\" or \"json\""),
                    );
                    AlertFormat::Slack
                }
            };
            let signer = a
                .secret
                .as_ref()
                .and_then(|s| self.forward_signer(s, &k("secret")));
            let on = match &a.on {
                None => IncidentKind::ALL.to_vec(),
                Some(list) => {
                    let mut kinds = Vec::new();
                    for name in list.get_ref() {
                        match IncidentKind::parse(name) {
                            Some(kind) => kinds.push(kind),
                            None => self.err(
                                list,
                                &k("on"),
                                format_args!(
                                    "{name:?}: use {}",
                                    IncidentKind::ALL.map(IncidentKind::as_str).join(", ")
                                ),
                            ),
                        }
                    }
                    if list.get_ref().is_empty() {
                        self.err(
                            list,
                            &k("on"),
                            "name at least one kind (or leave it out: every kind)",
                        );
                    }
                    kinds
                }
            };
            if let Some(to) = to {
                out.push(AlertTarget {
                    name,
                    to,
                    format,
                    signer,
                    on,
                });
            }
        }
        out
    }

    /// A route's `refusals = { outcome, over, within }`.
    pub(super) fn refusals(
        &mut self,
        raw: &Option<Spanned<RawRefusals>>,
        k: &dyn Fn(&str) -> String,
    ) -> Option<RefusalRule> {
        let raw = raw.as_ref()?.get_ref();
        let outcome = raw.outcome.get_ref();
        if !REFUSAL_OUTCOMES.contains(&outcome.as_str()) {
            self.err(
                &raw.outcome,
                &k("refusals.outcome"),
                format_args!("{outcome:?}: use one of {}", REFUSAL_OUTCOMES.join(", ")),
            );
        }
        let over = self.count(&Some(raw.over.clone()), &k("refusals.over"), 1, 1);
        let within = self.duration(&Some(raw.within.clone()), &k("refusals.within"), MAX_WITHIN);
        if within > MAX_WITHIN || within < Duration::from_secs(10) {
            self.err(&raw.within, &k("refusals.within"), "from 10s to 1h");
        }
        Some(RefusalRule {
            outcome: outcome.clone(),
            over: u64::try_from(over).unwrap_or(u64::MAX),
            within: within.clamp(Duration::from_secs(10), MAX_WITHIN),
        })
    }
}
