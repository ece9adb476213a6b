// A CUDA application without a GPU: host stubs with real mangled names (namespaces,
// templates, an anonymous namespace) launched through the (fake) runtime, and copies,
// allocations, synchronisations and graph launches of known sizes and counts. Every
// count here is asserted by tests/ebpf/test_end_to_end.py: change both together.
#include "cuda_fake.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

static volatile int sink;

#define BODY(n) do { sink += (n); } while (0)

namespace ml {
template <typename T, int N> __attribute__((noinline)) void gemm(T *, int) { BODY(N); }
}  // namespace ml
__attribute__((noinline)) void vecAdd(float *, float *, float *, int) { BODY(11); }
namespace {
__attribute__((noinline, used)) void helper() { BODY(12); }
}  // namespace
namespace ns {
struct Handled {
  static __attribute__((noinline)) void run(int) { BODY(13); }
};
}  // namespace ns
__attribute__((noinline)) void threaded_kernel(int) { BODY(14); }
__attribute__((noinline)) void cooperative_kernel(int) { BODY(15); }

static const void *fn(void (*f)()) { return reinterpret_cast<const void *>(f); }
template <typename F> static const void *fnp(F f) { return reinterpret_cast<const void *>(f); }

// Errors are not fatal here: with FAKE_CUDA_FAIL set, some calls fail on purpose.
static void launch(const void *f, dim3 g, dim3 b, cudaStream_t s = nullptr) {
  void *args[1] = {nullptr};
  (void)cudaLaunchKernel(f, g, b, args, 0, s);
}

static void runtime_work(int n) {
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(0x5000);
  for (int i = 0; i < n; i++) {
    launch(fnp(&ml::gemm<float, 4>), dim3{3, 5, 7}, dim3{32, 4, 2}, stream);  // 105 x 256
    launch(fnp(&vecAdd), dim3{1000, 1, 1}, dim3{256, 1, 1});                  // 1000 x 256
    launch(fnp(&vecAdd), dim3{1000, 1, 1}, dim3{256, 1, 1});
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3{2, 2, 1};   // 4 blocks
  cfg.blockDim = dim3{64, 1, 1};  // 64 threads
  cfg.stream = stream;
  void *args[1] = {nullptr};
  (void)cudaLaunchKernelExC(&cfg, fn(&helper), args);
  (void)cudaLaunchCooperativeKernel(fnp(&cooperative_kernel), dim3{16, 1, 1},
                                    dim3{512, 1, 1}, args, 0, nullptr);  // 16 x 512
  // CUDA 13 style: launch through an opaque kernel handle that maps to the host stub.
  cudaKernel_t handle = nullptr;
  if (__cudaGetKernel(&handle, fnp(&ns::Handled::run)) != 0) std::abort();
  launch(reinterpret_cast<const void *>(handle), dim3{1, 1, 1}, dim3{1, 1, 1});
  launch(reinterpret_cast<const void *>(handle), dim3{1, 1, 1}, dim3{1, 1, 1});

  static char host[1 << 20], dev[1 << 20];
  for (int i = 0; i < 3; i++) cudaMemcpy(dev, host, 1000, cudaMemcpyHostToDevice);
  for (int i = 0; i < 2; i++) cudaMemcpy(host, dev, 4096, cudaMemcpyDeviceToHost);
  cudaMemcpy(dev, dev, 1 << 20, cudaMemcpyDeviceToDevice);
  cudaMemcpy(host, host, 10, cudaMemcpyHostToHost);
  cudaMemcpy(dev, host, 7, cudaMemcpyDefault);
  cudaMemcpyAsync(dev, host, 5000, cudaMemcpyHostToDevice, stream);

  void *p = nullptr;
  for (int i = 0; i < 2; i++) cudaMalloc(&p, 1 << 20);
  cudaMallocManaged(&p, 12345, 1);
  cudaMallocAsync(&p, 100, stream);

  for (int i = 0; i < 3; i++) cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(0x77), stream);
  cudaStreamSynchronize(stream);
  cudaDeviceSynchronize();
}

static void thread_work(int threads, int n) {
  std::vector<std::thread> pool;
  // Every thread is alive until all have launched: all have per-thread state at once.
  std::mutex m;
  std::condition_variable cv;
  int done = 0;
  for (int t = 0; t < threads; t++)
    pool.emplace_back([n, threads, &m, &cv, &done] {
      for (int i = 0; i < n; i++) launch(fnp(&threaded_kernel), dim3{2, 1, 1}, dim3{128, 1, 1});
      std::unique_lock<std::mutex> lock(m);
      if (++done == threads) cv.notify_all();
      cv.wait(lock, [&] { return done == threads; });
    });
  for (auto &t : pool) t.join();
  cudaDeviceSynchronize();
}

static void unknown_work() {
  // An address no symbol covers (heap memory): the name is "unknown", never an address.
  void *nowhere = std::malloc(64);
  launch(nowhere, dim3{1, 1, 1}, dim3{1, 1, 1});
  cudaDeviceSynchronize();
}

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: workload runtime N | threads T N | unknown "
                         "[--wait | --sleep-ms MS]\n");
    return 2;
  }
  for (int i = 1; i < argc; i++)
    if (std::strcmp(argv[i], "--wait") == 0) {
      // The libraries are mapped: let the test see the probes attached before we go on.
      std::printf("ready\n");
      std::fflush(stdout);
      char line[16];
      if (!std::fgets(line, sizeof line, stdin)) return 3;
    } else if (std::strcmp(argv[i], "--sleep-ms") == 0 && i + 1 < argc) {
      // No handshake: the first CUDA call comes this long after exec.
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(argv[i + 1])));
    }
  std::string mode = argv[1];
  if (mode == "runtime") runtime_work(argc > 2 ? std::atoi(argv[2]) : 1);
  else if (mode == "threads") thread_work(std::atoi(argv[2]), std::atoi(argv[3]));
  else if (mode == "unknown") unknown_work();
  else return 2;
  std::printf("done\n");
  return 0;
}
