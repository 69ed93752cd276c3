//! `POST /reload`: re-reads the config file, as SIGHUP does.

use super::AdminContext;
use super::api::{ReloadRefused, Reloaded};
use super::exchange::AdminAnswer;

/// `POST /reload`: the routes now configured, or why the running config stays.
pub(super) async fn reload(state: &AdminContext) -> AdminAnswer {
    match state.reloader.reload().await {
        Ok(routes) => AdminAnswer::ok(&Reloaded {
            status: "reloaded".into(),
            routes,
        }),
        Err(e) => AdminAnswer::BadRequest(super::api::to_json(&ReloadRefused {
            status: "refused".into(),
            errors: e.0,
        })),
    }
}
