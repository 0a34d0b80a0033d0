/* libFuzzer target: a dataset's header as tesserad serves it.  The input is the header
 * block of a FITS file (cards up to END; padded with blanks to whole 2880-byte blocks and
 * followed by FZ_DATA zero bytes of data), written to a file in a scratch data root and
 * opened as the catalog opens a configured dataset (catalog_open: the file read by
 * cfitsio, the structural checks, skywcs_parse with the WCS validity rule, the celestial
 * axes), then described as GET /api/v1/datasets/{name} does (dataset_describe, dumped);
 * a celestial WCS converts its centre to the sky and back.  Everything is freed. */
#include "tests/fuzz/fuzz_common.h"
#include "daemon/api/handlers.h"
#include "daemon/catalog.h"
#include "daemon/config.h"
#include "engine/base/error.h"
#include "engine/sky/skywcs.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>

/* Zero bytes of data after the header: a 64 x 64 BITPIX -64 image, in whole blocks. */
#define FZ_DATA (2880 * 12)
/* Header bytes read at most (100 blocks, 3600 cards). */
#define FZ_MAX_HEADER (2880 * 100)

static tess_config cfg;
static char root[256], path[300];
static int ready;
static char blanks[2880];
static const char zeros[FZ_DATA];

/* Removes the file and the scratch data root when the fuzzer exits. */
static void cleanup(void)
{
    unlink(path);
    rmdir(root);
    config_release(&cfg);
}

/* The scratch data root ($TMPDIR, else /dev/shm when it exists, else /tmp) and a
 * configuration with the one dataset "f" = f.fits in it. */
static int prepare(void)
{
    const char *tmp = getenv("TMPDIR");
    char text[700], err[256];
    if (!tmp || !*tmp)
        tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(root, sizeof root, "%s/tessera-fuzz-dataset-XXXXXX", tmp);
    if (!mkdtemp(root))
        return -1;
    snprintf(path, sizeof path, "%s/f.fits", root);
    snprintf(text, sizeof text, "{\"data_roots\": [\"%s\"], \"datasets\": [{\"name\": \"f\", "
             "\"path\": \"f.fits\"}]}", root);
    if (config_init(&cfg) != 0 || config_load_text(text, &cfg, err, sizeof err) != 0)
        return -1;
    memset(blanks, ' ', sizeof blanks);
    atexit(cleanup);
    return 0;
}

/* The file is rewritten in place and cut to its new length: a truncation to 0 before
 * each write makes ext4 flush it at close (auto_da_alloc), a hundred times slower. */
static int write_file(const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "r+b");
    if (!f)
        f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t pad = (2880 - size % 2880) % 2880;
    int ok = fwrite(data, 1, size, f) == size && fwrite(blanks, 1, pad, f) == pad &&
             fwrite(zeros, 1, sizeof zeros, f) == sizeof zeros && fflush(f) == 0 &&
             ftruncate(fileno(f), (off_t)(size + pad + sizeof zeros)) == 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* What a served dataset must satisfy whatever its header said. */
static void check_dataset(const dataset *d)
{
    if (d->nx < 1 || d->ny < 1 || d->nz < 1 || !d->header || d->nkeys < 1)
        __builtin_trap();
    if (d->wcs_error[0] && (d->wcs || d->cel))
        __builtin_trap();
    if (d->cel && !d->wcs)
        __builtin_trap();
    if (d->wcs) {
        /* The rule's promise: every number of an accepted WCS is finite. */
        skywcs_summary s;
        skywcs_describe(d->wcs, &s);
        for (int i = 0; i < s.naxis; i++) {
            if (!isfinite(s.crval[i]) || !isfinite(s.crpix[i]) || !isfinite(s.cdelt[i]))
                __builtin_trap();
            for (int j = 0; j < s.naxis; j++)
                if (!isfinite(s.cd[i * s.naxis + j]))
                    __builtin_trap();
        }
    }
    json_t *o = dataset_describe(d, 1);
    if (!o)
        return;
    /* A solar frame is celestial axes but not the sky. */
    if (json_is_true(json_object_get(o, "celestial")) != (d->cel != NULL && !skywcs_solar(d->cel)))
        __builtin_trap();
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    if (s && !strstr(s, "\"wcs_error\":"))
        __builtin_trap();
    free(s);
    json_decref(o);
    if (d->cel) {
        skywcs *cel = skywcs_copy(d->cel);
        if (cel) {
            double x = 0.5 * (double)d->nx, y = 0.5 * (double)d->ny, lon, lat;
            skywcs_pix2sky(cel, 1, &x, &y, &lon, &lat);
            skywcs_sky2pix(cel, 1, &lon, &lat, &x, &y);
            skywcs_free(cel);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FZ_MAX_HEADER)
        return 0;
    if (!ready) {
        if (prepare() != 0)
            __builtin_trap();
        ready = 1;
    }
    if (write_file(data, size) != 0)
        __builtin_trap();
    catalog *c = NULL;
    char err[512] = "";
    int rc = catalog_open(&cfg, &c, err, sizeof err);
    if (rc == 0) {
        const dataset *d = catalog_find(c, "f");
        if (!d)
            __builtin_trap();
        check_dataset(d);
        catalog_free(c);
    } else if (rc != TESS_ENOMEM && !err[0]) {
        /* A refused dataset is refused with a reason. */
        __builtin_trap();
    }
    return 0;
}
