"""Containment of user code, time limits, restored process state and one-line causes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mhaudit.contain.contain import contained, preserved_state, time_limit
from mhaudit.errors import LoadError, TraceError, first_line


@pytest.mark.parametrize(
    ("raise_it", "needle"),
    [
        (lambda: sys.exit(3), "build_model() called sys.exit(3)"),
        (lambda: sys.exit(), "build_model() called sys.exit()"),
        (lambda: (_ for _ in ()).throw(KeyboardInterrupt), "raised KeyboardInterrupt"),
        (lambda: 1 / 0, "ZeroDivisionError: division by zero"),
    ],
)
def test_contained_turns_everything_into_a_load_error(raise_it: object, needle: str) -> None:
    with pytest.raises(LoadError) as err, contained("build_model()", "m.py"):
        raise_it()  # type: ignore[operator]
    assert needle in err.value.one_line()
    assert err.value.one_line().startswith("m.py: ")


def test_contained_trace_stage_gives_a_trace_error() -> None:
    with pytest.raises(TraceError), contained("forward()", "m.py", trace=True):
        raise RuntimeError("no")


def test_mhaudit_errors_pass_through_unchanged() -> None:
    error = LoadError("own message", "own tip")
    with pytest.raises(LoadError) as err, contained("build_model()", "m.py"):
        raise error
    assert err.value is error


def test_time_limit_names_the_running_stage() -> None:
    with pytest.raises(LoadError, match=r"timed out after 0.2 s in build_model\(\)"), \
            time_limit(0.2), contained("build_model()", "m.py"):
        while True:
            pass


def test_time_limit_is_disarmed_afterwards() -> None:
    import signal

    with time_limit(5):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_preserved_state_restores_cwd_and_sys_path(tmp_path: Path) -> None:
    cwd, path = os.getcwd(), list(sys.path)
    with preserved_state(str(tmp_path)):
        assert sys.path[0] == str(tmp_path)
        os.chdir(tmp_path)
        sys.path.append("elsewhere")
    assert os.getcwd() == cwd and sys.path == path


def test_first_line_keeps_the_chained_cause() -> None:
    try:
        try:
            raise ModuleNotFoundError("No module named 'fast_kernels'")
        except ImportError as inner:
            raise ImportError("optional kernels unavailable") from inner
    except ImportError as exc:
        text = first_line(exc)
    assert text == ("ImportError: optional kernels unavailable (caused by "
                    "ModuleNotFoundError: No module named 'fast_kernels')")


def test_first_line_keeps_a_reason_on_the_second_line() -> None:
    assert first_line(ValueError("validation failed:\nhidden size 65 is not a multiple of 4")) \
        == "ValueError: validation failed: hidden size 65 is not a multiple of 4"
