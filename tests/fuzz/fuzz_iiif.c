/* libFuzzer target: the IIIF Image API request parser (daemon/api/iiif.c) on images of
 * fuzzed size.  Input: 4 bytes of image size and limit, then the path
 * "{region}/{size}/{rotation}/{quality}.{format}". */
#include "tests/fuzz/fuzz_common.h"
#include "daemon/api/iiif.h"
#include "engine/base/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4 || size > 4096)
        return 0;
    /* Image sides 1..65536 and a pixel limit 1..2^24 (the default), from the input. */
    long W = 1 + (long)(((unsigned)data[0] << 8 | data[1]) & 0xffff);
    long H = 1 + (long)(((unsigned)data[2] << 8 | data[3]) & 0xffff);
    long long maxpix = (data[0] & 1) ? 16777216LL : 1 + (long long)data[1] * data[3] * 97;
    char *s = fz_cstr(data + 4, size - 4);
    if (!s)
        return 0;
    iiif_parsed q;
    int status = 0;
    param_error e;
    int rc = iiif_parse_image_request(s, W, H, maxpix, &q, &status, &e);
    if (rc == 0) {
        /* A request that parses lies inside the image and within the limits. */
        if (q.x < 0 || q.y < 0 || q.w < 1 || q.h < 1 || q.x + q.w > W || q.y + q.h > H ||
            q.ow < 1 || q.oh < 1 || (long long)q.ow * q.oh > maxpix ||
            (q.rotation != 0 && q.rotation != 90 && q.rotation != 180 && q.rotation != 270))
            __builtin_trap();
    } else if (rc != TESS_EINVAL && rc != TESS_ENOMEM) {
        __builtin_trap();
    } else if (rc == TESS_EINVAL && status != 400 && status != 404 && status != 413) {
        __builtin_trap();
    }
    free(s);
    return 0;
}
