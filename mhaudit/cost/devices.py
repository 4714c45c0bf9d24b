"""Target GPU profiles: peak throughput, bandwidth, SMs and attention-kernel limits."""

from __future__ import annotations

from dataclasses import dataclass

from mhaudit.errors import ConfigError


@dataclass(frozen=True)
class GpuProfile:
    """Datasheet figures for one accelerator (dense, no sparsity)."""

    key: str
    """CLI name, e.g. ``h100``."""
    name: str
    """Marketing name."""
    peak_tflops_bf16: float
    """Peak dense bf16/fp16 tensor-core TFLOP/s (10**12 FLOP/s)."""
    bandwidth_gb_s: float
    """Memory bandwidth in GB/s (10**9 B/s)."""
    sm_count: int
    """Streaming multiprocessors (compute units), for wave quantisation."""
    compute_capability: tuple[int, int]
    """CUDA (major, minor); on AMD, the gfx generation (9, 4) CDNA3 (gfx942) and (9, 5)
    CDNA4 (gfx950), which have no CUDA kernels."""
    memory_bytes: int
    """Device memory in bytes."""
    vendor: str = "nvidia"
    nvlink_gb_s: float = 0.0
    """GPU-to-GPU link bandwidth inside a node, per direction, GB/s: half the datasheet's
    bidirectional NVLink (Infinity Fabric on AMD) figure; 0 without such a link."""
    pcie_gb_s: float = 32.0
    """Host link bandwidth per direction, GB/s (PCIe Gen4 x16: 32; Gen5: 64)."""
    infiniband_gb_s: float = 25.0
    """Inter-node network bandwidth per GPU, per direction, GB/s: one InfiniBand adapter per
    GPU (HDR 200 Gb/s: 25; NDR 400 Gb/s: 50), as in the vendor's reference systems."""
    gpus_per_node: int = 8
    """GPUs one node links directly (NVLink domain)."""

    @property
    def intra_node_gb_s(self) -> float:
        """Bandwidth between GPUs of one node: NVLink where there is one, else PCIe."""
        return self.nvlink_gb_s or self.pcie_gb_s

    @property
    def unsupported_dtypes(self) -> frozenset[str]:
        """Element types this accelerator has no native support for: bf16 and fp8 before
        sm80 (the T4 is sm75), fp8 before sm89."""
        if self.vendor != "nvidia":
            return frozenset()
        if self.compute_capability < (8, 0):
            return frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2"})
        if self.compute_capability < (8, 9):
            return frozenset({"float8_e4m3fn", "float8_e5m2"})
        return frozenset()

    def supports(self, dtype: str) -> bool:
        """True when ``dtype`` (canonical name) runs natively on this accelerator."""
        return dtype not in self.unsupported_dtypes

    @property
    def flash_attention_version(self) -> int | None:
        """FlashAttention generation available: 3 on Hopper, 2 on sm80+, else None."""
        if self.vendor != "nvidia":
            return None
        if self.compute_capability[0] == 9:
            return 3
        if self.compute_capability >= (8, 0):
            return 2
        return None

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity (FLOP per byte) where compute and bandwidth meet."""
        return (self.peak_tflops_bf16 * 1e12) / (self.bandwidth_gb_s * 1e9)


_GIB = 1024**3

PROFILES: dict[str, GpuProfile] = {
    p.key: p
    for p in (
        GpuProfile("t4", "NVIDIA T4", 65.0, 320.0, 40, (7, 5), 16 * _GIB,
                   pcie_gb_s=16.0, infiniband_gb_s=12.5),
        GpuProfile("l4", "NVIDIA L4", 121.0, 300.0, 58, (8, 9), 24 * _GIB,
                   infiniband_gb_s=12.5),
        GpuProfile("a10", "NVIDIA A10", 125.0, 600.0, 72, (8, 6), 24 * _GIB,
                   infiniband_gb_s=12.5),
        GpuProfile("a100-40g", "NVIDIA A100 40GB", 312.0, 1555.0, 108, (8, 0), 40 * _GIB,
                   nvlink_gb_s=300.0),
        GpuProfile("a100-80g", "NVIDIA A100 80GB", 312.0, 2039.0, 108, (8, 0), 80 * _GIB,
                   nvlink_gb_s=300.0),
        GpuProfile("h100", "NVIDIA H100 SXM", 989.0, 3350.0, 132, (9, 0), 80 * _GIB,
                   nvlink_gb_s=450.0, pcie_gb_s=64.0, infiniband_gb_s=50.0),
        GpuProfile("h100-pcie", "NVIDIA H100 PCIe", 756.0, 2000.0, 114, (9, 0), 80 * _GIB,
                   nvlink_gb_s=300.0, pcie_gb_s=64.0, infiniband_gb_s=50.0,
                   gpus_per_node=2),
        GpuProfile("h200", "NVIDIA H200", 989.0, 4800.0, 132, (9, 0), 141 * 10**9,
                   nvlink_gb_s=450.0, pcie_gb_s=64.0, infiniband_gb_s=50.0),
        GpuProfile("rtx4090", "NVIDIA RTX 4090", 165.0, 1008.0, 128, (8, 9), 24 * _GIB,
                   infiniband_gb_s=12.5),
        GpuProfile("mi300x", "AMD MI300X", 1307.0, 5300.0, 304, (9, 4), 192 * _GIB, "amd",
                   nvlink_gb_s=448.0, pcie_gb_s=64.0, infiniband_gb_s=50.0),
        # 2026 rentals. NVIDIA: DGX/HGX B200 datasheet (per GPU: 72 PFLOPS FP8 sparse per
        # 8 GPUs -> 2,250 TFLOP/s dense bf16; 180 GB of 192 GB HBM3e usable, 8 TB/s; NVLink 5
        # 1.8 TB/s bidirectional); GB200 NVL72 datasheet (per GPU: 2,500 TFLOP/s dense bf16,
        # 186 GB HBM3e, 8 TB/s, 72 GPUs in one NVLink domain); H20 (148 TFLOP/s dense bf16,
        # 96 GB HBM3, 4.0 TB/s, NVLink 900 GB/s); L40S datasheet (362 TFLOP/s dense bf16,
        # 48 GB GDDR6, 864 GB/s, PCIe Gen4, no NVLink). AMD: Instinct MI325X datasheet
        # (1,307 TFLOP/s dense bf16, 256 GB HBM3E, 6 TB/s, Infinity Fabric 896 GB/s) and
        # MI355X datasheet (2,500 TFLOP/s dense bf16, 288 GB HBM3E, 8 TB/s, 1,075 GB/s).
        GpuProfile("b200", "NVIDIA B200", 2250.0, 8000.0, 148, (10, 0), 180 * 10**9,
                   nvlink_gb_s=900.0, pcie_gb_s=64.0, infiniband_gb_s=50.0),
        GpuProfile("gb200", "NVIDIA GB200 (NVL72)", 2500.0, 8000.0, 148, (10, 0), 186 * 10**9,
                   nvlink_gb_s=900.0, pcie_gb_s=64.0, infiniband_gb_s=50.0, gpus_per_node=72),
        GpuProfile("h20", "NVIDIA H20", 148.0, 4000.0, 78, (9, 0), 96 * _GIB,
                   nvlink_gb_s=450.0, pcie_gb_s=64.0, infiniband_gb_s=50.0),
        GpuProfile("l40s", "NVIDIA L40S", 362.0, 864.0, 142, (8, 9), 48 * _GIB,
                   infiniband_gb_s=25.0),
        GpuProfile("mi325x", "AMD MI325X", 1307.0, 6000.0, 304, (9, 4), 256 * _GIB, "amd",
                   nvlink_gb_s=448.0, pcie_gb_s=64.0, infiniband_gb_s=50.0),
        GpuProfile("mi355x", "AMD MI355X", 2500.0, 8000.0, 256, (9, 5), 288 * _GIB, "amd",
                   nvlink_gb_s=537.6, pcie_gb_s=64.0, infiniband_gb_s=50.0),
    )
}

ALIASES: dict[str, str] = {"a100": "a100-80g", "h100-sxm": "h100", "4090": "rtx4090"}

DEFAULT_GPU = "h100"


def get_profile(key: str) -> GpuProfile:
    """Look a profile up by CLI name or alias, case-insensitively."""
    wanted = key.strip().lower()
    wanted = ALIASES.get(wanted, wanted)
    try:
        return PROFILES[wanted]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise ConfigError(
            f"unknown GPU profile {key!r}", f"Use one of: {known}."
        ) from None


DTYPE_BYTES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
}
"""Element size in bytes of each canonical dtype name."""

HALF_DTYPES: frozenset[str] = frozenset({"float16", "bfloat16"})
"""Dtypes the FlashAttention kernels accept."""

_DTYPE_ALIASES: dict[str, str] = {
    "fp64": "float64", "double": "float64",
    "fp32": "float32", "float": "float32", "f32": "float32", "tf32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16", "half": "float16", "f16": "float16",
    "fp8": "float8_e4m3fn", "float8": "float8_e4m3fn", "e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
}


def canonical_dtype(name: str) -> str:
    """Turn ``bf16``, ``torch.bfloat16`` or ``BFloat16`` into ``bfloat16``."""
    wanted = name.strip().lower().removeprefix("torch.")
    wanted = _DTYPE_ALIASES.get(wanted, wanted)
    if wanted not in DTYPE_BYTES:
        known = ", ".join(sorted(DTYPE_BYTES))
        raise ConfigError(f"unknown dtype {name!r}", f"Use one of: {known} (or bf16, fp16, fp32).")
    return wanted


def dtype_bytes(name: str) -> int:
    """Bytes per element of a dtype given by any accepted name."""
    return DTYPE_BYTES[canonical_dtype(name)]
