//! Broadcast shutdown: one token, cloned into every task; SIGTERM/SIGINT trigger it.

use tokio_util::sync::CancellationToken;

/// A cloneable shutdown signal.
#[derive(Clone, Debug, Default)]
pub struct Shutdown(CancellationToken);

impl Shutdown {
    /// A signal nobody has triggered yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask everything holding a clone to stop.
    pub fn trigger(&self) {
        self.0.cancel();
    }

    /// Whether shutdown was asked for.
    pub fn is_triggered(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Resolves once shutdown is asked for.
    pub async fn wait(&self) {
        self.0.cancelled().await
    }

    /// An owned future that resolves on shutdown (for `serve_with_shutdown`).
    pub fn wait_owned(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.0.clone().cancelled_owned()
    }

    /// A child signal: triggered with this one, or on its own.
    pub fn child(&self) -> Shutdown {
        Shutdown(self.0.child_token())
    }

    /// Trigger this signal on SIGTERM or SIGINT. Must be called inside a tokio runtime.
    pub fn trigger_on_signals(&self) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let this = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = int.recv() => tracing::info!("SIGINT: shutting down"),
                _ = this.wait() => {}
            }
            this.trigger();
        });
        Ok(())
    }
}
