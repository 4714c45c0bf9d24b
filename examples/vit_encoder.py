"""A small ViT-style image classifier: patch embedding, class token, eager fused-QKV attention."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class ViTConfig:
    image_size: int = 64
    patch_size: int = 8
    in_chans: int = 3
    dim: int = 192
    depth: int = 4
    num_heads: int = 3
    mlp_ratio: int = 4
    num_classes: int = 10

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


class PatchEmbed(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.proj = nn.Conv2d(
            config.in_chans, config.dim, kernel_size=config.patch_size, stride=config.patch_size
        )

    def forward(self, x: Tensor) -> Tensor:
        x = self.proj(x)  # (B, d, H/p, W/p)
        return x.flatten(2).transpose(1, 2)  # (B, N, d)


class Attention(nn.Module):
    """Self-attention with a fused qkv Linear and an explicit score matrix."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        B, N, C = x.shape  # (B, N, d)
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim)  # (B, N, 3, h, d_k)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, h, N, d_k)
        attn = (q @ k.transpose(-2, -1)) * self.scale  # (B, h, N, N)
        attn = attn.softmax(dim=-1)  # (B, h, N, N)
        x = attn @ v  # (B, h, N, d_k)
        x = x.transpose(1, 2).reshape(B, N, C)  # (B, N, d)
        return self.proj(x)


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))  # (B, N, d)


class EncoderBlock(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.dim, eps=1e-6)
        self.attn = Attention(config.dim, config.num_heads)
        self.norm2 = nn.LayerNorm(config.dim, eps=1e-6)
        self.mlp = Mlp(config.dim, config.mlp_ratio * config.dim)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.dim))
        self.pos_embed = nn.Parameter(torch.randn(1, config.num_patches + 1, config.dim) * 0.02)
        self.blocks = nn.ModuleList([EncoderBlock(config) for _ in range(config.depth)])
        self.norm = nn.LayerNorm(config.dim, eps=1e-6)
        self.head = nn.Linear(config.dim, config.num_classes)

    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)  # (B, N, d)
        cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, d)
        x = torch.cat((cls, x), dim=1) + self.pos_embed  # (B, N + 1, d)
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        return self.head(x[:, 0])  # (B, num_classes)


def build_model() -> nn.Module:
    """64x64 images in 8x8 patches (64 tokens + class token), d=192, 3 heads of 64, 4 layers."""
    return VisionTransformer(ViTConfig()).eval()


def example_inputs() -> tuple[Tensor]:
    """Two RGB 64x64 images."""
    return (torch.randn(2, 3, 64, 64),)  # (B, C, H, W)
