/* libFuzzer target: a TIFF file as a dataset reads it.  The input is the whole file, written
 * to a scratch file and opened as engine/image/tiffframe does for every TIFF frame or
 * multi-page TIFF (the directory chain walked, each page checked); when accepted, its
 * header is read as the catalog reads it (frame_read_info), and pixels are read within
 * small decode budgets (a whole page, a region of the last page, a series down the pages
 * through the stack reader, a z-reduction).  Every refusal must give a reason; nothing may
 * crash, leak or reach stderr.  Everything is freed. */
#include "tests/fuzz/fuzz_common.h"
#include "engine/base/decodelimit.h"
#include "engine/base/error.h"
#include "engine/image/stack.h"
#include "engine/image/tiffframe.h"

#include <stdio.h>
#include <unistd.h>

/* Input bytes read at most. */
#define FZ_MAX_FILE (1 << 20)
/* Decode budgets: pages of at most 2^20 pixels and 16 MB, so one input stays fast. */
#define FZ_MAX_PIXELS (1ULL << 20)
#define FZ_MAX_BYTES (16ULL << 20)

static char root[256], path[300];
static int ready;

static void cleanup(void)
{
    unlink(path);
    rmdir(root);
}

static int prepare(void)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(root, sizeof root, "%s/tessera-fuzz-tiff-XXXXXX", tmp);
    if (!mkdtemp(root))
        return -1;
    snprintf(path, sizeof path, "%s/f.tif", root);
    decodelimit_set(FZ_MAX_BYTES, FZ_MAX_PIXELS, NULL, NULL);
    atexit(cleanup);
    return 0;
}

static int write_file(const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* A refusal must say why. */
static void refused(int rc, const char *err)
{
    if (rc >= 0 || (rc != TESS_ENOMEM && !err[0]))
        __builtin_trap();
}

static void read_pixels(tiffframe *t, const tiffframe_shape *sh)
{
    char err[512] = "";
    if (tiffframe_budget(t, err, sizeof err) != 0)
        return;
    double *page = malloc((size_t)sh->nx * (size_t)sh->ny * sizeof(double));
    if (!page)
        return;
    int rc = tiffframe_read(t, 0, 0, 0, sh->nx, sh->ny, TIFFFRAME_OUT_F64, page, err, sizeof err);
    if (rc)
        refused(rc, err);
    long w = sh->nx > 3 ? sh->nx / 2 : sh->nx, h = sh->ny > 3 ? sh->ny / 2 : sh->ny;
    err[0] = '\0';
    rc = tiffframe_read(t, sh->npages - 1, sh->nx - w, 0, w, h, TIFFFRAME_OUT_STORED, page, err,
                        sizeof err);
    if (rc)
        refused(rc, err);
    free(page);
}

static void read_volume(const tiffframe_shape *sh)
{
    char err[512] = "";
    fitsimg_info info;
    int rc = frame_read_info(path, 0, &info, err, sizeof err);
    if (rc) {
        refused(rc, err);
        return;
    }
    if (info.naxes[0] != sh->nx || info.naxes[1] != sh->ny || !info.header || info.nkeys < 5)
        __builtin_trap();
    fitsimg_info_release(&info);
    long nz = sh->npages > 64 ? 64 : sh->npages;
    const char *pp[1] = {path};
    stack *s = stack_new(pp, 1, 0, sh->nx, sh->ny, sh->npages, 2);
    if (!s)
        return;
    double *v = malloc((size_t)nz * sizeof(double));
    if (v) {
        err[0] = '\0';
        rc = stack_read_series(s, sh->nx / 2, sh->ny / 2, 0, nz, v, err, sizeof err);
        if (rc)
            refused(rc, err);
        free(v);
    }
    stack_zpart *zp = NULL;
    err[0] = '\0';
    rc = stack_zreduce(s, STACK_ZOP_STD, 0, nz, 0, NULL, &zp, err, sizeof err);
    if (rc)
        refused(rc, err);
    stack_zpart_free(zp);
    stack_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FZ_MAX_FILE)
        return 0;
    if (!ready) {
        if (prepare() != 0)
            __builtin_trap();
        ready = 1;
    }
    if (write_file(data, size) != 0)
        __builtin_trap();
    tiffframe *t = NULL;
    char err[512] = "";
    int rc = tiffframe_open(path, &t, err, sizeof err);
    if (rc) {
        refused(rc, err);
        return 0;
    }
    tiffframe_shape sh;
    tiffframe_get_shape(t, &sh);
    if (sh.nx < 1 || sh.ny < 1 || sh.npages < 1 || sh.esize < 1)
        __builtin_trap();
    read_pixels(t, &sh);
    tiffframe_close(t);
    if ((unsigned long long)sh.nx * (unsigned long long)sh.ny <= FZ_MAX_PIXELS)
        read_volume(&sh);
    return 0;
}
