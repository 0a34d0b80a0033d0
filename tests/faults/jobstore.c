/* The job store as the fault programs drive it (jobstore.h). */
#include "tests/faults/jobstore.h"
#include "daemon/jobs/jobtypes.h"
#include "tests/faults/faultinj.h"
#include "tests/testutil.h"

#include <dirent.h>
#include <fitsio.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MOSAIC_DIR TESSERA_TESTDATA_DIR "/mosaic"

void js_rm_rf(const char *path)
{
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    ck_assert_int_eq(system(cmd), 0);
}

/* An nx x ny (x nz) float32 image with a TAN WCS of 1' pixels centred on (ra, dec) = (10,
 * 20) at pixel (crpix1, crpix2); value v(x, y, z) = sin(0.3 x) cos(0.2 y) + 0.01 z + c. */
static void write_tile(const char *path, long nx, long ny, long nz, double crpix1,
                       double crpix2, double c)
{
    float *v = malloc(sizeof(float) * (size_t)(nx * ny * nz));
    ck_assert_ptr_nonnull(v);
    for (long z = 0; z < nz; z++)
        for (long y = 0; y < ny; y++)
            for (long x = 0; x < nx; x++)
                v[(z * ny + y) * nx + x] = (float)(sin(0.3 * (double)x) * cos(0.2 * (double)y) +
                                                   0.01 * (double)z + c);
    char name[PATH_MAX + 2];
    snprintf(name, sizeof name, "!%s", path);
    fitsfile *f;
    int st = 0;
    long naxes[3] = {nx, ny, nz};
    double crval1 = 10, crval2 = 20, cd1 = -1.0 / 60, cd2 = 1.0 / 60;
    fits_create_file(&f, name, &st);
    fits_create_img(f, FLOAT_IMG, nz > 1 ? 3 : 2, naxes, &st);
    fits_write_key(f, TSTRING, "CTYPE1", "RA---TAN", NULL, &st);
    fits_write_key(f, TSTRING, "CTYPE2", "DEC--TAN", NULL, &st);
    fits_write_key(f, TDOUBLE, "CRPIX1", &crpix1, NULL, &st);
    fits_write_key(f, TDOUBLE, "CRPIX2", &crpix2, NULL, &st);
    fits_write_key(f, TDOUBLE, "CRVAL1", &crval1, NULL, &st);
    fits_write_key(f, TDOUBLE, "CRVAL2", &crval2, NULL, &st);
    fits_write_key(f, TDOUBLE, "CDELT1", &cd1, NULL, &st);
    fits_write_key(f, TDOUBLE, "CDELT2", &cd2, NULL, &st);
    fits_write_img(f, TFLOAT, 1, nx * ny * nz, v, &st);
    fits_close_file(f, &st);
    free(v);
    ck_assert_msg(st == 0, "writing %s: cfitsio status %d", path, st);
}

void js_clear(js_fixture *f)
{
    js_rm_rf(f->jobs);
    js_rm_rf(f->shadow);
    ck_assert_int_eq(mkdir(f->jobs, 0755), 0);
    ck_assert_int_eq(mkdir(f->shadow, 0755), 0);
}

void js_setup(js_fixture *f, const char *tag)
{
    memset(f, 0, sizeof *f);
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(f->dir, sizeof f->dir, "%s/tessera-%s-XXXXXX", base, tag);
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    snprintf(f->data, sizeof f->data, "%s/data", f->dir);
    snprintf(f->jobs, sizeof f->jobs, "%s/jobs", f->dir);
    snprintf(f->shadow, sizeof f->shadow, "%s/shadow", f->dir);
    ck_assert_int_eq(mkdir(f->data, 0755), 0);
    js_clear(f);
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/t1.fits", f->data);
    write_tile(p, 24, 20, 1, 16, 10, 1.0);
    snprintf(p, sizeof p, "%s/t2.fits", f->data);
    write_tile(p, 24, 20, 1, -4, 14, 1.5);
    snprintf(p, sizeof p, "%s/cube.fits", f->data);
    write_tile(p, 48, 64, 24, 24, 32, 0.0);

    ck_assert_int_eq(config_init(&f->cfg), 0);
    f->cfg.data_roots = calloc(2, sizeof(char *));
    f->cfg.data_roots[0] = realpath(f->data, NULL);
    f->cfg.data_roots[1] = realpath(MOSAIC_DIR, NULL);
    ck_assert(f->cfg.data_roots[0] && f->cfg.data_roots[1]);
    f->cfg.n_roots = 2;
    f->cfg.threads = 2;
    free(f->cfg.error_log);
    f->cfg.error_log = NULL;   /* failures on stderr, one line each */
    f->cfg.datasets = calloc(1, sizeof(ds_config));
    f->cfg.datasets[0].name = strdup("cube");
    f->cfg.datasets[0].path = strdup("cube.fits");
    f->cfg.n_datasets = 1;
    jobtypes_register_all();
    f->pool = pool_new(2, 256);
    ck_assert_ptr_nonnull(f->pool);
}

void js_teardown(js_fixture *f)
{
    pool_free(f->pool);
    f->pool = NULL;
    config_release(&f->cfg);
    js_rm_rf(f->dir);
}

/* The body of a mosaic job of `inputs` onto the target header text `hdr`. */
static char *mosaic_json(const char *const *inputs, int n, const char *hdr, const char *method,
                         const char *name)
{
    json_t *b = json_object();
    json_object_set_new(b, "type", json_string("mosaic"));
    json_t *in = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(in, json_string(inputs[i]));
    json_object_set_new(b, "inputs", in);
    json_object_set_new(b, "target", json_pack("{s:s}", "header", hdr));
    json_object_set_new(b, "method", json_string(method));
    json_object_set_new(b, "match_background", json_true());
    json_object_set_new(b, "output", json_pack("{s:s}", "name", name));
    char *s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    ck_assert_ptr_nonnull(s);
    return s;
}

char *js_small_mosaic(const char *name)
{
    static const char *const inputs[] = {"t1.fits", "t2.fits"};
    static const char hdr[] =
        "NAXIS   = 2\nNAXIS1  = 40\nNAXIS2  = 28\nCTYPE1  = 'RA---TAN'\n"
        "CTYPE2  = 'DEC--TAN'\nCRPIX1  = 20.5\nCRPIX2  = 14.5\nCRVAL1  = 10.0\n"
        "CRVAL2  = 20.0\nCDELT1  = -0.0166666666667\nCDELT2  = 0.0166666666667\n";
    fi_hold(1);
    char *s = mosaic_json(inputs, 2, hdr, "bilinear", name);
    fi_hold(0);
    return s;
}

char *js_big_mosaic(const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/reference_target.hdr", MOSAIC_DIR);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    static char hdr[65536];
    size_t n = fread(hdr, 1, sizeof hdr - 1, f);
    hdr[n] = '\0';
    fclose(f);
    char in[6][PATH_MAX];
    const char *inputs[6];
    char *root = realpath(MOSAIC_DIR, NULL);
    for (int i = 0; i < 6; i++) {
        snprintf(in[i], sizeof in[i], "%s/tile_%d.fits", root, i + 1);
        inputs[i] = in[i];
    }
    free(root);
    return mosaic_json(inputs, 6, hdr, "lanczos3", name);
}

char *js_rechunk(void)
{
    return strdup("{\"type\": \"rechunk\", \"dataset\": \"cube\"}");
}

/* The job document of `id` as JSON (the caller decrefs), or NULL. */
static json_t *job_doc(jobs *J, const char *id)
{
    int missing = 0;
    char *s = jobs_get_json(J, id, &missing);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    return j;
}

int js_state(jobs *J, const char *id, char *state, char *detail, size_t dlen)
{
    fi_hold(1);
    json_t *j = job_doc(J, id);
    int rc = -1;
    if (j) {
        const char *st = json_string_value(json_object_get(j, "state"));
        const char *d = json_string_value(json_object_get(json_object_get(j, "error"),
                                                          "detail"));
        snprintf(state, 16, "%s", st ? st : "");
        if (detail)
            snprintf(detail, dlen, "%s", d ? d : "");
        rc = st ? 0 : -1;
        json_decref(j);
    }
    fi_hold(0);
    return rc;
}

int js_wait(jobs *J, const char *id, double limit_s, char *state, char *detail, size_t dlen)
{
    double t0 = tt_now_s();
    for (;;) {
        if (js_state(J, id, state, detail, dlen) == 0 && strcmp(state, "queued") != 0 &&
            strcmp(state, "running") != 0)
            return 1;
        if (tt_now_s() - t0 > limit_s)
            return 0;
        usleep(10000);
    }
}

int js_ids(jobs *J, char (*ids)[17], int max)
{
    fi_hold(1);
    int unavailable = 0;
    char *s = jobs_list_json(J, 1000, &unavailable);
    json_t *a = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    int n = 0;
    for (size_t i = 0; a && i < json_array_size(a) && n < max; i++) {
        const char *id = json_string_value(json_object_get(json_array_get(a, i), "id"));
        if (id)
            snprintf(ids[n++], 17, "%s", id);
    }
    json_decref(a);
    fi_hold(0);
    return n;
}

int js_doc_id(const char *doc, char *id)
{
    fi_hold(1);
    json_t *j = json_loads(doc, 0, NULL);
    const char *s = j ? json_string_value(json_object_get(j, "id")) : NULL;
    int rc = s && strlen(s) == 16 ? 0 : -1;
    if (!rc)
        snprintf(id, 17, "%s", s);
    json_decref(j);
    fi_hold(0);
    return rc;
}

unsigned char *js_product(jobs *J, const char *id, size_t *len)
{
    char path[PATH_MAX], ctype[64], state[16];
    *len = 0;
    fi_hold(1);
    unsigned char *b = NULL;
    if (jobs_result(J, id, path, ctype, state) == 0) {
        FILE *f = fopen(path, "rb");
        struct stat st;
        if (f && fstat(fileno(f), &st) == 0 && (b = malloc((size_t)st.st_size + 1)) &&
            fread(b, 1, (size_t)st.st_size, f) == (size_t)st.st_size) {
            *len = (size_t)st.st_size;
        } else {
            free(b);
            b = NULL;
        }
        if (f)
            fclose(f);
    }
    fi_hold(0);
    return b;
}

int js_leftovers(const js_fixture *f)
{
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/work", f->jobs);
    int n = tt_count_entries(p);
    n = n > 0 ? n : 0;
    snprintf(p, sizeof p, "%s/results", f->jobs);
    DIR *d = opendir(p);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        n += l > 4 && strcmp(e->d_name + l - 4, ".tmp") == 0;
    }
    if (d)
        closedir(d);
    return n;
}
