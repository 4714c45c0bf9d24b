"""Example inputs for a model built from a config: by input name, modality and docstring."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from mhaudit.data import LeftOutInput
from mhaudit.errors import LoadError
from mhaudit.load.audio import documented_waveform
from mhaudit.load.configtree import find_size, modality_config
from mhaudit.load.docshapes import BATCH_DIMS, DocInput, Unresolved, documented_inputs, resolve_dim
from mhaudit.load.fit import fit_inputs
from mhaudit.load.modalities import (
    FRAMES,
    IMAGE_SIZES,
    WIDTHS,
    NoSize,
    Request,
    embeddings,
    features,
    image_size,
    pixels,
    text,
)
from mhaudit.load.placement import place_tokens
from mhaudit.load.vision import INPUT_MAKERS, packed_patches

Shapes = Sequence[tuple[str, tuple[int, ...]]]
"""Named input shapes, ``(("input_features", (1, 80, 3000)), ...)``."""

_ID_SUFFIXES = ("_ids", "_mask", "_positions")
"""Inputs by these names hold integers (token ids, masks, positions)."""

_COMPANIONS = ("_mask", "_padding")
"""``<input>_mask`` / ``<input>_padding``: one entry per position of ``<input>``."""

_EMBEDDINGS = ("inputs", "inputs_embeds", "hidden_states")

MAKE_INPUTS_TIP = ("Pass --input-shape NAME=AxB for each input, or write a model file with "
                   "build_model() and example_inputs().")

_SEQUENCE_DIMS = frozenset({"sequence_length", "seq_len", "seq_length", "episode_length",
                            "num_frames"})


def named_input(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor for the input called ``name``: ones for masks, zeros for ids, else floats."""
    if name.endswith("_mask"):
        return torch.ones(*shape, dtype=torch.long)
    if name.endswith(_ID_SUFFIXES) or name in ("input_ids", "labels"):
        return torch.zeros(*shape, dtype=torch.long)
    return torch.zeros(*shape)


def with_shapes(kwargs: dict[str, Any], shapes: Shapes) -> dict[str, Any]:
    """``kwargs`` with each named shape made (replacing an input of that name, if any)."""
    out = dict(kwargs)
    for name, shape in shapes:
        out[name] = named_input(name, shape)
    return out


def _documented(doc: DocInput, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor of the documented type: long ids, bool masks with nothing masked, floats."""
    if "Long" in doc.type_name or "Int" in doc.type_name:
        fill = 1 if doc.name.endswith("_mask") else 0
        return torch.full(shape, fill, dtype=torch.long)
    if "Bool" in doc.type_name:
        return torch.zeros(*shape, dtype=torch.bool)
    return named_input(doc.name, shape)


def _dim_lookup(req: Request, name: str, position: int) -> Any:
    stem = name.split("_")[0]

    def lookup(dim: str) -> int | None:
        if dim in BATCH_DIMS:
            return req.batch
        if dim in _SEQUENCE_DIMS:
            return find_size(req.config, (f"{stem}_seq_len", f"{stem}_length",
                                          "context_length", *FRAMES)) or req.seq_len
        if dim in ("frame_size", "height", "width", *IMAGE_SIZES):
            return image_size(modality_config(req.config, ("vision", "video", "image")))[0]
        if dim == "feature_dim":
            return int(features(req, name)[name].shape[-1])
        size = find_size(req.config, (dim,))
        if size is None and dim in ("dim", "hidden_dim", "embed_dim"):
            size = find_size(req.config, WIDTHS)
        if size is None and dim == "num_channels" and "pixel" in name:
            size = 3
        return req.seq_len if size is None and position == 1 else size

    return lookup


def _from_doc(req: Request, doc: DocInput) -> dict[str, Any]:
    dims: list[str] = []
    shape: list[int] = []
    for position, dim in enumerate(doc.dims):
        try:
            size = resolve_dim(dim, _dim_lookup(req, doc.name, position), req.config)
        except (Unresolved, NoSize):
            size = 0
        shape.append(size)
        dims.append(str(size) if size else dim.upper().replace(" ", ""))
    if not all(shape):
        raise NoSize(doc.name, dims)
    return {doc.name: _documented(doc, tuple(shape))}


def _companion(name: str, made: dict[str, Any], doc: DocInput | None) -> torch.Tensor | None:
    """``<input>_mask`` over ``<input>``'s leading (batch, position) dims: nothing masked."""
    for suffix in _COMPANIONS:
        owner = made.get(name[: -len(suffix)]) if name.endswith(suffix) else None
        if isinstance(owner, torch.Tensor) and owner.dim() >= 2:
            shape = tuple(owner.shape[:2])
            if doc is not None:
                return _documented(doc, shape)
            if suffix == "_padding":
                return torch.zeros(*shape, dtype=torch.long)
            return named_input(name, shape)
    return None


def _make(req: Request, name: str, docs: dict[str, DocInput],
          made: dict[str, Any]) -> dict[str, Any]:
    """One input by the first rule that sizes it; :class:`NoSize` when none does."""
    if name in INPUT_MAKERS:
        made = INPUT_MAKERS[name](req)
        if name == "input_values" and name in docs:  # raw audio with a channel axis
            made[name] = documented_waveform(req, made[name], docs[name])
        return made
    companion = _companion(name, made, docs.get(name))
    if companion is not None:
        return {name: companion}
    if "mel" in name.split("_") or name.endswith("_features"):
        return features(req, name)
    if name in docs and docs[name].dims:
        return _from_doc(req, docs[name])
    if name in _EMBEDDINGS or name.endswith(("_embeds", "_hidden_states")):
        return embeddings(req, name)
    raise NoSize(name, [])


def _signature(model: nn.Module | None) -> dict[str, inspect.Parameter] | None:
    if model is None:
        return None
    try:
        return dict(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return None


def needed_inputs(mains: Sequence[str], model: nn.Module | None,
                  docs: dict[str, DocInput]) -> list[str]:
    """The main inputs the forward takes, then its arguments without defaults; where a
    main input has no shared maker, also the inputs its docstring does not call optional."""
    params = _signature(model)
    if params is None:
        return list(mains)
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = [m for m in mains if m in params]
    names += [n for n, p in params.items() if p.kind in kinds and p.default is p.empty]
    if any(m not in INPUT_MAKERS for m in names):
        names += [n for n, d in docs.items() if n in params and d.dims and not d.optional
                  and n != "labels"]
    return list(dict.fromkeys(names))


def _no_inputs_error(name: str, dims: list[str]) -> LoadError:
    if not dims:
        return LoadError(f"cannot make example inputs for input {name!r}: neither its name "
                         "nor the model's docstring gives its shape", MAKE_INPUTS_TIP)
    unknown = [d for d in dims if not d.isdigit()]
    return LoadError(
        f"cannot make example inputs for input {name!r}: the config does not give "
        f"{', '.join(unknown)}",
        f"Pass --input-shape {name}={'x'.join(dims)} with {', '.join(unknown)} set to the "
        "sizes the model reads.")


def config_inputs(main: str | Sequence[str], config: Any, batch: int, seq_len: int, *,
                  model: nn.Module | None = None, shapes: Shapes = ()) -> dict[str, Any]:
    """Keyword inputs for a model built from ``config`` whose main input is ``main``
    (:func:`fitted_inputs`' inputs, without the list of those left out)."""
    return fitted_inputs(main, config, batch, seq_len, model=model, shapes=shapes)[0]


def fitted_inputs(main: str | Sequence[str], config: Any, batch: int, seq_len: int, *,
                  model: nn.Module | None = None, shapes: Shapes = ()
                  ) -> tuple[dict[str, Any], tuple[LeftOutInput, ...]]:
    """Keyword inputs for a model built from ``config`` whose main input is ``main``, and
    the inputs of another modality left out because the forward did not run on them.

    Text, audio features, raw audio, pixels and video at the config's sizes, and any
    other input the forward needs as its docstring shapes it; a text model that also has
    a vision config gets pixels too, with its image, audio and video tokens placed in the
    text; an encoder-decoder gets decoder token ids. Where the forward does not run on
    them, they are fitted (:func:`~mhaudit.load.fit.fit_inputs`). ``shapes`` (the user's)
    come first and are never made.
    """
    req = Request(model, config, batch, seq_len)
    mains = [main] if isinstance(main, str) else [str(m) for m in main]
    docs = documented_inputs(model.forward) if model is not None else {}
    made = with_shapes({}, shapes)
    packed = packed_patches(req, docs)  # pixels and grid together, unless the user shaped one
    if not packed.keys() & made.keys():
        made.update(packed)
    for name in needed_inputs(mains, model, docs):
        if name in made:
            continue
        try:
            made.update(_make(req, name, docs, made))
        except NoSize as exc:
            raise _no_inputs_error(exc.name, exc.dims) from None
    fixed = frozenset(name for name, _ in shapes)
    decoder = _decoder_ids(req, made)
    required = dict(made)
    text = {**required, **decoder}  # what the forward requires, before other modalities'

    def without(skip: frozenset[str]) -> dict[str, Any]:
        """The inputs made again without the modalities whose input ``skip`` names."""
        again = dict(required)
        _multimodal(req, mains, again, fixed, skip)
        return {**again, **decoder}

    every = without(frozenset())
    return every, fit_inputs(req, every, text, fixed, without)


def _decoder_ids(req: Request, made: dict[str, Any]) -> dict[str, Any]:
    """Decoder token ids for an encoder-decoder (at most its target positions) that
    ``made`` lacks."""
    if not getattr(req.config, "is_encoder_decoder", False) or "decoder_input_ids" in made:
        return {}
    limit = getattr(req.config, "max_target_positions", None)
    n = min(req.seq_len, limit) if isinstance(limit, int) and limit > 0 else req.seq_len
    return {"decoder_input_ids": torch.zeros(req.batch, n, dtype=torch.long)}  # (B, n)


def _multimodal(req: Request, mains: Sequence[str], made: dict[str, Any],
                fixed: frozenset[str], skip: frozenset[str] = frozenset()) -> None:
    """Pixels beside the text of a text-and-vision model, tokens for every modality but
    those whose input ``skip`` names."""
    params = _signature(req.model)
    has_vision = modality_config(req.config, ("vision", "image")) is not req.config
    takes_pixels = (params is None or "pixel_values" in params) and "pixel_values" not in skip
    if "input_ids" in mains and has_vision and takes_pixels and "pixel_values" not in made:
        made.update(pixels(req))
    has_text = modality_config(req.config, ("text",)) is not req.config
    if has_text and params is not None and "input_ids" in params and "input_ids" not in made:
        made.update(text(req))  # an image-first model whose text tower reads the image
    if req.model is not None:
        place_tokens(req, made, params or {}, lambda doc: _from_doc(req, doc), fixed, skip)
