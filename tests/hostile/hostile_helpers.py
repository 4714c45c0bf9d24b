"""Helpers for the hostile-input suite: model sources, runners, and the one-line-error check."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from mhaudit.cli import main

ROOT = Path(__file__).resolve().parents[2]

ATTENTION = '''
import math

import torch
from torch import nn


class Attention(nn.Module):
    """Textbook MHA, d = 32 and 4 heads: 4·32² + 4·32 = 4,224 parameters."""

    def __init__(self, d: int = 32, h: int = 4) -> None:
        super().__init__()
        self.h, self.d_k = h, d // h
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)

    def forward(self, x):
        b, n, d = x.shape
        q = self.q(x).view(b, n, self.h, self.d_k).transpose(1, 2)  # (B, h, n, d_k)
        k = self.k(x).view(b, n, self.h, self.d_k).transpose(1, 2)  # (B, h, n, d_k)
        v = self.v(x).view(b, n, self.h, self.d_k).transpose(1, 2)  # (B, h, n, d_k)
        probs = ((q @ k.transpose(-2, -1)) / math.sqrt(self.d_k)).softmax(dim=-1)
        return self.o((probs @ v).transpose(1, 2).reshape(b, n, d))
'''
"""A tiny attention layer every hostile model file starts from."""

GOOD = ATTENTION + '''

def build_model():
    return Attention()
'''

TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 32, "num_attention_heads": 4,
    "num_key_value_heads": 2, "num_hidden_layers": 1, "intermediate_size": 64,
    "vocab_size": 128, "max_position_embeddings": 64,
}
"""A transformers config small enough to build in a second."""


def model_file(folder: Path, body: str, name: str = "model.py") -> Path:
    """Write a model file (``ATTENTION`` plus ``body``) and return its path."""
    path = folder / name
    path.write_text(ATTENTION + "\n" + body, encoding="utf-8")
    return path


@dataclass(frozen=True)
class Run:
    """What one CLI run gave back."""

    code: int
    stdout: str
    stderr: str


def invoke(*args: str | Path) -> Run:
    """Run the CLI in-process with click's runner (stdout and stderr kept apart)."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    return Run(result.exit_code, result.stdout, result.stderr)


def subprocess_env(**extra: str) -> dict[str, str]:
    """A clean environment for ``python -m mhaudit``: no offline flags set by the caller."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "PYTHONIOENCODING")}
    env.update(extra)
    return env


def run_process(*args: str | Path, cwd: Path | None = None, timeout: float = 120,
                env: dict[str, str] | None = None) -> Run:
    """Run ``python -m mhaudit ARGS`` in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-m", "mhaudit", *[str(a) for a in args]], cwd=cwd,
        capture_output=True, timeout=timeout, env=env or subprocess_env(), check=False,
    )
    return Run(done.returncode, done.stdout.decode("utf-8", "replace"),
               done.stderr.decode("utf-8", "replace"))


def assert_one_error(run: Run, code: int, *needles: str) -> None:
    """The documented exit code, at most two stderr lines, no traceback, each needle there."""
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.code == code, f"exit {run.code}, wanted {code}; stderr:\n{run.stderr}"
    assert len(lines) <= 2, f"{len(lines)} stderr lines:\n{run.stderr}"
    assert "Traceback" not in run.stderr, run.stderr
    for needle in needles:
        assert needle in run.stderr, f"{needle!r} not in stderr:\n{run.stderr}"


def snapshot(folder: Path) -> dict[str, tuple[int, int, bool]]:
    """Every entry under ``folder`` with its size, mtime and whether it is a link."""
    state = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        state[str(path.relative_to(folder))] = (info.st_size, info.st_mtime_ns, path.is_symlink())
    return state


class _Counter(http.server.BaseHTTPRequestHandler):
    requests: list[str]

    def _count(self) -> None:
        self.requests.append(f"{self.command} {self.path}")
        self.send_response(404)
        self.end_headers()

    do_GET = do_HEAD = do_POST = _count

    def log_message(self, format: str, *args: object) -> None:
        return


@contextmanager
def fake_hub() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP endpoint that records every request; yields (url, requests)."""
    requests: list[str] = []
    handler = type("Handler", (_Counter,), {"requests": requests})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()
