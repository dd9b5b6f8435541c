"""Hardware inventory on a real stack: the four routes read hw-agent, which reads the devices.

- `/api/hardware/pic_info`: each S9 hashboard's PIC (hw-sim's, over I2C); its setpoint readback
  follows a voltage change hw-agent made, and its measured rail follows the PSU.
- `/api/miner/pvt-table`: every chip's on-die registers (over the chains' UARTs); the junction
  temperatures lie within the range the chain's own sensors report.
- `/api/env/recipe`: the fan policy in force changes when the config does, and names its source.
- `/api/hardware/psu_bypass_matrix`: the catalogue's rows and the fitted PSU against its row,
  whose rating follows `[power.psu_override]`.

The module runs its own stack: it changes the voltage, the fan target and the PSU override.
"""

import pytest

from conftest import http, own_stack, wait_for


@pytest.fixture(scope="module")
def st(tmp_path_factory):
    with own_stack(tmp_path_factory.mktemp("inventory")) as (s, tok):
        yield s, tok


def get(st, path):
    sim, tok = st
    status, _, body = http("GET", f"{sim.api_url}{path}", tok)
    assert status == 200, (path, status, body)
    return body


def config(st, patch):
    sim, tok = st
    status, _, body = http("POST", f"{sim.api_url}/api/config", tok, patch)
    assert status == 200, body
    return body


def item(recipe, part, name):
    return next(e for e in recipe[part] if e["name"] == name)


def test_pic_setpoint_readback_follows_a_voltage_change(st):
    pics = get(st, "/api/hardware/pic_info")
    assert pics["schema"] == "svcos.api.hardware.pic_info.v1"
    assert [b["chain_id"] for b in pics["boards"]] == [0, 1, 2], pics
    setpoint_v = get(st, "/api/hardware/psu_catalog")["fitted"]["setpoint_v"]
    for b in pics["boards"]:
        assert b["answered"] and b["error"] is None, b
        assert b["address_hex"] == f"0x{0x50 + b['chain_id']:02x}"
        assert b["firmware_version"] == 3
        assert b["setpoint_mv"] == round(setpoint_v * 1000), (b, setpoint_v)

    config(st, {"hardware": {"voltage_mv": 8700}})

    def followed():
        boards = get(st, "/api/hardware/pic_info")["boards"]
        return all(b["setpoint_mv"] == 8700 and b["written_mv"] == 8700
                   and abs(b["measured_mv"] - 8700) < 10 for b in boards) and boards

    boards = wait_for(followed, 30, "every PIC at the new 8.7 V setpoint and rail")
    assert get(st, "/api/hardware/psu_catalog")["fitted"]["setpoint_v"] == 8.7, boards


def test_pvt_temperatures_lie_within_the_chains_sensor_range(st):
    def outside(chain):
        low, high = chain["sensor_board_c"], chain["sensor_chip_c"]
        # The sensors quantise to 1/16 C and are read a moment after the registers.
        return [c for c in chain["chips"] if not low - 0.5 <= c["temperature_c"] <= high + 0.5]

    def read():
        t = get(st, "/api/miner/pvt-table")
        ready = all(c["error"] is None and c["chips"] for c in t["chains"])
        return ready and not any(outside(c) for c in t["chains"]) and t

    # Registers and sensors are sampled apart while the chips warm up: a read may be retried,
    # a systematic disagreement times out.
    table = wait_for(read, 120, "every chain's PVT temperatures within its sensors' range")
    assert table["schema"] == "svcos.api.miner.pvt_table.v1"
    assert len(table["chains"]) == 3
    for chain in table["chains"]:
        assert len(chain["chips"]) == 63, chain["chain_id"]
        assert chain["sensor_board_c"] <= chain["sensor_chip_c"], chain
        for chip in chain["chips"]:
            assert chip["answered"], chip
            # 21 domains of 3 chips share the rail: about 8.7 V / 21 per chip.
            assert 380 < chip["voltage_mv"] < 450, chip
            assert chip["ring_oscillator_mhz"] > 0, chip
        # Silicon differs: the dies do not all run at one speed.
        assert len({c["ring_oscillator_mhz"] for c in chain["chips"]}) > 1


def test_recipe_fan_policy_follows_the_config_and_names_its_source(st):
    sim, tok = st
    recipe = get(st, "/api/env/recipe")
    assert recipe["schema"] == "svcos.api.env.recipe.v1"
    assert recipe["mode"] == "standard"
    target = item(recipe, "fan", "target_temp_c")
    assert (target["value"], target["source"]) == (75, "default:thermal.target_temp_c"), target
    assert item(recipe, "cooling", "fan_mode")["text"] == "auto"
    assert item(recipe, "cooling", "fan_duty_percent")["source"] == "thermal_pid"

    config(st, {"thermal": {"target_temp_c": 70, "fan_max_percent": 80}})

    def changed():
        r = get(st, "/api/env/recipe")
        t = item(r, "fan", "target_temp_c")
        return t["value"] == 70 and r

    recipe = wait_for(changed, 30, "the recipe's fan target at 70 C")
    assert item(recipe, "fan", "target_temp_c")["source"] == "config:thermal.target_temp_c"
    fan_max = item(recipe, "fan", "fan_max_percent")
    assert (fan_max["value"], fan_max["source"]) == (80, "config:thermal.fan_max_percent")

    # An operator's manual duty through the API is named as such.
    status, _, body = http("POST", f"{sim.api_url}/api/fan", tok,
                           {"mode": "manual", "pwm_percent": 55})
    assert status == 200, body
    recipe = get(st, "/api/env/recipe")
    mode = item(recipe, "cooling", "fan_mode")
    assert (mode["text"], mode["source"]) == ("manual", "api"), mode
    assert item(recipe, "fan", "manual_percent")["value"] == 55
    status, _, body = http("POST", f"{sim.api_url}/api/fan", tok, {"mode": "auto"})
    assert status == 200, body


def test_bypass_matrix_rows_and_the_fitted_psu_follow_the_override(st):
    m = get(st, "/api/hardware/psu_bypass_matrix")
    assert m["schema"] == "svcos.api.hardware.psu_bypass_matrix.v1"
    catalog = get(st, "/api/hardware/psu_catalog")["entries"]
    assert [r["model"] for r in m["rows"]] == [e["model"] for e in catalog] + [None]
    rules = {r["model"]: r["voltage_override"] for r in m["rows"]}
    assert rules["APW3++"] == "refused" and rules["APW12"] == "narrow" and rules[None] == "declare"
    fitted = m["fitted"]
    assert (fitted["model"], fitted["firmware"]) == ("APW3++", "1.0.3"), fitted
    assert fitted["in_catalogue"]
    assert (fitted["rated_watt"], fitted["rated_source"]) == (1600, "catalogue")
    # The sim runs its fixed-12 V APW3++ under 9 V: outside the row's window.
    assert fitted["bypassed"] and fitted["setpoint_v"] < 12, fitted

    config(st, {"power": {"psu_override": {"enabled": True, "model": "APW3++", "max_watt": 1400}}})

    def lowered():
        f = get(st, "/api/hardware/psu_bypass_matrix")["fitted"]
        return f["rated_watt"] == 1400 and f

    fitted = wait_for(lowered, 30, "the override's lower rating in force")
    assert fitted["rated_source"] == "psu_override", fitted
