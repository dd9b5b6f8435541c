//! The physical reset: follow hw-agent's event stream and clear the auth record when the
//! button has been held for 15 s. There is deliberately no other way to clear it.

use std::path::PathBuf;

use svcos_common::Shutdown;
use svcos_common::ipc::{self, Backoff};
use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
use svcos_proto::hwagent::v1::hw_event::Event;
use svcos_proto::hwagent::v1::{HwEvent, StreamEventsRequest};
use tokio::task::JoinHandle;

use crate::state::Auth;

/// Whether an hw-agent event is the 15-second hold (hw-agent sets `reset_hold` once per hold).
pub fn is_reset_hold(event: &HwEvent) -> bool {
    matches!(&event.event, Some(Event::Button(b)) if b.reset_hold)
}

/// Follow hw-agent's events until shutdown, re-subscribing with backoff while hw-agent is not
/// up yet or restarting.
pub fn spawn(auth: Auth, hw_agent_socket: PathBuf, shutdown: Shutdown) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut client = HwAgentServiceClient::new(ipc::channel_at(hw_agent_socket));
        let mut backoff = Backoff::default();
        let mut reported_down = false;
        while !shutdown.is_triggered() {
            let opened = tokio::select! {
                r = client.stream_events(StreamEventsRequest {}) => r,
                _ = shutdown.wait() => return,
            };
            match opened {
                Ok(response) => {
                    tracing::info!("following hw-agent events for the reset button");
                    reported_down = false;
                    backoff.reset();
                    let mut events = response.into_inner();
                    loop {
                        let next = tokio::select! {
                            m = events.message() => m,
                            _ = shutdown.wait() => return,
                        };
                        match next {
                            Ok(Some(event)) if is_reset_hold(&event) => {
                                if let Err(e) = auth.physical_reset().await {
                                    tracing::error!(error = %e, "physical reset failed");
                                }
                            }
                            Ok(Some(_)) => {}
                            Ok(None) | Err(_) => break,
                        }
                    }
                }
                Err(status) => {
                    if !reported_down {
                        tracing::info!(code = ?status.code(), "hw-agent events not available yet; retrying");
                        reported_down = true;
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff.next_delay()) => {}
                _ = shutdown.wait() => return,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_proto::hwagent::v1::{ButtonEvent, FaultEvent};

    #[test]
    fn only_the_reset_hold_counts() {
        let button = |held_ms, released, reset_hold| HwEvent {
            timestamp_ms: 0,
            event: Some(Event::Button(ButtonEvent {
                held_ms,
                released,
                reset_hold,
            })),
        };
        assert!(is_reset_hold(&button(15_000, false, true)));
        assert!(!is_reset_hold(&button(14_999, false, false)));
        assert!(!is_reset_hold(&button(16_000, true, false)));
        let fault = HwEvent {
            timestamp_ms: 0,
            event: Some(Event::Fault(FaultEvent::default())),
        };
        assert!(!is_reset_hold(&fault));
        assert!(!is_reset_hold(&HwEvent::default()));
    }
}
