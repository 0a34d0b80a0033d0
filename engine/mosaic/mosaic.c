/* Mosaics as stages of blocks: per-input reprojection over its own box, overlap fits,
 * a global background solve, and a coadd by bands of output rows (see mosaic.h). */
#include "engine/mosaic/coadd.h"
#include "engine/mosaic/mosaic_int.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/fits/fitswrite.h"
#include "engine/base/error.h"
#include "engine/base/hugemem.h"
#include "engine/base/fileio.h"
#include "engine/base/mapguard.h"
#include "engine/base/pool.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------ */
/* Names                                                                                  */

static const char *const combine_names[] = { "mean", "sum", "median", "min", "max", "first",
                                             "last" };

int mos_combine_parse(const char *s, mos_combine *c)
{
    for (int i = 0; s && i < 7; i++)
        if (strcasecmp(s, combine_names[i]) == 0) {
            *c = (mos_combine)i;
            return 0;
        }
    return TESS_EINVAL;
}

const char *mos_combine_name(mos_combine c)
{
    return (int)c >= 0 && (int)c < 7 ? combine_names[c] : "unknown";
}

const char *mos_bg_name(mos_bg b)
{
    return b == MOS_BG_PLANE ? "plane" : b == MOS_BG_LEVEL ? "level" : "none";
}

/* ------------------------------------------------------------------------------------ */
/* Cards                                                                                  */

/* A string card, padded to 8 characters; a value too long for one card keeps its end,
 * which names the file, after "...". */
void mos_add_str(fitscard_list *b, const char *key, const char *s, const char *comment)
{
    char t[64];
    size_t len = strlen(s);
    if (len > 60) {
        snprintf(t, sizeof t, "...%s", s + len - 57);
        s = t;
    }
    fitscard_list_string(b, key, s, 8, comment);
}

int mos_cards_from_text(const char *text, size_t len, char **cards, int *nkeys, char *err,
                        size_t errlen)
{
    return fitscard_parse(text, len, MOS_MAX_CARDS, cards, nkeys, err, errlen);
}

/* Fills `o` for the grid whose header is `cards`: its WCS parsed, its CRPIX1/2 cards
 * kept.  o->full stays NULL (shifted_wcs then parses each time) when either card is given
 * more than once or the parse fails (shifted_wcs reports why). */
static void origin_init(mos_origin *o, const char *cards, int nkeys)
{
    memset(o, 0, sizeof *o);
    int has[2] = { 0, 0 };
    for (int i = 0; i < nkeys; i++) {
        const char *c = cards + (size_t)i * 80;
        for (int k = 0; k < 2; k++)
            if (fitscard_key_is(c, k ? "CRPIX2" : "CRPIX1") && has[k]++ == 0)
                memcpy(o->card[k], c, 80);
    }
    for (int k = 0; k < 2; k++) {
        if (has[k] > 1)
            return;
        if (!has[k])
            (void)fitscard_real(o->card[k], k ? "CRPIX2" : "CRPIX1", 0.0, 14, NULL);
    }
    char e[256];
    if (skywcs_parse(cards, nkeys, &o->full, e, sizeof e) != 0)
        o->full = NULL;
}

static void origin_release(mos_origin *o)
{
    skywcs_free(o->full);
    o->full = NULL;
}

/* The celestial WCS of the sub-grid whose pixel (0, 0) is (dx, dy) of the grid of
 * `cards`: the cards with their pixel origin moved (fitsimg_header_shift; a CRPIXn they
 * leave at its default 0 is added), parsed.  With o->full the parse is skipped: CRPIX1/2
 * are shifted as cards alone and read back as wcslib reads them (a value rewritten with
 * 15 significant digits rounds), then set into the parsed WCS (skywcs_celestial_crpix),
 * the same numbers bit for bit.  Returns the WCS or NULL with `err`. */
static skywcs *shifted_wcs(const mos_origin *o, const char *cards, int nkeys, long dx,
                           long dy, char *err, size_t errlen)
{
    const double shift[2] = { (double)dx, (double)dy };
    if (o && o->full) {
        double crpix[2];
        int ok = 1;
        for (int k = 0; k < 2; k++) {
            char c[81], val[80];
            memcpy(c, o->card[k], 80);
            c[80] = '\0';
            fitsimg_header_shift(c, 1, shift, 2);
            crpix[k] = NAN;                 /* unchanged: the value already parsed */
            if (memcmp(c, o->card[k], 80) == 0)
                continue;
            char *end = val;
            if (fitscard_get(c, 1, k ? "CRPIX2" : "CRPIX1", val, sizeof val))
                crpix[k] = strtod(val, &end);
            ok &= !isnan(crpix[k]) && end != val && *end == '\0';
        }
        skywcs *cel = ok ? skywcs_celestial_crpix(o->full, crpix) : NULL;
        if (cel)
            return cel;
    }
    fitscard_list b;
    fitscard_list_init(&b, nkeys + 2);
    int has[2] = { 0, 0 };
    for (int i = 0; i < nkeys; i++) {
        const char *c = cards + (size_t)i * 80;
        has[0] |= fitscard_key_is(c, "CRPIX1");
        has[1] |= fitscard_key_is(c, "CRPIX2");
    }
    fitscard_list_cards(&b, cards, nkeys);
    for (int k = 0; k < 2; k++)
        if (!has[k])
            fitscard_list_real(&b, k ? "CRPIX2" : "CRPIX1", 0.0, 14, NULL);
    skywcs *w = NULL, *cel = NULL;
    if (b.rc) {
        tess_seterr(err, errlen, "out of memory");
    } else {
        fitsimg_header_shift(b.cards, b.n, shift, 2);
        if (skywcs_parse(b.cards, b.n, &w, err, errlen) == 0) {
            cel = skywcs_celestial(w);
            if (!cel)
                tess_seterr(err, errlen, "the WCS has no celestial axes");
        }
    }
    skywcs_free(w);
    fitscard_list_release(&b);
    return cel;
}

/* ------------------------------------------------------------------------------------ */
/* Files                                                                                  */

/* WORKDIR/<pre><k><post>. */
void mos_wpath(const mosaic *m, char *out, size_t len, const char *pre, long k,
                  const char *post)
{
    snprintf(out, len, "%s/%s%ld%s", m->workdir, pre, k, post);
}

/* Writes a small file whole: to NAME.tmp, then renamed (no fsync: the job runner syncs
 * the work directory before it records a block).  Returns 0 or TESS_EIO. */
int mos_write_small(const char *path, const void *data, size_t n, char *err, size_t errlen)
{
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || tess_pwrite_all(fd, data, n, 0) != 0) {
        tess_seterr(err, errlen, "cannot write '%s': %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        unlink(tmp);
        return TESS_EIO;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        tess_seterr(err, errlen, "cannot rename '%s': %s", tmp, strerror(errno));
        unlink(tmp);
        return TESS_EIO;
    }
    return 0;
}

/* Reads a whole small file (malloc'd, NUL-terminated).  Returns 0 or TESS_EIO. */
int mos_read_small(const char *path, char **data, size_t *n)
{
    *data = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return TESS_EIO;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 0 || st.st_size > ((off_t)1 << 31)) {
        close(fd);
        return TESS_EIO;
    }
    char *d = malloc((size_t)st.st_size + 1);
    if (!d || tess_pread_all(fd, d, (size_t)st.st_size, 0) != 0) {
        free(d);
        close(fd);
        return TESS_EIO;
    }
    close(fd);
    d[st.st_size] = '\0';
    *data = d;
    *n = (size_t)st.st_size;
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Plan                                                                                   */

int mos_nstages(const mosaic *m)
{
    return m->nstages;
}

int mos_input_overlaps(const mosaic *m, int k)
{
    return k >= 0 && k < m->n && m->in[k].box[2] > 0;
}

long mos_nblocks(const mosaic *m, int stage)
{
    return stage >= 0 && stage < m->nstages ? m->nblocks[stage] : 0;
}

const char *mos_stage_name(const mosaic *m, int stage)
{
    static const char *const names[] = { "reproject", "overlaps", "solve", "coadd" };
    return stage >= 0 && stage < m->nstages ? names[m->kind[stage]] : "none";
}

void mos_target_size(const mosaic *m, long *nx, long *ny)
{
    *nx = m->nx;
    *ny = m->ny;
}

void mos_input_box(const mosaic *m, int k, long box[4])
{
    memcpy(box, m->in[k].box, 4 * sizeof(long));
}

/* Keeps the larger of c->block_bytes and `bytes`, with its description. */
static void est_block(mos_cost *c, double bytes, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void est_block(mos_cost *c, double bytes, const char *fmt, ...)
{
    if (!(bytes > c->block_bytes))
        return;
    c->block_bytes = bytes;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->block_what, sizeof c->block_what, fmt, ap);
    va_end(ap);
}

/* Bytes one output row of a coadd group holds: the accumulator (coadd.h: 16 a pixel, for
 * MEDIAN 4 more and 4 for each of the nk inputs) and the float32 value and coverage. */
static double coadd_rowbytes(const mosaic *m, long nk)
{
    return (double)m->nx * 8.0 + mos_accum_bytes(m->combine, (size_t)m->nx,
                                                 nk > 0 ? (int)(nk < INT_MAX ? nk : INT_MAX) : 1);
}

/* Output rows of a coadd group: COADD_GROUP_BYTES of buffers, at least 1, at most rows. */
static long coadd_group_rows(const mosaic *m, long nk, long rows)
{
    double g = floor((double)COADD_GROUP_BYTES / coadd_rowbytes(m, nk));
    return g < 1.0 ? 1 : g > (double)rows ? rows : (long)g;
}

void mos_estimate(const mosaic *m, mos_cost *c)
{
    memset(c, 0, sizeof *c);
    double bpp = mos_input_bpp(m->method);
    int np = m->bg == MOS_BG_PLANE ? 3 : 1;
    c->product_bytes = (double)(m->h0 + m->d0 + m->h1 + m->d1);
    c->work_bytes = c->product_bytes + (double)m->tkeys * 81.0 + 256.0
                    + 16.0 * (double)m->coadd_bands;       /* sums.bin */
    c->coadd_traffic = (double)m->nx * (double)m->ny * 8.0;
    c->state_bytes = (double)sizeof *m + (double)m->tkeys * 80.0;
    for (int k = 0; k < m->n; k++) {
        const src *s = &m->in[k];
        c->state_bytes += (double)sizeof *s + (double)s->nkeys * 80.0 + 16384.0;
        c->work_bytes += (double)strlen(s->path) + 160.0;
        if (s->box[2] <= 0 || s->box[3] <= 0)
            continue;
        double bw = (double)s->box[2], bh = (double)s->box[3];
        c->work_bytes += bw * bh * 4.0 * (m->method == RP_EXACT ? 2.0 : 1.0);
        c->coadd_traffic += bw * bh * 4.0 * (m->method == RP_EXACT ? 2.0 : 1.0);
        /* reprojection: a band's input pixels, its output band (values, footprint) and
         * the kernel's scratch for that band (for exact about 64 bytes an output pixel of
         * up to 128 rows and 1 KB an input column: 8192-pixel-wide bands held twice what
         * the rest of the block did) */
        double rows = (double)s->rows;
        est_block(c, s->crop_px * bpp + bw * rows * 8.0 + REPROJECT_OVERHEAD
                         + rp_scratch_bytes(m->method, s->nx, s->ny, s->box[2], s->rows),
                  "reprojection of input '%.80s': a band of %.0f x %.0f output pixels reads "
                  "up to %.0f input pixels", s->name, bw, rows, s->crop_px);
        /* overlap fit: the samples of the largest overlap, at most the box itself (see
         * run_overlaps: at most cw * (h / step + 1) samples, step >= sqrt(area / 2^20)) */
        if (m->bg != MOS_BG_NONE) {
            double area = bw * bh, nin = fmin(area, 1024.0 * sqrt(area) + bw);
            est_block(c, 57.0 * nin + (double)m->n * (double)sizeof(ov_rec),
                      "overlap fit of input '%.80s': up to %.0f samples", s->name, nin);
        }
    }
    if (m->bg != MOS_BG_NONE) {
        double nn = (double)m->n * np;
        est_block(c, nn * nn * 8.0 + nn * 8.0 + (double)m->n * 28.0,
                  "background solve: a %.0f x %.0f normal matrix", nn, nn);
        double pairs = 0.0;
        if (m->n <= 20000) {
            for (int i = 0; i < m->n; i++)
                for (int j = i + 1; j < m->n; j++) {
                    const long *a = m->in[i].box, *b = m->in[j].box;
                    pairs += a[2] > 0 && b[2] > 0 && a[0] < b[0] + b[2] && b[0] < a[0] + a[2]
                             && a[1] < b[1] + b[3] && b[1] < a[1] + a[3];
                }
        } else {
            pairs = (double)m->n * (double)(m->n - 1) / 2.0;
        }
        c->work_bytes += pairs * (double)sizeof(ov_rec) + (double)m->n * 32.0;
    }
    /* coadd: the buffers of run_coadd for each band (a group of rows, the maps) */
    for (long band = 0; band < m->coadd_bands; band++) {
        long y0 = band * m->coadd_rows, y1 = y0 + m->coadd_rows < m->ny ? y0 + m->coadd_rows
                                                                        : m->ny;
        long nk = 0;
        for (int k = 0; k < m->n; k++) {
            const src *s = &m->in[k];
            nk += s->box[2] > 0 && s->box[1] < y1 && s->box[1] + s->box[3] > y0;
        }
        long g = coadd_group_rows(m, nk, y1 - y0);
        est_block(c, (double)g * coadd_rowbytes(m, nk) + 2.0 * (double)COADD_WRITE_BYTES
                  + (double)m->n * 4.0
                  + 2.0 * (double)(nk > 0 ? nk : 1) * 48.0,   /* the maps' records */
                  "coadd of %ld rows of %ld pixels from %ld inputs", g, m->nx, nk);
    }
}

void mos_free(mosaic *m)
{
    if (!m)
        return;
    for (int k = 0; m->in && k < m->n; k++) {   /* m->in is NULL when its calloc failed */
        free(m->in[k].path);
        free(m->in[k].name);
        free(m->in[k].cards);
        skywcs_free(m->in[k].cel);
        origin_release(&m->in[k].origin);
    }
    free(m->in);
    free(m->tcards);
    skywcs_free(m->tcel);
    origin_release(&m->torigin);
    free(m->workdir);
    free(m->corr);
    free(m->stage_base);
    free(m->staged);
    for (int k = 0; m->whole && k < m->n; k++)
        free(m->whole[k].pix);
    free(m->whole);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* Bytes of one staged plane of input k: its box's pixels as float32, rounded up to 64. */
static size_t stage_plane_bytes(const src *s)
{
    size_t np = s->box[2] > 0 && s->box[3] > 0 ? (size_t)s->box[2] * (size_t)s->box[3] : 0;
    return (np * sizeof(float) + 63) / 64 * 64;
}

double mos_stage_bytes(const mosaic *m)
{
    double b = 0;
    for (int k = 0; k < m->n; k++)
        b += (double)stage_plane_bytes(&m->in[k]);
    b *= m->method == RP_EXACT ? 2 : 1;
    /* what tess_alloc_huge reserves for it (whole huge pages) */
    return b <= (double)(SIZE_MAX / 4) ? (double)tess_huge_bytes((size_t)b) : b;
}

int mos_stage_in_memory(mosaic *m, double max_bytes)
{
    double need = mos_stage_bytes(m);
    if (!m->workdir || m->staged || !(need <= max_bytes) || need > (double)(SIZE_MAX / 4))
        return 0;
    int planes = m->method == RP_EXACT ? 2 : 1;
    float **st = calloc((size_t)planes * (size_t)m->n, sizeof(float *));
    /* On transparent huge pages where the kernel allows (THP "madvise"): the 64-input
     * mosaic of 512^2 tiles took 0.20 s of CPU in all against 0.25 s with 4 KB pages,
     * which fault 16,000 times as the reprojection writes them (1 thread, median of 9
     * alternated). */
    char *p = st ? tess_alloc_huge((size_t)need) : NULL;
    if (!p) {
        free(st);
        return 0;
    }
    char *q = p;
    for (int f = 0; f < planes; f++)
        for (int k = 0; k < m->n; k++) {
            st[f * m->n + k] = (float *)(void *)q;
            q += stage_plane_bytes(&m->in[k]);
        }
    m->staged = st;
    m->stage_base = p;
    m->whole = calloc((size_t)m->n, sizeof *m->whole);   /* NULL: bands read their crops */
    return 1;
}

/* Plane f (0 values, 1 weights) of input k held in memory, or NULL (in its file). */
static float *staged_plane(const mosaic *m, int k, int f)
{
    return m->staged ? m->staged[f * m->n + k] : NULL;
}

/* The headers of mosaic.fits; `corr` NULL gives zero coefficients (same card count).
 * Returns 0, or TESS_ENOMEM / TESS_EINVAL with both lists released. */
static int build_headers(const mosaic *m, const double *corr, fitscard_list *h0,
                         fitscard_list *h1)
{
    fitscard_list_init(h0, MOS_MAX_CARDS);
    fitscard_list_init(h1, MOS_MAX_CARDS);
    fitscard_list_logical(h0, "SIMPLE", 1, "conforms to FITS standard");
    fitscard_list_int(h0, "BITPIX", -32, "array data type");
    fitscard_list_int(h0, "NAXIS", 2, "number of array dimensions");
    fitscard_list_int(h0, "NAXIS1", m->nx, NULL);
    fitscard_list_int(h0, "NAXIS2", m->ny, NULL);
    fitscard_list_logical(h0, "EXTEND", 1, NULL);
    /* BUNIT when every input says the same. */
    int same = 1;
    for (int k = 1; k < m->n; k++)
        same = same && strcmp(m->in[k].bunit, m->in[0].bunit) == 0;
    mos_add_str(h0, "BUNIT", same ? m->in[0].bunit : "", "of the inputs (empty when they differ)");
    fitscard_list_cards(h0, m->tcards, m->tkeys);
    mos_add_str(h0, "ORIGIN", "Tessera", "tessera mosaic");
    fitscard_list_int(h0, "NINPUTS", m->n, "number of inputs");
    mos_add_str(h0, "METHOD", rp_method_name(m->method), "reprojection method");
    mos_add_str(h0, "COMBINE", mos_combine_name(m->combine), "how overlapping values combine");
    mos_add_str(h0, "BGMATCH", mos_bg_name(m->bg), "background matching: none, plane, level");
    for (int k = 0; k < m->n; k++) {
        char key[16];
        snprintf(key, sizeof key, "INP%d", k + 1);
        mos_add_str(h0, key, m->in[k].name,
                    m->in[k].box[2] > 0 ? NULL : "does not overlap the target: adds nothing");
    }
    if (m->bg != MOS_BG_NONE) {
        fitscard_list_commentary(h0, "COMMENT", "Background of input n subtracted: BGAn + "
                                 "BGBn * x + BGCn * y,");
        fitscard_list_commentary(h0, "COMMENT", "x, y 0-based pixel coordinates of this "
                                 "image.");
        for (int k = 0; k < m->n; k++) {
            static const char *const p[3] = { "BGA", "BGB", "BGC" };
            for (int c = 0; c < 3; c++) {
                char key[16];
                snprintf(key, sizeof key, "%s%d", p[c], k + 1);
                fitscard_list_real(h0, key, corr ? corr[3 * k + c] : 0.0, 14, NULL);
            }
        }
    }
    fitscard_list_string(h0, "CHECKSUM", "0000000000000000", 0, "HDU checksum");
    fitscard_list_string(h0, "DATASUM", "0", 0, "data unit checksum");
    mos_add_str(h1, "XTENSION", "IMAGE", "image extension");
    fitscard_list_int(h1, "BITPIX", -32, "array data type");
    fitscard_list_int(h1, "NAXIS", 2, "number of array dimensions");
    fitscard_list_int(h1, "NAXIS1", m->nx, NULL);
    fitscard_list_int(h1, "NAXIS2", m->ny, NULL);
    fitscard_list_int(h1, "PCOUNT", 0, NULL);
    fitscard_list_int(h1, "GCOUNT", 1, NULL);
    mos_add_str(h1, "EXTNAME", "COVERAGE", "summed weight of the inputs at each pixel");
    fitscard_list_commentary(h1, "COMMENT", "Coverage: the sum of the inputs' weights at each "
                             "pixel (the number");
    fitscard_list_commentary(h1, "COMMENT", "of inputs for interpolation, covered fractions "
                             "for exact).");
    fitscard_list_cards(h1, m->tcards, m->tkeys);
    fitscard_list_string(h1, "CHECKSUM", "0000000000000000", 0, "HDU checksum");
    fitscard_list_string(h1, "DATASUM", "0", 0, "data unit checksum");
    int rc = h0->rc ? h0->rc : h1->rc;
    if (rc) {
        fitscard_list_release(h0);
        fitscard_list_release(h1);
        return rc == TESS_ENOMEM ? TESS_ENOMEM : TESS_EINVAL;
    }
    return 0;
}

static size_t blocks2880(size_t n)
{
    return (n + 2879) / 2880 * 2880;
}

static atomic_ulong header_reads;

unsigned long mos_header_reads(void)
{
    return atomic_load(&header_reads);
}

void mos_header_release(mos_header *h)
{
    free(h->cards);
    skywcs_free(h->cel);
    memset(h, 0, sizeof *h);
}

int mos_read_header(const char *path, int hdu, mos_header *h, skywcs_image_check *chk,
                    char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    memset(chk, 0, sizeof *chk);
    atomic_fetch_add(&header_reads, 1);
    fitsimg_info info;
    int rc = fitsimg_read_info(path, hdu, &info, err, errlen);
    if (rc)
        return rc;
    tess_seterr(err, errlen, "%s", "");
    h->cel = skywcs_celestial_image(info.header, info.nkeys, info.naxis, info.naxes, chk);
    if (!h->cel) {
        fitsimg_info_release(&info);
        return chk->why == SKYWCS_IMAGE_BAD_WCS ? chk->rc : TESS_EINVAL;
    }
    h->nx = info.naxes[0];
    h->ny = info.naxes[1];
    snprintf(h->bunit, sizeof h->bunit, "%s", info.bunit);
    fitsimg_layout_of(&info, &h->lay);
    h->cards = malloc((size_t)info.nkeys * 80 + 1);
    if (h->cards) {
        memcpy(h->cards, info.header, (size_t)info.nkeys * 80 + 1);
        h->nkeys = info.nkeys;
    }
    fitsimg_info_release(&info);
    if (!h->cards) {
        mos_header_release(h);
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    return 0;
}

/* The header of input s (path, name, hdu given): `given` when it was read already (its
 * cards not NULL; copied), else read now.  Fills s. */
static int read_src(src *s, const mos_header *given, rp_method method, char *err,
                    size_t errlen)
{
    mos_header h = {0};
    if (given && given->cards) {
        h = *given;
        h.cards = malloc((size_t)given->nkeys * 80 + 1);
        h.cel = skywcs_copy(given->cel);
        if (h.cards)
            memcpy(h.cards, given->cards, (size_t)given->nkeys * 80 + 1);
        if (!h.cards || !h.cel) {
            mos_header_release(&h);
            tess_seterr(err, errlen, "out of memory");
            return TESS_ENOMEM;
        }
    } else {
        skywcs_image_check chk;
        char e[256] = "";
        int rc = mos_read_header(s->path, s->hdu, &h, &chk, e, sizeof e);
        if (rc && e[0])
            tess_seterr(err, errlen, "input '%s': %s", s->name, e);
        else if (rc && chk.why == SKYWCS_IMAGE_NOT_2D)
            tess_seterr(err, errlen, "input '%s' is not a 2-D image (NAXIS%d = %ld)", s->name,
                        chk.axis + 1, chk.axis_len);
        else if (rc && chk.why == SKYWCS_IMAGE_NOT_IMAGE)
            tess_seterr(err, errlen, "input '%s' is not an image (NAXIS = %d)", s->name,
                        chk.naxis);
        else if (rc && chk.why == SKYWCS_IMAGE_BAD_WCS)
            tess_seterr(err, errlen, "input '%s' has no usable WCS: %s", s->name, chk.err);
        else if (rc)
            tess_seterr(err, errlen, "input '%s' has no celestial axes", s->name);
        if (rc)
            return rc;
    }
    s->nx = h.nx;
    s->ny = h.ny;
    snprintf(s->bunit, sizeof s->bunit, "%s", h.bunit);
    s->cards = h.cards;
    s->nkeys = h.nkeys;
    s->cel = h.cel;
    s->lay = h.lay;
    origin_init(&s->origin, s->cards, s->nkeys);
    /* Pixel-based distortion tables do not follow a shifted CRPIX; bicubic's spline
     * prefilter spans the whole image: read those inputs whole. */
    s->crop_ok = method != RP_BICUBIC;
    for (int i = 0; i < s->nkeys && s->crop_ok; i++) {
        const char *c = s->cards + (size_t)i * 80;
        if (memcmp(c, "CPDIS", 5) == 0 || memcmp(c, "CQDIS", 5) == 0
            || memcmp(c, "D2IM", 4) == 0 || memcmp(c, "DP1", 3) == 0
            || memcmp(c, "DP2", 3) == 0 || memcmp(c, "DQ1", 3) == 0 || memcmp(c, "DQ2", 3) == 0)
            s->crop_ok = 0;
    }
    return 0;
}

/* The per-input work of mos_plan run in slices of the inputs (plan_slice): stage 0 reads
 * each input's header (read_src), stage 1 places it on the target (its box).  An input
 * that fails keeps its error only if no earlier input failed, so that the message is the
 * one a loop in input order gives; a slice stops at its first failure or once an earlier
 * input has failed. */
typedef struct plan_par {
    mosaic *m;
    const mos_spec *spec;
    int stage;
    int copy_target;         /* 1: each slice maps with its own copy of m->tcel */
    pthread_mutex_t lock;
    atomic_int first;        /* the first input that failed, or INT_MAX */
    int rc;
    char err[512];
} plan_par;

static int plan_header(mosaic *m, const mos_spec *spec, int k, char *err, size_t errlen)
{
    const mos_input *mi = &spec->inputs[k];
    src *s = &m->in[k];
    s->path = strdup(mi->path);
    s->name = strdup(mi->name ? mi->name : mi->path);
    s->hdu = mi->hdu;
    s->offset = isfinite(mi->offset) ? mi->offset : 0.0;
    if (!s->path || !s->name) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    return read_src(s, spec->headers ? &spec->headers[k] : NULL, m->method, err, errlen);
}

static int plan_box(mosaic *m, skywcs *tcel, int k, char *err, size_t errlen)
{
    src *s = &m->in[k];
    char e[256];
    int rc = skywcs_check_pair(s->cel, tcel, e, sizeof e);
    if (rc) {
        tess_seterr(err, errlen, "input '%s': %s", s->name, e);
        return rc;
    }
    if ((rc = mos_bbox(s->cel, s->nx, s->ny, tcel, m->nx, m->ny, s->box)) != 0)
        tess_seterr(err, errlen, "input '%s': cannot place it on the target", s->name);
    return rc;
}

static void plan_slice(void *arg, size_t i0, size_t i1)
{
    plan_par *pp = arg;
    char e[512];
    skywcs *tcel = pp->stage == 1 ? pp->m->tcel : NULL;
    int rc = 0, at = -1;     /* at: the input that failed */
    if (pp->stage == 1 && pp->copy_target && (tcel = skywcs_copy(pp->m->tcel)) == NULL) {
        rc = TESS_ENOMEM;
        at = (int)i0;
        tess_seterr(e, sizeof e, "out of memory");
    }
    for (size_t k = i0; at < 0 && k < i1 && (int)k < atomic_load(&pp->first); k++) {
        rc = pp->stage == 0 ? plan_header(pp->m, pp->spec, (int)k, e, sizeof e)
                            : plan_box(pp->m, tcel, (int)k, e, sizeof e);
        if (rc)
            at = (int)k;
    }
    if (at >= 0) {
        pthread_mutex_lock(&pp->lock);
        if (at < atomic_load(&pp->first)) {
            atomic_store(&pp->first, at);
            pp->rc = rc;
            snprintf(pp->err, sizeof pp->err, "%s", e);
        }
        pthread_mutex_unlock(&pp->lock);
    }
    if (pp->copy_target)
        skywcs_free(tcel);
}

/* Runs a stage of plan_par over the m->n inputs on spec->pool (one slice on this thread
 * without a pool), in up to 8 slices a thread: the threads take slices as they come
 * free, so that a worker that starts late (a loaded machine) or a slow header leaves no
 * thread waiting long for another's share (2 slices of 32 inputs: the calling thread
 * waited 10 ms for the worker in a 64-input plan).  Returns 0, or the first failed
 * input's error. */
static int plan_inputs(mosaic *m, const mos_spec *spec, int threads, int stage, char *err,
                       size_t errlen)
{
    plan_par pp;
    memset(&pp, 0, sizeof pp);
    pp.m = m;
    pp.spec = spec;
    pp.stage = stage;
    int ns = spec->pool && threads > 1 ? (8L * threads < m->n ? 8 * threads : m->n) : 1;
    pp.copy_target = ns > 1;
    atomic_init(&pp.first, INT_MAX);
    pthread_mutex_init(&pp.lock, NULL);
    pool_for(ns > 1 ? spec->pool : NULL, POOL_BATCH, ns, (size_t)m->n, 1, plan_slice, &pp);
    pthread_mutex_destroy(&pp.lock);
    if (pp.rc)
        tess_seterr(err, errlen, "%s", pp.err);
    return pp.rc;
}

int mos_plan(const mos_spec *spec, const char *workdir, int threads, mosaic **out, char *err,
             size_t errlen)
{
    *out = NULL;
    if (!spec || spec->ninputs < 1 || spec->ninputs > MOS_MAX_INPUTS || !spec->inputs) {
        tess_seterr(err, errlen, "between 1 and %d inputs are needed", MOS_MAX_INPUTS);
        return TESS_EINVAL;
    }
    mosaic *m = calloc(1, sizeof *m);
    if (!m) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    pthread_mutex_init(&m->lock, NULL);
    int rc = TESS_ENOMEM;
    char *tc = NULL;
    char *plan = NULL;
    m->workdir = workdir ? strdup(workdir) : NULL;
    m->max_block = spec->max_block_bytes > 0 ? spec->max_block_bytes : 0.0;
    m->n = spec->ninputs;
    m->in = calloc((size_t)m->n, sizeof(src));
    m->method = spec->method;
    m->combine = spec->combine;
    m->bg = spec->bg;
    if ((workdir && !m->workdir) || !m->in) {
        tess_seterr(err, errlen, "out of memory");
        goto fail;
    }
    if ((rc = plan_inputs(m, spec, threads, 0, err, errlen)) != 0)
        goto fail;
    /* The target. */
    int tn = 0;
    if (spec->target_cards) {
        char v[80];
        long sz[2] = { 0, 0 };
        for (int a = 0; a < 2; a++) {
            char *end;
            if (!fitscard_get(spec->target_cards, spec->target_nkeys,
                                    a ? "NAXIS2" : "NAXIS1", v, sizeof v)) {
                rc = TESS_EINVAL;
                tess_seterr(err, errlen, "the target header has no %s", a ? "NAXIS2" : "NAXIS1");
                goto fail;
            }
            sz[a] = strtol(v, &end, 10);
            if (*end || sz[a] < 1 || sz[a] > 10000000) {
                rc = TESS_EINVAL;
                tess_seterr(err, errlen, "the target's %s = %s is not a size from 1 to 10^7",
                            a ? "NAXIS2" : "NAXIS1", v);
                goto fail;
            }
        }
        m->nx = sz[0];
        m->ny = sz[1];
        tc = malloc((size_t)spec->target_nkeys * 80 + 1);
        if (!tc) {
            tess_seterr(err, errlen, "out of memory");
            goto fail;
        }
        memcpy(tc, spec->target_cards, (size_t)spec->target_nkeys * 80);
        tc[(size_t)spec->target_nkeys * 80] = '\0';
        tn = spec->target_nkeys;
    } else {
        skywcs **ws = malloc(sizeof(skywcs *) * (size_t)m->n);
        long *nxs = malloc(sizeof(long) * (size_t)m->n), *nys = malloc(sizeof(long) * (size_t)m->n);
        if (!ws || !nxs || !nys) {
            free(ws);
            free(nxs);
            free(nys);
            tess_seterr(err, errlen, "out of memory");
            goto fail;
        }
        for (int k = 0; k < m->n; k++) {
            ws[k] = m->in[k].cel;
            nxs[k] = m->in[k].nx;
            nys[k] = m->in[k].ny;
        }
        if (spec->auto_cards) {
            tc = malloc((size_t)spec->auto_nkeys * 80 + 1);
            rc = tc ? 0 : TESS_ENOMEM;
            if (tc) {
                memcpy(tc, spec->auto_cards, (size_t)spec->auto_nkeys * 80);
                tc[(size_t)spec->auto_nkeys * 80] = '\0';
                tn = spec->auto_nkeys;
                m->nx = spec->auto_nx;
                m->ny = spec->auto_ny;
            } else {
                tess_seterr(err, errlen, "out of memory");
            }
        } else {
            rc = mos_auto_target(m->n, ws, nxs, nys, spec->auto_frame, spec->auto_proj, &tc,
                                 &tn, &m->nx, &m->ny, err, errlen);
        }
        free(ws);
        free(nxs);
        free(nys);
        if (rc)
            goto fail;
    }
    long long maxpix = spec->max_pixels > 0 ? spec->max_pixels : (1LL << 31);
    if ((long long)m->nx * (long long)m->ny > maxpix) {
        rc = TESS_ETOOBIG;
        tess_seterr(err, errlen, "the mosaic would be %ld x %ld pixels, more than the %lld "
                    "allowed", m->nx, m->ny, maxpix);
        goto fail;
    }
    {
        /* Keep the WCS cards only: not the structural ones, nor BUNIT, which the mosaic
         * writes itself. */
        fitscard_list b;
        fitscard_list_init(&b, MOS_MAX_CARDS);
        for (int i = 0; i < tn; i++) {
            const char *c = tc + (size_t)i * 80;
            if (!fitscard_is_structural(c) && !fitscard_key_is(c, "BUNIT"))
                fitscard_list_cards(&b, c, 1);
        }
        if (b.rc || b.n == 0) {
            rc = b.rc ? TESS_ENOMEM : TESS_EINVAL;
            tess_seterr(err, errlen, b.rc ? "out of memory" : "the target header has no WCS");
            fitscard_list_release(&b);
            goto fail;
        }
        fitscard_list_take(&b, &m->tcards, &m->tkeys);
    }
    {
        skywcs *w = NULL;
        char e[256];
        if ((rc = skywcs_parse(m->tcards, m->tkeys, &w, e, sizeof e)) != 0) {
            tess_seterr(err, errlen, "the target has no usable WCS: %s", e);
            goto fail;
        }
        m->tcel = skywcs_celestial(w);
        skywcs_free(w);
        origin_init(&m->torigin, m->tcards, m->tkeys);
        if (!m->tcel) {
            rc = TESS_EINVAL;
            tess_seterr(err, errlen, "the target WCS has no celestial axes");
            goto fail;
        }
    }
    /* Boxes and blocks. */
    if ((rc = plan_inputs(m, spec, threads, 1, err, errlen)) != 0)
        goto fail;
    long nb = 0;
    int any = 0;
    for (int k = 0; k < m->n; k++) {
        src *s = &m->in[k];
        s->block0 = nb;
        if (s->box[2] > 0 && s->box[3] > 0) {
            long bw = s->box[2], bh = s->box[3];
            long rows = (bh + 7) / 8;
            long cap = ((long)1 << 22) / bw;
            if (cap < 1)
                cap = 1;
            if (rows > cap)
                rows = cap;
            s->crop_px = (double)s->nx * (double)s->ny;
            if (s->crop_ok && s->crop_px * 4.0 > BAND_INPUT_BYTES
                && (rc = mos_fit_band_rows(m, s, &rows)) != 0) {
                tess_seterr(err, errlen, "out of memory");
                goto fail;
            }
            s->rows = rows;
            s->nbands = (bh + rows - 1) / rows;
            nb += s->nbands;
            any = 1;
        }
    }
    if (!any) {
        rc = TESS_ENOOVERLAP;
        tess_seterr(err, errlen, "no input overlaps the target");
        goto fail;
    }
    {
        long rows = (m->ny + 15) / 16;
        long cap = ((long)1 << 21) / m->nx;
        if (cap < 8)
            cap = 8;
        if (rows > cap)
            rows = cap;
        if (rows < 1)
            rows = 1;
        m->coadd_rows = rows;
        m->coadd_bands = (m->ny + rows - 1) / rows;
    }
    m->kind[0] = ST_REPROJECT;
    m->nblocks[0] = nb;
    m->nstages = 1;
    if (m->bg != MOS_BG_NONE) {
        m->kind[1] = ST_OVERLAPS;
        m->nblocks[1] = m->n;
        m->kind[2] = ST_SOLVE;
        m->nblocks[2] = 1;
        m->nstages = 3;
    }
    m->kind[m->nstages] = ST_COADD;
    m->nblocks[m->nstages] = m->coadd_bands;
    m->nstages++;
    {
        fitscard_list h0, h1;
        if ((rc = build_headers(m, NULL, &h0, &h1)) != 0) {
            tess_seterr(err, errlen, rc == TESS_ENOMEM ? "out of memory"
                                                       : "the mosaic's header cannot be written");
            goto fail;
        }
        m->h0 = fitscard_header_size(h0.n);
        m->h1 = fitscard_header_size(h1.n);
        m->d0 = m->d1 = blocks2880((size_t)m->nx * (size_t)m->ny * 4);
        fitscard_list_release(&h0);
        fitscard_list_release(&h1);
    }
    /* plan.txt: the geometry; a different one from an earlier plan is an error.  (None
     * for a plan without a work directory.) */
    if (m->workdir) {
        size_t cap = (size_t)m->tkeys * 81 + (size_t)m->n * (PATH_MAX + 200) + 256, len = 0;
        plan = malloc(cap);
        if (!plan) {
            rc = TESS_ENOMEM;
            tess_seterr(err, errlen, "out of memory");
            goto fail;
        }
        len += (size_t)snprintf(plan + len, cap - len, "tessera mosaic plan 1\n%ld %ld %s %s %s\n",
                                m->nx, m->ny, rp_method_name(m->method),
                                mos_combine_name(m->combine), mos_bg_name(m->bg));
        for (int i = 0; i < m->tkeys; i++) {
            memcpy(plan + len, m->tcards + (size_t)i * 80, 80);
            len += 80;
            plan[len++] = '\n';
        }
        /* Rows of the bands when a large input's were cut (not written otherwise, so
         * that the plans of earlier versions still compare equal). */
        for (int k = 0; k < m->n; k++) {
            const src *s = &m->in[k];
            len += (size_t)snprintf(plan + len, cap - len, "%s[%d] %ld %ld %ld %ld %ld %ld",
                                    s->path, s->hdu, s->nx, s->ny, s->box[0], s->box[1],
                                    s->box[2], s->box[3]);
            if (s->rows_cut)
                len += (size_t)snprintf(plan + len, cap - len, " rows %ld", s->rows);
            plan[len++] = '\n';
        }
        char path[PATH_MAX], *old = NULL;
        size_t oldn = 0;
        snprintf(path, sizeof path, "%s/plan.txt", m->workdir);
        if (mos_read_small(path, &old, &oldn) == 0) {
            int same = oldn == len && memcmp(old, plan, len) == 0;
            free(old);
            if (!same) {
                rc = TESS_EINVAL;
                tess_seterr(err, errlen, "the inputs or the target changed since the mosaic "
                            "was planned in '%s'", m->workdir);
                goto fail;
            }
        } else if ((rc = mos_write_small(path, plan, len, err, errlen)) != 0) {
            goto fail;
        }
    }
    free(plan);
    free(tc);
    *out = m;
    return 0;
fail:
    free(plan);
    free(tc);
    mos_free(m);
    return rc ? rc : TESS_ENOMEM;
}

/* ------------------------------------------------------------------------------------ */
/* Stage: reproject                                                                       */

int mos_canceled(const volatile int *cancel)
{
    return cancel && *cancel;
}

/* The input pixels of the reprojection bands.  Each band needs its crop of the input (the
 * band's outline mapped onto it, padded), which for a target rotated against the inputs
 * spans about twice the band's rows, so that bands read their inputs over again: the
 * 64-input mosaic of 512^2 tiles read 40 million pixels of its 16.8 million, each crop
 * through pread (the page cache's copy, 22 ms of CPU at 1 thread and 24-37 ms at 2, where
 * the threads' copies share the memory's bandwidth), then a copy of its columns and a
 * byte swap (perf, Intel Xeon).  While the staged planes are held in memory (the CLI),
 * an input of its bands is read whole instead, once, by the first band that wants it
 * (the others meanwhile read their crops as before); the bands then read it in place
 * where their crops span its width, as there, or copy their crops' rows out of it.  The
 * values are fitsimg_read_region_f32_at's for the crop, bit for bit: it converts each
 * pixel alone.  An input is freed after its last band, and the inputs held at once take
 * at most WHOLE_CACHE_BYTES.  States of mos_whole: */
enum { WHOLE_NONE, WHOLE_READING, WHOLE_READY, WHOLE_DONE };
/* Inputs of at most this many bytes as float32 are read whole. */
#define WHOLE_MAX_BYTES ((size_t)16 << 20)
#define WHOLE_CACHE_BYTES ((size_t)128 << 20)

/* The crop (x0, y0, w, h) of input k, w x h float32 row-major: *in points at it, in the
 * input held whole, or in *own (malloc'ed here, for the caller to free) where it was
 * copied or read.  *held is set to 1 when band_done must let go of the whole input.
 * Returns 0, TESS_ENOMEM or the TESS_E* code of the read, with e. */
static int band_input(mosaic *m, int k, const long crop[4], const float **in, float **own,
                      int *held, char *e, size_t elen)
{
    src *s = &m->in[k];
    mos_whole *wh = m->whole ? &m->whole[k] : NULL;
    size_t bytes = (size_t)s->nx * (size_t)s->ny * sizeof(float);
    int read_it = 0, ready = 0;
    *own = NULL;
    *held = 0;
    if (wh && s->nbands > 1 && crop[0] >= 0 && crop[1] >= 0 && crop[0] <= s->nx - crop[2]
        && crop[1] <= s->ny - crop[3] && bytes <= WHOLE_MAX_BYTES) {
        pthread_mutex_lock(&m->lock);
        if (wh->state == WHOLE_NONE && m->whole_bytes + bytes <= WHOLE_CACHE_BYTES) {
            wh->state = WHOLE_READING;
            m->whole_bytes += bytes;
            read_it = 1;
        } else if (wh->state == WHOLE_READY) {
            wh->users++;
            ready = 1;
        }
        pthread_mutex_unlock(&m->lock);
    }
    if (read_it) {
        float *p = malloc(bytes);
        int rc = p ? fitsimg_read_region_f32_at(s->path, s->hdu, &s->lay, 0, 0, 0, s->nx,
                                                s->ny, p, e, elen)
                   : TESS_ENOMEM;
        pthread_mutex_lock(&m->lock);
        if (rc == 0) {
            wh->pix = p;
            wh->state = WHOLE_READY;
            wh->users++;
            ready = 1;
        } else {          /* the crop's own read below tells what is wrong, if anything */
            wh->state = WHOLE_DONE;
            m->whole_bytes -= bytes;
        }
        pthread_mutex_unlock(&m->lock);
        if (rc)
            free(p);
    }
    if (ready) {
        *held = 1;
        const float *at = wh->pix + (size_t)crop[1] * (size_t)s->nx + (size_t)crop[0];
        if (crop[0] == 0 && crop[2] == s->nx) {
            *in = at;      /* rows of the whole width: in place */
            return 0;
        }
    }
    float *p = malloc(sizeof(float) * (size_t)crop[2] * (size_t)crop[3]);
    if (!p)
        return TESS_ENOMEM;
    *own = p;
    *in = p;
    if (!ready)           /* by the layout the plan read: one open, no header parse */
        return fitsimg_read_region_f32_at(s->path, s->hdu, &s->lay, 0, crop[0], crop[1],
                                          crop[2], crop[3], p, e, elen);
    for (long y = 0; y < crop[3]; y++)
        memcpy(p + (size_t)y * (size_t)crop[2],
               wh->pix + (size_t)(crop[1] + y) * (size_t)s->nx + (size_t)crop[0],
               sizeof(float) * (size_t)crop[2]);
    return 0;
}

/* A reprojection band of input k is done (held: it read the input held whole): the input
 * is freed after its last band. */
static void band_done(mosaic *m, int k, int held)
{
    mos_whole *wh = m->whole ? &m->whole[k] : NULL;
    float *drop = NULL;
    if (!wh)
        return;
    pthread_mutex_lock(&m->lock);
    if (held)
        wh->users--;
    wh->done++;
    if (wh->done >= m->in[k].nbands && wh->users == 0 && wh->state == WHOLE_READY) {
        drop = wh->pix;
        wh->pix = NULL;
        wh->state = WHOLE_DONE;
        m->whole_bytes -= (size_t)m->in[k].nx * (size_t)m->in[k].ny * sizeof(float);
    }
    pthread_mutex_unlock(&m->lock);
    free(drop);
}

static int run_reproject(mosaic *m, long block, char *err, size_t errlen)
{
    int k = 0;
    while (k + 1 < m->n && m->in[k + 1].block0 <= block)
        k++;
    src *s = &m->in[k];
    long b = block - s->block0;
    if (b < 0 || b >= s->nbands) {
        tess_seterr(err, errlen, "no reprojection block %ld", block);
        return TESS_EINVAL;
    }
    long bw = s->box[2], r0 = b * s->rows, r1 = r0 + s->rows < s->box[3] ? r0 + s->rows : s->box[3];
    long h = r1 - r0, ox = s->box[0], oy = s->box[1] + r0;
    size_t npix = (size_t)bw * (size_t)h;
    /* Held in memory (mos_stage_in_memory): the band is made in its rows of the staged
     * planes, nothing copied after. */
    float *sv = staged_plane(m, k, 0), *sw = m->method == RP_EXACT ? staged_plane(m, k, 1) : NULL;
    size_t soff = (size_t)r0 * (size_t)bw;
    float *val = sv ? sv + soff : malloc(sizeof(float) * npix);
    float *fp = sw ? sw + soff : malloc(sizeof(float) * npix);
    float *pix = NULL;
    skywcs *ow = NULL, *iw = NULL;
    int rc = TESS_ENOMEM, held = 0;
    if (!val || !fp) {
        tess_seterr(err, errlen, "out of memory");
        goto done;
    }
    ow = shifted_wcs(&m->torigin, m->tcards, m->tkeys, ox, oy, err, errlen);
    if (!ow) {
        rc = TESS_EINVAL;
        goto done;
    }
    /* The input pixels this band can use: its outline mapped onto the input, padded by
     * four pixels (lanczos3's reach plus one). */
    long crop[4] = { 0, 0, s->nx, s->ny };
    if (s->crop_ok) {
        double *x, *y;
        long n = mos_outline(-0.5, -0.5, (double)bw - 0.5, (double)h - 0.5, 8.0, &x, &y);
        if (n < 0) {
            tess_seterr(err, errlen, "out of memory");
            goto done;
        }
        rc = mos_pix2pix(ow, s->cel, n, x, y);
        if (rc == 0)
            mos_points_box(n, x, y, s->nx, s->ny, 4,
                           0.25 * (double)(s->nx > s->ny ? s->nx : s->ny), crop);
        free(x);
        free(y);
        if (rc) {
            tess_seterr(err, errlen, "input '%s': cannot map the band", s->name);
            goto done;
        }
        if (crop[2] < 0) {
            /* No point of the band's outline maps onto the input: read it whole. */
            crop[0] = crop[1] = 0;
            crop[2] = s->nx;
            crop[3] = s->ny;
        }
    }
    long n_ok = 0;
    double need = (double)crop[2] * (double)crop[3] * mos_input_bpp(m->method)
                  + (double)npix * 8.0 + rp_scratch_bytes(m->method, crop[2], crop[3], bw, h);
    if (m->max_block > 0 && crop[2] > 0 && crop[3] > 0 && need > m->max_block) {
        rc = TESS_ETOOBIG;
        tess_seterr(err, errlen, "input '%s': a band of %ld x %ld output pixels reads %ld x "
                    "%ld input pixels (%.0f MB), more than the %.0f MB a block may use",
                    s->name, bw, h, crop[2], crop[3], need / 1048576.0,
                    m->max_block / 1048576.0);
        goto done;
    }
    if (crop[2] > 0 && crop[3] > 0) {
        char e[256] = "";
        const float *in = NULL;
        rc = band_input(m, k, crop, &in, &pix, &held, e, sizeof e);
        if (rc == TESS_ENOMEM && !e[0]) {
            tess_seterr(err, errlen, "out of memory for %ld x %ld input pixels", crop[2], crop[3]);
            goto done;
        }
        if (rc) {
            tess_seterr(err, errlen, "input '%s': %s", s->name, e);
            goto done;
        }
        if (crop[0] == 0 && crop[1] == 0 && crop[2] == s->nx && crop[3] == s->ny) {
            iw = skywcs_copy(s->cel);
        } else {
            iw = shifted_wcs(&s->origin, s->cards, s->nkeys, crop[0], crop[1], err, errlen);
        }
        if (!iw) {
            rc = TESS_EINVAL;
            goto done;
        }
        /* read only (rp_reproject reads its input in place) */
        rp_cube sc = { (void *)(uintptr_t)in, RP_F32, crop[2], crop[3], 1 };
        rp_cube dc = { val, RP_F32, bw, h, 1 };
        rp_options o;
        rp_options_init(&o);
        o.method = m->method;
        o.threads = 1;
        char e2[256] = "";
        n_ok = rp_reproject(iw, &sc, ow, &dc, fp, &o, e2, sizeof e2);
        if (n_ok < 0 && n_ok != TESS_ENOOVERLAP) {
            rc = (int)n_ok;
            tess_seterr(err, errlen, "input '%s': %s", s->name, e2);
            goto done;
        }
    }
    if (n_ok <= 0) {
        for (size_t i = 0; i < npix; i++) {
            val[i] = NAN;
            fp[i] = 0.0f;
        }
    }
    char path[PATH_MAX];
    for (int f = 0; !sv && f < (m->method == RP_EXACT ? 2 : 1); f++) {
        mos_wpath(m, path, sizeof path, "r_", k, f ? ".wgt" : ".val");
        /* Not fallocated, unlike the coadd's output: these files are removed soon
         * after, and blocks allocated for them are freed again, which on a file system
         * mounted with `discard` waits for the device in the unlink (ext4, 64 inputs of
         * 512^2: 0.19-0.29 s in the CLI's removal of its work directory, against
         * 0.03-0.05 s with delayed allocation, whose pages are dropped unwritten; the
         * pwrite's page-by-page reservation costs 5-10 ms of CPU more). */
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0 || tess_pwrite_all(fd, f ? fp : val, sizeof(float) * npix,
                                      (off_t)r0 * (off_t)bw * (off_t)sizeof(float)) != 0) {
            tess_seterr(err, errlen, "cannot write '%s': %s", path, strerror(errno));
            if (fd >= 0)
                close(fd);
            rc = TESS_EIO;
            goto done;
        }
        close(fd);
    }
    rc = 0;
done:
    band_done(m, k, held);
    skywcs_free(ow);
    skywcs_free(iw);
    free(pix);
    if (!sv)
        free(val);
    if (!sw)
        free(fp);
    return rc;
}

/* Reads rows [y0, y1) (output rows) and columns [x0, x1) of input k's reprojection:
 * values into v and, for exact, weights into w (else w gets 1 where v is finite, 0
 * elsewhere).  Rows are contiguous at stride x1 - x0.  Returns 0 or TESS_EIO. */
int mos_read_rows(const mosaic *m, int k, long x0, long x1, long y0, long y1, long ystep,
                     float *v, float *w, char *err, size_t errlen)
{
    const src *s = &m->in[k];
    char path[PATH_MAX];
    long cw = x1 - x0;
    int rc = 0;
    for (int f = 0; f < 2 && rc == 0; f++) {
        float *dst = f ? w : v;
        if (!dst)
            continue;
        if (f && m->method != RP_EXACT) {
            long nr = (y1 - y0 + ystep - 1) / ystep;
            for (size_t i = 0; i < (size_t)nr * (size_t)cw; i++)
                w[i] = isfinite(v[i]) ? 1.0f : 0.0f;
            continue;
        }
        const float *mem = staged_plane(m, k, f);
        if (mem) {
            long row = 0;
            for (long y = y0; y < y1; y += ystep, row++)
                memcpy(dst + (size_t)row * (size_t)cw,
                       mem + (size_t)(y - s->box[1]) * (size_t)s->box[2] + (size_t)(x0 - s->box[0]),
                       sizeof(float) * (size_t)cw);
            continue;
        }
        mos_wpath(m, path, sizeof path, "r_", k, f ? ".wgt" : ".val");
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            tess_seterr(err, errlen, "cannot open '%s': %s", path, strerror(errno));
            return TESS_EIO;
        }
        long row = 0;
        if (ystep == 1 && cw == s->box[2]) {
            off_t off = ((off_t)(y0 - s->box[1]) * s->box[2]) * (off_t)sizeof(float);
            if (tess_pread_all(fd, dst, sizeof(float) * (size_t)cw * (size_t)(y1 - y0), off) != 0)
                rc = TESS_EIO;
        } else {
            for (long y = y0; y < y1 && rc == 0; y += ystep, row++) {
                off_t off = ((off_t)(y - s->box[1]) * s->box[2] + (x0 - s->box[0]))
                            * (off_t)sizeof(float);
                if (tess_pread_all(fd, dst + (size_t)row * (size_t)cw,
                                   sizeof(float) * (size_t)cw, off) != 0)
                    rc = TESS_EIO;
            }
        }
        if (rc)
            tess_seterr(err, errlen, "cannot read '%s': %s", path, strerror(errno));
        close(fd);
    }
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Stage: coadd                                                                           */

/* The inputs whose boxes meet output rows y0 .. y1 - 1, into ks (m->n entries); their
 * count. */
static int band_inputs(const mosaic *m, long y0, long y1, int *ks)
{
    int nk = 0;
    for (int k = 0; k < m->n; k++) {
        const src *s = &m->in[k];
        if (s->box[2] > 0 && s->box[1] < y1 && s->box[1] + s->box[3] > y0)
            ks[nk++] = k;
    }
    return nk;
}

/* A read-only window on rows [y0, y1) (output rows, within the input's box) of input k's
 * staged plane: f = 0 the values (r_k.val), 1 the weights (r_k.wgt), float32 in host
 * order at stride box[2].  Mapped from the page cache, not copied; guarded by mapguard
 * (a file truncated meanwhile reads as zeros there, which plane_map_faulted reports).
 * Planes held in memory (mos_stage_in_memory) are pointed at instead (base NULL). */
typedef struct plane_map {
    void *base;
    size_t len;
    const float *rows;   /* row y0, column box[0] */
    long y0;             /* the first row mapped */
    int slot;            /* mapguard slot or -1 */
} plane_map;

static int plane_map_open(const mosaic *m, int k, int f, long y0, long y1, plane_map *pm,
                          char *err, size_t errlen)
{
    const src *s = &m->in[k];
    char path[PATH_MAX];
    pm->base = NULL;
    pm->slot = -1;
    const float *mem = staged_plane(m, k, f);
    if (mem) {    /* held in memory: nothing to map (plane_map_close has nothing to do) */
        pm->rows = mem + (size_t)(y0 - s->box[1]) * (size_t)s->box[2];
        pm->y0 = y0;
        return 0;
    }
    mos_wpath(m, path, sizeof path, "r_", k, f ? ".wgt" : ".val");
    off_t row = (off_t)s->box[2] * (off_t)sizeof(float);
    off_t off = (off_t)(y0 - s->box[1]) * row, end = (off_t)(y1 - s->box[1]) * row;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tess_seterr(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return TESS_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < end) {
        tess_seterr(err, errlen, "cannot read '%s': shorter than its reprojection", path);
        close(fd);
        return TESS_EIO;
    }
    off_t page = (off_t)sysconf(_SC_PAGESIZE), base = off - off % page;
    pm->len = (size_t)(end - base);
    void *p = mmap(NULL, pm->len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, base);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        tess_seterr(err, errlen, "cannot map '%s': %s", path, strerror(e));
        return e == ENOMEM ? TESS_ENOMEM : TESS_EIO;
    }
    pm->base = p;
    pm->slot = mapguard_add(p, pm->len);
    pm->rows = (const float *)(void *)((char *)p + (off - base));
    pm->y0 = y0;
    return 0;
}

/* 1 when a read of the window hit a truncated file (its values are then zeros). */
static int plane_map_faulted(const plane_map *pm)
{
    return pm->base && mapguard_faulted(pm->slot);
}

static void plane_map_close(plane_map *pm)
{
    if (!pm->base)
        return;
    mapguard_remove(pm->slot);
    munmap(pm->base, pm->len);
    pm->base = NULL;
}

/* Maps rows [y0, y1) of input k's values (and for exact its weights) into pv, pw (pw NULL
 * but for exact); on error nothing is left mapped. */
static int planes_open(const mosaic *m, int k, long y0, long y1, plane_map *pv, plane_map *pw,
                       char *err, size_t errlen)
{
    int rc = plane_map_open(m, k, 0, y0, y1, pv, err, errlen);
    if (rc == 0 && pw && (rc = plane_map_open(m, k, 1, y0, y1, pw, err, errlen)) != 0)
        plane_map_close(pv);
    return rc;
}

/* Asks the cache for the `len` bytes at p.  An input's rows in a coadd group are a few
 * tens of KB at one place, read from memory: the load of the value was half of
 * mos_accum_add's samples.  Each row's add asks for the next row first (the last row
 * for the next input's first): the 64-input mosaic's coadd took 0.045 s of CPU
 * (0.043-0.046) against 0.048 s (0.046-0.056) (1 thread, median of 9 alternated, Intel
 * Xeon).  Asking for the next input's whole rows at once instead only moved the wait. */
static void prefetch_span(const void *p, size_t len)
{
    for (size_t b = 0; b < len; b += 64)
        __builtin_prefetch((const char *)p + b, 0, 3);
}

/* The first of the rows gy0 .. gy1 - 1 of the first input after ks[q] that has some
 * (mapped in pv), and in *len the bytes of its values there; NULL when none of the next
 * 8 has (a bound on the search, for bands met by many inputs in few rows each). */
static const float *next_rows(const mosaic *m, const int *ks, int nk, int q,
                              const plane_map *pv, long gy0, long gy1, size_t *len)
{
    for (int j = q + 1; j < nk && j <= q + 8; j++) {
        const src *s = &m->in[ks[j]];
        long ry0 = gy0 > s->box[1] ? gy0 : s->box[1];
        long ry1 = gy1 < s->box[1] + s->box[3] ? gy1 : s->box[1] + s->box[3];
        if (ry1 > ry0) {
            *len = (size_t)(ry1 - ry0) * (size_t)s->box[2] * sizeof(float);
            return pv[j].rows + (size_t)(ry0 - pv[j].y0) * (size_t)s->box[2];
        }
    }
    return NULL;
}

/* Adds the rows gy0 .. gy1 - 1 of the nk inputs ks to a (reset for those rows), each less
 * its background correction.  Their planes are mapped in pv (and pw for exact) for the
 * whole band; pv NULL: each input's rows are mapped here for the group alone (a band met
 * by more than COADD_MAPS inputs).  Returns 0, or TESS_EIO / TESS_ENOMEM with err (a file
 * missing or truncated, a mapping refused). */
static int coadd_rows(mosaic *m, mos_accum *a, const int *ks, int nk, long gy0, long gy1,
                      const plane_map *pv, const plane_map *pw, char *err, size_t errlen)
{
    mos_accum_reset(a, (size_t)(gy1 - gy0) * (size_t)m->nx);
    int exact = m->method == RP_EXACT;
    for (int q = 0; q < nk; q++) {
        const src *s = &m->in[ks[q]];
        long ry0 = gy0 > s->box[1] ? gy0 : s->box[1];
        long ry1 = gy1 < s->box[1] + s->box[3] ? gy1 : s->box[1] + s->box[3];
        if (ry1 <= ry0)
            continue;
        plane_map lv, lw;
        const plane_map *v = pv ? &pv[q] : &lv, *w = exact ? (pw ? &pw[q] : &lw) : NULL;
        if (!pv) {
            int rc = planes_open(m, ks[q], ry0, ry1, &lv, exact ? &lw : NULL, err, errlen);
            if (rc)
                return rc;
        }
        long bw = s->box[2], bx = s->box[0];
        const double *c = m->corr + 3 * ks[q];
        size_t rowb = (size_t)bw * sizeof(float), nlen = 0;
        const float *next = pv ? next_rows(m, ks, nk, q, pv, gy0, gy1, &nlen) : NULL;
        for (long y = ry0; y < ry1; y++) {
            size_t r = (size_t)(y - v->y0) * (size_t)bw;
            if (y + 1 < ry1) {
                prefetch_span(v->rows + r + bw, rowb);
                if (w)
                    prefetch_span(w->rows + r + bw, rowb);
            } else if (next) {
                prefetch_span(next, nlen < rowb ? nlen : rowb);
            }
            mos_accum_add(a, (size_t)(y - gy0) * (size_t)m->nx + (size_t)bx, v->rows + r,
                          w ? w->rows + r : NULL, bw, c[0] + c[2] * (double)y + s->offset, c[1], bx);
        }
        int faulted = plane_map_faulted(v) || (w && plane_map_faulted(w));
        if (!pv) {
            plane_map_close(&lv);
            if (exact)
                plane_map_close(&lw);
        }
        if (faulted) {
            tess_seterr(err, errlen, "the reprojection of input '%s' was truncated while "
                        "it was read", s->name);
            return TESS_EIO;
        }
    }
    return 0;
}

/* The record of a coadd band's DATASUM parts in WORKDIR/sums.bin (16 bytes, native
 * order, at band x 16): the two sums, the band's number and a check word, so that a
 * record never written (zeros) or left from another band is not taken for one. */
static void sum_record(long band, const uint32_t sums[2], uint32_t rec[4])
{
    rec[0] = sums[0];
    rec[1] = sums[1];
    rec[2] = (uint32_t)band;
    rec[3] = 0x53554d53u ^ sums[0] ^ (sums[1] * 3u) ^ ((uint32_t)band * 7u);
}

/* A plane's output gathered for pwrite: buf holds n float32 values (big-endian) for the
 * bytes from file offset `off` on. */
typedef struct gather {
    float *buf;
    size_t n;
    off_t off;
} gather;

/* Writes what g holds up to the last multiple of COADD_WRITE_BYTES in the file (all of
 * it when `all`), and moves the rest (less than COADD_WRITE_BYTES) to the start of the
 * buffer.  Returns 0, or -1 with errno. */
static int gather_write(gather *g, int fd, int all)
{
    off_t end = g->off + (off_t)(g->n * sizeof(float));
    off_t to = all ? end : end / (off_t)COADD_WRITE_BYTES * (off_t)COADD_WRITE_BYTES;
    if (to <= g->off)
        return 0;
    size_t len = (size_t)(to - g->off), rest = (size_t)(end - to);
    if (tess_pwrite_all(fd, g->buf, len, g->off) != 0)
        return -1;
    memmove(g->buf, (char *)g->buf + len, rest);
    g->n = rest / sizeof(float);
    g->off = to;
    return 0;
}

/* A band of output rows: the inputs' staged planes mapped once (up to COADD_MAPS inputs;
 * beyond, each for one group at a time), then added and combined a group of rows at a
 * time in an accumulator of COADD_GROUP_BYTES, reused (it stays in the cache; nothing is
 * faulted in per group), the groups' values and coverage gathered in two buffers and
 * written into mosaic.fits with pwrite COADD_WRITE_BYTES at a time, the band's blocks
 * of the file allocated first (fallocate, where the file system has it).  Each plane's
 * pieces end at multiples of COADD_WRITE_BYTES in the file (but for the band's last),
 * and all but the band's first start at one, the part of a group past the multiple moved
 * to the buffer's start for the next piece: the page cache then makes its folios of
 * whole pieces, where pieces that start and end anywhere (rows begin 2,880 x k bytes
 * into the file) are cut into smaller folios at both ends: 115 MB written as 1 MB pieces
 * took 15.5-16.2 ms of CPU aligned to a MB, 17.7-19.7 ms at 2,880 bytes past one (ext4,
 * Linux 6.18, fallocated first, 3 runs each).  A band's buffers: COADD_WRITE_BYTES and a
 * group's rows each.
 * Written through a shared mapping of the file instead (the band's blocks fallocated,
 * each group's pages made with MADV_POPULATE_WRITE just before its values were converted
 * into them: engine/base/wmap.h), the 64-input mosaic's coadd took 0.111-0.121 s of CPU
 * against 0.054-0.068 s (1 thread, alternated): the kernel zeroes every page as the
 * fault makes it (16 ms of 38 sampled in the kernel) and ext4 makes each 4 KB page
 * writable on its own (page_mkwrite), where pwrite fills whole large folios by the copy
 * (spectrum.c found the same for its product). */
static int run_coadd(mosaic *m, long band, const volatile int *cancel, char *err, size_t errlen)
{
    int rc = mos_load_corr(m, err, errlen);
    if (rc)
        return rc;
    long y0 = band * m->coadd_rows, y1 = y0 + m->coadd_rows < m->ny ? y0 + m->coadd_rows : m->ny;
    long nx = m->nx;
    int exact = m->method == RP_EXACT;
    int *ks = malloc(sizeof(int) * (size_t)m->n);
    if (!ks) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    int nk = band_inputs(m, y0, y1, ks);
    long g = coadd_group_rows(m, nk, y1 - y0);
    size_t gp = (size_t)g * (size_t)nx, cap = COADD_WRITE_BYTES / sizeof(float) + gp;
    mos_accum a;
    int arc = mos_accum_init(&a, m->combine, gp, nk > 0 ? nk : 1);
    off_t row = (off_t)nx * (off_t)sizeof(float);
    gather pl[2] = { { malloc(sizeof(float) * cap), 0, (off_t)m->h0 + (off_t)y0 * row },
                     { malloc(sizeof(float) * cap), 0,
                       (off_t)(m->h0 + m->d0 + m->h1) + (off_t)y0 * row } };
    int band_maps = nk <= COADD_MAPS;
    plane_map *pv = band_maps ? calloc((size_t)(nk > 0 ? nk : 1), sizeof(plane_map)) : NULL;
    plane_map *pw = band_maps && exact ? calloc((size_t)(nk > 0 ? nk : 1), sizeof(plane_map))
                                       : NULL;
    int fd = -1;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/mosaic.fits", m->workdir);
    if (arc || !pl[0].buf || !pl[1].buf || (band_maps && (!pv || (exact && !pw)))) {
        rc = TESS_ENOMEM;
        tess_seterr(err, errlen, "out of memory");
        goto done;
    }
    for (int q = 0; band_maps && q < nk && rc == 0; q++) {
        const src *s = &m->in[ks[q]];
        long my0 = y0 > s->box[1] ? y0 : s->box[1];
        long my1 = y1 < s->box[1] + s->box[3] ? y1 : s->box[1] + s->box[3];
        rc = planes_open(m, ks[q], my0, my1, &pv[q], pw ? &pw[q] : NULL, err, errlen);
    }
    if (rc)
        goto done;
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = TESS_EIO;
        tess_seterr(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        goto done;
    }
    (void)fallocate(fd, FALLOC_FL_KEEP_SIZE, pl[0].off, (off_t)(y1 - y0) * row);
    (void)fallocate(fd, FALLOC_FL_KEEP_SIZE, pl[1].off, (off_t)(y1 - y0) * row);
    uint32_t sums[2] = { 0, 0 };     /* the band's parts of the two DATASUMs */
    for (long gy0 = y0; gy0 < y1 && rc == 0; gy0 += g) {
        if (mos_canceled(cancel)) {
            rc = TESS_ECANCELED;
            break;
        }
        long gy1 = gy0 + g < y1 ? gy0 + g : y1;
        rc = coadd_rows(m, &a, ks, nk, gy0, gy1, pv, pw, err, errlen);
        if (rc)
            break;
        /* Each buffer holds less than COADD_WRITE_BYTES before a group (gather_write). */
        mos_accum_take_be(&a, pl[0].buf + pl[0].n, pl[1].buf + pl[1].n, sums);
        pl[0].n += a.np;
        pl[1].n += a.np;
        if (gather_write(&pl[0], fd, gy1 == y1) != 0 || gather_write(&pl[1], fd, gy1 == y1) != 0) {
            rc = TESS_EIO;
            tess_seterr(err, errlen, "cannot write '%s': %s", path, strerror(errno));
        }
    }
    if (rc == 0) {
        /* Kept for mos_finish, which then sets the checksums without reading the data
         * back (the band's rows start at multiples of 4 bytes in their data units): the
         * band's record of WORKDIR/sums.bin, one file for every band. */
        uint32_t rec[4];
        sum_record(band, sums, rec);
        snprintf(path, sizeof path, "%s/sums.bin", m->workdir);
        int sfd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (sfd < 0
            || tess_pwrite_all(sfd, rec, sizeof rec, (off_t)band * (off_t)sizeof rec) != 0) {
            rc = TESS_EIO;
            tess_seterr(err, errlen, "cannot write '%s': %s", path, strerror(errno));
        }
        if (sfd >= 0)
            close(sfd);
    }
done:
    if (fd >= 0)
        close(fd);
    for (int q = 0; band_maps && q < nk; q++) {
        if (pv)
            plane_map_close(&pv[q]);
        if (pw)
            plane_map_close(&pw[q]);
    }
    free(pv);
    free(pw);
    free(ks);
    mos_accum_free(&a);
    free(pl[0].buf);
    free(pl[1].buf);
    return rc;
}

void mos_block_order(const mosaic *m, int stage, int spread, long *order)
{
    long nb = m->nblocks[stage], i = 0;
    if (m->kind[stage] != ST_REPROJECT || spread < 2) {
        for (long b = 0; b < nb; b++)
            order[b] = b;
        return;
    }
    for (int k0 = 0; k0 < m->n; k0 += spread) {
        int k1 = m->n - k0 > spread ? k0 + spread : m->n;
        long most = 0;
        for (int k = k0; k < k1; k++)
            most = m->in[k].nbands > most ? m->in[k].nbands : most;
        for (long j = 0; j < most; j++)
            for (int k = k0; k < k1; k++)
                if (j < m->in[k].nbands)
                    order[i++] = m->in[k].block0 + j;
    }
}

int mos_run_block(mosaic *m, int stage, long block, const volatile int *cancel, char *err,
                  size_t errlen)
{
    if (stage < 0 || stage >= m->nstages || block < 0 || block >= m->nblocks[stage]) {
        tess_seterr(err, errlen, "no block %ld in stage %d", block, stage);
        return TESS_EINVAL;
    }
    if (!m->workdir) {
        tess_seterr(err, errlen, "the mosaic was planned without a work directory");
        return TESS_EINVAL;
    }
    if (mos_canceled(cancel))
        return TESS_ECANCELED;
    switch (m->kind[stage]) {
    case ST_REPROJECT:
        return run_reproject(m, block, err, errlen);
    case ST_OVERLAPS:
        return mos_run_overlaps(m, block, cancel, err, errlen);
    case ST_SOLVE:
        return mos_run_solve(m, err, errlen);
    default:
        return run_coadd(m, block, cancel, err, errlen);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Finish                                                                                 */

/* Writes the header cards + END, blank-padded to `size` bytes
 * (fitscard_header_size(h->n)), at `off`. */
static int write_header(int fd, const fitscard_list *h, size_t size, off_t off)
{
    char *buf = malloc(size);
    if (!buf)
        return -1;
    fitscard_header_write(buf, h->cards, h->n);
    int rc = tess_pwrite_all(fd, buf, size, off);
    free(buf);
    return rc;
}

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    /* A new file only (the caller removed `to` just before): a symbolic link or file
     * put there since is not written through (errno EEXIST). */
    int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (out < 0) {
        int e = errno;
        close(in);
        errno = e;
        return -1;
    }
    size_t cap = (size_t)8 << 20;
    char *buf = malloc(cap);
    int rc = buf ? 0 : -1;
    off_t off = 0;
    while (rc == 0) {
        ssize_t r = read(in, buf, cap);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -1;
            break;
        }
        if (r == 0)
            break;
        rc = tess_pwrite_all(out, buf, (size_t)r, off);
        off += r;
    }
    free(buf);
    close(in);
    if (rc == 0 && fsync(out) != 0)
        rc = -1;
    if (close(out) != 0)
        rc = -1;
    return rc;
}

/* The DATASUMs of mosaic.fits's two data units combined from the coadd bands' records
 * in WORKDIR/sums.bin (written by run_coadd) into sums[0] and sums[1]: returns 2, or 0
 * when some band's record is missing or not valid (the data are then summed from the
 * file). */
static int band_sums(const mosaic *m, uint32_t sums[2])
{
    char path[PATH_MAX], *data = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/sums.bin", m->workdir);
    sums[0] = sums[1] = 0;
    if (mos_read_small(path, &data, &n) != 0)
        return 0;
    int ok = n >= (size_t)m->coadd_bands * 16;
    for (long band = 0; ok && band < m->coadd_bands; band++) {
        uint32_t rec[4], want[4];
        memcpy(rec, data + (size_t)band * sizeof rec, sizeof rec);
        sum_record(band, rec, want);
        ok = memcmp(rec, want, sizeof rec) == 0;
        sums[0] = fitswrite_sum_add(sums[0], rec[0]);
        sums[1] = fitswrite_sum_add(sums[1], rec[1]);
    }
    free(data);
    return ok ? 2 : 0;
}

int mos_finish(mosaic *m, const char *out_path, char *err, size_t errlen)
{
    if (!m->workdir) {
        tess_seterr(err, errlen, "the mosaic was planned without a work directory");
        return TESS_EINVAL;
    }
    int rc = mos_load_corr(m, err, errlen);
    if (rc)
        return rc;
    fitscard_list h0, h1;
    if ((rc = build_headers(m, m->corr, &h0, &h1)) != 0) {
        tess_seterr(err, errlen, rc == TESS_ENOMEM ? "out of memory"
                                                   : "the mosaic's header cannot be written");
        return rc;
    }
    if (fitscard_header_size(h0.n) != m->h0 || fitscard_header_size(h1.n) != m->h1) {
        fitscard_list_release(&h0);
        fitscard_list_release(&h1);
        tess_seterr(err, errlen, "internal error: header sizes changed");
        return TESS_EINVAL;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/mosaic.fits", m->workdir);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    off_t total = (off_t)(m->h0 + m->d0 + m->h1 + m->d1);
    if (fd < 0 || write_header(fd, &h0, m->h0, 0) != 0
        || write_header(fd, &h1, m->h1, (off_t)(m->h0 + m->d0)) != 0
        || ftruncate(fd, total) != 0) {
        tess_seterr(err, errlen, "cannot write '%s': %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        fitscard_list_release(&h0);
        fitscard_list_release(&h1);
        return TESS_EIO;
    }
    close(fd);
    fitscard_list_release(&h0);
    fitscard_list_release(&h1);
    /* The zero padding after each data unit comes from ftruncate only when the file
     * was shorter; data pads are never written otherwise, so they are zeros and add
     * nothing to the sums.  The checksums come last: from the coadd bands' sums, or
     * where one of those is missing, over the finished file. */
    uint32_t sums[2];
    int nsums = band_sums(m, sums);
    if ((rc = fitswrite_checksum_file_sums(path, sums, nsums, err, errlen)) != 0)
        return rc;
    if (unlink(out_path) != 0 && errno != ENOENT) {
        tess_seterr(err, errlen, "cannot replace '%s': %s", out_path, strerror(errno));
        return TESS_EIO;
    }
    if (link(path, out_path) != 0 && copy_file(path, out_path) != 0) {
        int e = errno;
        tess_seterr(err, errlen, "cannot write '%s': %s", out_path, strerror(e));
        if (e != EEXIST)          /* what is there then is not ours: leave it */
            unlink(out_path);
        return TESS_EIO;
    }
    return 0;
}
