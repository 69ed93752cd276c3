//! `hookgate forget`: free one event's key, through the admin listener.

use super::admin::{AdminArgs, admin_call, admin_failed, enc};
use super::text::printable;

#[derive(Debug, clap::Args)]
pub struct ForgetArgs {
    #[arg(long)]
    route: String,
    #[arg(long)]
    event_id: String,
    #[command(flatten)]
    admin: AdminArgs,
}

pub(super) async fn run(args: ForgetArgs) -> anyhow::Result<i32> {
    let ForgetArgs {
        route,
        event_id,
        admin,
    } = args;
    let path = format!("/keys/{}/{}", enc(&route), enc(&event_id));
    let (ok, body) = admin_call(&admin, Some(&route), reqwest::Method::DELETE, &path).await?;
    if !ok {
        return Ok(admin_failed(&body));
    }
    println!("{}", printable(body.trim_end()));
    Ok(0)
}
