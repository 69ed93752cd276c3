//! The public listener: accepts connections within the per-connection limits and
//! deadlines, runs each request through the delivery pipeline (`pipeline/`), and
//! shuts down gracefully. Its parts: the one accept loop ([`listen`], which the admin
//! listener uses too), one connection (`connection.rs`) and the connections each
//! client address may hold open ([`limits`]).
//!
//! [`run`] takes its context ([`Ingress`], built in `app.rs`), its listener and its
//! shutdown future as arguments, so tests bind port 0 and stop the server when they
//! like.

pub(crate) mod connection;
pub mod limits;
pub mod listen;

use std::future::Future;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

use self::connection::{Deadlines, http_builder, refuse, serve_connection};
use self::limits::ClientConnections;
use crate::config::ServerConfig;
use crate::pipeline::PipelineContext;

/// What the public listener uses: its settings, the connections each client holds,
/// the TLS config a reload may swap, and the pipeline its requests run through. Built
/// in `app.rs`.
#[derive(Debug)]
pub struct Ingress {
    pub(crate) pipeline: Arc<PipelineContext>,
    /// The listener's settings as the gateway started (a reload does not change them).
    pub(crate) server: ServerConfig,
    /// Open public connections by client address (`server.max_connections_per_client`).
    pub(crate) connections: ClientConnections,
    /// The TLS config of the public listener, swapped on reload (new certificates).
    pub(crate) tls: Arc<ArcSwapOption<tokio_rustls::rustls::ServerConfig>>,
}

/// Serves `listener` until `shutdown` resolves, then stops accepting, lets open
/// requests finish and waits for settle steps, each within `server.shutdown_grace`.
pub async fn run(
    ingress: Arc<Ingress>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let pipeline = &ingress.pipeline;
    let builder = http_builder(&ingress.server);
    let connections = Arc::new(tokio::sync::Semaphore::new(ingress.server.max_connections));
    let deadlines = Deadlines::of(&ingress.server);
    let open = TaskTracker::new();
    let closing = tokio_util::sync::CancellationToken::new();
    listen::accept_loop(&listener, shutdown, |stream, peer| {
        // Over server.max_connections, or this client's share of them: answer and
        // close, never queue.
        // A trusted proxy carries many clients' connections: it is bounded by
        // server.max_connections only, and each request's limits count the client it
        // names (X-Forwarded-For).
        let proxied = pipeline
            .routing()
            .server
            .trusted_proxies
            .iter()
            .any(|n| n.contains(&peer.ip()));
        let client = if proxied {
            None
        } else {
            let Some(slot) = ingress.connections.enter(
                limits::client_key(peer.ip()),
                ingress.server.max_connections_per_client,
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
        let (st, builder, closing) = (pipeline.clone(), builder.clone(), closing.clone());
        let tls = ingress.tls.clone();
        open.spawn(async move {
            let limit = deadlines.header_read_timeout;
            match tls.load_full() {
                // The handshake runs in the connection's own task, bounded like a
                // request head, so a slow client cannot stall the accept loop.
                Some(tls) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(limit, acceptor.accept(stream)).await
                    {
                        serve_connection(
                            deadlines,
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
                        deadlines,
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
    drain(
        &open,
        &closing,
        &pipeline.settles,
        ingress.server.shutdown_grace,
    )
    .await;
    Ok(())
}

/// Shutdown, once the listener is closed: open requests are asked to finish, then the
/// settle steps they left running, each within `grace`.
async fn drain(
    open: &TaskTracker,
    closing: &tokio_util::sync::CancellationToken,
    settles: &TaskTracker,
    grace: std::time::Duration,
) {
    tracing::info!(grace = ?grace, "shutting down: draining open requests");
    closing.cancel();
    open.close();
    if tokio::time::timeout(grace, open.wait()).await.is_err() {
        tracing::warn!("shutdown grace ran out with requests still open");
    }
    settles.close();
    if tokio::time::timeout(grace, settles.wait()).await.is_err() {
        tracing::warn!(
            pending = settles.len(),
            "shutdown grace ran out with settle steps pending; their claims expire with the lease"
        );
    }
}
