// CUDA activity from uprobes on libcudart / libcuda. Everything is aggregated here, in
// maps that are never cleared: user space reads them at scrape. Only rare events (first
// sight of a key, a handle-to-name mapping) go through the ring buffer.
//
// Constants in capitals without a definition here (STATS_MAX, FAM_*, ...) are defined by
// gpu_exporter/ebpf/abi.py when the program is compiled, so the Python side and this
// file cannot disagree.
#include <uapi/linux/ptrace.h>

struct skey {
    u32 tgid;
    u16 fam;
    u16 sub;
    u64 id;
    u32 slot;
    u32 pad;
};

struct inflight {
    u64 ts;
    u64 arg;
    u64 arg2;
    u32 op;
    u32 depth;
};

struct pend {
    u64 ts;
    u64 id;
    u64 stream;
    u32 api;
    u32 pad;
};

struct event {
    u32 type;
    u32 tgid;
    u16 fam;
    u16 sub;
    u32 pad;
    u64 id;
    u64 target;
    char comm[16];
    char name[NAME_LEN];
};

// Launch shapes per process: log2 slots of blocks per grid and threads per block, in one
// value so a launch costs one lookup here. The last slot of each holds everything above
// the last bucket bound.
struct shape {
    u64 grid[GRID_SLOTS];
    u64 block[BLOCK_SLOTS];
    u64 grid_sum;
    u64 block_sum;
    u64 pending;  // 1 while `pending` holds a launch of this process: saves a lookup
};

BPF_HASH(stats, struct skey, u64, STATS_MAX);
BPF_HASH(shapes, u32, struct shape, PROCS_MAX);
BPF_PERCPU_ARRAY(zero_shape, struct shape, 1);
// Per thread: the runtime call it is inside of (side 0), and the driver call (side 1).
#define SIDE_RUNTIME 0
#define SIDE_DRIVER 1
struct tstate {
    struct inflight side[2];
};
BPF_HASH(threads, u64, struct tstate, THREADS_MAX);
BPF_HASH(pending, u32, struct pend, PROCS_MAX);
BPF_ARRAY(drops, u64, DROP_REASONS);
BPF_RINGBUF_OUTPUT(events, RINGBUF_PAGES);

static __always_inline void drop(u32 reason) {
    u64 *v = drops.lookup(&reason);
    if (v)
        __sync_fetch_and_add(v, 1);
}

static __always_inline void new_key(u32 tgid, u16 fam, u16 sub, u64 id) {
    struct event *e = events.ringbuf_reserve(sizeof(struct event));
    if (!e) {
        drop(DROP_EVENTS_FULL);
        return;
    }
    e->type = EV_NEW_KEY;
    e->tgid = tgid;
    e->fam = fam;
    e->sub = sub;
    e->pad = 0;
    e->id = id;
    e->target = 0;
    bpf_get_current_comm(&e->comm, sizeof(e->comm));
    e->name[0] = 0;
    events.ringbuf_submit(e, 0);
}

static __always_inline void add(u32 tgid, u16 fam, u16 sub, u64 id, u32 slot, u64 n) {
    struct skey k = {};
    k.tgid = tgid;
    k.fam = fam;
    k.sub = sub;
    k.id = id;
    k.slot = slot;
    u64 *v = stats.lookup(&k);
    if (!v) {
        u64 zero = 0;
        int err = stats.insert(&k, &zero);
        if (err == 0 && (slot == SLOT_SUM || fam == FAM_LAUNCH))
            new_key(tgid, fam, sub, id);
        v = stats.lookup(&k);
        if (!v) {
            drop(DROP_STATS_FULL);
            return;
        }
    }
    __sync_fetch_and_add(v, n);
}

// Smallest s with v <= 2^s: bucket s holds (2^(s-1), 2^s], so "le" bounds are powers of 2.
static __always_inline u32 slot_of(u64 v) {
    if (v <= 1)
        return 0;
    v -= 1;
    u32 r = 0;
    if (v >> 32) { v >>= 32; r += 32; }
    if (v >> 16) { v >>= 16; r += 16; }
    if (v >> 8) { v >>= 8; r += 8; }
    if (v >> 4) { v >>= 4; r += 4; }
    if (v >> 2) { v >>= 2; r += 2; }
    if (v >> 1) { r += 1; }
    return r + 1;
}

static __always_inline void hist(u32 tgid, u16 fam, u16 sub, u64 id, u64 v) {
    add(tgid, fam, sub, id, slot_of(v), 1);
    add(tgid, fam, sub, id, SLOT_SUM, v);
}

static __always_inline struct shape *shape_of(u32 tgid) {
    struct shape *s = shapes.lookup(&tgid);
    if (s)
        return s;
    u32 z = 0;
    struct shape *zero = zero_shape.lookup(&z);
    if (!zero)
        return 0;
    if (shapes.insert(&tgid, zero) == -E2BIG) {
        drop(DROP_STATS_FULL);
        return 0;
    }
    return shapes.lookup(&tgid);
}

static __always_inline void shape_add(struct shape *s, u64 grid, u64 block) {
    u32 g = slot_of(grid);
    if (g > GRID_SLOTS - 1)
        g = GRID_SLOTS - 1;
    u32 b = slot_of(block);
    if (b > BLOCK_SLOTS - 1)
        b = BLOCK_SLOTS - 1;
    __sync_fetch_and_add(&s->grid[g], 1);
    __sync_fetch_and_add(&s->block[b], 1);
    __sync_fetch_and_add(&s->grid_sum, grid);
    __sync_fetch_and_add(&s->block_sum, block);
}

// Counts a launch; returns 1 when the process has no launch waiting for a synchronise,
// so the caller should read the stream (only then: a stack read costs) and call pend().
static __always_inline int launched(u32 tgid, u16 api, u64 id, u64 grid, u64 block) {
    add(tgid, FAM_LAUNCH, api, id, 0, 1);
    struct shape *s = shape_of(tgid);
    if (!s)
        return 0;
    if (api != API_GRAPH)
        shape_add(s, grid, block);
    return s->pending == 0;
}

static __always_inline void pend(u32 tgid, u16 api, u64 id, u64 stream) {
    struct pend p = {};
    p.ts = bpf_ktime_get_ns();
    p.id = id;
    p.stream = stream;
    p.api = api;
    int err = pending.insert(&tgid, &p);
    if (err == -E2BIG)
        drop(DROP_PENDING_FULL);
    struct shape *s = shapes.lookup(&tgid);
    if (s && err != -E2BIG)
        s->pending = 1;
}

// A synchronising call returned: it covered the oldest launch not yet covered (a stream
// sync only when that launch went to the same stream or to the legacy default stream).
static __always_inline void synced(u32 tgid, u32 call, u64 stream, u64 now) {
    struct pend *p = pending.lookup(&tgid);
    if (!p)
        return;
    if ((call == SYNC_CUDA_STREAM || call == SYNC_CU_STREAM) && stream != 0 &&
        p->stream != 0 && p->stream != stream)
        return;
    u64 d = now > p->ts ? now - p->ts : 0;
    u64 id = p->id;
    u16 api = p->api;
    pending.delete(&tgid);
    struct shape *s = shapes.lookup(&tgid);
    if (s)
        s->pending = 0;
    hist(tgid, FAM_DURATION, api, id, d);
}

// --- the "inside a runtime call" marker, per thread ----------------------------------
// A thread's entry stays in the map between calls (depth 0 when idle): an in-place update
// costs less than an insert and a delete per call. User space removes the entries of
// threads that have exited. Returns 1 for the outermost call (the one to count).
static __always_inline struct tstate *thread_state(u64 pt) {
    struct tstate *t = threads.lookup(&pt);
    if (t)
        return t;
    struct tstate zero = {};
    if (threads.insert(&pt, &zero) == -E2BIG) {
        drop(DROP_THREADS_FULL);
        return 0;
    }
    return threads.lookup(&pt);
}

static __always_inline int enter(int side, u32 op, u64 arg, u64 arg2, int timed) {
    struct tstate *t = thread_state(bpf_get_current_pid_tgid());
    if (!t)
        return 1;  // counted, but the driver calls it makes may be too (a drop is counted)
    struct inflight *f = &t->side[side & 1];
    if (f->depth > 0) {
        f->depth += 1;
        return 0;
    }
    f->ts = timed ? bpf_ktime_get_ns() : 0;
    f->arg = arg;
    f->arg2 = arg2;
    f->op = op;
    f->depth = 1;
    return 1;
}

static __always_inline int rt_enter(u32 op, u64 arg, u64 arg2, int timed) {
    return enter(SIDE_RUNTIME, op, arg, arg2, timed);
}

static __always_inline int drv_enter(u32 op, u64 arg, u64 arg2, int timed) {
    return enter(SIDE_DRIVER, op, arg, arg2, timed);
}

static __always_inline int in_runtime(void) {
    u64 pt = bpf_get_current_pid_tgid();
    struct tstate *t = threads.lookup(&pt);
    return t && t->side[SIDE_RUNTIME].depth > 0;
}

static __always_inline void handle_event(u32 tgid, u32 type, u64 handle, u64 target,
                                         u64 name_ptr) {
    struct event *e = events.ringbuf_reserve(sizeof(struct event));
    if (!e) {
        drop(DROP_EVENTS_FULL);
        return;
    }
    e->type = type;
    e->tgid = tgid;
    e->fam = 0;
    e->sub = 0;
    e->pad = 0;
    e->id = handle;
    e->target = target;
    bpf_get_current_comm(&e->comm, sizeof(e->comm));
    e->name[0] = 0;
    if (name_ptr)
        bpf_probe_read_user_str(&e->name, sizeof(e->name), (void *)name_ptr);
    events.ringbuf_submit(e, 0);
}

// What a returning call finishes (shared by the runtime and the driver return probes).
static __always_inline void finish(struct pt_regs *ctx, u32 tgid, struct inflight *f,
                                   u16 api) {
    int rc = (int)PT_REGS_RC(ctx);
    u64 now = bpf_ktime_get_ns();
    u64 out = 0;
    switch (f->op) {
    case OP_ALLOC:
        if (rc == 0)
            hist(tgid, FAM_ALLOC, api, 0, f->arg);
        break;
    case OP_SYNC:
        hist(tgid, FAM_SYNC, (u16)(f->arg >> 56), 0, now > f->ts ? now - f->ts : 0);
        synced(tgid, (u32)(f->arg >> 56), f->arg2, now);
        break;
    case OP_GET_KERNEL:  // __cudaGetKernel(cudaKernel_t *out, const void *hostFun)
        if (rc == 0 && bpf_probe_read_user(&out, sizeof(out), (void *)f->arg) == 0)
            handle_event(tgid, EV_KERNEL_HOST, out, f->arg2, 0);
        break;
    case OP_GET_FUNCTION:  // cuModuleGetFunction / cuLibraryGetKernel(out, _, name)
        if (rc == 0 && bpf_probe_read_user(&out, sizeof(out), (void *)f->arg) == 0)
            handle_event(tgid, EV_HANDLE_NAME, out, 0, f->arg2);
        break;
    case OP_KERNEL_FUNCTION:  // cuKernelGetFunction(CUfunction *out, CUkernel kernel)
        if (rc == 0 && bpf_probe_read_user(&out, sizeof(out), (void *)f->arg) == 0)
            handle_event(tgid, EV_HANDLE_ALIAS, out, f->arg2, 0);
        break;
    }
}

int rt_ret(struct pt_regs *ctx) {
    u64 pt = bpf_get_current_pid_tgid();
    struct tstate *t = threads.lookup(&pt);
    if (!t)
        return 0;
    struct inflight *f = &t->side[SIDE_RUNTIME];
    if (f->depth == 0)
        return 0;
    if (f->depth > 1) {
        f->depth -= 1;
        return 0;
    }
    f->depth = 0;
    if (f->op == OP_LAUNCH || f->op == OP_COPY)
        return 0;
    struct inflight copy = *f;
    finish(ctx, pt >> 32, &copy, API_RUNTIME);
    return 0;
}

int drv_ret(struct pt_regs *ctx) {
    u64 pt = bpf_get_current_pid_tgid();
    struct tstate *t = threads.lookup(&pt);
    if (!t)
        return 0;
    struct inflight *f = &t->side[SIDE_DRIVER];
    if (f->depth == 0)
        return 0;
    if (f->depth > 1) {
        f->depth -= 1;
        return 0;
    }
    f->depth = 0;
    if (f->op == OP_LAUNCH || f->op == OP_COPY)
        return 0;
    struct inflight copy = *f;
    finish(ctx, pt >> 32, &copy, API_DRIVER);
    return 0;
}

static __always_inline u64 stack_arg(struct pt_regs *ctx, int n) {
    // At a function's first instruction the stack pointer holds the return address;
    // the n-th stack argument (n >= 1) is the n-th 8-byte slot above it.
    u64 v = 0;
    bpf_probe_read_user(&v, sizeof(v), (void *)(PT_REGS_SP(ctx) + 8 * n));
    return v;
}

static __always_inline u64 dim3_count(u64 xy, u64 z) {
    return (xy & 0xffffffff) * (xy >> 32) * (z & 0xffffffff);
}

// --- runtime ------------------------------------------------------------------------
// cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
//                  size_t sharedMem, cudaStream_t stream): a 12-byte dim3 by value is two
// INTEGER eightbytes: x|y<<32 in one register, z in the next. 7th and 8th words on the
// stack. Also cudaLaunchCooperativeKernel and the _ptsz variants.
int rt_launch(struct pt_regs *ctx) {
    if (!rt_enter(OP_LAUNCH, 0, 0, 0))
        return 0;
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 grid = dim3_count(PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx));
    u64 block = dim3_count(PT_REGS_PARM4(ctx), PT_REGS_PARM5(ctx));
    if (launched(tgid, API_RUNTIME, PT_REGS_PARM1(ctx), grid, block))
        pend(tgid, API_RUNTIME, PT_REGS_PARM1(ctx),
             stack_arg(ctx, RT_LAUNCH_STREAM_STACK_SLOT));
    return 0;
}

// cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
// cudaLaunchConfig_t and CUlaunchConfig share their first 40 bytes' layout (grid dims at
// LCFG_GRID_OFF, block dims right after, the stream at LCFG_STREAM_OFF): read in one go.
struct launch_cfg {
    u32 dims[6];
    u64 smem;
    u64 stream;
};

int rt_launch_exc(struct pt_regs *ctx) {
    if (!rt_enter(OP_LAUNCH, 0, 0, 0))
        return 0;
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct launch_cfg c = {};
    bpf_probe_read_user(&c, sizeof(c), (void *)PT_REGS_PARM1(ctx) + LCFG_GRID_OFF);
    if (launched(tgid, API_RUNTIME, PT_REGS_PARM2(ctx), (u64)c.dims[0] * c.dims[1] * c.dims[2],
                 (u64)c.dims[3] * c.dims[4] * c.dims[5]))
        pend(tgid, API_RUNTIME, PT_REGS_PARM2(ctx), c.stream);
    return 0;
}

// cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream)
int rt_graph(struct pt_regs *ctx) {
    if (!rt_enter(OP_LAUNCH, 0, 0, 0))
        return 0;
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (launched(tgid, API_GRAPH, PT_REGS_PARM1(ctx), 0, 0))
        pend(tgid, API_GRAPH, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx));
    return 0;
}

// cudaMemcpy(dst, src, size_t count, enum cudaMemcpyKind kind[, stream])
int rt_memcpy(struct pt_regs *ctx) {
    if (!rt_enter(OP_COPY, 0, 0, 0))
        return 0;
    u64 kind = PT_REGS_PARM4(ctx) & 0xffffffff;
    if (kind > MEMCPY_KIND_MAX) {
        drop(DROP_BAD_ARGUMENT);
        return 0;
    }
    hist(bpf_get_current_pid_tgid() >> 32, FAM_COPY, kind, 0, PT_REGS_PARM3(ctx));
    return 0;
}

// cudaMalloc / cudaMallocAsync / cudaMallocManaged(void **ptr, size_t size, ...):
// counted when the call returns cudaSuccess.
int rt_malloc(struct pt_regs *ctx) {
    rt_enter(OP_ALLOC, PT_REGS_PARM2(ctx), 0, 0);
    return 0;
}

int rt_sync_stream(struct pt_regs *ctx) {
    rt_enter(OP_SYNC, (u64)SYNC_CUDA_STREAM << 56, PT_REGS_PARM1(ctx), 1);
    return 0;
}

int rt_sync_device(struct pt_regs *ctx) {
    rt_enter(OP_SYNC, (u64)SYNC_CUDA_DEVICE << 56, 0, 1);
    return 0;
}

int rt_sync_event(struct pt_regs *ctx) {
    rt_enter(OP_SYNC, (u64)SYNC_CUDA_EVENT << 56, 0, 1);
    return 0;
}

// __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
int rt_get_kernel(struct pt_regs *ctx) {
    rt_enter(OP_GET_KERNEL, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 0);
    return 0;
}

// --- driver: counted only outside a runtime call of the same thread ------------------
// cuLaunchKernel(CUfunction f, unsigned gx, gy, gz, bx, by, bz, unsigned shared,
//                CUstream stream, void **params, void **extra): bz, shared, stream on
// the stack.
int drv_launch(struct pt_regs *ctx) {
    if (in_runtime())
        return 0;
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 grid = (PT_REGS_PARM2(ctx) & 0xffffffff) * (PT_REGS_PARM3(ctx) & 0xffffffff) *
               (PT_REGS_PARM4(ctx) & 0xffffffff);
    u64 block = (PT_REGS_PARM5(ctx) & 0xffffffff) * (PT_REGS_PARM6(ctx) & 0xffffffff) *
                (stack_arg(ctx, CU_LAUNCH_BZ_STACK_SLOT) & 0xffffffff);
    if (launched(tgid, API_DRIVER, PT_REGS_PARM1(ctx), grid, block))
        pend(tgid, API_DRIVER, PT_REGS_PARM1(ctx), stack_arg(ctx, CU_LAUNCH_STREAM_STACK_SLOT));
    return 0;
}

// cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
int drv_launch_ex(struct pt_regs *ctx) {
    if (in_runtime())
        return 0;
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct launch_cfg c = {};
    bpf_probe_read_user(&c, sizeof(c), (void *)PT_REGS_PARM1(ctx) + CULCFG_GRID_OFF);
    if (launched(tgid, API_DRIVER, PT_REGS_PARM2(ctx), (u64)c.dims[0] * c.dims[1] * c.dims[2],
                 (u64)c.dims[3] * c.dims[4] * c.dims[5]))
        pend(tgid, API_DRIVER, PT_REGS_PARM2(ctx), c.stream);
    return 0;
}

// cuMemcpy*(dst, src, size_t bytes[, stream]): the kind is in the function's name.
static __always_inline int drv_copy(struct pt_regs *ctx, u16 kind) {
    if (in_runtime())
        return 0;
    hist(bpf_get_current_pid_tgid() >> 32, FAM_COPY, kind, 0, PT_REGS_PARM3(ctx));
    return 0;
}

int drv_copy_htod(struct pt_regs *ctx) { return drv_copy(ctx, MEMCPY_HOST_TO_DEVICE); }
int drv_copy_dtoh(struct pt_regs *ctx) { return drv_copy(ctx, MEMCPY_DEVICE_TO_HOST); }
int drv_copy_dtod(struct pt_regs *ctx) { return drv_copy(ctx, MEMCPY_DEVICE_TO_DEVICE); }
int drv_copy_default(struct pt_regs *ctx) { return drv_copy(ctx, MEMCPY_DEFAULT); }

// cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
int drv_alloc(struct pt_regs *ctx) {
    if (!in_runtime())
        drv_enter(OP_ALLOC, PT_REGS_PARM2(ctx), 0, 0);
    return 0;
}

int drv_sync_stream(struct pt_regs *ctx) {
    if (!in_runtime())
        drv_enter(OP_SYNC, (u64)SYNC_CU_STREAM << 56, PT_REGS_PARM1(ctx), 1);
    return 0;
}

int drv_sync_ctx(struct pt_regs *ctx) {
    if (!in_runtime())
        drv_enter(OP_SYNC, (u64)SYNC_CU_CTX << 56, 0, 1);
    return 0;
}

// Names are wanted inside runtime calls too (the runtime loads modules lazily).
// cuModuleGetFunction(CUfunction *out, CUmodule m, const char *name),
// cuLibraryGetKernel(CUkernel *out, CUlibrary l, const char *name)
int drv_get_function(struct pt_regs *ctx) {
    drv_enter(OP_GET_FUNCTION, PT_REGS_PARM1(ctx), PT_REGS_PARM3(ctx), 0);
    return 0;
}

// cuKernelGetFunction(CUfunction *out, CUkernel kernel)
int drv_kernel_function(struct pt_regs *ctx) {
    drv_enter(OP_KERNEL_FUNCTION, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 0);
    return 0;
}

// --- processes that exec or map a file executable: scan them now ------------------
// A new library file is probed within milliseconds of being mapped, not at the next
// rescan. Tracepoint records are read at the offsets of their format files
// (TP_*_OFF, found by the loader in tracefs).
struct pevent {
    u32 type;
    u32 tgid;
};
BPF_RINGBUF_OUTPUT(procs, PROC_RINGBUF_PAGES);
BPF_HASH(mmapping, u64, u8, THREADS_MAX);

static __always_inline void proc_event(u32 type) {
    struct pevent *e = procs.ringbuf_reserve(sizeof(struct pevent));
    if (!e) {
        drop(DROP_PROC_EVENTS_FULL);
        return;
    }
    e->type = type;
    e->tgid = bpf_get_current_pid_tgid() >> 32;
    procs.ringbuf_submit(e, 0);
}

// sched:sched_process_exec: the new program and its interpreter are mapped.
int on_exec(void *ctx) {
    proc_event(EV_EXEC);
    return 0;
}

#define PROT_EXEC_BIT 0x4
#define MAP_ANONYMOUS_BIT 0x20

// syscalls:sys_enter_mmap: remember the threads mapping a file executable...
int on_mmap(void *ctx) {
    u64 prot = 0, flags = 0, fd = 0;
    bpf_probe_read_kernel(&prot, sizeof(prot), (char *)ctx + TP_MMAP_PROT_OFF);
    bpf_probe_read_kernel(&flags, sizeof(flags), (char *)ctx + TP_MMAP_FLAGS_OFF);
    bpf_probe_read_kernel(&fd, sizeof(fd), (char *)ctx + TP_MMAP_FD_OFF);
    if (!(prot & PROT_EXEC_BIT) || (flags & MAP_ANONYMOUS_BIT) || (int)fd < 0)
        return 0;
    u64 pt = bpf_get_current_pid_tgid();
    u8 one = 1;
    mmapping.update(&pt, &one);
    return 0;
}

// ...syscalls:sys_exit_mmap: and tell user space once the mapping exists.
int on_mmapped(void *ctx) {
    u64 pt = bpf_get_current_pid_tgid();
    if (!mmapping.lookup(&pt))
        return 0;
    mmapping.delete(&pt);
    s64 ret = 0;
    bpf_probe_read_kernel(&ret, sizeof(ret), (char *)ctx + TP_MMAP_RET_OFF);
    if (ret < 0 && ret > -4096)
        return 0;
    proc_event(EV_MAPPED);
    return 0;
}
