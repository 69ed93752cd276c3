//! The handler's loop: drain what is ready, then wait for a notification or the poll
//! interval, for as long as the connection lasts.

use std::convert::Infallible;
use std::fmt;
use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, Client, Connection, Transaction};

use crate::event::Event;
use crate::inbox::Inbox;

/// The error a [`Handler`] returns; `?` converts most errors into it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The handler's code: applies one event in the transaction that marks it processed.
pub trait Handler: Send {
    /// Applies `event`, writing its effect with `tx`. Return `Ok` to commit the effect
    /// together with the mark; return an error to roll both back, and the event is
    /// tried again after the inbox's retry delay.
    ///
    /// Do not commit `tx` yourself. Savepoints (`tx.savepoint`) are fine.
    fn handle(
        &mut self,
        tx: &mut Transaction<'_>,
        event: &Event,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// Told about every failed attempt: the handler's error, or the mark's or commit's
    /// while the connection still stands. The event was rolled back and will be tried
    /// again. This is where a handler logs, or counts, what keeps failing.
    fn failed(&mut self, event: &Event, error: &BoxError);
}

/// Why [`Inbox::run`] ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A statement of the loop itself failed: the connection is gone, or the table does
    /// not match the schema.
    Database(tokio_postgres::Error),
    /// The connection closed during an attempt (the handler's error, or the commit's,
    /// came from that).
    Closed,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Database(e) => write!(f, "inbox: {e}"),
            Self::Closed => f.write_str("inbox: the connection closed"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Database(e) => Some(e),
            Self::Closed => None,
        }
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Database(e)
    }
}

/// What wakes [`Inbox::run`] before its poll interval: the gateway's notifications on
/// the table's channel, or nothing (polling only).
#[derive(Clone, Debug)]
pub struct Wakeups {
    /// Holds one permit when a notification came since the loop last looked: a
    /// notification during a drain is not lost, it ends the next wait at once.
    notify: Option<Arc<Notify>>,
}

impl Wakeups {
    /// No notifications: [`Inbox::run`] looks every poll interval.
    #[must_use]
    pub fn polling() -> Self {
        Self { notify: None }
    }

    async fn wait(&self, timeout: Duration) {
        match &self.notify {
            Some(notify) => {
                // Timing out is the poll: the caller looks either way.
                let _ = tokio::time::timeout(timeout, notify.notified()).await;
            }
            None => tokio::time::sleep(timeout).await,
        }
    }
}

/// Drives `connection` (the one whose client [`Inbox::run`] is given) and turns the
/// gateway's notifications on the table's channel into [`Wakeups`].
///
/// Spawn the future in place of the connection itself (`tokio::spawn(connection)` in
/// tokio-postgres's own examples); it ends when the connection does. Other channels'
/// notifications and the server's notices are passed over.
pub fn listen<S, T>(
    connection: Connection<S, T>,
    inbox: &Inbox,
) -> (
    Wakeups,
    impl Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let notify = Arc::new(Notify::new());
    let wakeups = Wakeups {
        notify: Some(Arc::clone(&notify)),
    };
    let channel = inbox.table.channel().to_owned();
    let mut connection = connection;
    let driver = poll_fn(move |cx| {
        loop {
            match connection.poll_message(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(AsyncMessage::Notification(n)))) => {
                    if n.channel() == channel {
                        notify.notify_one();
                    }
                }
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(e))) => {
                    // Wake the loop: its next statement reports the closed connection.
                    notify.notify_one();
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(None) => {
                    notify.notify_one();
                    return Poll::Ready(Ok(()));
                }
            }
        }
    });
    (wakeups, driver)
}

/// Events whose attempt failed, passed over until their delay is up.
#[derive(Debug, Default)]
struct Resting {
    until: Vec<(i64, Instant)>,
}

impl Resting {
    /// The ids still resting at `now`; the others are forgotten.
    fn ids(&mut self, now: Instant) -> Vec<i64> {
        self.until.retain(|(_, until)| *until > now);
        self.until.iter().map(|(id, _)| *id).collect()
    }

    /// How long from `now` until the first resting event may be tried again.
    fn next_due(&self, now: Instant) -> Option<Duration> {
        self.until
            .iter()
            .map(|(_, until)| until.saturating_duration_since(now))
            .min()
    }
}

impl Inbox {
    /// Applies events with `handler` for as long as the connection lasts: each ready
    /// event is taken, handled and committed in its own transaction, and when none is
    /// ready the loop waits for a notification or the poll interval. With [`Wakeups`]
    /// from [`listen`], the loop first sends `LISTEN` on `client`.
    ///
    /// Dropping the future is safe at any point: an event's transaction not yet
    /// committed rolls back, and the event is taken again later.
    ///
    /// # Errors
    ///
    /// The connection closed, or a statement of the loop failed. A handler's errors do
    /// not end the loop; they go to [`Handler::failed`].
    pub async fn run<H: Handler>(
        &self,
        client: &mut Client,
        wakeups: &Wakeups,
        handler: &mut H,
    ) -> Result<Infallible, Error> {
        if wakeups.notify.is_some() {
            // Before the first look, so an event that commits after it still wakes us.
            client.batch_execute(&self.table.listen_statement()).await?;
        }
        let mut resting = Resting::default();
        loop {
            let skip = resting.ids(Instant::now());
            let Some(mut claim) = self.take(client, &skip).await? else {
                let wait = resting
                    .next_due(Instant::now())
                    .map_or(self.poll_interval, |due| due.min(self.poll_interval));
                wakeups.wait(wait).await;
                continue;
            };
            let (tx, event) = claim.parts();
            let handled = handler.handle(tx, event).await;
            let (event, failure): (Event, BoxError) = match handled {
                Ok(()) => match claim.finish().await {
                    Ok(()) => continue,
                    Err((_, e)) if client.is_closed() => return Err(Error::Database(e)),
                    // The mark or the commit failed; the transaction is over and the
                    // event is as it was.
                    Err((event, e)) => (event, e.into()),
                },
                Err(e) => {
                    let (event, rolled_back) = claim.rollback_into_event().await;
                    if client.is_closed() {
                        return Err(Error::Closed);
                    }
                    rolled_back?;
                    (event, e)
                }
            };
            resting
                .until
                .push((event.id, Instant::now() + self.retry_delay));
            handler.failed(&event, &failure);
        }
    }
}
