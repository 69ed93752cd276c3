//! The public listener: accepts connections within the per-connection limits and
//! deadlines, runs each request through the delivery pipeline (`pipeline/`), and
//! shuts down gracefully. Its parts: the one accept loop ([`listen`], which the admin
//! listener uses too), one connection (`connection.rs`) and the connections each
//! client address may hold open ([`limits`]).
//!
//! [`run`] takes its listener and shutdown future as arguments, so tests bind port 0
//! and stop the server when they like.

pub(crate) mod connection;
pub mod limits;
pub mod listen;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

use self::connection::{Deadlines, http_builder, refuse, serve_connection};
use crate::server::AppState;

/// Serves `listener` until `shutdown` resolves, then stops accepting, lets open
/// requests finish and waits for settle steps, each within `server.shutdown_grace`.
pub async fn run(
    state: Arc<AppState>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let builder = http_builder(&state.server);
    let connections = Arc::new(tokio::sync::Semaphore::new(state.server.max_connections));
    let open = TaskTracker::new();
    let closing = tokio_util::sync::CancellationToken::new();
    listen::accept_loop(&listener, shutdown, |stream, peer| {
        // Over server.max_connections, or this client's share of them: answer and
        // close, never queue.
        // A trusted proxy carries many clients' connections: it is bounded by
        // server.max_connections only, and each request's limits count the client it
        // names (X-Forwarded-For).
        let proxied = state
            .routing()
            .server
            .trusted_proxies
            .iter()
            .any(|n| n.contains(&peer.ip()));
        let client = if proxied {
            None
        } else {
            let Some(slot) = state.connections.enter(
                crate::ingress::limits::client_key(peer.ip()),
                state.server.max_connections_per_client,
            ) else {
                refuse(stream);
                return;
            };
            Some(slot)
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            refuse(stream);
            return;
        };
        let (st, builder, closing) = (state.clone(), builder.clone(), closing.clone());
        open.spawn(async move {
            let limit = st.server.header_read_timeout;
            match st.tls.load_full() {
                // The handshake runs in the connection's own task, bounded like a
                // request head, so a slow client cannot stall the accept loop.
                Some(tls) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(limit, acceptor.accept(stream)).await
                    {
                        serve_connection(
                            Deadlines::of(&st.server),
                            st,
                            &builder,
                            stream,
                            peer,
                            closing,
                            crate::pipeline::handle,
                        )
                        .await;
                    }
                }
                None => {
                    serve_connection(
                        Deadlines::of(&st.server),
                        st,
                        &builder,
                        stream,
                        peer,
                        closing,
                        crate::pipeline::handle,
                    )
                    .await;
                }
            }
            drop(permit);
            drop(client);
        });
    })
    .await;
    drop(listener);
    let grace = state.server.shutdown_grace;
    tracing::info!(grace = ?grace, "shutting down: draining open requests");
    closing.cancel();
    open.close();
    if tokio::time::timeout(grace, open.wait()).await.is_err() {
        tracing::warn!("shutdown grace ran out with requests still open");
    }
    state.settles.close();
    if tokio::time::timeout(grace, state.settles.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            pending = state.settles.len(),
            "shutdown grace ran out with settle steps pending; their claims expire with the lease"
        );
    }
    Ok(())
}
