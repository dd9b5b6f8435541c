//! Hashprice arithmetic (pure): expected revenue of one unit of hashrate per day.
//!
//! One TH/s tries 10^12 × 86 400 hashes a day; a block needs difficulty × 2^32 hashes on
//! average, so a TH/s finds `86 400 × 10^12 / (difficulty × 2^32)` blocks a day. Times the
//! reward (subsidy of the next block, plus the mean fees of recent blocks for the
//! fee-inclusive figure) and the BTC price gives the hashprice. Retarget and halving context
//! come from the height with the consensus constants of rust-bitcoin.

use bitcoin::Amount;

use crate::datasets::round;
use crate::shapes::{Block, BtcPrice, Hashprice, Network, PerUnit, Revenue, Upstreams};

/// Blocks between halvings (rust-bitcoin's consensus constant).
pub const HALVING_INTERVAL: u64 = bitcoin::blockdata::constants::SUBSIDY_HALVING_INTERVAL as u64;
/// Blocks between difficulty retargets.
pub const RETARGET_INTERVAL: u64 = 2016;
/// Target block spacing, seconds.
pub const BLOCK_SPACING_S: u64 = 600;

/// Subsidy of the block at `height`: 50 BTC halved every 210 000 blocks, zero after 64 halvings.
pub fn subsidy(height: u64) -> Amount {
    let halvings = height / HALVING_INTERVAL;
    if halvings >= 64 {
        return Amount::ZERO;
    }
    Amount::from_sat(Amount::from_int_btc(50).to_sat() >> halvings)
}

/// Network state read from the chain upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainState {
    /// Height of the tip.
    pub height: u64,
    /// Difficulty of the next block.
    pub difficulty: f64,
    /// Mean fees per block over the window, satoshi.
    pub avg_fees_sat: f64,
    /// Blocks in the fee window.
    pub fee_blocks: u64,
}

/// BTC price in the two currencies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// US dollars per BTC.
    pub usd: f64,
    /// Canadian dollars per BTC.
    pub cad: f64,
}

/// Blocks a day one TH/s is expected to find at `difficulty`.
pub fn blocks_per_th_day(difficulty: f64) -> f64 {
    86_400.0 * 1e12 / (difficulty * 4_294_967_296.0)
}

fn rfc3339(unix_s: i64) -> String {
    crate::time::rfc3339(unix_s)
}

/// The hashprice record (its OpenAPI schema is derived from [`Hashprice`]).
pub fn compute(
    chain: &ChainState,
    price: Price,
    now_unix_s: i64,
    chain_label: &str,
    price_label: &str,
) -> Hashprice {
    let next_height = chain.height + 1;
    let subsidy_btc = subsidy(next_height).to_btc();
    let fees_btc = chain.avg_fees_sat / 1e8;
    let per_th = blocks_per_th_day(chain.difficulty);
    let btc_sub = per_th * subsidy_btc;
    let btc_fee = per_th * (subsidy_btc + fees_btc);
    let next_retarget = (chain.height / RETARGET_INTERVAL + 1) * RETARGET_INTERVAL;
    let next_halving = (chain.height / HALVING_INTERVAL + 1) * HALVING_INTERVAL;
    let to_retarget = next_retarget - chain.height;
    let to_halving = next_halving - chain.height;
    let eta = |blocks: u64| rfc3339(now_unix_s + (blocks * BLOCK_SPACING_S) as i64);
    let money = |btc: f64, rate: f64| PerUnit {
        per_th_day: Revenue {
            subsidy_only: round(btc_sub * rate, 8),
            fee_inclusive: round(btc * rate, 8),
        },
        per_ph_day: Revenue {
            subsidy_only: round(btc_sub * rate * 1000.0, 6),
            fee_inclusive: round(btc * rate * 1000.0, 6),
        },
    };
    Hashprice {
        refreshed_at: rfc3339(now_unix_s),
        network: Network {
            height: chain.height,
            difficulty: chain.difficulty,
            implied_hashrate_ehs: round(
                chain.difficulty * 4_294_967_296.0 / BLOCK_SPACING_S as f64 / 1e18,
                3,
            ),
            next_retarget_height: next_retarget,
            blocks_to_retarget: to_retarget,
            estimated_retarget_at: eta(to_retarget),
            next_halving_height: next_halving,
            blocks_to_halving: to_halving,
            estimated_halving_at: eta(to_halving),
        },
        block: Block {
            subsidy_btc,
            subsidy_after_halving_btc: subsidy(next_halving).to_btc(),
            avg_fees_btc: round(fees_btc, 8),
            fee_window_blocks: chain.fee_blocks,
        },
        price: BtcPrice {
            usd: price.usd,
            cad: price.cad,
        },
        btc: PerUnit {
            per_th_day: Revenue {
                subsidy_only: round(btc_sub, 12),
                fee_inclusive: round(btc_fee, 12),
            },
            per_ph_day: Revenue {
                subsidy_only: round(btc_sub * 1000.0, 10),
                fee_inclusive: round(btc_fee * 1000.0, 10),
            },
        },
        usd: money(btc_fee, price.usd),
        cad: money(btc_fee, price.cad),
        upstreams: Upstreams {
            chain: chain_label.to_string(),
            price: price_label.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsidy_schedule() {
        let cases = [
            (0, 5_000_000_000),
            (209_999, 5_000_000_000),
            (210_000, 2_500_000_000),
            (840_000, 312_500_000),
            (1_050_000, 156_250_000),
            (6_720_000, 1),
            (6_930_000, 0),
            (13_440_000, 0),
        ];
        for (h, sat) in cases {
            assert_eq!(subsidy(h).to_sat(), sat, "height {h}");
        }
    }

    #[test]
    fn hand_computed_vector() {
        // difficulty 1e14, next block 900 001 (3.125 BTC), mean fees 0.05 BTC, $100 000.
        let chain = ChainState {
            height: 900_000,
            difficulty: 1e14,
            avg_fees_sat: 5_000_000.0,
            fee_blocks: 6,
        };
        let v = compute(
            &chain,
            Price {
                usd: 100_000.0,
                cad: 140_000.0,
            },
            1_700_000_000,
            "rpc",
            "price",
        );
        let v = serde_json::to_value(&v).unwrap();
        // 86400e12 / (1e14 * 2^32) = 2.0116567611694336e-7 blocks per TH/s per day.
        let per_th = 2.011_656_761_169_433_6e-7;
        let usd_sub = per_th * 3.125 * 100_000.0;
        let usd_fee = per_th * 3.175 * 100_000.0;
        let got = v["usd"]["per_th_day"]["subsidy_only"].as_f64().unwrap();
        assert!((got - usd_sub).abs() < 1e-8, "{got} vs {usd_sub}");
        let got = v["usd"]["per_ph_day"]["fee_inclusive"].as_f64().unwrap();
        assert!((got - usd_fee * 1000.0).abs() < 1e-5, "{got}");
        let got = v["cad"]["per_th_day"]["fee_inclusive"].as_f64().unwrap();
        assert!((got - per_th * 3.175 * 140_000.0).abs() < 1e-8);
        assert_eq!(v["network"]["next_retarget_height"], 901_152);
        assert_eq!(v["network"]["blocks_to_retarget"], 1_152);
        assert_eq!(v["network"]["next_halving_height"], 1_050_000);
        assert_eq!(v["network"]["blocks_to_halving"], 150_000);
        assert_eq!(v["block"]["subsidy_btc"], 3.125);
        assert_eq!(v["block"]["subsidy_after_halving_btc"], 1.5625);
        assert_eq!(v["refreshed_at"], "2023-11-14T22:13:20Z");
    }
}
