/* Stack and object lookups for call-site identification (src/site). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>

#include "commtune.h"

int commtune_locate(const void *addr, const char **object, unsigned long *link_address)
{
    Dl_info info;
    struct link_map *map = NULL;
    if (!dladdr1(addr, &info, (void **)&map, RTLD_DL_LINKMAP) || map == NULL) return 0;
    *object = info.dli_fname;
    *link_address = (unsigned long)addr - map->l_addr;
    return 1;
}

int commtune_backtrace(void **frames, int max) { return backtrace(frames, max); }
