/* Decode budgets: process-wide byte and pixel bounds that every decoder checks first (decodelimit.h). */
#include "engine/base/decodelimit.h"
#include "engine/base/checked.h"
#include "engine/base/error.h"

#include <pthread.h>
#include <stdio.h>

#define NAME_LEN 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long max_bytes_now = DECODELIMIT_DEFAULT_MB << 20;
static unsigned long long max_pixels_now = DECODELIMIT_DEFAULT_PIXELS;
static char bytes_name_now[NAME_LEN] = "the decoded-bytes budget";
static char pixels_name_now[NAME_LEN] = "the input-pixels budget";

void decodelimit_set(unsigned long long max_bytes, unsigned long long max_pixels,
                     const char *bytes_name, const char *pixels_name)
{
    pthread_mutex_lock(&lock);
    if (max_bytes > 0)
        max_bytes_now = max_bytes;
    if (max_pixels > 0)
        max_pixels_now = max_pixels;
    if (bytes_name)
        snprintf(bytes_name_now, sizeof bytes_name_now, "%s", bytes_name);
    if (pixels_name)
        snprintf(pixels_name_now, sizeof pixels_name_now, "%s", pixels_name);
    pthread_mutex_unlock(&lock);
}

void decodelimit_get(unsigned long long *max_bytes, unsigned long long *max_pixels)
{
    pthread_mutex_lock(&lock);
    if (max_bytes)
        *max_bytes = max_bytes_now;
    if (max_pixels)
        *max_pixels = max_pixels_now;
    pthread_mutex_unlock(&lock);
}

int decodelimit_check(const char *what, const char *path, long long nx, long long ny,
                      long long nz, size_t esize, char *err, size_t errlen)
{
    size_t d[3] = {nx < 1 ? 1 : (size_t)nx, ny < 1 ? 1 : (size_t)ny, nz < 1 ? 1 : (size_t)nz};
    /* A product past TESS_SIZE_MAX (engine/base/checked.h) is over any budget. */
    size_t pixels, bytes;
    int pixels_over = tess_size_mul(d[0], d[1], &pixels) || tess_size_mul(pixels, d[2], &pixels);
    int bytes_over = tess_size_mul(pixels, esize < 1 ? 1 : esize, &bytes) != 0;
    char shape[80];
    if (d[2] > 1)
        snprintf(shape, sizeof shape, "%zu x %zu x %zu", d[0], d[1], d[2]);
    else
        snprintf(shape, sizeof shape, "%zu x %zu", d[0], d[1]);
    pthread_mutex_lock(&lock);
    int rc = 0;
    if (pixels_over || pixels > max_pixels_now) {
        tess_seterr(err, errlen, "%s is %s pixels (%s%zu), more than %s = %llu may be decoded: "
                    "%s", what, shape, pixels_over ? "over " : "", pixels, pixels_name_now,
                    max_pixels_now, path);
        rc = TESS_ELIMIT;
    } else if (bytes_over || bytes > max_bytes_now) {
        tess_seterr(err, errlen, "%s is %s pixels of %zu bytes: decoding it takes %s%zu MB, "
                    "more than %s = %llu MB: %s", what, shape, esize, bytes_over ? "over " : "",
                    bytes / (1 << 20) + (bytes % (1 << 20) != 0), bytes_name_now,
                    max_bytes_now >> 20, path);
        rc = TESS_ELIMIT;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}
