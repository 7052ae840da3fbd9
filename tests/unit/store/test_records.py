"""store.records: one typed record for a stored lane, reading the older baseline shape and a
champion's lane result alike, writing one shape."""
from pytest_ditar.store.records import LaneRecord, read_lanes, write_lanes
from pytest_ditar.store.snapshot import lane_samples

OLD_BASELINE = {"lane": "latency_b1", "samples": [0.02, 0.021], "host_s": [0.001], "ranks": 1,
                "noise": {"ci_half_width": 0.02}, "flops": 1.5e9, "host_flops": 3e10}
CHAMPION = {"measurement": {"lane": "latency_b1", "samples": [0.01, 0.011], "host_s": [0.002]},
            "outcome": {"name": "latency_b1", "verdict": "FASTER", "speedup": 2.0}, "champion_source": "interleaved",
            "min_effect": 0.05, "comparison": {}, "flops": None, "achieved_tflops": None}


def test_an_older_baseline_and_a_champion_read_as_one_record():
    old = LaneRecord.from_dict("latency_b1", OLD_BASELINE)
    assert old.samples == [0.02, 0.021] and old.host_s == [0.001] and old.measurement["ranks"] == 1
    assert old.noise == {"ci_half_width": 0.02} and old.flops == 1.5e9 and old.host_flops == 3e10
    assert "noise" not in old.measurement and old.outcome is None
    champ = LaneRecord.from_dict("latency_b1", CHAMPION)
    assert champ.samples == [0.01, 0.011] and champ.outcome["verdict"] == "FASTER" and champ.noise is None
    assert champ.result["champion_source"] == "interleaved" and champ.flops is None


def test_one_shape_is_written_and_reads_back_the_same():
    recs = read_lanes({"latency_b1": OLD_BASELINE, "throughput_b8": CHAMPION, "junk": 3})
    assert set(recs) == {"latency_b1", "throughput_b8"}
    doc = write_lanes(recs)
    assert all("measurement" in lane for lane in doc.values()) and "samples" not in doc["latency_b1"]
    assert read_lanes(doc) == recs
    assert lane_samples(doc) == lane_samples({"latency_b1": OLD_BASELINE, "throughput_b8": CHAMPION}) == {
        "latency_b1": [0.02, 0.021], "throughput_b8": [0.01, 0.011]}


def test_a_ledger_row_is_read_once_and_a_newer_release_row_is_refused_not_misread(tmp_path):
    """LedgerRow.from_json is the ledger's one read path: cells as stored, older rows' defaults, and a
    row of a newer schema_version refused by the strict read and skipped by the lenient one."""
    import json

    import pytest

    from pytest_ditar.core.rerun import row_judged
    from pytest_ditar.store.ledger import Ledger, LedgerError
    from pytest_ditar.store.records import LedgerRow, RecordVersionError

    led = Ledger(tmp_path)
    led.append({"commit": "c1", "class": "exact", "status": "KEEP", "metric": 1.25, "quality_pass": 3})
    row = led.rows()[0]
    assert (row.run, row.commit, row.cls, row.metric, row.quality_pass, row.ci_low) == (1, "c1", "exact", 1.25, 3, "")
    old = LedgerRow.from_json({"run": 2, "status": "DISCARD"})  # a row from before `judged` and schema_version
    assert row_judged(old) and old.schema_version == 0 and old.unjudged == ""
    newer = {**json.loads(led.jsonl_path.read_text()), "run": 2, "schema_version": 99}
    with pytest.raises(RecordVersionError, match="schema_version 99"):
        LedgerRow.from_json(newer)
    led.jsonl_path.write_text(led.jsonl_path.read_text() + json.dumps(newer) + "\n")
    with pytest.raises(LedgerError, match="schema_version 99"):
        led.rows()
    assert [r.run for r in led.lenient_rows()] == [1]


def test_a_run_summary_reads_its_lanes_as_lane_records_and_refuses_a_newer_release():
    import pytest

    from pytest_ditar.store.records import RecordVersionError, RunSummary

    s = RunSummary.from_json({"schema_version": 1, "decision": "KEEP", "commit": "abc", "class": "exact",
                              "champion": "def", "quality": {"i0": {"passed": True}},
                              "lanes": {"latency_b1": {"measurement": {"samples": [0.1, 0.2]},
                                                       "outcome": {"verdict": "FASTER"}}}})
    assert (s.decision, s.commit, s.cls, s.champion) == ("KEEP", "abc", "exact", "def")
    assert s.lanes["latency_b1"].samples == [0.1, 0.2] and s.outcomes() == {"latency_b1": {"verdict": "FASTER"}}
    assert s.quality == {"i0": {"passed": True}} and s.fingerprint is None
    with pytest.raises(RecordVersionError):
        RunSummary.from_json({"schema_version": 2, "decision": "KEEP"})
