//! `stratum+ssl://`: rustls against a TLS front (a test CA, via `[stratum].tls_ca_file`) that
//! forwards to the plain test pool; without the CA the certificate is refused.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::*;
use pb::ShareDisposition as D;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use svcos_proto::stratum::v1 as pb;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A TLS terminator on a loopback port in front of `backend_port`.
async fn tls_front(backend_port: u16) -> u16 {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(fixture("server.pem"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(fixture("server.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) =
                    tokio::net::TcpStream::connect(("127.0.0.1", backend_port)).await
                else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    port
}

#[tokio::test]
async fn mines_over_tls_with_a_custom_ca_and_refuses_an_unknown_issuer() {
    let pool = Pool::start().await;
    let port = tls_front(pool.port).await;
    let mut pool_cfg = pool.pool_config("tls-worker", 0);
    pool_cfg.url = format!("stratum+ssl://localhost:{port}");

    // Without the test CA: the webpki roots do not know it.
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &config(vec![pool_cfg.clone()])).await;
    let p = agent
        .wait_pools("tls failure", |p| p.pools[0].last_error.contains("tls"))
        .await;
    assert_ne!(p.pools[0].state, pb::PoolState::Alive as i32);
    assert_eq!(
        pool.pool.stats().connections_total,
        0,
        "nothing got past the TLS front"
    );
    agent.stop().await;

    let mut cfg = config(vec![pool_cfg]);
    cfg.stratum.tls_ca_file = fixture("ca.pem").display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &cfg).await;
    let mut jobs = agent.jobs().await;
    let job = next_job(&mut jobs).await;
    assert_eq!(
        agent.submit(&mine(&job, 1, 0).await).await.unwrap(),
        D::Submitted
    );
    wait_until("accepted over tls", || async {
        pool.pool.accepted("tls-worker") == 1
    })
    .await;
    assert_eq!(agent.pools().await.pools[0].protocol, "stratum+ssl");
    agent.stop().await;
}
