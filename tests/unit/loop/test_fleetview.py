"""loop.share.fleetview.show: a fleet's ratios written as every verdict line writes them (issue 50)."""
from pytest_ditar.loop.share import fleetview


def test_ratios_have_three_decimals(monkeypatch, capsys):
    doc = {"fleet": "t", "remote": "origin", "reference_host": "b", "rows": 2, "hosts": [],
           "champion": {"commit": "a" * 40, "from_host": "a", "source_commit": "c" * 40, "judged_on": "b",
                        "speedup": 2.9960963012233797},
           "lineage": [{"commit": "a" * 40, "from_host": "a", "speedup": 2.9960963012233797, "time": "T"},
                       {"commit": "d" * 40, "from_host": "a", "speedup": None, "time": "T"}]}
    monkeypatch.setattr(fleetview, "collect", lambda cfg, remote: [doc])
    assert fleetview.show(None, "origin") == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "re-judged on b: 2.996x over the fleet champion before it" in out, out
    assert "from host a (2.996x) T" in out and "from host a (n/a) T" in out and "2.99609" not in out, out
