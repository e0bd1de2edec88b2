// A floor under requested thread stack sizes, for binaries that load
// libraries with large static TLS.
//
// glibc's pthread_create carves the thread's static TLS (the TLS blocks of
// every library loaded at start-up) out of the requested stack and fails
// with EINVAL, creating no thread, when the request cannot hold it plus a
// minimum (nptl/allocate_stack.c). CivetWeb, the HTTP server of
// prometheus-cpp's Exposer behind MetricsEndpoint, asks for 100 KiB stacks
// (Debian builds it with -DUSE_STACK_SIZE=102400); the GPU worker's static
// TLS is larger (libcublasLt.so.13 alone 92 KiB, libopenblas.so.0 60 KiB,
// libcublas.so.13 12 KiB: the PT_TLS segments, `readelf -lW`), so its
// /metrics failed with "null context when constructing CivetServer".
//
// This definition of pthread_attr_setstacksize, linked into the executable
// and exported (BUILD: --export-dynamic-symbol), comes before libc's in
// symbol lookup: requests below kMinThreadStackBytes are raised to it, the
// rest pass through unchanged.
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>

#include <cstddef>

namespace {

// 1 MiB: CivetWeb's 100 KiB of working stack plus room for a few hundred KiB
// of static TLS. Threads that ask for more are not affected.
constexpr size_t kMinThreadStackBytes = size_t{1} << 20;

using SetStackSizeFn = int (*)(pthread_attr_t*, size_t);

SetStackSizeFn RealSetStackSize() {
  // RTLD_NEXT from the executable: the next definition in lookup order,
  // libc's.
  static const SetStackSizeFn real = reinterpret_cast<SetStackSizeFn>(
      dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real;
}

}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr,
                                         size_t stacksize) {
  const SetStackSizeFn real = RealSetStackSize();
  if (real == nullptr) return ENOSYS;
  return real(attr, stacksize < kMinThreadStackBytes ? kMinThreadStackBytes
                                                     : stacksize);
}
