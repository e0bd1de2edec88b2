#!/usr/bin/env bash
# Checks the GPU kernel objects Bazel built: each nvcc object (*.sm90a.o)
# carries an sm_90a fatbin (.nv_fatbin section, sm_90a SASS), each hipcc
# object (*.gfx9.o) an offload bundle with gfx90a and gfx906 code objects;
# the MFMA extend object's gfx90a code holds the kernel's v_mfma
# instructions (bf16 and f16 forms) and its gfx906 code none (no MFMA
# there). Arguments: the objects, in any order.
set -euo pipefail
fail=0
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
bundler=/usr/lib/llvm-15/bin/clang-offload-bundler
# Disassembly of one target's code object from a hipcc object, on stdout.
disasm() {  # object, target (gfx90a | gfx906)
  objcopy --dump-section .hip_fatbin="$tmp/fatbin" "$1" /dev/null
  "$bundler" --unbundle --type=o --input="$tmp/fatbin" \
    --targets="hipv4-amdgcn-amd-amdhsa--$2" --output="$tmp/$2.co"
  llvm-objdump-15 -d "$tmp/$2.co"
}
check() {  # file, description, command...
  local f="$1" what="$2"; shift 2
  if "$@"; then echo "ok   ${f##*/}: ${what}"; else echo "FAIL ${f##*/}: ${what}"; fail=1; fi
}
(( $# > 0 )) || { echo "no objects given"; exit 1; }
for obj in "$@"; do
  case "${obj##*/}" in
    *.sm90a.o)
      check "$obj" ".nv_fatbin section" bash -c "readelf -S '$obj' | grep -q '\.nv_fatbin'"
      check "$obj" "sm_90a code" bash -c "strings '$obj' | grep -q 'sm_90a'"
      ;;
    *.gfx9.o)
      check "$obj" ".hip_fatbin section" bash -c "readelf -S '$obj' | grep -q '\.hip_fatbin'"
      check "$obj" "gfx90a code object" bash -c "strings '$obj' | grep -q 'amdgcn-amd-amdhsa--gfx90a'"
      check "$obj" "gfx906 code object" bash -c "strings '$obj' | grep -q 'amdgcn-amd-amdhsa--gfx906'"
      ;;
    *)
      echo "FAIL ${obj##*/}: neither *.sm90a.o nor *.gfx9.o"
      fail=1
      ;;
  esac
  if [[ "${obj##*/}" == extend_attention_mfma.gfx9.o ]]; then
    gfx90a="$(disasm "$obj" gfx90a)"
    gfx906="$(disasm "$obj" gfx906)"
    check "$obj" "gfx90a v_mfma_f32_16x16x16bf16_1k" grep -q 'v_mfma_f32_16x16x16bf16_1k' <<<"$gfx90a"
    check "$obj" "gfx90a v_mfma_f32_16x16x16f16" grep -q 'v_mfma_f32_16x16x16f16' <<<"$gfx90a"
    check "$obj" "gfx906 without v_mfma" bash -c "! grep -q v_mfma" <<<"$gfx906"
  fi
done
exit "$fail"
