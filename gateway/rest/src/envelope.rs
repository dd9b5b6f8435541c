//! The one error envelope `{error, detail?, code?, suggestion?}` and the layer that makes every
//! non-2xx response carry it.
//!
//! Handlers return [`ApiError`], which renders the envelope directly and marks the response so
//! the layer passes it through untouched. Anything else that is not a success (axum's 404, 405,
//! JSON rejections 400/415/422, 413 from the body limit, a panic-free plain-text error) is
//! rewritten by [`normalise`]: a non-empty foreign body is wrapped with `legacy_error`, an empty
//! one gets `unclassified_error`, and a body that cannot be read gets `error_body_unavailable`.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde::Serialize;
use serde_json::{Map, Value};
use tonic::Code;

/// The spec's fixed list of machine-readable error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The submitted configuration failed validation.
    ConfigValidation,
    /// Pool URL, worker name or failover split is malformed.
    PoolValidation,
    /// Pool configuration was valid but could not be persisted.
    PoolConfigWriteFailed,
    /// The write was computed from an older config generation; nothing changed.
    ConfigConflict,
    /// The underlying error body could not be read to normalise it.
    ErrorBodyUnavailable,
    /// An older-format error was wrapped into the envelope.
    LegacyError,
    /// A failure with no more specific code.
    UnclassifiedError,
}

impl ErrorCode {
    /// Every code, for the OpenAPI enum.
    pub const ALL: [ErrorCode; 7] = [
        ErrorCode::ConfigValidation,
        ErrorCode::PoolValidation,
        ErrorCode::PoolConfigWriteFailed,
        ErrorCode::ConfigConflict,
        ErrorCode::ErrorBodyUnavailable,
        ErrorCode::LegacyError,
        ErrorCode::UnclassifiedError,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ConfigValidation => "config_validation",
            ErrorCode::PoolValidation => "pool_validation",
            ErrorCode::PoolConfigWriteFailed => "pool_config_write_failed",
            ErrorCode::ConfigConflict => "config_conflict",
            ErrorCode::ErrorBodyUnavailable => "error_body_unavailable",
            ErrorCode::LegacyError => "legacy_error",
            ErrorCode::UnclassifiedError => "unclassified_error",
        }
    }
}

/// Marker put in the extensions of responses that already carry the envelope.
#[derive(Debug, Clone, Copy)]
struct Enveloped;

/// The `WWW-Authenticate` value the spec fixes for 401s.
pub const WWW_AUTHENTICATE: &str = "Bearer realm=\"svcrald\"";

/// An error answer: status, envelope members and the few headers errors need.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status (never 2xx).
    pub status: StatusCode,
    /// Human-readable message (always present).
    pub error: String,
    /// More context; omitted when empty.
    pub detail: String,
    /// Machine-readable code; omitted when `None`.
    pub code: Option<ErrorCode>,
    /// What the client could do; omitted when empty.
    pub suggestion: String,
    /// Documented extra members (`field`, `current_mode`, `required_mode`, `retry_after_s`).
    pub extra: Map<String, Value>,
    /// Extra headers (`WWW-Authenticate`, `Retry-After`, `Allow`).
    pub headers: HeaderMap,
}

impl ApiError {
    /// An error with a status and message.
    pub fn new(status: StatusCode, error: impl Into<String>) -> Self {
        ApiError {
            status,
            error: error.into(),
            detail: String::new(),
            code: None,
            suggestion: String::new(),
            extra: Map::new(),
            headers: HeaderMap::new(),
        }
    }

    /// Set `detail`.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    /// Set `code`.
    pub fn code(mut self, code: ErrorCode) -> Self {
        self.code = Some(code);
        self
    }

    /// Set `suggestion`.
    pub fn suggestion(mut self, suggestion: impl Into<String>) -> Self {
        self.suggestion = suggestion.into();
        self
    }

    /// Add a documented extra member.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_string(), value.into());
        self
    }

    /// Add a header.
    pub fn header(mut self, name: header::HeaderName, value: &str) -> Self {
        if let Ok(v) = HeaderValue::from_str(value) {
            self.headers.insert(name, v);
        }
        self
    }

    /// 422 `config_validation` naming the request member `field` and what it allows.
    pub fn invalid_field(field: &str, message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("invalid value for {field}"),
        )
        .code(ErrorCode::ConfigValidation)
        .detail(message)
        .suggestion("fix the named field and resend")
        .with("field", field)
    }

    /// 400 with `unclassified_error`.
    pub fn bad_request(error: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, error).code(ErrorCode::UnclassifiedError)
    }

    /// 401 with the spec's `WWW-Authenticate` header.
    pub fn unauthorized(error: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, error)
            .header(header::WWW_AUTHENTICATE, WWW_AUTHENTICATE)
            .suggestion(
                "POST /api/auth/session with the password, then send Authorization: Bearer <token>",
            )
    }

    /// 503: a peer service is not reachable right now.
    pub fn unavailable(service: &str) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{service} is not reachable right now"),
        )
        .code(ErrorCode::UnclassifiedError)
        .suggestion("retry in a few seconds; the supervisor restarts failed services")
        .header(header::RETRY_AFTER, "1")
    }

    /// 501 for a route whose feature has not landed yet.
    pub fn not_implemented(feature: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            format!("{feature} is not implemented in this build"),
        )
        .code(ErrorCode::UnclassifiedError)
        .detail("the route is mounted with its auth and mode rules; its behaviour lands with a later feature")
    }

    /// 500 with `unclassified_error`; the caller has logged the cause.
    pub fn internal(error: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error).code(ErrorCode::UnclassifiedError)
    }

    /// A gRPC failure from `service`, mapped by [`status_for_code`].
    pub fn from_grpc(service: &str, status: &tonic::Status) -> Self {
        if svcos_common::status::is_unavailable(status) {
            return ApiError::unavailable(service);
        }
        let http = status_for_code(status.code());
        // The marker of "the peer answered this itself" (status::is_unavailable) is not for users.
        let message = status.message();
        let message = message.strip_prefix("svcos: ").unwrap_or(message);
        let mut e = ApiError::new(http, message.to_string())
            .detail(format!("{service}: {:?}", status.code()));
        if let Some((field, rule)) = svcos_common::status::field_of(status) {
            // The owner's rule, in the same shape as the gateway's own field errors.
            e = ApiError::bad_request(format!("invalid value for {field}"))
                .detail(rule.to_string())
                .with("field", field);
        } else if status.code() == Code::Unimplemented {
            e = ApiError::not_implemented(&format!("this operation of {service}"));
        } else if http.is_server_error() {
            tracing::warn!(peer = service, code = ?status.code(), message = status.message(), "peer call failed");
            e = e.code(ErrorCode::UnclassifiedError);
        }
        e
    }

    /// The envelope body as JSON.
    pub fn body(&self) -> Value {
        let mut m = Map::new();
        m.insert("error".into(), Value::String(self.error.clone()));
        if !self.detail.is_empty() {
            m.insert("detail".into(), Value::String(self.detail.clone()));
        }
        if let Some(code) = self.code {
            m.insert("code".into(), Value::String(code.as_str().into()));
        }
        if !self.suggestion.is_empty() {
            m.insert("suggestion".into(), Value::String(self.suggestion.clone()));
        }
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body =
            serde_json::to_vec(&self.body()).unwrap_or_else(|_| b"{\"error\":\"error\"}".to_vec());
        let mut resp = Response::new(Body::from(body));
        *resp.status_mut() = self.status;
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        for (k, v) in &self.headers {
            headers.insert(k.clone(), v.clone());
        }
        resp.extensions_mut().insert(Enveloped);
        resp
    }
}

/// The one mapping from a gRPC status code to an HTTP status.
pub fn status_for_code(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::FailedPrecondition | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable | Code::Cancelled => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Largest foreign error body the layer reads to wrap it.
const MAX_FOREIGN_BODY: usize = 16 * 1024;

/// The layer function (used with `axum::middleware::map_response`): pass successes and
/// already-enveloped errors through; rewrite everything else into the envelope.
pub async fn normalise(resp: Response) -> Response {
    let status = resp.status();
    if status.is_success()
        || status.is_informational()
        || resp.extensions().get::<Enveloped>().is_some()
    {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let limited = http_body_util::Limited::new(body, MAX_FOREIGN_BODY);
    let mut err = match limited.collect().await {
        Ok(collected) => wrap_foreign(status, &collected.to_bytes()),
        Err(_) => ApiError::new(status, reason(status))
            .code(ErrorCode::ErrorBodyUnavailable)
            .detail("the original error body could not be read"),
    };
    for name in [header::ALLOW, header::WWW_AUTHENTICATE, header::RETRY_AFTER] {
        if let Some(v) = parts.headers.get(&name) {
            err.headers.insert(name, v.clone());
        }
    }
    if status == StatusCode::METHOD_NOT_ALLOWED
        && let Some(allow) = parts
            .headers
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok())
    {
        err.suggestion = format!("this path accepts: {allow}");
    }
    err.into_response()
}

/// Turn a foreign (non-envelope) error body into the envelope.
fn wrap_foreign(status: StatusCode, body: &[u8]) -> ApiError {
    let text = String::from_utf8_lossy(body).trim().to_string();
    if text.is_empty() {
        let mut e = ApiError::new(status, reason(status)).code(ErrorCode::UnclassifiedError);
        if status == StatusCode::NOT_FOUND {
            e = e.suggestion("GET /api/index lists the declared routes");
        }
        return e;
    }
    let parsed = serde_json::from_str::<Value>(&text);
    // Already the envelope (the MCP crate answers its own refusals with it): kept whole.
    if let Ok(Value::Object(obj)) = &parsed
        && let Some(Value::String(msg)) = obj.get("error")
        && let Some(code) = obj
            .get("code")
            .and_then(Value::as_str)
            .and_then(|c| ErrorCode::ALL.into_iter().find(|k| k.as_str() == c))
    {
        let mut e = ApiError::new(status, msg.clone()).code(code);
        for (k, v) in obj {
            match (k.as_str(), v) {
                ("error" | "code", _) => {}
                ("detail", Value::String(d)) => e.detail = d.clone(),
                ("suggestion", Value::String(s)) => e.suggestion = s.clone(),
                _ => e = e.with(k, v.clone()),
            }
        }
        return e;
    }
    // An older handler's `{"error": "..."}` keeps its message.
    if let Ok(Value::Object(obj)) = parsed
        && let Some(Value::String(msg)) = obj.get("error")
    {
        let detail = obj
            .get("detail")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return ApiError::new(status, msg.clone())
            .detail(detail)
            .code(ErrorCode::LegacyError);
    }
    let mut e = ApiError::new(status, reason(status))
        .detail(text)
        .code(ErrorCode::LegacyError);
    e.suggestion = match status {
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "send Content-Type: application/json".into(),
        StatusCode::PAYLOAD_TOO_LARGE => "send a smaller body ([api].max_body_bytes)".into(),
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => {
            "send a JSON body of the documented shape".into()
        }
        _ => String::new(),
    };
    e
}

/// A lowercase reason phrase for a status.
pub fn reason(status: StatusCode) -> String {
    status
        .canonical_reason()
        .unwrap_or("error")
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_members_are_omitted() {
        let v = ApiError::new(StatusCode::BAD_REQUEST, "x").body();
        assert_eq!(v, serde_json::json!({"error": "x"}));
        let v = ApiError::bad_request("x")
            .detail("d")
            .suggestion("s")
            .body();
        assert_eq!(
            v,
            serde_json::json!({"error": "x", "detail": "d", "code": "unclassified_error", "suggestion": "s"})
        );
    }

    #[test]
    fn grpc_codes_map_to_http() {
        let table = [
            (Code::InvalidArgument, 400),
            (Code::Unauthenticated, 401),
            (Code::PermissionDenied, 403),
            (Code::NotFound, 404),
            (Code::FailedPrecondition, 409),
            (Code::ResourceExhausted, 429),
            (Code::Internal, 500),
            (Code::Unimplemented, 501),
            (Code::Unavailable, 503),
            (Code::DeadlineExceeded, 504),
        ];
        for (code, http) in table {
            assert_eq!(status_for_code(code).as_u16(), http, "{code:?}");
        }
    }

    #[test]
    fn foreign_bodies_are_wrapped() {
        let e = wrap_foreign(StatusCode::UNPROCESSABLE_ENTITY, b"Failed to deserialize");
        assert_eq!(e.code, Some(ErrorCode::LegacyError));
        assert_eq!(e.detail, "Failed to deserialize");
        let e = wrap_foreign(StatusCode::NOT_FOUND, b"");
        assert_eq!(e.code, Some(ErrorCode::UnclassifiedError));
        let e = wrap_foreign(StatusCode::CONFLICT, br#"{"error":"old style"}"#);
        assert_eq!(e.error, "old style");
        assert_eq!(e.code, Some(ErrorCode::LegacyError));
        let e = wrap_foreign(
            StatusCode::BAD_REQUEST,
            br#"{"error":"bad","detail":"d","code":"unclassified_error","suggestion":"s","jsonrpc_code":-32700}"#,
        );
        assert_eq!(
            e.body(),
            serde_json::json!({"error": "bad", "detail": "d", "code": "unclassified_error", "suggestion": "s", "jsonrpc_code": -32700})
        );
    }
}
