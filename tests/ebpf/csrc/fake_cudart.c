/* A fake libcudart.so.12: the real runtime entry points with real signatures, calling
 * the (fake) driver the way the real runtime does, so a runtime call that goes through
 * the driver can be checked to count once. */
#include "cuda_fake.h"
#include "fake_fail.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t smem,
                             cudaStream_t s) {
  FAIL_IF("cudaLaunchKernel");
  return cuLaunchKernel((CUfunction)func, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)smem,
                        (CUstream)s, args, NULL);
}
/* nvcc's <<<>>> with the kernel's handle (CUDA 13's crt/device_functions.h; exported since
 * CUDA 12): the real one jumps to cudaLaunchKernel, whose probe counts it. Its name ends
 * with cudaLaunchKernel's, which the linker then keeps only inside it (a merged suffix of
 * the string table), as in NVIDIA's libcudart.so.12 and .13. */
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 g, dim3 b, void **args, size_t smem,
                               cudaStream_t s) {
  return cudaLaunchKernel((const void *)kernel, g, b, args, smem, s);
}
cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 g, dim3 b, void **args,
                                        size_t smem, cudaStream_t s) {
  FAIL_IF("cudaLaunchCooperativeKernel");
  return cuLaunchCooperativeKernel((CUfunction)func, g.x, g.y, g.z, b.x, b.y, b.z,
                                   (unsigned)smem, (CUstream)s, args);
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *func, void **args) {
  FAIL_IF("cudaLaunchKernelExC");
  CUlaunchConfig cu = {c->gridDim.x, c->gridDim.y, c->gridDim.z, c->blockDim.x,
                       c->blockDim.y, c->blockDim.z, (unsigned)c->dynamicSmemBytes,
                       (CUstream)c->stream, NULL, 0};
  return cuLaunchKernelEx(&cu, (CUfunction)func, args, NULL);
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  FAIL_IF("cudaGraphLaunch");
  return cuGraphLaunch((CUgraphExec)e, (CUstream)s);
}
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun) {
  FAIL_IF("__cudaGetKernel");
  /* An opaque handle that is not the host function's address. */
  *kernel = (cudaKernel_t)((uintptr_t)malloc(32) | 1u);
  (void)hostFun;
  return 0;
}
cudaError_t cudaMalloc(void **p, size_t n) {
  FAIL_IF("cudaMalloc"); return cuMemAlloc_v2((CUdeviceptr *)p, n); }
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) {
  FAIL_IF("cudaMallocAsync");
  return cuMemAllocAsync((CUdeviceptr *)p, n, (CUstream)s);
}
cudaError_t cudaMallocManaged(void **p, size_t n, unsigned int flags) {
  FAIL_IF("cudaMallocManaged");
  return cuMemAllocManaged((CUdeviceptr *)p, n, flags);
}
cudaError_t cudaFree(void *p) {
  FAIL_IF("cudaFree"); return cuMemFree_v2((CUdeviceptr)p); }

static CUresult copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  switch (kind) {
  case cudaMemcpyHostToDevice: return cuMemcpyHtoD_v2((CUdeviceptr)dst, src, n);
  case cudaMemcpyDeviceToHost: return cuMemcpyDtoH_v2(dst, (CUdeviceptr)src, n);
  case cudaMemcpyDeviceToDevice: return cuMemcpyDtoD_v2((CUdeviceptr)dst, (CUdeviceptr)src, n);
  default: return cuMemcpy((CUdeviceptr)dst, (CUdeviceptr)src, n);
  }
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  FAIL_IF("cudaMemcpy");
  return copy(dst, src, n, kind);
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
  FAIL_IF("cudaMemcpyAsync");
  if (kind == cudaMemcpyHostToDevice)
    return cuMemcpyHtoDAsync_v2((CUdeviceptr)dst, src, n, (CUstream)s);
  return copy(dst, src, n, kind);
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  FAIL_IF("cudaStreamSynchronize"); return cuStreamSynchronize((CUstream)s); }
cudaError_t cudaDeviceSynchronize(void) {
  FAIL_IF("cudaDeviceSynchronize"); return cuCtxSynchronize(); }
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  FAIL_IF("cudaEventSynchronize"); return cuEventSynchronize(e); }

/* The runtime's devices are the driver's (CUDA_VISIBLE_DEVICES applied there). */
#define cudaErrorInvalidDevice 101
cudaError_t cudaGetDeviceCount(int *count) {
  FAIL_IF("cudaGetDeviceCount"); return cuDeviceGetCount(count); }
cudaError_t cudaSetDevice(int device) {
  FAIL_IF("cudaSetDevice");
  int n = 0;
  cuDeviceGetCount(&n);
  return device >= 0 && device < n ? 0 : cudaErrorInvalidDevice;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
  FAIL_IF("cudaGetDeviceProperties");
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "Fake GPU %d", device);
  CUuuid u;
  if (cuDeviceGetUuid(&u, device) != 0) return cudaErrorInvalidDevice;
  memcpy(&prop->uuid, &u, sizeof u);
  return 0;
}
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
  FAIL_IF("cudaDeviceGetPCIBusId");
  return cuDeviceGetPCIBusId(pciBusId, len, device) == 0 ? 0 : cudaErrorInvalidDevice;
}

/* Strided, 3D and peer copies through the driver's descriptors, as the real runtime
 * does: those driver calls are made inside the runtime call and are not counted again. */
static CUmemorytype src_type(enum cudaMemcpyKind k) {
  return k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice ? CU_MEMORYTYPE_DEVICE
         : k == cudaMemcpyDefault ? CU_MEMORYTYPE_UNIFIED : CU_MEMORYTYPE_HOST;
}
static CUmemorytype dst_type(enum cudaMemcpyKind k) {
  return k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice ? CU_MEMORYTYPE_DEVICE
         : k == cudaMemcpyDefault ? CU_MEMORYTYPE_UNIFIED : CU_MEMORYTYPE_HOST;
}
static CUresult copy_2d(size_t w, size_t h, enum cudaMemcpyKind k, int async, cudaStream_t s) {
  CUDA_MEMCPY2D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = src_type(k);
  c.dstMemoryType = dst_type(k);
  c.WidthInBytes = w;
  c.Height = h;
  return async ? cuMemcpy2DAsync_v2(&c, (CUstream)s) : cuMemcpy2D_v2(&c);
}
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t w,
                         size_t h, enum cudaMemcpyKind k) {
  FAIL_IF("cudaMemcpy2D");
  (void)dst; (void)dpitch; (void)src; (void)spitch;
  return copy_2d(w, h, k, 0, NULL);
}
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t w, size_t h, enum cudaMemcpyKind k, cudaStream_t s) {
  FAIL_IF("cudaMemcpy2DAsync");
  (void)dst; (void)dpitch; (void)src; (void)spitch;
  return copy_2d(w, h, k, 1, s);
}
cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wo, size_t ho, const void *src,
                                size_t spitch, size_t w, size_t h, enum cudaMemcpyKind k) {
  FAIL_IF("cudaMemcpy2DToArray");
  (void)dst; (void)wo; (void)ho; (void)src; (void)spitch;
  return copy_2d(w, h, k, 0, NULL);
}
cudaError_t cudaMemcpy2DToArrayAsync(cudaArray_t dst, size_t wo, size_t ho, const void *src,
                                     size_t spitch, size_t w, size_t h,
                                     enum cudaMemcpyKind k, cudaStream_t s) {
  FAIL_IF("cudaMemcpy2DToArrayAsync");
  (void)dst; (void)wo; (void)ho; (void)src; (void)spitch;
  return copy_2d(w, h, k, 1, s);
}
cudaError_t cudaMemcpy2DFromArray(void *dst, size_t dpitch, cudaArray_const_t src, size_t wo,
                                  size_t ho, size_t w, size_t h, enum cudaMemcpyKind k) {
  FAIL_IF("cudaMemcpy2DFromArray");
  (void)dst; (void)dpitch; (void)src; (void)wo; (void)ho;
  return copy_2d(w, h, k, 0, NULL);
}
cudaError_t cudaMemcpy2DFromArrayAsync(void *dst, size_t dpitch, cudaArray_const_t src,
                                       size_t wo, size_t ho, size_t w, size_t h,
                                       enum cudaMemcpyKind k, cudaStream_t s) {
  FAIL_IF("cudaMemcpy2DFromArrayAsync");
  (void)dst; (void)dpitch; (void)src; (void)wo; (void)ho;
  return copy_2d(w, h, k, 1, s);
}
cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wod, size_t hod,
                                     cudaArray_const_t src, size_t wos, size_t hos, size_t w,
                                     size_t h, enum cudaMemcpyKind k) {
  FAIL_IF("cudaMemcpy2DArrayToArray");
  (void)dst; (void)wod; (void)hod; (void)src; (void)wos; (void)hos;
  return copy_2d(w, h, k, 0, NULL);
}
static CUresult copy_3d(const struct cudaMemcpy3DParms *p, int async, cudaStream_t s) {
  CUDA_MEMCPY3D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = p->srcArray ? CU_MEMORYTYPE_ARRAY : src_type(p->kind);
  c.dstMemoryType = p->dstArray ? CU_MEMORYTYPE_ARRAY : dst_type(p->kind);
  c.WidthInBytes = p->extent.width; /* elements of an array: its element size is 1 here */
  c.Height = p->extent.height;
  c.Depth = p->extent.depth;
  return async ? cuMemcpy3DAsync_v2(&c, (CUstream)s) : cuMemcpy3D_v2(&c);
}
cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p) {
  FAIL_IF("cudaMemcpy3D"); return copy_3d(p, 0, NULL); }
cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t s) {
  FAIL_IF("cudaMemcpy3DAsync"); return copy_3d(p, 1, s); }
static CUresult copy_3d_peer(const struct cudaMemcpy3DPeerParms *p, int async,
                             cudaStream_t s) {
  CUDA_MEMCPY3D_PEER c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = p->srcArray ? CU_MEMORYTYPE_ARRAY : CU_MEMORYTYPE_DEVICE;
  c.dstMemoryType = p->dstArray ? CU_MEMORYTYPE_ARRAY : CU_MEMORYTYPE_DEVICE;
  c.WidthInBytes = p->extent.width;
  c.Height = p->extent.height;
  c.Depth = p->extent.depth;
  return async ? cuMemcpy3DPeerAsync(&c, (CUstream)s) : cuMemcpy3DPeer(&c);
}
cudaError_t cudaMemcpy3DPeer(const struct cudaMemcpy3DPeerParms *p) {
  FAIL_IF("cudaMemcpy3DPeer"); return copy_3d_peer(p, 0, NULL); }
cudaError_t cudaMemcpy3DPeerAsync(const struct cudaMemcpy3DPeerParms *p, cudaStream_t s) {
  FAIL_IF("cudaMemcpy3DPeerAsync"); return copy_3d_peer(p, 1, s); }
cudaError_t cudaMemcpyPeer(void *dst, int dd, const void *src, int sd, size_t n) {
  FAIL_IF("cudaMemcpyPeer");
  (void)dd; (void)sd;
  return cuMemcpyPeer((CUdeviceptr)dst, NULL, (CUdeviceptr)src, NULL, n);
}
cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t n,
                                cudaStream_t s) {
  FAIL_IF("cudaMemcpyPeerAsync");
  (void)dd; (void)sd;
  return cuMemcpyPeerAsync((CUdeviceptr)dst, NULL, (CUdeviceptr)src, NULL, n, (CUstream)s);
}
cudaError_t cudaMallocHost(void **p, size_t n) {
  FAIL_IF("cudaMallocHost"); return cuMemHostAlloc(p, n, 0); }
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
  FAIL_IF("cudaHostAlloc"); return cuMemHostAlloc(p, n, flags); }
/* Graphs: the driver's. */
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  FAIL_IF("cudaStreamBeginCapture"); return cuStreamBeginCapture_v2((CUstream)s, mode); }
cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g,
                                          const cudaGraphNode_t *deps, const void *data,
                                          size_t n, enum cudaStreamCaptureMode mode) {
  FAIL_IF("cudaStreamBeginCaptureToGraph");
  return cuStreamBeginCaptureToGraph((CUstream)s, (CUgraph)g, (const CUgraphNode *)deps, data,
                                     n, mode);
}
cudaError_t cudaStreamBeginRecaptureToGraph(cudaStream_t s, enum cudaStreamCaptureMode mode,
                                            cudaGraph_t g, void *callbackData) {
  FAIL_IF("cudaStreamBeginRecaptureToGraph");
  (void)callbackData;
  (void)mode;
  return fake_recapture((CUstream)s, (CUgraph)g);
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
  /* Not FAIL_IF here: the driver's failure is the capture's (it ends either way). */
  return cuStreamEndCapture((CUstream)s, (CUgraph *)g);
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  FAIL_IF("cudaEventRecord"); return cuEventRecord((CUevent)e, (CUstream)s); }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  FAIL_IF("cudaStreamWaitEvent"); return cuStreamWaitEvent((CUstream)s, (CUevent)e, flags); }
cudaError_t cudaGraphCreate(cudaGraph_t *g, unsigned int flags) {
  FAIL_IF("cudaGraphCreate"); return cuGraphCreate((CUgraph *)g, flags); }
cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *node, cudaGraph_t g,
                                   const cudaGraphNode_t *deps, size_t n,
                                   const cudaKernelNodeParams *p) {
  FAIL_IF("cudaGraphAddKernelNode");
  CUDA_KERNEL_NODE_PARAMS cu = {(CUfunction)p->func, p->gridDim.x, p->gridDim.y,
                                p->gridDim.z, p->blockDim.x, p->blockDim.y, p->blockDim.z,
                                p->sharedMemBytes, p->kernelParams, p->extra};
  return cuGraphAddKernelNode((CUgraphNode *)node, (CUgraph)g, (const CUgraphNode *)deps, n,
                              &cu);
}
cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *node, cudaGraph_t g,
                                       const cudaGraphNode_t *deps, size_t n,
                                       cudaGraph_t child) {
  FAIL_IF("cudaGraphAddChildGraphNode");
  return cuGraphAddChildGraphNode((CUgraphNode *)node, (CUgraph)g, (const CUgraphNode *)deps,
                                  n, (CUgraph)child);
}
static cudaError_t add_node(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps,
                            size_t n, cudaGraphNodeParams *p) {
  if (p->type == 0) return cudaGraphAddKernelNode(node, g, deps, n, &p->kernel);
  if (p->type == 4) return cudaGraphAddChildGraphNode(node, g, deps, n, p->graph.graph);
  *node = malloc(8); /* another kind of node: added, and nothing to launch */
  return 0;
}
#ifdef FAKE_CUDART_13
cudaError_t cudaGraphAddNode(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps,
                             const void *edges, size_t n, cudaGraphNodeParams *p) {
  FAIL_IF("cudaGraphAddNode");
  (void)edges;
  return add_node(node, g, deps, n, p);
}
#else
cudaError_t cudaGraphAddNode(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps,
                             size_t n, cudaGraphNodeParams *p) {
  FAIL_IF("cudaGraphAddNode");
  return add_node(node, g, deps, n, p);
}
#endif
cudaError_t cudaGraphAddNode_v2(cudaGraphNode_t *node, cudaGraph_t g,
                                const cudaGraphNode_t *deps, const void *edges, size_t n,
                                cudaGraphNodeParams *p) {
  FAIL_IF("cudaGraphAddNode_v2");
  (void)edges;
  return add_node(node, g, deps, n, p);
}
cudaError_t cudaGraphClone(cudaGraph_t *out, cudaGraph_t g) {
  FAIL_IF("cudaGraphClone"); return cuGraphClone((CUgraph *)out, (CUgraph)g); }
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g,
                                 unsigned long long flags) {
  FAIL_IF("cudaGraphInstantiate");
  return cuGraphInstantiateWithFlags((CUgraphExec *)exec, (CUgraph)g, flags);
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  FAIL_IF("cudaGraphDestroy"); return cuGraphDestroy((CUgraph)g); }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  FAIL_IF("cudaGraphExecDestroy"); return cuGraphExecDestroy((CUgraphExec)e); }
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g,
                                cudaGraphExecUpdateResultInfo *info) {
  FAIL_IF("cudaGraphExecUpdate");
  return cuGraphExecUpdate_v2((CUgraphExec)e, (CUgraph)g,
                              (CUgraphExecUpdateResultInfo *)info);
}

/* Completion points (issue #27): the driver's. */
cudaError_t cudaEventCreate(cudaEvent_t *e) {
  FAIL_IF("cudaEventCreate"); return cuEventCreate((CUevent *)e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
  FAIL_IF("cudaEventCreateWithFlags"); return cuEventCreate((CUevent *)e, flags); }
cudaError_t cudaEventQuery(cudaEvent_t e) {
  FAIL_IF("cudaEventQuery"); return cuEventQuery((CUevent)e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  FAIL_IF("cudaEventDestroy"); return cuEventDestroy_v2((CUevent)e); }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  FAIL_IF("cudaEventElapsedTime"); return cuEventElapsedTime(ms, (CUevent)a, (CUevent)b); }
cudaError_t cudaStreamCreate(cudaStream_t *s) {
  FAIL_IF("cudaStreamCreate"); return cuStreamCreate((CUstream *)s, 0); }
cudaError_t cudaStreamQuery(cudaStream_t s) {
  FAIL_IF("cudaStreamQuery"); return cuStreamQuery((CUstream)s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  FAIL_IF("cudaStreamDestroy"); return cuStreamDestroy_v2((CUstream)s); }
/* The per-thread default stream entry points: NULL is the thread's own stream, which the
 * fake driver knows as cudaStreamPerThread (0x2). */
cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 g, dim3 b, void **args, size_t smem,
                                  cudaStream_t s) {
  FAIL_IF("cudaLaunchKernel_ptsz");
  return cuLaunchKernel((CUfunction)func, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)smem,
                        (CUstream)(s ? s : cudaStreamPerThread), args, NULL);
}
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) {
  FAIL_IF("cudaStreamSynchronize_ptsz");
  return cuStreamSynchronize((CUstream)(s ? s : cudaStreamPerThread));
}
