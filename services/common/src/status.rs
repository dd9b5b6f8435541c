//! From a service's error to a typed gRPC status, and back to words for HTTP.
//!
//! Each service implements [`ToStatus`] on its error enum with one exhaustive `match`; the client
//! sees a clear message while the full chain goes to the log.

use tonic::{Code, Status};

/// One exhaustive mapping from a service's errors to gRPC codes.
pub trait ToStatus {
    /// The status a client should see.
    fn to_status(&self) -> Status;
}

/// Log the full error chain and return an INTERNAL status with a short message.
pub fn internal(context: &str, err: &(dyn std::error::Error + 'static)) -> Status {
    let mut chain = err.to_string();
    let mut src = err.source();
    while let Some(s) = src {
        chain.push_str(": ");
        chain.push_str(&s.to_string());
        src = s.source();
    }
    tracing::error!(error = %chain, "{context}");
    Status::internal(format!("{context}: {err}"))
}

/// Whether a status means "the peer is not there right now" (restarting, socket missing,
/// deadline passed) rather than "the peer said no".
pub fn is_unavailable(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
    ) && !status.message().starts_with("svcos:")
}
