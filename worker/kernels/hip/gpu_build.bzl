"""Compiles HIP sources with the system GPU compilers through genrules.

Bazel's local C++ toolchain knows neither nvcc nor hipcc, so every .hip file
is compiled by a genrule: nvcc (/usr/local/cuda) for NVIDIA sm_90a (H100 /
H200) and Debian's hipcc for AMD gfx90a + gfx906 (wave64, compile-only).
The objects are linked into cc_library / cc_binary targets like any other.
"""

NVCC = "/usr/local/cuda/bin/nvcc"
HIPCC = "/usr/bin/hipcc"

# -lineinfo keeps source lines in the SASS for compute-sanitizer reports; it
# does not change the generated code.
_NVCC_FLAGS = " ".join([
    "-std=c++20",
    "-O3",
    "-I.",
    "-x cu",
    "-gencode arch=compute_90a,code=sm_90a",
    "-lineinfo",
    "-Xcompiler -fPIC",
    "-diag-suppress 177",
])

_HIPCC_FLAGS = " ".join([
    "-std=c++20",
    "-O3",
    "-I.",
    "-x hip",
    "-fPIC",
    "--offload-arch=gfx90a",
    "--offload-arch=gfx906",
    "-Wno-pass-failed",
])

def nvcc_object(name, src, hdrs, out, defines = [], **kwargs):
    """An sm_90a object of `src` and ptxas's report of its kernels.

    Outputs `out` and `out` with ".o" replaced by ".ptxas.log": registers,
    spills, stack and shared memory of every kernel (-Xptxas -v), printed in
    full if the compile fails.

    Args:
      name: genrule name.
      src: the .hip source.
      hdrs: every header the source includes from the repository.
      out: the object file name.
      defines: preprocessor definitions (NAME or NAME=VALUE).
      **kwargs: genrule attributes (testonly, visibility, ...).
    """
    log = out[:-len(".o")] + ".ptxas.log"
    flags = _NVCC_FLAGS + "".join([" -D" + d for d in defines])
    native.genrule(
        name = name,
        srcs = [src] + hdrs,
        outs = [out, log],
        cmd = ("%s %s -Xptxas -v -c $(location %s) -o $(location %s) " +
               "2> $(location %s) || { cat $(location %s); exit 1; }") %
              (NVCC, flags, src, out, log, log),
        **kwargs
    )

def hipcc_object(name, src, hdrs, out, **kwargs):
    """A gfx90a + gfx906 object (one offload bundle) of `src`.

    hipcc prints a harmless rocm_agent_enumerator traceback (no GPU here); its
    output is kept out of the build log unless the compile fails.

    Args:
      name: genrule name.
      src: the .hip source.
      hdrs: every header the source includes from the repository.
      out: the object file name.
      **kwargs: genrule attributes.
    """
    native.genrule(
        name = name,
        srcs = [src] + hdrs,
        outs = [out],
        cmd = ("%s %s -c $(location %s) -o $@ > $@.log 2>&1 " +
               "|| { cat $@.log; exit 1; }; rm -f $@.log") %
              (HIPCC, _HIPCC_FLAGS, src),
        **kwargs
    )
