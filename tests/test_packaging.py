"""Distribution: the wheel and sdist build cleanly; the pre-commit hooks and the action exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_and_sdist_build_without_warnings_and_pass_twine(tmp_path: Path) -> None:
    pytest.importorskip("build")
    pytest.importorskip("twine")
    from mhaudit import __version__

    # setuptools warns that byte-compiling is disabled when PYTHONDONTWRITEBYTECODE is set:
    # that is the caller's environment, not the package's configuration.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, env=env, timeout=600, check=False)
    output = built.stdout + built.stderr
    assert built.returncode == 0, output[-2000:]
    assert not re.search(r"warning|deprecat", output, re.IGNORECASE), [
        line for line in output.splitlines() if re.search(r"warn|deprecat", line, re.I)]
    wheel = tmp_path / f"mhaudit-{__version__}-py3-none-any.whl"
    sdist = tmp_path / f"mhaudit-{__version__}.tar.gz"
    assert wheel.exists() and sdist.exists()
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel),
                              str(sdist)], capture_output=True, text=True, timeout=120,
                             check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    with zipfile.ZipFile(wheel) as archive:
        meta = archive.read(f"mhaudit-{__version__}.dist-info/METADATA").decode()
        names = archive.namelist()
    assert f"Version: {__version__}\n" in meta
    assert "License-Expression: MIT\n" in meta and "License-File: LICENSE\n" in meta
    assert f"mhaudit-{__version__}.dist-info/licenses/LICENSE" in names
    assert "mhaudit/py.typed" in names
    with tarfile.open(sdist) as archive:
        carried = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for wanted in ("tests/conftest.py", "tests/data/sarif-schema-2.1.0.json",
                   "tests/golden/ci_pass_budget.json", "examples/textbook_mha.py",
                   "docs/rules/MHA001.md", "docs/zoo.jsonl", "examples/ci/mhaudit-gate.yml",
                   "constraints.txt"):
        assert wanted in carried, wanted  # the sdist runs its own tests and examples
    assert not any("__pycache__" in name for name in carried)


def test_manifest_carries_every_tracked_test_example_and_doc_file() -> None:
    """The fast half of the sdist check: each file git tracks under tests/ (tests/data
    included), examples/ and docs/ matches a ``recursive-include`` line of MANIFEST.in."""
    import fnmatch

    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist)")
    rules: dict[str, list[str]] = {}
    for line in (ROOT / "MANIFEST.in").read_text(encoding="utf-8").splitlines():
        words = line.split()
        if words[:1] == ["recursive-include"]:
            rules.setdefault(words[1], []).extend(words[2:])
    assert {"tests", "examples", "docs"} <= set(rules)
    listed = subprocess.run(["git", "ls-files", "tests", "examples", "docs"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    assert any(name.startswith("tests/data/") for name in listed)
    missing = [name for name in listed
               if not any(fnmatch.fnmatch(Path(name).name, pattern)
                          for pattern in rules[name.split("/", 1)[0]])]
    assert not missing, missing


def test_version_lives_in_one_place() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'dynamic = ["version"]' in text and 'attr = "mhaudit.__version__"' in text
    assert not re.search(r"^version\s*=\s*\"", text, re.MULTILINE)
    assert 'license = "MIT"' in text and 'license-files = ["LICENSE"]' in text


def test_constraints_pin_torch_and_transformers() -> None:
    pins = dict(line.split("==") for line in
                (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
                if "==" in line and not line.startswith("#"))
    assert set(pins) >= {"torch", "transformers"}
    transformers = pytest.importorskip("transformers")
    assert pins["transformers"] == transformers.__version__


def test_pre_commit_hooks_run_the_gate_and_the_report() -> None:
    yaml = pytest.importorskip("yaml")
    hooks = {h["id"]: h for h in yaml.safe_load(
        (ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))}
    assert set(hooks) == {"mhaudit-check", "mhaudit-report", "mhaudit-check-isolated",
                          "mhaudit-report-isolated"}
    for name in ("mhaudit-check", "mhaudit-report"):
        # the default hooks run the installed mhaudit and install nothing (no CUDA torch)
        assert hooks[name]["language"] == "system"
        isolated = hooks[f"{name}-isolated"]
        assert isolated["language"] == "python"
        assert isolated["entry"] == hooks[name]["entry"]
    assert hooks["mhaudit-check"]["entry"] == "mhaudit check"
    assert hooks["mhaudit-report"]["entry"].startswith("mhaudit report")
    for hook in hooks.values():
        assert hook["pass_filenames"] is False and "args" not in hook
    example = yaml.safe_load((ROOT / "examples" / "ci" / "pre-commit-config.example.yaml")
                             .read_text(encoding="utf-8"))
    used = {h["id"] for repo in example["repos"] for h in repo["hooks"]}
    assert used <= set(hooks) and {"mhaudit-check", "mhaudit-report"} <= used


def test_action_splits_its_arguments_as_a_shell_would() -> None:
    yaml = pytest.importorskip("yaml")
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    script = "\n".join(step.get("run", "") for step in action["runs"]["steps"])
    split = next(line for line in script.splitlines() if line.strip().startswith("split()"))
    probe = split + '\nmapfile -d "" -t got < <(split "$ARGS"); printf "[%s]" "${got[@]}"'
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=False,
                          env={**os.environ, "ARGS": "'models/my model.py' --gpu a100 $(id)"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[models/my model.py][--gpu][a100][$(id)]"  # quoted, never run


def test_action_runs_the_gate_with_annotations_and_a_summary() -> None:
    yaml = pytest.importorskip("yaml")
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    assert set(action["inputs"]) >= {"targets", "budget", "baseline", "format"}
    assert action["inputs"]["format"]["default"] == "github"
    assert action["runs"]["using"] == "composite"
    script = "\n".join(step.get("run", "") for step in action["runs"]["steps"])
    assert 'pip install --quiet "${GITHUB_ACTION_PATH}[hf]"' in script
    assert "mhaudit check" in script and "GITHUB_STEP_SUMMARY" in script
    # one audit: the summary comes from the same run (--summary), never a second one
    invocations = [line for line in script.splitlines()
                   if re.match(r"\s*(mhaudit|python -m mhaudit)\s", line)]
    assert len(invocations) == 1 and "${targets[@]}" in invocations[0], invocations
    assert '--summary "${RUNNER_TEMP' in script
    # arguments travel as bash arrays, each quoted: never re-split on whitespace
    assert re.search(r'mhaudit check "\$\{targets\[@\]\}" "\$\{common\[@\]\}" '
                     r'"\$\{extra\[@\]\}"', script)
    bash = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True,
                          check=False)
    assert bash.returncode == 0, bash.stderr


def test_readme_recipe_uses_the_hooks_and_the_action() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "id: mhaudit-check" in readme and "uses: mhaudit/mhaudit@" in readme
