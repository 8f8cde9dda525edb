"""The judge on the real data sets: reference solutions pass, small mutations do not.

CodeContests disagreements (the reference solution not ACCEPTED) are listed below with
their reason; a new disagreement, or a listed one that disappears, fails the test.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from engine.data.convert import (
    problem_from_codecontests_derived,
    problem_from_humaneval,
    problem_from_mbpp,
)
from engine.judge.api import Judge, JudgeConfig
from engine.judge.cases import function_plan

_spec = importlib.util.spec_from_file_location("judge_mutants", Path(__file__).with_name("mutants.py"))
mutants = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutants)

# MBPP reference code whose own tests are broken: none. 974/974 (with challenge_test_list) and
# 427/427 pass. Task 88 returns a collections.Counter (compared as the stdlib's own Counter);
# task 126 defines its own `sum`, which its asserts call.
MBPP_BROKEN: dict[str, str] = {}

CC_FILE = "codecontests_train_sample_derived.jsonl.gz"


# ---- CodeContests agreement, measured on all 390 problems with all their tests (6 s CPU per test,
# sparse: the first failing test explains a disagreement). Exact tokens: 295/390 agree; with a
# 1e-6 float tolerance: 319/390 (with the two yes_no checkers below; 293 and 317 without).
# Every reference solution the judge does not accept, and why:
CC_DISAGREE_FLOAT: dict[str, tuple[str, str]] = {
    '1003_e_tree_constructing': ('WRONG_ANSWER', "multi-answer (statement: 'multiple answers'): needs a problem-specific checker"),
    '1009_d_relatively_prime_graph': ('WRONG_ANSWER', "multi-answer (statement: 'multiple answers'): needs a problem-specific checker"),
    '1016_d_vasya_and_the_matrix': ('WRONG_ANSWER', "multi-answer (statement: 'print any'): needs a problem-specific checker"),
    '1031_e_triple_flips': ('WRONG_ANSWER', 'multi-answer: any valid list of operations'),
    '1041_e_tree_reconstruction': ('WRONG_ANSWER', 'multi-answer: any tree with the given pairs'),
    '1056_d_decorate_apple_tree': ('RUNTIME_ERROR', "data: test 5 is '1\\n' without the (empty) second line the solution reads; EOFError in plain CPython too"),
    '1071_c_triple_flips': ('WRONG_ANSWER', 'multi-answer: any valid list of operations'),
    '1076_d_edge_deletion': ('WRONG_ANSWER', 'multi-answer: any k edges that keep the shortest paths'),
    '1118_f1_tree_cutting_easy_version': ('RUNTIME_ERROR', "data: the last test is in the hard version's (F2) format '5 3'"),
    '1133_f1_spanning_tree_with_maximum_degree': ('RUNTIME_ERROR', "data: the solution is 1133F2's (reads n m D); test 95 is F2's too"),
    '1172_c1_nauuo_and_pictures_easy_version': ('TIMEOUT', 'CPython too slow for 6 s CPU'),
    '1176_e_cover_it': ('RUNTIME_ERROR', "data: the solution and tests 1.. are 1133F1's (spanning tree, input 'n m'); test 0 is 1176E's multi-query example starting '2'"),
    '1217_d_coloring_edges': ('WRONG_ANSWER', "multi-answer (statement: 'multiple answers'): needs a problem-specific checker"),
    '1238_e_keyboard_purchase': ('TIMEOUT', 'CPython too slow for 6 s CPU'),
    '1264_c_beautiful_mirrors_with_queries': ('RUNTIME_ERROR', "data: the last test is 1265E's (no queries) format"),
    '1324_f_maximum_white_subtree': ('WRONG_ANSWER', "data: plain CPython prints '17' on test 0 too; the solution does not solve these tests"),
    '1325_c_ehab_and_pathetic_mexs': ('WRONG_ANSWER', 'multi-answer: any labeling minimizing the largest MEX'),
    '1328_d_carousel': ('WRONG_ANSWER', "multi-answer (statement: 'several answers'): needs a problem-specific checker"),
    '135_b_rectangle_and_square': ('WRONG_ANSWER', "multi-answer (statement: 'any of them'): needs a problem-specific checker"),
    '136_d_rectangle_and_square': ('WRONG_ANSWER', "multi-answer (statement: 'any of them'): needs a problem-specific checker"),
    '1385_g_columns_swaps': ('WRONG_ANSWER', "multi-answer (statement: 'several answers'): needs a problem-specific checker"),
    '1391_e_pairs_of_pairs': ('WRONG_ANSWER', 'multi-answer: any valid path or pairing'),
    '1406_c_link_cut_centroids': ('WRONG_ANSWER', "multi-answer (statement: 'multiple solutions'): needs a problem-specific checker"),
    '1407_e_egor_in_the_republic_of_dagestan': ('WRONG_ANSWER', "multi-answer (statement: 'multiple answers'): needs a problem-specific checker"),
    '1427_e_xum': ('WRONG_ANSWER', "multi-answer (statement: 'output any'): needs a problem-specific checker"),
    '1438_d_powerful_ksenia': ('WRONG_ANSWER', "multi-answer (statement: 'any such'): needs a problem-specific checker"),
    '1439_b_graph_subset_problem': ('WRONG_ANSWER', "multi-answer (statement: 'multiple possible answers'): needs a problem-specific checker"),
    '1454_d_number_into_sequence': ('WRONG_ANSWER', "multi-answer (statement: 'any of them'): needs a problem-specific checker"),
    '1503_e_2coloring': ('TIMEOUT', 'CPython too slow for 6 s CPU'),
    '1521_d_nastia_plays_with_a_tree': ('WRONG_ANSWER', 'multi-answer: any minimal sequence of operations'),
    '1534_e_lost_array': ('RUNTIME_ERROR', 'interactive problem: not judgeable as stdin/stdout'),
    '1540_b_tree_array': ('WRONG_ANSWER', 'data: plain CPython prints 1000000010 (expected 3) on test 3 too; solution and tests do not match'),
    '228_e_the_road_to_berland_is_paved_with_good_intentions': ('WRONG_ANSWER', "multi-answer (statement: 'multiple solutions'): needs a problem-specific checker"),
    '22_c_system_administrator': ('WRONG_ANSWER', "multi-answer (statement: 'output any'): needs a problem-specific checker"),
    '25_d_roads_not_only_in_berland': ('WRONG_ANSWER', "multi-answer (statement: 'output any'): needs a problem-specific checker"),
    '263_d_cycle_in_graph': ('WRONG_ANSWER', "multi-answer (statement: 'multiple correct answers'): needs a problem-specific checker"),
    '27_b_tournament': ('WRONG_ANSWER', "multi-answer (statement: 'several solutions'): needs a problem-specific checker"),
    '288_c_polo_the_penguin_and_xor_operation': ('WRONG_ANSWER', "multi-answer (statement: 'print any'): needs a problem-specific checker"),
    '29_c_mail_stamps': ('WRONG_ANSWER', 'multi-answer: the route in either direction'),
    '327_d_block_tower': ('WRONG_ANSWER', "multi-answer (statement: 'multiple solutions'): needs a problem-specific checker"),
    '339_c_xenia_and_weights': ('WRONG_ANSWER', "multi-answer (statement: 'multiple solutions'): needs a problem-specific checker"),
    '389_d_fox_and_minimal_path': ('WRONG_ANSWER', "multi-answer (statement: 'multiple correct answers'): needs a problem-specific checker"),
    '405_e_graph_cutting': ('WRONG_ANSWER', "multi-answer (statement: 'multiple solutions'): needs a problem-specific checker"),
    '407_a_triangle': ('WRONG_ANSWER', 'multi-answer: any valid coordinates'),
    '453_c_little_pony_and_summer_sun_celebration': ('WRONG_ANSWER', "multi-answer (statement: 'output any'): needs a problem-specific checker"),
    '45_h_road_problem': ('WRONG_ANSWER', "multi-answer (statement: 'several solutions'): needs a problem-specific checker"),
    '460_d_little_victor_and_set': ('WRONG_ANSWER', "multi-answer (statement: 'print any'): needs a problem-specific checker"),
    '464_b_restore_cube_': ('WRONG_ANSWER', "multi-answer (statement: 'print any'): needs a problem-specific checker"),
    '507_e_breaking_good': ('WRONG_ANSWER', "multi-answer (statement: 'output any'): needs a problem-specific checker"),
    '521_d_shop': ('WRONG_ANSWER', "multi-answer (statement: 'print any'): needs a problem-specific checker"),
    '576_a_vasya_and_petyas_game': ('WRONG_ANSWER', "multi-answer (statement: 'print any'): needs a problem-specific checker"),
    '618_c_constellation': ('WRONG_ANSWER', "multi-answer (statement: 'multiple possible answers'): needs a problem-specific checker"),
    '633_c_spy_syndrome_2': ('WRONG_ANSWER', "multi-answer (statement: 'multiple solutions'): needs a problem-specific checker"),
    '653_e_bear_and_forgotten_tree_2': ('TIMEOUT', 'CPython too slow for 6 s CPU'),
    '680_c_bear_and_prime_100': ('WRONG_ANSWER', "multi-answer (statement: 'print any'): needs a problem-specific checker"),
    '687_a_nphard_problem': ('WRONG_ANSWER', 'multi-answer: any two disjoint vertex covers'),
    '698_b_fix_a_tree': ('WRONG_ANSWER', "multi-answer (statement: 'print any'): needs a problem-specific checker"),
    '715_b_complete_the_graph': ('WRONG_ANSWER', "multi-answer (statement: 'multiple solutions'): needs a problem-specific checker"),
    '716_d_complete_the_graph': ('WRONG_ANSWER', "multi-answer (statement: 'multiple solutions'): needs a problem-specific checker"),
    '746_g_new_roads': ('WRONG_ANSWER', "multi-answer (statement: 'multiple answers'): needs a problem-specific checker"),
    '749_b_parallelogram_is_back': ('WRONG_ANSWER', 'multi-answer: the points in any order'),
    '774_h_repairing_of_string': ('WRONG_ANSWER', "multi-answer (statement: 'several answers'): needs a problem-specific checker"),
    '862_c_mahmoud_and_ehab_and_the_xor': ('WRONG_ANSWER', "multi-answer (statement: 'multiple solutions'): needs a problem-specific checker"),
    '899_c_dividing_the_numbers': ('WRONG_ANSWER', "multi-answer (statement: 'multiple answers'): needs a problem-specific checker"),
    '901_d_weighting_a_tree': ('WRONG_ANSWER', 'multi-answer: any valid weighting'),
    '908_d_new_year_and_arbitrary_arrangement': ('RUNTIME_ERROR', 'CPython: recursion deeper than the default limit of 1000 (RecursionError in plain CPython too)'),
    '925_c_big_secret': ('WRONG_ANSWER', "multi-answer (statement: 'multiple answers'): needs a problem-specific checker"),
    '937_d_sleepy_game': ('WRONG_ANSWER', 'multi-answer: any winning path'),
    '949_c_data_center_maintenance': ('WRONG_ANSWER', "multi-answer (statement: 'several possible answers'): needs a problem-specific checker"),
    '963_b_destruction_of_a_tree': ('WRONG_ANSWER', "multi-answer (statement: 'multiple correct answers'): needs a problem-specific checker"),
    '99_d_help_king': ('WRONG_ANSWER', "multi-answer (statement: 'any of them'): needs a problem-specific checker"),
}

# Float answers: agree only with the tolerance (compare='float').
CC_DISAGREE_TOKENS_ONLY = frozenset({
    '1086_b_minimum_diameter_tree',
    '108_d_basketball_team',
    '1245_e_hyakugoku_and_ladders',
    '1461_c_random_events',
    '1543_c_need_for_pink_slips',
    '167_b_wizards_and_huge_prize',
    '208_c_police_station',
    '261_b_maxim_and_restaurant',
    '262_d_maxim_and_restaurant',
    '280_c_game_on_tree',
    '28_c_bath_queue',
    '2_c_commentator_problem',
    '442_b_andrey_and_problem',
    '50_d_bombing',
    '518_d_ilya_and_escalator',
    '540_d_bad_luck_island',
    '54_c_first_digit_law',
    '598_f_cut_length',
    '623_d_birthday',
    '630_o_arrow',
    '696_b_puzzles',
    '697_d_puzzles',
    '839_c_journey',
    '912_d_fishes',
})

# Generic checkers that make a reference agree: these print Yes/No where the tests have YES/NO, which
# the statements allow ("in any case"). Every "multi-answer" problem above needs a problem-specific
# checker (validating the answer against the input); none is written here.
CC_CHECKERS = {"1516_b_agaga_xooorrr": "yes_no", "791_b_bear_and_friendship_condition": "yes_no"}
# Within ~10 % of the 6 s CPU limit in CPython: agree or time out depending on the machine's load.
CC_FLAKY = {"1278_f_cards": "about 5.5 s CPU", "1172_c1_nauuo_and_pictures_easy_version": "about 6 s CPU",
            "1238_e_keyboard_purchase": "about 6 s CPU", "1503_e_2coloring": "about 6 s CPU",
            "653_e_bear_and_forgotten_tree_2": "about 6 s CPU", "623_d_birthday": "test 57: about 6 s CPU"}

# About 6 s of CPU against the 10 s limit: on a loaded machine its wall-clock guard (20 s) can stop it
# first, and the remote judge's 10 s wall-clock limit always does with six requests on two cores.
MBPP_LOAD_SENSITIVE = {"123": "about 6 s CPU"}


def _alone_if_timed_out(judge, pairs, results):
    """Each result, but a TIMEOUT judged once more on its own: the machine running the tests may be
    busy with other tests (a reference's verdict is what it gets with the judge to itself)."""
    return [judge.judge_many([pair], code_is_program=True)[0] if r.verdict.value == "TIMEOUT" else r
            for pair, r in zip(pairs, results)]


def _load_sensitive_timeout(result) -> bool:
    return result.problem_id.split("/")[-1] in MBPP_LOAD_SENSITIVE and result.verdict.value == "TIMEOUT"


def _rows(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def judge():
    with Judge(JudgeConfig(timeout_s=10.0, cache=False)) as j:
        yield j


def test_humaneval_canonical_all_accepted(judge, datasets_dir):
    problems = [problem_from_humaneval(r) for r in _rows(datasets_dir / "humaneval.jsonl")]
    results = judge.judge_many([(p, p.solutions[0]) for p in problems], code_is_program=True)
    bad = [(r.problem_id, r.verdict, r.message, r.failures[:1]) for r in results if not r.accepted]
    assert not bad and len(results) == 164


@pytest.mark.parametrize("name,sanitized,count", [("mbpp_full.jsonl", False, 974),
                                                  ("mbpp_sanitized.jsonl", True, 427)])
def test_mbpp_reference_accepted(judge, datasets_dir, name, sanitized, count):
    problems = [problem_from_mbpp(r, sanitized=sanitized) for r in _rows(datasets_dir / name)]
    pairs = [(p, p.solutions[0]) for p in problems]
    results = _alone_if_timed_out(judge, pairs, judge.judge_many(pairs, code_is_program=True))
    bad = {r.problem_id: (r.verdict.value, r.failures[:1]) for r in results if not r.accepted
           and not _load_sensitive_timeout(r)}
    assert len(results) == count
    assert set(bad) == {k for k in MBPP_BROKEN if k.startswith(problems[0].source + "/")}, bad
    if not sanitized:
        assert sum(r.total for r in results) == sum(len(p.function_tests.asserts) + len(p.function_tests.challenge)
                                                    for p in problems)


@pytest.fixture(scope="module")
def remote_judge(sf_server_module):
    """The sandbox_fusion backend against tests/judge/sandbox_fusion_server.py (a loopback server
    speaking SandboxFusion's schema that runs each request with `python3`)."""
    with sf_server_module.SandboxFusionServer() as server:
        config = JudgeConfig(backend="sandbox_fusion", url=server.url, workers=6, timeout_s=10.0, cache=False)
        with Judge(config) as j:
            yield j


def _remote_rejects(remote_judge, problems):
    """The references the remote judge rejects. The server's limit is wall-clock and six requests
    share the machine's cores (with whatever else runs beside the tests), so a reference that timed
    out is judged once more on its own, and a load-sensitive one may time out even then."""
    pairs = [(p, p.solutions[0]) for p in problems]
    results = _alone_if_timed_out(remote_judge, pairs, remote_judge.judge_many(pairs, code_is_program=True))
    return {r.problem_id: (r.verdict.value, r.failures[:1]) for r in results if not r.accepted
            and not _load_sensitive_timeout(r)}


def test_humaneval_tests_run_apart_remotely_accept_the_references(remote_judge, datasets_dir):
    """Every HumanEval plan runs its tests apart from the program (the tests' process calls the
    program's); a dozen of them through the sandbox_fusion backend here, all of them in the slow
    `test_references_accepted_remotely`."""
    problems = [problem_from_humaneval(r) for r in _rows(datasets_dir / "humaneval.jsonl")]
    assert not _remote_rejects(remote_judge, problems[::14])


@pytest.mark.slow
@pytest.mark.timeout(1200)  # 2 min idle; far longer beside the smoke study on two cores
@pytest.mark.parametrize("name", ["humaneval.jsonl", "mbpp_full.jsonl", "mbpp_sanitized.jsonl"])
def test_references_accepted_remotely(remote_judge, datasets_dir, name):
    """Every HumanEval and MBPP reference through the sandbox_fusion backend (≈ 40 s, 2 min, 20 s).
    A sanitized row whose program (line endings aside: Python reads CRLF source as LF), plan and
    limits are an mbpp_full row's sends that row's requests again: judged with mbpp_full, not twice."""
    rows = _rows(datasets_dir / name)
    problems = ([problem_from_humaneval(r) for r in rows] if name == "humaneval.jsonl"
                else [problem_from_mbpp(r, sanitized=name == "mbpp_sanitized.jsonl") for r in rows])
    if name == "mbpp_sanitized.jsonl":
        full = {_same_request(problem_from_mbpp(r, sanitized=False))
                for r in _rows(datasets_dir / "mbpp_full.jsonl")}
        problems = [p for p in problems if _same_request(p) not in full]
        assert len(problems) >= 130, len(problems)  # 143 of the 427 rows are the sanitized set's own
    assert not _remote_rejects(remote_judge, problems)


def _same_request(problem) -> str:
    """What an MBPP reference's remote verdict is made of: its program, its tests' plan (the part
    sent with each request and the expected values kept here) and its limits."""
    plan = function_plan(problem)
    return json.dumps([problem.solutions[0].replace("\r\n", "\n"), plan.public, plan.secret,
                       problem.time_limit_s, problem.memory_limit_mb], sort_keys=True, default=repr)


def test_humaneval_mutations_not_accepted(judge, datasets_dir):
    problems = [problem_from_humaneval(r) for r in _rows(datasets_dir / "humaneval.jsonl")][:40]
    mutated = []
    for p in problems:
        body = p.solutions[0][len(p.prompt):]
        if "return " in body:
            mutated.append((p, p.prompt + body.replace("return ", "return None and ", 1)))
    results = judge.judge_many(mutated, code_is_program=True)
    # `return None and ...` returns None; a test suite that never looks at that value may still pass.
    assert sum(r.accepted for r in results) <= len(results) // 20


# ---------------------------------------------------------------- CodeContests (derived train sample)


def _cc_problems(datasets_dir, tests: int | None = None):
    problems = [problem_from_codecontests_derived(r) for r in _rows(datasets_dir / CC_FILE)]
    problems = [p.model_copy(update={"checker": CC_CHECKERS.get(_short(p.id))}) for p in problems]
    if tests:
        problems = [p.model_copy(update={"stdio_tests": p.stdio_tests[:tests]}) for p in problems]
    return problems


def _short(problem_id: str) -> str:
    return problem_id.removeprefix("codecontests/").rsplit("_", 1)[0]


def _disagreements(problems, compare: str) -> dict[str, str]:
    """problem → first failing verdict, for reference solutions the judge does not accept.
    Sparse mode: the first failing test is enough to explain a disagreement. A CC_FLAKY problem's
    verdict is asserted nowhere, so its TIMEOUT is not judged once more on its own (each such
    rerun costs its tests up to the one at the CPU limit, one after another)."""
    pairs = [(p, p.solutions[0]) for p in problems]
    with Judge(JudgeConfig(timeout_s=6.0, compare=compare, cache=False, stop_on_first_failure=True)) as judge:
        results = judge.judge_many(pairs, code_is_program=True)
        counted = [i for i, r in enumerate(results) if _short(r.problem_id) not in CC_FLAKY]
        for i, r in zip(counted, _alone_if_timed_out(judge, [pairs[i] for i in counted], [results[i] for i in counted])):
            results[i] = r
    return {_short(r.problem_id): r.verdict.value for r in results if not r.accepted}


def test_codecontests_subset_agreement(datasets_dir):
    """40 problems (seeded shuffle), first 3 tests: no disagreement outside the explained list.
    (Few tests may hide a listed disagreement, so only new ones are checked here. The sample in
    the repository holds most listed problems, so how many disagree says nothing here.)"""
    problems = _cc_problems(datasets_dir, tests=3)
    random.Random(0).shuffle(problems)
    got = _disagreements(problems[:40], "float")
    unexplained = {k: v for k, v in got.items() if k not in CC_DISAGREE_FLOAT and k not in CC_FLAKY}
    assert not unexplained, unexplained


@pytest.mark.slow
@pytest.mark.timeout(1200)  # all 390 problems, every test: ~5 min on 2 idle cores
def test_codecontests_all_problems_agreement(datasets_dir):
    problems = _cc_problems(datasets_dir)
    exact = _disagreements(problems, "tokens")
    # Only a WRONG_ANSWER can change with the tolerance: float accepts every output tokens accepts,
    # so the tests before a sample's first failing one pass again, and that test's TIMEOUT, crash
    # or limit does not depend on the comparison. A CC_FLAKY problem keeps its exact verdict too:
    # its verdict is asserted nowhere (623_d_birthday's tests take 95 s of CPU, one after another).
    again = {k for k, v in exact.items() if v == "WRONG_ANSWER" and k not in CC_FLAKY}
    tolerant = {k: v for k, v in exact.items() if k not in again}
    tolerant |= _disagreements([p for p in problems if _short(p.id) in again], "float")
    listed = set(CC_DISAGREE_FLOAT)
    assert set(tolerant) - set(CC_FLAKY) == listed - set(CC_FLAKY), (set(tolerant) ^ listed)
    assert {k: v for k, v in tolerant.items() if k not in CC_FLAKY} == {
        k: v[0] for k, v in CC_DISAGREE_FLOAT.items() if k not in CC_FLAKY}
    assert set(exact) - set(CC_FLAKY) == (listed | CC_DISAGREE_TOKENS_ONLY) - set(CC_FLAKY)
    if len(problems) == 390:  # the whole sample (RLVR_RUN_TEST_DATA); the repository's holds most listed ones
        assert len(problems) - len(tolerant) >= 314 and len(problems) - len(exact) >= 290


def _reference_output(program: str, text: str) -> list[str] | None:
    """The tokens plain CPython prints, a fresh `python -I` (None: crashed or > 5 s)."""
    with tempfile.TemporaryFile() as stdin:  # a file, as the judge gives: os.fstat(0).st_size works
        stdin.write(text.encode())
        stdin.seek(0)
        try:
            done = subprocess.run([sys.executable, "-I", "-c", program], stdin=stdin, capture_output=True, timeout=5)
        except subprocess.TimeoutExpired:
            return None
    return done.stdout.decode("utf-8", "replace").split() if done.returncode == 0 else None


def _same_behaviour(program: str, inputs: list[str], original: list) -> bool:
    return all(_reference_output(program, text) == want for text, want in zip(inputs, original))


def _mutation_run(problems) -> tuple[list, dict[str, int]]:
    """Judge every mutant of every reference; skip (and count) the ones that provably behave like
    the reference on these tests: the same output tokens from plain CPython, test by test."""
    counts = {"mutants": 0, "same_behaviour_skipped": 0}
    candidates = []
    for problem in problems:
        inputs = [t.input for t in problem.stdio_tests]
        original = [_reference_output(problem.solutions[0], text) for text in inputs]
        for name, program in mutants.mutants(problem.solutions[0]).items():
            counts["mutants"] += 1
            if _same_behaviour(program, inputs, original):
                counts["same_behaviour_skipped"] += 1
            else:
                candidates.append((problem, name, program))
    with Judge(JudgeConfig(timeout_s=6.0, cache=False, stop_on_first_failure=True)) as judge:
        results = judge.judge_many([(p, prog) for p, _, prog in candidates], code_is_program=True)
    accepted = [(_short(p.id), name, r.verdict.value) for (p, name, _), r in zip(candidates, results) if r.accepted]
    return accepted, counts


def _mutation_targets(datasets_dir, tests: int, limit: int | None):
    """Problems whose reference is accepted with exact tokens and whose tests are small enough
    to run twice per mutant in plain CPython."""
    skip = set(CC_DISAGREE_FLOAT) | CC_DISAGREE_TOKENS_ONLY | set(CC_FLAKY) | set(CC_CHECKERS)
    problems = [p for p in _cc_problems(datasets_dir, tests) if _short(p.id) not in skip]
    return problems[:limit] if limit else problems


def test_codecontests_mutations_not_accepted_subset(datasets_dir):
    accepted, counts = _mutation_run(_mutation_targets(datasets_dir, tests=3, limit=15))
    assert not accepted, accepted
    assert counts == {"mutants": 25, "same_behaviour_skipped": 9}  # deterministic: 16 wrong programs judged


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 540 mutants, each first run in plain CPython to prove it differs
def test_codecontests_mutations_not_accepted_all(datasets_dir):
    accepted, counts = _mutation_run(_mutation_targets(datasets_dir, tests=10, limit=None))
    assert not accepted, accepted
    print(f"mutants: {counts}")
