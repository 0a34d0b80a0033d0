/* libFuzzer target: the HiPS path parser (daemon/api/hips.c hips_parse_path).  Input: the
 * part of a URL after "/hips/". */
#include "tests/fuzz/fuzz_common.h"
#include "daemon/api/hips.h"
#include "engine/base/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *s = fz_cstr(data, size);
    if (!s)
        return 0;
    hips_path p;
    param_error e;
    memset(&e, 0, sizeof e);
    int rc = hips_parse_path(s, &p, &e);
    if (rc == 0) {
        if (strnlen(p.name, sizeof p.name) == sizeof p.name || !p.name[0])
            __builtin_trap();
        if (p.kind == HIPS_REQ_TILE &&
            (p.order < 0 || p.order > 29 || p.npix < 0 || p.npix >= 12LL << (2 * p.order)))
            __builtin_trap();
    } else if (rc != TESS_EINVAL && rc != TESS_ENOTFOUND) {
        __builtin_trap();
    }
    free(s);
    return 0;
}
