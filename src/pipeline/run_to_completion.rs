//! Detach-on-drop for a future: what a provider's hang-up must not cut short.

/// Polls a future in place and, if it is dropped before it has finished, spawns the
/// rest of it on the runtime so it still runs to the end.
///
/// The claim → forward → settle sequence must not stop halfway when the provider hangs
/// up. Spawning every delivery onto its own task guarantees that too, but costs a
/// cross-thread wake-up per request (the idle worker is notified to steal the new
/// task), which the profile showed as a tenth of the gateway's CPU; this keeps the
/// common case inline and pays for a task only on a hang-up. Hand-written: no crate
/// offers "detach on drop" for a future.
pub(super) struct RunToCompletion<F>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    fut: Option<std::pin::Pin<Box<F>>>,
}

impl<F> RunToCompletion<F>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    pub(super) fn new(fut: F) -> Self {
        Self {
            fut: Some(Box::pin(fut)),
        }
    }
}

impl<F> std::future::Future for RunToCompletion<F>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        // `Option<Pin<Box<F>>>` is Unpin, so is Self.
        let this = self.get_mut();
        let Some(fut) = this.fut.as_mut() else {
            panic!("RunToCompletion polled after it completed");
        };
        let out = std::task::ready!(fut.as_mut().poll(cx));
        this.fut = None;
        std::task::Poll::Ready(out)
    }
}

impl<F> Drop for RunToCompletion<F>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        if let Some(fut) = self.fut.take() {
            // Dropped unfinished: hand the rest to the runtime (the box keeps the
            // future where it was pinned).
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(fut);
            }
        }
    }
}
