"""A tiny config for any transformers model type, shrunk from its defaults by attribute name."""

from __future__ import annotations

import math
from typing import Any

WIDTH = 64
"""Model width of every (sub-)config: HEADS · HEAD_DIM."""
HEADS = 4
KV_HEADS = 2
"""KV heads where the default config groups its queries (fewer KV heads than heads)."""
HEAD_DIM = 16
FREE_HEAD_DIM = 24
"""The head dim a config gets wherever it declares one: 4 heads of 24 over a width of 64,
so a reader that assumes head dim = width / heads (16) is caught."""
FREE_HEAD_DIM_KEYS = ("head_dim", "d_kv", "kv_channels", "attention_head_dim", "d_head",
                      "dim_head")
"""Head-dim fields set to FREE_HEAD_DIM (``rotary_dim`` stays a part of the head)."""
FFN = 128
LAYERS = 2
POSITIONS = 128
IMAGE = 64
FRAMES = 8
"""Frames of a video clip."""
PATCH = 16
EXPERTS = 4
EXPERTS_PER_TOKEN = 2
AUDIO_POSITIONS = 32
"""Encoder positions of Whisper-style audio models (the input is twice as many frames)."""
MIN_VOCAB = 256
QUERIES = 16
"""Object queries of detection decoders: each picks its top-k encoder tokens, and a tiny
image has fewer tokens than the default 300 or 900."""
FILTERS = 8
"""Channels of the first conv stage of audio tokenizers (``num_filters``), which double at
each downsampling: VibeVoice's default 32 over six stages ends at 2,048 channels, eight
ConvNeXt blocks deep, twice (acoustic and semantic), 0.7 B parameters in the "tiny" model."""

LAYER_KEYS = (
    "num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers",
    "decoder_layers", "num_decoder_layers", "num_encoder_layers", "depth",
    "num_text_layers", "num_vision_layers", "text_layers", "vision_layers",
    "conf_num_hidden_layers", "num_self_attends_per_block", "pred_num_hidden_layers",
)
HEAD_KEYS = (
    "num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
    "decoder_attention_heads", "attention_heads", "num_decoder_attention_heads",
    "num_encoder_attention_heads", "conf_num_attention_heads", "num_self_attention_heads",
    "num_cross_attention_heads", "pred_num_attention_heads",
)
KV_KEYS = ("num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num",
           "n_kv_heads")
HEAD_DIM_KEYS = ("head_dim", "d_kv", "kv_channels", "attention_head_dim", "d_head", "dim_head",
                 "rotary_dim")
WIDTH_KEYS = ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "hidden_dim", "d_latents",
              "word_embed_proj_dim", "encoder_hidden_size", "pred_hidden_size")
FFN_KEYS = ("intermediate_size", "d_ff", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim",
            "n_inner", "decoder_intermediate_size", "encoder_intermediate_size")
SMALL_FFN_KEYS = ("moe_intermediate_size", "shared_expert_intermediate_size",
                  "expert_intermediate_size")
OUTPUT_WIDTH_KEYS = ("out_hidden_size", "projector_hidden_size")
"""Widths a tower writes into the next model (a vision tower's merger into the text width):
they must meet the shrunk text width, or image features do not fit the text's slots."""
POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "max_target_positions",
                 "context_length")
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TOP_K_KEYS = ("num_experts_per_tok", "moe_k", "num_selected_experts", "moe_topk")
LATENT_KEYS = {"q_lora_rank": 32, "kv_lora_rank": 32, "qk_rope_head_dim": 8,
               "qk_nope_head_dim": 16, "v_head_dim": 16}
"""Latent (MLA) attention sizes."""
GROUP_KEYS = {"n_group": 1, "topk_group": 1, "first_k_dense_replace": 1}
"""Expert groups and dense leading layers (min with these)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kept_layers(types: list[Any], layers: int = LAYERS) -> list[int]:
    """Indices of the first layer of each distinct type, at least ``layers`` of them."""
    first: list[int] = []
    seen: list[Any] = []
    for i, kind in enumerate(types):
        if kind not in seen:
            seen.append(kind)
            first.append(i)
    for i in range(len(types)):
        if len(first) >= layers:
            break
        if i not in first:
            first.append(i)
    return sorted(first)


def _shrink_depth(config: dict[str, Any], layers: int = LAYERS) -> None:
    """Depth to ``layers``, keeping one layer of each type in per-layer lists."""
    depth = next((config[k] for k in LAYER_KEYS if _is_int(config.get(k))), None)
    keep = list(range(layers))
    if _is_int(depth) and isinstance(config.get("layer_types"), list) \
            and len(config["layer_types"]) == depth:
        keep = _kept_layers(config["layer_types"], layers)
    for key in LAYER_KEYS:
        if _is_int(config.get(key)) and config[key] > len(keep):
            config[key] = len(keep)
            for derived in ("stage_names", "out_features", "out_indices"):
                config.pop(derived, None)  # rebuilt from the new depth (the last stage)
    if not _is_int(depth) or depth <= len(keep):
        return
    for key, value in list(config.items()):
        if isinstance(value, list) and len(value) == depth and not str(key).endswith("_config"):
            config[key] = [value[i] for i in keep]
        elif isinstance(value, dict) and value and all(str(k).isdigit() for k in value):
            by_layer = {int(k): v for k, v in value.items()}  # per-layer overrides
            config[key] = {str(new): by_layer[old] for new, old in enumerate(keep)
                           if old in by_layer}


def attention_variants(config: Any) -> list[str]:
    """Prefixes of attention fields declared again, head dim included, for some layers
    (``swa_`` of ``swa_num_attention_heads``, ``swa_head_dim``: sliding layers with their
    own heads)."""
    keys = {str(k) for k in (config if isinstance(config, dict) else vars(config))}
    found = {k[: -len(base)] for k in keys for base in HEAD_KEYS if k.endswith(f"_{base}")}
    return sorted(p for p in found if f"{p}head_dim" in keys)


PER_LAYER = "_per_layer"
"""Suffix of a per-layer list of one attention field (``num_attention_heads_per_layer``)."""


def _shrink_variants(config: dict[str, Any]) -> None:
    """Prefixed copies of the attention fields and per-layer lists, shrunk alike."""
    for prefix in attention_variants(config):
        view = {base: config[prefix + base] for base in (*HEAD_KEYS, *KV_KEYS, *HEAD_DIM_KEYS)
                if prefix + base in config}
        _shrink_attention(view)
        config.update({prefix + base: value for base, value in view.items()})
    heads = next((config.get(k + PER_LAYER) for k in HEAD_KEYS
                  if isinstance(config.get(k + PER_LAYER), list)), None)
    for key in KV_KEYS:
        values = config.get(key + PER_LAYER)
        if isinstance(values, list) and isinstance(heads, list) and len(heads) == len(values):
            config[key + PER_LAYER] = [
                v if not _is_int(v) or v <= 1 else KV_HEADS if _is_int(h) and v < h else HEADS
                for v, h in zip(values, heads, strict=True)]
    for key in HEAD_KEYS:
        values = config.get(key + PER_LAYER)
        if isinstance(values, list):
            config[key + PER_LAYER] = [min(v, HEADS) if _is_int(v) else v for v in values]


def _shrink_attention(config: dict[str, Any], free_head_dim: bool = False) -> None:
    if any(isinstance(config.get(k), list) for k in HEAD_KEYS):
        return  # heads per stage (Swin-style): widths must stay multiples of each
    heads = next((config[k] for k in HEAD_KEYS if _is_int(config.get(k))), None)
    for key in KV_KEYS:
        value = config.get(key)
        if _is_int(value) and value > 1:
            grouped = _is_int(heads) and value < heads
            config[key] = KV_HEADS if grouped else HEADS
    for key in HEAD_KEYS:
        if _is_int(config.get(key)) and config[key] > HEADS:
            config[key] = HEADS
    for key in HEAD_DIM_KEYS:
        if _is_int(config.get(key)) and config[key] > HEAD_DIM:
            config[key] = HEAD_DIM
    latent = _is_int(config.get("qk_rope_head_dim"))  # head_dim may name the rotary part
    if free_head_dim and heads is not None and not latent:
        for key in FREE_HEAD_DIM_KEYS:
            if key in config and (config[key] is None or _is_int(config[key])):
                config[key] = FREE_HEAD_DIM
    for key in WIDTH_KEYS:
        if _is_int(config.get(key)) and config[key] > WIDTH:
            config[key] = WIDTH
    rope = config.get("qk_rope_head_dim")
    for key, size in LATENT_KEYS.items():
        if _is_int(config.get(key)) and config[key] > size:
            config[key] = size
    if _is_int(rope) and _is_int(config.get("qk_nope_head_dim")):
        if config.get("head_dim") == min(rope, HEAD_DIM):  # head_dim names the rotary part
            config["head_dim"] = config["qk_rope_head_dim"]
        if "qk_head_dim" in config:
            config["qk_head_dim"] = config["qk_nope_head_dim"] + config["qk_rope_head_dim"]


def _shrink_sizes(config: dict[str, Any]) -> None:
    for keys, size in (((*FFN_KEYS, "mlp_dim"), FFN), (SMALL_FFN_KEYS, FFN // 4),
                       (OUTPUT_WIDTH_KEYS, WIDTH),
                       (POSITION_KEYS, POSITIONS), (EXPERT_KEYS, EXPERTS),
                       (TOP_K_KEYS, EXPERTS_PER_TOKEN), (("image_size", "crop_size"), IMAGE),
                       (("num_frames", "frames_per_clip"), FRAMES),
                       (("mm_tokens_per_image",), (IMAGE // PATCH) ** 2),
                       (("patch_size",), PATCH), (("max_source_positions",), AUDIO_POSITIONS),
                       (("num_filters",), FILTERS), (("num_queries",), QUERIES)):
        for key in keys:
            if _is_int(config.get(key)) and config[key] > size:
                config[key] = size
    for key, size in GROUP_KEYS.items():
        if _is_int(config.get(key)) and config[key] > size:
            config[key] = size


def _shrink_state_space(config: dict[str, Any]) -> None:
    """Mamba-style heads: heads · head dim must equal width · expand."""
    for heads, dim, expand in (("num_heads", "head_dim", "expand"),
                               ("mamba_n_heads", "mamba_d_head", "mamba_expand")):
        if not all(_is_int(config.get(k)) for k in (heads, dim, expand)):
            continue
        width = next((config[k] for k in WIDTH_KEYS if _is_int(config.get(k))), None)
        if width is None:
            continue
        config[heads] = min(config[heads], HEADS)
        config[dim] = max(1, width * config[expand] // config[heads])


def shrink(config: dict[str, Any], layers: int = LAYERS, free_head_dim: bool = False
           ) -> dict[str, Any]:
    """``config`` (a config's ``to_dict()``) with every (nested) config made tiny, in place,
    ``layers`` deep; with ``free_head_dim``, every declared head dim is FREE_HEAD_DIM."""
    _shrink_depth(config, layers)
    _shrink_attention(config, free_head_dim)
    _shrink_variants(config)
    _shrink_sizes(config)
    _shrink_state_space(config)
    for value in config.values():
        if isinstance(value, dict) and value:
            shrink(value, layers, free_head_dim)
    return config


def _token_ids(config: dict[str, Any]) -> list[int]:
    ids: list[int] = []
    for key, value in config.items():
        if isinstance(value, dict):
            ids.extend(_token_ids(value))
        elif _is_int(value) and str(key).endswith(("_token_id", "_token_index", "_id")):
            ids.append(value)
    return ids


def _set_vocab(config: dict[str, Any], size: int, needed: int) -> None:
    for key, value in list(config.items()):
        if isinstance(value, dict):
            _set_vocab(value, size, needed)
        elif str(key).endswith(("vocab_size", "_vocab")) and _is_int(value) and (
                value > size or value < needed):
            config[key] = size


def shrink_vocab(config: dict[str, Any], floor: int = MIN_VOCAB) -> None:
    """Every vocabulary to the smallest size (a multiple of 64) that holds every special
    token id anywhere in the config tree, in place; one that cannot hold them grows to it
    (LLaVA's defaults put the image token at 32000 in a vocabulary of 32000). Hash
    vocabularies count too (BLT's ``encoder_hash_byte_group_vocab``, 500,002 rows per
    byte-group embedding)."""
    needed = max([0, *(i + 1 for i in _token_ids(config) if i < 10**6)])
    _set_vocab(config, int(math.ceil(max(floor, needed) / 64) * 64), needed)


def tiny_config(model_type: str, layers: int = LAYERS, free_head_dim: bool = False
                ) -> dict[str, Any]:
    """The tiny config.json content of ``model_type``: its class's defaults, shrunk to
    ``layers`` layers (see :func:`shrink` for ``free_head_dim``)."""
    from transformers import CONFIG_MAPPING

    defaults: dict[str, Any] = CONFIG_MAPPING[model_type]().to_dict()
    data = shrink(defaults, layers, free_head_dim)
    shrink_vocab(data)
    for key in ("transformers_version", "architectures", "_name_or_path", "auto_map"):
        data.pop(key, None)
    data["model_type"] = model_type
    return data
