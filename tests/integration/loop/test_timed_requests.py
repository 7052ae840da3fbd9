"""The timing defences through `dit-ar experiment`: every timed round asks for fresh seeds, drawn
from the secret the summary records and the round's nonce. The pure parts (request stream, audit,
caching probe): tests/unit/core/test_timing_integrity.py; champion drift: tests/unit/core/test_anchor.py."""
from pytest_ditar.core.requests import RequestStream

SEEN = "DITAR-TEST-SEEN "


def _recording(source: str) -> str:
    """`source` with generate() printing the seeds it is asked for: its stdout is the worker's log,
    which the judge keeps beside the run (its sandbox lets it write nowhere else outside)."""
    head = "    def generate(self, request: Request) -> Generated:\n"
    assert head in source
    return source.replace(head, head + f"        print({SEEN!r} + ','.join(map(str, request.seeds)), flush=True)\n")


def _seen(root) -> list[tuple[int, ...]]:
    """The seeds the recording candidate was asked for, in order, from its kept worker log."""
    out = []
    for log in sorted(root.glob(".autoresearch/t/runs/*/workers/*/candidate.log")):
        out += [tuple(int(s) for s in line[len(SEEN):].split(",")) for line in log.read_text().splitlines()
                if line.startswith(SEEN)]
    return out


def test_timed_rounds_are_fresh_requests_reproducible_from_the_recorded_secret(pytester, model_cache,
                                                                               tmp_path_factory, tmp_path):
    """Every timed round asks for seeds the candidate never saw (no corpus seed, no earlier round's),
    drawn from the secret the summary records afterwards and the round's own nonce; the caching
    probe repeats one request."""
    import json

    from candidates import REDUNDANT, STOCK
    from conftest import research_project

    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    sha, res, line = proj.experiment_judged(_recording(STOCK), "exact", "Drop the redundant pass")  # a real 2x
    assert line.startswith("DITAR VERDICT: KEEP"), res.stdout[-3000:]
    seen = _seen(proj.root)
    assert seen, "no worker log of the candidate kept"
    (summary_path,) = [p for p in (proj.root / ".autoresearch/t/runs").glob("*/summary.json")
                       if json.loads(p.read_text())["commit"] == sha]  # the KEEP's run (a re-run leaves two)
    summary = json.loads(summary_path.read_text())
    corpus = {it["seed"]
              for it in __import__("yaml").safe_load((proj.root / "suites/tiny/suite.yaml").read_text())["corpus"]}
    stream = RequestStream(bytes.fromhex(summary["request_secret"]), corpus)
    for lane, data in summary["lanes"].items():
        m = data["measurement"]
        timed = [tuple(s) for s in m["seeds"]]
        assert len(timed) == len(m["samples"]) and len(set(timed)) == len(timed)
        assert not {s for t in timed for s in t} & corpus
        assert timed == [stream.draw(f"{lane}/round/{r}", len(timed[0]), bytes.fromhex(n))[0]
                         for r, n in enumerate(m["nonces"])]
        assert all(t in seen for t in timed)  # the candidate was asked for exactly these
    probe = summary["lanes"]["latency_b1"]["measurement"]["probe"]
    lane = summary["lanes"]["latency_b1"]["measurement"]
    assert len(probe["repeat_s"]) == len(probe["unique_s"]) == 2 and min(probe["repeat_s"]) > 0
    confirming = len(probe.get("confirm", {}).get("repeat_s", []))  # only when the screen tripped
    assert seen.count(tuple(lane["seeds"][-1])) == 3 + confirming  # the last round's request, asked again
    t = summary["timings"]
    assert t["perf.audit"] > 0 and t["perf.probe"] > 0 and "audit+probe " in res.stdout
