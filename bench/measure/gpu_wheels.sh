#!/usr/bin/env bash
# The wheels bench/measure/gpu_kit.py needs on the GPU machine and that its image lacks (it has torch, transformers,
# peft, accelerate, numpy; no network): bitsandbytes for the QLoRA cases, and pydantic / tomli-w (with their own
# dependencies) for vramplan's estimate, which the kit imports from the checkout. They go to .whl/ at the repository
# root (ignored by git through .git/info/exclude), about 47 MB of the 64 MiB a device call may carry.
# Usage: bash bench/measure/gpu_wheels.sh   (PY_VERSION=3.12 by default: the GPU machine's python3)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude="$(git rev-parse --git-path info/exclude)"
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
py="${PY_VERSION:-3.12}"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
    manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
# versions as in the project's test environment (pydantic-core is pinned by pydantic); bitsandbytes 0.50.2 carries
# its CUDA 13.0 library (libbitsandbytes_cuda130.so), which the machine's torch 2.11+cu130 loads
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
    "${platforms[@]}" -d .whl \
    bitsandbytes==0.50.2 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
    typing-inspection==0.4.5 typing-extensions==4.16.0 tomli-w==1.2.0
ls -l .whl
du -sh .whl
