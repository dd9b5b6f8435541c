//! gRPC server reflection (v1 and v1alpha) on every service socket, so `grpcurl` and grpc-python
//! can list and call a service with no `.proto` files at hand.
//!
//! The descriptors are the ones the IPC contract is compiled from (`svcos_proto::file_descriptor_set`,
//! made by protox) plus grpc.health.v1. Each socket lists only what its process serves
//! ([`ServiceName::grpc_services`]). The reflection state (every descriptor decoded into maps) is
//! built on the first reflection call, not at start: eight processes would otherwise each keep a
//! decoded copy, twice, for a request an admin makes now and then.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::transport::server::Router;
use tower::Service;

use crate::ServiceName;

/// The health service's name, listed on every socket.
const HEALTH: &str = "grpc.health.v1.Health";

/// Add reflection v1 and v1alpha to a service's router, listing health and `service`'s own gRPC
/// services (only health when the socket is not a known service's).
pub fn add_to(router: Router, service: Option<ServiceName>) -> Router {
    let names = service.map_or(&[][..], ServiceName::grpc_services);
    router
        .add_service(Lazy::new(move || {
            builder(names)
                .build_v1()
                .expect("the compiled descriptor sets decode")
        }))
        .add_service(Lazy::new(move || {
            builder(names)
                .build_v1alpha()
                .expect("the compiled descriptor sets decode")
        }))
}

fn builder(names: &'static [&'static str]) -> tonic_reflection::server::Builder<'static> {
    let mut b = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(svcos_proto::file_descriptor_set())
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .with_service_name(HEALTH);
    for name in names {
        b = b.with_service_name(*name);
    }
    b
}

/// A gRPC service built on its first request.
struct Lazy<S> {
    built: Arc<OnceLock<S>>,
    make: Arc<dyn Fn() -> S + Send + Sync>,
}

impl<S> Clone for Lazy<S> {
    fn clone(&self) -> Self {
        Lazy {
            built: self.built.clone(),
            make: self.make.clone(),
        }
    }
}

impl<S> Lazy<S> {
    fn new(make: impl Fn() -> S + Send + Sync + 'static) -> Self {
        Lazy {
            built: Arc::new(OnceLock::new()),
            make: Arc::new(make),
        }
    }
}

impl<S: NamedService> NamedService for Lazy<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for Lazy<S>
where
    S: Service<http::Request<Body>, Error = Infallible> + Clone,
{
    type Response = S::Response;
    type Error = Infallible;
    type Future = S::Future;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // tonic's generated servers are always ready; the real one is polled in `call`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let mut service = self.built.get_or_init(|| (self.make)()).clone();
        service.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_service_socket_builds_its_reflection() {
        for name in ServiceName::ALL {
            builder(name.grpc_services()).build_v1().unwrap();
            builder(name.grpc_services()).build_v1alpha().unwrap();
        }
    }

    #[test]
    fn every_listed_service_is_in_the_descriptor_set() {
        use prost::Message;
        let fds =
            prost_types::FileDescriptorSet::decode(svcos_proto::file_descriptor_set()).unwrap();
        let mut known = Vec::new();
        for file in &fds.file {
            for s in &file.service {
                known.push(format!("{}.{}", file.package(), s.name()));
            }
        }
        for name in ServiceName::ALL {
            for s in name.grpc_services() {
                assert!(
                    known.iter().any(|k| k == s),
                    "{s} not in the descriptor set"
                );
            }
        }
        assert!(
            fds.file.iter().all(|f| f.source_code_info.is_none()),
            "source info is left out"
        );
    }
}
