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
    Status::internal(format!("{context}: {}", redact_paths(&err.to_string())))
}

/// The words of an error without the file system paths in it: a client (and the HTTP caller
/// behind the gateway) learns what failed, the log keeps where.
pub fn redact_paths(message: &str) -> String {
    message
        .split(' ')
        .map(|word| {
            let bare = word.trim_start_matches(['\'', '"', '(', '`']);
            if bare.starts_with('/') && bare.len() > 1 {
                let quote: String = word[..word.len() - bare.len()].into();
                let tail: String = bare
                    .chars()
                    .rev()
                    .take_while(|c| matches!(c, '\'' | '"' | ')' | '`' | ':' | ',' | '.'))
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                format!("{quote}<path>{tail}")
            } else {
                word.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether a status means "the peer is not there right now" (restarting, socket missing,
/// deadline passed) rather than "the peer said no".
pub fn is_unavailable(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
    ) && !status.message().starts_with("svcos:")
}

/// The metadata key of [`invalid_field`]: which request field an `INVALID_ARGUMENT` names.
pub const FIELD_METADATA: &str = "svcos-field";

/// `INVALID_ARGUMENT` naming the offending field, so each front (REST's `field`, cgminer's
/// STATUS=E text, an MQTT command result) reports the owner's own rule without restating it.
pub fn invalid_field(field: &str, message: impl std::fmt::Display) -> Status {
    let mut s = Status::invalid_argument(format!("{field}: {message}"));
    if let Ok(v) = field.parse() {
        s.metadata_mut().insert(FIELD_METADATA, v);
    }
    s
}

/// The field an `INVALID_ARGUMENT` from [`invalid_field`] names, and the rule without the
/// field's name in front.
pub fn field_of(status: &Status) -> Option<(&str, &str)> {
    if status.code() != Code::InvalidArgument {
        return None;
    }
    let field = status.metadata().get(FIELD_METADATA)?.to_str().ok()?;
    let message = status.message();
    let rule = message
        .strip_prefix(field)
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or(message);
    Some((field, rule))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_error_names_its_field_and_rule() {
        let s = invalid_field("pwm_percent", "manual mode needs 1-100");
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(s.message(), "pwm_percent: manual mode needs 1-100");
        assert_eq!(
            field_of(&s),
            Some(("pwm_percent", "manual mode needs 1-100"))
        );
        assert_eq!(field_of(&Status::invalid_argument("x")), None);
        assert_eq!(field_of(&Status::not_found("pwm_percent: x")), None);
    }

    #[test]
    fn paths_leave_client_messages_but_the_words_stay() {
        assert_eq!(
            redact_paths("open '/var/lib/svcos/tuner/settings.json': permission denied"),
            "open '<path>': permission denied"
        );
        assert_eq!(
            redact_paths("cannot write /data/state/x.tmp: No space left on device"),
            "cannot write <path>: No space left on device"
        );
        assert_eq!(
            redact_paths("disk full (os error 28)"),
            "disk full (os error 28)"
        );
        assert_eq!(redact_paths("a / b"), "a / b");
    }
}
