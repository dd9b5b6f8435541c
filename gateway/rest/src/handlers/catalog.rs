//! Read-only reference catalogues: `/api/re/*` (reverse-engineering notes, constants by the
//! spec: no hardware access), `/api/firmware/*` (notes on stock firmwares), the cgminer command
//! catalogue of the TCP 4028 API and the error vocabulary.
//!
//! Every answer is `{schema: "svcos.api.catalog.v1", catalog, title, source, entries}`; the
//! `source` member says where the content comes from and that nothing is read from hardware.

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use svcos_api_types::catalog::CatalogBody;

use crate::routing::Route;
use crate::{AppState, route};

fn catalog(id: &'static str, title: &'static str, entries: Value) -> Response {
    // Every catalogue's entries are a JSON array; anything else would be a bug here.
    let entries = match entries {
        Value::Array(a) => a,
        other => vec![other],
    };
    Json(CatalogBody::new(id, title, entries)).into_response()
}

macro_rules! catalog_route {
    ($path:literal, $id:literal, $title:literal, $entries:expr) => {
        route!(GET $path, Bearer, P, ReCatalog, Full, $title, || async { catalog($id, $title, $entries) }, res: svcos_api_types::catalog::CatalogBody)
    };
    ($group:ident $path:literal, $id:literal, $title:literal, $entries:expr) => {
        route!(GET $path, Bearer, P, $group, Full, $title, || async { catalog($id, $title, $entries) }, res: svcos_api_types::catalog::CatalogBody)
    };
}

/// The RE catalogue ids, for `/api/re/catalog` and `/api/re/catalog/index`.
const RE_IDS: [&str; 20] = [
    "apw-psu",
    "asic-commands",
    "asic-registers",
    "asic-registers/chipa",
    "asic-registers/chipb",
    "bb-uart-trans",
    "chipc-baud-init",
    "boot-flow",
    "boot-orchestration",
    "diode-voltage",
    "dspic-frames",
    "eeprom/bhb-skus",
    "firmware-stratum-matrix",
    "fpga-registers",
    "index",
    "fwa-network-exposure",
    "fwa-rest-commands",
    "modelx-fixture-production-warnings",
    "thermal-model",
    "fwb-rest-endpoints",
];

fn re_index() -> Value {
    RE_IDS
        .iter()
        .map(|id| json!({"id": id, "path": format!("/api/re/catalog/{id}")}))
        .collect::<Vec<_>>()
        .into()
}

fn registers() -> Value {
    json!([
        {"address": "0x00", "name": "ChipAddress", "use": "chip id, core count and assigned address"},
        {"address": "0x08", "name": "PLL0Parameter", "use": "hash clock: fbdiv, refdiv, postdiv1, postdiv2 from a 25 MHz reference"},
        {"address": "0x10", "name": "HashCountingNumber", "use": "nonce range split between chips"},
        {"address": "0x14", "name": "TicketMask", "use": "difficulty filter for returned nonces"},
        {"address": "0x18", "name": "MiscControl", "use": "UART baud divider and clock selection"},
        {"address": "0x3C", "name": "CoreRegisterControl", "use": "indirect access to per-core registers"},
        {"address": "0x40", "name": "CoreRegisterValue", "use": "value read through CoreRegisterControl"},
        {"address": "0xA4", "name": "VersionMask", "use": "version-rolling mask (BIP 310)"},
    ])
}

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        catalog_route!(
            "/api/re/catalog",
            "catalog",
            "Reverse-engineering catalogues",
            re_index()
        ),
        catalog_route!(
            "/api/re/catalog/index",
            "index",
            "Reverse-engineering catalogue index",
            re_index()
        ),
        catalog_route!(
            "/api/re/catalog/apw-psu",
            "apw-psu",
            "APW-class PSU over PMBus-like i2c",
            json!([
                {"item": "bus", "value": "i2c, 7-bit address 0x10 on most units"},
                {"item": "frame", "value": "0x55 0xAA length command payload checksum (sum of bytes)"},
                {"item": "commands", "value": ["get firmware version", "get output voltage", "set output voltage", "enable/disable output", "watchdog"]},
                {"item": "voltage range", "value": "about 12.0-15.0 V on adjustable models"},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/asic-commands",
            "asic-commands",
            "ASIC UART command set",
            json!([
                {"header": "0x40", "name": "set address", "length": 5, "crc": "CRC-5"},
                {"header": "0x41", "name": "write register (one chip)", "length": 9, "crc": "CRC-5"},
                {"header": "0x51", "name": "write register (all chips)", "length": 9, "crc": "CRC-5"},
                {"header": "0x42", "name": "read register (one chip)", "length": 5, "crc": "CRC-5"},
                {"header": "0x52", "name": "read register (all chips)", "length": 5, "crc": "CRC-5"},
                {"header": "0x53", "name": "chain inactive", "length": 5, "crc": "CRC-5"},
                {"header": "0x21", "name": "work (job)", "length": 86, "crc": "CRC-16/CCITT-FALSE"},
                {"preamble": "host 0x55 0xAA, chip 0xAA 0x55", "response_length": 11},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/asic-registers",
            "asic-registers",
            "ASIC register map (common)",
            registers()
        ),
        catalog_route!(
            "/api/re/catalog/asic-registers/chipa",
            "asic-registers/chipa",
            "ASIC register map (chipa)",
            registers()
        ),
        catalog_route!(
            "/api/re/catalog/asic-registers/chipb",
            "asic-registers/chipb",
            "ASIC register map (chipb)",
            registers()
        ),
        catalog_route!(
            "/api/re/catalog/bb-uart-trans",
            "bb-uart-trans",
            "Control-board UART translation",
            json!([
                {"item": "start baud", "value": 115200},
                {"item": "fast baud", "value": [1000000, 1562500, 3125000]},
                {"item": "baud formula", "value": "divider written to MiscControl from a 25 MHz or 200 MHz UART clock"},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/chipc-baud-init",
            "chipc-baud-init",
            "Baud bring-up sequence (chipc)",
            json!([
                {"step": 1, "action": "chain inactive, enumerate addresses at 115200 baud"},
                {"step": 2, "action": "broadcast MiscControl with the new divider"},
                {"step": 3, "action": "switch the host UART to the fast baud"},
                {"step": 4, "action": "read ChipAddress from every chip to confirm"},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/boot-flow",
            "boot-flow",
            "Stock boot flow",
            json!([
                {"stage": "bootloader", "notes": "loads kernel and device tree from NAND or SD"},
                {"stage": "init", "notes": "starts network, web UI and the miner daemon"},
                {"stage": "miner", "notes": "PSU on, chain enumeration, frequency ramp, pool connect"},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/boot-orchestration",
            "boot-orchestration",
            "svcOS boot orchestration",
            json!([
                {"order": 1, "service": "hw-agent", "ready": "socket bound and health SERVING"},
                {"order": 2, "service": "stratum-agent"},
                {"order": 3, "service": "auth"},
                {"order": 4, "service": "tuner"},
                {"order": 5, "service": "legacy-tcp"},
                {"order": 6, "service": "gateway"},
                {"order": 7, "service": "proxy"},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/diode-voltage",
            "diode-voltage",
            "Temperature diode conversion",
            json!([
                {"item": "method", "value": "on-die diode read through the chip's analog mux"},
                {"item": "use", "value": "chip temperature when no board sensor is fitted"},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/dspic-frames",
            "dspic-frames",
            "Hashboard PIC frames",
            json!([
                {"item": "bus", "value": "i2c per hashboard"},
                {"item": "frame", "value": "0x55 0xAA length command data checksum"},
                {"item": "commands", "value": ["heartbeat", "set voltage", "get voltage", "enable DC-DC", "get temperature"]},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/eeprom/bhb-skus",
            "eeprom/bhb-skus",
            "Hashboard EEPROM SKU fields",
            json!([
                {"field": "board model"}, {"field": "chip bin"}, {"field": "serial number"}, {"field": "factory frequency and voltage"},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/firmware-stratum-matrix",
            "firmware-stratum-matrix",
            "Stratum support by firmware",
            json!([
                {"firmware": "svcOS", "stratum_v1": true, "stratum_v2": "behind [stratum].sv2_enabled", "version_rolling": true},
                {"firmware": "fwa", "stratum_v1": true, "stratum_v2": false},
                {"firmware": "fwb", "stratum_v1": true, "stratum_v2": true},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/fpga-registers",
            "fpga-registers",
            "Control-board FPGA registers",
            json!([
                {"item": "role", "value": "UART fan-out to chains, fan PWM and tachometer, LEDs"},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/fwa-network-exposure",
            "fwa-network-exposure",
            "fwa network exposure",
            json!([
                {"port": 80, "service": "web UI"}, {"port": 4028, "service": "cgminer API"}, {"port": 22, "service": "SSH"},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/fwa-rest-commands",
            "fwa-rest-commands",
            "fwa REST commands",
            json!([
                {"path": "/cgi-bin/get_system_info.cgi"}, {"path": "/cgi-bin/stats.cgi"}, {"path": "/cgi-bin/get_miner_conf.cgi"},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/modelx-fixture-production-warnings",
            "modelx-fixture-production-warnings",
            "modelx production fixture warnings",
            json!([
                {"warning": "test fixtures drive chains without the production thermal limits"},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/thermal-model",
            "thermal-model",
            "Thermal model",
            json!([
                {"item": "controller", "value": "PID on the hottest chip toward [thermal].target_temp_c"},
                {"item": "hot", "value": "above [thermal].hot_temp_c hashing is cut back"},
                {"item": "dangerous", "value": "above [thermal].dangerous_temp_c hashing stops at once"},
            ])
        ),
        catalog_route!(
            "/api/re/catalog/fwb-rest-endpoints",
            "fwb-rest-endpoints",
            "fwb REST endpoints",
            json!([
                {"path": "/api/v1/summary"}, {"path": "/api/v1/pools"}, {"path": "/api/v1/config"},
            ])
        ),
        catalog_route!(Actions "/api/firmware/fwa_architecture", "fwa_architecture", "fwa architecture", json!([
            {"component": "cgminer-derived daemon", "role": "mining, pool client, API on 4028"},
            {"component": "lighttpd + CGI", "role": "web UI"},
        ])),
        catalog_route!(Actions "/api/firmware/fwa_responses", "fwa_responses", "fwa API responses", json!([
            {"command": "summary", "section": "SUMMARY"}, {"command": "pools", "section": "POOLS"}, {"command": "stats", "section": "STATS"},
        ])),
        catalog_route!(Actions "/api/firmware/fwa_status_codes", "fwa_status_codes", "fwa STATUS codes", json!([
            {"STATUS": "S", "meaning": "success"}, {"STATUS": "I", "meaning": "informational"},
            {"STATUS": "W", "meaning": "warning"}, {"STATUS": "E", "meaning": "error"}, {"STATUS": "F", "meaning": "fatal"},
        ])),
        catalog_route!(Actions "/api/firmware/fwa_web_map", "fwa_web_map", "fwa web UI map", json!([
            {"page": "status"}, {"page": "miner configuration"}, {"page": "network"}, {"page": "system upgrade"},
        ])),
        catalog_route!(Actions "/api/firmware/proto_wire_types", "proto_wire_types", "Protocol Buffers wire types", json!([
            {"type": 0, "name": "VARINT"}, {"type": 1, "name": "I64"}, {"type": 2, "name": "LEN"},
            {"type": 3, "name": "SGROUP"}, {"type": 4, "name": "EGROUP"}, {"type": 5, "name": "I32"},
        ])),
        catalog_route!(Actions "/api/firmware/fwb_overlay", "fwb_overlay", "fwb overlay layout", json!([
            {"item": "rootfs", "value": "read-only squashfs with a writable overlay for configuration"},
        ])),
        catalog_route!(Actions "/api/firmware/fwb_schema", "fwb_schema", "fwb configuration schema", json!([
            {"section": "pools"}, {"section": "autotuning"}, {"section": "temp_control"}, {"section": "fan_control"},
        ])),
        catalog_route!(Integrations "/api/cgminer/catalog", "cgminer", "cgminer-compatible commands on TCP 4028", json!(
            // legacy-tcp's own table: what it serves, never a copy that could drift.
            svcos_common::cgminer::COMMANDS.iter().filter(|c| c.served).map(|c| json!({
                "command": c.name, "privileged": c.privileged, "joinable": c.joinable,
            })).collect::<Vec<_>>()
        )),
        catalog_route!(Diagnostics "/api/diagnostics/error_vocab", "error_vocab", "Error envelope vocabulary", json!(
            crate::envelope::ErrorCode::ALL.map(|c| json!({"code": c.as_str(), "meaning": meaning(c)}))
        )),
    ]
}

fn meaning(c: crate::envelope::ErrorCode) -> &'static str {
    use crate::envelope::ErrorCode::*;
    match c {
        ConfigValidation => "the submitted configuration failed validation; `field` names the key",
        PoolValidation => "pool URL, worker name or failover split is malformed; `field` names it",
        PoolConfigWriteFailed => "the pool configuration was valid but could not be persisted",
        ConfigConflict => {
            "another config write came first (the If-Match generation is stale); nothing changed"
        }
        ErrorBodyUnavailable => "the underlying error body could not be read to normalise it",
        LegacyError => {
            "an older-format error (plain text or {error}) was wrapped into the envelope"
        }
        UnclassifiedError => "a failure with no more specific code",
    }
}
