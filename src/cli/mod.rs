//! The command line: `serve`, `check`, `providers`, `sign`, `replay`, `forget`,
//! `events`, `deliveries`, `listen`, `keygen`, `upstream` and `probe`, a file each. A new command is its file,
//! its variant of [`Command`] and one line of [`run`].

use clap::{Parser, Subcommand};

mod admin;
mod check;
mod deliveries;
mod demo_upstream;
mod events;
mod forget;
mod keygen;
mod listen;
mod probe;
mod providers;
mod replay;
mod serve;
mod sign;
pub(crate) mod text;
mod upstream;

pub use admin::AdminArgs;
pub use check::{CheckArgs, describe};
pub use deliveries::{DeliveriesAction, Filters};
pub use events::{EventsAction, Which};
pub use forget::ForgetArgs;
pub use listen::ListenArgs;
pub use probe::ProbeArgs;
pub use providers::ProvidersArgs;
pub use replay::ReplayArgs;
pub use serve::{ServeArgs, serve};
pub use sign::SignArgs;
pub use upstream::UpstreamArgs;

/// hookgate: verify webhook signatures, deduplicate deliveries, forward each event once.
/// `hookgate --version`: the release and the commit it was built from
/// (`hookgate 0.1.0 (commit 1a2b3c4d5e6f)`; `build.rs` names it).
pub const VERSION: &str = env!("HOOKGATE_VERSION");

#[derive(Debug, Parser)]
#[command(name = "hookgate", version = VERSION, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve(ServeArgs),
    /// Free one event's key so its next delivery is forwarded again (a deliberate
    /// redelivery), through the admin listener of a running gateway.
    Forget(ForgetArgs),
    /// List, show, retry and purge the events of a queue route (`delivery = "queue"`),
    /// through the admin listener of a running gateway.
    Events {
        #[command(subcommand)]
        action: EventsAction,
    },
    /// A gateway's verified deliveries on this machine: lease the events of a pull
    /// destination (`pull = true`) and send each to a local handler.
    Listen(ListenArgs),
    /// The delivery log: list, show, follow (`tail`) and replay what the gateway
    /// received, through the admin listener of a running gateway.
    Deliveries {
        #[command(subcommand)]
        action: DeliveriesAction,
    },
    /// Make an Ed25519 key pair for testing a route whose provider signs with one
    /// (discord, telnyx, standard_webhooks v1a): the public key goes into the route's
    /// `secrets`, the private key to `hookgate sign --private-key`.
    Keygen,
    /// A demo upstream for trying the gateway by hand: prints every request it receives
    /// and answers 200 `{"received":true}`.
    Upstream(UpstreamArgs),
    /// GET a URL and exit 0 on a 2xx (a health check that needs no curl in the image).
    Probe(ProbeArgs),
    /// Validate a config file and print its routes; exit 1 on any error.
    Check(CheckArgs),
    /// The provider presets as a table (name, scheme, event ID, handshake); with a
    /// word, those that mention it; with a preset's name, that preset in full and a
    /// route to paste.
    Providers(ProvidersArgs),
    /// Send replay files (captured or signed) to a gateway and report each outcome.
    Replay(ReplayArgs),
    /// Sign a body the way a provider would and print the headers, or a curl command.
    Sign(SignArgs),
    /// The inbox table of a `postgres` destination (docs/inbox.md).
    Inbox {
        #[command(subcommand)]
        action: InboxAction,
    },
}

/// `hookgate inbox …`.
#[derive(Debug, clap::Subcommand)]
pub enum InboxAction {
    /// Print the migration that creates the inbox table and its indexes (the gateway
    /// never alters the handler's schema: apply it with the handler's migrations).
    Schema {
        /// The table: a plain name or `schema.table`.
        #[arg(long, default_value = hookgate_inbox::DEFAULT_TABLE)]
        table: String,
    },
}

/// Runs a parsed command line; returns the process exit code.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Forget(args) => forget::run(args).await,
        Command::Events { action } => events::run(action).await,
        Command::Deliveries { action } => deliveries::run(action).await,
        Command::Listen(args) => listen::run(args).await,
        Command::Keygen => Ok(keygen::run()),
        Command::Upstream(args) => upstream::run(args).await,
        Command::Probe(args) => probe::run(args).await,
        Command::Check(args) => check::run(args).await,
        Command::Providers(args) => Ok(providers::run(args)),
        Command::Replay(args) => replay::run(args).await,
        Command::Sign(args) => sign::run(args),
        Command::Inbox {
            action: InboxAction::Schema { table },
        } => match hookgate_inbox::schema(&table) {
            Ok(sql) => {
                print!("{sql}");
                Ok(0)
            }
            Err(e) => {
                eprintln!("hookgate inbox schema: --table {e}");
                Ok(2)
            }
        },
    }
}
