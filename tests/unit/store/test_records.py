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
