/* Counts the messages MPICH's UCX netmod hands to UCX (ucp_tag_send_nbx), so that a test can
 * tell which collective algorithm MPICH ran from how many messages one call sent: a count, not a
 * time. Preloaded into the ranks of tests/export.rs's MPICH jobs (with MPIR_CVAR_NOLOCAL=1, so
 * that messages between ranks of one host go through UCX too); export_probe reads the count
 * through export_probe_sends. UCX's types are spelled as what they are (pointers, a 64-bit tag)
 * so that no UCX header is needed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

typedef void *(*send_fn)(void *ep, const void *buffer, size_t count, uint64_t tag,
                         const void *param);

static unsigned long sends;

unsigned long export_probe_sends(void) { return sends; }

void *ucp_tag_send_nbx(void *ep, const void *buffer, size_t count, uint64_t tag,
                       const void *param) {
    static send_fn real;
    if (!real) real = (send_fn)dlsym(RTLD_NEXT, "ucp_tag_send_nbx");
    sends++;
    return real(ep, buffer, count, tag, param);
}
