"""timm's registry, where timm imports: each model built at a small size, audited and checked."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import Any

from zoo_harness.sweep import load_results, mixed_order, record
from zoo_harness.table import headline, render

SIZE_WORDS = ("atto", "femto", "pico", "nano", "xxxs", "xxs", "tiny", "xs", "mini", "small",
              "s", "lite", "b0", "t", "medium", "m", "base", "b")
"""Name tokens of timm's size ladder, smallest first: a family is swept at its smallest."""
BIG_WORDS = ("large", "l", "huge", "h", "giant", "g", "gigantic", "e")
"""Size tokens ranked after names without one."""
TITLE = "The timm zoo"
RAN_BY = "timm builds and runs at these sizes"
PREAMBLE = (
    "One model per architecture family of `timm.list_models()` (a family: the defining "
    "module and the letters of the name's first token: `vision_transformer/vit`, "
    "`resnet/resnet` for resnet18 and resnet50d), its smallest member by name, "
    "built by `python benchmarks/zoo.py --timm` with `timm.create_model(name, pretrained=False)` "
    "at the first image size in 64, 96, 128, 160, 224, 256 pixels at which it "
    "builds and runs on CPU (`img_size=` where the constructor takes it), and audited from a "
    "model file with `mhaudit report model.py --format json`. *exact*: every module that "
    "declares a head count (`num_heads`) has a block with its heads, KV heads, head dim and "
    "query-projection width, no block appears where no module declares heads, the parameters "
    "equal the module's, and matmul + conv FLOPs equal FlopCounterMode's on a real CPU "
    "forward (within 1%). *missed*: no blocks where modules declare heads. *skipped*: timm "
    "cannot build or run the model at these sizes. *timeout*: no answer within the "
    "per-model limit."
)


def timm_import_error() -> str | None:
    """Why timm cannot be used here, or None when it imports."""
    try:
        import timm  # noqa: F401
    except Exception as exc:  # missing, or a torchvision built for another torch/CUDA
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


def note() -> str:
    """One line for the transformers zoo page on timm's registry."""
    return ("timm's registry is swept by `python benchmarks/zoo.py --timm --out "
            "docs/zoo_timm.md` in a venv with timm (`scripts/timm-venv.sh`); see "
            "[zoo_timm.md](zoo_timm.md).")


def _stem(token: str) -> str:
    """The letters a name token starts with (``xxs24`` -> ``xxs``, ``resnet50x4`` -> ``resnet``)."""
    return re.match(r"[a-z]*", token).group(0)  # type: ignore[union-attr]


def _size_rank(name: str) -> tuple[int, int, str]:
    tokens = [_stem(t) for t in name.replace(".", "_").split("_")]
    ranks = [SIZE_WORDS.index(t) for t in tokens if t in SIZE_WORDS]
    ranks += [len(SIZE_WORDS) + 1 + BIG_WORDS.index(t) for t in tokens if t in BIG_WORDS]
    rank = min(ranks, default=len(SIZE_WORDS))
    return rank, len(name), name


def family(name: str, module: str) -> str:
    """``module/stem`` of a registered model name: the letters of its first token
    (``vision_transformer/vit``, ``resnet/resnet`` for resnet18 and resnet50d)."""
    return f"{module}/{_stem(name.split('_')[0]) or name.split('_')[0]}"


def pick_families(models: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The smallest member (by size words, then the shortest name) of each family, by family.

    ``models`` are (name, defining module) pairs."""
    members: dict[str, list[str]] = {}
    for name, module in models:
        members.setdefault(family(name, module), []).append(name)
    return {fam: min(names, key=_size_rank) for fam, names in sorted(members.items())}


def registry(every: bool) -> list[str]:
    """The names to sweep: one per family, or every registered model with ``every``."""
    import timm
    from timm.models import get_arch_name

    names = timm.list_models()
    if every:
        return names
    module_of = _module_of()
    return list(pick_families((n, module_of.get(get_arch_name(n), "?")) for n in names).values())


def _module_of() -> dict[str, str]:
    from timm.models import _registry

    return dict(_registry._model_to_module)


def main(args: Any) -> int:
    """Sweep timm's registry; 2 when timm does not import here."""
    reason = timm_import_error()
    if reason is not None:
        print(f"timm does not import here ({reason}); build a venv with "
              "scripts/timm-venv.sh PATH and run this with PATH/bin/python", file=sys.stderr)
        return 2
    from zoo_harness.timm_worker import preload, run_one

    results_path = args.results or args.out.with_suffix(".jsonl")
    done = {} if args.fresh else load_results(results_path)
    names = args.only or mixed_order(registry(args.all))
    todo = [n for n in names if n not in done or args.only or done[n].status in args.retry]
    if args.limit is not None:
        todo = todo[: args.limit]
    preload()
    record(todo, run_one, done, out=args.out, results_path=results_path,
           page=lambda results: render(results, TITLE, PREAMBLE, RAN_BY),
           jobs=args.jobs, timeout_s=args.timeout, deadline=args.deadline, width=40)
    print(headline(done.values(), RAN_BY))
    return 0

