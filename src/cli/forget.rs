//! `hookgate forget`: free one event's key, through the admin listener.

use super::admin::{AdminArgs, admin_call, admin_failed, enc};
use super::text::printable;

/// Frees one event's key, so that the provider's next delivery of it is forwarded
/// (or queued) again instead of answered as a duplicate: after a handler lost an
/// effect it had acknowledged.
#[derive(Debug, clap::Args)]
pub struct ForgetArgs {
    /// The route the event came in on.
    #[arg(long)]
    route: String,
    /// The event ID as the route keys it (`hookgate deliveries list` shows it).
    #[arg(long)]
    event_id: String,
    /// Print the admin listener's JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    admin: AdminArgs,
}

pub(super) async fn run(args: ForgetArgs) -> anyhow::Result<i32> {
    let ForgetArgs {
        route,
        event_id,
        json,
        admin,
    } = args;
    let path = format!("/keys/{}/{}", enc(&route), enc(&event_id));
    let (ok, body) = admin_call(&admin, Some(&route), reqwest::Method::DELETE, &path).await?;
    if !ok {
        return Ok(admin_failed(&body));
    }
    if json {
        println!("{}", printable(body.trim_end()));
        return Ok(0);
    }
    let forgotten = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["forgotten"].as_bool());
    let (route, id) = (printable(&route), printable(&event_id));
    match forgotten {
        Some(true) => {
            println!("forgot {id} on route {route}: its next delivery is forwarded as a first one")
        }
        Some(false) => println!("{id} on route {route} was not held: nothing to forget"),
        None => println!("{}", printable(body.trim_end())),
    }
    Ok(0)
}
