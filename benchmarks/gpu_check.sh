#!/usr/bin/env bash
# One short device check for a machine with a CUDA GPU: the GPU-marked tests, a measured
# report and a measured what-if sweep. Writes its results under ${OUT:-gpu-check}/.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-check}"
mkdir -p "$out"
# Keeps the machine's own CUDA build of torch (constraints.txt pins the CPU build used in CI).
python -m pip install --quiet -e ".[dev]"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python -m pytest -q -p no:cacheprovider -m gpu tests/ | tee "$out/pytest-gpu.txt"
mhaudit report examples/gpt_decoder.py --device cuda --repeats 20 --gpu h100 \
    --format json --output "$out/gpt_decoder-cuda.json"
mhaudit report examples/llama_gqa.py --device cuda --repeats 20 | tee "$out/llama_gqa-cuda.txt"
mhaudit whatif --d-model 1024 --heads 16 --seq-len 4096 --device cuda --repeats 10 \
    | tee "$out/whatif-cuda.txt"
# The training audit's peak against torch.cuda.max_memory_allocated() over a real AdamW step.
python benchmarks/gpu_train_check.py | tee "$out/train-peak.txt"
