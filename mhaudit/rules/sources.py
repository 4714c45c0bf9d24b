"""The sources the rules cite for their cost facts, one constant each."""

from __future__ import annotations

NVIDIA_GUIDE = ("NVIDIA Deep Learning Performance Guide: matrix multiplication and tensor "
                "core requirements (GEMM dims multiples of 8 for fp16/bf16)")
FA2_API = ("Dao-AILab/flash-attention, csrc/flash_attn/flash_api.cpp and static_switch.h "
           "(head dim ≤ 256, multiple of 8; kernels 32, 64, 96, 128, 192, 256; h % h_kv == 0)")
FA3_API = "Dao-AILab/flash-attention, hopper/flash_api.cpp (kernels 64, 96, 128, 192, 256)"
SDP_UTILS = ("pytorch/pytorch, aten/src/ATen/native/transformers/cuda/sdp_utils.cpp "
             "(SDPA backend constraints and order)")
FLASH_PAPER = ("Dao et al. 2022, FlashAttention: Fast and Memory-Efficient Exact Attention "
               "with IO-Awareness")
LOW_RANK = "Bhojanapalli et al. 2020, Low-Rank Bottleneck in Multi-head Attention Models"
SIXTEEN_HEADS = "Michel et al. 2019, Are Sixteen Heads Really Better than One?"
GQA = ("Ainslie et al. 2023, GQA: Training Generalized Multi-Query Transformer Models from "
       "Multi-Head Checkpoints")
MQA = "Shazeer 2019, Fast Transformer Decoding: One Write-Head is All You Need"
MEGATRON = ("Shoeybi et al. 2019, Megatron-LM: Training Multi-Billion Parameter Language "
            "Models Using Model Parallelism")
SCALING = "Kaplan et al. 2020, Scaling Laws for Neural Language Models (forward FLOPs per token)"
GEMMA = "Gemma Team 2024, Gemma: Open Models Based on Gemini Research and Technology"
