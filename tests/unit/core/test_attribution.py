"""core.attribution (issue 28): one call's spans attributed to the pipeline's phases, on hand-made
spans (no torch). `dit-ar profile` itself, on the tiny suite: tests/e2e/test_profile.py."""
from __future__ import annotations

import json

import pytest

from pytest_ditar.core.attribution import PHASES, Span, attribute, module_label


def _rows(att) -> dict[str, float]:
    return {r.key: r.host_ms for r in att.rows}


# ---- the attribution: hand-made spans, microseconds ----------------------------------------

def _pipeline_spans(device: bool = False) -> list[Span]:
    """A call of two denoising steps laid out like DiTPipeline.__call__ (times in us)."""
    d = (lambda v: v) if device else (lambda v: None)
    spans = [Span("call", 0, 1000, d(900)), Span("scheduler.set_timesteps", 20, 40, d(0)),
             Span("scheduler.scale", 50, 60, d(5))]
    for t0 in (100, 500):  # two steps: transformer, then (guidance) the scheduler step
        spans += [Span("transformer", t0, t0 + 300, d(280)), Span("patch_embed", t0, t0 + 20, d(15)),
                  Span("block", t0 + 30, t0 + 250, d(220)),
                  Span("adaln", t0 + 30, t0 + 80, d(45)), Span("conditioning", t0 + 35, t0 + 65, d(25)),
                  Span("norm", t0 + 70, t0 + 75, d(4)),
                  Span("attention", t0 + 90, t0 + 160, d(70)), Span("norm", t0 + 170, t0 + 180, d(9)),
                  Span("mlp", t0 + 190, t0 + 240, d(48)), Span("conditioning", t0 + 260, t0 + 270, d(8)),
                  Span("scheduler.step", t0 + 330, t0 + 370, d(30))]
    spans.append(Span("scheduler.scale", 480, 490, d(5)))
    spans += [Span("vae", 900, 910, d(9)), Span("vae", 915, 980, d(60))]
    if device:  # the call's own top-level operators: guidance's and the setup's
        spans += [Span("op", 410, 412, 7.0), Span("op", 810, 815, 6.0), Span("op", 10, 12, 3.0),
                  Span("op", 990, 995, 1.0)]
    return spans


def test_exclusive_time_per_phase_adds_up_to_the_wall():
    att = attribute(_pipeline_spans())
    got = _rows(att)
    assert att.wall_ms == pytest.approx(1.0) and att.steps == 2
    # setup: before the first transformer, less the first scale_model_input (scheduler); set_timesteps is setup
    assert got["setup"] == pytest.approx(0.090)
    assert got["conditioning"] == pytest.approx(2 * 0.040)  # in adaLN and in the output head
    assert got["adaln"] == pytest.approx(2 * (0.050 - 0.030 - 0.005))
    assert got["norm"] == pytest.approx(2 * 0.015)
    assert got["attention"] == pytest.approx(0.140) and got["mlp"] == pytest.approx(0.100)
    assert got["block"] == pytest.approx(2 * (0.220 - 0.050 - 0.070 - 0.010 - 0.050))
    assert got["transformer_other"] == pytest.approx(2 * (0.300 - 0.220 - 0.010))  # patch embed and the rest
    assert got["transformer"] == pytest.approx(0.600)  # the sum of its rows: each forward's whole range
    assert got["guidance"] == pytest.approx(2 * 0.030)  # transformer end -> scheduler step start
    assert got["scheduler"] == pytest.approx(0.010 + 0.080 + 0.010)
    assert got["denoise"] == pytest.approx(got["transformer"] + got["guidance"] + got["scheduler"])
    assert got["vae"] == pytest.approx(0.075) and got["output"] == pytest.approx(0.020)
    # between the phases: step glue (scheduler end -> scale, scale -> transformer), before the decode, between its parts
    assert got["gaps"] == pytest.approx(0.010 + 0.010 + 0.030 + 0.005)
    top = [r for r in att.rows if r.parent is None]
    assert [r.key for r in top] == ["setup", "denoise", "vae", "output", "gaps"]
    assert sum(r.host_ms for r in top) == pytest.approx(att.wall_ms)
    assert att.coverage == pytest.approx(1 - got["gaps"] / att.wall_ms)
    assert att.row("attention").per_step_ms == pytest.approx(0.070) and att.row("vae").per_step_ms is None
    assert att.row("conditioning").calls == 4 and att.row("guidance").inferred and not att.row("mlp").inferred
    assert [r.key for r in att.rows] == [k for k, _, _ in PHASES]
    assert att.device_ms is None and all(r.device_ms is None for r in att.rows)
    json.dumps(att.to_dict())  # what summary.json holds


def test_device_time_goes_to_the_phase_that_launched_it():
    att = attribute(_pipeline_spans(device=True))
    dev = {r.key: r.device_ms for r in att.rows}
    assert att.device_ms == pytest.approx(0.9)
    assert dev["attention"] == pytest.approx(0.140) and dev["conditioning"] == pytest.approx(2 * 0.033)
    assert dev["adaln"] == pytest.approx(2 * (0.045 - 0.025 - 0.004))
    assert dev["guidance"] == pytest.approx(0.013)  # the call's own ops inside the guidance intervals
    assert dev["setup"] == pytest.approx(0.003) and dev["output"] == pytest.approx(0.001)
    assert dev["vae"] == pytest.approx(0.069)


def test_ranges_that_outlive_their_parent_are_clipped_and_spans_outside_the_call_ignored():
    att = attribute([Span("call", 0, 100), Span("transformer", 10, 50), Span("attention", 40, 70),
                     Span("vae", 200, 300)])
    got = _rows(att)
    assert got["attention"] == pytest.approx(0.010) and got["transformer_other"] == pytest.approx(0.030)
    assert got["vae"] == 0 and sum(r.host_ms for r in att.rows if r.parent is None) == pytest.approx(0.1)


def test_a_call_the_marks_did_not_see_is_all_gaps_and_says_so():
    att = attribute([Span("call", 0, 100)])
    assert att.coverage == 0.0 and _rows(att)["gaps"] == pytest.approx(0.1) and att.steps == 0
    assert att.notes and "hooks saw none" in att.notes[0]
    with pytest.raises(ValueError, match="one 'call' span"):
        attribute([Span("transformer", 0, 1)])


def test_span_rows_from_the_wire_are_checked():
    assert Span.from_row(["attention", 1, 2.5]) == Span("attention", 1.0, 2.5, None)
    assert Span.from_row(["op", 1, 2, 3]).device == 3.0
    for bad in (["attention", 2, 1], ["attention", 1], [3, 1, 2], ["a", 1, 2, 3, 4]):
        with pytest.raises(ValueError):
            Span.from_row(bad)


def test_modules_are_labelled_by_their_class_or_a_base_class():
    assert module_label(["Attention", "Module", "object"]) == "attention"
    assert module_label(["FusedQKVAttention", "Attention", "Module"]) == "attention"  # a candidate's subclass
    assert module_label(["FP32LayerNorm", "LayerNorm", "Module"]) == "norm"
    assert module_label(["CombinedTimestepLabelEmbeddings", "Module"]) == "conditioning"
    assert module_label(["MyTransformerBlock", "Module"]) == "block"
    assert module_label(["Linear", "Module", "object"]) is None



# ---- issue 41: phases whose marks never fired, and work outside the marks --------------------

MARKS = {"transformer": 1, "patch_embed": 1, "block": 2, "conditioning": 3, "attention": 2, "mlp": 2, "adaln": 2,
         "norm": 4, "scheduler.step": 1, "scheduler.scale": 1, "scheduler.set_timesteps": 1, "vae": 2}


def test_a_marked_phase_that_never_fired_is_named_bypassed_not_zero():
    spans = [s for s in _pipeline_spans() if s.label not in ("attention", "mlp")]  # called around __call__
    att = attribute(spans, marks=MARKS)
    rows = {r.key: r for r in att.rows}
    assert rows["attention"].unmarked == rows["mlp"].unmarked == "bypass"
    assert rows["attention"].calls == 0 and rows["adaln"].unmarked is None and rows["transformer"].unmarked is None
    # the bypassed modules' time is in the phase around them (the block), not lost
    assert sum(r.host_ms for r in att.rows if r.parent is None) == pytest.approx(att.wall_ms)


def test_a_phase_with_no_module_of_its_kind_is_absent_and_without_marks_nothing_is_said():
    spans = [s for s in _pipeline_spans() if s.label != "conditioning"]
    marks = {k: v for k, v in MARKS.items() if k != "conditioning"}
    assert {r.key: r.unmarked for r in attribute(spans, marks=marks).rows}["conditioning"] == "absent"
    assert all(r.unmarked is None for r in attribute(spans).rows)  # an older worker sent no marks


def test_a_model_called_around_every_mark_is_work_outside_them_not_host_gaps():
    # the transformer and everything in it bypassed (a hand-written loop), the scheduler still marked
    spans = [s for s in _pipeline_spans() if s.label in ("call", "scheduler.set_timesteps", "scheduler.scale",
                                                          "scheduler.step", "vae")]
    att = attribute(spans, marks=MARKS)
    rows = {r.key: r for r in att.rows}
    for key in ("transformer", "attention", "mlp", "block", "adaln", "norm", "conditioning", "transformer_other"):
        assert rows[key].unmarked == "bypass", key
    assert rows["denoise"].unmarked is None and rows["scheduler"].calls == 4  # two scales, two steps
    # between a scheduler.scale and the step after it: where the model ran
    assert rows["bypassed"].host_ms == pytest.approx(((430 - 60) + (830 - 490)) / 1e3)
    assert rows["setup"].host_ms == pytest.approx(50 / 1e3)  # up to the first scale
    assert att.coverage > 0.9


def test_device_work_launched_between_marks_is_never_a_host_gap():
    # kernels launched between the last step and the VAE (a compiled region, a graph's replay):
    # the launching op carries their device time
    spans = [Span("call", 0, 1000, 900.0), Span("transformer", 100, 300, 150.0), Span("scheduler.step", 320, 350, 5.0),
             Span("op", 400, 410, 200.0), Span("vae", 500, 600, 90.0)]
    rows = {r.key: r for r in attribute(spans).rows}
    assert rows["gaps"].host_ms == 0.0 and rows["gaps"].device_ms == 0.0
    assert rows["bypassed"].host_ms == pytest.approx(0.15) and rows["bypassed"].device_ms == pytest.approx(0.2)
    without = [s for s in spans if s.label != "op"]  # the same interval with no device work: a host gap
    assert {r.key: r.host_ms for r in attribute(without).rows}["gaps"] == pytest.approx(0.15)
