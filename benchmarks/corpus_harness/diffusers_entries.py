"""diffusers: its Attention module alone and the transformer blocks of its pipelines."""

from __future__ import annotations

from typing import Any

import torch

from corpus_harness.entry import Built, Entry, lin, mha

D, H, DH, B, N, M, C = 32, 4, 8, 2, 6, 5, 24
"""Width, heads, head dim, batch, image tokens, text tokens, text width."""
FULL = 4 * lin(D, D)
"""Q, K, V and O of D → D with biases: 4·1,056 = 4,224."""
OUT_BIAS = 3 * lin(D, D, bias=False) + lin(D, D)
"""Q, K, V without biases, O with one (diffusers' default): 3·1,024 + 1,056 = 4,128."""
CROSS = lin(D, D, bias=False) + 2 * lin(C, D, bias=False) + lin(D, D)
"""Cross attention from C-wide text: q 1,024, k = v = 24·32 = 768, o 1,056: 3,616."""


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _attention(**kwargs: Any) -> Built:
    from diffusers.models.attention_processor import Attention

    ctx = kwargs.pop("ctx", None)
    module = Attention(query_dim=D, **{"heads": H, "dim_head": DH, **kwargs})
    extra = {} if ctx is None else {"encoder_hidden_states": _x(B, M, ctx)}
    return module, (_x(B, N, D),), extra


def _block(module: str, cls: str, args: tuple[Any, ...], inputs: tuple[Any, ...],
           kwargs: dict[str, Any] | None = None, **ctor: Any) -> Built:
    import importlib

    block = getattr(importlib.import_module(f"diffusers.models.{module}"), cls)(*args, **ctor)
    return block, inputs, kwargs or {}


def _added_kv() -> Built:
    from diffusers.models.attention_processor import Attention, AttnAddedKVProcessor2_0

    module = Attention(query_dim=D, heads=H, dim_head=DH, cross_attention_dim=D,
                       added_kv_proj_dim=C, norm_num_groups=8,
                       processor=AttnAddedKVProcessor2_0())
    return module, (_x(B, D, 2, 3),), {"encoder_hidden_states": _x(B, M, C)}


def _flux_model() -> Built:
    from diffusers.models.transformers.transformer_flux import FluxTransformer2DModel

    model = FluxTransformer2DModel(in_channels=8, num_layers=1, num_single_layers=1,
                                   attention_head_dim=DH, num_attention_heads=H,
                                   joint_attention_dim=C, pooled_projection_dim=16,
                                   axes_dims_rope=(2, 2, 4))
    return model, (), {"hidden_states": _x(1, N, 8), "encoder_hidden_states": _x(1, M, C),
                       "pooled_projections": _x(1, 16), "timestep": torch.ones(1),
                       "img_ids": torch.zeros(N, 3), "txt_ids": torch.zeros(M, 3)}


def _unet_mid() -> Built:
    from diffusers.models.unets.unet_2d_blocks import UNetMidBlock2DCrossAttn

    block = UNetMidBlock2DCrossAttn(in_channels=D, temb_channels=16, resnet_groups=8,
                                    num_attention_heads=H, cross_attention_dim=C)
    return block, (_x(B, D, 4, 4), _x(B, 16)), {"encoder_hidden_states": _x(B, M, C)}


def _vae_mid() -> Built:
    from diffusers.models.unets.unet_2d_blocks import UNetMidBlock2D

    block = UNetMidBlock2D(in_channels=D, temb_channels=None, resnet_groups=8,
                           attention_head_dim=DH, add_attention=True)
    return block, (_x(B, D, 4, 4),), {"temb": None}


def _t2d() -> Built:
    from diffusers.models.transformers.transformer_2d import Transformer2DModel

    model = Transformer2DModel(num_attention_heads=H, attention_head_dim=DH, in_channels=D,
                               norm_num_groups=8, cross_attention_dim=C)
    return model, (_x(B, D, 4, 4),), {"encoder_hidden_states": _x(B, M, C)}


def _temporal() -> Built:
    from diffusers.models.transformers.transformer_temporal import TransformerTemporalModel

    model = TransformerTemporalModel(num_attention_heads=H, attention_head_dim=DH,
                                     in_channels=D, norm_num_groups=8)
    return model, (_x(4, D, 2, 2),), {"num_frames": 2}


def _dit() -> Built:
    from diffusers.models.transformers.dit_transformer_2d import DiTTransformer2DModel

    model = DiTTransformer2DModel(num_attention_heads=H, attention_head_dim=DH, in_channels=4,
                                  num_layers=1, sample_size=8, patch_size=2, num_embeds_ada_norm=10)
    return model, (_x(B, 4, 8, 8),), {"timestep": torch.ones(B, dtype=torch.long),
                                      "class_labels": torch.zeros(B, dtype=torch.long)}


TEMB = {"temb": None}


def _ctx(width: int = D) -> torch.Tensor:
    return _x(B, M, width)


ENTRIES = [
    Entry("df_attention_self_bias", "diffusers", lambda: _attention(bias=True), (mha(D, H, FULL),)),
    # Cross attention, 4 heads of 16 from 24-wide text: q 32·64, k = v = 24·64, o 64·32 + 32.
    Entry("df_attention_cross_wide_heads", "diffusers",
          lambda: _attention(cross_attention_dim=C, dim_head=16, ctx=C),
          (mha(D, H, 32 * 64 + 2 * 24 * 64 + lin(64, D), kind="cross", head_dim=16),)),
    Entry("df_attention_qk_rms_norm", "diffusers", lambda: _attention(qk_norm="rms_norm"),
          (mha(D, H, OUT_BIAS),)),
    # UnCLIP's added K/V: K = [add_k(text); to_k(image)], V likewise, on (B, C, H, W) images:
    # to_q/k/v 3·1,024, add_k/add_v 2·(24·32 + 32), to_out 1,056 = 5,728.
    # Kind: the queries' tokens are a part of the keys' (as in a perceiver resampler), so
    # the queries attend a sequence other than their own: cross.
    Entry("df_attention_added_kv", "diffusers", _added_kv,
          (mha(D, H, 3 * 1024 + 2 * lin(C, D) + lin(D, D), kind="cross"),)),
    Entry("df_basic_block_cross", "diffusers",
          lambda: _block("attention", "BasicTransformerBlock", (D, H, DH), (_x(B, N, D),),
                         {"encoder_hidden_states": _ctx(C)}, cross_attention_dim=C),
          (mha(D, H, OUT_BIAS), mha(D, H, CROSS, kind="cross"))),
    # PixArt's ada_norm_single: the timestep is already the (B, 6·D) modulation.
    Entry("df_basic_block_ada_norm_single", "diffusers",
          lambda: _block("attention", "BasicTransformerBlock", (D, H, DH), (_x(B, N, D),),
                         {"encoder_hidden_states": _ctx(C), "timestep": _x(B, 6 * D)},
                         cross_attention_dim=C, norm_type="ada_norm_single"),
          (mha(D, H, OUT_BIAS), mha(D, H, CROSS, kind="cross"))),
    # SD3.5's dual attention: the joint attention (8·1,056) plus attn2 on the image (4·1,056).
    Entry("df_sd35_joint_dual_attention", "diffusers",
          lambda: _block("attention", "JointTransformerBlock", (D, H, DH),
                         (_x(B, N, D), _ctx(), _x(B, D)), qk_norm="rms_norm",
                         use_dual_attention=True),
          (mha(D, H, 2 * FULL), mha(D, H, FULL))),
    Entry("df_flux_double_block", "diffusers",
          lambda: _block("transformers.transformer_flux", "FluxTransformerBlock", (D, H, DH),
                         (_x(B, N, D), _ctx(), _x(B, D))),
          (mha(D, H, 2 * FULL),)),
    # pre_only: no to_out; proj_out reads cat([context, mlp]) (32 + 128 → 32). The block's O
    # is its 32·32 columns that read the context, plus the bias: q, k, v, o 4·1,056 = 4,224.
    Entry("df_flux_single_block", "diffusers",
          lambda: _block("transformers.transformer_flux", "FluxSingleTransformerBlock",
                         (D, H, DH), (_x(B, N, D), _ctx(), _x(B, D))),
          (mha(D, H, FULL),)),
    Entry("df_flux_model", "diffusers", _flux_model,
          (mha(D, H, 2 * FULL), mha(D, H, FULL))),
    # Hunyuan-DiT: self 4·1,056; cross q 1,056, k = v = 24·32 + 32, o 1,056 = 3,712.
    Entry("df_hunyuan_dit_block", "diffusers",
          lambda: _block("transformers.hunyuan_transformer_2d", "HunyuanDiTBlock", (D, H),
                         (_x(B, N, D),), {"encoder_hidden_states": _ctx(C), "temb": _x(B, D)},
                         cross_attention_dim=C),
          (mha(D, H, FULL), mha(D, H, 2 * lin(D, D) + 2 * lin(C, D), kind="cross"))),
    # CogVideoX: text and video tokens concatenated through one set of projections.
    Entry("df_cogvideox_block", "diffusers",
          lambda: _block("transformers.cogvideox_transformer_3d", "CogVideoXBlock",
                         (D, H, DH, 16), (_x(B, N, D), _ctx(), _x(B, 16))),
          (mha(D, H, OUT_BIAS),)),
    # AuraFlow: joint attention of two streams, no biases: 8·1,024 = 8,192.
    Entry("df_auraflow_joint_block", "diffusers",
          lambda: _block("transformers.auraflow_transformer_2d",
                         "AuraFlowJointTransformerBlock", (D, H, DH),
                         (_x(B, N, D), _ctx(), _x(B, D))),
          (mha(D, H, 8 * 1024),)),
    Entry("df_auraflow_single_block", "diffusers",
          lambda: _block("transformers.auraflow_transformer_2d",
                         "AuraFlowSingleTransformerBlock", (D, H, DH), (_x(B, N, D), _x(B, D))),
          (mha(D, H, 4 * 1024),)),
    Entry("df_allegro_block", "diffusers",
          lambda: _block("transformers.transformer_allegro", "AllegroTransformerBlock",
                         (D, H, DH), (_x(B, N, D),),
                         {"encoder_hidden_states": _ctx(C), "temb": _x(B, 6 * D)},
                         cross_attention_dim=C),
          (mha(D, H, OUT_BIAS), mha(D, H, CROSS, kind="cross"))),
    # Stable Audio, no biases. Its attn1 is built without kv_heads (stable_audio_transformer.py
    # passes only heads): 4·1,024 = 4,096. Cross from 24-wide text over 2 KV heads:
    # q 1,024, k = v = 24·16, o 1,024 = 2,816.
    Entry("df_stable_audio_gqa_block", "diffusers",
          lambda: _block("transformers.stable_audio_transformer", "StableAudioDiTBlock",
                         (D, H, 2, DH), (_x(B, N, D),), {"encoder_hidden_states": _ctx(C)},
                         cross_attention_dim=C),
          (mha(D, H, 4096), mha(D, H, 2816, kind="cross", kv_heads=2))),
    Entry("df_ltx_video_block", "diffusers",
          lambda: _block("transformers.transformer_ltx", "LTXVideoTransformerBlock",
                         (D, H, DH, D), (_x(B, N, D), _ctx(), _x(B, 1, 6 * D))),
          (mha(D, H, FULL), mha(D, H, FULL, kind="cross"))),
    Entry("df_cogview4_block", "diffusers",
          lambda: _block("transformers.transformer_cogview4", "CogView4TransformerBlock",
                         (D, H, DH, 16), (_x(B, N, D), _ctx(), _x(B, 16))),
          (mha(D, H, FULL),)),
    # Wan: biased projections, RMS norms over all heads; cross attention to D-wide text.
    Entry("df_wan_block", "diffusers",
          lambda: _block("transformers.transformer_wan", "WanTransformerBlock", (D, 64, H),
                         (_x(B, N, D), _ctx(), _x(B, 6, D), None)),
          (mha(D, H, FULL), mha(D, H, FULL, kind="cross"))),
    Entry("df_transformer_2d_conv_proj", "diffusers", _t2d,
          (mha(D, H, OUT_BIAS), mha(D, H, CROSS, kind="cross"))),
    # Attention over frames; double_self_attention defaults to True there: attn2 is a second
    # self-attention (transformer_temporal.py).
    Entry("df_temporal_transformer", "diffusers", _temporal,
          (mha(D, H, OUT_BIAS), mha(D, H, OUT_BIAS))),
    Entry("df_unet_mid_cross_attn", "diffusers", _unet_mid,
          (mha(D, H, OUT_BIAS), mha(D, H, CROSS, kind="cross"))),
    # The VAE's mid-block attention: group norm, biased projections, a residual connection.
    Entry("df_vae_mid_attention", "diffusers", _vae_mid, (mha(D, H, FULL),)),
    Entry("df_dit_model", "diffusers", _dit, (mha(D, H, FULL),)),
]
