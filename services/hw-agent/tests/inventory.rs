//! The hardware inventory read from the devices of a real hw-sim board: each hashboard's PIC
//! (its setpoint readback follows a voltage change), the chips' PVT registers (their
//! temperatures lie between the chain's board and hottest-chip sensors), and the PSU's
//! identity against the catalogue's bypass matrix.

mod common;

use std::time::Duration;

use common::*;
use svcos_proto::hwagent::v1::{
    GetPicInfoRequest, GetPsuBypassMatrixRequest, GetPvtTableRequest, SetVoltageRequest,
};

const LONG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pics_pvt_and_the_fitted_psu_are_read_from_the_board() {
    let _serial = SERIAL.lock().await;
    let config = small_config();
    let nominal_mv = config.hardware.voltage_mv;
    let bench = Bench::start(config).await;
    let agent = bench.start_agent();
    bench.send_job(job(1, 1, true, 0.001));
    bench
        .wait_for("mining", LONG, |t| {
            state(t) == svcos_proto::hwagent::v1::MiningState::Mining
        })
        .await;
    let mut diag = bench.diagnostics_client();

    // PICs: one per hashboard, at the board's nominal setpoint, nothing written yet.
    let pics = diag
        .get_pic_info(GetPicInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(pics.boards.len(), 2, "{pics:?}");
    for b in &pics.boards {
        assert!(b.answered, "{b:?}");
        assert_eq!(b.address, 0x50 + b.chain_id);
        assert_eq!(b.firmware_version, Some(3));
        assert_eq!(b.setpoint_mv, Some(nominal_mv.round()));
        assert_eq!(b.written_mv, None);
    }
    // A voltage change reaches every PIC; the measured rail follows the PSU's slew.
    bench
        .agent_client()
        .set_voltage(SetVoltageRequest {
            chain_id: None,
            voltage_mv: 8600.0,
        })
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let pics = diag
            .get_pic_info(GetPicInfoRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(
            pics.boards
                .iter()
                .all(|b| b.setpoint_mv == Some(8600.0) && b.written_mv == Some(8600.0))
        );
        if pics
            .boards
            .iter()
            .all(|b| b.measured_mv.is_some_and(|m| (m - 8600.0).abs() < 5.0))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rail never reached 8.6 V: {pics:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // PVT: every chip answers; its temperature lies between its chain's sensors. Registers
    // and sensors are read moments apart while the chips warm up, so a read may be retried.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let pvt = diag
            .get_pvt_table(GetPvtTableRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(pvt.chains.len(), 2);
        let mut outside = Vec::new();
        for c in &pvt.chains {
            assert!(c.error.is_empty(), "{c:?}");
            assert_eq!(c.chips.len(), 8, "{c:?}");
            let (board, hottest) = (c.sensor_board_c.unwrap(), c.sensor_chip_c.unwrap());
            for chip in &c.chips {
                assert!(chip.answered, "{chip:?}");
                // The sensors quantise to 1/16 C.
                let t = chip.temperature_c.unwrap();
                if t < board - 0.5 || t > hottest + 0.5 {
                    outside.push(format!(
                        "chain {} chip {}: {t} not in {board}..{hottest}",
                        c.chain_id, chip.chip
                    ));
                }
                // Eight chips make two domains sharing the 8.6 V rail, each chip +/- a few %.
                let v = chip.voltage_mv.unwrap();
                assert!((3900.0..4700.0).contains(&v), "{v} mV");
                assert!(chip.ring_oscillator_mhz.unwrap() > 0.0);
            }
        }
        if outside.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{outside:#?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The S9 preset's APW3++: in the catalogue, fixed at 12 V, run at 8.6 V by the sim.
    let m = diag
        .get_psu_bypass_matrix(GetPsuBypassMatrixRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(m.rows.len(), svcos_common::psu::PSU_MODELS.len() + 1);
    let f = m.fitted.unwrap();
    assert_eq!((f.model.as_str(), f.firmware.as_str()), ("APW3++", "1.0.3"));
    assert!(f.in_catalogue && f.bypassed, "{f:?}");
    assert_eq!((f.voltage_min_v, f.voltage_max_v), (12.0, 12.0));
    assert!((f.setpoint_v - 8.6).abs() < 1e-9);
    agent.stop().await;
}
