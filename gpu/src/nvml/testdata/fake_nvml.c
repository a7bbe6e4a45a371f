/* fake_nvml.c: a stand-in for libnvidia-ml.so.1 in ddpcheck's tests, so that the real backend's
 * inventory and health reads (and with fake_gpu.c the whole `ddpcheck check`) run on a machine
 * without GPUs. Healthy PCIe GPUs under one host bridge (PHB), no NVLink.
 *
 * Environment: FAKE_GPUS (default 2) devices, bus ids 00000000:10:00.0, 00000000:11:00.0, ...
 * (the ones fake_gpu.c's CUDA reports). FAKE_P2P_R, FAKE_P2P_W, FAKE_P2P_N, FAKE_P2P_A (read,
 * write, NVLink, atomics) set nvmlDeviceGetP2PStatus's answer for that capability: a bare status
 * (nvmlGpuP2PStatus_t: 0 OK, 1 chipset, 2 GPU, 3 IOH topology not supported, 4 regkey, 5 not
 * supported, 6 unknown) for every pair, then `I-J=S` entries for one ordered pair, comma-separated
 * ("2,0-1=0"). With none of them set the call is NOT_SUPPORTED, as on a driver without it.
 * FAKE_FABRIC sets each GPU's NVLink fabric registration (nvmlDeviceGetGpuFabricInfoV and
 * nvmlDeviceGetGpuFabricInfo): entries STATE[/STATUS[/HEALTH_MASK]] for every GPU, then
 * I=STATE[/STATUS[/HEALTH_MASK]] for GPU I, comma-separated, numbers as nvml.h has them
 * (NVML_GPU_FABRIC_STATE_*: 0 not supported, 1 not started, 2 in progress, 3 completed; STATUS an
 * nvmlReturn_t; the health mask's fields), e.g. "3/0,1=2". Unset, or state 0, the call is
 * NOT_SUPPORTED, as on PCIe GPUs. FAKE_FABRIC_API=v2 refuses the v3 struct (version mismatch, as a
 * driver before it), =v1 answers the V call FUNCTION_NOT_FOUND (only nvmlGpuFabricInfo_t).
 * Functions not written here are missing symbols, which
 * nvml-wrapper reports as an error for that one field. Built by the tests with:
 * cc -shared -fPIC -o libnvidia-ml.so.1 fake_nvml.c */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OK = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6 };

static unsigned ngpus(void) { const char *s = getenv("FAKE_GPUS"); return s ? (unsigned)atoi(s) : 2; }
/* A device handle is its index + 1, so that no handle is NULL. */
static int index_of(void *dev, unsigned *i) {
  uintptr_t h = (uintptr_t)dev;
  if (h == 0 || h > ngpus()) return INVALID_ARGUMENT;
  *i = (unsigned)(h - 1);
  return OK;
}
#define DEVICE(dev, i) unsigned i; if (index_of(dev, &i)) return INVALID_ARGUMENT

int nvmlInit_v2(void) { return OK; }
int nvmlInitWithFlags(unsigned flags) { (void)flags; return OK; }
int nvmlShutdown(void) { return OK; }
const char *nvmlErrorString(int r) { return r ? "fake NVML error" : "Success"; }
int nvmlSystemGetDriverVersion(char *buf, unsigned len) { snprintf(buf, len, "999.99-fake"); return OK; }
int nvmlSystemGetCudaDriverVersion(int *v) { *v = 13000; return OK; }
int nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 13000; return OK; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = ngpus(); return OK; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **dev) {
  if (i >= ngpus()) return INVALID_ARGUMENT;
  *dev = (void *)(uintptr_t)(i + 1);
  return OK;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char *id, void **dev) {
  unsigned dom = 0, bus = 0, d = 0, fn = 0;
  if (sscanf(id, "%x:%x:%x.%x", &dom, &bus, &d, &fn) != 4) return INVALID_ARGUMENT;
  if (dom != 0 || d != 0 || fn != 0 || bus < 0x10 || bus - 0x10 >= ngpus()) return NOT_FOUND;
  *dev = (void *)(uintptr_t)(bus - 0x10 + 1);
  return OK;
}
int nvmlDeviceGetIndex(void *dev, unsigned *out) { DEVICE(dev, i); *out = i; return OK; }
int nvmlDeviceGetName(void *dev, char *buf, unsigned len) { DEVICE(dev, i); snprintf(buf, len, "Fake GPU"); return OK; }
int nvmlDeviceGetUUID(void *dev, char *buf, unsigned len) {
  DEVICE(dev, i);
  snprintf(buf, len, "GPU-fa4e0000-0000-0000-0000-%012x", i);
  return OK;
}

struct pci_info { char bus_id_legacy[16]; unsigned domain, bus, device, pci_device_id, pci_subsystem_id; char bus_id[32]; };
/* FAKE_BUS_ID (DOMAIN:BUS:DEVICE.0, e.g. 00000000:00:06.0) places GPU 0 there, as a VM's
   passthrough GPU sits; the others stay at 00000000:1N:00.0. */
int nvmlDeviceGetPciInfo_v3(void *dev, struct pci_info *p) {
  DEVICE(dev, i);
  memset(p, 0, sizeof *p);
  unsigned domain = 0, bus = 0x10 + i, slot = 0;
  const char *fixed = getenv("FAKE_BUS_ID");
  if (fixed && i == 0 && sscanf(fixed, "%x:%x:%x", &domain, &bus, &slot) != 3) {
    domain = 0; bus = 0x10; slot = 0;
  }
  p->domain = domain;
  p->bus = bus;
  p->device = slot;
  p->pci_device_id = 0x233510de;
  snprintf(p->bus_id_legacy, sizeof p->bus_id_legacy, "%04x:%02x:%02x.0", domain, bus, slot);
  snprintf(p->bus_id, sizeof p->bus_id, "%08x:%02x:%02x.0", domain, bus, slot);
  return OK;
}

struct memory_v2 { unsigned version; unsigned long long total, reserved, free, used; };
int nvmlDeviceGetMemoryInfo_v2(void *dev, struct memory_v2 *m) {
  DEVICE(dev, i);
  m->total = 16ULL << 30; m->reserved = 0; m->used = 1ULL << 20; m->free = m->total - m->used;
  return OK;
}

/* PCIe gen 4 x16, running as it should. */
int nvmlDeviceGetCurrPcieLinkGeneration(void *dev, unsigned *v) { DEVICE(dev, i); *v = 4; return OK; }
int nvmlDeviceGetMaxPcieLinkGeneration(void *dev, unsigned *v) { DEVICE(dev, i); *v = 4; return OK; }
int nvmlDeviceGetGpuMaxPcieLinkGeneration(void *dev, unsigned *v) { DEVICE(dev, i); *v = 4; return OK; }
int nvmlDeviceGetCurrPcieLinkWidth(void *dev, unsigned *v) { DEVICE(dev, i); *v = 16; return OK; }
int nvmlDeviceGetMaxPcieLinkWidth(void *dev, unsigned *v) { DEVICE(dev, i); *v = 16; return OK; }
int nvmlDeviceGetNvLinkState(void *dev, unsigned link, int *active) { DEVICE(dev, i); (void)link; (void)active; return NOT_SUPPORTED; }

/* Every pair meets at a host bridge (nvml.h NVML_TOPOLOGY_HOSTBRIDGE). */
int nvmlDeviceGetTopologyCommonAncestor(void *a, void *b, int *level) {
  DEVICE(a, i); DEVICE(b, j); (void)i; (void)j;
  *level = 30;
  return OK;
}

/* Healthy: ECC on and clean, nothing retired, no throttling, idle. */
int nvmlDeviceGetEccMode(void *dev, int *current, int *pending) { DEVICE(dev, i); *current = *pending = 1; return OK; }
int nvmlDeviceGetTotalEccErrors(void *dev, int type, int counter, unsigned long long *n) { DEVICE(dev, i); (void)type; (void)counter; *n = 0; return OK; }
int nvmlDeviceGetRetiredPagesPendingStatus(void *dev, int *pending) { DEVICE(dev, i); *pending = 0; return OK; }
int nvmlDeviceGetCurrentClocksThrottleReasons(void *dev, unsigned long long *r) { DEVICE(dev, i); *r = 0; return OK; }
int nvmlDeviceGetCurrentClocksEventReasons(void *dev, unsigned long long *r) { DEVICE(dev, i); *r = 0; return OK; }
int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned *t) { DEVICE(dev, i); (void)sensor; *t = 35; return OK; }
int nvmlDeviceGetPowerUsage(void *dev, unsigned *mw) { DEVICE(dev, i); *mw = 60000; return OK; }
int nvmlDeviceGetClockInfo(void *dev, int clock, unsigned *mhz) { DEVICE(dev, i); (void)clock; *mhz = 1410; return OK; }
int nvmlDeviceGetPersistenceMode(void *dev, int *on) { DEVICE(dev, i); *on = 1; return OK; }
int nvmlDeviceGetComputeMode(void *dev, int *mode) { DEVICE(dev, i); *mode = 0; return OK; }
int nvmlDeviceGetMigMode(void *dev, unsigned *current, unsigned *pending) { DEVICE(dev, i); (void)current; (void)pending; return NOT_SUPPORTED; }
int nvmlDeviceGetComputeRunningProcesses_v3(void *dev, unsigned *count, void *infos) { DEVICE(dev, i); (void)infos; *count = 0; return OK; }

/* The status FAKE_P2P_<cap> gives the ordered pair (a, b); -1 when the variable is unset. */
static int p2p_from_env(const char *var, unsigned a, unsigned b) {
  const char *s = getenv(var);
  if (!s) return -1;
  int status = 0;
  while (*s) {
    unsigned i, j; int v, n = 0;
    if (sscanf(s, "%u-%u=%d%n", &i, &j, &v, &n) == 3 && n > 0) {
      if (i == a && j == b) status = v;
    } else if (sscanf(s, "%d%n", &v, &n) == 1 && n > 0) {
      status = v;
    } else {
      return 6;
    }
    s += n;
    if (*s == ',') s++;
  }
  return status;
}
int nvmlDeviceGetP2PStatus(void *a, void *b, int cap, int *status) {
  DEVICE(a, i); DEVICE(b, j);
  static const char *vars[] = { "FAKE_P2P_R", "FAKE_P2P_W", "FAKE_P2P_N", "FAKE_P2P_A" };
  if (cap < 0 || cap > 3) return NOT_SUPPORTED;
  int any = 0;
  for (int k = 0; k < 4; k++) any |= getenv(vars[k]) != NULL;
  if (!any) return NOT_SUPPORTED;
  int s = p2p_from_env(vars[cap], i, j);
  *status = s < 0 ? 5 : s;
  return OK;
}

/* GPU `gpu`'s fabric from FAKE_FABRIC: 1 with state, status and health mask set, 0 for none. */
struct fabric { unsigned state, status, health; };
static int fabric_from_env(unsigned gpu, struct fabric *f) {
  const char *s = getenv("FAKE_FABRIC");
  int found = 0;
  while (s && *s) {
    unsigned i = gpu, v[3] = { 0, 0, 0 };
    int n = 0, k = 0;
    if (sscanf(s, "%u=%n", &i, &n) == 1 && n > 0) s += n;
    else i = gpu;
    for (k = 0; k < 3; k++) {
      if (sscanf(s, "%u%n", &v[k], &n) != 1) break;
      s += n;
      if (*s != '/') { k++; break; }
      s++;
    }
    if (k == 0) return 0;
    if (i == gpu) { f->state = v[0]; f->status = v[1]; f->health = v[2]; found = 1; }
    if (*s == ',') s++;
    else if (*s) return 0;
  }
  return found && f->state != 0;
}

enum { FUNCTION_NOT_FOUND = 13, VERSION_MISMATCH = 25 };
/* nvml.h's nvmlGpuFabricInfo_t and nvmlGpuFabricInfo_v3_t (v2 is v3 without healthSummary). */
struct fabric_v1 { unsigned char cluster_uuid[16]; int status; unsigned clique_id; unsigned char state; };
struct fabric_v3 {
  unsigned version; unsigned char cluster_uuid[16]; int status; unsigned clique_id;
  unsigned char state; unsigned health_mask; unsigned char health_summary;
};
#define FABRIC_V2_SIZE 36u
#define FABRIC_V2_TAG (FABRIC_V2_SIZE | (2u << 24))
#define FABRIC_V3_TAG ((unsigned)sizeof(struct fabric_v3) | (3u << 24))

int nvmlDeviceGetGpuFabricInfoV(void *dev, struct fabric_v3 *out) {
  DEVICE(dev, i);
  const char *api = getenv("FAKE_FABRIC_API");
  if (api && strcmp(api, "v1") == 0) return FUNCTION_NOT_FOUND;
  int v3_ok = !(api && strcmp(api, "v2") == 0);
  if (out->version != FABRIC_V2_TAG && !(v3_ok && out->version == FABRIC_V3_TAG)) return VERSION_MISMATCH;
  struct fabric f;
  if (!fabric_from_env(i, &f)) return NOT_SUPPORTED;
  memset(out->cluster_uuid, 0, sizeof out->cluster_uuid);
  out->status = (int)f.status;
  out->clique_id = 0;
  out->state = (unsigned char)f.state;
  out->health_mask = f.health;
  if (out->version == FABRIC_V3_TAG) out->health_summary = 0;
  return OK;
}

int nvmlDeviceGetGpuFabricInfo(void *dev, struct fabric_v1 *out) {
  DEVICE(dev, i);
  struct fabric f;
  if (!fabric_from_env(i, &f)) return NOT_SUPPORTED;
  memset(out, 0, sizeof *out);
  out->status = (int)f.status;
  out->state = (unsigned char)f.state;
  return OK;
}
