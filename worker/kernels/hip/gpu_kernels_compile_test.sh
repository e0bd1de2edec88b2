#!/usr/bin/env bash
# Checks the GPU kernel objects Bazel built: each nvcc object carries an
# sm_90a fatbin (.nv_fatbin section, sm_90a SASS), each hipcc object an
# offload bundle with gfx90a and gfx906 code objects. Arguments: pairs of
# (nvcc object, hipcc object).
set -euo pipefail
fail=0
check() {  # file, description, command...
  local f="$1" what="$2"; shift 2
  if "$@"; then echo "ok   ${f##*/}: ${what}"; else echo "FAIL ${f##*/}: ${what}"; fail=1; fi
}
(( $# > 0 )) || { echo "no objects given"; exit 1; }
while (( $# >= 2 )); do
  nv="$1" amd="$2"; shift 2
  check "$nv" ".nv_fatbin section" bash -c "readelf -S '$nv' | grep -q '\.nv_fatbin'"
  check "$nv" "sm_90a code" bash -c "strings '$nv' | grep -q 'sm_90a'"
  check "$amd" ".hip_fatbin section" bash -c "readelf -S '$amd' | grep -q '\.hip_fatbin'"
  check "$amd" "gfx90a code object" bash -c "strings '$amd' | grep -q 'amdgcn-amd-amdhsa--gfx90a'"
  check "$amd" "gfx906 code object" bash -c "strings '$amd' | grep -q 'amdgcn-amd-amdhsa--gfx906'"
done
exit "$fail"
