// CUDA activity from uprobes on libcudart / libcuda. Everything is aggregated here, in
// maps that are never cleared: user space reads them at scrape. Only rare events (first
// sight of a key, a handle-to-name mapping) go through the ring buffer.
//
// Constants in capitals without a definition here (STATS_MAX, FAM_*, ...) are defined by
// gpu_exporter/model/ebpf_abi.py when the program is compiled, so the Python side and this
// file cannot disagree.
//
// x86-64 only: argument registers (PT_REGS_PARM*), stack arguments and the return address
// on the stack are that CPU's; gpu_exporter/sources/ebpf/arch.py lists each assumption
// and keeps the collector unavailable on any other CPU.
//
// One entry program per kind of call (a launch, a copy given by count and kind, ...) is
// attached to every entry point of that kind; the BPF cookie of each probe says which
// entry point it is (COOKIE_CALL), a constant of the call (COOKIE_ARG: a copy's kind, a
// synchronise's name) and whether it is a runtime or a driver call (COOKIE_DRIVER). The
// entry program keeps the arguments in the thread's frame; one return program, on every
// entry point, counts the call when it returned cudaSuccess / CUDA_SUCCESS and counts an
// error otherwise.
#include <uapi/linux/ptrace.h>

struct skey {
    u32 tgid;
    u16 fam;
    u16 sub;
    u64 id;
    u32 slot;
    u32 dev;  // the calling thread's current device: DEV_* or ordinal + 1
};

// What a thread is inside of: the outermost probed runtime call (side 0) and driver
// call (side 1), with their arguments.
struct frame {
    u64 a, b, c, d;  // the call's arguments, as its entry program keeps them
    u64 ts;
    u64 sp;  // the stack pointer at entry: the call's return finds it one word lower
    u32 cookie;  // the probe's, or (rt_launch, drv_launch) its side alone: see finish()
    u8 op;
    u8 depth;  // probed calls of this side the thread is inside of (nested: not counted)
    u8 counted;  // the call to count: for a driver call, one made outside the runtime
    u8 pad;
};

struct tstate {
    struct frame side[2];
    u32 dev;  // the current device: DEV_NONE (never chosen), DEV_UNKNOWN, or ordinal + 1
    // A completion point this thread's call just observed, for close_groups (CLOSE_*):
    // the groups it completes are closed there, in a tail call.
    u8 close_mode;
    u8 close_completion;
    u8 close_i;  // CLOSE_DEVICE: the next place of the process's stream list
    u8 pad;
    u32 close_dev;
    u64 close_done;
    u64 close_key;  // the stream key
    u64 close_serial;  // CLOSE_EVENT: the record's serial
    u8 pushed_dev[CTX_STACK];  // the devices of the contexts pushed over, oldest first
    u32 pushed;  // contexts pushed (cuCtxPushCurrent) and not popped
    u32 tgid;  // the thread's process, kept so that a return needs no helper call for it
    u32 slot;  // the process's slot in `shapes`, + 1 (0: not looked up yet)
    // The stream of this thread's last launch (launch_hint()) and its process's `epoch`
    // + 1 when that launch joined the stream's open group (0: no hint).
    u64 hint_stream;
    u64 hint_epoch;
    u64 key;  // in `fast_threads`: the owning thread's key (regs_key), 0 while free
};

// The device of each context a probed call made (cuDevicePrimaryCtxRetain, cuCtxCreate):
// a thread that makes it current (cuCtxSetCurrent, cuCtxPushCurrent) is on that device.
struct ctxkey {
    u32 tgid;
    u32 pad;
    u64 ctx;
};
BPF_HASH(contexts, struct ctxkey, u32, CONTEXTS_MAX);

// The head of every record on `events`: of a struct event, or a CUDA graph's event alone
// (abi.EVENT_HEAD, abi.GRAPH_EVENT).
struct ehead {
    u32 type;
    u32 tgid;
    u16 fam;  // a graph event's: the api
    u16 sub;
    u32 pad;
    u64 id;
    u64 target;
};

struct event {
    struct ehead head;
    char comm[16];
    char name[NAME_LEN];
};

// A launch counter kept in the process's `shape` value: `tag` is the launch key (kernel
// id | api << 48 | device << 56), claimed once and never given up, so a launch of one of
// the process's first kernels costs no lookup of its own. Other launches go to `stats`.
struct lslot {
    u64 tag;
    u64 n;
};

// Per process, in one value so a launch costs one lookup here: launch shapes (log2
// slots of blocks per grid and threads per block; the last slot of each holds
// everything above the last bucket bound) and launch counters.
struct shape {
    u64 grid[GRID_SLOTS];
    u64 block[BLOCK_SLOTS];
    u64 grid_sum;
    u64 block_sum;
    // Bumped each time one of the process's open groups may have been emptied (sealed,
    // closed, its stream's state freed): a thread whose last launch joined an open group
    // since knows that group still has its first launch (launch_hint()).
    u64 epoch;
    u32 tgid;  // the process holding the slot; 0 while the slot is free
    u32 pad;
    struct lslot launches[LAUNCH_SLOTS];
};

BPF_HASH(stats, struct skey, u64, STATS_MAX);
// The shape values live in an array, by slot: a thread keeps its process's slot, so a
// launch finds the value by index (a hash lookup by process id cost 0.05 us of a driver
// launch's 0.26 us on the CI VM). A process is given a slot at its first launch: one
// given back by user space when a process exited (zeroed), else the next never used.
BPF_ARRAY(shapes, struct shape, PROCS_MAX);
BPF_HASH(proc_slots, u32, u32, PROCS_MAX);  // process -> its slot in `shapes`
BPF_QUEUE(free_slots, u32, PROCS_MAX);
BPF_ARRAY(slots_used, u64, 1);  // slots ever given out, free or not
// A thread's state is in `fast_threads`, at the index its key hashes to, or (when another
// thread holds that index) in task-local storage. The key is the address of the thread's
// saved user registers, which is the probe's context: unique to the thread while it lives,
// and known without a helper call. A task-local storage lookup costs 45 ns on the CI VM
// (two helper calls), this one a few; a hash lookup by thread id costs more still. The
// thread's exit frees its index (on_thread_exit), as task-local storage is freed.
BPF_ARRAY(fast_threads, struct tstate, FAST_THREADS);
BPF_TASK_STORAGE(threads, struct tstate);
BPF_ARRAY(drops, u64, DROP_REASONS);
BPF_RINGBUF_OUTPUT(events, RINGBUF_PAGES);

// --- CUDA graphs ------------------------------------------------------------------------
// A stream or an event of a process.
struct gkey {
    u32 tgid;
    u32 pad;
    u64 handle;
};
#define CAPTURE_ORIGIN (1ULL << 63)  // in `captures`: the stream the capture began on
BPF_HASH(captures, struct gkey, u64, CAPTURES_MAX);  // stream -> capture id (| ORIGIN)
BPF_HASH(capture_events, struct gkey, u64, CAPTURES_MAX);  // event recorded in a capture
BPF_HASH(live_captures, u64, u32, CAPTURES_MAX);  // capture id -> tgid, while it is open
BPF_HASH(execs, struct gkey, u64, EXECS_MAX);  // executable graph -> its serial
// [0] captures begun and not ended; [1] of those, the ones whose process exited (written
// by user space only); [2] the last serial given (captures, executable graphs).
BPF_ARRAY(graph_state, u64, 3);
// A graph's events are on the `events` ring buffer (a struct ehead alone), after the
// names they may need (one buffer: one order).

#define COOKIE_CALL(c) ((c) & 0xffff)
#define COOKIE_ARG(c) (((c) >> 16) & 0xff)
#define COOKIE_DRIVER(c) (((c) >> 24) & 1)
#define COOKIE_DRIVER_BIT (1u << 24)
#define COOKIE_POS(c) (((c) >> 25) & 0x1f)
// A HIP entry point (libamdhip64): its api is the CUDA one's + API_HIP (issue #23).
#define COOKIE_HIP(c) (((c) >> COOKIE_HIP_SHIFT) & 1)
#define COOKIE_HIP_BIT (1u << COOKIE_HIP_SHIFT)
#define COOKIE_PTSZ_BIT (1u << COOKIE_PTSZ_SHIFT)

static __always_inline void drop(u32 reason) {
    u64 *v = drops.lookup(&reason);
    if (v)
        __sync_fetch_and_add(v, 1);
}

// A record of `size` bytes reserved on `events`, its head filled in; 0 when the buffer is
// full (dropped for reason `full`).
static __always_inline struct ehead *event_start(u32 size, u32 full, u32 type, u32 tgid,
                                                 u16 fam, u16 sub, u64 id, u64 target) {
    struct ehead *e = events.ringbuf_reserve(size);
    if (!e) {
        drop(full);
        return 0;
    }
    e->type = type;
    e->tgid = tgid;
    e->fam = fam;
    e->sub = sub;
    e->pad = 0;
    e->id = id;
    e->target = target;
    return e;
}

// `pad` carries the graph events lost so far (low 32 bits), as this call sees them: the
// reader learns of a loss at the first record after it, in order, before it reads on (a
// graph's instantiation after one of its nodes was lost is read as unknown, not short).
static __always_inline void graph_event(u32 tgid, u32 type, u16 api, u64 id, u64 target) {
    struct ehead *e = event_start(sizeof(struct ehead), DROP_GRAPH_EVENTS_FULL, type, tgid,
                                  api, 0, id, target);
    if (!e)
        return;
    u32 reason = DROP_GRAPH_EVENTS_FULL;
    u64 *lost = drops.lookup(&reason);
    e->pad = lost ? (u32)*lost : 0;
    events.ringbuf_submit(e, 0);
}

// A struct event: the process's command and, at `name_ptr`, a name or (for
// EV_DEVICE_UUID) the 16 bytes of a UUID. Without one (0) the record ends after the
// command: 56 bytes in the buffer instead of 312 (new keys, one per executable graph
// launched, fill it 5 times slower).
static __always_inline void send_event(u32 tgid, u32 type, u16 fam, u16 sub, u64 id,
                                       u64 target, u64 name_ptr) {
    if (!name_ptr) {
        struct event *s = (struct event *)event_start(
            offsetof(struct event, name), DROP_EVENTS_FULL, type, tgid, fam, sub, id, target);
        if (s) {
            bpf_get_current_comm(&s->comm, sizeof(s->comm));
            events.ringbuf_submit(s, 0);
        }
        return;
    }
    struct event *e = (struct event *)event_start(sizeof(struct event), DROP_EVENTS_FULL,
                                                  type, tgid, fam, sub, id, target);
    if (!e)
        return;
    bpf_get_current_comm(&e->comm, sizeof(e->comm));
    e->name[0] = 0;
    if (type == EV_DEVICE_UUID)  // 16 bytes, not a string
        bpf_probe_read_user(&e->name, 16, (void *)name_ptr);
    else if (name_ptr)
        bpf_probe_read_user_str(&e->name, sizeof(e->name), (void *)name_ptr);
    events.ringbuf_submit(e, 0);
}

// Whether any process has a stream under capture: until one has, a launch neither reads
// its stream for it nor looks it up (two array loads).
static __always_inline int captures_open(void) {
    u32 begun = 0, abandoned = 1;
    u64 *b = graph_state.lookup(&begun);
    u64 *a = graph_state.lookup(&abandoned);
    return b && a && *b != *a;
}

static __always_inline void captures_add(s64 n) {
    u32 begun = 0;
    u64 *b = graph_state.lookup(&begun);
    if (b)
        __sync_fetch_and_add(b, n);
}

static __always_inline u64 next_serial(void) {
    u32 k = 2;
    u64 *v = graph_state.lookup(&k);
    return v ? __sync_fetch_and_add(v, 1) + 1 : 0;
}

// The capture `stream` of process `tgid` is part of, or 0.
static __always_inline u64 capture_of(u32 tgid, u64 stream) {
    if (!captures_open())
        return 0;
    struct gkey k = {};
    k.tgid = tgid;
    k.handle = stream;
    u64 *v = captures.lookup(&k);
    if (!v)
        return 0;
    u64 c = *v & ~CAPTURE_ORIGIN;
    if (!live_captures.lookup(&c)) {  // a stream left over from a capture that ended
        captures.delete(&k);
        return 0;
    }
    return c;
}

static __always_inline void new_key(u32 tgid, u16 fam, u16 sub, u64 id) {
    send_event(tgid, EV_NEW_KEY, fam, sub, id, 0, 0);
}

static __always_inline void add(u32 tgid, u16 fam, u16 sub, u64 id, u32 slot, u32 dev,
                                u64 n) {
    struct skey k = {};
    k.tgid = tgid;
    k.fam = fam;
    k.sub = sub;
    k.id = id;
    k.slot = slot;
    k.dev = dev;
    u64 *v = stats.lookup(&k);
    if (!v) {
        u64 zero = 0;
        int err = stats.insert(&k, &zero);
        if (err == 0 && (slot == SLOT_SUM || fam == FAM_LAUNCH || fam == FAM_ERROR))
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
// SLOT_OF is written out from gpu_exporter/model/ebpf_abi.py's SLOT_BOUNDS, which Python's
// slot_of searches too: one definition for both sides.
static __always_inline u32 slot_of(u64 v) {
    return SLOT_OF(v);
}

static __always_inline void hist(u32 tgid, u16 fam, u16 sub, u64 id, u32 dev, u64 v) {
    add(tgid, fam, sub, id, slot_of(v), dev, 1);
    add(tgid, fam, sub, id, SLOT_SUM, dev, v);
}

// A slot for a process that has none: given out and named in `proc_slots`, or 0 (full).
static __always_inline u32 *new_slot(u32 tgid, u32 *slot) {
    if (free_slots.pop(slot) != 0) {
        u32 z = 0;
        u64 *used = slots_used.lookup(&z);
        if (!used)
            return 0;
        u64 n = __sync_fetch_and_add(used, 1);
        if (n >= PROCS_MAX) {
            drop(DROP_STATS_FULL);
            return 0;
        }
        *slot = n;
    }
    struct shape *s = shapes.lookup(slot);
    if (!s)
        return 0;
    s->tgid = tgid;
    if (proc_slots.insert(&tgid, slot) == 0)
        return slot;
    // Another thread of the process gave it one first: this one goes back.
    s->tgid = 0;
    free_slots.push(slot, 0);
    return proc_slots.lookup(&tgid);
}

// The shape value of the thread's process (given a slot now when `create`), or 0.
static __always_inline struct shape *shape_of(struct tstate *t, u32 tgid, int create) {
    u32 slot = t->slot - 1;
    struct shape *s;
    if (t->slot) {
        s = shapes.lookup(&slot);
        // Not its process's any more: the slot was given back when a process of the
        // same id exited (the id reused since).
        if (s && s->tgid == tgid)
            return s;
        t->slot = 0;
    }
    u32 *found = proc_slots.lookup(&tgid);
    if (!found && create)
        found = new_slot(tgid, &slot);
    if (!found)
        return 0;
    slot = *found;
    s = shapes.lookup(&slot);
    if (!s || s->tgid != tgid)
        return 0;
    t->slot = slot + 1;
    return s;
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

// --- completion points: kernel durations bounded per stream (issue #27) ---------------
// Every launch joins its stream's open group (launches since the stream's last event
// record). A record seals the open group: it is complete once that record is (or a
// later one on the stream). A group is closed, once, by the first completion point seen
// to cover it: the first successful cudaEventQuery / return of cudaEventSynchronize of a
// record after it, or a successful cudaStreamQuery of its stream (completion="event"); a
// stream, device or context synchronise (completion="sync_fallback"). Each launch in the
// group is then one sample of U = done - max(the group's first launch entry, the latest
// not-ready answer of a record before the group): a bound on each of its kernels, never
// below one's execution time (docs/ebpf.md, "Kernel durations"). State is per process
// and stream; threads of one process racing on one stream may move a launch to the next
// group (its bound is then taken from that group's first launch).
struct group {
    u64 first;  // entry time of its first launch; 0: empty
    u64 lower;  // the latest not-ready answer of a record before its launches
    u64 after;  // the serial of the record its launches came after
    u64 tag[GROUP_KERNELS];  // kernel id | (api + 1) << 48; 0: free
    u64 n[GROUP_KERNELS];
    u64 other;  // launches of kernels beyond GROUP_KERNELS (reported as "other")
};

struct sstate {
    struct group open;  // launched since the stream's last record
    // Launched before it, not known complete: one group per record, the newest taking
    // the next records' groups too when all are in use (complete with the last).
    struct group sealed[SEALED];
    u64 sealed_at[SEALED];  // the serial of the record that sealed each last
    // The process's last serial when this state was made: a record or wait of a serial
    // at or below it was made on an earlier stream of the same handle (one destroyed,
    // its handle given to a new stream), and bounds nothing here.
    u64 born;
    u32 dev;
    u32 pad;
};

struct estate {
    u64 stream;  // the stream key of its last record
    u64 serial;  // that record's serial (per process)
    // The last stream that waited on it (cudaStreamWaitEvent), and the serial of that
    // wait on it: what that stream launched after the wait ran after the event.
    u64 waiter;
    u64 waiter_serial;
    u64 wait_ts;  // entry time of the first wait on it not yet bounded (0: none)
    // When the span from the stream's record before it (serial `prev`) to it holds one
    // launch: that launch's tag (cudaEventElapsedTime of the two is that kernel's time).
    u64 single;
    u64 prev;
};

// A process's streams with a state (0: a free place) and its records' serials. A device
// synchronise closes the groups of every stream listed, and frees them.
struct plist {
    u64 serial;
    u64 stream[PROC_STREAMS];
};

BPF_HASH(streams, struct gkey, struct sstate, STREAMS_MAX);
BPF_HASH(cuda_events, struct gkey, struct estate, CUDA_EVENTS_MAX);
BPF_HASH(proc_streams, u32, struct plist, PROCS_MAX);
BPF_ARRAY(zero_stream, struct sstate, 1);  // never written: a new state's value

#define STREAM_KEY_LEGACY 1
// A destroyed stream's state, kept (handle | this) until a device synchronise: see
// stream_retired. Handles are user addresses, below 2^47.
#define STREAM_KEY_RETIRED (1ULL << 63)

// What a stream handle names: the legacy default stream (NULL, cudaStreamLegacy), the
// calling thread's default stream (cudaStreamPerThread, or NULL in a _ptsz call), or a
// created stream.
static __always_inline u64 stream_key(u64 stream, u32 cookie) {
    if (stream == STREAM_PER_THREAD || (stream == 0 && (cookie & COOKIE_PTSZ_BIT)))
        return PER_THREAD_KEY | (u32)bpf_get_current_pid_tgid();
    if (stream == 0 || stream == STREAM_LEGACY)
        return STREAM_KEY_LEGACY;
    return stream;
}

static __always_inline struct sstate *stream_state(u32 tgid, u64 skey, u32 dev, int create) {
    struct gkey k = {};
    k.tgid = tgid;
    k.handle = skey;
    struct sstate *s = streams.lookup(&k);
    if (s || !create)
        return s;
    struct plist *pl = proc_streams.lookup(&tgid);
    if (!pl) {
        u32 z0 = 0;
        struct sstate *zs = zero_stream.lookup(&z0);
        if (!zs)
            return 0;
        // A struct plist is smaller than a struct sstate: its zeroed bytes serve.
        proc_streams.insert(&tgid, (struct plist *)zs);
        pl = proc_streams.lookup(&tgid);
        if (!pl) {
            drop(DROP_PENDING_FULL);
            return 0;
        }
    }
    u32 i;
    for (i = 0; i < PROC_STREAMS; i++) {
        if (pl->stream[i] == 0 && __sync_val_compare_and_swap(&pl->stream[i], 0, skey) == 0)
            break;
    }
    if (i >= PROC_STREAMS) {
        drop(DROP_PENDING_FULL);
        return 0;
    }
    u32 z = 0;
    struct sstate *zero = zero_stream.lookup(&z);
    if (!zero)
        return 0;
    streams.insert(&k, zero);  // (may exist: another thread of the process made it)
    s = streams.lookup(&k);
    if (!s) {
        pl->stream[i] = 0;
        drop(DROP_PENDING_FULL);
        return 0;
    }
    s->dev = dev;
    s->born = pl->serial;
    return s;
}

// `n` launches of kernel `tag` join group `g`.
static __always_inline void group_add(struct group *g, u64 tag, u64 n) {
    for (u32 i = 0; i < GROUP_KERNELS; i++) {
        u64 held = g->tag[i];
        if (held == 0)
            held = __sync_val_compare_and_swap(&g->tag[i], 0, tag) == 0 ? tag : g->tag[i];
        if (held == tag) {
            __sync_fetch_and_add(&g->n[i], n);
            return;
        }
    }
    __sync_fetch_and_add(&g->other, n);
}

// --- the launch hint: a launch after the first of its group takes no clock read ---------
// Only a group's first launch needs its entry time (the group's bound starts there). A
// thread remembers the stream of its last launch and the process's `epoch` when that
// launch joined the stream's open group; every place that may empty an open group (a
// record or a wait sealing it, a completion point closing it, a stream's state freed)
// bumps the epoch after doing so. While both still match, the group has its first launch
// and the next launch on that stream skips bpf_ktime_get_ns (a helper call, about 20 ns
// of a driver launch's programs on the CI VM). Names of one stream that differ (NULL and
// cudaStreamLegacy) only cost the clock read.
static __always_inline u64 hint_key(u64 stream, u32 cookie) {
    return stream == 0 && (cookie & COOKIE_PTSZ_BIT) ? STREAM_PER_THREAD : stream;
}

// Whether a launch on `stream` can go without its entry time (launch entry programs).
static __always_inline int launch_hinted(struct tstate *t, u64 stream, u32 cookie) {
    if (!t->hint_epoch || t->hint_stream != hint_key(stream, cookie) || !t->slot)
        return 0;
    u32 slot = t->slot - 1;
    struct shape *s = shapes.lookup(&slot);
    return s && s->tgid == t->tgid && *(volatile u64 *)&s->epoch + 1 == t->hint_epoch;
}

// One of the process's open groups may have been emptied: the threads' hints are void.
static __always_inline void open_emptied(struct tstate *t, u32 tgid) {
    struct shape *s = shape_of(t, tgid, 0);
    if (s)
        __sync_fetch_and_add(&s->epoch, 1);
}

// A launch returned success: it joins its stream's open group (`sh`: its process's
// shape value, 0 when it has none: no hint then).
static __always_inline void group_launch(struct tstate *t, u32 tgid, u16 api, u64 id,
                                         struct frame *f, u32 dev, struct shape *sh) {
    struct sstate *s = stream_state(tgid, stream_key(f->d, f->cookie), dev, 1);
    if (!s) {
        t->hint_epoch = 0;
        return;
    }
    // The epoch read before the group's first (volatile: in this order): a group emptied
    // after this read bumps the epoch past it, which voids the hint taken here.
    u64 epoch = sh ? *(volatile u64 *)&sh->epoch : 0;
    if (*(volatile u64 *)&s->open.first == 0) {
        // No entry time (f->ts 0): the hint held at entry, and another thread's completion
        // point emptied the group since; the return's time then (docs/ebpf.md: the race of
        // threads on one stream, in which a bound may start after its kernel's launch).
        u64 ts = f->ts ? f->ts : bpf_ktime_get_ns();
        __sync_val_compare_and_swap(&s->open.first, 0, ts);
    }
    group_add(&s->open, (id & DURATION_OTHER_ID) | (u64)(api + 1) << 48, 1);
    t->hint_stream = hint_key(f->d, f->cookie);
    t->hint_epoch = sh ? epoch + 1 : 0;
}

// A group closed: its kernels' launch counts and its bound, on the `events` ring buffer
// (EV_DURATIONS), for user space to count in `stats` (durations.py). Counting here would
// cost the verifier too many paths (up to GROUP_KERNELS + 1 histograms per close); a
// group closes once per completion point, not per launch.
struct durations_event {
    struct ehead head;  // fam: completion; pad: device; id: the bound in ns
    u64 tag[GROUP_KERNELS];
    u64 n[GROUP_KERNELS];
    u64 other;
};

// Group `g` is complete at `done`: each of its launches one sample of its bound.
static __always_inline void group_close(u32 tgid, struct group *g, u32 dev, u64 done,
                                        u32 completion) {
    u64 first = g->first;
    if (!first || __sync_val_compare_and_swap(&g->first, first, 0) != first)
        return;  // empty, or closed by another thread
    u64 lo = g->lower > first ? g->lower : first;
    u64 d = done > lo ? done - lo : 0;
    g->lower = 0;
    struct durations_event *e = events.ringbuf_reserve(sizeof(struct durations_event));
    for (u32 i = 0; i < GROUP_KERNELS; i++) {
        u64 tag = g->tag[i];
        u64 n = __sync_fetch_and_and(&g->n[i], 0);
        g->tag[i] = 0;
        if (e) {
            e->tag[i] = tag;
            e->n[i] = n;
        }
    }
    u64 other = __sync_fetch_and_and(&g->other, 0);
    if (!e) {
        drop(DROP_EVENTS_FULL);
        return;
    }
    e->other = other;
    e->head.type = EV_DURATIONS;
    e->head.tgid = tgid;
    e->head.fam = completion;
    e->head.sub = 0;
    e->head.pad = dev;
    e->head.id = d;
    e->head.target = 0;
    events.ringbuf_submit(e, 0);
}

// `from`'s launches are `into`'s too (a record sealing more work before one not yet known
// complete: both complete with the later record).
static __always_inline void group_merge(struct group *into, struct group *from) {
    u64 first = from->first;
    if (!first)
        return;
    if (!into->first) {  // moved whole: its lower bound and record with it
        *into = *from;
        __builtin_memset(from, 0, sizeof(*from));
        return;
    }
    if (first < into->first)
        into->first = first;
    for (u32 i = 0; i < GROUP_KERNELS; i++) {
        u64 tag = from->tag[i];
        u64 n = from->n[i];
        if (tag && n)
            group_add(into, tag, n);
    }
    if (from->other)
        __sync_fetch_and_add(&into->other, from->other);
    __builtin_memset(from, 0, sizeof(*from));
}

static __always_inline void raise_lower(struct group *g, u64 t) {
    if (g->first && g->lower < t)
        g->lower = t;
}

// A boundary on stream state `s` (a record, a wait): its open group sealed, and what is
// launched after it comes after `serial`. (The caller's call then bumps the process's
// epoch: open_emptied, in finish(), which has the thread's state.)
static __always_inline void seal(struct sstate *s, u64 serial) {
    if (s->open.first) {
        u32 into = SEALED, newest = 0;
        u64 newest_at = 0;
        for (u32 i = 0; i < SEALED; i++) {
            if (!s->sealed[i].first) {
                if (into == SEALED)
                    into = i;
            } else if (s->sealed_at[i] >= newest_at) {
                newest_at = s->sealed_at[i];
                newest = i;
            }
        }
        if (into >= SEALED)
            into = newest < SEALED ? newest : 0;
        if (into < SEALED) {
            group_merge(&s->sealed[into], &s->open);
            s->sealed_at[into] = serial;
        }
    }
    s->open.after = serial;
}

// cudaEventRecord(event, stream) and the like returned success.
static __always_inline void event_recorded(u32 tgid, u64 event, u64 stream, u32 cookie,
                                           u32 dev) {
    struct gkey ek = {};
    ek.tgid = tgid;
    ek.handle = event;
    u64 skey = stream_key(stream, cookie);
    // (made when the stream has none: the record is where a timed span starts)
    struct sstate *s = stream_state(tgid, skey, dev, 1);
    struct plist *pl = proc_streams.lookup(&tgid);
    if (!s || !pl) {  // not kept (counted): the event's old state is not its own now
        cuda_events.delete(&ek);
        return;
    }
    u64 serial = __sync_fetch_and_add(&pl->serial, 1) + 1;
    struct estate e = {};
    // One launch since the record before it (and no wait between): a one-kernel span.
    if (s->open.first && s->open.after && !s->open.other) {
        u64 n = 0, tag = 0;
        for (u32 i = 0; i < GROUP_KERNELS; i++) {
            n += s->open.n[i];
            if (s->open.n[i])
                tag = s->open.tag[i];
        }
        if (n == 1) {
            e.single = tag;
            e.prev = s->open.after;
        }
    }
    seal(s, serial);
    e.stream = skey;
    e.serial = serial;
    if (cuda_events.update(&ek, &e) != 0)
        drop(DROP_EVENT_MAP_FULL);
}

// cudaStreamWaitEvent(stream, event, flags) and the like returned success: an edge from
// the event's stream to `stream`. What `stream` launches after it runs after the event
// (the event's not-ready answers bound its start), not what it launched before.
static __always_inline void stream_waited(u32 tgid, u64 stream, u64 event, u32 cookie,
                                          u32 dev, u64 ts) {
    struct gkey ek = {};
    ek.tgid = tgid;
    ek.handle = event;
    struct estate *e = cuda_events.lookup(&ek);
    if (!e)
        return;  // an event not followed: nothing bounds the wait (the bound keeps it)
    u64 skey = stream_key(stream, cookie);
    struct sstate *s = stream_state(tgid, skey, dev, 1);
    struct plist *pl = proc_streams.lookup(&tgid);
    if (!s || !pl)
        return;
    u64 serial = __sync_fetch_and_add(&pl->serial, 1) + 1;
    seal(s, serial);
    e->waiter = skey;
    e->waiter_serial = serial;
    if (!e->wait_ts)
        e->wait_ts = ts;
}

// A stream wait (EV_WAIT, counted in user space: gpu_stream_waits_total): `bound` is the
// upper bound on the time it held its stream (from the wait call to the first completion
// seen of the event it waited on), 0 when nothing bounds it.
static __always_inline void wait_event(u32 tgid, u32 dev, u64 bound, u16 bounded) {
    struct ehead *e = event_start(sizeof(struct ehead), DROP_EVENTS_FULL, EV_WAIT, tgid,
                                  bounded, 0, bound, 0);
    if (!e)
        return;
    e->pad = dev;
    events.ringbuf_submit(e, 0);
}

// What a completion point completes is closed by close_groups, tail-called by the
// return program once the call is counted: the return program would be too large for the
// verifier with it (each close counts up to GROUP_KERNELS + 1 histograms).
#define CLOSE_EVENT 1  // the sealed group of stream close_key, if sealed by close_serial
#define CLOSE_STREAM 2  // both groups of stream close_key
#define CLOSE_DEVICE 3  // every stream of the process on device close_dev
BPF_PROG_ARRAY(tails, 1);  // [0]: close_groups (loaded and set by loader.load_tails)

static __always_inline void close_later(struct tstate *t, u8 mode, u64 key, u64 serial,
                                        u32 dev, u64 done, u32 completion) {
    t->close_mode = mode;
    t->close_key = key;
    t->close_serial = serial;
    t->close_dev = dev;
    t->close_done = done;
    t->close_completion = completion;
    t->close_i = 0;
}

// The event's record is complete at `done`: so is the sealed group, if sealed by it or
// by an earlier record on its stream.
static __always_inline void event_done(struct tstate *t, u32 tgid, u64 event, u64 done,
                                       u32 completion) {
    struct gkey k = {};
    k.tgid = tgid;
    k.handle = event;
    struct estate *e = cuda_events.lookup(&k);
    if (!e)  // never recorded, or recorded where nothing was pending
        return;
    close_later(t, CLOSE_EVENT, e->stream, e->serial, 0, done, completion);
    u64 w = e->wait_ts;
    if (w && __sync_val_compare_and_swap(&e->wait_ts, w, 0) == w)
        wait_event(tgid, t->dev, done > w ? done - w : 0, 1);
}

// What was launched on a stream after boundary `serial` started after `t`.
static __always_inline void raise_after(u32 tgid, u64 skey, u64 serial, u64 t) {
    struct gkey k = {};
    k.tgid = tgid;
    k.handle = skey;
    struct sstate *s = streams.lookup(&k);
    if (!s || serial <= s->born)  // (a boundary on the handle's earlier stream)
        return;
    for (u32 i = 0; i < SEALED; i++)
        if (s->sealed[i].after >= serial)
            raise_lower(&s->sealed[i], t);
    if (s->open.after >= serial)
        raise_lower(&s->open, t);
}

// The event's record was not complete at `t`: what was launched on its stream after it,
// and on the stream that last waited on it after that wait, started after `t`.
static __always_inline void event_not_ready(u32 tgid, u64 event, u64 t) {
    struct gkey k = {};
    k.tgid = tgid;
    k.handle = event;
    struct estate *e = cuda_events.lookup(&k);
    if (!e)
        return;
    u64 waiter = e->waiter, waiter_serial = e->waiter_serial;
    raise_after(tgid, e->stream, e->serial, t);
    if (waiter)
        raise_after(tgid, waiter, waiter_serial, t);
}

// cudaEventElapsedTime(ms, start, end) succeeded: when `end` was recorded right after one
// launch that followed `start`'s record on the same stream, the time is that kernel's
// (EV_ELAPSED; the float's bits go to user space as they are).
static __always_inline void elapsed(u32 tgid, u32 dev, u64 ms_ptr, u64 start, u64 end) {
    struct gkey k = {};
    k.tgid = tgid;
    k.handle = end;
    struct estate *e = cuda_events.lookup(&k);
    if (!e || !e->single)
        return;
    u64 single = e->single, prev = e->prev, stream = e->stream;
    k.handle = start;
    struct estate *s = cuda_events.lookup(&k);
    if (!s || s->serial != prev || s->stream != stream)
        return;
    u32 bits = 0;
    bpf_probe_read_user(&bits, sizeof(bits), (void *)ms_ptr);
    struct ehead *h = event_start(sizeof(struct ehead), DROP_EVENTS_FULL, EV_ELAPSED, tgid,
                                  (u16)((single >> 48) - 1), 0, single & DURATION_OTHER_ID,
                                  bits);
    if (!h)
        return;
    h->pad = dev;
    events.ringbuf_submit(h, 0);
}

// cudaStreamDestroy(stream) / cuStreamDestroy_v2 returned success. The stream's work runs
// on (a device synchronise still waits for it), and a stream created later may be given
// the same handle: that one must not join the destroyed one's groups, nor be bounded by
// its records. The state moves to a key of its own (handle | STREAM_KEY_RETIRED), its
// place in the process's stream list with it, where only a device or context synchronise
// finds and closes it (sync_fallback); the handle starts afresh. Events recorded on the
// destroyed stream bound nothing any more (a looser bound, never a lower one). A second
// destroy of the handle while the first's state waits: the second's launches get no
// sample (pending_map_full).
static __always_inline void stream_retired(u32 tgid, u64 stream) {
    if (stream == 0 || stream == STREAM_LEGACY || stream == STREAM_PER_THREAD ||
        (stream & (STREAM_KEY_RETIRED | PER_THREAD_KEY)))
        return;  // not a created stream's handle (a destroy of these fails anyway)
    struct gkey k = {};
    k.tgid = tgid;
    k.handle = stream;
    struct sstate *s = streams.lookup(&k);
    if (!s)
        return;
    u64 pending = s->open.first;
    for (u32 i = 0; i < SEALED; i++)
        pending |= s->sealed[i].first;
    u64 to = 0;
    if (pending) {
        struct gkey rk = k;
        rk.handle = stream | STREAM_KEY_RETIRED;
        if (streams.insert(&rk, s) == 0)
            to = rk.handle;
        else
            drop(DROP_PENDING_FULL);
    }
    streams.delete(&k);
    struct plist *pl = proc_streams.lookup(&tgid);
    if (!pl)
        return;
    for (u32 i = 0; i < PROC_STREAMS; i++)
        if (pl->stream[i] == stream)
            pl->stream[i] = to;
}

static __always_inline void event_forget(u32 tgid, u64 event) {
    struct gkey k = {};
    k.tgid = tgid;
    k.handle = event;
    cuda_events.delete(&k);
}

// A synchronising call returned at `now`.
static __always_inline void synced(struct tstate *t, u32 tgid, u32 call, u64 arg,
                                   u32 cookie, u32 dev, u64 now) {
    if (call == SYNC_CUDA_EVENT || call == SYNC_CU_EVENT || call == SYNC_HIP_EVENT)
        event_done(t, tgid, arg, now, COMPLETION_EVENT);
    else if (call == SYNC_CUDA_STREAM || call == SYNC_CU_STREAM || call == SYNC_HIP_STREAM)
        close_later(t, CLOSE_STREAM, stream_key(arg, cookie), 0, 0, now,
                    COMPLETION_SYNC_FALLBACK);
    else
        close_later(t, CLOSE_DEVICE, 0, 0, dev, now, COMPLETION_SYNC_FALLBACK);
}
// --- end of completion points ---------------------------------------------------------

// A launch returned success: count it in its process's slots or in `stats`.
static __always_inline void count_launch(u32 tgid, struct shape *s, u16 api, u64 id,
                                         u32 dev) {
    u64 tag = id | (u64)api << 48 | (u64)dev << 56;
    if (id >> 48 == 0 && dev < 0x100 && id != 0) {
        struct lslot *l = &s->launches[(id >> 4 ^ id >> 12) & (LAUNCH_SLOTS - 1)];
        u64 held = l->tag;
        if (held == 0) {
            held = __sync_val_compare_and_swap(&l->tag, 0, tag);
            if (held == 0) {  // claimed: the key is new
                new_key(tgid, FAM_LAUNCH, api, id);
                held = tag;
            }
        }
        if (held == tag) {
            __sync_fetch_and_add(&l->n, 1);
            return;
        }
    }
    add(tgid, FAM_LAUNCH, api, id, 0, dev, 1);
}

// A launch returned success: count it, its shape, and maybe start a duration sample.
static __always_inline void launched(u32 tgid, u16 api, u64 id, u64 grid, u64 block,
                                     struct frame *f, u32 dev, struct tstate *t) {
    struct shape *s = shape_of(t, tgid, 1);
    group_launch(t, tgid, api, id, f, dev, s);
    if (!s) {
        add(tgid, FAM_LAUNCH, api, id, 0, dev, 1);
        return;
    }
    count_launch(tgid, s, api, id, dev);
    if (api != API_GRAPH && api != API_HIP_GRAPH)
        shape_add(s, grid, block);
}

// --- frames ----------------------------------------------------------------------------
// The thread's key: the address of its saved user registers (a probe's context), made a
// number by adding it atomically into a zeroed slot of this program's own stack (the
// verifier allows no arithmetic on a pointer, and keeps a pointer stored plainly a
// pointer). Not a per-CPU slot: a program preempted between its store and its load
// (preemptible kernels) would read another thread's key.
static __always_inline u64 regs_key(void *regs) {
    u64 key = 0;
    __sync_fetch_and_add(&key, (u64)regs);
    return key;
}

static __always_inline u32 fast_index(u64 key) {
    // Kernel stacks are at least 16 KiB apart: the bits above are hashed (Fibonacci).
    return ((key >> 14) * 0x9E3779B97F4A7C15ULL) >> (64 - FAST_THREADS_BITS);
}

// The calling thread's state; `create`: made (zeroed) when it has none.
static __always_inline struct tstate *thread_state(struct pt_regs *ctx, int create) {
    u64 key = regs_key(ctx);
    u32 i = fast_index(key);
    struct tstate *t = fast_threads.lookup(&i);
    if (t && key && t->key == key)
        return t;
    // Not in the table: in task-local storage, or new. A thread with state in task-local
    // storage keeps it there (it is never in both places).
    struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
    struct tstate *slow = threads.task_storage_get(task, 0, 0);
    if (slow || !create)
        return slow;
    if (t && key && t->key == 0 && __sync_val_compare_and_swap(&t->key, 0, key) == 0)
        return t;  // zeroed when its last thread exited
    return threads.task_storage_get(task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

// The frame for a call that is starting, or 0 when it is nested in a probed call of the
// same side (the outer one is what the application called). A driver call made inside a
// runtime call gets no frame (its return is then ignored: the runtime call is the one
// counted), unless it names something (`names`: a frame that is not `counted`).
// The cookie is the probe's, or for the launch programs only its side (COOKIE_DRIVER):
// a BPF cookie read costs as much as the rest of a launch's frame on the CI VM, and a
// successful launch does not need its call's name (see finish()).
static __always_inline struct frame *enter_with(struct pt_regs *ctx, u8 op, int names,
                                                struct tstate **tp, u32 cookie) {
    struct tstate *t = thread_state(ctx, 1);
    if (!t) {
        drop(DROP_THREADS_FULL);
        return 0;
    }
    if (t->tgid == 0)  // new: a thread's process does not change (exec keeps it)
        t->tgid = bpf_get_current_pid_tgid() >> 32;
    *tp = t;
    struct frame *f = COOKIE_DRIVER(cookie) ? &t->side[1] : &t->side[0];
    if (f->depth > 0) {
        if (f->depth < 255)
            f->depth += 1;
        return 0;
    }
    u8 counted = !COOKIE_DRIVER(cookie) || t->side[0].depth == 0;
    if (!counted && !names)
        return 0;
    f->depth = 1;
    f->sp = PT_REGS_SP(ctx);
    f->cookie = cookie;
    f->op = op;
    f->counted = counted;
    return f;
}

static __always_inline u32 dev_of(u64 ordinal) {
    return ordinal <= DEV_ORDINAL_MAX ? (u32)ordinal + 1 : DEV_UNKNOWN;
}

static __always_inline void push_dev(struct tstate *t) {
    u32 n = t->pushed;
    if (n < CTX_STACK)
        t->pushed_dev[n & (CTX_STACK - 1)] = (u8)t->dev;
    t->pushed = n + 1;
}

static __always_inline u64 read_u64(u64 addr) {
    u64 v = 0;
    bpf_probe_read_user(&v, sizeof(v), (void *)addr);
    return v;
}

// A launch on a stream under capture is a node of the graph being captured, not a run.
static __always_inline int captured(u32 tgid, u16 api, u64 id, u64 stream) {
    u64 c = capture_of(tgid, stream);
    if (!c)
        return 0;
    graph_event(tgid, EV_CAPTURED_NODE, api, id, c);
    return 1;
}

static __always_inline void capture_begun(u32 tgid, u64 stream, u64 to_graph) {
    u64 c = next_serial();
    struct gkey k = {};
    k.tgid = tgid;
    k.handle = stream;
    u64 v = c | CAPTURE_ORIGIN;
    if (live_captures.update(&c, &tgid) != 0) {
        drop(DROP_GRAPHS_FULL);
        return;
    }
    if (captures.update(&k, &v) != 0) {
        live_captures.delete(&c);
        drop(DROP_GRAPHS_FULL);
        return;
    }
    captures_add(1);
    graph_event(tgid, EV_CAPTURE_BEGIN, 0, c, to_graph);
}

// cudaStreamEndCapture(stream, cudaGraph_t *pGraph) returned: the capture is over
// whatever it returned (the graph only on success).
static __always_inline void capture_ended(u32 tgid, struct frame *f, int rc) {
    struct gkey k = {};
    k.tgid = tgid;
    k.handle = f->a;
    u64 *v = captures.lookup(&k);
    if (!v || !(*v & CAPTURE_ORIGIN))
        return;
    u64 c = *v & ~CAPTURE_ORIGIN;
    captures.delete(&k);
    if (live_captures.delete(&c) == 0)
        captures_add(-1);
    graph_event(tgid, EV_CAPTURE_END, 0, c, rc == 0 ? read_u64(f->b) : 0);
}

// Executable graph `exec` runs `graph`'s kernel nodes from now on: a new serial, which
// its launches are counted by; `graph` 0: the executable graph was destroyed. The serial
// it had (an update, a handle used again, a destroy) is retired: no launch counts by it
// any more.
static __always_inline void exec_runs(u32 tgid, u64 exec, u64 graph) {
    struct gkey k = {};
    k.tgid = tgid;
    k.handle = exec;
    u64 *had = execs.lookup(&k);
    u64 old = had ? *had : 0;
    if (graph) {
        u64 serial = next_serial();
        if (execs.update(&k, &serial) != 0) {
            drop(DROP_GRAPHS_FULL);
            return;
        }
        graph_event(tgid, EV_GRAPH_EXEC, 0, serial, graph);
    } else if (old) {
        execs.delete(&k);
    }
    if (old)
        graph_event(tgid, EV_GRAPH_RETIRED, 0, old, 0);
}

// What a call that returned does, from its frame (a copy made on entry).
static __always_inline void finish(struct pt_regs *ctx, u32 tgid, struct frame *f,
                                   struct tstate *t) {
    u32 dev = t->dev;
    int rc = (int)PT_REGS_RC(ctx);
    u16 api = COOKIE_DRIVER(f->cookie) ? API_DRIVER : API_RUNTIME;
    if (COOKIE_HIP(f->cookie))  // hip, hip_module
        api += API_HIP;
    if (f->op == OP_CAPTURE_END && f->counted)
        capture_ended(tgid, f, rc);
    if (f->op == OP_HIP_REGISTER) {  // returns void: nothing to judge (issue #23)
        send_event(tgid, EV_HANDLE_NAME, 0, 0, f->b, 0, f->c);
        return;
    }
    if (rc == CUDA_NOT_READY && (f->op == OP_EVENT_QUERY || f->op == OP_STREAM_QUERY)) {
        // An answer, not an error: the work before the completion point was not done
        // when the call began.
        if (f->counted && f->op == OP_EVENT_QUERY)
            event_not_ready(tgid, f->a, f->ts);
        return;
    }
    if (rc != 0) {
        // Which call failed: the return probe carries the same cookie as the entry's
        // (read here, not on every launch).
        if (f->counted)
            add(tgid, FAM_ERROR, COOKIE_CALL(bpf_get_attach_cookie(ctx)), (u32)rc, 0, dev, 1);
        return;
    }
    switch (f->op) {
    case OP_LAUNCH:
        if (!f->counted)
            break;
        if (captured(tgid, api, f->a, f->d))
            break;
        launched(tgid, api, f->a, f->b, f->c, f, dev, t);
        break;
    case OP_GRAPH_LAUNCH: {
        // A graph launched into a capture becomes a node of that graph: not run here.
        if (!f->counted || capture_of(tgid, f->d))
            break;
        struct gkey k = {};
        k.tgid = tgid;
        k.handle = f->a;
        u64 *serial = execs.lookup(&k);
        launched(tgid, COOKIE_HIP(f->cookie) ? API_HIP_GRAPH : API_GRAPH,
                 serial ? *serial | GRAPH_SERIAL_BIT : f->a, 0, 0, f, dev, t);
        break;
    }
    case OP_COPY:
        if (f->counted)
            hist(tgid, FAM_COPY, COOKIE_ARG(f->cookie) == MEMCPY_FROM_ARGS ? f->b
                 : COOKIE_ARG(f->cookie), 0, dev, f->a);
        break;
    case OP_COPY_UNSIZED:
        if (f->counted)
            drop(DROP_COPY_SIZE_UNKNOWN);
        break;
    case OP_ALLOC:
        if (f->counted)
            hist(tgid, FAM_ALLOC, api | COOKIE_ARG(f->cookie) << 8, 0, dev, f->a);
        break;
    case OP_SYNC: {
        u64 now = bpf_ktime_get_ns();
        if (f->counted) {
            hist(tgid, FAM_SYNC, COOKIE_ARG(f->cookie), 0, dev, now > f->ts ? now - f->ts : 0);
            synced(t, tgid, COOKIE_ARG(f->cookie), f->d, f->cookie, dev, now);
        }
        break;
    }
    // Names are wanted inside runtime calls too (the runtime loads modules lazily).
    case OP_GET_KERNEL:  // __cudaGetKernel(cudaKernel_t *out, const void *hostFun)
        send_event(tgid, EV_KERNEL_HOST, 0, 0, read_u64(f->a), f->b, 0);
        break;
    case OP_GET_FUNCTION:  // cuModuleGetFunction / cuLibraryGetKernel(out, _, name)
        send_event(tgid, EV_HANDLE_NAME, 0, 0, read_u64(f->a), 0, f->c);
        break;
    case OP_KERNEL_FUNCTION:  // cuKernelGetFunction(CUfunction *out, CUkernel kernel)
        send_event(tgid, EV_HANDLE_ALIAS, 0, 0, read_u64(f->a), f->b, 0);
        break;
    // The thread's current device.
    case OP_SET_DEVICE:  // cudaSetDevice(int device)
        t->dev = dev_of(f->a & 0xffffffff);
        break;
    case OP_CTX_SET: {  // cuCtxSetCurrent(ctx), cuCtxPushCurrent_v2(ctx) (cookie arg 1)
        if (COOKIE_ARG(f->cookie))
            push_dev(t);
        struct ctxkey k = {};
        k.tgid = tgid;
        k.ctx = f->a;
        u32 *ordinal = contexts.lookup(&k);
        t->dev = ordinal ? dev_of(*ordinal) : DEV_UNKNOWN;
        break;
    }
    case OP_CTX_POP: {  // cuCtxPopCurrent_v2(CUcontext *pctx)
        u32 n = t->pushed;
        if (n == 0) {
            t->dev = DEV_UNKNOWN;
            break;
        }
        n -= 1;
        t->pushed = n;
        t->dev = n < CTX_STACK ? t->pushed_dev[n & (CTX_STACK - 1)] : DEV_UNKNOWN;
        break;
    }
    // cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev),
    // cuCtxCreate_v2(CUcontext *pctx, unsigned flags, CUdevice dev),
    // cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *p, int n, unsigned flags,
    //                CUdevice dev),
    // cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned flags, CUdevice dev):
    // the cookie's arg is the device's parameter position (the 4th or 5th kept in f->d).
    case OP_CTX_MADE: {
        struct ctxkey k = {};
        k.tgid = tgid;
        k.ctx = read_u64(f->a);
        u32 at = COOKIE_ARG(f->cookie);
        u32 ordinal = (at >= CTX_DEV_PARAM_V4 ? f->d : at == 3 ? f->c : f->b) & 0xffffffff;
        if (contexts.update(&k, &ordinal) != 0)
            drop(DROP_STATS_FULL);
        if (at != CTX_DEV_PARAM_RETAIN) {  // cuCtxCreate: made current
            push_dev(t);
            t->dev = dev_of(ordinal);
        }
        break;
    }
    // cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) and _v2; cudaGetDeviceProperties(
    // cudaDeviceProp *prop, int device) and _v2: the UUID follows the 256-byte name
    // (cookie arg 1).
    case OP_DEVICE_UUID:
        send_event(tgid, EV_DEVICE_UUID, 0, 0, f->b & 0xffffffff, 0,
                   f->a + (COOKIE_ARG(f->cookie) ? DEVICE_PROP_UUID_OFF : 0));
        break;
    // cudaDeviceGetPCIBusId(char *id, int len, int device), cuDeviceGetPCIBusId likewise
    case OP_DEVICE_PCI:
        send_event(tgid, EV_DEVICE_PCI, 0, 0, f->c & 0xffffffff, 0, f->a);
        break;
    // CUDA graphs (calls made inside a runtime call are the runtime's: not seen here).
    // (stream, mode), ...ToGraph(stream, graph, ...) (arg 1), ...RecaptureToGraph(stream,
    // mode, graph, ...): its graph's kernel nodes replaced by the capture's at its end.
    case OP_CAPTURE_BEGIN:
        if (f->counted)
            capture_begun(tgid, f->a, COOKIE_ARG(f->cookie) ? f->b : 0);
        break;
    case OP_EVENT_RECORD: {  // (event, stream[, flags])
        u64 c = f->counted ? capture_of(tgid, f->b) : 0;
        if (!c) {
            if (f->counted) {
                event_recorded(tgid, f->a, f->b, f->cookie, dev);
                open_emptied(t, tgid);  // (the stream's open group sealed)
            }
            break;
        }
        struct gkey k = {};
        k.tgid = tgid;
        k.handle = f->a;
        if (capture_events.update(&k, &c) != 0)
            drop(DROP_GRAPHS_FULL);
        break;
    }
    case OP_STREAM_WAIT: {  // (stream, event, flags): joins the event's capture
        if (f->counted && !capture_of(tgid, f->a)) {
            wait_event(tgid, dev, 0, 0);  // counted, whether anything bounds it or not
            stream_waited(tgid, f->a, f->b, f->cookie, dev, f->ts);
            open_emptied(t, tgid);  // (the waiting stream's open group sealed)
        }
        if (!f->counted || !captures_open())
            break;
        struct gkey k = {};
        k.tgid = tgid;
        k.handle = f->b;
        u64 *v = capture_events.lookup(&k);
        if (!v)
            break;
        u64 c = *v;
        if (!live_captures.lookup(&c))
            break;
        k.handle = f->a;
        u64 *had = captures.lookup(&k);
        if (had && (*had & ~CAPTURE_ORIGIN) == c)
            break;  // already in it (the origin stream joining back)
        if (captures.update(&k, &c) != 0)
            drop(DROP_GRAPHS_FULL);
        break;
    }
    case OP_EVENT_QUERY:  // (event): ready
        if (f->counted)
            event_done(t, tgid, f->a, bpf_ktime_get_ns(), COMPLETION_EVENT);
        break;
    case OP_STREAM_QUERY:  // (stream): idle
        if (f->counted)
            close_later(t, CLOSE_STREAM, stream_key(f->a, f->cookie), 0, 0,
                        bpf_ktime_get_ns(), COMPLETION_EVENT);
        break;
    case OP_EVENT_DESTROY:  // (event)
        if (f->counted)
            event_forget(tgid, f->a);
        break;
    case OP_STREAM_DESTROY:  // (stream)
        if (f->counted) {
            stream_retired(tgid, f->a);
            open_emptied(t, tgid);
        }
        break;
    case OP_EVENT_ELAPSED:  // (float *ms, start, end): a one-launch span's exact time
        if (f->counted)
            elapsed(tgid, dev, f->a, f->b, f->c);
        break;
    case OP_GRAPH_CREATE:  // (cudaGraph_t *pGraph, flags)
        if (f->counted)
            graph_event(tgid, EV_GRAPH_CREATE, 0, read_u64(f->a), 0);
        break;
    // (pNode, graph, deps, n, what) and cudaGraphAddNode_v2(pNode, graph, deps, edges, n,
    // params) (also cuGraphAddNode_v2/_v3, CUDA 13's cudaGraphAddNode): `what` (f->d) as
    // the cookie's arg says (GRAPH_ADD_*).
    case OP_GRAPH_ADD_KERNEL: {
        if (!f->counted)
            break;
        u64 what = f->d;
        u32 type = COOKIE_ARG(f->cookie) == GRAPH_ADD_CHILD ? GRAPH_NODE_GRAPH
                                                            : GRAPH_NODE_KERNEL;
        if (COOKIE_ARG(f->cookie) == GRAPH_ADD_NODE_PARAMS) {  // the type, then the params
            bpf_probe_read_user(&type, sizeof(type), (void *)what);
            what += NODE_PARAMS_KERNEL_OFF;
            if (type == GRAPH_NODE_GRAPH)
                what = read_u64(what + CHILD_GRAPH_OFF);
        }
        if (type == GRAPH_NODE_KERNEL) {
            // (hipKernelNodeParams has the handle after the block size and `extra`)
            u64 kernel = read_u64(what + (COOKIE_HIP(f->cookie) ? HIP_KNODE_FUNC_OFF
                                                                : KNODE_FUNC_OFF));
            // A driver kernel node names its CUkernel when its CUfunction is NULL (the
            // plain cuGraphAddKernelNode's struct has no kern: a NULL func fails there).
            if (!kernel && api == API_DRIVER)
                kernel = read_u64(what + KNODE_KERN_OFF);
            graph_event(tgid, EV_GRAPH_NODE, api, kernel, f->b);
        } else if (type == GRAPH_NODE_GRAPH)
            graph_event(tgid, EV_GRAPH_CHILD, 0, what, f->b);
        break;
    }
    case OP_GRAPH_CLONE:  // (cudaGraph_t *pClone, cudaGraph_t original)
        if (f->counted)
            graph_event(tgid, EV_GRAPH_CLONE, 0, read_u64(f->a), f->b);
        break;
    case OP_GRAPH_INSTANTIATE:  // (cudaGraphExec_t *pExec, graph, ...)
        if (f->counted)
            exec_runs(tgid, read_u64(f->a), f->b);
        break;
    // (cudaGraphExec_t exec, graph, ...): a new serial, so that the launches counted
    // before keep the kernels they ran.
    case OP_GRAPH_UPDATE:
        if (f->counted)
            exec_runs(tgid, f->a, f->b);
        break;
    case OP_GRAPH_DESTROY:  // (graph)
        if (f->counted)
            graph_event(tgid, EV_GRAPH_DESTROY, 0, f->a, 0);
        break;
    case OP_GRAPH_EXEC_DESTROY:  // (exec)
        if (f->counted)
            exec_runs(tgid, f->a, 0);
        break;
    // HIP (issue #23): hipGetDeviceProperties*(hipDeviceProp_t *prop, int device): its PCI
    // fields, in the layout the cookie's arg says (HIP_PROPS_*).
    case OP_HIP_DEVICE_PROPS: {
        int pci[3] = {};
        int r0600 = COOKIE_ARG(f->cookie) == HIP_PROPS_R0600;
        bpf_probe_read_user(&pci, sizeof(pci), (void *)f->a + (r0600 ? HIP_PROPS_R0600_PCI_OFF
                                                                     : HIP_PROPS_R0000_PCI_OFF));
        u64 domain = (u32)(r0600 ? pci[2] : pci[0]), bus = (u32)(r0600 ? pci[0] : pci[1]),
            dev = (u32)(r0600 ? pci[1] : pci[2]);
        send_event(tgid, EV_HIP_DEVICE_PCI, 0, 0, f->b & 0xffffffff,
                   domain << 32 | (bus & 0xff) << 8 | (dev & 0x1f), 0);
        break;
    }
    }
}

// The return programs: on_return on every runtime entry point, on_return_drv on every
// driver one (the side is the program's, so no cookie is read on success).
static __always_inline int returned(struct pt_regs *ctx, int side) {
    struct tstate *t = thread_state(ctx, 0);
    if (!t)
        return 0;
    struct frame *f = &t->side[side];
    if (f->depth == 0)
        return 0;
    if (f->depth > 1) {
        f->depth -= 1;
        return 0;
    }
    // A return whose entry was not seen (the probes were being attached) is not the
    // frame's call: leave the frame to its own return. The frame's call returns with the
    // stack pointer one word above its entry's (the return address popped).
    if (PT_REGS_SP(ctx) != f->sp + 8)
        return 0;
    f->depth = 0;
#ifdef FRAMES_ONLY
    // The benchmark's floor of our own: the frames kept between entry and return,
    // nothing counted (tests/bench/test_ebpf_overhead.py, case frames_only).
    return 0;
#endif
    finish(ctx, t->tgid, f, t);
    if (t->close_mode) {
        tails.call(ctx, 0);  // close_groups
        t->close_mode = 0;  // (not loaded: `tails` empty)
    }
    return 0;
}

int on_return(struct pt_regs *ctx) {
    return returned(ctx, 0);
}

int on_return_drv(struct pt_regs *ctx) {
    return returned(ctx, 1);
}

// --- completion points (issue #27): the return programs' tail call ------------
// The tail of a return program whose call observed a completion point (close_later):
// one group closed a call (one place in the program that closes, so that the verifier
// walks it once), the next in a tail call: a stream's SEALED sealed groups, then its open
// one. A device synchronise walks the process's stream list: (SEALED + 1) *
// PROC_STREAMS calls at most, within the kernel's 33 tail calls. A stream whose groups
// are all closed by a stream completion (one step more) or a device synchronise is
// freed.
#define GROUPS (SEALED + 1)
// A place of the process's stream list whose stream a device synchronise has walked:
// freed if the stream's groups are all closed (not another device's).
static __always_inline void free_place(struct plist *pl, u32 place, u32 tgid, u32 dev) {
    u64 skey = pl->stream[place & (PROC_STREAMS - 1)];
    if (!skey)
        return;
    struct gkey k = {};
    k.tgid = tgid;
    k.handle = skey;
    struct sstate *s = streams.lookup(&k);
    if (s) {
        if (s->dev != dev || s->open.first)
            return;
        for (u32 i = 0; i < SEALED; i++)
            if (s->sealed[i].first)
                return;
        streams.delete(&k);
    }
    pl->stream[place & (PROC_STREAMS - 1)] = 0;
}

int close_groups(struct pt_regs *ctx) {
    struct tstate *t = thread_state(ctx, 0);
    if (!t || !t->close_mode)
        return 0;
    u8 mode = t->close_mode;
    u32 tgid = t->tgid;
    u32 step = t->close_i;
    t->close_i = step + 1;
    u32 gi = step % GROUPS;  // the group: sealed[gi], or open (gi == SEALED)
    struct gkey k = {};
    k.tgid = tgid;
    k.handle = t->close_key;
    // Everything but the close first, so that nothing else is alive through it (the
    // verifier's paths through the close would multiply by what is).
    if (mode == CLOSE_DEVICE) {
        u32 place = step / GROUPS;
        struct plist *pl = proc_streams.lookup(&tgid);
        if (!pl)
            goto stop;
        if (gi == 0 && place > 0 && place <= PROC_STREAMS) {
            free_place(pl, place - 1, tgid, t->close_dev);  // the one walked before
            open_emptied(t, tgid);  // (its state may be freed)
        }
        if (place >= PROC_STREAMS)
            goto stop;
        k.handle = pl->stream[place & (PROC_STREAMS - 1)];
        if (!k.handle) {  // an empty place: the next one
            t->close_i = (place + 1) * GROUPS;
            goto next;
        }
    } else if (mode == CLOSE_STREAM && step == GROUPS) {
        // A step of its own: the stream's groups are all closed, its state freed.
        streams.delete(&k);
        open_emptied(t, tgid);
        struct plist *pl = proc_streams.lookup(&tgid);
        if (pl)
            for (u32 i = 0; i < PROC_STREAMS; i++)
                if (pl->stream[i] == k.handle)
                    pl->stream[i] = 0;
        goto stop;
    } else if (mode == CLOSE_EVENT && gi == SEALED - 1) {
        t->close_mode = 0;  // the last step
    }
    struct sstate *s = streams.lookup(&k);
    if (!s)
        goto next;
    if (mode == CLOSE_DEVICE && s->dev != t->close_dev) {
        t->close_i = (step / GROUPS + 1) * GROUPS;  // another device's: stays
        goto next;
    }
    struct group *g = &s->open;
    if (gi < SEALED) {
        g = &s->sealed[gi];
        // An event's record completes the groups sealed by it or before it, only.
        if (mode == CLOSE_EVENT && s->sealed_at[gi] > t->close_serial)
            goto next;
    }
    group_close(tgid, g, s->dev, t->close_done, t->close_completion);
    if (gi == SEALED)
        open_emptied(t, tgid);
next:
    if (!t->close_mode)
        return 0;
    tails.call(ctx, 0);
stop:
    t->close_mode = 0;  // (or the tail call limit reached: the rest stay for the next)
    return 0;
}

// --- entry programs --------------------------------------------------------------------
// An entry program enters the call's frame (enter_with) and, when there is one, keeps in
// it what the call's return needs: `fill(ctx, f, t)`. `cookie` is the probe's
// (PROBE_COOKIE), or for the launch programs only their side. `names`: see enter_with.
#define ENTRY_FILLED(name, op, names, cookie, fill)                \
    int name(struct pt_regs *ctx) {                                \
        struct tstate *t;                                          \
        struct frame *f = enter_with(ctx, op, names, &t, cookie);  \
        if (f)                                                     \
            fill(ctx, f, t);                                       \
        return 0;                                                  \
    }
// ENTRY(name, op, cookie) { ... }: an entry program whose fill is the body that follows.
#define ENTRY(name, op, cookie)                                                      \
    static __always_inline void name##_fill(struct pt_regs *ctx, struct frame *f,    \
                                            struct tstate *t);                       \
    ENTRY_FILLED(name, op, 0, cookie, name##_fill)                                   \
    static __always_inline void name##_fill(struct pt_regs *ctx, struct frame *f,    \
                                            struct tstate *t)
#define PROBE_COOKIE bpf_get_attach_cookie(ctx)

static __always_inline u64 stack_arg(struct pt_regs *ctx, int n) {
    // At a function's first instruction the stack pointer holds the return address;
    // the n-th stack argument (n >= 1) is the n-th 8-byte slot above it.
    return read_u64(PT_REGS_SP(ctx) + 8 * n);
}

static __always_inline u64 dim3_count(u64 xy, u64 z) {
    return (xy & 0xffffffff) * (xy >> 32) * (z & 0xffffffff);
}

// --- launches -------------------------------------------------------------------------
// cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
//                  size_t sharedMem, cudaStream_t stream): a 12-byte dim3 by value is two
// INTEGER eightbytes: x|y<<32 in one register, z in the next. 7th and 8th words on the
// stack. Also cudaLaunchCooperativeKernel and the _ptsz variants.
// The launch's entry time (f->ts) bounds its kernel's start: a kernel may start before
// its launch call returns.
ENTRY(rt_launch, OP_LAUNCH, 0) {
    f->a = PT_REGS_PARM1(ctx);
    f->b = dim3_count(PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx));
    f->c = dim3_count(PT_REGS_PARM4(ctx), PT_REGS_PARM5(ctx));
    f->d = stack_arg(ctx, RT_LAUNCH_STREAM_STACK_SLOT);
    f->ts = launch_hinted(t, f->d, f->cookie) ? 0 : bpf_ktime_get_ns();
}
// The _ptsz launches: a NULL stream is the thread's default stream (the cookie says so).
ENTRY_FILLED(rt_launch_ptsz, OP_LAUNCH, 0, COOKIE_PTSZ_BIT, rt_launch_fill)

// cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args),
// cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra):
// cudaLaunchConfig_t and CUlaunchConfig share their first 40 bytes' layout (grid dims at
// LCFG_GRID_OFF, block dims right after, the stream at LCFG_STREAM_OFF): read in one go.
struct launch_cfg {
    u32 dims[6];
    u64 smem;
    u64 stream;
};

ENTRY(launch_ex, OP_LAUNCH, PROBE_COOKIE) {
    struct launch_cfg c = {};
    f->ts = bpf_ktime_get_ns();
    bpf_probe_read_user(&c, sizeof(c), (void *)PT_REGS_PARM1(ctx) + LCFG_GRID_OFF);
    f->a = PT_REGS_PARM2(ctx);
    f->b = (u64)c.dims[0] * c.dims[1] * c.dims[2];
    f->c = (u64)c.dims[3] * c.dims[4] * c.dims[5];
    f->d = c.stream;
}

// cuLaunchKernel(CUfunction f, unsigned gx, gy, gz, bx, by, bz, unsigned shared,
//                CUstream stream, void **params, void **extra): bz, shared, stream on
// the stack (read in one go). Also cuLaunchCooperativeKernel.
ENTRY(drv_launch, OP_LAUNCH, COOKIE_DRIVER_BIT) {
    u64 stack[3] = {};
    bpf_probe_read_user(&stack, sizeof(stack),
                        (void *)PT_REGS_SP(ctx) + 8 * CU_LAUNCH_BZ_STACK_SLOT);
    f->a = PT_REGS_PARM1(ctx);
    f->b = (PT_REGS_PARM2(ctx) & 0xffffffff) * (PT_REGS_PARM3(ctx) & 0xffffffff) *
           (PT_REGS_PARM4(ctx) & 0xffffffff);
    f->c = (PT_REGS_PARM5(ctx) & 0xffffffff) * (PT_REGS_PARM6(ctx) & 0xffffffff) *
           (stack[0] & 0xffffffff);
    f->d = stack[CU_LAUNCH_STREAM_STACK_SLOT - CU_LAUNCH_BZ_STACK_SLOT];
    f->ts = launch_hinted(t, f->d, f->cookie) ? 0 : bpf_ktime_get_ns();
}
ENTRY_FILLED(drv_launch_ptsz, OP_LAUNCH, 0, COOKIE_DRIVER_BIT | COOKIE_PTSZ_BIT,
             drv_launch_fill)

// cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream), cuGraphLaunch likewise
ENTRY(graph_launch, OP_GRAPH_LAUNCH, PROBE_COOKIE) {
    f->ts = bpf_ktime_get_ns();
    f->a = PT_REGS_PARM1(ctx);
    f->d = PT_REGS_PARM2(ctx);
}

// --- copies: bytes in f->a, the kind in the cookie or (MEMCPY_FROM_ARGS) in f->b ------
// A copy whose kind (f->b) is not a cudaMemcpyKind is dropped, not counted.
static __always_inline void check_kind(struct frame *f) {
    if (f->b > MEMCPY_KIND_MAX) {
        drop(DROP_BAD_ARGUMENT);
        f->counted = 0;
    }
}

// cudaMemcpy(dst, src, size_t count, enum cudaMemcpyKind kind[, stream]);
// cuMemcpy*(dst, src, size_t bytes[, stream]): the kind is in the function's name.
ENTRY(copy, OP_COPY, PROBE_COOKIE) {
    f->a = PT_REGS_PARM3(ctx);
    // hipMemcpyToSymbol / hipMemcpyFromSymbol[Async](dst or symbol, src or symbol, size_t
    // bytes, size_t offset, hipMemcpyKind kind[, stream]): the kind is the fifth (the
    // probe's COOKIE_POS). Both read, then one chosen (no context access at a computed
    // offset for the verifier).
    u64 fourth = PT_REGS_PARM4(ctx), fifth = PT_REGS_PARM5(ctx);
    asm volatile("" : "+r"(fourth), "+r"(fifth));
    f->b = (COOKIE_POS(f->cookie) == SYMBOL_COPY_KIND_ARG ? fifth : fourth) & 0xffffffff;
    if (COOKIE_ARG(f->cookie) == MEMCPY_FROM_ARGS)
        check_kind(f);
}

// cudaMemcpyPeer(dst, int dstDevice, src, int srcDevice, size_t count[, stream]),
// cuMemcpyPeer(dst, CUcontext dstContext, src, CUcontext srcContext, size_t n[, stream])
ENTRY(copy_peer, OP_COPY, PROBE_COOKIE) {
    f->a = PT_REGS_PARM5(ctx);
}

// cudaMemcpy2D*(..., size_t width, size_t height, enum cudaMemcpyKind kind[, stream]):
// the width is argument COOKIE_POS (RT_2D_*_WIDTH_ARG), height and kind the next two.
ENTRY(copy_2d, OP_COPY, PROBE_COOKIE) {
    u64 stack[3] = {};
    bpf_probe_read_user(&stack, sizeof(stack), (void *)PT_REGS_SP(ctx) + 8);
    u64 w, h, kind;
    switch (COOKIE_POS(f->cookie)) {
    case RT_2D_WIDTH_ARG:
        w = PT_REGS_PARM5(ctx);
        h = PT_REGS_PARM6(ctx);
        kind = stack[0];
        break;
    case RT_2D_ARRAY_WIDTH_ARG:
        w = PT_REGS_PARM6(ctx);
        h = stack[0];
        kind = stack[1];
        break;
    default:  // RT_2D_ARRAY_TO_ARRAY_WIDTH_ARG
        w = stack[0];
        h = stack[1];
        kind = stack[2];
        break;
    }
    f->a = w * h;
    f->b = kind & 0xffffffff;
    check_kind(f);
}

// cudaMemcpy3D*(const struct cudaMemcpy3DParms *p), cudaMemcpy3DPeer*(const struct
// cudaMemcpy3DPeerParms *p): COOKIE_POS says which. With a CUDA array on either side
// the extent is in array elements: the size in bytes is not known (OP_COPY_UNSIZED).
ENTRY(copy_3d, OP_COPY, PROBE_COOKIE) {
    u64 p[RT3DPEER_SIZE / 8] = {};
    bpf_probe_read_user(&p, sizeof(p), (void *)PT_REGS_PARM1(ctx));
    u64 dst_array, *extent;
    if (COOKIE_POS(f->cookie) == RT_3D_PEER) {
        dst_array = p[RT3DPEER_DST_ARRAY_OFF / 8];
        extent = &p[RT3DPEER_EXTENT_OFF / 8];
        f->b = MEMCPY_DEVICE_TO_DEVICE;
    } else {
        dst_array = p[RT3D_DST_ARRAY_OFF / 8];
        extent = &p[RT3D_EXTENT_OFF / 8];
        f->b = p[RT3D_KIND_OFF / 8] & 0xffffffff;
    }
    if (p[RT3D_SRC_ARRAY_OFF / 8] || dst_array) {
        f->op = OP_COPY_UNSIZED;
        return;
    }
    f->a = extent[0] * extent[1] * extent[2];
    check_kind(f);
}

// The cudaMemcpyKind of a driver copy between two CUmemorytypes (an array is on the
// device; unified memory may be either: Default), or MEMCPY_KIND_MAX + 1 when unknown.
static __always_inline u64 kind_of(u32 src, u32 dst) {
    if (src == CU_MEMORYTYPE_UNIFIED || dst == CU_MEMORYTYPE_UNIFIED)
        return MEMCPY_DEFAULT;
    if (src < CU_MEMORYTYPE_HOST || src > CU_MEMORYTYPE_ARRAY || dst < CU_MEMORYTYPE_HOST ||
        dst > CU_MEMORYTYPE_ARRAY)
        return MEMCPY_KIND_MAX + 1;
    u64 from_dev = src != CU_MEMORYTYPE_HOST, to_dev = dst != CU_MEMORYTYPE_HOST;
    return from_dev ? (to_dev ? MEMCPY_DEVICE_TO_DEVICE : MEMCPY_DEVICE_TO_HOST)
                    : (to_dev ? MEMCPY_HOST_TO_DEVICE : MEMCPY_HOST_TO_HOST);
}

// A driver copy described by the struct its first argument points to: the struct's
// `size` bytes, the memory types at `src_off` and `dst_off`, and from `width_off` on
// WidthInBytes, Height and (`dims` 3) Depth.
static __always_inline void drv_copy(struct pt_regs *ctx, struct frame *f, u32 size,
                                     u32 src_off, u32 dst_off, u32 width_off, int dims) {
    u64 p[CU3D_SIZE / 8] = {};  // the larger struct
    bpf_probe_read_user(&p, size, (void *)PT_REGS_PARM1(ctx));
    u64 *w = &p[width_off / 8];
    f->a = w[0] * w[1] * (dims == 3 ? w[2] : 1);
    f->b = kind_of(p[src_off / 8], p[dst_off / 8]);
    check_kind(f);
}

// cuMemcpy2D*_v2(const CUDA_MEMCPY2D *p)
ENTRY(drv_copy_2d, OP_COPY, PROBE_COOKIE) {
    drv_copy(ctx, f, CU2D_SIZE, CU2D_SRC_TYPE_OFF, CU2D_DST_TYPE_OFF, CU2D_WIDTH_OFF, 2);
}

// cuMemcpy3D*_v2(const CUDA_MEMCPY3D *p), cuMemcpy3DPeer*(const CUDA_MEMCPY3D_PEER *p)
ENTRY(drv_copy_3d, OP_COPY, PROBE_COOKIE) {
    drv_copy(ctx, f, CU3D_SIZE, CU3D_SRC_TYPE_OFF, CU3D_DST_TYPE_OFF, CU3D_WIDTH_OFF, 3);
}

// --- allocations: bytes in f->a, the memory type in the cookie -----------------------
// cudaMalloc / cudaMallocAsync / cudaMallocManaged / cudaMallocHost / cudaHostAlloc
// (void **ptr, size_t size, ...), cuMemAlloc_v2 / cuMemAllocAsync / cuMemAllocManaged /
// cuMemHostAlloc / cuMemAllocHost_v2(CUdeviceptr or void **p, size_t bytes, ...)
ENTRY(alloc, OP_ALLOC, PROBE_COOKIE) {
    f->a = PT_REGS_PARM2(ctx);
}

// --- synchronising calls: the call in the cookie, the stream (if any) in f->d --------
// (cuCtxSynchronize_v2(CUcontext ctx), CUDA 13: its context, which synced() ignores)
ENTRY(sync, OP_SYNC, PROBE_COOKIE) {
    f->ts = bpf_ktime_get_ns();
    f->d = PT_REGS_PARM1(ctx);
}

// --- names and the thread's device: calls whose arguments are read on return ------
// The first three and the fifth (or fourth, or sixth) argument are kept, inside a
// runtime call too (`names`);
// finish() reads what each call has. cudaGraphAddNode_v2's parameters are its sixth
// (its probe's COOKIE_POS; cuGraphAddNode_v2 and _v3 likewise): kept in place of the fifth.
static __always_inline void keep_args(struct pt_regs *ctx, struct frame *f,
                                      struct tstate *t) {
    f->a = PT_REGS_PARM1(ctx);
    f->b = PT_REGS_PARM2(ctx);
    f->c = PT_REGS_PARM3(ctx);
    // Both read, then one chosen: the verifier allows no context access at a computed
    // offset, which a choice between the two reads compiles to.
    u64 fourth = PT_REGS_PARM4(ctx), fifth = PT_REGS_PARM5(ctx), sixth = PT_REGS_PARM6(ctx);
    asm volatile("" : "+r"(fourth), "+r"(sixth));
    // cudaGraphAddNode of CUDA 13's runtime takes cudaGraphAddNode_v2's arguments: its
    // fifth is then the dependency count, never the parameters' address (nothing is
    // mapped below USER_ADDR_MIN), and the parameters are the sixth.
    int v2 = COOKIE_POS(f->cookie) == GRAPH_ADD_NODE_V2_PARAMS_ARG ||
             (f->op == OP_GRAPH_ADD_KERNEL && COOKIE_ARG(f->cookie) == GRAPH_ADD_NODE_PARAMS &&
              fifth < USER_ADDR_MIN);
    // cuCtxCreate_v4: the device is the 4th.
    int dev4 = f->op == OP_CTX_MADE && COOKIE_ARG(f->cookie) == CTX_DEV_PARAM_V4;
    f->d = v2 ? sixth : dev4 ? fourth : fifth;
}
#define KEEP_ARGS(name, op) ENTRY_FILLED(name, op, 1, PROBE_COOKIE, keep_args)
KEEP_ARGS(rt_get_kernel, OP_GET_KERNEL)
KEEP_ARGS(drv_get_function, OP_GET_FUNCTION)
KEEP_ARGS(drv_kernel_function, OP_KERNEL_FUNCTION)
KEEP_ARGS(set_device, OP_SET_DEVICE)
KEEP_ARGS(ctx_set, OP_CTX_SET)
KEEP_ARGS(ctx_pop, OP_CTX_POP)
KEEP_ARGS(ctx_made, OP_CTX_MADE)
KEEP_ARGS(device_uuid, OP_DEVICE_UUID)
KEEP_ARGS(device_pci, OP_DEVICE_PCI)
KEEP_ARGS(capture_begin, OP_CAPTURE_BEGIN)
KEEP_ARGS(capture_end, OP_CAPTURE_END)
KEEP_ARGS(event_record, OP_EVENT_RECORD)
// (and its entry time: a wait's bound starts there)
static __always_inline void keep_args_ts(struct pt_regs *ctx, struct frame *f,
                                         struct tstate *t) {
    keep_args(ctx, f, t);
    f->ts = bpf_ktime_get_ns();
}
ENTRY_FILLED(stream_wait, OP_STREAM_WAIT, 1, PROBE_COOKIE, keep_args_ts)
KEEP_ARGS(graph_create, OP_GRAPH_CREATE)
// Completion points (issue #27): the call's handle, and its entry time (a not-ready
// answer says the work was not done when the call began).
ENTRY(event_query, OP_EVENT_QUERY, PROBE_COOKIE) {
    f->ts = bpf_ktime_get_ns();
    f->a = PT_REGS_PARM1(ctx);
}
ENTRY(stream_query, OP_STREAM_QUERY, PROBE_COOKIE) {
    f->a = PT_REGS_PARM1(ctx);
}
ENTRY(event_destroy, OP_EVENT_DESTROY, PROBE_COOKIE) {
    f->a = PT_REGS_PARM1(ctx);
}
ENTRY(stream_destroy, OP_STREAM_DESTROY, PROBE_COOKIE) {
    f->a = PT_REGS_PARM1(ctx);
}
ENTRY(event_elapsed, OP_EVENT_ELAPSED, PROBE_COOKIE) {
    f->a = PT_REGS_PARM1(ctx);
    f->b = PT_REGS_PARM2(ctx);
    f->c = PT_REGS_PARM3(ctx);
}
KEEP_ARGS(graph_add_kernel, OP_GRAPH_ADD_KERNEL)
KEEP_ARGS(graph_add_child, OP_GRAPH_ADD_KERNEL)
KEEP_ARGS(graph_clone, OP_GRAPH_CLONE)
KEEP_ARGS(graph_instantiate, OP_GRAPH_INSTANTIATE)
KEEP_ARGS(graph_exec_update, OP_GRAPH_UPDATE)
KEEP_ARGS(graph_destroy, OP_GRAPH_DESTROY)
KEEP_ARGS(graph_exec_destroy, OP_GRAPH_EXEC_DESTROY)

// --- HIP (AMD's libamdhip64): issue #23 -------------------------------------------
// hipLaunchKernel(const void *function_address, dim3 numBlocks, dim3 dimBlocks, void **args,
// size_t sharedMemBytes, hipStream_t stream), hipExtLaunchKernel (the same, then events
// and flags), hipLaunchCooperativeKernel and the _spt variants: cudaLaunchKernel's layout.
// The function address is the kernel's handle (a variable hipcc names after the kernel).
ENTRY_FILLED(hip_launch, OP_LAUNCH, 0, COOKIE_HIP_BIT, rt_launch_fill)
// The _spt launches: a NULL stream is the thread's default stream (the cookie says so).
ENTRY_FILLED(hip_launch_spt, OP_LAUNCH, 0, COOKIE_HIP_BIT | COOKIE_PTSZ_BIT, rt_launch_fill)
// hipModuleLaunchKernel(hipFunction_t f, unsigned gridDimX, ..., blockDimZ, unsigned
// sharedMemBytes, hipStream_t stream, void **kernelParams, void **extra) and
// hipModuleLaunchCooperativeKernel: cuLaunchKernel's layout.
ENTRY_FILLED(hip_module_launch, OP_LAUNCH, 0, COOKIE_HIP_BIT | COOKIE_DRIVER_BIT,
             drv_launch_fill)

// hipExtModuleLaunchKernel / hipHccModuleLaunchKernel(hipFunction_t f, uint32_t
// globalWorkSizeX, Y, Z, uint32_t localWorkSizeX, Y, Z, size_t sharedMemBytes,
// hipStream_t stream, ...): cuLaunchKernel's places, but the grid is given in threads
// (OpenCL's global work size): blocks = global / local, rounded up, per dimension.
static __always_inline u64 blocks_of(u64 global, u64 local) {
    global &= 0xffffffff;
    local &= 0xffffffff;
    return local ? (global + local - 1) / local : 0;
}

ENTRY(hip_ext_module_launch, OP_LAUNCH, COOKIE_HIP_BIT | COOKIE_DRIVER_BIT) {
    u64 stack[3] = {};
    bpf_probe_read_user(&stack, sizeof(stack),
                        (void *)PT_REGS_SP(ctx) + 8 * CU_LAUNCH_BZ_STACK_SLOT);
    f->a = PT_REGS_PARM1(ctx);
    f->b = blocks_of(PT_REGS_PARM2(ctx), PT_REGS_PARM5(ctx)) *
           blocks_of(PT_REGS_PARM3(ctx), PT_REGS_PARM6(ctx)) *
           blocks_of(PT_REGS_PARM4(ctx), stack[0]);
    f->c = (PT_REGS_PARM5(ctx) & 0xffffffff) * (PT_REGS_PARM6(ctx) & 0xffffffff) *
           (stack[0] & 0xffffffff);
    f->d = stack[CU_LAUNCH_STREAM_STACK_SLOT - CU_LAUNCH_BZ_STACK_SLOT];
}

// __hipRegisterFunction(void **modules, const void *hostFunction, char *deviceFunction,
// const char *deviceName, ...): hipcc's module constructor registers each kernel handle
// with its device (mangled) name, the same string as deviceFunction (kept: the third).
// Read on return (finish()): at entry the string's page of a library just loaded may not
// be in the process's page tables yet, and a probe cannot fault it in; the runtime has
// read it by the time it returns.
KEEP_ARGS(hip_register, OP_HIP_REGISTER)
KEEP_ARGS(hip_device_props, OP_HIP_DEVICE_PROPS)

// --- threads that exit: their place in `fast_threads` is free again ----------------
// (raw tracepoint sched_process_exit, in the exiting thread: its state zeroed, then the
// key, so a thread claiming the place finds it zeroed).
int on_thread_exit(void *ctx) {
    struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
    u64 key = regs_key((void *)bpf_task_pt_regs(task));
    u32 i = fast_index(key);
    struct tstate *t = fast_threads.lookup(&i);
    int fast = t && key && t->key == key;
    if (!fast)
        t = threads.task_storage_get(task, 0, 0);
    // Inside a probed call that will never return (a process killed or exiting
    // mid-launch): neither work nor an error; counted as a drop.
    if (t && (t->side[0].depth || t->side[1].depth))
        drop(DROP_CALL_UNFINISHED);
    if (!fast)
        return 0;
    __builtin_memset(t, 0, offsetof(struct tstate, key));
    __sync_fetch_and_and(&t->key, 0);
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
