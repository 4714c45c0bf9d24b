"""Run architectures each in its own forked process with a timeout, at most ``jobs`` at a time."""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing as mp
import time
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from zoo_harness.table import write_atomic
from zoo_harness.worker import Result


def model_types() -> list[str]:
    """Every model type with a base model class in transformers, sorted."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES)


def _child(run: Callable[[str], Result], name: str, conn: Connection) -> None:
    try:
        result = run(name)
    except BaseException as exc:  # the harness itself failed: still one result
        result = Result(name, "exit 4", f"harness: {type(exc).__name__}: {exc}"[:300])
    conn.send(result.to_json())
    conn.close()


def _finish(name: str, proc: Any, conn: Connection, started: float, timed_out: bool) -> Result:
    if timed_out:
        proc.kill()
        proc.join()
        return Result(name, "timeout", "no answer in time", seconds=time.monotonic() - started)
    if conn.poll():
        return Result(**json.loads(conn.recv()))
    proc.join()
    return Result(name, "exit 4", f"the process died (exit code {proc.exitcode})",
                  seconds=round(time.monotonic() - started, 1))


def run_all(names: Iterable[str], run: Callable[[str], Result], *, jobs: int = 1,
            timeout_s: float = 60.0, deadline: float | None = None) -> Iterator[Result]:
    """Yield one result per name as each finishes; stop starting new ones after ``deadline``."""
    ctx = mp.get_context("fork")
    pending = list(names)
    running: dict[str, tuple[Any, Connection, float]] = {}
    try:
        while pending or running:
            while pending and len(running) < jobs and (deadline is None
                                                       or time.time() < deadline):
                name = pending.pop(0)
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(run, name, send), daemon=True)
                proc.start()
                send.close()
                running[name] = (proc, recv, time.monotonic())
            if not running:
                return
            time.sleep(0.2)
            for name, (proc, conn, started) in list(running.items()):
                late = time.monotonic() - started > timeout_s
                if conn.poll() or not proc.is_alive() or late:
                    del running[name]
                    yield _finish(name, proc, conn, started, late and not conn.poll())
                    proc.join(timeout=5)
                    if proc.is_alive():  # answered, but a thread of the model holds it
                        proc.kill()
                        proc.join()
    finally:
        for proc, _, _ in running.values():  # stopped early: no orphans
            proc.kill()
            proc.join()


def load_results(path: Path) -> dict[str, Result]:
    """Results already in the JSON-lines file (for resuming), by name."""
    if not path.exists():
        return {}
    out: dict[str, Result] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            result = Result(**json.loads(line))
            out[result.name] = result
    return out


def mixed_order(names: Iterable[str]) -> list[str]:
    """A fixed hash order, so a partial sweep is a fair sample."""
    return sorted(names, key=lambda n: hashlib.sha1(n.encode()).hexdigest())


def record(todo: list[str], run: Callable[[str], Result], done: dict[str, Result], *,
           out: Path, results_path: Path, page: Callable[[Iterable[Result]], str],
           jobs: int, timeout_s: float, deadline: float | None, width: int = 32) -> None:
    """Run ``todo``, appending each result to the JSON-lines log and rewriting the page
    atomically after each one, so a sweep that stops keeps every answer it had."""
    results_path.parent.mkdir(parents=True, exist_ok=True)
    sweep = run_all(todo, run, jobs=jobs, timeout_s=timeout_s, deadline=deadline)
    with results_path.open("a") as log, contextlib.closing(sweep):
        for result in sweep:
            done[result.name] = result
            log.write(result.to_json() + "\n")
            log.flush()
            print(f"{result.name:{width}} {result.status:8} {result.seconds:5.0f}s "
                  f"{result.reason[:120]}", flush=True)
            write_atomic(out, page(done.values()))
    write_atomic(out, page(done.values()))
