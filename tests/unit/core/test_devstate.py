"""core.devstate (issue 41): a round's device and host state summed up from its reads, NVML's
clock-event reasons by name, which of them void a round, energy per image. Plain data, no NVML."""
from __future__ import annotations

import pytest

from pytest_ditar.core.devstate import SLOWDOWNS, energy_per_image, reasons, round_state, throttled


def test_reason_bits_by_name_unknown_bits_kept_as_hex():
    assert reasons(0) == []
    assert reasons(0x1 | 0x4 | 0x40) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert reasons(0x8 | 0x1000) == ["hw_slowdown", "0x1000"]


def test_a_round_keeps_the_lowest_clocks_the_highest_heat_and_every_reason():
    reads = [{"sm_mhz": 1980.0, "mem_mhz": 2619.0, "temp_c": 61.0, "power_w": 420.0, "reasons": ["gpu_idle"]},
             {"sm_mhz": 1755.0, "mem_mhz": 2619.0, "temp_c": 64.0, "power_w": 690.0, "reasons": ["sw_power_cap"]},
             {"load1": 1.5, "cpu_mhz": 2596.1}]
    assert round_state(reads) == {"load1": 1.5, "cpu_mhz": 2596.1, "sm_mhz": 1755.0, "mem_mhz": 2619.0,
                                  "temp_c": 64.0, "power_w": 690.0, "reasons": ["gpu_idle", "sw_power_cap"]}
    assert round_state([{"load1": 0.2}]) == {"load1": 0.2}  # a CPU host: nothing of a GPU made up
    assert round_state([]) == {}


def test_only_slowdown_reasons_void_a_round():
    rounds = [{"reasons": ["gpu_idle", "applications_clocks_setting"]}, {"reasons": ["hw_thermal_slowdown"]},
              {"load1": 3.0}, {"reasons": ["sync_boost", "sw_power_cap"]}, {"reasons": []}]
    rounds = [{**r, "slowed": [x for x in r.get("reasons", ()) if x in SLOWDOWNS]} for r in rounds]
    assert throttled(rounds) == [1, 3]
    assert "gpu_idle" not in SLOWDOWNS and "hw_power_brake_slowdown" in SLOWDOWNS


def test_energy_per_image_is_the_median_call_over_the_batch():
    assert energy_per_image([8.0, 80.0, 10.0, 9.0], batch=4) == pytest.approx(9.5 / 4)
    assert energy_per_image([], batch=1) is None and energy_per_image([5.0], batch=0) is None


def test_the_run_summary_line_spans_each_reading_and_names_throttled_rounds():
    from pytest_ditar.core.devstate import describe

    gpu = [{"sm_mhz": 1980.0, "mem_mhz": 2619.0, "temp_c": 60.0, "power_w": 400.0, "load1": 0.5, "reasons": []},
           {"sm_mhz": 1410.0, "mem_mhz": 2619.0, "temp_c": 83.0, "power_w": 230.0, "load1": 0.7,
            "reasons": ["hw_thermal_slowdown", "gpu_idle"], "slowed": ["hw_thermal_slowdown"]}]
    line = describe(gpu, {"candidate": 1.25, "champion": None})
    assert line == ("SM 1410-1980 MHz, memory 2619 MHz, temperature 60-83 C, power 230-400 W, host load 0.50-0.70, "
                    "energy per image candidate 1.25 J, 1 of 2 rounds throttled (hw_thermal_slowdown): void")
    assert describe([{"load1": 1.0, "cpu_mhz": 2596.1}], {}) == "host load 1.00, CPU 2596 MHz"
    assert describe([], {}) is None


def test_a_lanes_verdict_names_its_throttled_rounds_and_says_where_to_look():
    from pytest_ditar.core.devstate import throttle_note

    rounds = [{"reasons": []}, {"reasons": ["sw_power_cap", "gpu_idle"], "slowed": ["sw_power_cap"]},
              {"reasons": ["hw_slowdown"], "slowed": ["hw_slowdown"]}, {"reasons": ["sw_power_cap"]}, {}]
    assert throttle_note(rounds) == ("2 of 5 rounds throttled (hw_slowdown, sw_power_cap): void, re-timed within "
                                     "the budget; repeated, the card's cooling or power limit is the problem "
                                     "(`dit-ar doctor`)")
    assert throttle_note([{"load1": 2.0}]) is None


def test_a_slowdown_after_the_candidates_own_call_never_voids_its_round():
    """The attack: a candidate rewarded for speed draws the card past its power cap (or heats it) in
    the calls it runs slow, so a slowdown reason follows exactly its bad rounds; voiding them would
    drop its worst calls from the verdict. Like a busy start of its own call (core.interference), the
    candidate's throttling counts against it: only a slowdown read after a reference's call voids."""
    own = [{"side": "candidate", "sm_mhz": 1410.0, "reasons": ["sw_power_cap"]},
           {"side": "champion", "sm_mhz": 1980.0, "reasons": []}]
    theirs = [{"side": "candidate", "reasons": []}, {"side": "champion", "reasons": ["hw_thermal_slowdown"]},
              {"side": "twin", "reasons": ["gpu_idle"]}]
    rounds = [round_state(own), round_state(theirs), round_state(own)]
    assert rounds[0]["reasons"] == ["sw_power_cap"] and "slowed" not in rounds[0]  # shown, not void
    assert rounds[1]["slowed"] == ["hw_thermal_slowdown"]
    assert throttled(rounds) == [1]
