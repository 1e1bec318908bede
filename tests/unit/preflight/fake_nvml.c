/* A stand-in for libnvidia-ml.so.1 with the few functions preflight's NVML reader calls
   (src/preflight/nvml.cpp), so its dlopen path is tested where no driver is: two GPUs by PCI
   bus id, 0000:1b:00.0 (MIG enabled, ECC enabled and disabled after a reset) and 0000:3d:00.0
   (no MIG, ECC disabled); any other bus id is not found. Built twice: FAKE_NVML_NO_MIG leaves
   nvmlDeviceGetMigMode out (an older driver's library). FAKE_NVML_INIT_FAILS=1 in the
   environment makes nvmlInit_v2 fail as without a loaded driver. */
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct fake_device* nvmlDevice_t;
struct fake_device {
  int index;
};
static struct fake_device devices[2] = {{0}, {1}};

nvmlReturn_t nvmlInit_v2(void) {
  const char* fail = getenv("FAKE_NVML_INIT_FAILS");
  return fail && fail[0] == '1' ? 9 : 0; /* NVML_ERROR_DRIVER_NOT_LOADED */
}
nvmlReturn_t nvmlShutdown(void) { return 0; }
const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case 3: return "Not Supported";
    case 6: return "Not Found";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}
nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  strncpy(version, "580.65.06", length);
  return 0;
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus, nvmlDevice_t* device) {
  if (strcmp(bus, "0000:1b:00.0") == 0) *device = &devices[0];
  else if (strcmp(bus, "0000:3d:00.0") == 0) *device = &devices[1];
  else return 6;
  return 0;
}
#ifndef FAKE_NVML_NO_MIG
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current, unsigned int* pending) {
  if (device->index == 1) return 3;
  *current = 1;
  *pending = 1;
  return 0;
}
#endif
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, int* current, int* pending) {
  *current = device->index == 0 ? 1 : 0;
  *pending = 0;
  return 0;
}
