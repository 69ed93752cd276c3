//! Text from outside the gateway's operator, made safe to print on a terminal.
//!
//! Event IDs, order keys, event types, error texts and header names come from
//! providers' requests (and through the admin listener's answers); a body can carry
//! terminal escape sequences that would recolour, retitle or rewrite the operator's
//! screen. Everything the command line prints from such data goes through
//! [`printable`].

use std::borrow::Cow;

/// Whether a character may control a terminal or reorder what it shows: C0 and C1
/// controls (ESC, CSI, BEL, carriage return, …), DEL, and the Unicode bidirectional
/// overrides and isolates.
fn unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every control character written as `\u001b` (JSON's spelling, so JSON
/// text stays valid JSON). Nothing is changed in text without one.
pub(crate) fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// An event ID as `events list` shows it: whole up to 16 characters, else its first
/// 12 and `…` (`sig-d592421c…`). `events show|retry|purge` accept any unique prefix.
pub(crate) fn short_id(id: &str) -> String {
    let id = printable(id);
    if id.chars().count() <= 16 {
        return id.into_owned();
    }
    let head: String = id.chars().take(12).collect();
    format!("{head}…")
}

/// The message of an admin listener's JSON error answer (`{"error":"…"}`), else the
/// text itself; printable either way.
pub(crate) fn admin_error(body: &str) -> String {
    let message = serde_json::from_str::<crate::admin::api::ErrorBody>(body)
        .ok()
        .map(|e| e.error);
    match message {
        Some(m) => printable(&m).into_owned(),
        None => printable(body.trim()).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_written_out_not_sent_to_the_terminal() {
        assert_eq!(printable("k\u{1b}]0;pwned\u{7}"), "k\\u001b]0;pwned\\u0007");
        assert_eq!(printable("a\u{9b}31m\r\n"), "a\\u009b31m\\u000d\\u000a");
        assert_eq!(printable("\u{202e}gpj.exe"), "\\u202egpj.exe");
        assert!(matches!(printable("evt_1 ünïcode"), Cow::Borrowed(_)));
    }

    #[test]
    fn long_ids_are_shortened_with_an_ellipsis() {
        assert_eq!(short_id("evt_walk_1"), "evt_walk_1");
        assert_eq!(
            short_id("sig-d592421c0123456789abcdef0123456789abcdef"),
            "sig-d592421c…"
        );
    }

    #[test]
    fn admin_errors_print_their_message() {
        assert_eq!(
            admin_error(r#"{"error":"no such event on this route","event_id":"x"}"#),
            "no such event on this route"
        );
        assert_eq!(admin_error("bad gateway\n"), "bad gateway");
    }
}
