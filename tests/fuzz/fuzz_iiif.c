/* libFuzzer target: the IIIF Image API request parser (daemon/api/iiif.c iiif_path_split and
 * iiif_parse_image, as handle_iiif calls them) on images of fuzzed size.  Input: 4 bytes
 * of image size and limit, then the path after the identifier,
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
    /* The path after "/iiif/3/" as the handler splits it, behind a fixed identifier. */
    static const char id[] = "img/";
    char *s = malloc(sizeof(id) + size - 4);
    if (!s)
        return 0;
    memcpy(s, id, sizeof(id) - 1);
    memcpy(s + sizeof(id) - 1, data + 4, size - 4);
    s[sizeof(id) - 1 + size - 4] = '\0';   /* a NUL in the input ends the path */
    iiif_path p;
    if (iiif_path_split(s, &p)) {
        free(s);
        return 0;
    }
    if (p.nseg < 1 || p.nseg > IIIF_MAX_SEGMENTS || strcmp(p.seg[0], "img") != 0)
        __builtin_trap();
    if (p.kind == IIIF_PATH_IMAGE) {
        iiif_request q;
        iiif_error e;
        int rc = iiif_parse_image(&p, W, H, maxpix, &q, &e);
        if (rc == 0) {
            /* A request that parses lies inside the image and within the limits. */
            if (q.x < 0 || q.y < 0 || q.w < 1 || q.h < 1 || q.x + q.w > W || q.y + q.h > H ||
                q.ow < 1 || q.oh < 1 || (long long)q.ow * q.oh > maxpix ||
                (q.rotation != 0 && q.rotation != 90 && q.rotation != 180 && q.rotation != 270))
                __builtin_trap();
        } else if (rc != TESS_EINVAL ||
                   (e.status != 400 && e.status != 404 && e.status != 413)) {
            __builtin_trap();
        }
    }
    iiif_path_release(&p);
    free(s);
    return 0;
}
