"""The default run keeps a stable sample of the slow tests; the slow set runs them all."""

from __future__ import annotations

from slowset import SAMPLE_EVERY, default_run, sampled


def test_the_sample_is_stable_and_about_one_in_eight() -> None:
    ids = [f"tests/integration/test_zoo.py::test_arch[{i}]" for i in range(4000)]
    kept = [i for i in ids if sampled(i)]
    assert kept == [i for i in ids if sampled(i)]  # the same tests every run
    assert abs(len(kept) / len(ids) - 1 / SAMPLE_EVERY) < 0.02


def test_only_the_default_run_leaves_slow_tests_out() -> None:
    assert default_run("", True, "")  # .ci/run, bash scripts/test.sh
    assert not default_run("slow", True, "")  # bash scripts/test.sh -m slow
    assert not default_run("", False, "")  # pytest tests/cost/test_models.py
    assert not default_run("", True, "1")  # MHAUDIT_SLOW=1
