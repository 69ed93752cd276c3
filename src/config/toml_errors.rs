//! Turning what the TOML parser reports into this file's messages: where an unknown key
//! is written, and parse errors that never echo a value.

use std::ops::Range;

/// One step of the path to a key in the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum KeySegment {
    Key(String),
    Index(usize),
}

/// The path of a key serde ignored, without the markers of optional and spanned values.
pub(super) fn key_segments(path: &serde_ignored::Path<'_>) -> Vec<KeySegment> {
    use serde_ignored::Path as P;
    let mut out = match path {
        P::Root => return Vec::new(),
        P::Seq { parent, .. }
        | P::Map { parent, .. }
        | P::Some { parent }
        | P::NewtypeStruct { parent }
        | P::NewtypeVariant { parent } => key_segments(parent),
    };
    match path {
        P::Seq { index, .. } => out.push(KeySegment::Index(*index)),
        P::Map { key, .. } if !key.starts_with("$__serde_spanned") => {
            out.push(KeySegment::Key(key.clone()));
        }
        _ => {}
    }
    out
}

/// `routes[0].upstream_timout`, as the other messages name keys.
pub(super) fn key_name(segments: &[KeySegment]) -> String {
    let mut name = String::new();
    for s in segments {
        match s {
            KeySegment::Key(k) if name.is_empty() => name.push_str(k),
            KeySegment::Key(k) => {
                name.push('.');
                name.push_str(k);
            }
            KeySegment::Index(i) => name.push_str(&format!("[{i}]")),
        }
    }
    name
}

/// Where the last key of `segments` is written in the document.
pub(super) fn key_span(
    table: &toml::de::DeTable<'_>,
    segments: &[KeySegment],
) -> Option<Range<usize>> {
    use toml::de::DeValue;
    let (KeySegment::Key(first), rest) = segments.split_first()? else {
        return None;
    };
    let (key, value) = table
        .iter()
        .find(|(k, _)| k.get_ref().as_ref() == first.as_str())?;
    let mut value = value.get_ref();
    let mut span = key.span();
    let mut rest = rest;
    while let Some((segment, tail)) = rest.split_first() {
        match (segment, value) {
            (KeySegment::Index(i), DeValue::Array(items)) => {
                let item = items.get(*i)?;
                span = item.span();
                value = item.get_ref();
            }
            (KeySegment::Key(name), DeValue::Table(t)) => {
                let (k, v) = t
                    .iter()
                    .find(|(k, _)| k.get_ref().as_ref() == name.as_str())?;
                span = k.span();
                value = v.get_ref();
            }
            _ => return None,
        }
        rest = tail;
    }
    Some(span)
}

/// A TOML error as `file: TOML parse error at line L, column C: message`, never
/// echoing what was written.
///
/// The toml crate's own `Display` quotes the offending line and serde's "invalid
/// type" messages quote the value (`invalid type: string "whsec_…"`), so a secret
/// written with the wrong type, or on a line with a syntax error, would reach
/// `hookgate check`, the log and the `POST /reload` answer. The position and the
/// kind of value are enough to find the mistake.
pub(super) fn toml_error(file: &str, text: &str, e: &toml::de::Error) -> String {
    let message = redact_unexpected(e.message().trim_end());
    match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let before = &text.as_bytes()[..start];
            let line = 1 + before.iter().filter(|b| **b == b'\n').count();
            let column = 1 + before.iter().rev().take_while(|b| **b != b'\n').count();
            format!("{file}: TOML parse error at line {line}, column {column}: {message}")
        }
        None => format!("{file}: TOML parse error: {message}"),
    }
}

/// Drops the quoted value from serde's "invalid type/value" messages: `invalid type:
/// string "abc", expected a sequence` becomes `invalid type: string, expected a
/// sequence`. Other messages quote only key names and are kept.
pub(super) fn redact_unexpected(message: &str) -> String {
    if let Some(listed) = choices(message) {
        return listed;
    }
    // What the TOML deserializer says of an enum's key written as a number, a boolean
    // or a list: every choice in this file is a string.
    if message == "wanted string or table" {
        return "invalid type, expected a string".to_owned();
    }
    if !(message.starts_with("invalid type: ") || message.starts_with("invalid value: ")) {
        return message.to_owned();
    }
    // The expected part is the visitor's own text; the value sits before it.
    let (head, expected) = match message.rsplit_once(", expected ") {
        Some((h, e)) => (h, Some(e)),
        None => (message, None),
    };
    let kind = head
        .find(['`', '"', '\''])
        .map_or(head, |i| &head[..i])
        .trim_end();
    match expected {
        Some(e) => format!("{kind}, expected {e}"),
        None => kind.to_owned(),
    }
}

/// A value outside an enum's set, in this file's words: serde's "unknown variant
/// `later`, expected `sync` or `queue`" (or "expected one of `a`, `b`, `c`") becomes
/// `"later": use "sync" or "queue"` (`use "a", "b" or "c"`). `None` for any other
/// message.
pub(super) fn choices(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown variant `")?;
    let (value, expected) = rest.rsplit_once("`, expected ")?;
    let expected = expected.strip_prefix("one of ").unwrap_or(expected);
    let names: Vec<String> = expected
        .split(['`', ','])
        .map(str::trim)
        .filter(|n| !n.is_empty() && *n != "or")
        .map(|n| format!("{n:?}"))
        .collect();
    let listed = match names.split_last() {
        None => return None,
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    };
    Some(format!("{value:?}: use {listed}"))
}

/// The path of the innermost value written at byte `pos`: the key (or array element)
/// a serde error at that position is about. A table whose own span holds `pos` but
/// none of whose keys do (a missing field is reported at the table) is the answer
/// itself.
pub(super) fn path_at(table: &toml::de::DeTable<'_>, pos: usize) -> Option<Vec<KeySegment>> {
    for (k, v) in table.iter() {
        let here = k.span().contains(&pos) || v.span().contains(&pos);
        let inner = value_path_at(v.get_ref(), pos);
        if inner.is_some() || here {
            let mut path = vec![KeySegment::Key(k.get_ref().to_string())];
            path.extend(inner.unwrap_or_default());
            return Some(path);
        }
    }
    None
}

fn value_path_at(v: &toml::de::DeValue<'_>, pos: usize) -> Option<Vec<KeySegment>> {
    use toml::de::DeValue;
    match v {
        DeValue::Table(t) => path_at(t, pos),
        DeValue::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            let inner = value_path_at(item.get_ref(), pos);
            (inner.is_some() || item.span().contains(&pos)).then(|| {
                let mut path = vec![KeySegment::Index(i)];
                path.extend(inner.unwrap_or_default());
                path
            })
        }),
        _ => None,
    }
}

/// Removes the key `path` names (array indices lead to it; a path that ends in an
/// index removes the key holding that array). Whether a key was removed. The
/// top-level `routes` is never removed: every route would go with it.
pub(super) fn remove_key(table: &mut toml::de::DeTable<'_>, path: &[KeySegment]) -> bool {
    let end = match path.iter().rposition(|s| matches!(s, KeySegment::Key(_))) {
        Some(0) if path.len() > 1 && matches!(&path[0], KeySegment::Key(k) if k == "routes") => {
            return false;
        }
        Some(end) => end,
        None => return false,
    };
    remove_in_table(table, &path[..=end])
}

fn remove_in_table(table: &mut toml::de::DeTable<'_>, path: &[KeySegment]) -> bool {
    use toml::de::DeValue;
    let Some((KeySegment::Key(first), rest)) = path.split_first() else {
        return false;
    };
    if rest.is_empty() {
        let key = table
            .iter()
            .find(|(k, _)| k.get_ref().as_ref() == first.as_str())
            .map(|(k, _)| k.clone());
        return key.is_some_and(|k| table.remove(&k).is_some());
    }
    let Some((_, value)) = table
        .iter_mut()
        .find(|(k, _)| k.get_ref().as_ref() == first.as_str())
    else {
        return false;
    };
    let mut value = value.get_mut();
    let mut rest = rest;
    while let Some((KeySegment::Index(i), tail)) = rest.split_first() {
        match value {
            DeValue::Array(items) => match items.get_mut(*i) {
                Some(item) => value = item.get_mut(),
                None => return false,
            },
            _ => return false,
        }
        rest = tail;
    }
    match value {
        DeValue::Table(t) => remove_in_table(t, rest),
        _ => false,
    }
}
