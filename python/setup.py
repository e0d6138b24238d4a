"""Builds tqkit_torch: PyTorch operators (torch.ops.tqkit.*) over tqkit's CUDA
store / decode / dequant kernels on vLLM's TurboQuant cache layout.

    pip install --no-build-isolation ./python        (needs torch with CUDA, nvcc, fmt and nlohmann-json headers)
    python python/setup.py build_ext --inplace       (or in place, for development)

The extension compiles the kernels (kernels/src) and the codec core of the
library (lib/src: core, codebook, quant, rotation, format registry) directly;
TQ_CUDA_ARCH (default 90) selects the GPU architecture and MAX_JOBS the
parallel compile jobs (ninja). Headers come from the system (/usr/include) or,
where it exists, from ROOT/.deps/usr/include: Debian packages unpacked there
(experiments/run_kernels.sh's header says how), as on the GPU machine.

Use a compiler that links libstdc++ dynamically, as torch does (CXX=g++ of the
system): a toolchain that links its own copy statically gives the extension a
second iostream runtime, and formatting a number into an error message then
crashes inside torch's c10::str.
"""
import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def rel(*parts):
    return os.path.relpath(os.path.join(ROOT, *parts), HERE)


lib_sources = [
    p for d in ("core", "codebook", "quant", "rotation")
    for p in sorted(glob.glob(os.path.join(ROOT, "lib", "src", d, "*.cpp")))
    if os.path.basename(p) != "app.cpp"  # the tools' CLI plumbing
] + [os.path.join(ROOT, "lib", "src", "format", f) for f in ("registry.cpp", "attention.cpp")]
kernel_sources = [os.path.join(ROOT, "kernels", "src", f) for f in ("kernel_format.cpp", "validate.cpp", "check.cpp",
                                                                    "device.cu", "store.cu", "dequant.cu", "decode.cu")]
kernel_sources += sorted(glob.glob(os.path.join(ROOT, "kernels", "src", "decode_*.cu")))
arch = os.environ.get("TQ_CUDA_ARCH", "90")
include_dirs = [os.path.join(ROOT, "lib", "include"), os.path.join(ROOT, "kernels", "include"),
                os.path.join(ROOT, "kernels", "src")]
deps_include = os.path.join(ROOT, ".deps", "usr", "include")  # fmt, nlohmann/json.hpp where the system lacks them
if os.path.isdir(deps_include):
    include_dirs.append(deps_include)

setup(
    name="tqkit-torch",
    version="0.1.0",
    description="PyTorch ops over tqkit's TurboQuant KV-cache CUDA kernels (vLLM cache layout)",
    packages=["tqkit_torch"],
    ext_modules=[
        CUDAExtension(
            name="tqkit_torch._C",
            sources=[os.path.join(HERE, "csrc", "ops.cpp")] + lib_sources + kernel_sources,
            include_dirs=include_dirs,
            define_macros=[("FMT_HEADER_ONLY", "1")],
            extra_compile_args={
                "cxx": ["-O2", "-std=c++20", "-ffp-contract=off"],
                "nvcc": ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "-lineinfo",
                         f"-gencode=arch=compute_{arch},code=sm_{arch}"],
            },
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    python_requires=">=3.9",
)
