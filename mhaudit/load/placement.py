"""Image, audio and video tokens placed in ``input_ids``, counted by the model's own
feature method (``get_image_features`` and its kin) or by the tower that reads the input,
fed the masks and inputs the method requires, so that every tower runs."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from mhaudit.fake.mode import mark_known
from mhaudit.load.audio import Candidate
from mhaudit.load.configtree import read
from mhaudit.load.docshapes import DocInput, documented_inputs
from mhaudit.load.modalities import NoSize, Request, named_pixels
from mhaudit.load.rows import (
    count_tokens,
    cpu_value,
    feature_method,
    kept_twins,
    text_width,
    tower,
    tower_rows,
)
from mhaudit.load.vision import TOWER_MAKERS, grid_patches, layouts, patch_grids


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
    tower_rows: bool = False
    """Whether the rows of the tower that reads the input count the tokens where the model
    has no feature method (an audio encoder's frames, which its projector keeps)."""
    text_width: bool = False
    """Whether the feature method's rows are already projected to the text embedding width
    (the forward scatters them into the embeddings as they come): rows of another width
    cannot fill the placeholders, and no tokens are placed."""


MODALITIES = (
    Modality(("image_token_id", "image_token_index"), ("pixel_values", "flattened_patches"),
             "get_image_features", "image_embeds_position_mask"),
    Modality(("video_token_id", "video_token_index"), ("pixel_values_videos",),
             "get_video_features"),
    Modality(("audio_token_id", "audio_token_index"), ("input_features", "input_values"),
             "get_audio_features", tower_rows=True, text_width=True),
)


def _token_id(config: Any, names: tuple[str, ...]) -> int | None:
    for node in (config, read(config, "text_config")):
        for name in names:
            value = read(node, name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
    return None


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


MakeDoc = Callable[[DocInput], dict[str, Any]]
"""Makes one input as its docstring shapes it (the loader's rule); raises NoSize."""


def _required(method: Callable[..., Any] | None, name: str) -> bool:
    params = inspect.signature(method).parameters if method is not None else {}
    return name in params and params[name].default is inspect.Parameter.empty and \
        params[name].kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _shares_word(mask: str, name: str) -> bool:
    """``feature_attention_mask`` for ``input_features``: a mask named with a word of the
    input's name other than ``input`` (plural or not)."""
    words = {w.rstrip("s") for w in name.split("_")} - {"input", ""}
    return bool(words & {w.rstrip("s") for w in mask.split("_")[:-1]})


def _masks(req: Request, method: Callable[..., Any] | None, name: str, candidate: Candidate,
           params: Mapping[str, Any], trial: dict[str, Any]) -> None:
    """Masks over the candidate's frames, nothing masked: ``<input>_mask`` where the feature
    method requires it; without a feature method, each mask named after the input that the
    forward's docstring does not call optional."""
    docs = documented_inputs(req.model.forward) if req.model is not None else {}
    for mask in params:
        if not mask.endswith("_mask") or mask in trial:
            continue
        if method is not None:
            needed = mask == f"{name}_mask" and _required(method, mask)
        else:
            needed = _shares_word(mask, name) and mask in docs and not docs[mask].optional
        if needed and candidate.tensor.dim() >= 2:
            frames = candidate.tensor.shape[candidate.frames_axis]
            trial[mask] = torch.ones(candidate.tensor.shape[0], frames, dtype=torch.long)


def _extras(req: Request, method: Callable[..., Any] | None, params: Mapping[str, Any],
            trial: dict[str, Any], make_doc: MakeDoc) -> None:
    """The other inputs the feature method requires and the forward takes, as the feature
    method's docstring shapes them (a raw-audio padding mask beside the features); pixels
    it does not document (``high_res_pixel_values``) as :func:`named_pixels` makes them."""
    docs = documented_inputs(method) if method is not None else {}
    for arg, doc in docs.items():
        if arg in trial or arg not in params or not doc.dims or not _required(method, arg):
            continue
        try:
            trial.update(make_doc(doc))
        except NoSize:
            continue
    required = inspect.signature(method).parameters if method is not None else {}
    for arg in required:  # undocumented pixels beside pixels: at their own config's size
        if arg not in trial and arg in params and _required(method, arg) and \
                arg.endswith("pixel_values"):
            trial.update(named_pixels(req, arg))


def _with_tokens(ids: torch.Tensor, token: int, count: int) -> torch.Tensor:
    block = torch.full((ids.shape[0], count // ids.shape[0]), token, dtype=ids.dtype,
                       device=ids.device)
    return torch.cat([block, ids], dim=1)  # (B, tokens + n)


def _trial_count(req: Request, modality: Modality, name: str, token: int,
                 trial: dict[str, Any]) -> int:
    """Tokens the feature method fills from ``trial``; where it cannot run, the rows of the
    tower that reads ``name``, if the feature method accepts that many placeholders (it
    may read them, to time its rows) or there is none and the modality allows it."""
    model = req.model
    assert model is not None
    method = feature_method(model, modality.method)
    width = text_width(model) if modality.text_width else None
    count = count_tokens(model, modality.method, trial, width) if method is not None else 0
    if count or (method is None and not modality.tower_rows):
        return count
    rows = tower_rows(model, name, trial)
    if not rows or method is None:
        return rows
    ids = cpu_value("input_ids", trial["input_ids"])  # on the CPU, so the placeholders hold values
    check = dict(trial, input_ids=_with_tokens(ids, token, rows))
    return rows if rows % ids.shape[0] == 0 and \
        count_tokens(model, modality.method, check, width) == rows else 0


def _fed(req: Request, modality: Modality, name: str, token: int, params: Mapping[str, Any],
         made: dict[str, Any], make_doc: MakeDoc,
         fixed: frozenset[str]) -> tuple[int, dict[str, Any]]:
    """The token count and the inputs of the first candidate the tower accepts: the input as
    made, then its other layouts and frame counts (:func:`~mhaudit.load.audio.candidates`),
    with the masks and other inputs the feature method requires."""
    method = feature_method(req.model, modality.method) if req.model is not None else None
    base = dict(made)
    if name not in base:
        try:
            base.update(TOWER_MAKERS[name](req))
        except NoSize:
            return 0, made
    tries = [Candidate(base[name], 1)] if name in fixed else layouts(req, name, base[name])
    packed = _packed(req, method, name, params, fixed)
    if packed:  # patches packed beside the grid that places them: the one layout
        base.update(packed)
        tries = [Candidate(base[name], 1)]
    for candidate in tries:
        trial = dict(base, **{name: candidate.tensor})
        _masks(req, method, name, candidate, params, trial)
        if method is not None:
            trial.update({k: v for k, v in patch_grids(req, method, candidate.tensor,
                                                       trial).items() if k in params})
        _extras(req, method, params, trial, make_doc)
        count = _trial_count(req, modality, name, token, trial)
        if count and count % made["input_ids"].shape[0] == 0:
            return count, trial
    return 0, made


def _packed(req: Request, method: Callable[..., Any] | None, name: str,
            params: Mapping[str, Any], fixed: frozenset[str]) -> dict[str, Any]:
    """Packed patches for ``name`` and their grid, where the feature method documents a
    temporal, height and width grid the forward also takes and the user shaped neither."""
    if method is None or name in fixed:
        return {}
    made = grid_patches(req, method, name)
    if name not in made or any(k not in params or k in fixed for k in made):
        return {}
    return made


def _no_doc(doc: DocInput) -> dict[str, Any]:
    raise NoSize(doc.name, [])


def place_tokens(req: Request, made: dict[str, Any], params: Mapping[str, Any],
                 make_doc: MakeDoc = _no_doc, fixed: frozenset[str] = frozenset(),
                 skip: frozenset[str] = frozenset()) -> None:
    """Put the placeholder tokens of every modality the model takes before the text of
    ``made["input_ids"]``, as many as its feature method returns rows, in place; where the
    forward marks their positions by a mask, the mask too, and where it takes each
    position's modality, those labels. The inputs named in ``fixed`` (the user's) keep
    their shapes."""
    ids = made.get("input_ids")
    if req.model is None or not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return
    with kept_twins():
        blocks, kinds, masks = _placeholders(req, made, params, make_doc, fixed, skip)
    if blocks:  # on the CPU: the placeholders' values are known, and the model reads them
        ids = cpu_value("input_ids", ids)
        made["input_ids"] = mark_known(torch.cat([*blocks, ids], dim=1))  # (B, tokens + n)
        if TOKEN_TYPES in params and TOKEN_TYPES not in made:
            made[TOKEN_TYPES] = mark_known(torch.cat([*kinds, torch.zeros_like(ids)], dim=1))
    for mask, first, width in masks:
        marks = torch.zeros_like(made["input_ids"])  # (B, tokens + n)
        marks[:, first:first + width] = 1
        made[mask] = mark_known(marks)


Placed = tuple[list[torch.Tensor], list[torch.Tensor], list[tuple[str, int, int]]]
"""Token blocks, their modality labels, and (mask input, first position, positions)."""


def _placeholders(req: Request, made: dict[str, Any], params: Mapping[str, Any],
                  make_doc: MakeDoc, fixed: frozenset[str], skip: frozenset[str]) -> Placed:
    """A block of placeholder tokens per modality whose tower runs and whose input ``skip``
    does not name; ``made`` gains the inputs each block's tower was fed."""
    assert req.model is not None
    ids = made["input_ids"]
    blocks: list[torch.Tensor] = []
    kinds: list[torch.Tensor] = []
    masks: list[tuple[str, int, int]] = []
    declared = {m.method: _declared(req.config, m.tokens) for m in MODALITIES}
    for rank, modality in enumerate(MODALITIES):
        name = next((n for n in modality.inputs if n in params and n not in skip), None)
        readable = name is not None and (
            feature_method(req.model, modality.method) is not None
            or (modality.tower_rows and tower(req.model, name) is not None))
        token = _placement(req, modality, params) if readable else None
        if token is None or name is None:
            continue
        count, fed = _fed(req, modality, name, token, params, made, make_doc, fixed)
        if not count:  # no tokens: the tower's inputs would only upset the forward
            unset = declared[modality.method]
            if unset is not None:
                setattr(unset[0], unset[1], None)  # the id the config declared stays unset
            continue
        made.clear()
        made.update(fed)
        width = count // ids.shape[0]
        if modality.position_mask in params and _token_id(req.config, modality.tokens) is None:
            masks.append((modality.position_mask, sum(b.shape[1] for b in blocks), width))
        blocks.append(torch.full((ids.shape[0], width), token, dtype=ids.dtype,
                                 device="cpu"))
        kinds.append(torch.full_like(blocks[-1], rank + 1))
    return blocks, kinds, masks
