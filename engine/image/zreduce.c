/* Reductions of a volume along z: op set, image along z, plane values, result header. */
#include "engine/image/zreduce.h"

#include "engine/base/checked.h"
#include "engine/base/error.h"
#include "engine/fits/fitscard.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[] = {"mean", "sum", "min", "max", "std"};
#define NOPS (sizeof op_names / sizeof op_names[0])

const char *zreduce_op_name(stack_zop op)
{
    return (unsigned)op < NOPS ? op_names[op] : "?";
}

int zreduce_op_parse(const char *s, stack_zop *op)
{
    for (unsigned i = 0; s && i < NOPS; i++)
        if (strcmp(s, op_names[i]) == 0) {
            *op = (stack_zop)i;
            return 0;
        }
    return TESS_EINVAL;
}

const char *zreduce_axis_name(zreduce_axis axis)
{
    return axis == ZREDUCE_AXIS_Z ? "z" : axis == ZREDUCE_AXIS_XY ? "xy" : "?";
}

int zreduce_axis_parse(const char *s, zreduce_axis *axis)
{
    if (s && strcmp(s, "z") == 0)
        *axis = ZREDUCE_AXIS_Z;
    else if (s && strcmp(s, "xy") == 0)
        *axis = ZREDUCE_AXIS_XY;
    else
        return TESS_EINVAL;
    return 0;
}

/* ---- z-ranges ------------------------------------------------------------------------ */

#define ZRANGES 16       /* ranges at most: a job's blocks, a request's units of work */
#define ZTHREADS_MAX 8   /* threads of one zreduce_image (the caller and its helpers) */

static long range_planes(long nz)
{
    long per = (nz + ZRANGES - 1) / ZRANGES;
    return per < 1 ? 1 : per;
}

long zreduce_nranges(long nz)
{
    long per = range_planes(nz);
    return (nz + per - 1) / per;
}

void zreduce_range(long nz, long k, long *z0, long *z1)
{
    long per = range_planes(nz);
    *z0 = k * per;
    *z1 = *z0 + per < nz ? *z0 + per : nz;
}

/* ---- axis z: the ranges on the calling thread and pool helpers ------------------------ */

/* Shared by the caller and its helpers, freed by the last one out (a helper may start
 * after the caller has returned).  A thread claims the next range, folds it, stores its
 * partial, and then, unless another thread is merging, merges every stored partial that
 * follows the merged ones in z order. */
typedef struct zsplit {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int refs;
    stack *st;
    stack_zop op;
    const volatile int *cancel;
    long nz, nranges;
    long next;                 /* the next range to claim */
    long done;                 /* ranges folded (stored, or failed) */
    long merged;               /* ranges merged into acc, in z order */
    int merging;               /* a thread is merging (outside the lock) */
    stack_zpart *acc;          /* ranges 0..merged-1 */
    stack_zpart *parts[ZRANGES];
    int rc;
    char err[256];
} zsplit;

static void zsplit_unref(zsplit *z)
{
    pthread_mutex_lock(&z->lock);
    int last = --z->refs == 0;
    pthread_mutex_unlock(&z->lock);
    if (!last)
        return;
    for (int i = 0; i < ZRANGES; i++)
        stack_zpart_free(z->parts[i]);
    stack_zpart_free(z->acc);
    pthread_mutex_destroy(&z->lock);
    pthread_cond_destroy(&z->cv);
    free(z);
}

/* Called with the lock held and merging set: merges the stored partials that come next
 * in z order, unlocking while it does. */
static void zsplit_merge_locked(zsplit *z)
{
    while (!z->rc && z->merged < z->nranges && z->parts[z->merged]) {
        stack_zpart *p = z->parts[z->merged];
        z->parts[z->merged] = NULL;
        pthread_mutex_unlock(&z->lock);
        int rc = 0;
        if (!z->acc)
            z->acc = p;
        else {
            rc = stack_zpart_merge(z->acc, p);
            stack_zpart_free(p);
        }
        pthread_mutex_lock(&z->lock);
        if (rc) {
            z->rc = TESS_ENOMEM;
            snprintf(z->err, sizeof z->err, "out of memory");
        } else {
            z->merged++;
        }
    }
}

static void zsplit_work(zsplit *z)
{
    for (;;) {
        pthread_mutex_lock(&z->lock);
        if (!z->rc && z->cancel && *z->cancel) {
            z->rc = TESS_ECANCELED;
            snprintf(z->err, sizeof z->err, "cancelled");
        }
        long c = z->next < z->nranges && !z->rc ? z->next++ : -1;
        pthread_mutex_unlock(&z->lock);
        if (c < 0)
            return;
        long z0, z1;
        zreduce_range(z->nz, c, &z0, &z1);
        char err[256] = "";
        stack_zpart *part = NULL;
        int rc = stack_zreduce(z->st, z->op, z0, z1, 0, z->cancel, &part, err, sizeof err);
        pthread_mutex_lock(&z->lock);
        z->parts[c] = part;
        if (rc && !z->rc) {
            z->rc = rc;
            snprintf(z->err, sizeof z->err, "%s", err);
        }
        if (!z->merging) {
            z->merging = 1;
            zsplit_merge_locked(z);
            z->merging = 0;
        }
        z->done++;
        pthread_cond_broadcast(&z->cv);
        pthread_mutex_unlock(&z->lock);
    }
}

static void zsplit_task(void *arg)
{
    zsplit_work(arg);
    zsplit_unref(arg);
}

int zreduce_image(stack *s, long nz, stack_zop op, pool *workers, pool_priority prio,
                  const volatile int *cancel, double *out, char *err, size_t errlen)
{
    zsplit *z = calloc(1, sizeof *z);
    if (!z) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    pthread_mutex_init(&z->lock, NULL);
    pthread_cond_init(&z->cv, NULL);
    z->st = s;
    z->op = op;
    z->cancel = cancel;
    z->nz = nz;
    z->nranges = zreduce_nranges(nz);
    z->refs = 1;
    long threads = workers ? pool_threads(workers) : 1;
    threads = threads < 1 ? 1 : threads > ZTHREADS_MAX ? ZTHREADS_MAX : threads;
    if (threads > z->nranges)
        threads = z->nranges;
    for (long i = 1; i < threads; i++) {
        pthread_mutex_lock(&z->lock);
        z->refs++;
        pthread_mutex_unlock(&z->lock);
        if (pool_submit(workers, prio, zsplit_task, z) != 0)
            zsplit_unref(z);   /* no helper: the calling thread does that range itself */
    }
    zsplit_work(z);
    /* Every range is claimed (or an error stopped the claims): wait for those running,
     * and for the merge of the last one stored. */
    pthread_mutex_lock(&z->lock);
    while (z->done < z->next || z->merging)
        pthread_cond_wait(&z->cv, &z->lock);
    int rc = z->rc;
    if (rc)
        tess_seterr(err, errlen, "%s", z->err);
    else
        stack_zpart_result(z->acc, out);
    /* A helper task that starts after this return (every range done without it) must not
     * read the caller's flag, which may be gone by then. */
    z->cancel = NULL;
    pthread_mutex_unlock(&z->lock);
    zsplit_unref(z);
    return rc;
}

/* ---- axis xy ------------------------------------------------------------------------- */

double zreduce_values(stack_zop op, const double *v, size_t n)
{
    double s = 0, best = NAN;
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(v[i]))
            continue;
        c++;
        s += v[i];
        if ((op == STACK_ZOP_MIN && !(v[i] >= best)) || (op == STACK_ZOP_MAX && !(v[i] <= best)))
            best = v[i];
    }
    switch (op) {
    case STACK_ZOP_SUM: return s;
    case STACK_ZOP_MIN:
    case STACK_ZOP_MAX: return best;
    case STACK_ZOP_MEAN: return c ? s / (double)c : NAN;
    case STACK_ZOP_STD:
        break;
    }
    if (!c)
        return NAN;
    double mean = s / (double)c, ss = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(v[i]))
            ss += (v[i] - mean) * (v[i] - mean);
    return sqrt(ss / (double)c);
}

int zreduce_planes(stack *s, long nx, long ny, long nz, stack_zop op, long z0, long z1,
                   const volatile int *cancel, double *out, char *err, size_t errlen)
{
    if (z0 < 0 || z1 > nz || z0 > z1) {
        tess_seterr(err, errlen, "planes %ld..%ld outside the %ld planes", z0, z1 - 1, nz);
        return TESS_ERANGE;
    }
    size_t bytes;
    if (tess_size_dims(sizeof(double), (const long[]){nx, ny}, 2, &bytes)) {
        tess_seterr(err, errlen, "planes of %ld x %ld pixels: the sizes overflow", nx, ny);
        return TESS_ERANGE;
    }
    size_t npix = bytes / sizeof(double);
    double *plane = NULL;   /* allocated at the first plane read as doubles */
    int rc = 0;
    for (long z = z0; z < z1 && !rc; z++) {
        if (cancel && *cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        /* 8/16-bit planes in exact integers straight from the frame, others as doubles */
        rc = stack_reduce_plane(s, z, op, &out[z - z0], err, errlen);
        if (rc != 1)
            continue;
        if (!plane && !(plane = malloc(bytes))) {
            tess_seterr(err, errlen, "out of memory");
            rc = TESS_ENOMEM;
            break;
        }
        rc = stack_read_region(s, z, 0, 0, nx, ny, plane, err, errlen);
        if (!rc)
            out[z - z0] = zreduce_values(op, plane, npix);
    }
    free(plane);
    return rc;
}

/* ---- the header of the result -------------------------------------------------------- */

/* The keyword of an 80-character card: columns 1-8 without trailing blanks. */
static void card_key(const char *card, char key[9])
{
    memcpy(key, card, 8);
    key[8] = '\0';
    for (int k = 7; k >= 0 && key[k] == ' '; k--)
        key[k] = '\0';
}

/* 1 when `s` is a decimal axis number 1 or 2 and nothing else. */
static int spatial_axis(const char *s)
{
    return (s[0] == '1' || s[0] == '2') && s[1] == '\0';
}

/* 1 when the keyword is ROOT followed by "i_m" (i = 1, 2; m digits; both_spatial: m = 1, 2
 * too), as PCi_j, CDi_j, PVi_m, PSi_m. */
static int spatial_pair(const char *key, const char *root, int both_spatial)
{
    size_t n = strlen(root);
    if (strncmp(key, root, n) != 0 || (key[n] != '1' && key[n] != '2') || key[n + 1] != '_')
        return 0;
    const char *m = key + n + 2;
    if (both_spatial)
        return spatial_axis(m);
    if (!*m)
        return 0;
    for (; *m; m++)
        if (*m < '0' || *m > '9')
            return 0;
    return 1;
}

zreduce_card zreduce_card_class(const char *card)
{
    char key[9];
    card_key(card, key);
    static const char *const axis_roots[] = {"CTYPE", "CUNIT", "CRVAL", "CRPIX", "CDELT",
                                             "CROTA", "CNAME", "CRDER", "CSYER"};
    for (size_t i = 0; i < sizeof axis_roots / sizeof axis_roots[0]; i++)
        if (strncmp(key, axis_roots[i], 5) == 0 && spatial_axis(key + 5))
            return ZREDUCE_CARD_WCS;
    if (spatial_pair(key, "PC", 1) || spatial_pair(key, "CD", 1) || spatial_pair(key, "PV", 0) ||
        spatial_pair(key, "PS", 0))
        return ZREDUCE_CARD_WCS;
    static const char *const frame_keys[] = {"RADESYS", "RADECSYS", "EQUINOX", "EPOCH",
                                             "LONPOLE", "LATPOLE"};
    for (size_t i = 0; i < sizeof frame_keys / sizeof frame_keys[0]; i++)
        if (strcmp(key, frame_keys[i]) == 0)
            return ZREDUCE_CARD_WCS;
    static const char *const obs_keys[] = {"OBJECT", "TELESCOP", "INSTRUME", "DATE-OBS",
                                           "MJD-OBS"};
    for (size_t i = 0; i < sizeof obs_keys / sizeof obs_keys[0]; i++)
        if (strcmp(key, obs_keys[i]) == 0)
            return ZREDUCE_CARD_OBS;
    return strcmp(key, "BUNIT") == 0 ? ZREDUCE_CARD_BUNIT : ZREDUCE_CARD_OTHER;
}

/* The longest prefix of `s` (into out, at most len - 1 bytes) whose FITS string value
 * holds at most `max` characters between the quotes, quotes doubled: REDSRC's value is
 * cut at 66 of them (fitscard_string would keep 68). */
static void fits_value_prefix(const char *s, char *out, size_t len, size_t max)
{
    size_t n = 0, q = 0;
    for (; *s && n + 1 < len; s++) {
        size_t need = *s == '\'' ? 2 : 1;
        if (q + need > max)
            break;
        q += need;
        out[n++] = *s;
    }
    out[n] = '\0';
}

int zreduce_header(const char *src, int nkeys, stack_zop op, zreduce_axis axis,
                   const char *source, char **cards, int *ncards, char *err, size_t errlen)
{
    *cards = NULL;
    *ncards = 0;
    char *out = malloc(((size_t)(nkeys > 0 ? nkeys : 0) + 2) * 80 + 1);
    if (!out) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    int n = 0;
    for (int i = 0; src && i < nkeys; i++) {
        const char *c = src + (size_t)i * 80;
        zreduce_card k = zreduce_card_class(c);
        if (k == ZREDUCE_CARD_OBS || k == ZREDUCE_CARD_BUNIT ||
            (k == ZREDUCE_CARD_WCS && axis == ZREDUCE_AXIS_Z))
            memcpy(out + (size_t)n++ * 80, c, 80);
    }
    char text[80];
    snprintf(text, sizeof text, "NaN-aware reduction along axis %s", zreduce_axis_name(axis));
    fitscard_string(out + (size_t)n++ * 80, "REDUCEOP", zreduce_op_name(op), 8, text);
    char val[72];
    fits_value_prefix(source ? source : "", val, sizeof val, 66);
    fitscard_string(out + (size_t)n++ * 80, "REDSRC", val, 8, "dataset reduced");
    out[(size_t)n * 80] = '\0';
    *cards = out;
    *ncards = n;
    return 0;
}
