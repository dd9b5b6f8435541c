//! Stratum V2 against the test pool's SV2 upstream (built from the SRI crates) over real TCP:
//! the production stratum-agent entry with `[stratum].sv2_enabled = true`, and a bare client
//! made of the library's Noise transport and the reference message types.

mod common;

use std::time::Duration;

use binary_sv2::{B032Owned, Str0255Owned, U256Owned};
use common::*;
use common_messages_sv2::{Protocol, SetupConnectionOwned};
use mining_sv2::{OpenExtendedMiningChannelOwned, SubmitSharesExtendedOwned};
use parsers_sv2::{AnyMessageOwned, CommonMessagesOwned, MiningOwned};
use svcos_common::config::PoolConfig;
use svcos_proto::stratum::v1 as pb;
use svcos_proto::testpool::v1::Behavior;
use svcos_stratum_agent::testpool::sv2::Authority;
use svcos_stratum_agent::v2::{frames, noise};

fn sv2_config(pools: Vec<PoolConfig>) -> svcos_common::config::Config {
    let mut c = config(pools);
    c.stratum.sv2_enabled = true;
    c
}

async fn sv2_status(agent: &mut Agent) -> pb::GetSv2StatusResponse {
    agent
        .client
        .get_sv2_status(pb::GetSv2StatusRequest {})
        .await
        .unwrap()
        .into_inner()
}

async fn wait_sv2(
    agent: &mut Agent,
    what: &str,
    pred: impl Fn(&pb::GetSv2StatusResponse) -> bool,
) -> pb::GetSv2StatusResponse {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = sv2_status(agent).await;
        if pred(&s) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}: {s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn mines_over_sv2_with_shares_verified_by_the_upstream() {
    let pool = Sv2Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let key = pool.authority.public_b58();
    let mut agent = Agent::start(
        dir.path(),
        &sv2_config(vec![pool.pool_config(&key, "sv2worker", 0)]),
    )
    .await;

    // Jobs reach the template stream in V1 shape: the channel's extranonce prefix as
    // extranonce1, the coinbase prefix/suffix as coinb1/coinb2, BIP 320 rolling allowed.
    let mut jobs = agent.jobs().await;
    let job = job_where(&mut jobs, |j| j.pool_index == 0).await;
    assert_eq!(job.extranonce1.len(), 4);
    assert_eq!(job.extranonce2_size, 4);
    assert_eq!(job.version_mask, 0x1fff_e000);
    assert!((job.share_difficulty - TEST_DIFFICULTY).abs() / TEST_DIFFICULTY < 1e-6);
    let p = agent.pools().await;
    assert_eq!(p.pools[0].protocol, "stratum2+tcp");

    let status = wait_sv2(&mut agent, "an open channel", |s| {
        s.channel_open && s.active
    })
    .await;
    assert!(status.enabled);
    assert_eq!(status.state, "channel_open");
    assert_eq!(status.handshake, "ok");
    assert_eq!(status.authority_pubkey, key);
    assert_eq!(status.authority_fingerprint.len(), 16);
    assert_eq!(status.protocol_version, 2);
    assert_eq!(status.channel_id, 1);
    assert_eq!(status.channel_type, "extended");
    assert_eq!(status.extranonce_prefix, hex::encode(&job.extranonce1));
    let types: Vec<&str> = status
        .messages
        .iter()
        .map(|m| m.message_type.as_str())
        .collect();
    for (i, t) in [
        "NoiseHandshake",
        "NoiseHandshake",
        "SetupConnection",
        "SetupConnectionSuccess",
        "OpenExtendedMiningChannel",
        "OpenExtendedMiningChannelSuccess",
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(types.get(i), Some(t), "message order: {types:?}");
    }
    // Message names are the reference parser's (it spells the mining SetNewPrevHash out).
    assert!(
        types.contains(&"NewExtendedMiningJob") && types.contains(&"SetNewPrevHashMiningProtocol"),
        "{types:?}"
    );

    // A valid share: submitted, verified by the upstream, counted as accepted on both sides.
    let share = mine(&job, 1, 0).await;
    assert_eq!(
        agent.submit(&share).await.unwrap(),
        pb::ShareDisposition::Submitted
    );
    agent
        .wait_pools("accepted share", |p| p.accepted == 1)
        .await;
    assert_eq!(pool.v1.pool.sv2_counts(), (1, 0));
    assert_eq!(pool.v1.pool.accepted("sv2worker"), 1);
    let status = wait_sv2(&mut agent, "the share answer", |s| s.shares_accepted == 1).await;
    assert!(
        status
            .messages
            .iter()
            .any(|m| m.direction == "in" && m.message_type == "SubmitSharesSuccess")
    );

    // A share the upstream refuses: its reason is counted like a V1 reject reason.
    pool.v1.pool.set_behavior(Behavior {
        reject_all: true,
        ..Default::default()
    });
    let share = mine(&job, 2, 0).await;
    assert_eq!(
        agent.submit(&share).await.unwrap(),
        pb::ShareDisposition::Submitted
    );
    let p = agent
        .wait_pools("rejected share", |p| p.rejected == 1)
        .await;
    assert_eq!(
        p.pools[0].reject_reasons.get("rejected-by-test-pool"),
        Some(&1)
    );
    assert_eq!(pool.v1.pool.sv2_counts(), (1, 1));
    let status = wait_sv2(&mut agent, "the reject", |s| s.shares_rejected == 1).await;
    assert!(status.last_error.contains("rejected-by-test-pool"));
    agent.stop().await;
}

#[tokio::test]
async fn a_wrong_authority_key_fails_the_handshake_and_v1_takes_over() {
    let pool = Sv2Pool::start().await;
    let impostor = Authority::generate().public_b58();
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(
        dir.path(),
        &sv2_config(vec![
            pool.pool_config(&impostor, "w", 0),
            pool.v1.pool_config("w", 1),
        ]),
    )
    .await;
    let status = wait_sv2(&mut agent, "a failed handshake", |s| {
        s.handshake == "failed"
    })
    .await;
    assert!(
        status
            .handshake_detail
            .contains("not signed by authority key"),
        "{status:#?}"
    );
    assert!(status.last_error.contains(&impostor), "{status:#?}");
    assert!(!status.channel_open);
    // Failover treats it like any dead pool: the V1 pool further down the list mines.
    let p = agent
        .wait_pools("V1 pool active", |p| p.active_index == 1)
        .await;
    assert!(
        p.pools[0]
            .last_error
            .contains("not signed by authority key")
    );
    assert_eq!(pool.v1.pool.sv2_counts(), (0, 0));
    agent.stop().await;
}

#[tokio::test]
async fn the_gate_off_skips_sv2_pools() {
    let pool = Sv2Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let key = pool.authority.public_b58();
    let mut agent = Agent::start(
        dir.path(),
        &config(vec![
            pool.pool_config(&key, "w", 0),
            pool.v1.pool_config("w", 1),
        ]),
    )
    .await;
    let p = agent
        .wait_pools("V1 pool active", |p| p.active_index == 1)
        .await;
    assert!(p.pools[0].last_error.contains("readiness gate"));
    let s = sv2_status(&mut agent).await;
    assert!(!s.enabled);
    assert_eq!(s.state, "disabled");
    agent.stop().await;
}

/// A bare client on the library's Noise transport and the reference message types, so the
/// upstream's verdict on a bad share is seen directly.
#[tokio::test]
async fn the_upstream_verifies_shares_by_sha256d_against_the_target() {
    let pool = Sv2Pool::start().await;
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", pool.port))
        .await
        .unwrap();
    let (r, w) = stream.into_split();
    let key = svcos_stratum_agent::v2::parse_authority_key(&pool.authority.public_b58()).unwrap();
    let (mut reader, mut writer) = noise::initiate(r, w, key, "k", WAIT).await.unwrap();
    let mut send =
        async |m: AnyMessageOwned| writer.send(&frames::encode(m).unwrap()).await.unwrap();
    send(AnyMessageOwned::Common(
        CommonMessagesOwned::SetupConnection(SetupConnectionOwned {
            protocol: Protocol::MiningProtocol,
            min_version: 2,
            max_version: 2,
            flags: 0,
            endpoint_host: Str0255Owned::try_from("127.0.0.1").unwrap(),
            endpoint_port: pool.port,
            vendor: Str0255Owned::try_from("test").unwrap(),
            hardware_version: Str0255Owned::try_from("").unwrap(),
            firmware: Str0255Owned::try_from("").unwrap(),
            device_id: Str0255Owned::try_from("").unwrap(),
        }),
    ))
    .await;
    send(AnyMessageOwned::Mining(
        MiningOwned::OpenExtendedMiningChannel(OpenExtendedMiningChannelOwned {
            request_id: 7,
            user_identity: Str0255Owned::try_from("bare").unwrap(),
            nominal_hash_rate: 1.0,
            max_target: U256Owned::from([0xff; 32]),
            min_extranonce_size: 4,
        }),
    ))
    .await;
    // Read until a job is active: the future job plus its SetNewPrevHash.
    let (job_id, ntime) = loop {
        let frame = tokio::time::timeout(WAIT, reader.next())
            .await
            .unwrap()
            .unwrap();
        if let AnyMessageOwned::Mining(MiningOwned::SetNewPrevHash(p)) =
            frames::decode(&frame).unwrap()
        {
            break (p.job_id, p.min_ntime);
        }
    };
    // Nonce 0 with this coinbase is (all but surely) far above the target.
    let submit = |sequence_number, nonce| {
        AnyMessageOwned::Mining(MiningOwned::SubmitSharesExtended(
            SubmitSharesExtendedOwned {
                channel_id: 1,
                sequence_number,
                job_id,
                nonce,
                ntime,
                version: 0x2000_0000,
                extranonce: B032Owned::new(vec![0, 0, 0, 9]).unwrap(),
            },
        ))
    };
    send(submit(0, 0)).await;
    let mut answer = None;
    while answer.is_none() {
        let frame = tokio::time::timeout(WAIT, reader.next())
            .await
            .unwrap()
            .unwrap();
        match frames::decode(&frame).unwrap() {
            AnyMessageOwned::Mining(MiningOwned::SubmitSharesError(e)) => {
                answer = Some(e.error_code.as_utf8_or_hex());
            }
            AnyMessageOwned::Mining(MiningOwned::SubmitSharesSuccess(_)) => {
                panic!("a share with nonce 0 should not meet the target")
            }
            _ => {}
        }
    }
    assert_eq!(answer.as_deref(), Some("difficulty-too-low"));
    assert_eq!(pool.v1.pool.sv2_counts(), (0, 1));
    assert_eq!(pool.v1.pool.rejected("bare"), 1);
}

#[tokio::test]
async fn pool_test_runs_the_sv2_steps_and_names_a_wrong_key() {
    let pool = Sv2Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &sv2_config(vec![pool.v1.pool_config("w", 0)])).await;
    let test = |url: String| pb::TestPoolRequest {
        url,
        user: "tester".into(),
        password: String::new(),
        timeout_ms: 20_000,
    };
    let r = agent
        .client
        .test_pool(test(pool.url_with(&pool.authority.public_b58())))
        .await
        .unwrap()
        .into_inner();
    assert!(r.ok, "{r:#?}");
    let names: Vec<&str> = r.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["connect", "handshake", "setup", "open_channel", "job"]
    );

    let r = agent
        .client
        .test_pool(test(pool.url_with(&Authority::generate().public_b58())))
        .await
        .unwrap()
        .into_inner();
    assert!(!r.ok);
    let last = r.steps.last().unwrap();
    assert_eq!(last.name, "handshake");
    assert!(last.error.contains("not signed by authority key"), "{r:#?}");
    agent.stop().await;
}
