/* Large buffers on transparent huge pages. */
#include "engine/base/hugemem.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

size_t tess_huge_bytes(size_t bytes)
{
    if (bytes < HUGE_PAGE / 2)
        return bytes;
    if (bytes > SIZE_MAX - HUGE_PAGE)
        return 0;
    return (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
}

void *tess_alloc_huge(size_t bytes)
{
    if (bytes < HUGE_PAGE / 2)
        return malloc(bytes ? bytes : 1);
    size_t rounded = tess_huge_bytes(bytes);
    if (!rounded)
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, rounded) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
}
