//! A handler of hookgate's `postgres` destination: applies each event in the inbox table
//! to an effect table, in the transaction that marks the event processed
//! (docs/inbox.md).
//!
//! ```text
//! DATABASE_URL=postgres://ledger@127.0.0.1/ledger cargo run --example inbox_handler
//! ```
//!
//! Each event adds one row to `inbox_effects`. That table has no unique constraint on
//! purpose: an event applied twice would show as two rows. Like a ledger's balance, each
//! row depends on what came before it: `applied_before` counts the effects of its key
//! already committed, so per key it reads 0, 1, 2, … only when the key's events were
//! applied one at a time, in order. Run as many processes as you like against one
//! database, kill them at any moment and start them again; every event ends with exactly
//! one row, per order key in the order hookgate accepted them. Each process runs until
//! it is killed, connecting again when the database goes away.

use std::time::Duration;

use clap::Parser;
use hookgate_inbox::tokio_postgres::{self, Client, NoTls, Transaction};
use hookgate_inbox::{BoxError, Event, Handler, Inbox, listen};

#[derive(Debug, Parser)]
#[command(about = "Applies hookgate's inbox events to an effect table.")]
struct Args {
    /// The handler's database (a libpq URL or key=value string).
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// The inbox table, as the destination's `table` names it.
    #[arg(long, default_value = hookgate_inbox::DEFAULT_TABLE)]
    table: String,
    /// Simulated work inside each event's transaction, after its effect is written and
    /// before the commit: a kill then often lands mid-transaction.
    #[arg(long, default_value_t = 0)]
    work_ms: u64,
    /// How often to look when no notification comes.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    poll_interval: Duration,
}

/// One effect row per event applied; `seq` is the order effects were written in.
const EFFECTS: &str = "CREATE TABLE IF NOT EXISTS inbox_effects (
    seq            bigserial   PRIMARY KEY,
    inbox_id       bigint      NOT NULL,
    route          text        NOT NULL,
    order_key      text,
    event_id       text        NOT NULL,
    applied_before bigint      NOT NULL,  -- effects of this route and key committed before
    applied_at     timestamptz NOT NULL DEFAULT now()
)";

/// The effect: its `applied_before` is read in the same statement (0 for an event
/// without a key).
const EFFECT: &str =
    "INSERT INTO inbox_effects (inbox_id, route, order_key, event_id, applied_before)
    SELECT $1, $2, $3, $4, count(*) FROM inbox_effects WHERE route = $2 AND order_key = $3";

/// Writes each event's effect.
#[derive(Debug)]
struct Effects {
    work: Duration,
}

impl Handler for Effects {
    async fn handle(&mut self, tx: &mut Transaction<'_>, event: &Event) -> Result<(), BoxError> {
        tx.execute(
            EFFECT,
            &[&event.id, &event.route, &event.order_key, &event.event_id],
        )
        .await?;
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        Ok(())
    }

    fn failed(&mut self, event: &Event, error: &BoxError) {
        eprintln!(
            "inbox_handler: event {} of route {}: {error}; trying again",
            event.event_id, event.route
        );
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let inbox = Inbox::new(&args.table)?.poll_interval(args.poll_interval);
    let mut handler = Effects {
        work: Duration::from_millis(args.work_ms),
    };
    loop {
        if let Err(e) = serve(&args.database_url, &inbox, &mut handler).await {
            eprintln!("inbox_handler: {e:#}; connecting again in 1s");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One connection's life: create the effect table, then apply events until the
/// connection ends.
async fn serve(url: &str, inbox: &Inbox, handler: &mut Effects) -> anyhow::Result<()> {
    let (mut client, connection) = tokio_postgres::connect(url, NoTls).await?;
    let (wakeups, connection) = listen(connection, inbox);
    tokio::spawn(connection);
    create_effects(&mut client).await?;
    match inbox.run(&mut client, &wakeups, handler).await? {}
}

/// `CREATE TABLE IF NOT EXISTS` is not safe against itself: processes starting together
/// can both try to create the table, and one fails. An advisory lock makes them take
/// turns.
async fn create_effects(client: &mut Client) -> Result<(), tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('inbox_effects'))",
        &[],
    )
    .await?;
    tx.batch_execute(EFFECTS).await?;
    tx.commit().await
}
