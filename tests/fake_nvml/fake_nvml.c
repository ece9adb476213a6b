/*
 * A fake NVML (libnvidia-ml.so.1) for tests: the real nvidia-ml-py bindings load it by
 * soname and call it through their real ctypes structs, so the exporter's NVML path
 * runs end to end without a GPU.
 *
 * Its GPUs come from a scenario file named by $FAKE_NVML_SCENARIO (format in README.md).
 * The file is re-read whenever its mtime or size changes, so a test can lose a GPU,
 * hang a call or load the driver while the exporter runs. A loaded scenario is never
 * freed: a call on another thread (possibly one hanging for seconds) may still hold it.
 *
 * Signatures and struct layouts follow nvml.h; nothing here is exported that the real
 * library does not have. Build variants hide symbols with a linker version script
 * ("a function not exported" = an older driver).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <libgen.h>
#include <poll.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10, NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_UNKNOWN = 999,
};

/* ---- structs from nvml.h ---------------------------------------------------------- */
typedef struct { unsigned int magic, dev, mig; } fake_handle_t;
typedef fake_handle_t *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct { unsigned int version; int sensorType; int temperature; } nvmlTemperature_v1_t;

typedef union {
    double dVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal;
    signed long long sllVal; signed int siVal; unsigned short usVal;
} nvmlValue_t;
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;  /* v2 and v3 share this layout */

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

#define EVENT_XID 0x8ULL
#define VALUE_UINT 1
#define VALUE_ULL 3

/* ---- the scenario ------------------------------------------------------------------ */
#define MAX_DEV 64
#define MAX_MIG 8
#define MAX_KV 320 /* an H100 takes ~75 lines (NVLink, GPM): ~245 processes */

typedef struct { char key[48]; char val[208]; } kv_t;
typedef struct { int n; kv_t kv[MAX_KV]; } section_t;

typedef struct {
    section_t global;
    int ndev;
    section_t dev[MAX_DEV];
    int has_mig[MAX_DEV][MAX_MIG];
    section_t mig[MAX_DEV][MAX_MIG];
} scenario_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static scenario_t *current;
static struct timespec loaded_mtime;
static off_t loaded_size = -1;
static ino_t loaded_ino;
static int initialised;
static fake_handle_t handles[MAX_DEV];
static fake_handle_t mig_handles[MAX_DEV][MAX_MIG];
/* XID events already delivered per device: each scenario entry is delivered once. */
static int xid_delivered[MAX_DEV];

static void put(section_t *s, const char *key, const char *val) {
    if (s->n >= MAX_KV) return;
    snprintf(s->kv[s->n].key, sizeof s->kv[0].key, "%s", key);
    snprintf(s->kv[s->n].val, sizeof s->kv[0].val, "%s", val);
    s->n++;
}

static scenario_t *parse(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    scenario_t *sc = calloc(1, sizeof *sc);
    section_t *sec = &sc->global;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        char *end = p + strlen(p);
        while (end > p && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ')) *--end = 0;
        if (!*p || *p == '#') continue;
        char *val = p;
        while (*val && *val != ' ' && *val != '\t') val++;
        if (*val) { *val++ = 0; while (*val == ' ' || *val == '\t') val++; }
        if (!strcmp(p, "device")) {
            int i = atoi(val);
            if (i < 0 || i >= MAX_DEV) { sec = &sc->global; continue; }
            if (i + 1 > sc->ndev) sc->ndev = i + 1;
            sec = &sc->dev[i];
        } else if (!strcmp(p, "mig")) {
            int d = -1, m = -1;
            sscanf(val, "%d %d", &d, &m);
            if (d < 0 || d >= MAX_DEV || m < 0 || m >= MAX_MIG) { sec = &sc->global; continue; }
            sc->has_mig[d][m] = 1;
            sec = &sc->mig[d][m];
        } else {
            put(sec, p, val);
        }
    }
    fclose(f);
    return sc;
}

/* The current scenario, re-read when the file changed. NULL: no scenario file. */
static scenario_t *scenario(void) {
    const char *path = getenv("FAKE_NVML_SCENARIO");
    struct stat st;
    pthread_mutex_lock(&lock);
    if (path && stat(path, &st) == 0) {
        if (!current || st.st_size != loaded_size || st.st_ino != loaded_ino ||
            st.st_mtim.tv_sec != loaded_mtime.tv_sec ||
            st.st_mtim.tv_nsec != loaded_mtime.tv_nsec) {
            scenario_t *sc = parse(path);
            if (sc) {
                current = sc;  /* the old one is kept alive on purpose (see top) */
                loaded_size = st.st_size;
                loaded_ino = st.st_ino;
                loaded_mtime = st.st_mtim;
            }
        }
    } else {
        current = NULL;
        loaded_size = -1;
    }
    scenario_t *sc = current;
    pthread_mutex_unlock(&lock);
    return sc;
}

static const char *get(const section_t *s, const char *key) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->kv[i].key, key)) return s->kv[i].val;
    return NULL;
}

static int get_ull(const section_t *s, const char *key, unsigned long long *out) {
    const char *v = get(s, key);
    if (!v) return 0;
    *out = strtoull(v, NULL, 0);
    return 1;
}

static nvmlReturn_t code_of(const char *name) {
    static const struct { const char *n; nvmlReturn_t c; } names[] = {
        {"UNINITIALIZED", 1}, {"INVALID_ARGUMENT", 2}, {"NOT_SUPPORTED", 3},
        {"NO_PERMISSION", 4}, {"NOT_FOUND", 6}, {"INSUFFICIENT_SIZE", 7},
        {"INSUFFICIENT_POWER", 8}, {"DRIVER_NOT_LOADED", 9}, {"TIMEOUT", 10},
        {"IRQ_ISSUE", 11}, {"LIBRARY_NOT_FOUND", 12}, {"CORRUPTED_INFOROM", 14},
        {"FUNCTION_NOT_FOUND", 13}, {"GPU_IS_LOST", 15}, {"RESET_REQUIRED", 16},
        {"LIB_RM_VERSION_MISMATCH", 18}, {"ARGUMENT_VERSION_MISMATCH", 25}, {"UNKNOWN", 999},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(names[i].n, name)) return names[i].c;
    return atoi(name) ? atoi(name) : NVML_ERROR_UNKNOWN;
}

static void sleep_us(unsigned long long us) {
    struct timespec ts = {(time_t)(us / 1000000ULL), (long)(us % 1000000ULL) * 1000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* Applies the global per-call delay and checks initialisation. */
static nvmlReturn_t enter(scenario_t **out) {
    scenario_t *sc = scenario();
    unsigned long long delay;
    if (sc && get_ull(&sc->global, "call_delay_us", &delay) && delay) sleep_us(delay);
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!sc) return NVML_ERROR_DRIVER_NOT_LOADED;
    const char *init_error = get(&sc->global, "init_error");
    if (init_error) return code_of(init_error);  /* the driver went away under us */
    *out = sc;
    return NVML_SUCCESS;
}

/* Per-device injection: `lost 1`, `error <function|*> <CODE>`, `hang <function|*> <s>`. */
static nvmlReturn_t inject(const section_t *s, const char *fn) {
    const char *lost = get(s, "lost");
    if (lost && atoi(lost)) return NVML_ERROR_GPU_IS_LOST;
    for (int i = 0; i < s->n; i++) {
        const kv_t *kv = &s->kv[i];
        char name[128], arg[64];
        if (strcmp(kv->key, "hang") && strcmp(kv->key, "error")) continue;
        if (sscanf(kv->val, "%127s %63s", name, arg) != 2) continue;
        if (strcmp(name, fn) && strcmp(name, "*")) continue;
        if (!strcmp(kv->key, "hang")) sleep_us((unsigned long long)(atof(arg) * 1e6));
        else return code_of(arg);
    }
    return NVML_SUCCESS;
}

/* Resolves a handle to its scenario section after injection for function `fn`. */
static nvmlReturn_t device(nvmlDevice_t h, const char *fn, const section_t **out) {
    scenario_t *sc;
    nvmlReturn_t r = enter(&sc);
    if (r) return r;
    if (!h || h->magic != 0x4e564d4c) return NVML_ERROR_INVALID_ARGUMENT;
    if ((int)h->dev >= sc->ndev) return NVML_ERROR_GPU_IS_LOST;  /* the handle is gone */
    const section_t *parent = &sc->dev[h->dev];
    if ((r = inject(parent, fn))) return r;
    if (h->mig) {
        if (!sc->has_mig[h->dev][h->mig - 1]) return NVML_ERROR_INVALID_ARGUMENT;
        *out = &sc->mig[h->dev][h->mig - 1];
        if ((r = inject(*out, fn))) return r;
    } else {
        *out = parent;
    }
    return NVML_SUCCESS;
}

#define DEVICE(fn) \
    const section_t *s; nvmlReturn_t r_ = device(dev, fn, &s); if (r_) return r_;

/* A string value as the driver would hand it out: `\xNN` in the scenario is the byte NN,
 * so that a scenario can give bytes that are not UTF-8 (a corrupt or foreign name). */
static nvmlReturn_t copy_str(const char *v, char *buf, unsigned int len) {
    char out[512];
    size_t n = 0;
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    for (const char *p = v; *p && n + 1 < sizeof out; n++) {
        unsigned int byte;
        if (p[0] == '\\' && p[1] == 'x' && sscanf(p + 2, "%2x", &byte) == 1 && byte) {
            out[n] = (char)byte;
            p += 4;
        } else {
            out[n] = *p++;
        }
    }
    out[n] = 0;
    if (n + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, out, n + 1);
    return NVML_SUCCESS;
}

static nvmlReturn_t uint_of(const section_t *s, const char *key, unsigned int *out) {
    unsigned long long v;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (!get_ull(s, key, &v)) return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned int)v;
    return NVML_SUCCESS;
}

static nvmlReturn_t ull_of(const section_t *s, const char *key, unsigned long long *out) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    return get_ull(s, key, out) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* ---- init ------------------------------------------------------------------------- */
static nvmlReturn_t do_init(void) {
    scenario_t *sc = scenario();
    if (!sc) return NVML_ERROR_DRIVER_NOT_LOADED;
    unsigned long long delay;
    if (get_ull(&sc->global, "call_delay_us", &delay) && delay) sleep_us(delay);
    const char *err = get(&sc->global, "init_error");
    if (err) return code_of(err);
    for (int i = 0; i < MAX_DEV; i++) {
        handles[i] = (fake_handle_t){0x4e564d4c, (unsigned)i, 0};
        for (int m = 0; m < MAX_MIG; m++)
            mig_handles[i][m] = (fake_handle_t){0x4e564d4c, (unsigned)i, (unsigned)m + 1};
    }
    __atomic_add_fetch(&initialised, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return do_init(); }
nvmlReturn_t nvmlInit(void) { return do_init(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return do_init(); }

nvmlReturn_t nvmlShutdown(void) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    __atomic_sub_fetch(&initialised, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

/* ---- system ----------------------------------------------------------------------- */
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    scenario_t *sc;
    nvmlReturn_t r = enter(&sc);
    return r ? r : copy_str(get(&sc->global, "driver_version"), version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    scenario_t *sc;
    nvmlReturn_t r = enter(&sc);
    return r ? r : copy_str(get(&sc->global, "nvml_version"), version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    scenario_t *sc;
    unsigned long long x;
    nvmlReturn_t r = enter(&sc);
    if (r) return r;
    if (!get_ull(&sc->global, "cuda_driver_version", &x)) return NVML_ERROR_NOT_SUPPORTED;
    *v = (int)x;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    scenario_t *sc;
    nvmlReturn_t r = enter(&sc);
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned int)sc->ndev;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
    scenario_t *sc;
    nvmlReturn_t r = enter(&sc);
    if (r) return r;
    if (!dev || (int)index >= sc->ndev) return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = inject(&sc->dev[index], "nvmlDeviceGetHandleByIndex_v2"))) return r;
    *dev = &handles[index];
    return NVML_SUCCESS;
}

/* ---- identity --------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index) {
    DEVICE("nvmlDeviceGetIndex");
    (void)s;
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = dev->dev;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length) {
    DEVICE("nvmlDeviceGetName");
    return copy_str(get(s, "name"), name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int length) {
    DEVICE("nvmlDeviceGetUUID");
    return copy_str(get(s, "uuid"), uuid, length);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t dev, char *serial, unsigned int length) {
    DEVICE("nvmlDeviceGetSerial");
    return copy_str(get(s, "serial"), serial, length);
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t dev, char *v, unsigned int length) {
    DEVICE("nvmlDeviceGetVbiosVersion");
    return copy_str(get(s, "vbios"), v, length);
}

nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t dev, char *v, unsigned int length) {
    DEVICE("nvmlDeviceGetBoardPartNumber");
    return copy_str(get(s, "board_part_number"), v, length);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci) {
    DEVICE("nvmlDeviceGetPciInfo_v3");
    const char *bus_id = get(s, "pci_bus_id");
    if (!bus_id) return NVML_ERROR_NOT_SUPPORTED;
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", bus_id);
    /* the legacy field holds the short form, 0000:3B:00.0 */
    const char *colon = strchr(bus_id, ':');
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s",
             colon && colon - bus_id > 4 ? colon - 4 : bus_id);
    sscanf(bus_id, "%x:%x:%x", &pci->domain, &pci->bus, &pci->device);
    unsigned long long id;
    if (get_ull(s, "pci_device_id", &id)) pci->pciDeviceId = (unsigned int)id;
    if (get_ull(s, "pci_subsystem_id", &id)) pci->pciSubSystemId = (unsigned int)id;
    return NVML_SUCCESS;
}

/* ---- values ----------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *u) {
    DEVICE("nvmlDeviceGetUtilizationRates");
    unsigned long long g, m;
    if (!get_ull(s, "util_gpu", &g) || !get_ull(s, "util_memory", &m))
        return NVML_ERROR_NOT_SUPPORTED;
    if (!u) return NVML_ERROR_INVALID_ARGUMENT;
    u->gpu = (unsigned int)g;
    u->memory = (unsigned int)m;
    return NVML_SUCCESS;
}

static nvmlReturn_t codec_util(const section_t *s, const char *key, unsigned int *util,
                               unsigned int *period) {
    nvmlReturn_t r = uint_of(s, key, util);
    if (r) return r;
    if (!period) return NVML_ERROR_INVALID_ARGUMENT;
    *period = 167000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t dev, unsigned int *u,
                                             unsigned int *period) {
    DEVICE("nvmlDeviceGetEncoderUtilization");
    return codec_util(s, "util_encoder", u, period);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t dev, unsigned int *u,
                                             unsigned int *period) {
    DEVICE("nvmlDeviceGetDecoderUtilization");
    return codec_util(s, "util_decoder", u, period);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m) {
    DEVICE("nvmlDeviceGetMemoryInfo");
    unsigned long long total, used, reserved = 0;
    if (!get_ull(s, "memory_total", &total) || !get_ull(s, "memory_used", &used))
        return NVML_ERROR_NOT_SUPPORTED;
    get_ull(s, "memory_reserved", &reserved);
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    /* v1 counts the driver's reservation as used, as the real v1 does */
    m->total = total;
    m->used = used + reserved;
    m->free = total - used - reserved;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m) {
    DEVICE("nvmlDeviceGetMemoryInfo_v2");
    unsigned long long total, used, reserved = 0;
    if (!get_ull(s, "memory_total", &total) || !get_ull(s, "memory_used", &used))
        return NVML_ERROR_NOT_SUPPORTED;
    get_ull(s, "memory_reserved", &reserved);
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != 0x02000028) return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    m->total = total;
    m->reserved = reserved;
    m->used = used;
    m->free = total - used - reserved;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned int *mw) {
    DEVICE("nvmlDeviceGetPowerUsage");
    return uint_of(s, "power_usage_mw", mw);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t dev, unsigned int *mw) {
    DEVICE("nvmlDeviceGetEnforcedPowerLimit");
    return uint_of(s, "power_limit_mw", mw);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t dev, unsigned long long *mj) {
    DEVICE("nvmlDeviceGetTotalEnergyConsumption");
    return ull_of(s, "energy_mj", mj);
}

static const char *sensor_key(int sensor) { return sensor == 0 ? "temp_gpu" : NULL; }

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, int sensor, unsigned int *t) {
    DEVICE("nvmlDeviceGetTemperature");
    if (!sensor_key(sensor)) return NVML_ERROR_INVALID_ARGUMENT;
    return uint_of(s, sensor_key(sensor), t);
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t dev, nvmlTemperature_v1_t *t) {
    DEVICE("nvmlDeviceGetTemperatureV");
    unsigned int v;
    if (!t) return NVML_ERROR_INVALID_ARGUMENT;
    if (t->version != 0x100000C) return 25;
    if (!sensor_key(t->sensorType)) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = uint_of(s, sensor_key(t->sensorType), &v);
    if (!r) t->temperature = (int)v;
    return r;
}

nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t dev, unsigned int *n) {
    DEVICE("nvmlDeviceGetNumFans");
    if (!n) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int count = 0;
    for (int i = 0; i < s->n; i++) count += !strcmp(s->kv[i].key, "fan");
    if (!count) return NVML_ERROR_NOT_SUPPORTED;  /* passively cooled boards */
    *n = count;
    return NVML_SUCCESS;
}

/* `fan <percent>` lines, in fan order. */
nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t dev, unsigned int fan, unsigned int *pct) {
    DEVICE("nvmlDeviceGetFanSpeed_v2");
    unsigned int k = 0;
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->kv[i].key, "fan")) continue;
        if (k++ == fan) {
            if (!pct) return NVML_ERROR_INVALID_ARGUMENT;
            *pct = (unsigned int)strtoul(s->kv[i].val, NULL, 0);
            return NVML_SUCCESS;
        }
    }
    return k ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t dev, unsigned int *pct) {
    return nvmlDeviceGetFanSpeed_v2(dev, 0, pct);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, int type, unsigned int *mhz) {
    static const char *keys[] = {"clock_graphics_mhz", "clock_sm_mhz", "clock_memory_mhz",
                                 "clock_video_mhz"};
    DEVICE("nvmlDeviceGetClockInfo");
    if (type < 0 || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    return uint_of(s, keys[type], mhz);
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int error_type, int counter_type,
                                         unsigned long long *count) {
    DEVICE("nvmlDeviceGetTotalEccErrors");
    if (counter_type != 0) return NVML_ERROR_NOT_SUPPORTED;  /* volatile only */
    return ull_of(s, error_type == 0 ? "ecc_corrected" : "ecc_uncorrected", count);
}

/* `ecc_mode 0/1`: current and pending mode; no key = a board without ECC memory. */
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t dev, int *current_mode, int *pending) {
    DEVICE("nvmlDeviceGetEccMode");
    unsigned long long mode;
    if (!current_mode || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (!get_ull(s, "ecc_mode", &mode)) return NVML_ERROR_NOT_SUPPORTED;
    *current_mode = (int)mode;
    *pending = (int)mode;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t dev, unsigned int *v) {
    DEVICE("nvmlDeviceGetPcieReplayCounter");
    return uint_of(s, "pcie_replay", v);
}

/* Row remapping as its own function: needs all four `remapped_rows_*` keys. */
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failure) {
    DEVICE("nvmlDeviceGetRemappedRows");
    if (!corr || !unc || !pending || !failure) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = uint_of(s, "remapped_rows_corrected", corr);
    if (r == NVML_SUCCESS) r = uint_of(s, "remapped_rows_uncorrected", unc);
    if (r == NVML_SUCCESS) r = uint_of(s, "remapped_rows_pending", pending);
    if (r == NVML_SUCCESS) r = uint_of(s, "remapped_rows_failure", failure);
    return r;
}

/* Virtualization: `virtualization_mode N` (nvmlGpuVirtualizationMode_t: 0 none,
 * 1 passthrough, 2 vGPU guest, 3 vGPU host); absent: NOT_SUPPORTED. */
nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t dev, unsigned int *mode) {
    DEVICE("nvmlDeviceGetVirtualizationMode");
    return uint_of(s, "virtualization_mode", mode);
}

/* A vGPU guest's licence: `vgpu_licensed 0/1` gives one licensable feature, the vGPU
 * (featureCode 1), in that state; absent: NOT_SUPPORTED. Layout of nvml.h's v4. */
typedef struct {
    unsigned int year;
    unsigned short month, day, hour, min, sec;
    unsigned char status;
} grid_license_expiry_t;
typedef struct {
    unsigned int featureCode, featureState;
    char licenseInfo[128], productName[128];
    unsigned int featureEnabled;
    grid_license_expiry_t licenseExpiry;
} grid_feature_t;
typedef struct {
    int isGridLicenseSupported;
    unsigned int licensableFeaturesCount;
    grid_feature_t gridLicensableFeatures[3];
} grid_features_t;

nvmlReturn_t nvmlDeviceGetGridLicensableFeatures_v4(nvmlDevice_t dev, grid_features_t *g) {
    DEVICE("nvmlDeviceGetGridLicensableFeatures_v4");
    unsigned long long licensed;
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    if (!get_ull(s, "vgpu_licensed", &licensed)) return NVML_ERROR_NOT_SUPPORTED;
    memset(g, 0, sizeof *g);
    g->isGridLicenseSupported = 1;
    g->licensableFeaturesCount = 1;
    g->gridLicensableFeatures[0].featureCode = 1;  /* NVML_GRID_LICENSE_FEATURE_CODE_VGPU */
    g->gridLicensableFeatures[0].featureState = licensed ? 1 : 0;
    g->gridLicensableFeatures[0].featureEnabled = 1;
    snprintf(g->gridLicensableFeatures[0].productName, 128, "NVIDIA Virtual Compute Server");
    return NVML_SUCCESS;
}

/* PCIe link: `pcie_gen_current`, `pcie_gen_max` (the most this GPU and its slot allow),
 * `pcie_gen_gpu_max` (the GPU alone), `pcie_width_current`, `pcie_width_max` (GPU and
 * slot). The speeds follow from the generations. */
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t dev, unsigned int *gen) {
    DEVICE("nvmlDeviceGetCurrPcieLinkGeneration");
    return uint_of(s, "pcie_gen_current", gen);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t dev, unsigned int *gen) {
    DEVICE("nvmlDeviceGetMaxPcieLinkGeneration");
    return uint_of(s, "pcie_gen_max", gen);
}

nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t dev, unsigned int *gen) {
    DEVICE("nvmlDeviceGetGpuMaxPcieLinkGeneration");
    return uint_of(s, "pcie_gen_gpu_max", gen);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t dev, unsigned int *width) {
    DEVICE("nvmlDeviceGetCurrPcieLinkWidth");
    return uint_of(s, "pcie_width_current", width);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t dev, unsigned int *width) {
    DEVICE("nvmlDeviceGetMaxPcieLinkWidth");
    return uint_of(s, "pcie_width_max", width);
}

/* MT/s per lane of PCIe generations 1..6, and NVML_PCIE_LINK_MAX_SPEED_* (1..6). */
static const unsigned int gen_mtps[] = {0, 2500, 5000, 8000, 16000, 32000, 64000};

nvmlReturn_t nvmlDeviceGetPcieSpeed(nvmlDevice_t dev, unsigned int *mbps) {
    DEVICE("nvmlDeviceGetPcieSpeed");
    unsigned int gen;
    nvmlReturn_t r = uint_of(s, "pcie_gen_current", &gen);
    if (r) return r;
    if (!mbps) return NVML_ERROR_INVALID_ARGUMENT;
    *mbps = gen < 7 ? gen_mtps[gen] : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieLinkMaxSpeed(nvmlDevice_t dev, unsigned int *speed) {
    DEVICE("nvmlDeviceGetPcieLinkMaxSpeed");
    unsigned int gen;
    nvmlReturn_t r = uint_of(s, "pcie_gen_max", &gen);
    if (r) return r;
    if (!speed) return NVML_ERROR_INVALID_ARGUMENT;
    *speed = gen < 7 ? gen : 0;
    return NVML_SUCCESS;
}

static nvmlReturn_t clock_reasons(const section_t *s, unsigned long long *reasons) {
    return ull_of(s, "clocks_event_reasons", reasons);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev,
                                                    unsigned long long *reasons) {
    DEVICE("nvmlDeviceGetCurrentClocksEventReasons");
    return clock_reasons(s, reasons);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t dev,
                                                       unsigned long long *reasons) {
    DEVICE("nvmlDeviceGetCurrentClocksThrottleReasons");
    return clock_reasons(s, reasons);
}

/* Field values: each id maps to a scenario key; a missing key answers NOT_SUPPORTED in
 * that entry's nvmlReturn, like a driver without the counter. `field_error <id> <CODE>`
 * injects an error into one entry. */
static const struct { unsigned int id; const char *key; int type; } fields[] = {
    {1, "ecc_mode", VALUE_UINT},
    {3, "ecc_corrected", VALUE_ULL},
    {4, "ecc_uncorrected", VALUE_ULL},
    {29, "retired_pages_corrected", VALUE_UINT},   /* NVML_FI_DEV_RETIRED_SBE */
    {30, "retired_pages_uncorrected", VALUE_UINT}, /* NVML_FI_DEV_RETIRED_DBE */
    {31, "retired_pages_pending", VALUE_UINT},
    {82, "temp_memory", VALUE_UINT},
    {83, "energy_mj", VALUE_ULL},
    {94, "pcie_replay", VALUE_UINT},
    {142, "remapped_rows_corrected", VALUE_UINT},
    {143, "remapped_rows_uncorrected", VALUE_UINT},
    {144, "remapped_rows_pending", VALUE_UINT},
    {145, "remapped_rows_failure", VALUE_UINT},
    {173, "pcie_correctable_errors", VALUE_ULL},
    {179, "pcie_nonfatal_errors", VALUE_ULL},
    {180, "pcie_fatal_errors", VALUE_ULL},
    {197, "pcie_tx_bytes", VALUE_ULL},
    {198, "pcie_rx_bytes", VALUE_ULL},
    /* NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: nvmlDeviceGpuRecoveryAction_t, any number */
    {230, "recovery_action", VALUE_UINT},
};

/* ---- NVLink ------------------------------------------------------------------------ */
/* One `nvlink <state> <tx_kib> <rx_kib> <crc_flit> <crc_data> <replay> <recovery>
 * <ecc_data>` line per link, in link order; state: active, inactive, sleep,
 * active_traffic_disabled (NVML_NVLINK_STATE_*, 0..3 as numbers too). The field values
 * answer as the real library does: the link count, per-link state and DL error counters
 * with the link in scopeId, throughput per link or summed over all links (scopeId
 * 0xFFFFFFFF), error totals over all links. A device without `nvlink` lines answers
 * NOT_SUPPORTED to every NVLink field, like a GPU without NVLink. */
enum { NVL_STATE, NVL_TX, NVL_RX, NVL_CRC_FLIT, NVL_CRC_DATA, NVL_REPLAY, NVL_RECOVERY,
       NVL_ECC_DATA, NVL_COLUMNS };
#define MAX_NVLINK 36  /* NVML_NVLINK_MAX_LINKS */
#define ALL_LINKS 0xFFFFFFFFu

static int nvlinks(const section_t *s, unsigned long long links[][NVL_COLUMNS]) {
    static const char *states[] = {"inactive", "active", "sleep", "active_traffic_disabled"};
    int n = 0;
    for (int i = 0; i < s->n && n < MAX_NVLINK; i++) {
        char state[32];
        unsigned long long *l = links[n];
        if (strcmp(s->kv[i].key, "nvlink")) continue;
        if (sscanf(s->kv[i].val, "%31s %llu %llu %llu %llu %llu %llu %llu", state, &l[NVL_TX],
                   &l[NVL_RX], &l[NVL_CRC_FLIT], &l[NVL_CRC_DATA], &l[NVL_REPLAY],
                   &l[NVL_RECOVERY], &l[NVL_ECC_DATA]) != 8) continue;
        l[NVL_STATE] = strtoull(state, NULL, 0);
        for (unsigned k = 0; k < sizeof states / sizeof states[0]; k++)
            if (!strcmp(state, states[k])) l[NVL_STATE] = k;
        n++;
    }
    return n;
}

/* fieldId -> (column, how the scope is read) */
enum { PER_LINK, LINK_OR_ALL, TOTAL };
static const struct { unsigned int id; int column, scope; } nvlink_fields[] = {
    {165, NVL_STATE, PER_LINK},       /* NVML_FI_DEV_NVLINK_GET_STATE */
    {161, NVL_REPLAY, PER_LINK},      /* NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY */
    {162, NVL_RECOVERY, PER_LINK},    /* NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY */
    {163, NVL_CRC_FLIT, PER_LINK},    /* NVML_FI_DEV_NVLINK_ERROR_DL_CRC */
    {138, NVL_TX, LINK_OR_ALL},       /* NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX (KiB) */
    {139, NVL_RX, LINK_OR_ALL},       /* NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX (KiB) */
    {38, NVL_CRC_FLIT, TOTAL},        /* ..._CRC_FLIT_ERROR_COUNT_TOTAL */
    {45, NVL_CRC_DATA, TOTAL},        /* ..._CRC_DATA_ERROR_COUNT_TOTAL */
    {52, NVL_REPLAY, TOTAL},          /* ..._REPLAY_ERROR_COUNT_TOTAL */
    {59, NVL_RECOVERY, TOTAL},        /* ..._RECOVERY_ERROR_COUNT_TOTAL */
    {160, NVL_ECC_DATA, TOTAL},       /* ..._ECC_DATA_ERROR_COUNT_TOTAL */
};

/* 1: fv is an NVLink field (answered); 0: not one. */
static int nvlink_field(const section_t *s, nvmlFieldValue_t *fv) {
    unsigned long long links[MAX_NVLINK][NVL_COLUMNS];
    int n = -1;
    if (fv->fieldId == 91) {  /* NVML_FI_DEV_NVLINK_LINK_COUNT */
        n = nvlinks(s, links);
        fv->nvmlReturn = n ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
        fv->valueType = VALUE_UINT;
        fv->value.uiVal = (unsigned int)n;
        return 1;
    }
    for (size_t f = 0; f < sizeof nvlink_fields / sizeof nvlink_fields[0]; f++) {
        if (nvlink_fields[f].id != fv->fieldId) continue;
        n = nvlinks(s, links);
        int col = nvlink_fields[f].column, scope = nvlink_fields[f].scope;
        unsigned long long v = 0;
        fv->nvmlReturn = NVML_SUCCESS;
        if (!n) {
            fv->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        } else if (scope == TOTAL || (scope == LINK_OR_ALL && fv->scopeId == ALL_LINKS)) {
            for (int l = 0; l < n; l++) v += links[l][col];
        } else if (fv->scopeId < (unsigned int)n) {
            v = links[fv->scopeId][col];
        } else {
            fv->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;  /* no such link */
        }
        fv->valueType = col == NVL_STATE ? VALUE_UINT : VALUE_ULL;
        if (col == NVL_STATE) fv->value.uiVal = (unsigned int)v;
        else fv->value.ullVal = v;
        return 1;
    }
    return 0;
}

/* ---- power scopes ------------------------------------------------------------------ */
/* NVML_FI_DEV_POWER_AVERAGE (185) and _INSTANT (186) in mW, by the power scope in
 * scopeId (NVML_POWER_SCOPE_GPU 0, _MODULE 1: the superchip, Grace and its GPUs, on
 * GH200/GB200; _MEMORY 2): keys `module_power_mw` and `memory_power_mw`; the GPU scope
 * answers `power_usage_mw`. A scope without its key answers NOT_SUPPORTED. 1: answered. */
static int power_scope_field(const section_t *s, nvmlFieldValue_t *fv) {
    static const char *keys[] = {"power_usage_mw", "module_power_mw", "memory_power_mw"};
    unsigned long long v;
    if (fv->fieldId != 185 && fv->fieldId != 186) return 0;
    fv->valueType = VALUE_UINT;
    fv->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    if (fv->scopeId < sizeof keys / sizeof keys[0] && get_ull(s, keys[fv->scopeId], &v)) {
        fv->value.uiVal = (unsigned int)v;
        fv->nvmlReturn = NVML_SUCCESS;
    }
    return 1;
}

/* nvmlPlatformInfo_v1/v2: version, two 16-byte ids, then five one-byte fields of which
 * moduleId is the last (the GB200 module the GPU sits on); key `module_id`. */
typedef struct {
    unsigned int version;
    unsigned char ibGuid[16], chassisSerialNumber[16];
    unsigned char slotNumber, trayIndex, hostId, peerType, moduleId;
} nvmlPlatformInfo_t;

nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t dev, nvmlPlatformInfo_t *info) {
    DEVICE("nvmlDeviceGetPlatformInfo");
    unsigned long long module;
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != 0x100002c && info->version != 0x200002c) return 25;
    if (!get_ull(s, "module_id", &module)) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    info->moduleId = (unsigned char)module;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t dev, int count, nvmlFieldValue_t *values) {
    DEVICE("nvmlDeviceGetFieldValues");
    if (count < 0 || (count && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *fv = &values[i];
        fv->timestamp = (long long)now.tv_sec * 1000000LL + now.tv_nsec / 1000;
        fv->latencyUsec = 0;
        fv->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        for (int k = 0; k < s->n; k++) {
            unsigned int id;
            char code[64];
            if (!strcmp(s->kv[k].key, "field_error") &&
                sscanf(s->kv[k].val, "%u %63s", &id, code) == 2 && id == fv->fieldId) {
                fv->nvmlReturn = code_of(code);
                goto next;
            }
        }
        if (nvlink_field(s, fv)) continue;
        if (power_scope_field(s, fv)) continue;
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
            unsigned long long v;
            if (fields[f].id != fv->fieldId || !get_ull(s, fields[f].key, &v)) continue;
            fv->valueType = fields[f].type;
            if (fields[f].type == VALUE_UINT) fv->value.uiVal = (unsigned int)v;
            else fv->value.ullVal = v;
            fv->nvmlReturn = NVML_SUCCESS;
        }
    next:;
    }
    return NVML_SUCCESS;
}

/* ---- MIG -------------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned int *current_mode,
                                  unsigned int *pending) {
    DEVICE("nvmlDeviceGetMigMode");
    if (dev->mig) return NVML_ERROR_NOT_SUPPORTED;
    nvmlReturn_t r = uint_of(s, "mig_mode", current_mode);
    if (r) return r;
    if (!pending) return NVML_ERROR_INVALID_ARGUMENT;
    *pending = *current_mode;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t dev, unsigned int *count) {
    DEVICE("nvmlDeviceGetMaxMigDeviceCount");
    unsigned long long mode = 0;
    if (!get_ull(s, "mig_mode", &mode)) return NVML_ERROR_NOT_SUPPORTED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = MAX_MIG - 1;  /* 7 on A100/H100 */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t dev, unsigned int index,
                                                 nvmlDevice_t *mig) {
    DEVICE("nvmlDeviceGetMigDeviceHandleByIndex");
    (void)s;
    scenario_t *sc = scenario();
    if (!sc) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (dev->mig || index >= MAX_MIG || !mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (!sc->has_mig[dev->dev][index]) return NVML_ERROR_NOT_FOUND;
    *mig = &mig_handles[dev->dev][index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t dev, unsigned int *is_mig) {
    DEVICE("nvmlDeviceIsMigDeviceHandle");
    (void)s;
    if (!is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = dev->mig ? 1 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t dev,
                                                          nvmlDevice_t *parent) {
    DEVICE("nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    (void)s;
    if (!dev->mig || !parent) return NVML_ERROR_INVALID_ARGUMENT;
    *parent = &handles[dev->dev];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t dev, unsigned int *id) {
    DEVICE("nvmlDeviceGetGpuInstanceId");
    if (!dev->mig) return NVML_ERROR_INVALID_ARGUMENT;
    return uint_of(s, "gpu_instance_id", id);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t dev, unsigned int *id) {
    DEVICE("nvmlDeviceGetComputeInstanceId");
    if (!dev->mig) return NVML_ERROR_INVALID_ARGUMENT;
    return uint_of(s, "compute_instance_id", id);
}

/* ---- GPM (GPU Performance Monitoring, Hopper and newer) ---------------------------- */
/* As the real library does it: a sample is an opaque buffer the caller allocates; a
 * sample read copies the GPU's (or one GPU instance's) cumulative activity counters into
 * it; nvmlGpmMetricsGet turns two samples of the same target into percentages over the
 * time between them, with a return code per metric.
 *
 * Scenario: `gpm_supported 1` on a device (nvmlGpmQueryDeviceSupport; absent: a GPU
 * without GPM), `gpm <metric id> <percent>` for the whole GPU and
 * `gpm_gi <gpu instance id> <metric id> <percent>` for a MIG GPU instance (`nan` is a
 * value too), `gpm_error [gi] <metric id> <CODE>` for one metric's return code
 * (`gpm_error 5 NOT_SUPPORTED`, `gpm_gi_error 3 5 UNKNOWN`). A metric with no line
 * answers NOT_SUPPORTED in its own entry. Global `gpm_version 2`: this driver expects
 * version 2 of the GPM structs (the bindings send 1: ARGUMENT_VERSION_MISMATCH);
 * `gpm_metric_max 98`: the highest metric id + 1 this driver knows (default 333).
 *
 * Counters: per target (a GPU, or a GPU instance of it) and metric, activity in
 * hundredths of a percent times nanoseconds, integrated at each sample read with the
 * percentage the scenario gives then. Integers, so a constant percentage comes back
 * exactly over any window. */
#define GPM_MAGIC 0x47504d53u
#define GPM_IDS 64          /* metric ids a counter is kept for (1..63) */
#define GPM_TARGETS 17      /* the whole GPU, then GPU instances 0..15 */
#define GPM_DEFAULT_MAX 333 /* NVML_GPM_METRIC_MAX of the nvml.h this fake follows */
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25

typedef struct nvmlGpmSample_st {
    unsigned int magic;
    int taken;
    int dev, target;                   /* target 0: the GPU; 1 + gi: a GPU instance */
    unsigned long long ns;             /* CLOCK_MONOTONIC when read */
    unsigned long long acc[GPM_IDS];   /* cumulative counters at that time */
    unsigned char nan[GPM_IDS];        /* the scenario said nan: a window ending here is NaN */
} gpm_sample_data_t;

typedef struct { struct nvmlGpmSample_st *handle; } nvmlGpmSample_t;
typedef struct { char *shortName; char *longName; char *unit; } nvmlGpmMetricMetricInfo_t;
typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    nvmlGpmMetricMetricInfo_t metricInfo;
} nvmlGpmMetric_t;
typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[GPM_DEFAULT_MAX];  /* the caller's array may be longer */
} nvmlGpmMetricsGet_t;
typedef struct { unsigned int version; unsigned int isSupportedDevice; } nvmlGpmSupport_t;

static struct {
    unsigned long long last_ns;
    unsigned long long acc[GPM_IDS];
} gpm_state[MAX_DEV][GPM_TARGETS];

static unsigned int gpm_version(const scenario_t *sc) {
    unsigned long long v = 1;
    get_ull(&sc->global, "gpm_version", &v);
    return (unsigned int)v;
}

/* The percentage the scenario gives `id` on a target now: 1 and *pct, or 0 (no line). */
static int gpm_percent(const section_t *s, int target, unsigned int id, double *pct) {
    for (int i = 0; i < s->n; i++) {
        unsigned int gi, mid;
        char v[64];
        if (target == 0 && !strcmp(s->kv[i].key, "gpm") &&
            sscanf(s->kv[i].val, "%u %63s", &mid, v) == 2 && mid == id) {
            *pct = strtod(v, NULL);
            return 1;
        }
        if (target > 0 && !strcmp(s->kv[i].key, "gpm_gi") &&
            sscanf(s->kv[i].val, "%u %u %63s", &gi, &mid, v) == 3 &&
            (int)gi + 1 == target && mid == id) {
            *pct = strtod(v, NULL);
            return 1;
        }
    }
    return 0;
}

/* `gpm_error <id> <CODE>` / `gpm_gi_error <gi> <id> <CODE>`: 0 when none. */
static nvmlReturn_t gpm_metric_error(const section_t *s, int target, unsigned int id) {
    for (int i = 0; i < s->n; i++) {
        unsigned int gi, mid;
        char code[64];
        if (target == 0 && !strcmp(s->kv[i].key, "gpm_error") &&
            sscanf(s->kv[i].val, "%u %63s", &mid, code) == 2 && mid == id)
            return code_of(code);
        if (target > 0 && !strcmp(s->kv[i].key, "gpm_gi_error") &&
            sscanf(s->kv[i].val, "%u %u %63s", &gi, &mid, code) == 3 &&
            (int)gi + 1 == target && mid == id)
            return code_of(code);
    }
    return NVML_SUCCESS;
}

static int gpm_supported(const section_t *parent) {
    unsigned long long v = 0;
    return get_ull(parent, "gpm_supported", &v) && v;
}

/* A GPU instance exists when a MIG device lives in it or the scenario gives it values. */
static int gpm_gi_exists(const scenario_t *sc, int dev, unsigned int gi) {
    const section_t *s = &sc->dev[dev];
    for (int m = 0; m < MAX_MIG; m++) {
        unsigned long long id;
        if (sc->has_mig[dev][m] && get_ull(&sc->mig[dev][m], "gpu_instance_id", &id) &&
            id == gi)
            return 1;
    }
    for (int i = 0; i < s->n; i++) {
        unsigned int g;
        if ((!strcmp(s->kv[i].key, "gpm_gi") || !strcmp(s->kv[i].key, "gpm_gi_error")) &&
            sscanf(s->kv[i].val, "%u", &g) == 1 && g == gi)
            return 1;
    }
    return 0;
}

static unsigned long long monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/* The percentages the scenario gives a target now, one pass over its lines: pct[id] set
 * where have[id]. */
static void gpm_percents(const section_t *s, int target, double *pct, unsigned char *have) {
    memset(have, 0, GPM_IDS);
    for (int i = 0; i < s->n; i++) {
        unsigned int gi, id;
        char v[64];
        if (target == 0 && !strcmp(s->kv[i].key, "gpm")) {
            if (sscanf(s->kv[i].val, "%u %63s", &id, v) != 2) continue;
        } else if (target > 0 && !strcmp(s->kv[i].key, "gpm_gi")) {
            if (sscanf(s->kv[i].val, "%u %u %63s", &gi, &id, v) != 3 || (int)gi + 1 != target)
                continue;
        } else {
            continue;
        }
        if (id == 0 || id >= GPM_IDS || have[id]) continue;  /* the first line wins */
        pct[id] = strtod(v, NULL);
        have[id] = 1;
    }
}

/* Integrates the target's counters up to now and copies them into the sample. */
static void gpm_read(const section_t *parent, int dev, int target, gpm_sample_data_t *out) {
    double pct[GPM_IDS];
    unsigned char have[GPM_IDS];
    gpm_percents(parent, target, pct, have);
    pthread_mutex_lock(&lock);
    unsigned long long now = monotonic_ns();
    unsigned long long dt = gpm_state[dev][target].last_ns ? now - gpm_state[dev][target].last_ns
                                                           : 0;
    gpm_state[dev][target].last_ns = now;
    for (unsigned int id = 1; id < GPM_IDS; id++) {
        out->nan[id] = 0;
        if (have[id]) {
            if (__builtin_isnan(pct[id])) out->nan[id] = 1;
            else gpm_state[dev][target].acc[id] +=
                (unsigned long long)(pct[id] * 100.0 + 0.5) * dt;
        }
        out->acc[id] = gpm_state[dev][target].acc[id];
    }
    pthread_mutex_unlock(&lock);
    out->ns = now;
    out->dev = dev;
    out->target = target;
    out->taken = 1;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    scenario_t *sc;
    nvmlReturn_t r = enter(&sc);
    if (r) return r;
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    sample->handle = calloc(1, sizeof *sample->handle);
    if (!sample->handle) return 20; /* NVML_ERROR_MEMORY */
    sample->handle->magic = GPM_MAGIC;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    if (!sample.handle || sample.handle->magic != GPM_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    sample.handle->magic = 0;
    free(sample.handle);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t dev, nvmlGpmSupport_t *support) {
    DEVICE("nvmlGpmQueryDeviceSupport");
    if (!support) return NVML_ERROR_INVALID_ARGUMENT;
    scenario_t *sc = scenario();
    if (!sc) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (support->version != gpm_version(sc)) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = (unsigned int)gpm_supported(dev->mig ? &sc->dev[dev->dev] : s);
    return NVML_SUCCESS;
}

/* A MIG device handle samples its GPU instance, as the real library allows. */
nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t dev, nvmlGpmSample_t sample) {
    DEVICE("nvmlGpmSampleGet");
    scenario_t *sc = scenario();
    if (!sc) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (!sample.handle || sample.handle->magic != GPM_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    const section_t *parent = &sc->dev[dev->dev];
    if (!gpm_supported(parent)) return NVML_ERROR_NOT_SUPPORTED;
    int target = 0;
    if (dev->mig) {
        unsigned long long gi;
        if (!get_ull(s, "gpu_instance_id", &gi) || gi >= GPM_TARGETS - 1)
            return NVML_ERROR_NOT_SUPPORTED;
        target = (int)gi + 1;
    }
    gpm_read(parent, (int)dev->dev, target, sample.handle);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t dev, unsigned int gpu_instance_id,
                                 nvmlGpmSample_t sample) {
    DEVICE("nvmlGpmMigSampleGet");
    scenario_t *sc = scenario();
    if (!sc) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (dev->mig) return NVML_ERROR_INVALID_ARGUMENT;  /* takes the parent GPU */
    if (!sample.handle || sample.handle->magic != GPM_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpm_supported(s)) return NVML_ERROR_NOT_SUPPORTED;
    unsigned long long mode = 0;
    if (!get_ull(s, "mig_mode", &mode) || !mode) return NVML_ERROR_NOT_SUPPORTED;
    if (gpu_instance_id >= GPM_TARGETS - 1 || !gpm_gi_exists(sc, (int)dev->dev, gpu_instance_id))
        return NVML_ERROR_NOT_FOUND;
    gpm_read(s, (int)dev->dev, (int)gpu_instance_id + 1, sample.handle);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *mg) {
    scenario_t *sc;
    nvmlReturn_t r = enter(&sc);
    if (r) return r;
    if (!mg) return NVML_ERROR_INVALID_ARGUMENT;
    if (mg->version != gpm_version(sc)) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const gpm_sample_data_t *a = mg->sample1.handle, *b = mg->sample2.handle;
    if (!a || !b || a->magic != GPM_MAGIC || b->magic != GPM_MAGIC || !a->taken ||
        !b->taken || a->dev != b->dev || a->target != b->target)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long max = GPM_DEFAULT_MAX;
    get_ull(&sc->global, "gpm_metric_max", &max);
    if (mg->numMetrics > max) return NVML_ERROR_INVALID_ARGUMENT;
    if (a->dev >= sc->ndev) return NVML_ERROR_GPU_IS_LOST;
    const section_t *parent = &sc->dev[a->dev];
    if ((r = inject(parent, "nvmlGpmMetricsGet"))) return r;
    for (unsigned int i = 0; i < mg->numMetrics; i++) {
        nvmlGpmMetric_t *m = &mg->metrics[i];
        unsigned int id = m->metricId;
        double pct;
        m->value = 0;
        m->metricInfo.shortName = m->metricInfo.longName = m->metricInfo.unit = NULL;
        if (id == 0 || id >= max) { m->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT; continue; }
        if ((m->nvmlReturn = gpm_metric_error(parent, a->target, id))) continue;
        if (id >= GPM_IDS || !gpm_percent(parent, a->target, id, &pct)) {
            m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        m->nvmlReturn = NVML_SUCCESS;
        if (b->nan[id] || b->ns <= a->ns) {
            m->value = __builtin_nan("");  /* no time between the samples: 0/0 */
            continue;
        }
        /* integer deltas: exact (as doubles) for windows up to 15 minutes */
        unsigned long long active = b->acc[id] - a->acc[id], elapsed = b->ns - a->ns;
        m->value = (double)active / (double)elapsed / 100.0;
    }
    return NVML_SUCCESS;
}

/* ---- processes -------------------------------------------------------------------- */
/* `process <compute|graphics> <pid> <used_bytes|-> [gpu_instance_id compute_instance_id]` */
static nvmlReturn_t processes(const section_t *s, const char *kind, unsigned int *count,
                              nvmlProcessInfo_t *infos) {
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (int i = 0; i < s->n; i++) {
        char k[16], used[32];
        unsigned int pid, gi = 0xFFFFFFFFu, ci = 0xFFFFFFFFu;
        if (strcmp(s->kv[i].key, "process")) continue;
        if (sscanf(s->kv[i].val, "%15s %u %31s %u %u", k, &pid, used, &gi, &ci) < 3) continue;
        if (strcmp(k, kind)) continue;
        if (infos && n < *count) {
            infos[n].pid = pid;
            infos[n].usedGpuMemory = strcmp(used, "-") ? strtoull(used, NULL, 0)
                                                       : 0xFFFFFFFFFFFFFFFFULL;
            infos[n].gpuInstanceId = gi;
            infos[n].computeInstanceId = ci;
        }
        n++;
    }
    if (n > *count || (!infos && n)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    DEVICE("nvmlDeviceGetComputeRunningProcesses_v3");
    return processes(s, "compute", count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    DEVICE("nvmlDeviceGetGraphicsRunningProcesses_v3");
    return processes(s, "graphics", count, infos);
}

/* `process_util <pid> <timestamp_us> <sm%> <mem%> <enc%> <dec%>`: samples newer than
 * lastSeenTimeStamp are returned; none newer is NOT_FOUND, as in the real library. */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t dev,
                                             nvmlProcessUtilizationSample_t *samples,
                                             unsigned int *count,
                                             unsigned long long last_seen) {
    DEVICE("nvmlDeviceGetProcessUtilization");
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0, any = 0;
    for (int i = 0; i < s->n; i++) {
        nvmlProcessUtilizationSample_t x;
        if (strcmp(s->kv[i].key, "process_util")) continue;
        any = 1;
        if (sscanf(s->kv[i].val, "%u %llu %u %u %u %u", &x.pid, &x.timeStamp, &x.smUtil,
                   &x.memUtil, &x.encUtil, &x.decUtil) != 6 || x.timeStamp <= last_seen)
            continue;
        if (samples && n < *count) samples[n] = x;
        n++;
    }
    if (!any) return NVML_ERROR_NOT_SUPPORTED;
    if (!samples || n > *count) {
        /* the real library sizes the buffer generously; so do we */
        *count = n ? n : 1;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n;
    return n ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

/* ---- events ----------------------------------------------------------------------- */
/* `watch`: the inotify descriptor of the scenario's folder, opened by the first wait and
 * kept until the set is freed. Opening and closing one for every wait cost the waiting
 * thread about 0.7 ms of CPU a wait (inotify's close waits for an SRCU grace period),
 * most of an idle exporter's CPU; the real library waits in the driver. */
typedef struct { unsigned long long mask[MAX_DEV]; int watch; } event_set_t;

nvmlReturn_t nvmlEventSetCreate(event_set_t **set) {
    scenario_t *sc;
    nvmlReturn_t r = enter(&sc);
    if (r) return r;
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof **set);
    if (!*set) return 20; /* NVML_ERROR_MEMORY */
    (*set)->watch = -1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t dev, unsigned long long *types) {
    DEVICE("nvmlDeviceGetSupportedEventTypes");
    (void)s;
    if (!types) return NVML_ERROR_INVALID_ARGUMENT;
    *types = EVENT_XID | 0x1ULL | 0x2ULL;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t dev, unsigned long long types,
                                      event_set_t *set) {
    DEVICE("nvmlDeviceRegisterEvents");
    (void)s;
    if (!set || dev->mig) return NVML_ERROR_INVALID_ARGUMENT;
    set->mask[dev->dev] |= types;
    return NVML_SUCCESS;
}

/* `hang`/`error` lines naming `fn` in a device section, for calls that are not on one
 * device (the event wait serves every device registered in its set). Unlike inject(),
 * a lost device does not fail the call. */
static nvmlReturn_t inject_shared(const section_t *s, const char *fn) {
    for (int i = 0; i < s->n; i++) {
        const kv_t *kv = &s->kv[i];
        char name[128], arg[64];
        if (strcmp(kv->key, "hang") && strcmp(kv->key, "error")) continue;
        if (sscanf(kv->val, "%127s %63s", name, arg) != 2 || strcmp(name, fn)) continue;
        if (!strcmp(kv->key, "hang")) sleep_us((unsigned long long)(atof(arg) * 1e6));
        else return code_of(arg);
    }
    return NVML_SUCCESS;
}

/* Blocks until the scenario file may have changed or `ms` have passed, as the real
 * event wait blocks in the driver: inotify on the file's folder (the tests replace the
 * file by a rename), watched from the first call on. Polling the file instead woke the
 * waiting thread 100 times a second and was most of an idle exporter's CPU. Without
 * inotify it falls back to a 10 ms poll. */
static void until_changed(int *fd, long long ms) {
    const char *path = getenv("FAKE_NVML_SCENARIO");
    if (*fd < 0 && path) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        *fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (*fd >= 0 && inotify_add_watch(*fd, dirname(dir), IN_CLOSE_WRITE | IN_MOVED_TO |
                                          IN_CREATE | IN_DELETE | IN_MODIFY) < 0) {
            close(*fd);
            *fd = -2;  /* tried: poll from now on */
        }
        if (*fd >= 0) return;  /* changes from now on are seen: look once more first */
    }
    if (*fd < 0) {
        sleep_us(ms < 10 ? (unsigned long long)ms * 1000ULL : 10000ULL);
        return;
    }
    struct pollfd p = {*fd, POLLIN, 0};
    if (poll(&p, 1, (int)ms) > 0) {
        char buf[4096];
        while (read(*fd, buf, sizeof buf) > 0) {}
    }
}

/* Delivers `xid <code>` lines of registered devices, each once, in file order. A
 * registered device with `hang nvmlEventSetWait_v2 <s>` (or `error ...`) makes the wait
 * hang (or fail) as a driver stuck on that GPU would. */
static nvmlReturn_t event_wait(event_set_t *set, nvmlEventData_t *data,
                               unsigned int timeout_ms, int *watch) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        scenario_t *sc;
        nvmlReturn_t r = enter(&sc);
        if (r) return r;
        for (int d = 0; d < sc->ndev; d++) {
            if (!(set->mask[d] & EVENT_XID)) continue;
            if ((r = inject_shared(&sc->dev[d], "nvmlEventSetWait_v2"))) return r;
        }
        pthread_mutex_lock(&lock);
        for (int d = 0; d < sc->ndev; d++) {
            if (!(set->mask[d] & EVENT_XID)) continue;
            int seen = 0;
            const section_t *s = &sc->dev[d];
            for (int i = 0; i < s->n; i++) {
                if (strcmp(s->kv[i].key, "xid")) continue;
                if (seen++ < xid_delivered[d]) continue;
                xid_delivered[d]++;
                pthread_mutex_unlock(&lock);
                memset(data, 0, sizeof *data);
                data->device = &handles[d];
                data->eventType = EVENT_XID;
                data->eventData = strtoull(s->kv[i].val, NULL, 0);
                data->gpuInstanceId = 0xFFFFFFFFu;
                data->computeInstanceId = 0xFFFFFFFFu;
                return NVML_SUCCESS;
            }
        }
        pthread_mutex_unlock(&lock);
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long waited = (now.tv_sec - start.tv_sec) * 1000LL +
                           (now.tv_nsec - start.tv_nsec) / 1000000LL;
        if (waited >= (long long)timeout_ms) return NVML_ERROR_TIMEOUT;
        until_changed(watch, (long long)timeout_ms - waited);
    }
}

nvmlReturn_t nvmlEventSetWait_v2(event_set_t *set, nvmlEventData_t *data,
                                 unsigned int timeout_ms) {
    if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
    return event_wait(set, data, timeout_ms, &set->watch);
}

nvmlReturn_t nvmlEventSetWait(event_set_t *set, nvmlEventData_t *data, unsigned int ms) {
    return nvmlEventSetWait_v2(set, data, ms);
}

nvmlReturn_t nvmlEventSetFree(event_set_t *set) {
    if (set && set->watch >= 0) close(set->watch);
    free(set);
    return NVML_SUCCESS;
}
