/* The calling thread's return addresses, for call-site identification (src/site). */
#include <execinfo.h>

#include "commtune.h"

int commtune_backtrace(void **frames, int max) { return backtrace(frames, max); }
