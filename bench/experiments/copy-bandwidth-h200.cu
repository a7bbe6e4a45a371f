// A plain CUDA copy loop, the reference ddpcheck's host-copy step is compared with: for each
// visible GPU, a portable pinned host buffer (cudaHostAlloc), a device buffer, a non-blocking
// stream and two events; for each direction and size, `warmup` copies, then `iters` copies
// back to back between the events, as ddpcheck times them. One JSON line per (repeat, GPU,
// direction, size) on stdout.
//
//   nvcc -O2 -o copy-loop copy-bandwidth-h200.cu
//   ./copy-loop [repeats=5] [warmup=1] [iters=5] [sizes in MiB=1,16,256]
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      printf("{\"error\":\"%s failed: %s\"}\n", #call, cudaGetErrorString(e_));         \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

int main(int argc, char **argv) {
  int repeats = argc > 1 ? atoi(argv[1]) : 5;
  int warmup = argc > 2 ? atoi(argv[2]) : 1;
  int iters = argc > 3 ? atoi(argv[3]) : 5;
  size_t sizes[16];
  int nsizes = 0;
  char spec[256] = "1,16,256";
  if (argc > 4) strncpy(spec, argv[4], sizeof spec - 1);
  for (char *t = strtok(spec, ","); t && nsizes < 16; t = strtok(NULL, ","))
    sizes[nsizes++] = (size_t)atol(t) << 20;
  size_t max = 0;
  for (int i = 0; i < nsizes; i++) max = sizes[i] > max ? sizes[i] : max;
  if (repeats < 1 || iters < 1 || warmup < 0 || max == 0) {
    printf("{\"error\":\"usage: copy-loop [repeats] [warmup] [iters] [MiB,MiB,...]\"}\n");
    return 64;
  }
  int ngpus = 0;
  CK(cudaGetDeviceCount(&ngpus));
  void *host = NULL;
  for (int r = 0; r < repeats; r++) {
    for (int d = 0; d < ngpus; d++) {
      CK(cudaSetDevice(d));
      char bus[32] = "";
      CK(cudaDeviceGetPCIBusId(bus, sizeof bus, d));
      if (!host) CK(cudaHostAlloc(&host, max, cudaHostAllocPortable));
      void *dev = NULL;
      CK(cudaMalloc(&dev, max));
      cudaStream_t s;
      CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      for (int dir = 0; dir < 2; dir++) {
        for (int k = 0; k < nsizes; k++) {
          size_t n = sizes[k];
          void *dst = dir == 0 ? dev : host;
          const void *src = dir == 0 ? host : dev;
          cudaMemcpyKind kind = dir == 0 ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
          for (int i = 0; i < warmup; i++) CK(cudaMemcpyAsync(dst, src, n, kind, s));
          CK(cudaStreamSynchronize(s));
          CK(cudaEventRecord(e0, s));
          for (int i = 0; i < iters; i++) CK(cudaMemcpyAsync(dst, src, n, kind, s));
          CK(cudaEventRecord(e1, s));
          CK(cudaEventSynchronize(e1));
          float ms = 0;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          double us = (double)ms * 1e3 / iters;
          printf("{\"repeat\":%d,\"gpu\":%d,\"pci_bus_id\":\"%s\",\"direction\":\"%s\","
                 "\"bytes\":%zu,\"iters\":%d,\"time_us\":%.3f,\"gbps\":%.4f}\n",
                 r, d, bus, dir == 0 ? "host_to_device" : "device_to_host", n, iters, us,
                 (double)n / us / 1e3);
        }
      }
      CK(cudaEventDestroy(e0));
      CK(cudaEventDestroy(e1));
      CK(cudaStreamDestroy(s));
      CK(cudaFree(dev));
    }
  }
  CK(cudaFreeHost(host));
  return 0;
}
