//! The inbox table's name, and every statement built from it.
//!
//! A name is checked once, here, and every statement quotes it, so no statement can be
//! built from a name that would change its meaning. The statements live side by side
//! because they are one contract: the gateway's insert, the handler's "next event"
//! query and the mark that ends it read and write the same columns and indexes.

use std::fmt;

/// The longest name PostgreSQL keeps whole (`NAMEDATALEN - 1`); a longer one is cut.
///
/// The whole name (with its schema) is also the `NOTIFY` channel, which has this limit
/// too, so the limit holds for the name as written.
const MAX_NAME: usize = 63;

/// The longest suffix [`TableName::schema`] appends to the table's own name to name an
/// index; the table's own name must leave room for it, or two indexes' names would be
/// cut to the same identifier and the second `CREATE INDEX IF NOT EXISTS` skipped.
const LONGEST_INDEX_SUFFIX: &str = "_pending_key";

/// The default name, used by the gateway when a destination names no `table`.
pub const DEFAULT_TABLE: &str = "hookgate_inbox";

/// A valid inbox table name: `table` or `schema.table`, each part a plain lowercase SQL
/// identifier (`[a-z_][a-z0-9_]*`).
///
/// Uppercase is refused rather than quoted: a quoted `"Inbox"` is a different table
/// from the `inbox` that an unquoted `Inbox` in a handler's own SQL means.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    /// As written: `hookgate_inbox` or `ledger.hookgate_inbox`. Also the channel name.
    name: String,
    /// The table's own name, without its schema: index names start with it.
    table: String,
    /// Each part in double quotes, for statements.
    quoted: String,
}

impl TableName {
    /// Checks a name.
    ///
    /// # Errors
    ///
    /// A [`TableNameError`] that names the table and what is wrong with it.
    pub fn parse(name: &str) -> Result<Self, TableNameError> {
        let error = |reason: String| TableNameError {
            name: name.to_owned(),
            reason,
        };
        if name.len() > MAX_NAME {
            return Err(error(format!(
                "longer than {MAX_NAME} bytes (PostgreSQL's limit for a name and a NOTIFY channel)"
            )));
        }
        let parts: Vec<&str> = name.split('.').collect();
        if parts.len() > 2 {
            return Err(error("use `table` or `schema.table`".to_owned()));
        }
        for part in &parts {
            check_identifier(part).map_err(error)?;
        }
        let table = parts[parts.len() - 1];
        let room = MAX_NAME - LONGEST_INDEX_SUFFIX.len();
        if table.len() > room {
            return Err(error(format!(
                "the table's own name is longer than {room} bytes, which its index names need"
            )));
        }
        let quoted = parts
            .iter()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(".");
        Ok(Self {
            name: name.to_owned(),
            table: table.to_owned(),
            quoted,
        })
    }

    /// The name as written, e.g. `ledger.hookgate_inbox`.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The name for SQL, each part in double quotes: `"ledger"."hookgate_inbox"`.
    #[must_use]
    pub fn quoted(&self) -> &str {
        &self.quoted
    }

    /// The `LISTEN`/`NOTIFY` channel: the name as written (`ledger.hookgate_inbox` is
    /// one channel, not a schema and a table). Give it to `pg_notify` as text, or
    /// double-quote it whole for `NOTIFY`/`LISTEN`.
    #[must_use]
    pub fn channel(&self) -> &str {
        &self.name
    }

    /// The migration: the table and the two indexes the handler's queries use. Every
    /// statement is `IF NOT EXISTS`, so running it again changes nothing. A schema in
    /// the name must exist already.
    #[must_use]
    pub fn schema(&self) -> String {
        let t = &self.quoted;
        let pending = format!("\"{}_pending\"", self.table);
        let pending_key = format!("\"{}{LONGEST_INDEX_SUFFIX}\"", self.table);
        format!(
            "-- hookgate's inbox: one row per event, written by the gateway's postgres destination.
CREATE TABLE IF NOT EXISTS {t} (
    id           bigserial   PRIMARY KEY,  -- acceptance order
    route        text        NOT NULL,
    event_id     text        NOT NULL,
    event_type   text,                     -- null when the provider gives none
    order_key    text,                     -- null when the destination has no order_by
    provider     text        NOT NULL,
    received_at  timestamptz NOT NULL,
    headers      jsonb       NOT NULL,     -- header name -> value, as hookgate forwards them
    body         bytea       NOT NULL,     -- the bytes that came
    processed_at timestamptz,              -- null until the handler has applied the event
    UNIQUE (route, event_id)
);
-- The handler's next event: the oldest unprocessed rows.
CREATE INDEX IF NOT EXISTS {pending} ON {t} (id) WHERE processed_at IS NULL;
-- \"Is an older event of this key still unprocessed?\"
CREATE INDEX IF NOT EXISTS {pending_key} ON {t} (route, order_key, id) WHERE processed_at IS NULL;
"
        )
    }

    /// The gateway's insert. Parameters, in order: `route` (text), `event_id` (text),
    /// `event_type` (text or null), `order_key` (text or null), `provider` (text),
    /// `received_at` (timestamptz), `headers` (jsonb), `body` (bytea). Returns the new
    /// row's `id`, or no row when the event is there already (which is success).
    #[must_use]
    pub fn insert_statement(&self) -> String {
        format!(
            "INSERT INTO {} (route, event_id, event_type, order_key, provider, received_at, headers, body) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (route, event_id) DO NOTHING \
             RETURNING id",
            self.quoted
        )
    }

    /// The wake-up the gateway sends in the insert's transaction (delivered when it
    /// commits): parameters the channel ([`TableName::channel`]) and the route.
    #[must_use]
    pub fn notify_statement(&self) -> &'static str {
        "SELECT pg_notify($1, $2)"
    }

    /// The handler's `LISTEN` for the gateway's wake-ups.
    #[must_use]
    pub fn listen_statement(&self) -> String {
        format!("LISTEN \"{}\"", self.name)
    }

    /// The handler's "next event" query; see [`crate::Inbox`] for why it is safe with
    /// several handler processes. `$1` is a `bigint[]` of ids to pass over (the events
    /// resting after a failure in this process; empty for none).
    #[must_use]
    pub fn next_statement(&self) -> String {
        let t = &self.quoted;
        format!(
            "SELECT e.id, e.route, e.event_id, e.event_type, e.order_key, e.provider, \
                    e.received_at, e.headers, e.body \
               FROM {t} AS e \
              WHERE e.processed_at IS NULL \
                AND e.id <> ALL ($1::bigint[]) \
                AND (e.order_key IS NULL OR NOT EXISTS ( \
                      SELECT 1 FROM {t} AS o \
                       WHERE o.route = e.route AND o.order_key = e.order_key \
                         AND o.processed_at IS NULL AND o.id < e.id)) \
              ORDER BY e.id \
              LIMIT 1 \
                FOR UPDATE OF e SKIP LOCKED"
        )
    }

    /// The mark that ends an event, in its transaction: parameter the row's `id`.
    #[must_use]
    pub fn done_statement(&self) -> String {
        format!(
            "UPDATE {} SET processed_at = now() WHERE id = $1",
            self.quoted
        )
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl fmt::Debug for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TableName({})", self.name)
    }
}

impl std::str::FromStr for TableName {
    type Err = TableNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

fn check_identifier(part: &str) -> Result<(), String> {
    let mut chars = part.chars();
    match chars.next() {
        None => return Err("a part of the name is empty".to_owned()),
        Some(c) if c.is_ascii_lowercase() || c == '_' => {}
        Some(c) => {
            return Err(format!(
                "`{part}` starts with {c:?}: a name starts with a lowercase letter or `_`"
            ));
        }
    }
    match chars.find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')) {
        None => Ok(()),
        Some(c) => Err(format!(
            "`{part}` has {c:?}: use lowercase letters, digits and `_`"
        )),
    }
}

/// The migration SQL for an inbox table named `table` (`table` or `schema.table`):
/// what `hookgate inbox schema --table NAME` prints.
///
/// # Errors
///
/// The name is not a plain lowercase SQL identifier, optionally schema-qualified.
pub fn schema(table: &str) -> Result<String, TableNameError> {
    Ok(TableName::parse(table)?.schema())
}

/// An inbox table name that is not `table` or `schema.table` of plain lowercase SQL
/// identifiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableNameError {
    name: String,
    reason: String,
}

impl fmt::Display for TableNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "inbox table {:?}: {}", self.name, self.reason)
    }
}

impl std::error::Error for TableNameError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_schema_qualified_names_are_quoted_part_by_part() {
        let t = TableName::parse("hookgate_inbox").unwrap();
        assert_eq!(t.quoted(), "\"hookgate_inbox\"");
        assert_eq!(t.channel(), "hookgate_inbox");
        let t = TableName::parse("ledger.inbox_2").unwrap();
        assert_eq!(t.quoted(), "\"ledger\".\"inbox_2\"");
        assert_eq!(t.channel(), "ledger.inbox_2");
        assert_eq!(t.listen_statement(), "LISTEN \"ledger.inbox_2\"");
        assert!(
            t.schema()
                .contains("\"inbox_2_pending_key\" ON \"ledger\".\"inbox_2\"")
        );
        // A reserved word is a fine name once quoted.
        assert_eq!(TableName::parse("order").unwrap().quoted(), "\"order\"");
    }

    #[test]
    fn names_that_could_change_a_statement_are_refused() {
        for bad in [
            "",
            ".",
            "a.",
            ".a",
            "a.b.c",
            "Inbox",
            "1inbox",
            "in box",
            "inbox\"; DROP TABLE x; --",
            "inbox-2",
            "ïnbox",
            "a\0b",
        ] {
            let e = TableName::parse(bad).unwrap_err();
            assert!(e.to_string().starts_with("inbox table "), "{e}");
        }
    }

    #[test]
    fn names_too_long_for_postgres_are_refused_not_cut() {
        let longest_table = "t".repeat(MAX_NAME - LONGEST_INDEX_SUFFIX.len());
        assert!(TableName::parse(&longest_table).is_ok());
        assert!(TableName::parse(&format!("{longest_table}t")).is_err());
        let schema = "s".repeat(MAX_NAME - 2);
        assert!(TableName::parse(&format!("{schema}.t")).is_ok());
        assert!(TableName::parse(&format!("{schema}s.t")).is_err());
    }

    #[test]
    fn schema_names_every_column_of_the_interface() {
        let sql = schema(DEFAULT_TABLE).unwrap();
        for column in [
            "id           bigserial   PRIMARY KEY",
            "route        text        NOT NULL",
            "event_id     text        NOT NULL",
            "event_type   text,",
            "order_key    text,",
            "provider     text        NOT NULL",
            "received_at  timestamptz NOT NULL",
            "headers      jsonb       NOT NULL",
            "body         bytea       NOT NULL",
            "processed_at timestamptz,",
            "UNIQUE (route, event_id)",
        ] {
            assert!(sql.contains(column), "{column}");
        }
    }
}
