"""Image, audio and video tokens placed in ``input_ids``, counted by the model's own
feature method (``get_image_features`` and its kin), so that every tower runs."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mhaudit.load.configtree import read
from mhaudit.load.modalities import NoSize, Request, frames_axis
from mhaudit.load.vision import TOWER_MAKERS, patch_grids

CPU_COPY_LIMIT = 1 << 28
"""Most parameter elements of a meta model copied to the CPU (uninitialised) to count the
tokens of a feature method that the meta device cannot run (one with a data-dependent
shape, such as a mask applied by indexing)."""


@dataclass(frozen=True)
class Modality:
    """One kind of placeholder token and the input its features come from."""

    tokens: tuple[str, ...]
    """Config names of the placeholder token id."""
    inputs: tuple[str, ...]
    """Forward arguments that carry it, first match wins."""
    method: str
    """The model's feature method, which returns one row per placeholder token."""
    position_mask: str = ""
    """The forward argument that marks where the features go when no token id does (1 at
    each of their positions in ``input_ids``, 0 elsewhere)."""


MODALITIES = (
    Modality(("image_token_id", "image_token_index"), ("pixel_values", "flattened_patches"),
             "get_image_features", "image_embeds_position_mask"),
    Modality(("video_token_id", "video_token_index"), ("pixel_values_videos",),
             "get_video_features"),
    Modality(("audio_token_id", "audio_token_index"), ("input_features", "input_values"),
             "get_audio_features"),
)


def _token_id(config: Any, names: tuple[str, ...]) -> int | None:
    for node in (config, read(config, "text_config")):
        for name in names:
            value = read(node, name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
    return None


def _rows(result: Any) -> int:
    """Feature rows (one per placeholder token) of what a feature method returned."""
    if isinstance(result, torch.Tensor):
        return result.numel() // result.shape[-1] if result.dim() >= 2 else 0
    pooled = getattr(result, "pooler_output", None)
    if pooled is not None:
        return _rows(pooled)
    if isinstance(result, (list, tuple)):
        return sum(_rows(item) for item in result)
    hidden = getattr(result, "last_hidden_state", None)
    return _rows(hidden) if hidden is not None else 0


def feature_method(model: nn.Module, name: str) -> Callable[..., Any] | None:
    """``model.<name>``, else its encoder's (an encoder-decoder keeps its towers there)."""
    method = getattr(model, name, None)
    get_encoder = getattr(model, "get_encoder", None)
    if method is None and callable(get_encoder):
        try:
            method = getattr(get_encoder(), name, None)
        except Exception:  # a model without a separate encoder
            return None
    return method if callable(method) else None


def _call(method: Callable[..., Any], made: Mapping[str, Any]) -> int:
    params = inspect.signature(method).parameters
    with torch.no_grad():
        return _rows(method(**{k: v for k, v in made.items() if k in params}))


def _on_cpu(model: nn.Module, name: str, made: Mapping[str, Any]) -> int:
    """The rows of ``model.<name>`` run on an uninitialised CPU copy of a meta model."""
    params = list(model.parameters())
    if not params or params[0].device.type != "meta" or \
            sum(p.numel() for p in params) > CPU_COPY_LIMIT:
        return 0
    with torch.device("cpu"):  # inside the meta default device the loader builds under
        twin = copy.deepcopy(model).to_empty(device="cpu")
        method = feature_method(twin, name)
        if method is None:
            return 0
        return _call(method, {k: _cpu(k, v) for k, v in made.items()})


def _cpu(name: str, value: Any) -> Any:
    """A CPU tensor filled as the loader fills ``name`` (masks keep all), for a meta one."""
    if not isinstance(value, torch.Tensor) or value.device.type != "meta":
        return value
    keep = name.endswith("_mask") and value.dtype != torch.bool
    fill = torch.ones if keep else torch.zeros
    return fill(value.shape, dtype=value.dtype, device="cpu")


def count_tokens(model: nn.Module, name: str, made: Mapping[str, Any]) -> int:
    """How many placeholder tokens ``model.<name>`` fills from the inputs in ``made``;
    0 where it cannot run on them."""
    method = feature_method(model, name)
    if method is None:
        return 0
    try:
        return _call(method, made)
    except Exception:  # model code: the meta device cannot run a data-dependent step
        pass
    try:
        return _on_cpu(model, name, made)
    except Exception:  # model code that needs more than these inputs
        return 0


def _feature_inputs(req: Request, modality: Modality, params: Mapping[str, Any],
                    made: dict[str, Any]) -> str | None:
    """The forward argument that carries ``modality``, made if need be, with the mask
    over its frames where the feature method requires one."""
    name = next((n for n in modality.inputs if n in params), None)
    if name is None:
        return None
    if name not in made:
        try:
            made.update(TOWER_MAKERS[name](req))
        except NoSize:
            return None
    mask = f"{name}_mask"
    method = feature_method(req.model, modality.method) if req.model is not None else None
    wanted = inspect.signature(method).parameters.get(mask) if method is not None else None
    required = wanted is not None and wanted.default is inspect.Parameter.empty
    if required and mask in params and mask not in made and made[name].dim() >= 2:
        frames = made[name].shape[frames_axis(req) if name == "input_features" else 1]
        made[mask] = torch.ones(made[name].shape[0], frames, dtype=torch.long)
    if method is not None and isinstance(made[name], torch.Tensor):
        made.update({k: v for k, v in patch_grids(req, method, made[name], made).items()
                     if k in params})
    return name


def _declared(config: Any, names: tuple[str, ...]) -> tuple[Any, str] | None:
    """The config and attribute that declare a token id but hold None (the tokenizer sets
    it when the processor is loaded; the forward skips the tower while it is None)."""
    for node in (config, read(config, "text_config")):
        for name in names:
            if node is not None and name in getattr(node, "__dict__", {}) \
                    and read(node, name) is None:
                return node, name
    return None


def _free_token(config: Any, rank: int) -> int | None:
    """An id the example text never uses: the ``rank``-th from the end of the vocabulary
    (the text is all zeros)."""
    size = read(read(config, "text_config"), "vocab_size") or read(config, "vocab_size")
    if not isinstance(size, int) or isinstance(size, bool) or size <= rank + 1:
        return None
    return size - 1 - rank


def _placement(req: Request, modality: Modality, params: Mapping[str, Any]) -> int | None:
    """The token id that marks ``modality``'s features; 0 where the forward marks them by
    a position mask instead; a free id of the vocabulary, set on the config, where the
    config declares the token id but holds None; None where nothing places them."""
    token = _token_id(req.config, modality.tokens)
    if token is None and modality.position_mask and modality.position_mask in params:
        return 0
    declared = _declared(req.config, modality.tokens) if token is None else None
    if declared is not None:
        token = _free_token(req.config, MODALITIES.index(modality))
        if token is not None:
            setattr(declared[0], declared[1], token)
    return token


TOKEN_TYPES = "mm_token_type_ids"
"""The forward argument that labels each position with its modality, as transformers'
processors write it: 0 for text, then 1, 2, 3 in the order of :data:`MODALITIES` (image,
video, audio)."""


def place_tokens(req: Request, made: dict[str, Any], params: Mapping[str, Any]) -> None:
    """Put the placeholder tokens of every modality the model takes before the text of
    ``made["input_ids"]``, as many as its feature method returns rows, in place; where the
    forward marks their positions by a mask, the mask too, and where it takes each
    position's modality, those labels."""
    ids = made.get("input_ids")
    if req.model is None or not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return
    blocks: list[torch.Tensor] = []
    kinds: list[torch.Tensor] = []
    masks: list[tuple[str, int, int]] = []  # (mask input, first position, positions)
    declared = {m.method: _declared(req.config, m.tokens) for m in MODALITIES}
    for rank, modality in enumerate(MODALITIES):
        token = _placement(req, modality, params)
        if token is None or feature_method(req.model, modality.method) is None:
            continue
        before = dict(made)
        name = _feature_inputs(req, modality, params, made)
        count = count_tokens(req.model, modality.method, made) if name else 0
        if not count or count % ids.shape[0]:
            made.clear()
            made.update(before)  # no tokens: the tower's inputs would only upset the forward
            unset = declared[modality.method]
            if unset is not None:
                setattr(unset[0], unset[1], None)  # the id the config declared stays unset
            continue
        width = count // ids.shape[0]
        if modality.position_mask in params and _token_id(req.config, modality.tokens) is None:
            masks.append((modality.position_mask, sum(b.shape[1] for b in blocks), width))
        blocks.append(torch.full((ids.shape[0], width), token, dtype=ids.dtype,
                                 device=ids.device))
        kinds.append(torch.full_like(blocks[-1], rank + 1))
    if blocks:
        made["input_ids"] = torch.cat([*blocks, ids], dim=1)  # (B, tokens + n)
        if TOKEN_TYPES in params and TOKEN_TYPES not in made:
            made[TOKEN_TYPES] = torch.cat([*kinds, torch.zeros_like(ids)], dim=1)
    for mask, first, width in masks:
        marks = torch.zeros_like(made["input_ids"])  # (B, tokens + n)
        marks[:, first:first + width] = 1
        made[mask] = marks
