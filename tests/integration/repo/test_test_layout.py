"""The tests' layout (issue 26): from a module to its tests, and no test lost on the way.

- every module of pytest_ditar is imported by a test file under tests/ (the AST's imports:
  `import pytest_ditar.x.y`, `from pytest_ditar.x import y`, `from pytest_ditar.x.y import z`),
  or INDIRECT names the test that drives it through the plugin, a worker or the console script;
- each tests/unit/<layer>/ is a subpackage of pytest_ditar, and its tests build no project
  (no pytester, no `project`/`research` fixture, no model cache): those live in tests/integration/;
- every test file sits in unit/<layer>/, integration/, e2e/ or adversarial/;
- the number of test functions under tests/ never drops below TEST_FUNCTION_FLOOR.

The index itself: `python tests/integration/repo/test_test_layout.py pytest_ditar/core/stats.py`
prints the test files that import a module, or its INDIRECT entry (tests/README.md). Each check
also runs on a planted tree, so a check that stopped seeing anything fails here."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PKG, TESTS = REPO / "pytest_ditar", REPO / "tests"

# `def test_*` functions (methods and async ones included) under tests/ before the move into
# unit/ and integration/ (issue 26): tests may be moved or split, never dropped.
TEST_FUNCTION_FLOOR = 438

# Modules no test imports by name, each with the test that exercises it (path::test). Remove an
# entry once a test imports its module; a new module gets a test that imports it, or a line here.
INDIRECT = {
    # doctor's host probe: the baseline's code A/A and the champion beside it, through `dit-ar doctor`
    "pytest_ditar.loop.perf.hostprobe": "tests/integration/cli/test_host_noise.py::"
                                   "test_doctor_times_the_kept_champion_beside_the_baseline_code",
    # a memory lane's rounds, in a gated run's workers (loop.perf.lanekinds)
    "pytest_ditar.runtime.peaks": "tests/e2e/test_memory_lane.py::"
                                  "test_a_memory_lane_keeps_its_peaks_discards_a_heavier_win_and_keeps_an_honest_one",
    # the console script's subcommands, run as a user runs them (Project.ditar in tests/conftest.py)
    "pytest_ditar.cli.baseline": "tests/e2e/test_option_baseline.py::"
                                 "test_baseline_refuses_to_overwrite_unless_forced",
    "pytest_ditar.cli.guard": "tests/adversarial/test_judge_config.py::"
                              "test_ci_guard_starts_the_judges_way_and_refuses_a_checkout_that_configures_it",
    "pytest_ditar.cli.command": "tests/integration/repo/test_docs_commands.py::test_docs_conventions",  # the parser
    "pytest_ditar.cli.compare": "tests/e2e/test_compare.py::test_compare_baseline_champion_runs_and_hosts",
    "pytest_ditar.cli.experiment": "tests/integration/loop/test_loop_verdicts.py::"
                                   "test_faster_exact_candidate_is_kept_and_becomes_champion",
    "pytest_ditar.cli.fetchstate": "tests/e2e/test_ci.py::"
                                   "test_fresh_clone_fetches_the_state_and_guards_for_github_actions",
    "pytest_ditar.cli.fleet": "tests/e2e/test_fleet.py::test_two_hosts_share_one_champion_through_a_remote",
    "pytest_ditar.loop.share.fleet": "tests/e2e/test_fleet.py::test_two_hosts_share_one_champion_through_a_remote",
    "pytest_ditar.loop.run.launch": "tests/e2e/test_fleet_launch.py::"
                                "test_two_experiments_run_as_submitit_jobs_and_record_their_verdicts",
    "pytest_ditar.cli.init": "tests/integration/cli/test_worktrees.py::"
                             "test_init_with_gpu_makes_worktrees_and_status_all_lists_them",
    "pytest_ditar.cli.recover": "tests/adversarial/test_defence_state.py::"
                                "test_recover_refuses_a_healthy_state_unless_forced",
    "pytest_ditar.cli.report": "tests/e2e/test_report_render.py::test_report_renders_plot_and_image_grid",
    "pytest_ditar.cli.status": "tests/integration/loop/test_loop_integrity.py::"
                               "test_edited_ledger_row_is_detected_by_status_and_the_next_run",
    # `dit-ar mcp`: its command without the SDK (its server: tests/e2e/test_mcp.py, the SDK's own client)
    "pytest_ditar.cli.agent": "tests/integration/cli/test_mcp_not_imported.py::"
                              "test_dit_ar_mcp_without_the_sdk_names_the_extra",
    "pytest_ditar.cli.trial": "tests/e2e/test_try.py::test_try_reports_lanes_quality_and_margins_and_records_nothing",
    "pytest_ditar.cli.verify": "tests/e2e/test_firewall.py::"
                               "test_verify_catches_an_edited_snapshot_file_and_an_edited_ledger_row",
    "pytest_ditar.hardware.stack": "tests/integration/cli/test_doctor_nvml.py::"
                                   "test_doctor_reports_nvml_it_cannot_import",  # doctor's stack rows
    # the gated run: `dit-ar experiment` is `pytest --ditar-gate` through the plugin
    "pytest_ditar.loop.judge.baseline": "tests/e2e/test_option_baseline.py::"
                                  "test_baseline_stores_verified_snapshot",
    "pytest_ditar.loop.judge.gate": "tests/integration/loop/test_loop_verdicts.py::"
                              "test_faster_exact_candidate_is_kept_and_becomes_champion",  # its AST: unit/loop
    "pytest_ditar.loop.run.phases": "tests/e2e/test_xdist.py::test_sharded_decision_equals_serial_decision",
    "pytest_ditar.loop.judge.record": "tests/integration/loop/test_loop_verdicts.py::"
                                "test_output_changing_exact_candidate_is_discarded_with_patch",
    "pytest_ditar.loop.run.session": "tests/integration/loop/test_loop_verdicts.py::"
                                     "test_unchanged_candidate_is_not_kept",
    "pytest_ditar.loop.perf.startup": "tests/e2e/test_workers.py::"
                                 "test_candidate_code_runs_in_a_worker_in_every_path_of_a_gated_run",
    "pytest_ditar.loop.run.verify": "tests/e2e/test_firewall.py::"
                                "test_verify_catches_an_edited_manifest_through_the_ledger_anchor",
    # the plugin: loaded by pytest (entry point pytest11), in every run of a project
    "pytest_ditar.plugin.activation": "tests/integration/plugin/test_activation.py::"
                                      "test_the_suites_folder_or_a_ditar_option_make_a_ditar_run",
    "pytest_ditar.plugin.console": "tests/integration/plugin/test_marker_perf.py::test_slower_candidate_is_discarded",
    "pytest_ditar.plugin.fixtures": "tests/e2e/test_marker_quality.py::"
                                    "test_quality_passes_against_own_baseline",  # suites/tiny's tests use them
    "pytest_ditar.plugin.hooks": "tests/integration/plugin/test_plugin_hygiene.py::test_markers_are_registered",
    "pytest_ditar.plugin.hookspecs": "tests/e2e/test_option_baseline.py::"
                                     "test_baseline_stores_verified_snapshot",  # the root conftest.py implements one
    "pytest_ditar.plugin.keys": "tests/integration/plugin/test_plugin_hygiene.py::test_exit_status_is_pytests_own",
    # the worker process and what starts it
    "pytest_ditar.runtime.worker_main": "tests/e2e/test_workers.py::"
                                        "test_paused_worker_runs_nothing_until_resumed",
    "pytest_ditar.runtime.worker_protocol": "tests/e2e/test_workers.py::"
                                            "test_paused_worker_runs_nothing_until_resumed",
    "pytest_ditar.runtime.worker_device": "tests/e2e/test_workers.py::"
                                          "test_candidate_code_runs_in_a_worker_in_every_path_of_a_gated_run",
    # the zygote's own process, kept warm and adopted by the next gated run
    "pytest_ditar.runtime.zygote_serve": "tests/e2e/test_warm_zygote.py::"
                                         "test_the_next_run_forks_from_the_zygote_the_baseline_kept_and_a_stale_one_is_not_used",
    "pytest_ditar.loop.run.warmstart": "tests/e2e/test_warm_zygote.py::"
                                   "test_a_zygote_the_agent_starts_by_hand_and_names_in_the_state_is_never_used",
    "pytest_ditar.loop.integrity.tags": "tests/e2e/test_warm_zygote.py::"
                              "test_the_next_run_forks_from_the_zygote_the_baseline_kept_and_a_stale_one_is_not_used",
    # example candidates (data for `dit-ar demo`): run as a candidate's mutable/pipeline.py
    "pytest_ditar.demo.candidates.cfg_split": "tests/e2e/test_multigpu.py::"
                                              "test_every_rank_builds_in_a_worker_and_the_group_is_timed_beside_"
                                              "a_champion_group",
    "pytest_ditar.demo.candidates.compiled_stock": "tests/e2e/test_compile_reference.py::"
                                                   "test_the_champion_is_timed_beside_torch_compile_with_the_compile_apart",
    "pytest_ditar.demo.candidates.faster_exact": "tests/e2e/test_loop_agent.py::"
                                                 "test_ten_experiments_leave_kept_commits_equal_to_the_branch",
}
# Fixtures that build a project or run pytest in one: a test asking for one is an integration test.
PROJECT_FIXTURES = {"pytester", "project", "research", "model_cache", "slow_research", "semantic_research",
                    "with_own_tests", "session_with_history"}
# tests/'s shared fixtures and helpers
TOP_LEVEL_OK = {"conftest.py", "candidates.py", "jsonschemas.py", "venvs.py", "shared_zygote.py", "README.md"}
KINDS = ("unit", "integration", "e2e", "adversarial")


def package_modules(pkg: Path) -> set[str]:
    """Dotted names of the package's modules, __init__ and __main__ left out."""
    return {".".join(p.relative_to(pkg.parent).with_suffix("").parts) for p in pkg.rglob("*.py")
            if p.name not in ("__init__.py", "__main__.py") and "__pycache__" not in p.parts}


def files_with_tests(tests: Path) -> list[Path]:
    return sorted(p for p in tests.rglob("*.py") if (p.name.startswith("test_") or p.name == "conftest.py")
                  and "__pycache__" not in p.parts)


def imports_of(source: str, modules: set[str]) -> set[str]:
    """The package modules a file imports by name, wherever in the file (function bodies too)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}  # `from pkg.x import y`: y a module
    return found & modules


def index(tests: Path, modules: set[str]) -> dict[str, list[str]]:
    """Module -> the test files (relative to tests/'s parent) that import it."""
    out: dict[str, list[str]] = {m: [] for m in modules}
    for f in files_with_tests(tests):
        for m in imports_of(f.read_text(), modules):
            out[m].append(str(f.relative_to(tests.parent)))
    return out


def unindexed(pkg: Path, tests: Path, indirect: dict[str, str]) -> list[str]:
    """What breaks the index: a module neither imported nor in `indirect`, an entry for a module
    that is gone or is imported now, an entry whose test does not exist."""
    modules = package_modules(pkg)
    idx = index(tests, modules)
    problems = [f"{m}: no test imports it and INDIRECT names none" for m in sorted(modules)
                if not idx[m] and m not in indirect]
    for m, where in sorted(indirect.items()):
        if m not in modules:
            problems.append(f"{m}: in INDIRECT but no such module")
        elif idx[m]:
            problems.append(f"{m}: in INDIRECT but imported by {idx[m][0]}: drop the entry")
        path, _, name = where.partition("::")
        f = tests.parent / path
        if not f.is_file() or name not in names_of_tests(f.read_text()):
            problems.append(f"{m}: INDIRECT names {where}, which does not exist")
    return problems


def names_of_tests(source: str) -> list[str]:
    return [n.name for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")]


def count_test_functions(tests: Path) -> int:
    return sum(len(names_of_tests(p.read_text())) for p in sorted(tests.rglob("*.py")) if "__pycache__" not in p.parts)


def misplaced(tests: Path, pkg: Path) -> list[str]:
    """A unit folder that is no subpackage, a unit test that builds a project, a test file outside
    the four kinds of folder."""
    problems = []
    unit = tests / "unit"
    for d in sorted(p for p in unit.iterdir() if p.is_dir() and p.name != "__pycache__"):
        if not (pkg / d.name / "__init__.py").is_file():
            problems.append(f"tests/unit/{d.name}/: pytest_ditar has no subpackage {d.name}")
    for f in sorted(unit.rglob("test_*.py")):
        if f.parent == unit:
            problems.append(f"{f.relative_to(tests.parent)}: outside a tests/unit/<layer>/ folder")
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                asked = {a.arg for a in node.args.args + node.args.kwonlyargs} & PROJECT_FIXTURES
                if asked:
                    problems.append(f"{f.relative_to(tests.parent)}::{node.name} asks for {sorted(asked)}: "
                                    "an integration test")
    for f in sorted(tests.iterdir()):
        if f.name not in KINDS and f.name not in TOP_LEVEL_OK and f.name != "__pycache__" \
                and not f.name.startswith("."):
            problems.append(f"tests/{f.name}: not in {'/, '.join(KINDS)}/")
    return problems


# ---- the tests -------------------------------------------------------------------------------

def test_every_module_is_imported_by_a_test_or_named_in_indirect():
    assert unindexed(PKG, TESTS, INDIRECT) == []


def test_unit_folders_are_layers_and_every_test_file_has_its_place():
    assert misplaced(TESTS, PKG) == []


def test_no_test_was_lost():
    assert count_test_functions(TESTS) >= TEST_FUNCTION_FLOOR


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A package of three modules and a tests/ tree in the layout, every check passing."""
    pkg, tests = tmp_path / "pytest_ditar", tmp_path / "tests"
    for rel in ("__init__.py", "core/__init__.py", "core/stats.py", "core/dark.py", "cli/__init__.py",
                "cli/main.py", "__main__.py"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text("")
    (tests / "unit/core").mkdir(parents=True)
    (tests / "integration").mkdir()
    (tests / "conftest.py").write_text("")
    (tests / "unit/core/test_stats.py").write_text(
        "from pytest_ditar.core import stats\n\n\ndef test_a(tmp_path):\n    def inner():\n        pass\n")
    (tests / "integration/test_cli.py").write_text(
        "def test_b(pytester):\n    from pytest_ditar.cli.main import main\n\n\nasync def test_c():\n    pass\n")
    return pkg, tests


def test_the_checks_see_what_is_planted(planted):
    pkg, tests = planted
    indirect = {"pytest_ditar.core.dark": "tests/integration/test_cli.py::test_c"}
    assert unindexed(pkg, tests, indirect) == [] and misplaced(tests, pkg) == []
    assert count_test_functions(tests) == 3  # test_a, test_b, the async test_c; not inner()
    assert index(tests, package_modules(pkg))["pytest_ditar.cli.main"] == ["tests/integration/test_cli.py"]

    assert unindexed(pkg, tests, {}) == ["pytest_ditar.core.dark: no test imports it and INDIRECT names none"]
    stale = {**indirect, "pytest_ditar.core.stats": "tests/integration/test_cli.py::test_c",
             "pytest_ditar.core.gone": "tests/integration/test_cli.py::test_nowhere"}
    assert unindexed(pkg, tests, stale) == [
        "pytest_ditar.core.gone: in INDIRECT but no such module",
        "pytest_ditar.core.gone: INDIRECT names tests/integration/test_cli.py::test_nowhere, which does not exist",
        "pytest_ditar.core.stats: in INDIRECT but imported by tests/unit/core/test_stats.py: drop the entry"]

    (tests / "unit/corez").mkdir()
    (tests / "unit/core/test_project.py").write_text("def test_d(research):\n    pass\n")
    (tests / "unit/test_loose.py").write_text("")
    (tests / "test_old_place.py").write_text("def test_e():\n    pass\n")
    assert misplaced(tests, pkg) == [
        "tests/unit/corez/: pytest_ditar has no subpackage corez",
        "tests/unit/core/test_project.py::test_d asks for ['research']: an integration test",
        "tests/unit/test_loose.py: outside a tests/unit/<layer>/ folder",
        "tests/test_old_place.py: not in unit/, integration/, e2e/, adversarial/"]
    before = count_test_functions(tests)
    (tests / "unit/core/test_project.py").unlink()  # a test lost: the count drops
    assert count_test_functions(tests) == before - 1


if __name__ == "__main__":  # the index: which tests exercise a module
    modules = package_modules(PKG)
    for arg in sys.argv[1:] or sorted(modules):
        name = ".".join(Path(arg).with_suffix("").parts) if arg.endswith(".py") else arg
        files = index(TESTS, modules).get(name) or [f"{INDIRECT[name]} (indirect)" if name in INDIRECT else "none"]
        print(name, *files, sep="\n    ")
