/*
 * A fake HLML (libhlml.so, Habana Labs' management library) for tests: the real
 * habana-pyhlml binding loads it by path (the exporter's --gaudi.hlml-library) and calls
 * it through its real ctypes structs, so the exporter's Gaudi path runs end to end
 * without a Gaudi.
 *
 * Its devices come from a scenario file named by $FAKE_HLML_SCENARIO (format in
 * README.md), re-read whenever its mtime, size or inode changes, so a test can lose a
 * device or hang a call while the exporter runs. A loaded scenario is never freed: a
 * call on another thread (possibly one hanging for seconds) may still hold it.
 *
 * Signatures follow the binding's ctypes calls (pyhlml/main.py, 1.10 to 1.24). Where a
 * struct grew between releases (c_hlml_utilization: `aip`, then `aip, memory`), only
 * the members of the oldest layout are written, so the same library serves every
 * release without writing past a smaller struct.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

enum {
    HLML_SUCCESS = 0, HLML_ERROR_UNINITIALIZED = 1, HLML_ERROR_INVALID_ARGUMENT = 2,
    HLML_ERROR_NOT_SUPPORTED = 3, HLML_ERROR_ALREADY_INITIALIZED = 5,
    HLML_ERROR_NOT_FOUND = 6, HLML_ERROR_INSUFFICIENT_SIZE = 7,
    HLML_ERROR_DRIVER_NOT_LOADED = 9, HLML_ERROR_TIMEOUT = 10, HLML_ERROR_AIP_IS_LOST = 15,
    HLML_ERROR_MEMORY = 20, HLML_ERROR_NO_DATA = 21, HLML_ERROR_UNKNOWN = 49,
};

typedef struct { unsigned int magic, dev; } fake_handle_t;
typedef fake_handle_t *hlml_device_t;
typedef struct { unsigned int aip; } hlml_utilization_t;  /* 1.24 adds `memory` */
typedef struct { unsigned long long free, total, used; } hlml_memory_t;
typedef struct {
    uint32_t port; char *str_buf; uint64_t *val_buf; uint32_t *num_of_counters_out;
} hlml_nic_stats_info_t;

#define MAGIC 0x484c4d4cU
#define MAX_DEV 16
#define MAX_KV 128
#define NAME_LEN 32  /* the binding's str_buf holds 32 bytes per counter name */
#define BINDING_COUNTERS 256  /* what the binding allocates (HABANA_LINK_CNT_MAX_NUM) */

typedef struct { char key[64]; char val[448]; } kv_t;
typedef struct { int n; kv_t kv[MAX_KV]; } section_t;
typedef struct { section_t global; int ndev; section_t dev[MAX_DEV]; } scenario_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static scenario_t *current;
static struct timespec loaded_mtime;
static off_t loaded_size = -1;
static ino_t loaded_ino;
static int initialised;
static fake_handle_t handles[MAX_DEV];

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
        } else {
            put(sec, p, val);
        }
    }
    fclose(f);
    return sc;
}

static scenario_t *scenario(void) {
    const char *path = getenv("FAKE_HLML_SCENARIO");
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

static int code_of(const char *name) {
    static const struct { const char *n; int c; } names[] = {
        {"UNINITIALIZED", 1}, {"INVALID_ARGUMENT", 2}, {"NOT_SUPPORTED", 3},
        {"ALREADY_INITIALIZED", 5}, {"NOT_FOUND", 6}, {"INSUFFICIENT_SIZE", 7},
        {"DRIVER_NOT_LOADED", 9}, {"TIMEOUT", 10}, {"AIP_IS_LOST", 15}, {"MEMORY", 20},
        {"NO_DATA", 21}, {"UNKNOWN", 49},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(names[i].n, name)) return names[i].c;
    return atoi(name) ? atoi(name) : HLML_ERROR_UNKNOWN;
}

static void sleep_us(unsigned long long us) {
    struct timespec ts = {(time_t)(us / 1000000ULL), (long)(us % 1000000ULL) * 1000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

static int enter(scenario_t **out) {
    scenario_t *sc = scenario();
    if (!initialised) return HLML_ERROR_UNINITIALIZED;
    if (!sc) return HLML_ERROR_DRIVER_NOT_LOADED;
    const char *init_error = get(&sc->global, "init_error");
    if (init_error) return code_of(init_error);  /* the driver went away under us */
    *out = sc;
    return HLML_SUCCESS;
}

/* Per-device injection: `lost 1`, `error <function|*> <CODE>`, `hang <function|*> <s>`. */
static int inject(const section_t *s, const char *fn) {
    const char *lost = get(s, "lost");
    if (lost && atoi(lost)) return HLML_ERROR_AIP_IS_LOST;
    for (int i = 0; i < s->n; i++) {
        const kv_t *kv = &s->kv[i];
        char name[128], arg[64];
        if (strcmp(kv->key, "hang") && strcmp(kv->key, "error")) continue;
        if (sscanf(kv->val, "%127s %63s", name, arg) != 2) continue;
        if (strcmp(name, fn) && strcmp(name, "*")) continue;
        if (!strcmp(kv->key, "hang")) sleep_us((unsigned long long)(atof(arg) * 1e6));
        else return code_of(arg);
    }
    return HLML_SUCCESS;
}

static int device(hlml_device_t h, const char *fn, const section_t **out) {
    scenario_t *sc;
    int r = enter(&sc);
    if (r) return r;
    if (!h || h->magic != MAGIC) return HLML_ERROR_INVALID_ARGUMENT;
    if ((int)h->dev >= sc->ndev) return HLML_ERROR_AIP_IS_LOST;
    r = inject(&sc->dev[h->dev], fn);
    if (r) return r;
    *out = &sc->dev[h->dev];
    return HLML_SUCCESS;
}

static int present(const scenario_t *sc, int i) {
    return get(&sc->dev[i], "uuid") != NULL;  /* a section without a uuid: not listed */
}

static int put_string(const char *v, char *buf, unsigned int len) {
    if (!v) return HLML_ERROR_NOT_SUPPORTED;
    if (!buf) return HLML_ERROR_INVALID_ARGUMENT;
    if (strlen(v) + 1 > len) return HLML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, v, strlen(v) + 1);
    return HLML_SUCCESS;
}

/* ---- life cycle ------------------------------------------------------------------- */
int hlml_init(void) {
    scenario_t *sc = scenario();
    if (!sc) return HLML_ERROR_DRIVER_NOT_LOADED;
    const char *init_error = get(&sc->global, "init_error");
    if (init_error) return code_of(init_error);
    unsigned long long hang;
    if (get_ull(&sc->global, "init_hang_ms", &hang)) sleep_us(hang * 1000ULL);
    initialised = 1;
    return HLML_SUCCESS;
}

int hlml_init_with_flags(int flags) { return flags ? HLML_ERROR_INVALID_ARGUMENT : hlml_init(); }

int hlml_shutdown(void) { initialised = 0; return HLML_SUCCESS; }

/* ---- the system ------------------------------------------------------------------- */
int hlml_device_get_count(unsigned int *count) {
    scenario_t *sc;
    int r = enter(&sc);
    if (r) return r;
    unsigned int n = 0;
    for (int i = 0; i < sc->ndev; i++) n += present(sc, i) ? 1 : 0;
    *count = n;
    return HLML_SUCCESS;
}

static int handle_of(int i, hlml_device_t *out) {
    handles[i].magic = MAGIC;
    handles[i].dev = (unsigned int)i;
    *out = &handles[i];
    return HLML_SUCCESS;
}

int hlml_device_get_handle_by_index(unsigned int index, hlml_device_t *out) {
    scenario_t *sc;
    int r = enter(&sc);
    if (r) return r;
    unsigned int seen = 0;
    for (int i = 0; i < sc->ndev; i++) {
        if (!present(sc, i)) continue;
        if (seen++ == index) return handle_of(i, out);
    }
    return HLML_ERROR_INVALID_ARGUMENT;
}

/* The PCI address as sysfs writes it (0000:b3:00.0), or without the domain. */
int hlml_device_get_handle_by_pci_bus_id(const char *bus_id, hlml_device_t *out) {
    scenario_t *sc;
    int r = enter(&sc);
    if (r) return r;
    if (!bus_id) return HLML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < sc->ndev; i++) {
        const char *mine = get(&sc->dev[i], "pci_bus_id");
        if (!present(sc, i) || !mine) continue;
        size_t a = strlen(mine), b = strlen(bus_id);
        if (!strcasecmp(mine, bus_id) || (a > b && !strcasecmp(mine + a - b, bus_id)))
            return handle_of(i, out);
    }
    return HLML_ERROR_NOT_FOUND;
}

int hlml_device_get_handle_by_UUID(const char *uuid, hlml_device_t *out) {
    scenario_t *sc;
    int r = enter(&sc);
    if (r) return r;
    for (int i = 0; i < sc->ndev; i++) {
        const char *mine = get(&sc->dev[i], "uuid");
        if (mine && uuid && !strcmp(mine, uuid)) return handle_of(i, out);
    }
    return HLML_ERROR_NOT_FOUND;
}

int hlml_get_driver_version(char *buf, unsigned int len) {
    scenario_t *sc;
    int r = enter(&sc);
    return r ? r : put_string(get(&sc->global, "driver_version"), buf, len);
}

int hlml_get_hlml_version(char *buf, unsigned int len) {
    scenario_t *sc;
    int r = enter(&sc);
    return r ? r : put_string(get(&sc->global, "hlml_version"), buf, len);
}

/* ---- strings of a device ---------------------------------------------------------- */
#define STRING_FN(fn, key) \
    int fn(hlml_device_t h, char *buf, unsigned int len) { \
        const section_t *s; int r = device(h, #fn, &s); \
        return r ? r : put_string(get(s, key), buf, len); }
STRING_FN(hlml_device_get_name, "name")
STRING_FN(hlml_device_get_uuid, "uuid")
STRING_FN(hlml_device_get_serial, "serial")

/* ---- numbers of a device, in HLML's units (mW, mJ, MHz, %, bytes, Celsius) ------ */
#define UINT_FN(fn, key) \
    int fn(hlml_device_t h, unsigned int *out) { \
        const section_t *s; int r = device(h, #fn, &s); unsigned long long v; \
        if (r) return r; \
        if (!get_ull(s, key, &v)) return HLML_ERROR_NOT_SUPPORTED; \
        *out = (unsigned int)v; return HLML_SUCCESS; }
UINT_FN(hlml_device_get_power_usage, "power_mw")
UINT_FN(hlml_device_get_power_management_limit, "power_limit_mw")
UINT_FN(hlml_device_get_power_management_default_limit, "power_default_limit_mw")
UINT_FN(hlml_device_get_pcie_replay_counter, "pcie_replay")
UINT_FN(hlml_device_get_minor_number, "minor")

int hlml_device_get_total_energy_consumption(hlml_device_t h, unsigned long long *out) {
    const section_t *s;
    int r = device(h, "hlml_device_get_total_energy_consumption", &s);
    if (r) return r;
    return get_ull(s, "energy_mj", out) ? HLML_SUCCESS : HLML_ERROR_NOT_SUPPORTED;
}

int hlml_device_get_utilization_rates(hlml_device_t h, hlml_utilization_t *out) {
    const section_t *s;
    unsigned long long v;
    int r = device(h, "hlml_device_get_utilization_rates", &s);
    if (r) return r;
    if (!get_ull(s, "util_aip", &v)) return HLML_ERROR_NOT_SUPPORTED;
    out->aip = (unsigned int)v;
    return HLML_SUCCESS;
}

int hlml_device_get_memory_info(hlml_device_t h, hlml_memory_t *out) {
    const section_t *s;
    unsigned long long total, used;
    int r = device(h, "hlml_device_get_memory_info", &s);
    if (r) return r;
    if (!get_ull(s, "memory_total", &total) || !get_ull(s, "memory_used", &used))
        return HLML_ERROR_NOT_SUPPORTED;
    out->total = total;
    out->used = used;
    out->free = total - used;
    return HLML_SUCCESS;
}

/* `temp_<sensor number>` (0 AIP, 1 board, 2 other, 3 HBM, 4 VRM, 5 CTEMP). */
int hlml_device_get_temperature(hlml_device_t h, unsigned int sensor, unsigned int *out) {
    const section_t *s;
    char key[32];
    unsigned long long v;
    int r = device(h, "hlml_device_get_temperature", &s);
    if (r) return r;
    snprintf(key, sizeof key, "temp_%u", sensor);
    if (!get_ull(s, key, &v)) return HLML_ERROR_NOT_SUPPORTED;
    *out = (unsigned int)v;
    return HLML_SUCCESS;
}

/* `clock_<type>` and `max_clock_<type>` (0 SOC, 1 IC, 2 MME, 3 TPC), MHz. */
static int clock_of(hlml_device_t h, const char *fn, const char *prefix, unsigned int type,
                 unsigned int *out) {
    const section_t *s;
    char key[32];
    unsigned long long v;
    int r = device(h, fn, &s);
    if (r) return r;
    snprintf(key, sizeof key, "%s_%u", prefix, type);
    if (!get_ull(s, key, &v)) return HLML_ERROR_NOT_SUPPORTED;
    *out = (unsigned int)v;
    return HLML_SUCCESS;
}

int hlml_device_get_clock_info(hlml_device_t h, unsigned int type, unsigned int *out) {
    return clock_of(h, "hlml_device_get_clock_info", "clock", type, out);
}

int hlml_device_get_max_clock_info(hlml_device_t h, unsigned int type, unsigned int *out) {
    return clock_of(h, "hlml_device_get_max_clock_info", "max_clock", type, out);
}

/* `ecc_<error type>_<counter type>`: error 0 corrected, 1 uncorrected; counter 0
 * volatile, 1 aggregate. */
int hlml_device_get_total_ecc_errors(hlml_device_t h, unsigned int error_type,
                                     unsigned int counter_type, long long *out) {
    const section_t *s;
    char key[32];
    unsigned long long v;
    int r = device(h, "hlml_device_get_total_ecc_errors", &s);
    if (r) return r;
    snprintf(key, sizeof key, "ecc_%u_%u", error_type, counter_type);
    if (!get_ull(s, key, &v)) return HLML_ERROR_NOT_SUPPORTED;
    *out = (long long)v;
    return HLML_SUCCESS;
}

int hlml_device_get_current_clocks_throttle_reasons(hlml_device_t h, unsigned long long *out) {
    const section_t *s;
    int r = device(h, "hlml_device_get_current_clocks_throttle_reasons", &s);
    if (r) return r;
    return get_ull(s, "throttle_reasons", out) ? HLML_SUCCESS : HLML_ERROR_NOT_SUPPORTED;
}

/* `replaced_rows_<cause>` (0 several single-bit errors, 1 a double-bit error); with a
 * NULL address array the binding asks for the count only. */
int hlml_device_get_replaced_rows(hlml_device_t h, unsigned int cause, unsigned int *count,
                                  void *addresses) {
    const section_t *s;
    char key[32];
    unsigned long long v;
    int r = device(h, "hlml_device_get_replaced_rows", &s);
    if (r) return r;
    snprintf(key, sizeof key, "replaced_rows_%u", cause);
    if (!get_ull(s, key, &v)) return HLML_ERROR_NOT_SUPPORTED;
    if (addresses) memset(addresses, 0, (size_t)*count * 6);
    *count = (unsigned int)v;
    return HLML_SUCCESS;
}

UINT_FN(hlml_device_get_replaced_rows_pending_status, "replaced_rows_pending")

/* ---- the card's NICs: `nic <port> <0|1 link up> [name=value ...]` -------------------- */
static const char *nic_line(const section_t *s, unsigned int port) {
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->kv[i].key, "nic")) continue;
        if ((unsigned int)atoi(s->kv[i].val) == port) return s->kv[i].val;
    }
    return NULL;
}

int hlml_get_mac_addr_info(hlml_device_t h, uint64_t *mask, uint64_t *ext_mask) {
    const section_t *s;
    int r = device(h, "hlml_get_mac_addr_info", &s);
    if (r) return r;
    mask[0] = mask[1] = ext_mask[0] = ext_mask[1] = 0;
    int any = 0;
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->kv[i].key, "nic")) continue;
        unsigned int port = (unsigned int)atoi(s->kv[i].val);
        if (port >= 128) continue;
        mask[port / 64] |= 1ULL << (port % 64);
        if (strstr(s->kv[i].val, "external=1")) ext_mask[port / 64] |= 1ULL << (port % 64);
        any = 1;
    }
    return any ? HLML_SUCCESS : HLML_ERROR_NOT_SUPPORTED;
}

int hlml_nic_get_link(hlml_device_t h, uint32_t port, bool *up) {
    const section_t *s;
    int r = device(h, "hlml_nic_get_link", &s);
    if (r) return r;
    const char *line = nic_line(s, port);
    if (!line) return HLML_ERROR_INVALID_ARGUMENT;
    int p = 0, u = 0;
    if (sscanf(line, "%d %d", &p, &u) != 2) return HLML_ERROR_UNKNOWN;
    *up = u != 0;
    return HLML_SUCCESS;
}

int hlml_nic_get_statistics(hlml_device_t h, hlml_nic_stats_info_t *info) {
    const section_t *s;
    int r = device(h, "hlml_nic_get_statistics", &s);
    if (r) return r;
    const char *line = nic_line(s, info->port);
    if (!line) return HLML_ERROR_INVALID_ARGUMENT;
    char copy[448];
    snprintf(copy, sizeof copy, "%s", line);
    uint32_t n = 0;
    char *save = NULL;
    strtok_r(copy, " ", &save);  /* port */
    strtok_r(NULL, " ", &save);  /* link */
    for (char *tok = strtok_r(NULL, " ", &save); tok && n < BINDING_COUNTERS;
         tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || !strncmp(tok, "external=", 9)) continue;
        *eq = 0;
        snprintf(info->str_buf + (size_t)n * NAME_LEN, NAME_LEN, "%s", tok);
        info->val_buf[n] = strtoull(eq + 1, NULL, 0);
        n++;
    }
    *info->num_of_counters_out = n;
    return HLML_SUCCESS;
}
