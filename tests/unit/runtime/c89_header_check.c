/* Compiled with -std=c89 -pedantic -Werror: the C API header must stay C89. */
#include "dlc/runtime.h"

int dlc_c89_header_check(void) {
  dlc_session_options o;
  o.device = DLC_DEVICE_EMU;
  o.emu_threads = 0;
  o.cuda_device = 0;
  return (int)o.device + dlc_runtime_api_version();
}
