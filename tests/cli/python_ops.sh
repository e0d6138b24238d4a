# The PyTorch operators (python/): their pytest suite runs where torch with
# CUDA, a GPU and the built extension exist (the GPU machine:
# `cd python && CXX=g++ python setup.py build_ext --inplace`); elsewhere this
# test reports as skipped (exit 77) and says why.
source "$(dirname "$0")/lib.bash"
if ! python3 -c "import torch" 2>/dev/null; then
  echo "torch is not installed: the python/ operator tests are skipped"; exit 77
fi
if ! python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "no CUDA device: the python/ operator tests are skipped"; exit 77
fi
if ! ls "$SRC"/python/tqkit_torch/_C*.so >/dev/null 2>&1; then
  echo "tqkit_torch is not built (cd python && CXX=g++ python setup.py build_ext --inplace): skipped"; exit 77
fi
cd "$SRC" && PYTHONPATH=python python3 -m pytest -q python/tests
