"""Vision inputs beyond plain pixels: flattened patches, patch grids, clips beside text."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from mhaudit.fake.mode import mark_known
from mhaudit.load.audio import Candidate, candidates
from mhaudit.load.configtree import find_size, modality_config
from mhaudit.load.docshapes import DocInput, documented_inputs
from mhaudit.load.modalities import FRAMES, MAKERS, NoSize, Request, video

PATCH_WIDTHS = ("patch_embed_hidden_size",)
"""Config names of one flattened patch's width (``patch height · width · channels``)."""

PATCH_INDEX_COLUMNS = 2
"""Leading columns of a flattened patch that hold its row and column index (Pix2Struct's
layout: ``(B, patches, 2 + patch height · width · channels)``)."""

DEFAULT_FRAMES = 8
"""Frames of the clip a video tower beside the text reads when no config names a frame
count (the clips Video-LLaVA and LLaVA-NeXT-Video sample); the report's inputs show it,
and ``--input-shape pixel_values_videos=...`` sets another."""


def flattened_patches(req: Request) -> dict[str, Any]:
    """Patches flattened as Pix2Struct's processor writes them, one per position up to
    ``seq_len`` (bounded by the config's patch table): row and column index 0, pixels 1,
    so that a mask read from non-zero patches keeps every patch."""
    vision = modality_config(req.config, ("vision", "image"))
    width = find_size(vision, PATCH_WIDTHS)
    side = find_size(vision, ("patch_size",))
    if width is None and side is not None:
        width = side * side * (find_size(vision, ("num_channels",)) or 3)
    patches = min(req.seq_len, find_size(vision, ("max_num_patches", "max_patches")) or
                  req.seq_len)
    if width is None:
        raise NoSize("flattened_patches", [str(req.batch), str(patches),
                                           f"{PATCH_INDEX_COLUMNS}+PATCH_WIDTH"])
    values = torch.ones(req.batch, patches, PATCH_INDEX_COLUMNS + width)
    values[:, :, :PATCH_INDEX_COLUMNS] = 0  # (B, patches, 2 + width): indices, pixels
    return {"flattened_patches": values}


def clip_beside_text(req: Request) -> dict[str, Any]:
    """A video at the config's frame count, else :data:`DEFAULT_FRAMES` frames: a text
    model's video tower is not the input the audit was asked about, and without a clip it
    would not run at all."""
    return video(req, DEFAULT_FRAMES)


def _described(method: Callable[..., Any], name: str) -> str:
    """The docstring entry of ``name``: its line and the indented lines under it."""
    found = re.search(rf"^([ \t]*){re.escape(name)}[ \t]*\((?P<body>.*(?:\n\1[ \t]+.*)*)",
                      inspect.getdoc(method) or "", re.MULTILINE)
    return found["body"] if found else ""


SIZE_WORDS = ("(h, w)", "(height, width)", "height and width")
"""Words of a per-image input's docstring that call its two columns an image's height and
width (in pixels where it does not say patches)."""


def _grid_kind(doc: DocInput, text: str) -> str:
    """``"patch"`` for a ``(images, 2)`` input that holds each image's height and width in
    patches, ``"pixel"`` for one that holds them in pixels (the image processor's
    ``image_sizes``), ``""`` for anything else."""
    if doc.dims[-1:] != ("2",) or len(doc.dims) != 2:
        return ""
    if "patch" in text:
        return "patch" if "int" in doc.type_name.lower() else ""
    return "pixel" if "size" in text and any(w in text for w in SIZE_WORDS) else ""


def patch_grids(req: Request, method: Callable[..., Any], pixels: torch.Tensor,
                made: Mapping[str, Any]) -> dict[str, Any]:
    """The required inputs of a feature method that its docstring shapes ``(images, 2)``
    and calls each image's height and width: in patches (NaViT-packed towers read each
    image's patch grid from them), the pixel input's height and width over the config's
    patch side; in pixels (the image processor's ``image_sizes``, by which a tiling tower
    cuts each image), the pixel input's height and width. One row per image of the pixel
    input's batch, on the CPU so that their values are there to read."""
    if pixels.dim() not in (4, 5):
        return {}
    vision = modality_config(req.config, ("vision", "image"))
    side = find_size(vision, ("patch_size",))
    size = (int(pixels.shape[-2]), int(pixels.shape[-1]))
    rows = {"pixel": size, "patch": (size[0] // side, size[1] // side) if side else None}
    out: dict[str, Any] = {}
    params = inspect.signature(method).parameters
    for name, doc in documented_inputs(method).items():
        param = params.get(name)
        if param is None or param.default is not inspect.Parameter.empty or name in made:
            continue
        kind = _grid_kind(doc, _described(method, name).lower())
        row = rows.get(kind)
        if row is None:
            continue
        grid = torch.tensor([row] * pixels.shape[0], device="cpu",  # (images, 2)
                            dtype=torch.int32 if kind == "patch" else torch.long)
        out[name] = grid if kind == "patch" else mark_known(grid)
    return out


PACKED_SIDE = 4
"""Patches along each side of the one image a packed tower reads (rounded up to the
config's spatial merge size): 16 patches, about the audit's default sequence length."""


def _patch_shape(doc: DocInput | None, channels: int, frames: int,
                 side: int) -> tuple[int, ...]:
    """One packed patch as the forward's docstring ranks the pixel input: (C, p, p) for
    rank 4, (C, t, p, p) for rank 5, else flat C·t·p² (the processors' packed rows)."""
    rank = len(doc.dims) if doc is not None else 2
    if rank == 4 and frames == 1:
        return (channels, side, side)
    if rank == 5:
        return (channels, frames, side, side)
    return (channels * frames * side * side,)


_FLOAT = DocInput("", "torch.Tensor", (), optional=False)
"""An undocumented input, read as a float tensor."""

TEMPORAL_PATCHES = ("temporal_patch_size", "patch_temporal")
"""Config names of the frames one packed patch spans."""

SPATIAL_MERGES = ("spatial_merge_size", "merge_size")
"""Config names of the patches per side a packed tower merges into one row."""

MERGE_WORDS = ("merge", "downsampl")
"""Words of a per-image input's docstring that call it the spatial merge (downsampling)
ratio, which a packed tower reads beside its grid (the config's ``spatial_merge_size``)."""


def packed_patches(req: Request, docs: Mapping[str, DocInput]) -> dict[str, Any]:
    """Packed pixels and their grid for a tower whose forward reads every image's patches
    concatenated (``(patches, channels · temporal patch · patch²)``, or one patch per row
    at the rank the docstring gives the pixels) beside a grid it
    documents as ``(num_images, 3)``: temporal, height and width in patches (NaViT-style
    packed vision towers). One image of :data:`PACKED_SIDE`² patches per batch row; the
    grid, and a per-image merge ratio the forward documents beside it, are on the CPU so
    that their values are there to read. Empty when the forward does not require such a
    grid (a whole model whose grid is optional places images its own way) or the config
    gives no patch size. ``docs`` are the forward's documented inputs."""
    if req.model is None:
        return {}
    method = req.model.forward
    signature = inspect.signature(method).parameters
    params = [n for n, p in signature.items() if p.default is inspect.Parameter.empty
              and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]  # required inputs
    grid = _grid_name(method, params, docs)
    values = next((name for name in params if name != grid
                   and "long" not in docs.get(name, _FLOAT).type_name.lower()), None)
    if grid is None or values is None:
        return {}
    return _packed(req, method, docs, values, grid, params)


def _grid_name(method: Callable[..., Any], names: Sequence[str],
               docs: Mapping[str, DocInput]) -> str | None:
    """The input of ``names`` documented as a ``(num_images, 3)`` grid of temporal, height
    and width patches."""
    return next((name for name in names if name in docs and docs[name].dims[-1:] == ("3",)
                 and "temporal" in _described(method, name).lower()), None)


def _packed(req: Request, method: Callable[..., Any], docs: Mapping[str, DocInput],
            values: str, grid: str, params: Sequence[str]) -> dict[str, Any]:
    vision = modality_config(req.config, ("vision", "image"))
    side = find_size(vision, ("patch_size",))
    if side is None:
        return {}
    frames = find_size(vision, TEMPORAL_PATCHES) or 1
    channels = find_size(vision, ("in_channels", "num_channels", "in_chans")) or 3
    merge = find_size(vision, SPATIAL_MERGES) or 1
    rows = merge * -(-PACKED_SIDE // merge)  # patches per side, a multiple of the merge
    patch = _patch_shape(docs.get(values), channels, frames, side)
    made = {
        values: torch.randn(req.batch * rows * rows, *patch),  # (images · rows², patch)
        grid: mark_known(torch.tensor([[1, rows, rows]] * req.batch, dtype=torch.long,
                                      device="cpu")),
    }
    for name in params:  # a merge ratio per image, counted as the grid counts images
        if name in docs and name not in made and docs[name].dims == docs[grid].dims[:1] \
                and any(w in _described(method, name).lower() for w in MERGE_WORDS):
            made[name] = mark_known(torch.full((req.batch,), merge, dtype=torch.long,
                                               device="cpu"))
    return made


def grid_patches(req: Request, method: Callable[..., Any], values: str) -> dict[str, Any]:
    """Packed ``values`` and their grid for a feature method (``get_image_features``) that
    documents a ``(num_images, 3)`` grid of temporal, height and width patches beside them,
    required or not (a whole Qwen2-VL-style model reads the grid to place the patches): as
    :func:`packed_patches` makes them for a tower. Empty when it documents no such grid."""
    docs = documented_inputs(method)
    names = list(inspect.signature(method).parameters)
    grid = _grid_name(method, names, docs)
    if grid is None or values not in names:
        return {}
    return _packed(req, method, docs, values, grid, names)


IMAGE_COUNTS = (1, 2, 3, 4, 8, 16, 32, 64, 128)
"""Images (or tiles) on the images axis of pixels, in the order tried: a tiling tower cuts
each image into as many tiles as its size and the config's grid give, and reads the
first that many of the axis."""


def pixel_candidates(req: Request, tensor: torch.Tensor) -> Iterator[Candidate]:
    """Pixels ``(B, C, H, W)`` as made, then with a frames axis at the config's frame count
    (a video tower's ``(B, frames, C, H, W)``), then with an images axis of one image
    (``(B, images, C, H, W)``, as processors stack each sample's images or tiles), then
    with :data:`IMAGE_COUNTS` images; other ranks only as made."""
    yield Candidate(tensor, 1)
    if tensor.dim() != 4:
        return
    frames = find_size(modality_config(req.config, ("vision", "video")), FRAMES) or \
        find_size(req.config, FRAMES)
    for count in dict.fromkeys(c for c in (frames, *IMAGE_COUNTS) if c):
        # (B, count, C, H, W): the same image on each frame, image or tile of the axis
        yield Candidate(tensor.unsqueeze(1).expand(-1, count, -1, -1, -1).contiguous(), 1)
    yield Candidate(tensor.flatten(1), 1)  # (patches, C·p·p): packed patches as flat rows


def layouts(req: Request, name: str, tensor: torch.Tensor) -> Iterator[Candidate]:
    """The layouts to try for the input ``name``: pixels' (:func:`pixel_candidates`) for
    an input of pixels, else audio's (:func:`~mhaudit.load.audio.candidates`)."""
    if "pixel_values" in name:
        return pixel_candidates(req, tensor)
    return candidates(req, name, tensor)


INPUT_MAKERS: dict[str, Callable[[Request], dict[str, Any]]] = {
    **MAKERS, "flattened_patches": flattened_patches}
"""Every input maker by input name: the shared ones and the vision ones."""

TOWER_MAKERS: dict[str, Callable[[Request], dict[str, Any]]] = {
    **INPUT_MAKERS, "pixel_values_videos": clip_beside_text}
"""Input makers for a tower beside the text (a clip gets a default frame count)."""
