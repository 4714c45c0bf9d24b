"""Build a model and example inputs from a transformers ``config.json``, with no download."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mhaudit.contain.contain import contained
from mhaudit.contain.files import check_input_file, parse_json, read_input_text
from mhaudit.contain.offline import hub_offline, set_offline_env
from mhaudit.data import LeftOutInput
from mhaudit.errors import LoadError, first_line, install_hint
from mhaudit.load.configtree import read
from mhaudit.load.inputs import Shapes, fitted_inputs

SIZE_FIELDS = (
    "hidden_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
    "intermediate_size", "vocab_size", "head_dim", "max_position_embeddings",
    "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
    "encoder_ffn_dim", "decoder_ffn_dim", "d_model", "d_kv", "d_ff", "num_layers",
    "num_heads", "num_decoder_layers", "image_size", "patch_size", "num_channels",
)
"""Config sizes that must be positive (read through the config, so aliases such as
GPT-2's ``n_head`` count too); transformers builds an empty stack for ``-1`` layers."""

WIDTH_FIELDS = frozenset({"hidden_size", "intermediate_size", "head_dim", "d_model", "d_kv",
                          "d_ff", "encoder_ffn_dim", "decoder_ffn_dim"})
"""Of those, widths: a config may hold 0 for one its model never builds a layer of (a
head dim that names an absent rotary part), so 0 is refused only when the built model
holds a parameter of size 0."""


def _set_by_file(config: Any, name: str, data: dict[str, Any]) -> bool:
    """Whether the file sets ``name`` (or an alias the config class maps to it)."""
    aliases = {name, *(k for k, v in getattr(config, "attribute_map", {}).items() if v == name),
               getattr(config, "attribute_map", {}).get(name, name)}
    return any(alias in data for alias in aliases)


def _check_sizes(config: Any, path: Path, data: dict[str, Any]) -> None:
    """Refuse a size below 1 that the file sets; one the config class computes itself
    (XLNet's ``max_position_embeddings`` of -1: no limit) is the class's own convention."""
    for name in SIZE_FIELDS:
        try:
            value = getattr(config, name, None)
        except Exception:  # a config property that cannot be computed
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value >= 1:
            continue
        if not _set_by_file(config, name, data) or (value == 0 and name in WIDTH_FIELDS):
            continue
        raise LoadError(f"{path}: {name} = {value} is not a positive size",
                        f"Set {name} to 1 or more.")


def _zero_widths(config: Any) -> list[str]:
    return [n for n in sorted(WIDTH_FIELDS) if read(config, n) == 0]


def _zero_width_error(name: str, path: Path) -> LoadError:
    return LoadError(f"{path}: {name} = 0 is not a positive size (the model builds layers "
                     "of width 0)", f"Set {name} to 1 or more.")


def _build_checked(transformers: Any, data: dict[str, Any], config: Any,
                   path: Path) -> nn.Module:
    """The built model; a width of 0 is refused where the model uses it: building divides
    by it, or a parameter has no elements."""
    zeros = _zero_widths(config)
    try:
        model = _build(transformers, data, config)
    except ZeroDivisionError as exc:
        if zeros:
            raise _zero_width_error(zeros[0], path) from exc
        raise
    if zeros and any(p.numel() == 0 for p in model.parameters()):
        raise _zero_width_error(zeros[0], path)
    return model


def _refuse_hub_references(data: dict[str, Any], path: Path) -> None:
    """A config that names a hub repository for a part of the model cannot build offline."""
    for key in ("backbone", "text_encoder", "vision_encoder"):
        name = data.get(key)
        if isinstance(name, str) and name and not isinstance(data.get(f"{key}_config"), dict):
            raise LoadError(
                f"{path} names the {key} {name!r}, which transformers would fetch from the "
                "hub; mhaudit never downloads",
                f"Replace \"{key}\" with a \"{key}_config\" object (the {key}'s own config "
                "JSON) so it builds from the config alone.",
            )
    if data.get("auto_map"):
        raise LoadError(f"{path} needs remote code (\"auto_map\"), which mhaudit never runs",
                        "Write a model file with build_model() that imports the model class.")


def _transformers() -> Any:
    set_offline_env()
    try:
        import transformers
    except ImportError as exc:
        raise LoadError("building a model from config.json needs transformers",
                        install_hint("hf")) from exc
    return transformers


def _build(transformers: Any, data: dict[str, Any], config: Any) -> nn.Module:
    """The first listed architecture (so task heads count), else the base AutoModel."""
    for name in data.get("architectures") or ():
        cls = getattr(transformers, str(name), None)
        if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
            model: nn.Module = cls(config)
            return model
    built: nn.Module = transformers.AutoModel.from_config(config, trust_remote_code=False)
    return built


def load_hf_config(
    path: Path, batch_size: int, seq_len: int, *, device: str | None = None,
    input_shape: tuple[int, ...] | None = None, input_shapes: Shapes = (),
) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any], tuple[LeftOutInput, ...]]:
    """Build the model of a transformers config file and its example inputs.

    Returns ``(model, args, kwargs, left_out)``: no positional args, keyword inputs for
    the model's modality (:func:`~mhaudit.load.inputs.fitted_inputs`: token ids, audio
    features, raw audio or pixels at the config's sizes, plus decoder ids for
    encoder-decoders), and the inputs of another modality left out because the forward
    did not run on them. ``input_shape`` reshapes the main input; ``input_shapes`` sets
    inputs by name. Tensors follow the default device; pass ``device="meta"`` to build
    without allocating.
    """
    check_input_file(path, "config")  # a FIFO, a device or a huge file: exit 2
    text = read_input_text(path, "config", error=LoadError)
    try:
        data = parse_json(text, f"config {path}", error=LoadError)
    except ValueError as exc:
        raise LoadError(
            f"cannot read {path}: {first_line(exc)}", "Check the path and JSON."
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise LoadError(
            f"{path} is not a transformers config (no \"model_type\" in a JSON object)",
            "Point mhaudit at a model's config.json or at a .py model file.",
        )
    _refuse_hub_references(data, path)
    transformers = _transformers()
    if data["model_type"] not in transformers.CONFIG_MAPPING:
        raise LoadError(
            f"transformers {transformers.__version__} does not know model_type "
            f"{data['model_type']!r} ({path})",
            "Upgrade transformers, or write a model file with build_model() for this model.",
        )
    fields = {k: v for k, v in data.items() if k not in ("model_type", "transformers_version")}
    if "use_pretrained_backbone" in fields or "backbone_config" in fields:
        fields["use_pretrained_backbone"] = False  # weights are never loaded
    place = torch.device(device) if device is not None else contextlib.nullcontext()
    stage = f"building {data['model_type']} from the config"
    tip = "Fix the config where transformers says, or upgrade transformers for a new model type."
    with hub_offline(), contained(stage, str(path), tip=tip):
        config = transformers.AutoConfig.for_model(data["model_type"], **fields)
        _check_sizes(config, path, fields)
        with place:
            model = _build_checked(transformers, data, config, path)
            main = getattr(model, "main_input_name", "input_ids")
            first = main if isinstance(main, str) else str(next(iter(main)))
            shapes = ((first, input_shape),) if input_shape is not None else ()
            kwargs, left_out = fitted_inputs(main, config, batch_size, seq_len, model=model,
                                             shapes=(*shapes, *input_shapes))
        model.eval()
    return model, (), kwargs, left_out
