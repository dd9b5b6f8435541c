//! CSV downloads: `/api/metrics/rolling.csv` and `/api/autotuner/telemetry/csv`. The `csv`
//! crate writes them: a header row, then one row per sample, `\n` after each.

use svcos_proto::tuner::v1::{HistoryPoint, HistorySample};

use crate::history::state_word;
use crate::round;

fn csv_table<R, F>(header: &[&str], rows: R) -> String
where
    R: IntoIterator<Item = Vec<F>>,
    F: AsRef<[u8]>,
{
    let mut out = csv::Writer::from_writer(Vec::new());
    // Writing into a Vec cannot fail, and every row is as long as the header.
    let _ = out.write_record(header);
    for row in rows {
        let _ = out.write_record(row);
    }
    // Every cell came from a `String` or `&str`: the bytes are UTF-8.
    String::from_utf8(out.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// The rolling per-second samples as CSV.
pub fn rolling_csv(samples: &[HistoryPoint]) -> String {
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    let header = "t_ms,state,ghs_1m,ghs_5s,power_watt,temp_max_c,accepted,rejected,stale";
    csv_table(
        &header.split(',').collect::<Vec<_>>(),
        samples.iter().map(|s| {
            vec![
                s.t_ms.to_string(),
                state_word(s),
                s.ghs_1m.to_string(),
                s.ghs_5s.to_string(),
                s.power_watt.to_string(),
                s.temp_max_c.to_string(),
                opt(s.accepted),
                opt(s.rejected),
                opt(s.stale),
            ]
        }),
    )
}

/// The tuner's history as CSV.
pub fn tuner_history_csv(samples: &[HistorySample]) -> String {
    let header = "at_ms,state,power_watt,power_target_watt,hashrate_ths,voltage_mv,\
                  frequency_mhz,temp_max_c,nonces,hw_errors";
    csv_table(
        &header.split(',').collect::<Vec<_>>(),
        samples.iter().map(|s| {
            vec![
                s.at_ms.to_string(),
                s.state.clone(),
                round(s.power_watt, 1).to_string(),
                round(s.power_target_watt, 1).to_string(),
                round(s.hashrate_ths, 4).to_string(),
                round(s.voltage_mv, 1).to_string(),
                round(s.frequency_mhz, 2).to_string(),
                round(s.temp_max_c, 1).to_string(),
                s.nonces.to_string(),
                s.hw_errors.to_string(),
            ]
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_proto::hwagent::v1::MiningState;

    #[test]
    fn rolling_csv_has_header_and_rows() {
        let at = |t_ms| HistoryPoint {
            t_ms,
            state: MiningState::Mining as i32,
            ghs_1m: 1.0,
            ghs_5s: 1.0,
            power_watt: 1.0,
            temp_max_c: 1.0,
            accepted: Some(1),
            ..Default::default()
        };
        let text = rolling_csv(&[at(1000), at(2000)]);
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0],
            "t_ms,state,ghs_1m,ghs_5s,power_watt,temp_max_c,accepted,rejected,stale"
        );
        assert_eq!(lines[1], "1000,mining,1,1,1,1,1,,");
        assert!(text.ends_with(",,\n"));
        // No samples: the header alone.
        assert_eq!(rolling_csv(&[]).lines().count(), 1);
    }

    #[test]
    fn tuner_csv_has_a_header_row_then_one_row_per_sample() {
        let text = tuner_history_csv(&[HistorySample {
            at_ms: 5,
            state: "tuned".into(),
            power_watt: 1000.04,
            nonces: 7,
            ..Default::default()
        }]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            "at_ms,state,power_watt,power_target_watt,hashrate_ths,voltage_mv,frequency_mhz,temp_max_c,nonces,hw_errors"
        );
        assert!(lines[1].starts_with("5,tuned,1000,"));
        assert_eq!(lines[0].split(',').count(), lines[1].split(',').count());
        // A state word with a comma would be quoted, not split.
        let odd = tuner_history_csv(&[HistorySample {
            state: "a,b".into(),
            ..Default::default()
        }]);
        assert!(odd.lines().nth(1).unwrap().starts_with("0,\"a,b\","));
    }
}
