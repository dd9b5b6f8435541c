//! The test pool's job-declaration server and template provider, on its SV2 port (a connection
//! says which role it wants in SetupConnection's protocol field), built from the reference
//! crates' Job Declaration and Template Distribution messages. No bitcoind: the template
//! provider owns a regtest-like chain, the pool's own block sequence (same previous hash and
//! height as the pool's jobs), with a few synthetic legacy transactions per block whose txids
//! are real hashes of real serialised transactions. The server knows all but the last of them
//! (its "mempool"), so every declaration also exercises ProvideMissingTransactions, and it
//! checks what it is given: tokens, that the coinbase pays the pool, and that each provided
//! transaction is the one the declared wtxid names. The mining side then accepts
//! SetCustomMiningJob only for a declared token whose coinbase and merkle path match
//! (`sv2.rs`), and counts shares on declared jobs apart.

use std::collections::HashMap;
use std::sync::Arc;

use binary_sv2::{B016MOwned, B064KOwned, B0255Owned, Seq064KOwned, Seq0255Owned, U256Owned};
use bitcoin::consensus::{deserialize, serialize};
use bitcoin::hashes::Hash;
use bitcoin::{
    Amount, OutPoint, ScriptBuf, Sequence, Transaction, TxIn, TxOut, Txid, Witness, absolute,
    transaction,
};
use common_messages_sv2::{SetupConnectionOwned, SetupConnectionSuccess};
use job_declaration_sv2::{
    AllocateMiningJobTokenSuccessOwned, DeclareMiningJobErrorOwned, DeclareMiningJobOwned,
    DeclareMiningJobSuccessOwned, ProvideMissingTransactionsOwned,
};
use parsers_sv2::{
    AnyMessageOwned, CommonMessagesOwned, JobDeclarationOwned, TemplateDistributionOwned,
};
use svcos_common::Shutdown;
use template_distribution_sv2::{
    NewTemplateOwned, RequestTransactionDataErrorOwned, RequestTransactionDataSuccessOwned,
    SetNewPrevHashOwned,
};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{broadcast, mpsc};

use super::{Broadcast, JOB_NBITS, JOB_VERSION, TestPool};
use crate::jd::coinbase::{self, CoinbaseFields};
use crate::jd::text;
use crate::v2::frames::difficulty_to_target;
use crate::v2::noise::FrameWriter;
use crate::v2::session::PROTOCOL_VERSION;

/// Synthetic transactions in each block's template.
const TEMPLATE_TXS: usize = 3;
/// Block subsidy (regtest after two halvings would differ; the pool's own jobs pay this).
const SUBSIDY_SAT: u64 = 312_500_000;

/// What the pool remembers of one declared job.
#[derive(Debug, Clone)]
pub(super) struct Declared {
    txids: Vec<[u8; 32]>,
    prefix: Vec<u8>,
    suffix: Vec<u8>,
}

/// Job-declaration state shared by the server and the mining side.
#[derive(Debug, Default)]
pub(super) struct JdState {
    next_token: u64,
    allocated: std::collections::HashSet<Vec<u8>>,
    declared: HashMap<Vec<u8>, Declared>,
    /// Jobs set with SetCustomMiningJob, by the job id shares carry (hex, like pool jobs).
    pub(super) custom_jobs: HashMap<String, Arc<super::PoolJob>>,
    next_custom_job: u32,
    pub(super) stats: svcos_proto::testpool::v1::JdStats,
}

impl JdState {
    /// A new block makes every declared job stale.
    pub(super) fn new_block(&mut self) {
        self.declared.clear();
        self.custom_jobs.clear();
    }
}

/// One block's template.
#[derive(Debug, Clone)]
pub(super) struct Template {
    id: u64,
    height: u64,
    prev_hash: [u8; 32],
    ntime: u32,
    txs: Vec<Transaction>,
    fees: u64,
}

/// The previous hash of the pool's block at `height` (what its own jobs build on).
fn tip(height: u64) -> [u8; 32] {
    coinbase::sha256d(format!("testpool-block-{height}").as_bytes())
}

/// The pool's payout script (what its own jobs pay, and what the server adds to declared ones).
pub(super) fn payout_script() -> ScriptBuf {
    let mut s = vec![0x76, 0xa9, 0x14];
    s.extend_from_slice(&coinbase::sha256d(b"testpool-payout")[..20]);
    s.extend_from_slice(&[0x88, 0xac]);
    ScriptBuf::from_bytes(s)
}

impl Template {
    fn merkle_path(&self) -> Vec<[u8; 32]> {
        let txids: Vec<[u8; 32]> = self
            .txs
            .iter()
            .map(|t| t.compute_txid().to_byte_array())
            .collect();
        coinbase::merkle_path(&txids)
    }

    /// BIP 34 height push: what the scriptSig starts with.
    fn script_prefix(&self) -> Vec<u8> {
        let mut p = vec![3];
        p.extend_from_slice(&(self.height as u32).to_le_bytes()[..3]);
        p
    }

    fn messages(&self) -> Vec<AnyMessageOwned> {
        let new = NewTemplateOwned {
            template_id: self.id,
            future_template: true,
            version: JOB_VERSION,
            coinbase_tx_version: 2,
            coinbase_prefix: B0255Owned::new(self.script_prefix()).expect("4 bytes"),
            coinbase_tx_input_sequence: u32::MAX,
            coinbase_tx_value_remaining: SUBSIDY_SAT + self.fees,
            coinbase_tx_outputs_count: 0,
            coinbase_tx_outputs: B064KOwned::new(Vec::new()).expect("empty"),
            coinbase_tx_locktime: 0,
            merkle_path: Seq0255Owned::new(
                self.merkle_path()
                    .into_iter()
                    .map(U256Owned::from)
                    .collect(),
            )
            .expect("short path"),
        };
        let prev = SetNewPrevHashOwned {
            template_id: self.id,
            prev_hash: U256Owned::from(self.prev_hash),
            header_timestamp: self.ntime,
            n_bits: JOB_NBITS,
            target: U256Owned::from(difficulty_to_target(1.0)),
        };
        vec![
            AnyMessageOwned::TemplateDistribution(TemplateDistributionOwned::NewTemplate(new)),
            AnyMessageOwned::TemplateDistribution(TemplateDistributionOwned::SetNewPrevHash(prev)),
        ]
    }
}

impl TestPool {
    /// The current block's template: the tip the pool's clean job builds on.
    pub(super) fn template(&self) -> Option<Template> {
        let inner = self.lock();
        let height = inner.height;
        // The earliest job of the block sets the time (updates within it only move forward).
        let ntime = inner.jobs.iter().map(|j| j.ntime).min()?;
        let txs = (0..TEMPLATE_TXS)
            .map(|i| Transaction {
                version: transaction::Version::TWO,
                lock_time: absolute::LockTime::ZERO,
                input: vec![TxIn {
                    previous_output: OutPoint {
                        txid: Txid::from_byte_array(coinbase::sha256d(
                            format!("testpool-utxo-{height}-{i}").as_bytes(),
                        )),
                        vout: 0,
                    },
                    script_sig: ScriptBuf::new(),
                    sequence: Sequence::MAX,
                    witness: Witness::new(),
                }],
                output: vec![TxOut {
                    value: Amount::from_sat(50_000 * (i as u64 + 1)),
                    script_pubkey: ScriptBuf::from_bytes(vec![0x51]),
                }],
            })
            .collect();
        Some(Template {
            id: height,
            height,
            prev_hash: tip(height),
            ntime,
            txs,
            // 1 000 sat per transaction (the synthetic inputs' values are not modelled).
            fees: 1_000 * TEMPLATE_TXS as u64,
        })
    }

    /// The mining side's check of SetCustomMiningJob: the job for `token` as a pool job with a
    /// fresh id, or the SV2 error code.
    #[allow(clippy::too_many_arguments)] // SetCustomMiningJob's fields, checked one by one
    pub(super) fn custom_job(
        &self,
        token: &[u8],
        fields: &CoinbaseFields,
        prev_hash: [u8; 32],
        version: u32,
        nbits: u32,
        min_ntime: u32,
        merkle_path: &[[u8; 32]],
    ) -> Result<u32, &'static str> {
        let extranonce_len = super::EXTRANONCE1_LEN + self.settings.extranonce2_size;
        let mut inner = self.lock();
        let Some(declared) = inner.jd.declared.get(token).cloned() else {
            return Err("invalid-mining-job-token");
        };
        if tip(inner.height) != prev_hash {
            return Err("stale-prev-hash");
        }
        if version != JOB_VERSION || nbits != JOB_NBITS {
            return Err("invalid-job-param");
        }
        if coinbase::merkle_path(&declared.txids) != merkle_path {
            return Err("invalid-merkle-path");
        }
        match fields.split(extranonce_len) {
            Ok((p, s)) if p == declared.prefix && s == declared.suffix => {}
            _ => return Err("coinbase-differs-from-declared"),
        }
        inner.jd.next_custom_job += 1;
        let id = 0x4000_0000 + inner.jd.next_custom_job;
        let job = super::PoolJob {
            id: format!("{id:x}"),
            prev_hash,
            coinb1: declared.prefix,
            coinb2: declared.suffix,
            merkle_branch: merkle_path.to_vec(),
            ntime: min_ntime,
            clean: true,
        };
        inner.jd.custom_jobs.insert(job.id.clone(), Arc::new(job));
        inner.jd.stats.custom_jobs_set += 1;
        Ok(id)
    }
}

fn success(setup: &SetupConnectionOwned) -> Result<AnyMessageOwned, String> {
    if !(setup.min_version..=setup.max_version).contains(&PROTOCOL_VERSION) {
        return Err("protocol-version-mismatch".into());
    }
    Ok(AnyMessageOwned::Common(
        CommonMessagesOwned::SetupConnectionSuccess(SetupConnectionSuccess {
            used_version: PROTOCOL_VERSION,
            flags: 0,
        }),
    ))
}

async fn send(
    writer: &mut FrameWriter<OwnedWriteHalf>,
    messages: Vec<AnyMessageOwned>,
) -> Result<(), String> {
    for m in messages {
        let bytes = crate::v2::frames::encode(m).map_err(|e| e.to_string())?;
        writer.send(&bytes).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Serve one template-provider connection whose SetupConnection was `setup`.
pub(super) async fn template_provider(
    pool: &Arc<TestPool>,
    setup: SetupConnectionOwned,
    mut frames: mpsc::Receiver<Vec<u8>>,
    mut writer: FrameWriter<OwnedWriteHalf>,
    shutdown: Shutdown,
) -> Result<(), String> {
    let mut blocks = pool.tx.subscribe();
    send(&mut writer, vec![success(&setup)?]).await?;
    let mut constrained = false;
    loop {
        let out = tokio::select! {
            frame = frames.recv() => {
                let Some(frame) = frame else { return Ok(()) };
                match crate::jd::decode(&frame).map_err(|e| e.to_string())? {
                    AnyMessageOwned::TemplateDistribution(
                        TemplateDistributionOwned::CoinbaseOutputConstraints(_),
                    ) => {
                        // Templates follow the constraints (the outputs fit: there are none).
                        constrained = true;
                        pool.template().map(|t| t.messages()).unwrap_or_default()
                    }
                    AnyMessageOwned::TemplateDistribution(
                        TemplateDistributionOwned::RequestTransactionData(r),
                    ) => match pool.template().filter(|t| t.id == r.template_id) {
                        Some(t) => vec![AnyMessageOwned::TemplateDistribution(
                            TemplateDistributionOwned::RequestTransactionDataSuccess(
                                RequestTransactionDataSuccessOwned {
                                    template_id: t.id,
                                    excess_data: B064KOwned::new(Vec::new()).expect("empty"),
                                    transaction_list: Seq064KOwned::new(
                                        t.txs
                                            .iter()
                                            .map(|tx| B016MOwned::new(serialize(tx)).expect("small"))
                                            .collect(),
                                    )
                                    .expect("few"),
                                },
                            ),
                        )],
                        None => vec![AnyMessageOwned::TemplateDistribution(
                            TemplateDistributionOwned::RequestTransactionDataError(
                                RequestTransactionDataErrorOwned {
                                    template_id: r.template_id,
                                    error_code: text("template-id-not-found"),
                                },
                            ),
                        )],
                    },
                    _ => vec![],
                }
            }
            msg = blocks.recv() => match msg {
                Ok(Broadcast::Job(job)) if job.clean && constrained => {
                    pool.template().map(|t| t.messages()).unwrap_or_default()
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => vec![],
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
            _ = shutdown.wait() => return Ok(()),
        };
        let templates = out
            .iter()
            .filter(|m| {
                matches!(
                    m,
                    AnyMessageOwned::TemplateDistribution(TemplateDistributionOwned::NewTemplate(
                        _
                    ))
                )
            })
            .count() as u64;
        pool.lock().jd.stats.templates_sent += templates;
        send(&mut writer, out).await?;
    }
}

/// A declaration waiting for the transactions the server asked for.
struct Pending {
    declare: DeclareMiningJobOwned,
    txs: Vec<Option<Transaction>>,
}

/// Serve one job-declaration-server connection whose SetupConnection was `setup`.
pub(super) async fn declaration_server(
    pool: &Arc<TestPool>,
    setup: SetupConnectionOwned,
    mut frames: mpsc::Receiver<Vec<u8>>,
    mut writer: FrameWriter<OwnedWriteHalf>,
    shutdown: Shutdown,
) -> Result<(), String> {
    send(&mut writer, vec![success(&setup)?]).await?;
    let mut pending: Option<Pending> = None;
    loop {
        let frame = tokio::select! {
            f = frames.recv() => match f { Some(f) => f, None => return Ok(()) },
            _ = shutdown.wait() => return Ok(()),
        };
        let out = match crate::jd::decode(&frame).map_err(|e| e.to_string())? {
            AnyMessageOwned::JobDeclaration(JobDeclarationOwned::AllocateMiningJobToken(a)) => {
                let token = {
                    let mut inner = pool.lock();
                    inner.jd.next_token += 1;
                    inner.jd.stats.tokens_allocated += 1;
                    let token = format!("token-{}", inner.jd.next_token).into_bytes();
                    inner.jd.allocated.insert(token.clone());
                    token
                };
                let outputs = coinbase::encode_outputs(&[TxOut {
                    value: Amount::ZERO,
                    script_pubkey: payout_script(),
                }]);
                vec![JobDeclarationOwned::AllocateMiningJobTokenSuccess(
                    AllocateMiningJobTokenSuccessOwned {
                        request_id: a.request_id,
                        mining_job_token: B0255Owned::new(token).expect("short"),
                        coinbase_outputs: B064KOwned::new(outputs).expect("short"),
                    },
                )]
            }
            AnyMessageOwned::JobDeclaration(JobDeclarationOwned::DeclareMiningJob(d)) => {
                let (out, waiting) = declare(pool, d);
                pending = waiting;
                out
            }
            AnyMessageOwned::JobDeclaration(
                JobDeclarationOwned::ProvideMissingTransactionsSuccess(p),
            ) => match pending.take() {
                Some(mut waiting) if waiting.declare.request_id == p.request_id => {
                    let mut provided = p.transaction_list.into_inner().into_iter();
                    for slot in waiting.txs.iter_mut().filter(|t| t.is_none()) {
                        *slot = provided
                            .next()
                            .and_then(|raw| deserialize::<Transaction>(&raw.into_bytes()).ok());
                    }
                    finish(pool, waiting)
                }
                _ => vec![],
            },
            _ => vec![],
        };
        send(
            &mut writer,
            out.into_iter()
                .map(AnyMessageOwned::JobDeclaration)
                .collect(),
        )
        .await?;
    }
}

fn refuse(pool: &TestPool, request_id: u32, code: &str) -> Vec<JobDeclarationOwned> {
    pool.lock().jd.stats.declarations_refused += 1;
    vec![JobDeclarationOwned::DeclareMiningJobError(
        DeclareMiningJobErrorOwned {
            request_id,
            error_code: text(code),
            error_details: B064KOwned::new(Vec::new()).expect("empty"),
        },
    )]
}

/// Check a declaration; ask for the transactions the "mempool" lacks.
fn declare(
    pool: &TestPool,
    d: DeclareMiningJobOwned,
) -> (Vec<JobDeclarationOwned>, Option<Pending>) {
    let token = d.mining_job_token.to_owned_bytes();
    if !pool.lock().jd.allocated.remove(&token) {
        return (refuse(pool, d.request_id, "invalid-mining-job-token"), None);
    }
    if pool.behavior().refuse_job_declarations {
        return (refuse(pool, d.request_id, "refused-by-test-pool"), None);
    }
    let suffix = d.coinbase_tx_suffix.to_owned_bytes();
    let script = payout_script();
    if !suffix.windows(script.len()).any(|w| w == script.as_bytes()) {
        return (
            refuse(pool, d.request_id, "coinbase-does-not-pay-pool"),
            None,
        );
    }
    // The mempool: every template transaction but the newest.
    let mempool: HashMap<[u8; 32], Transaction> = pool
        .template()
        .map(|t| {
            let known = t.txs.len().saturating_sub(1);
            t.txs
                .into_iter()
                .take(known)
                .map(|tx| (tx.compute_wtxid().to_byte_array(), tx))
                .collect()
        })
        .unwrap_or_default();
    let txs: Vec<Option<Transaction>> = d
        .wtxid_list
        .clone()
        .into_inner()
        .into_iter()
        .map(|w| mempool.get(&w.to_array()).cloned())
        .collect();
    let missing: Vec<u16> = (0..txs.len())
        .filter(|&i| txs[i].is_none())
        .map(|i| i as u16)
        .collect();
    let waiting = Pending { declare: d, txs };
    if missing.is_empty() {
        return (finish(pool, waiting), None);
    }
    pool.lock().jd.stats.missing_transactions_requested += missing.len() as u64;
    let ask = JobDeclarationOwned::ProvideMissingTransactions(ProvideMissingTransactionsOwned {
        request_id: waiting.declare.request_id,
        unknown_tx_position_list: Seq064KOwned::new(missing).expect("few"),
    });
    (vec![ask], Some(waiting))
}

/// Every transaction is known: check each is the one its wtxid names, then accept.
fn finish(pool: &TestPool, waiting: Pending) -> Vec<JobDeclarationOwned> {
    let d = waiting.declare;
    let wtxids = d.wtxid_list.clone().into_inner();
    let mut txids = Vec::with_capacity(wtxids.len());
    for (tx, wtxid) in waiting.txs.iter().zip(wtxids) {
        match tx {
            Some(tx) if tx.compute_wtxid().to_byte_array() == wtxid.to_array() => {
                txids.push(tx.compute_txid().to_byte_array());
            }
            _ => return refuse(pool, d.request_id, "invalid-transaction"),
        }
    }
    let mut inner = pool.lock();
    inner.jd.next_token += 1;
    let token = format!("declared-{}", inner.jd.next_token).into_bytes();
    inner.jd.declared.insert(
        token.clone(),
        Declared {
            txids,
            prefix: d.coinbase_tx_prefix.to_owned_bytes(),
            suffix: d.coinbase_tx_suffix.to_owned_bytes(),
        },
    );
    inner.jd.stats.jobs_declared += 1;
    vec![JobDeclarationOwned::DeclareMiningJobSuccess(
        DeclareMiningJobSuccessOwned {
            request_id: d.request_id,
            new_mining_job_token: B0255Owned::new(token).expect("short"),
        },
    )]
}
