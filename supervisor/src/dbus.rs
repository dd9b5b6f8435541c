//! The D-Bus admin surface: `org.svcos.Supervisor1` at `/org/svcos/Supervisor1`.
//!
//! `ListServices() → a(ssuuts)`: (name, state, pid, restarts, uptime_s, last_exit), pid 0 and
//! last_exit "" when there is none. `ListRestartState() → a(sstu)`: (name, escalation,
//! backoff_ms, recent_restarts), the restart policy's view (see [`crate::policy`]).
//! `Restart(s)`, `Stop(s)`, `Start(s)` return when the service reached the asked state. Signal
//! `ServiceStateChanged(s name, s state, u pid)` on every transition.

use zbus::object_server::SignalEmitter;

use crate::manager::{ControlError, Handle, ServiceInfo};

/// Well-known bus name.
pub const BUS_NAME: &str = "org.svcos.Supervisor1";
/// Object path.
pub const OBJECT_PATH: &str = "/org/svcos/Supervisor1";

/// Which bus to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bus {
    /// The system bus (production).
    System,
    /// A bus at an explicit address (`--dbus-address`, or the session bus in the sim).
    Address(String),
}

/// The interface object.
#[derive(Debug)]
pub struct Supervisor1 {
    handle: Handle,
}

type Row = (String, String, u32, u32, u64, String);

fn row(info: &ServiceInfo) -> Row {
    (
        info.name.to_string(),
        info.state.as_str().to_string(),
        info.pid.unwrap_or(0),
        info.restarts,
        info.uptime_s,
        info.last_exit.clone().unwrap_or_default(),
    )
}

fn to_fdo(err: ControlError) -> zbus::fdo::Error {
    match err {
        ControlError::UnknownService(_) => zbus::fdo::Error::InvalidArgs(err.to_string()),
        ControlError::Timeout(_) => zbus::fdo::Error::TimedOut(err.to_string()),
        _ => zbus::fdo::Error::Failed(err.to_string()),
    }
}

#[zbus::interface(name = "org.svcos.Supervisor1")]
impl Supervisor1 {
    /// Every service in boot order.
    async fn list_services(&self) -> zbus::fdo::Result<Vec<Row>> {
        let all = self.handle.list().await.map_err(to_fdo)?;
        Ok(all.iter().map(row).collect())
    }

    /// Every service's restart-policy state, in boot order: (name, escalation, backoff_ms,
    /// recent_restarts).
    async fn list_restart_state(&self) -> zbus::fdo::Result<Vec<(String, String, u64, u32)>> {
        let all = self.handle.list().await.map_err(to_fdo)?;
        Ok(all
            .iter()
            .map(|i| {
                (
                    i.name.to_string(),
                    i.escalation.as_str().to_string(),
                    i.backoff_ms,
                    i.recent_restarts,
                )
            })
            .collect())
    }

    /// Restart a service; returns once it is serving again.
    async fn restart(&self, name: &str) -> zbus::fdo::Result<()> {
        self.handle.restart(name).await.map(drop).map_err(to_fdo)
    }

    /// Stop a service and keep it stopped.
    async fn stop(&self, name: &str) -> zbus::fdo::Result<()> {
        self.handle.stop(name).await.map(drop).map_err(to_fdo)
    }

    /// Start a stopped or failed service.
    async fn start(&self, name: &str) -> zbus::fdo::Result<()> {
        self.handle.start(name).await.map(drop).map_err(to_fdo)
    }

    /// A service changed state.
    #[zbus(signal)]
    async fn service_state_changed(
        emitter: &SignalEmitter<'_>,
        name: &str,
        state: &str,
        pid: u32,
    ) -> zbus::Result<()>;
}

/// Claim the name, serve the interface and forward state changes as signals until the
/// returned connection is dropped.
pub async fn serve(bus: Bus, handle: Handle) -> zbus::Result<zbus::Connection> {
    let mut changes = handle.subscribe();
    let builder = match &bus {
        Bus::System => zbus::connection::Builder::system()?,
        Bus::Address(addr) => zbus::connection::Builder::address(addr.as_str())?,
    };
    let conn = builder
        .name(BUS_NAME)?
        .serve_at(OBJECT_PATH, Supervisor1 { handle })?
        .build()
        .await?;
    let emitter = SignalEmitter::new(&conn, OBJECT_PATH)?.into_owned();
    tokio::spawn(async move {
        loop {
            match changes.recv().await {
                Ok(change) => {
                    let _ = Supervisor1::service_state_changed(
                        &emitter,
                        change.service.as_str(),
                        change.state.as_str(),
                        change.pid.unwrap_or(0),
                    )
                    .await;
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "D-Bus signal forwarding fell behind");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    Ok(conn)
}
