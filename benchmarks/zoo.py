"""The transformers zoo as a test: every architecture from a tiny config, audited and checked.

Each model type's config class gives its defaults; width, depth, heads, KV heads,
vocabulary, positions, image and audio sizes are shrunk by attribute name. mhaudit
audits the config.json (``mhaudit report``, in process, so the exit code is the CLI's);
the same model built on CPU gives the reference: its parameter count, torch's
FlopCounterMode over one forward, and the config's heads, KV heads, head dims and widths.
Every architecture runs in its own process with a timeout. Results are appended to a
JSON-lines file, so a second run resumes where the first stopped.

    python benchmarks/zoo.py --out docs/zoo.md               # the whole zoo
    python benchmarks/zoo.py --only gpt2 --only t5           # some of it
    python benchmarks/zoo.py --limit 20 --jobs 2 --stop-at 20:30
    python benchmarks/zoo.py --timm --out docs/zoo_timm.md  # timm's registry (its own venv)
    python benchmarks/zoo.py --fold-check --out docs/zoo_fold.md  # folded = unfolded
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from zoo_harness import fold_worker, timm_zoo
from zoo_harness.sweep import load_results, mixed_order, model_types, record
from zoo_harness.table import RAN_BY, headline, render
from zoo_harness.tiny import FREE_HEAD_DIM
from zoo_harness.worker import SEQ, STATUSES, preload, run_one

PREAMBLE = (
    "Every transformers model type with a base model, built by `python benchmarks/zoo.py` "
    "from a tiny config derived from its config class (width 64, 4 heads, 2 KV heads where "
    "the default groups queries, 2 layers, small vocabulary, 64-pixel images (224 where "
    "the config names no size), short audio; "
    f"every declared head dim set to {FREE_HEAD_DIM}, unequal to width / heads, except in "
    "a tower transformers does not run with it, which the row names). mhaudit audits it "
    f"twice: `mhaudit report CONFIG --format json` at {SEQ} tokens with its own inputs, and "
    "a model file with the reference's inputs. The reference reads nothing of mhaudit: "
    "transformers builds the model (`AutoModel.from_config`) and runs it on inputs made by "
    "transformers' conventions (the model's `main_input_name` and required forward "
    "arguments at the config's sizes). *exact*: every block's heads, KV heads, head dim "
    "and width equal what its module declares (its attributes, its Q layer's input width) "
    "or, where it declares none, fit the config; each block's W_Q, W_K, W_V and W_O equal "
    "its module's own layers where their names say their roles (fused layers against the "
    "roles they join); the parameters equal the module's; matmul + conv FLOPs on the "
    "reference's inputs equal FlopCounterMode's on the real forward (within 1%); and every "
    "attention module that forward runs is a block. *exit 3*: mhaudit gave up, on its own "
    "inputs or the reference's: a failure, whatever the cause. *missed*: no blocks where "
    "the model has attention. *skipped*: transformers cannot build the model from the tiny "
    "config or run it on the conventional inputs; this depends on the reference alone. "
    "*timeout*: no answer within the per-architecture limit."
)
FOLD_PREAMBLE = (
    "Every transformers model type with a base model, from the same tiny configs as the zoo "
    f"but {fold_worker.LAYERS} layers deep (one layer of each kind its per-layer lists name "
    f"kept) with sliding windows of {fold_worker.WINDOW} tokens, audited by "
    "`python benchmarks/zoo.py --fold-check` twice: `mhaudit report CONFIG --format json "
    f"--decode --context 64` at {SEQ} tokens, folded and with `--no-fold`. *equal*: the two "
    "reports are equal in every field but `folded_layers`. *differ*: the first field that "
    "differs. *not folded*: no list of four or more repeated layers was traced once. "
    "*skipped*: the unfolded audit itself could not build or trace the model."
)


def _deadline(stop_at: str | None) -> float | None:
    if not stop_at:
        return None
    now = dt.datetime.now(dt.timezone.utc)
    hour, minute = (int(x) for x in stop_at.split(":"))
    stop = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    return stop.timestamp()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/zoo.md"))
    parser.add_argument("--results", type=Path, default=None,
                        help="JSON-lines results to resume from (default: OUT with .jsonl)")
    parser.add_argument("--only", action="append", default=[], help="model type (repeatable)")
    parser.add_argument("--limit", type=int, default=None, help="at most N new architectures")
    parser.add_argument("--jobs", type=int, default=1, choices=(1, 2))
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per architecture")
    parser.add_argument("--stop-at", default=None, help="HH:MM UTC: start nothing new after")
    parser.add_argument("--order", choices=("mixed", "name"), default="mixed",
                        help="mixed: a fixed hash order, so a partial sweep is a fair sample")
    parser.add_argument("--retry", action="append", default=[], metavar="STATUS",
                        help="run again the architectures whose earlier result is STATUS")
    parser.add_argument("--fresh", action="store_true", help="ignore earlier results")
    parser.add_argument("--timm", action="store_true", help="sweep timm's registry instead")
    parser.add_argument("--fold-check", action="store_true",
                        help="audit each architecture folded and unfolded; they must agree")
    parser.add_argument("--all", action="store_true",
                        help="with --timm: every registered model, not one per family")
    args = parser.parse_args(argv)
    args.deadline = _deadline(args.stop_at)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so running children are killed
    if args.timm:
        return timm_zoo.main(args)
    results_path = args.results or args.out.with_suffix(".jsonl")
    done = {} if args.fresh else load_results(results_path)
    names = args.only or model_types()
    todo = [n for n in names if n not in done or args.only or done[n].status in args.retry]
    if args.order == "mixed":
        todo = mixed_order(todo)
    if args.limit is not None:
        todo = todo[: args.limit]
    preload()
    preamble = f"{PREAMBLE}\n\n{timm_zoo.note()}"
    title, run, statuses = "The transformers zoo", run_one, STATUSES
    ran_by, outside = RAN_BY, ("skipped",)
    if args.fold_check:
        title, preamble, run = "Folded against unfolded", FOLD_PREAMBLE, fold_worker.run_one
        statuses, ran_by, outside = fold_worker.STATUSES, "fold", ("skipped", "not folded")
    record(todo, run, done, out=args.out, results_path=results_path,
           page=lambda results: render(results, title, preamble, ran_by, statuses, outside),
           jobs=args.jobs, timeout_s=args.timeout, deadline=args.deadline)
    print(headline(done.values(), ran_by, statuses, outside))
    return 0


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"{time.monotonic() - started:.0f} s", file=sys.stderr)
    sys.exit(code)
