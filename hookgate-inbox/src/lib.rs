//! The handler's side of hookgate's `postgres` destination.
//!
//! hookgate delivers each event into the handler's own database: it inserts a row into an
//! inbox table (`INSERT … ON CONFLICT (route, event_id) DO NOTHING`, so an event is there
//! once however often it is delivered) and sends `NOTIFY` on a channel named after the
//! table. This crate applies those rows: it takes the next unprocessed event, runs the
//! handler's code in the same transaction, marks the row processed and commits. The effect
//! and the mark commit together or not at all, so every event's effect happens exactly
//! once, even when a handler process dies halfway.
//!
//! - Per order key (the destination's `order_by`), events are applied one at a time in the
//!   order hookgate accepted them; events without a key in any order.
//! - Any number of handler processes share one table: each takes a different event
//!   (`FOR UPDATE SKIP LOCKED`), and none takes a key's next event while another holds
//!   the one before it (see [`Inbox`]).
//! - A handler that returns an error rolls its transaction back; the event stays
//!   unprocessed and is tried again.
//!
//! # Example
//!
//! ```no_run
//! use hookgate_inbox::{BoxError, Event, Handler, Inbox};
//! use tokio_postgres::{NoTls, Transaction};
//!
//! /// Books each payment event into the ledger.
//! struct Ledger;
//!
//! impl Handler for Ledger {
//!     async fn handle(&mut self, tx: &mut Transaction<'_>, event: &Event) -> Result<(), BoxError> {
//!         tx.execute(
//!             "INSERT INTO payments (event_id, received, body) VALUES ($1, $2, $3)",
//!             &[&event.event_id, &event.received_at, &event.body],
//!         )
//!         .await?;
//!         Ok(())
//!     }
//!
//!     fn failed(&mut self, event: &Event, error: &BoxError) {
//!         eprintln!("event {} of {}: {error}; trying again", event.event_id, event.route);
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let inbox = Inbox::new("hookgate_inbox")?;
//!     let (mut client, connection) =
//!         tokio_postgres::connect("host=localhost dbname=ledger", NoTls).await?;
//!     // Drives the connection and wakes the loop on hookgate's NOTIFY.
//!     let (wakeups, connection) = hookgate_inbox::listen(connection, &inbox);
//!     tokio::spawn(connection);
//!     // Runs until the connection ends; start it again to reconnect.
//!     match inbox.run(&mut client, &wakeups, &mut Ledger).await? {}
//! }
//! ```
//!
//! For a loop of your own, [`Inbox::next`] gives one event at a time as a [`Claim`]:
//!
//! ```no_run
//! # async fn one(inbox: &hookgate_inbox::Inbox, client: &mut tokio_postgres::Client)
//! #     -> Result<(), tokio_postgres::Error> {
//! if let Some(mut claim) = inbox.next(client).await? {
//!     let (tx, event) = claim.parts();
//!     tx.execute("INSERT INTO seen (event_id) VALUES ($1)", &[&event.event_id]).await?;
//!     claim.done().await?; // marks it processed and commits; an early return rolls back
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # The table
//!
//! [`schema`] gives the migration (`hookgate inbox schema` prints the same). Apply it
//! with your other migrations; hookgate never alters the handler's schema. Rows stay
//! after they are processed, `processed_at` set: delete old ones when you like, with
//! `DELETE FROM hookgate_inbox WHERE processed_at < now() - interval '30 days'`
//! (hookgate's own dedup window decides how long a repeat is still refused at its door;
//! the row's unique key refuses it for as long as the row is kept).

mod event;
mod inbox;
mod run;
mod table;

pub use event::Event;
pub use inbox::{Claim, Inbox};
pub use run::{BoxError, Error, Handler, Wakeups, listen};
pub use table::{DEFAULT_TABLE, TableName, TableNameError, schema};
/// The PostgreSQL client this crate is built on, for a handler to use the same version.
pub use tokio_postgres;
