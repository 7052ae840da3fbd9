"""The host now, as a newcomer on a shared box meets it (issue 50): `dit-ar doctor` measures the load,
the objective lane's A/A noise and the champion's speed and says whether a modest win can be judged
now and what to do; `dit-ar baseline` prints the smallest resolvable win its A/A implies and refuses
one beyond perf.max_baseline_win unless --accept-noise. No assertion here depends on the box's load:
the lines must agree with the figures they print, whatever those are."""
import json
import re

from candidates import REDUNDANT, STOCK
from conftest import make_project, research_project, shared_perf

ROWS = re.compile(r"^(host load|host noise|host speed|champion speed)\s+(pass|warn)  (.*)$", re.M)


def _host(out: str) -> tuple[dict[str, tuple[str, str]], str]:
    rows = {m.group(1): (m.group(2), m.group(3)) for m in ROWS.finditer(out)}
    lines = [ln for ln in out.splitlines() if ln.startswith("host: ")]
    assert len(lines) == 1, out
    return rows, lines[0]


def test_doctor_measures_the_host_and_says_whether_a_modest_win_can_be_judged(research):
    res = research.ditar("doctor")
    out = res.stdout
    assert res.returncode == 0, out + res.stderr  # a busy host is a warn, never a FAIL
    rows, host = _host(out)
    assert set(rows) == {"host load", "host noise", "host speed"}, out  # nothing kept: no champion row
    load = re.match(r"1-minute load (\d+\.\d) on (\d+) cores \(at baseline time (\d+\.\d)\)", rows["host load"][1])
    assert load, rows
    noise = re.match(r"A/A of the baseline's code, (\d+) paired rounds in (\d+\.\d) s: smallest resolvable win now "
                     r"about 1\+(\d+\.\d)%, at baseline time 1\+(\d+\.\d)%$", rows["host noise"][1])
    assert noise and int(noise.group(1)) == 8, rows
    assert re.match(r"the baseline's code \d+\.\d\d ms now, \d+\.\d\d ms at baseline time \(\d+\.\d\dx\)$",
                    rows["host speed"][1]), rows
    # the one sentence agrees with the rows it sums up
    busy = rows["host load"][0] == "warn"  # every core has a runnable task (the load read once, before the probe)
    assert busy or float(load.group(1)) <= int(load.group(2)), rows
    assert ("the host is busy (load " in host) == busy, host
    now = float(noise.group(3))
    assert f"smallest resolvable win now about 1+{now:.1f}%, at baseline time 1+{noise.group(4)}%" in host, host
    if host.startswith("host: quiet: "):
        assert now <= 10.0 and not busy and all(r[0] == "pass" for r in rows.values()), out
        assert "a 1.10x win can be judged now" in host
    else:
        assert re.search(r"a 1\.10x win (can|cannot) be judged now", host) and "; do: " in host, host
        assert ("cannot" in host) == (now > 10.0 or busy), host
        do = host.split("; do: ", 1)[1]
        assert any(w in do for w in ("stop the other load", "wait for", "re-take the baseline")), do

    quick = research.ditar("doctor", "--no-probe")
    assert quick.returncode == 0 and not ROWS.search(quick.stdout) and "host: " not in quick.stdout, quick.stdout


def test_doctor_times_the_kept_champion_beside_the_baseline_code(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    _, res, line = proj.experiment_judged(STOCK, "exact", "Drop the redundant full pass")
    assert line.startswith("DITAR VERDICT: KEEP"), res.stdout[-3000:]
    out = proj.ditar("doctor").stdout
    rows, host = _host(out)
    champ = re.match(r"champion ([0-9a-f]{7}) (\d+\.\d\d) ms now, (\d+\.\d\d) ms kept \((\d+\.\d\d)x\)$",
                     rows["champion speed"][1])
    assert champ and proj.head().startswith(champ.group(1)), out
    anchor = float(re.search(r"\((\d+\.\d\d)x\)$", rows["host speed"][1]).group(1))
    # the champion's own slowing is told from the host's by the baseline's code timed in the same rounds
    build = float(champ.group(4)) > anchor * 1.15
    assert (rows["champion speed"][0] == "warn") == build, out
    assert ("the champion's build, not the host" in host) == build, host


def test_baseline_prints_its_resolvable_win_and_refuses_one_beyond_the_bound(pytester, model_cache):
    proj = make_project(pytester, config={"perf": shared_perf(max_baseline_win=0.001)})
    assert proj.ditar("init", "--tag", "t").returncode == 0
    res = proj.ditar("baseline")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "the baseline's A/A noise is too large: lane latency_b1 resolves wins of about 1+" in res.stderr
    assert "above the bound 1+0% (key 'perf.max_baseline_win'" in res.stderr and "--accept-noise" in res.stderr
    assert not (proj.root / ".autoresearch/t/baseline").exists()
    assert "baseline  missing" in proj.ditar("status").stdout

    res = proj.ditar("baseline", "--accept-noise")
    assert res.returncode == 0, res.stdout + res.stderr
    said = re.search(r"^(warning: )?lane latency_b1: smallest resolvable win 1\+(\d+\.\d)% \(bound 1\+0%, "
                     r"perf\.max_baseline_win\)(.*)$", res.stdout, re.M)
    assert said, res.stdout
    big = float(said.group(2)) > 10.0
    assert bool(said.group(1)) == big and ("`dit-ar doctor` measures the host now" in said.group(3)) == big


def test_the_bound_is_checked_when_the_config_loads(project):
    cfg = project.config()
    cfg["perf"]["max_baseline_win"] = 0
    project.write("config/autoresearch.json", json.dumps(cfg))
    res = project.ditar("doctor", "--no-probe")
    assert res.returncode == 1
    assert "key 'perf.max_baseline_win' is out of range: 0" in res.stdout, res.stdout
