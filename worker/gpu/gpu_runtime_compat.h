// Runtime names the GPU model backend needs beyond
// worker/kernels/hip/hip_compat.h (owned by the kernels): graphs, device
// selection, memory info, the capture status of a stream and the profiler
// range. HIP names, mapped
// to CUDA on NVIDIA builds; on hipcc the HIP runtime provides them directly.
#ifndef RADIXKV_WORKER_GPU_GPU_RUNTIME_COMPAT_H_
#define RADIXKV_WORKER_GPU_GPU_RUNTIME_COMPAT_H_

#include "worker/kernels/hip/hip_compat.h"

#if defined(RADIXKV_GPU_AMD)
#include <hip/hip_runtime_api.h>
#else
#include <cuda_profiler_api.h>
#define hipProfilerStart cudaProfilerStart
#define hipProfilerStop cudaProfilerStop
#endif

#if !defined(RADIXKV_GPU_AMD)
using hipGraph_t = cudaGraph_t;
using hipGraphExec_t = cudaGraphExec_t;
#define hipStreamBeginCapture cudaStreamBeginCapture
#define hipStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define hipStreamEndCapture cudaStreamEndCapture
#define hipGraphInstantiateWithFlags cudaGraphInstantiateWithFlags
#define hipGraphDestroy cudaGraphDestroy
#define hipGraphExecDestroy cudaGraphExecDestroy
#define hipGraphLaunch cudaGraphLaunch
#define hipGetDeviceCount cudaGetDeviceCount
#define hipSetDevice cudaSetDevice
#define hipMemGetInfo cudaMemGetInfo
#define hipErrorOutOfMemory cudaErrorMemoryAllocation
using hipStreamCaptureStatus = cudaStreamCaptureStatus;
#define hipStreamIsCapturing cudaStreamIsCapturing
#define hipStreamCaptureStatusNone cudaStreamCaptureStatusNone
#endif

#endif  // RADIXKV_WORKER_GPU_GPU_RUNTIME_COMPAT_H_
