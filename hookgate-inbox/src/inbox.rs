//! Taking events one at a time, each in the transaction that applies it.

use std::fmt;
use std::time::Duration;

use tokio_postgres::{Client, IsolationLevel, Transaction};

use crate::event::Event;
use crate::table::{TableName, TableNameError};

/// The handler's view of one inbox table: the statements, and how long to wait.
///
/// # Why several processes may share the table
///
/// The "next event" query takes the oldest unprocessed row that no other transaction
/// holds (`FOR UPDATE SKIP LOCKED`) and whose order key has no older unprocessed row
/// (`NOT EXISTS`). The `NOT EXISTS` reads rows without locking them, so a row another
/// process holds still counts as unprocessed there: while one process applies a key's
/// event, no other process can take that key's next one. A row another process marked
/// processed after this query's snapshot was taken is re-read when the query reaches
/// it (PostgreSQL rechecks a locked row's latest version under READ COMMITTED), so it
/// is never taken twice. Each event's transaction runs at READ COMMITTED for that
/// reason, whatever the database's default.
///
/// Per key, `id` order is the order in which the gateway's inserts committed: the
/// gateway delivers a key's next event only after the previous one's insert
/// committed.
#[derive(Clone, Debug)]
pub struct Inbox {
    pub(crate) table: TableName,
    pub(crate) next_sql: String,
    done_sql: String,
    pub(crate) poll_interval: Duration,
    pub(crate) retry_delay: Duration,
}

impl Inbox {
    /// The inbox table `table` (`table` or `schema.table`), polled every 5 seconds when
    /// no notification comes, an event that failed tried again after 1 second.
    ///
    /// # Errors
    ///
    /// The name is not a plain lowercase SQL identifier, optionally schema-qualified.
    pub fn new(table: &str) -> Result<Self, TableNameError> {
        let table = TableName::parse(table)?;
        Ok(Self {
            next_sql: table.next_statement(),
            done_sql: table.done_statement(),
            table,
            poll_interval: Duration::from_secs(5),
            retry_delay: Duration::from_secs(1),
        })
    }

    /// How long [`Inbox::run`] waits for a notification before it looks anyway. The
    /// fallback for a notification missed while the connection was down, and for a
    /// key's next event that another handler process freed by its commit and left (it
    /// died right after, say): only the gateway's inserts notify.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long [`Inbox::run`] passes over an event whose handler failed before it
    /// tries it again. Events of other keys go on meanwhile; the event's own key waits
    /// (its later events stay behind it).
    #[must_use]
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// The table's name.
    #[must_use]
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// Takes the next event, if one is ready, in a new transaction that holds its row.
    ///
    /// Apply the event with [`Claim::transaction`], then [`Claim::done`] marks it
    /// processed and commits. Dropping the claim (or [`Claim::rollback`]) rolls back:
    /// the event stays unprocessed and is taken again.
    ///
    /// # Errors
    ///
    /// A statement failed (the connection is gone, or the table does not match the
    /// schema).
    pub async fn next<'a>(
        &'a self,
        client: &'a mut Client,
    ) -> Result<Option<Claim<'a>>, tokio_postgres::Error> {
        self.take(client, &[]).await
    }

    /// [`Inbox::next`], passing over the events `skip`.
    pub(crate) async fn take<'a>(
        &'a self,
        client: &'a mut Client,
        skip: &[i64],
    ) -> Result<Option<Claim<'a>>, tokio_postgres::Error> {
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::ReadCommitted)
            .start()
            .await?;
        let Some(row) = tx.query_opt(&self.next_sql, &[&skip]).await? else {
            // Nothing ready: end the transaction now rather than on drop.
            tx.rollback().await?;
            return Ok(None);
        };
        let event = Event::from_row(&row)?;
        Ok(Some(Claim {
            tx,
            event,
            done_sql: &self.done_sql,
        }))
    }
}

/// One event, taken: its row is locked by this transaction until it ends.
pub struct Claim<'a> {
    tx: Transaction<'a>,
    event: Event,
    done_sql: &'a str,
}

impl<'a> Claim<'a> {
    /// The event.
    #[must_use]
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// The transaction to write the event's effect with. Do not commit it yourself
    /// (`COMMIT` through a statement): [`Claim::done`] marks the event first.
    pub fn transaction(&mut self) -> &mut Transaction<'a> {
        &mut self.tx
    }

    /// The transaction and the event together, for a handler that needs both at once.
    pub fn parts(&mut self) -> (&mut Transaction<'a>, &Event) {
        (&mut self.tx, &self.event)
    }

    /// Marks the event processed and commits its transaction: the effect and the mark
    /// become durable together, or neither does.
    ///
    /// # Errors
    ///
    /// The mark or the commit failed; the event is then still unprocessed.
    pub async fn done(self) -> Result<(), tokio_postgres::Error> {
        self.finish().await.map_err(|(_, e)| e)
    }

    /// Rolls back: the effect is discarded, and the event stays unprocessed.
    ///
    /// # Errors
    ///
    /// The rollback failed (the connection is gone; the server rolls back on its own).
    pub async fn rollback(self) -> Result<(), tokio_postgres::Error> {
        self.tx.rollback().await
    }

    /// [`Claim::done`], giving the event back when it fails.
    pub(crate) async fn finish(self) -> Result<(), (Event, tokio_postgres::Error)> {
        if let Err(e) = self.tx.execute(self.done_sql, &[&self.event.id]).await {
            return Err((self.event, e));
        }
        match self.tx.commit().await {
            Ok(()) => Ok(()),
            Err(e) => Err((self.event, e)),
        }
    }

    /// The event, the transaction given up.
    pub(crate) async fn rollback_into_event(self) -> (Event, Result<(), tokio_postgres::Error>) {
        let result = self.tx.rollback().await;
        (self.event, result)
    }
}

impl fmt::Debug for Claim<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Claim").field("event", &self.event).finish()
    }
}
