/* Stack and object lookups for call-site identification (src/site). */
#define _GNU_SOURCE
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <stdint.h>

#include "commtune.h"

struct lookup {
    uintptr_t addr;
    const char *object;
    unsigned long link_address;
};

static int find_segment(struct dl_phdr_info *info, size_t size, void *data)
{
    struct lookup *l = data;
    (void)size;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && l->addr - start < ph->p_memsz) {
            /* The loader names the main program "": dladdr calls it by its argv[0]. */
            l->object = info->dlpi_name[0] ? info->dlpi_name : program_invocation_name;
            l->link_address = l->addr - info->dlpi_addr;
            return 1;
        }
    }
    return 0;
}

/* The object whose loaded segment holds addr, by its program headers: dladdr would also search
   the object's whole symbol table for the nearest symbol, which costs about 100 us in a large
   library whose table the application's work has evicted from the cache. */
int commtune_locate(const void *addr, const char **object, unsigned long *link_address)
{
    struct lookup l = {(uintptr_t)addr, NULL, 0};
    if (!dl_iterate_phdr(find_segment, &l)) return 0;
    *object = l.object;
    *link_address = l.link_address;
    return 1;
}

int commtune_backtrace(void **frames, int max) { return backtrace(frames, max); }
