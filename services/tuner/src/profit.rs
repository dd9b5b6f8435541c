//! What the measured hashrate and power earn and cost a day at the prices an owner gives: the
//! tuner owns this money math (as it owns efficiency), so REST, MCP and the dashboard show one
//! answer. Pure functions; the gRPC handler supplies the telemetry and the config's defaults.

use svcos_common::status::invalid_field;
use svcos_proto::tuner::v1::{
    EstimateProfitabilityRequest, EstimateProfitabilityResponse, ProfitPrices,
};
use tonic::Status;

/// BTC per block when the request names none (the subsidy since the 2024 halving).
pub const DEFAULT_BLOCK_REWARD_BTC: f64 = 3.125;

/// The request's prices with defaults filled in, each checked (a refusal names its field).
pub fn prices(
    r: &EstimateProfitabilityRequest,
    default_kwh_price: f64,
) -> Result<ProfitPrices, Status> {
    let p = ProfitPrices {
        btc_price: r.btc_price,
        network_difficulty: r.network_difficulty,
        block_reward_btc: r.block_reward_btc.unwrap_or(DEFAULT_BLOCK_REWARD_BTC),
        electricity_price_per_kwh: r.electricity_price_per_kwh.unwrap_or(default_kwh_price),
        pool_fee_percent: r.pool_fee_percent.unwrap_or(0.0),
    };
    let checks = [
        ("btc_price", p.btc_price, p.btc_price >= 0.0, ">= 0"),
        (
            "network_difficulty",
            p.network_difficulty,
            p.network_difficulty > 0.0,
            "> 0",
        ),
        (
            "block_reward_btc",
            p.block_reward_btc,
            p.block_reward_btc >= 0.0,
            ">= 0",
        ),
        (
            "electricity_price_per_kwh",
            p.electricity_price_per_kwh,
            p.electricity_price_per_kwh >= 0.0,
            ">= 0",
        ),
        (
            "pool_fee_percent",
            p.pool_fee_percent,
            (0.0..=100.0).contains(&p.pool_fee_percent),
            "0-100",
        ),
    ];
    for (field, v, ok, rule) in checks {
        if !v.is_finite() || !ok {
            return Err(invalid_field(field, format!("a finite number {rule}")));
        }
    }
    Ok(p)
}

/// The day's figures for `ghs` GH/s drawing `power_watt` W at `prices`.
pub fn estimate(
    ghs: f64,
    power_watt: f64,
    prices: ProfitPrices,
    currency: String,
) -> EstimateProfitabilityResponse {
    // Expected blocks a day: hashes a day over the hashes a block takes (difficulty x 2^32).
    let btc_day = ghs * 1e9 * 86_400.0 / (prices.network_difficulty * 4_294_967_296.0)
        * prices.block_reward_btc
        * (1.0 - prices.pool_fee_percent / 100.0);
    let revenue = btc_day * prices.btc_price;
    let kwh_day = power_watt * 24.0 / 1000.0;
    let cost = kwh_day * prices.electricity_price_per_kwh;
    EstimateProfitabilityResponse {
        hashrate_ghs: ghs,
        power_watt,
        btc_per_day: btc_day,
        revenue_per_day: revenue,
        energy_kwh_per_day: kwh_day,
        cost_per_day: cost,
        margin_per_day: revenue - cost,
        break_even_price_per_kwh: if kwh_day > 0.0 {
            revenue / kwh_day
        } else {
            0.0
        },
        prices: Some(prices),
        currency,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_common::status::field_of;

    fn request(btc_price: f64, network_difficulty: f64) -> EstimateProfitabilityRequest {
        EstimateProfitabilityRequest {
            btc_price,
            network_difficulty,
            ..Default::default()
        }
    }

    #[test]
    fn defaults_fill_in_and_ordinary_inputs_give_every_number() {
        let p = prices(&request(100_000.0, 1.0e14), 0.1).unwrap();
        assert_eq!(p.block_reward_btc, DEFAULT_BLOCK_REWARD_BTC);
        assert_eq!(p.electricity_price_per_kwh, 0.1);
        let e = estimate(13_400.0, 1320.0, p, "USD".into());
        assert!(e.btc_per_day > 0.0);
        assert!((e.cost_per_day - 3.168).abs() < 1e-9);
        assert!((e.margin_per_day - (e.revenue_per_day - e.cost_per_day)).abs() < 1e-12);
        assert!(
            (e.break_even_price_per_kwh * e.energy_kwh_per_day - e.revenue_per_day).abs() < 1e-9
        );
    }

    #[test]
    fn extreme_prices_overflow_rather_than_panic() {
        let p = prices(&request(1.27e16, 2.2e-309), 0.1).unwrap();
        let e = estimate(10_000.0, 1300.0, p, "USD".into());
        assert!(!e.revenue_per_day.is_finite());
        assert!((e.energy_kwh_per_day - 31.2).abs() < 1e-9);
    }

    #[test]
    fn a_bad_price_names_its_field() {
        for (r, field) in [
            (request(-1.0, 1.0), "btc_price"),
            (request(1.0, 0.0), "network_difficulty"),
            (request(f64::NAN, 1.0), "btc_price"),
            (
                EstimateProfitabilityRequest {
                    pool_fee_percent: Some(101.0),
                    ..request(1.0, 1.0)
                },
                "pool_fee_percent",
            ),
            (
                EstimateProfitabilityRequest {
                    electricity_price_per_kwh: Some(-0.1),
                    ..request(1.0, 1.0)
                },
                "electricity_price_per_kwh",
            ),
        ] {
            let s = prices(&r, 0.1).unwrap_err();
            assert_eq!(field_of(&s).map(|f| f.0), Some(field), "{s:?}");
        }
    }
}
