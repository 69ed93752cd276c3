//! The plain-text log line, written faster than `tracing-subscriber`'s defaults and to
//! the same bytes.
//!
//! Every delivery logs one line at `info`, and the profile (callgrind, docs/performance.md)
//! put its formatting at about a tenth of the gateway's instructions per request: each
//! field went through `core::fmt` with a `Debug` escape per character and a plain
//! (colourless) `nu_ansi_term` style around its name, and the timestamp was worked out
//! from the calendar on every line. Here:
//!
//! - [`FastFields`] writes text and integer fields directly when their `Debug` form is
//!   the text itself in quotes (printable ASCII without `"` or `\`), or the number; any
//!   other value, the message, errors, and every field on a colour terminal go to
//!   `tracing-subscriber`'s own visitor, which defines the format.
//! - [`FastTime`] keeps the date and time of the current second per thread and writes
//!   only the microseconds anew.
//!
//! Hand-written because no crate offers a faster formatter for this exact format, and
//! the format is what operators' log pipelines parse: `tests` below renders events
//! through both and compares the bytes.

use std::cell::RefCell;
use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::FormatFields as _;
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};
use tracing_subscriber::fmt::time::FormatTime;

/// Field formatting for the plain-text line: [`tracing_subscriber::fmt::format::DefaultFields`]'s
/// output, with fast paths for text and integers.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FastFields;

impl<'a> MakeVisitor<Writer<'a>> for FastFields {
    type Visitor = FastVisitor<'a>;

    fn make_visitor(&self, target: Writer<'a>) -> Self::Visitor {
        FastVisitor {
            writer: target,
            is_empty: true,
            result: Ok(()),
        }
    }
}

/// Writes one event's or span's fields.
#[derive(Debug)]
pub(crate) struct FastVisitor<'a> {
    writer: Writer<'a>,
    is_empty: bool,
    result: fmt::Result,
}

/// Whether `Debug` of this text is the text itself between quotes.
fn plain(s: &str) -> bool {
    s.bytes()
        .all(|b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\')
}

impl FastVisitor<'_> {
    /// Whether the default visitor must write this field (a name it treats apart, or
    /// colour codes around names).
    fn special(&self, field: &Field) -> bool {
        let name = field.name();
        name == "message" || name.starts_with("r#") || self.writer.has_ansi_escapes()
    }

    /// The default visitor, writing after what is written so far.
    fn default_visitor(&mut self) -> DefaultVisitor<'_> {
        let empty = self.is_empty;
        // Whatever it writes, the fields are no longer empty after it.
        self.is_empty = false;
        DefaultVisitor::new(self.writer.by_ref(), empty)
    }

    fn pad_and_name(&mut self, field: &Field) -> fmt::Result {
        if self.is_empty {
            self.is_empty = false;
        } else {
            self.writer.write_char(' ')?;
        }
        self.writer.write_str(field.name())?;
        self.writer.write_char('=')
    }

    fn delegate(&mut self, field: &Field, f: impl FnOnce(&mut DefaultVisitor<'_>)) {
        // The default visitor skips `log.` fields (metadata of events from the `log`
        // crate) without a separating space: so does this one.
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        let mut v = self.default_visitor();
        f(&mut v);
        self.result = v.finish();
    }
}

impl Visit for FastVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        if self.special(field) || !plain(value) || field.name().starts_with("log.") {
            return self.delegate(field, |v| v.record_str(field, value));
        }
        self.result = self.pad_and_name(field).and_then(|()| {
            self.writer.write_char('"')?;
            self.writer.write_str(value)?;
            self.writer.write_char('"')
        });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.result.is_err() {
            return;
        }
        if self.special(field) || field.name().starts_with("log.") {
            return self.delegate(field, |v| v.record_u64(field, value));
        }
        self.result = self
            .pad_and_name(field)
            .and_then(|()| self.writer.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.result.is_err() {
            return;
        }
        if self.special(field) || field.name().starts_with("log.") {
            return self.delegate(field, |v| v.record_i64(field, value));
        }
        self.result = self
            .pad_and_name(field)
            .and_then(|()| self.writer.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.result.is_err() {
            return;
        }
        if self.special(field) || field.name().starts_with("log.") {
            return self.delegate(field, |v| v.record_bool(field, value));
        }
        self.result = self
            .pad_and_name(field)
            .and_then(|()| self.writer.write_str(if value { "true" } else { "false" }));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.delegate(field, |v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.delegate(field, |v| v.record_debug(field, value));
    }
}

impl VisitOutput<fmt::Result> for FastVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for FastVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
    }
}

/// The whole plain-text line: [`tracing_subscriber`]'s `Full` format (timestamp, level,
/// spans with their fields, target, the event's fields), written without the colourless
/// styles it wraps every part in. On a colour terminal, and for records of the `log`
/// crate (whose metadata the default normalises), the default format writes the line.
#[derive(Debug)]
pub(crate) struct FastEvent {
    default:
        tracing_subscriber::fmt::format::Format<tracing_subscriber::fmt::format::Full, FastTime>,
}

impl Default for FastEvent {
    fn default() -> Self {
        Self {
            default: tracing_subscriber::fmt::format().with_timer(FastTime),
        }
    }
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for FastEvent
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        if writer.has_ansi_escapes() || meta.fields().field("log.target").is_some() {
            return self.default.format_event(ctx, writer, event);
        }
        // As the default: a time it cannot write is `<unknown time>`, not a lost line.
        if FastTime.format_time(&mut writer).is_err() {
            writer.write_str("<unknown time>")?;
        }
        writer.write_str(match *meta.level() {
            tracing::Level::TRACE => " TRACE ",
            tracing::Level::DEBUG => " DEBUG ",
            tracing::Level::INFO => "  INFO ",
            tracing::Level::WARN => "  WARN ",
            tracing::Level::ERROR => " ERROR ",
        })?;
        if let Some(scope) = ctx.event_scope() {
            let mut seen = false;
            for span in scope.from_root() {
                writer.write_str(span.metadata().name())?;
                seen = true;
                let ext = span.extensions();
                if let Some(fields) = ext.get::<tracing_subscriber::fmt::FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    writer.write_char('{')?;
                    writer.write_str(fields)?;
                    writer.write_char('}')?;
                }
                writer.write_char(':')?;
            }
            if seen {
                writer.write_char(' ')?;
            }
        }
        writer.write_str(meta.target())?;
        writer.write_str(": ")?;
        ctx.format_fields(writer.by_ref(), event)?;
        writer.write_char('\n')
    }
}

/// The timestamp `2026-12-01T04:58:31.742469Z` (UTC, microseconds), as
/// [`tracing_subscriber::fmt::time::SystemTime`] writes it.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FastTime;

thread_local! {
    /// The second last formatted on this thread: its Unix time and its text up to the
    /// seconds (`2026-12-01T04:58:31`).
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

impl FastTime {
    /// Writes the time `t`.
    pub(crate) fn write(t: std::time::SystemTime, w: &mut impl fmt::Write) -> fmt::Result {
        let since = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| fmt::Error)?;
        let secs = since.as_secs();
        SECOND.with(|cell| {
            let mut second = cell.borrow_mut();
            if second.0 != secs {
                use std::fmt::Write as _;
                let whole = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
                let mut text = String::with_capacity(20);
                // Past the year 9999 it cannot: the caller writes the default's text.
                write!(text, "{}", humantime::format_rfc3339_seconds(whole))?;
                text.pop();
                second.1 = text;
                second.0 = secs;
            }
            w.write_str(&second.1)
        })?;
        let micros = since.subsec_micros();
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(micros);
        w.write_char('.')?;
        for _ in digits.len()..6 {
            w.write_char('0')?;
        }
        w.write_str(digits)?;
        w.write_char('Z')
    }
}

impl FormatTime for FastTime {
    /// A clock before 1970 or past 9999 is written by the default timer. (`write` fails
    /// for those before it writes anything.)
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        Self::write(crate::time::now(), w)
            .or_else(|_| tracing_subscriber::fmt::time::SystemTime.format_time(w))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Collects what a subscriber writes.
    #[derive(Clone, Default)]
    struct Out(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Out {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(b);
            Ok(b.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Out {
        type Writer = Out;

        fn make_writer(&'a self) -> Out {
            self.clone()
        }
    }

    impl Out {
        fn text(&self) -> String {
            String::from_utf8_lossy(
                &self
                    .0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            )
            .into_owned()
        }
    }

    #[derive(Debug)]
    struct Oops;

    impl fmt::Display for Oops {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("it broke")
        }
    }

    impl std::error::Error for Oops {}

    /// Logs a mix of events inside a span: every kind of value, plain and not.
    fn log_all() {
        tracing::info!(listen = "127.0.0.1:8080", "outside any span");
        let span = tracing::info_span!("delivery", trace_id = %"0af7651916cd43dd8448eb211c80319c");
        let _in = span.enter();
        {
            let inner = tracing::info_span!("settle");
            let _inner = inner.enter();
            tracing::debug!(key = "k", "nested, no fields on the inner span");
            tracing::info!(key = "k", "nested, no fields on the inner span");
        }
        tracing::info!(
            route = "stripe",
            event_id = "evt_1",
            event_type = "invoice.paid",
            outcome = "forwarded",
            status = 200u16,
            elapsed_us = 1234u64,
            secret = %0,
            detail = "",
            "delivery"
        );
        tracing::warn!(
            route = "a \"quoted\" name",
            detail = "tab\there, back\\slash, é, \u{1b}[31m",
            negative = -5i64,
            flag = true,
            r#type = "raw",
            error = &Oops as &(dyn std::error::Error + 'static),
            debug = ?vec![1, 2],
            "queue: attempt failed; will retry"
        );
        tracing::error!("no fields, message {} and {:?}", 7, "x");
        tracing::info!(only = 1u64);
    }

    /// Strips the timestamp (the first field of each line).
    fn without_time(text: &str) -> Vec<String> {
        text.lines()
            .map(|l| l.split_once(' ').map_or(l, |(_, rest)| rest).to_owned())
            .collect()
    }

    #[test]
    fn the_fast_line_is_byte_for_byte_the_default_one() {
        let default = Out::default();
        let fast = Out::default();
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(default.clone())
            .finish();
        tracing::subscriber::with_default(sub, log_all);
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .fmt_fields(FastFields)
            .event_format(FastEvent::default())
            .with_writer(fast.clone())
            .finish();
        tracing::subscriber::with_default(sub, log_all);
        let (d, f) = (default.text(), fast.text());
        assert_eq!(
            without_time(&d),
            without_time(&f),
            "default:\n{d}\nfast:\n{f}"
        );
        // The timestamps have one shape: `2026-12-01T04:58:31.742469Z`.
        let shape = |line: &str| -> String {
            line.split(' ')
                .next()
                .unwrap_or("")
                .chars()
                .map(|c| if c.is_ascii_digit() { '9' } else { c })
                .collect()
        };
        for (a, b) in d.lines().zip(f.lines()) {
            assert_eq!(shape(a), "9999-99-99T99:99:99.999999Z");
            assert_eq!(shape(a), shape(b));
        }
        assert!(f.contains("route=\"stripe\" event_id=\"evt_1\""), "{f}");
        // On a colour terminal the default visitor writes every field.
        let coloured = Out::default();
        let sub = tracing_subscriber::fmt()
            .with_ansi(true)
            .fmt_fields(FastFields)
            .event_format(FastEvent::default())
            .with_writer(coloured.clone())
            .finish();
        tracing::subscriber::with_default(sub, log_all);
        let plain_default = Out::default();
        let sub = tracing_subscriber::fmt()
            .with_ansi(true)
            .with_writer(plain_default.clone())
            .finish();
        tracing::subscriber::with_default(sub, log_all);
        assert_eq!(
            without_time(&coloured.text()),
            without_time(&plain_default.text())
        );
    }

    #[test]
    fn a_time_it_cannot_write_fails_before_writing() {
        for t in [
            std::time::UNIX_EPOCH - std::time::Duration::from_secs(1),
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(253_402_300_800),
        ] {
            let mut out = String::new();
            assert!(FastTime::write(t, &mut out).is_err());
            assert!(out.is_empty(), "{out}");
        }
    }

    #[test]
    fn the_timestamp_is_the_default_one() {
        for t in [
            std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_764_565_111_000_042),
            std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_764_565_111_999_999),
            std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_764_565_112_100_000),
            std::time::SystemTime::now(),
        ] {
            let mut fast = String::new();
            FastTime::write(t, &mut fast).expect("write");
            assert_eq!(fast, humantime::format_rfc3339_micros(t).to_string());
        }
    }
}
