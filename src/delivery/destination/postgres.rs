//! `postgres`: the event goes into an inbox table in the handler's own database, once.
//!
//! One statement inserts the row with `ON CONFLICT (route, event_id) DO NOTHING` and,
//! when a row was inserted, calls `pg_notify` on a channel named after the table with
//! the route as payload: the statement is its own transaction, so the commit that
//! answers it is the attempt's success, and the notification goes out with it. A
//! conflict is success too: the event is already there (an earlier attempt committed
//! and its answer was lost, or another replica's). The gateway never alters the
//! handler's schema: a missing or wrong table is a refused attempt, tried again.
//!
//! One connection per destination carries every attempt (tokio-postgres pipelines
//! the statements), with the insert prepared once per connection and table; TLS as
//! the URL's `sslmode` asks, with rustls. The insert is `hookgate-inbox`'s own, the
//! one source of the inbox's SQL.

use std::sync::Arc;

use tokio::sync::Mutex;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{Answer, Message};
use crate::config::{PostgresTarget, ServerUrl};
use crate::outcome::AttemptResult;

/// The connection, once made; made again once it closes.
#[derive(Debug, Default)]
pub(super) struct Conn {
    client: Mutex<Option<Arc<Client>>>,
    /// The insert, prepared on the current connection for the table it names.
    insert: Mutex<Option<Prepared>>,
}

#[derive(Debug)]
struct Prepared {
    client: Arc<Client>,
    table: hookgate_inbox::TableName,
    statement: Statement,
}

impl Conn {
    async fn client(&self, url: &ServerUrl) -> Result<Arc<Client>, String> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        *slot = None;
        let tls = MakeRustlsConnect::new(crate::tls::client_config().map_err(|e| e.to_string())?);
        let (client, connection) = tokio_postgres::connect(url.expose(), tls)
            .await
            .map_err(|e| error_text(&e, url))?;
        let shown = url.shown().to_owned();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(server = %shown, error = %e, "postgres destination: the connection closed");
            }
        });
        let client = Arc::new(client);
        *slot = Some(client.clone());
        Ok(client)
    }

    /// The insert (and the wake-up for the rows it inserts, in the same statement)
    /// prepared on `client` for `t`'s table: prepared again only for a new connection
    /// or another table. A missing table fails here, and nothing is kept.
    async fn insert(
        &self,
        client: &Arc<Client>,
        t: &PostgresTarget,
    ) -> Result<Statement, tokio_postgres::Error> {
        let mut slot = self.insert.lock().await;
        if let Some(p) = slot
            .as_ref()
            .filter(|p| Arc::ptr_eq(&p.client, client) && p.table == t.table)
        {
            return Ok(p.statement.clone());
        }
        let sql = format!(
            "WITH ins AS ({}) SELECT id, pg_notify($9, $1) FROM ins",
            t.table.insert_statement()
        );
        let statement = client.prepare(&sql).await?;
        *slot = Some(Prepared {
            client: client.clone(),
            table: t.table.clone(),
            statement: statement.clone(),
        });
        Ok(statement)
    }

    pub(super) async fn deliver(&self, t: &PostgresTarget, m: &Message) -> Answer {
        let client = match self.client(&t.url).await {
            Ok(c) => c,
            Err(e) => return Answer::failed(AttemptResult::Connect, e),
        };
        let insert = match self.insert(&client, t).await {
            Ok(s) => s,
            Err(e) => return failed(&e, t),
        };
        let received = std::time::UNIX_EPOCH + std::time::Duration::from_millis(m.received_at_ms);
        let headers = m.headers_json();
        let body: &[u8] = &m.body;
        let rows = client
            .query(
                &insert,
                &[
                    &m.route,
                    &m.event_id,
                    &m.event_type,
                    &m.order_key,
                    &m.provider,
                    &received,
                    &headers,
                    &body,
                    &t.table.channel(),
                ],
            )
            .await;
        match rows {
            Ok(rows) => match rows.first().and_then(|r| r.try_get::<_, i64>(0).ok()) {
                Some(id) => Answer::received(format!("inbox row {id}")),
                None => already_there(&client, t, m).await,
            },
            Err(e) => {
                // Prepared again next time: the table may have been changed under it.
                *self.insert.lock().await = None;
                failed(&e, t)
            }
        }
    }

    /// Connects if needed and runs `SELECT 1`.
    pub(super) async fn check(&self, url: &ServerUrl) -> Result<(), String> {
        let client = self.client(url).await?;
        client
            .simple_query("SELECT 1")
            .await
            .map(|_| ())
            .map_err(|e| error_text(&e, url))
    }
}

/// The conflict's answer: the row that holds the event (a delivered attempt either way).
async fn already_there(client: &Client, t: &PostgresTarget, m: &Message) -> Answer {
    let table = t.table.quoted();
    let sql = format!("SELECT id FROM {table} WHERE route = $1 AND event_id = $2");
    match client.query_opt(&sql, &[&m.route, &m.event_id]).await {
        Ok(Some(row)) => match row.try_get::<_, i64>(0) {
            Ok(id) => Answer::received(format!("inbox row {id} (already there)")),
            Err(_) => Answer::received("already there".into()),
        },
        Ok(None) => Answer::received("already there".into()),
        Err(e) => failed(&e, t),
    }
}

/// An error as an attempt's answer: the server's refusal (no table, a wrong one) or a
/// broken connection.
fn failed(e: &tokio_postgres::Error, t: &PostgresTarget) -> Answer {
    let Some(db) = e.as_db_error() else {
        return Answer::failed(AttemptResult::Broken, error_text(e, &t.url));
    };
    let code = db.code();
    let hint = if *code == SqlState::UNDEFINED_TABLE
        || *code == SqlState::UNDEFINED_COLUMN
        || *code == SqlState::INVALID_COLUMN_REFERENCE
        || *code == SqlState::DATATYPE_MISMATCH
    {
        format!(
            ": the inbox table {} is missing or not of hookgate's shape (hookgate inbox schema --table {} prints it)",
            t.table, t.table
        )
    } else {
        String::new()
    };
    Answer::refused(format!("{} ({}){hint}", db.message(), code.code()))
}

/// An error's text with the server's URL shown redacted (its own text never holds the
/// password).
fn error_text(e: &tokio_postgres::Error, url: &ServerUrl) -> String {
    let mut text = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(inner) = cur {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cur = inner.source();
    }
    format!("{}: {text}", url.shown())
}
