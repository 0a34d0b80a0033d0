/* Test helpers: decompression bombs (gzip'ed FITS, PNG) small on disk, and the peak RSS (testutil.h). */
#include "tests/testutil.h"

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <zlib.h>

/* Bytes of zeros that one repeated deflate block stands for. */
#define BOMB_BLOCK ((size_t)1 << 20)

typedef struct bomb_out {
    unsigned char *p;
    size_t n, cap;
} bomb_out;

static void out_put(bomb_out *o, const void *d, size_t n)
{
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2;
        o->p = realloc(o->p, o->cap);
        ck_assert_ptr_nonnull(o->p);
    }
    memcpy(o->p + o->n, d, n);
    o->n += n;
}

/* Appends the raw deflate of `in` (n bytes) to o, ending with `flush` (Z_SYNC_FLUSH: a
 * block that is not the last, ending on a byte boundary; Z_FINISH: the last block).
 * With `zero_window`, the compressor starts from a window of 32 KiB of zeros, so the
 * block decodes right wherever the output so far ends with 32 KiB of zeros. */
static void deflate_raw(bomb_out *o, const unsigned char *in, size_t n, int zero_window,
                        int flush)
{
    static const unsigned char zeros[32768];
    z_stream z;
    memset(&z, 0, sizeof z);
    ck_assert_int_eq(deflateInit2(&z, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY), Z_OK);
    if (zero_window)
        ck_assert_int_eq(deflateSetDictionary(&z, zeros, sizeof zeros), Z_OK);
    unsigned char buf[1 << 16];
    z.next_in = (unsigned char *)in;
    z.avail_in = (uInt)n;
    int rc;
    do {
        z.next_out = buf;
        z.avail_out = sizeof buf;
        rc = deflate(&z, flush);
        ck_assert_int_ne(rc, Z_STREAM_ERROR);
        out_put(o, buf, sizeof buf - z.avail_out);
    } while (z.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
    deflateEnd(&z);
}

/* The raw deflate stream of `prefix` (plen bytes) then nzero zero bytes into o, and the
 * CRC-32 and Adler-32 of those bytes: the first block holds the prefix and up to 1 MiB of
 * zeros, then one block of 1 MiB of zeros (compressed once, a few hundred bytes) is
 * repeated, then the rest.  Costs milliseconds whatever nzero. */
static void zero_stream(bomb_out *o, const void *prefix, size_t plen, unsigned long long nzero,
                        unsigned long *crc, unsigned long *adler)
{
    unsigned char *zeros = calloc(1, BOMB_BLOCK);
    unsigned char *first = calloc(1, plen + BOMB_BLOCK);
    ck_assert(zeros && first);
    if (plen)
        memcpy(first, prefix, plen);
    size_t n1 = nzero < BOMB_BLOCK ? (size_t)nzero : BOMB_BLOCK;
    unsigned long long rest = nzero - n1;
    *crc = crc32(0, first, (uInt)(plen + n1));
    *adler = adler32(1, first, (uInt)(plen + n1));
    deflate_raw(o, first, plen + n1, 0, rest ? Z_SYNC_FLUSH : Z_FINISH);
    if (rest) {
        bomb_out blk = {0};
        deflate_raw(&blk, zeros, BOMB_BLOCK, 1, Z_SYNC_FLUSH);
        unsigned long bc = crc32(0, zeros, (uInt)BOMB_BLOCK);
        unsigned long ba = adler32(1, zeros, (uInt)BOMB_BLOCK);
        for (; rest >= BOMB_BLOCK; rest -= BOMB_BLOCK) {
            out_put(o, blk.p, blk.n);
            *crc = crc32_combine(*crc, bc, (z_off_t)BOMB_BLOCK);
            *adler = adler32_combine(*adler, ba, (z_off_t)BOMB_BLOCK);
        }
        deflate_raw(o, zeros, (size_t)rest, 1, Z_FINISH);
        *crc = crc32_combine(*crc, crc32(0, zeros, (uInt)rest), (z_off_t)rest);
        *adler = adler32_combine(*adler, adler32(1, zeros, (uInt)rest), (z_off_t)rest);
        free(blk.p);
    }
    free(zeros);
    free(first);
}

static long long write_file(const char *path, const bomb_out *o)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(o->p, 1, o->n, f), o->n);
    ck_assert_int_eq(fclose(f), 0);
    return (long long)o->n;
}

long long tt_write_gzip_zeros(const char *path, const void *prefix, size_t plen,
                              unsigned long long nzero)
{
    /* RFC 1952: magic, deflate, no flags, no time, maximum compression, Unix. */
    static const unsigned char head[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 3};
    bomb_out o = {0};
    out_put(&o, head, sizeof head);
    unsigned long crc, adler;
    zero_stream(&o, prefix, plen, nzero, &crc, &adler);
    unsigned long long total = plen + nzero;
    unsigned char tail[8];
    for (int i = 0; i < 4; i++) {
        tail[i] = (unsigned char)(crc >> (8 * i));
        tail[4 + i] = (unsigned char)(total >> (8 * i));   /* ISIZE: the size mod 2^32 */
    }
    out_put(&o, tail, sizeof tail);
    long long n = write_file(path, &o);
    free(o.p);
    return n;
}

long long tt_write_gzip_fits(const char *path, long nx, long ny, int bitpix)
{
    char head[2880];
    memset(head, ' ', sizeof head);
    char c[6][81];
    snprintf(c[0], sizeof c[0], "SIMPLE  = %20s", "T");
    snprintf(c[1], sizeof c[1], "BITPIX  = %20d", bitpix);
    snprintf(c[2], sizeof c[2], "NAXIS   = %20d", 2);
    snprintf(c[3], sizeof c[3], "NAXIS1  = %20ld", nx);
    snprintf(c[4], sizeof c[4], "NAXIS2  = %20ld", ny);
    snprintf(c[5], sizeof c[5], "END");
    for (int k = 0; k < 6; k++)
        memcpy(head + 80 * k, c[k], strlen(c[k]));
    unsigned long long data = (unsigned long long)nx * (unsigned long long)ny *
                              (unsigned long long)(bitpix < 0 ? -bitpix : bitpix) / 8;
    data = (data + 2879) / 2880 * 2880;
    return tt_write_gzip_zeros(path, head, sizeof head, data);
}

/* A PNG being written: the file and libpng's structs. */
typedef struct png_out {
    FILE *f;
    png_structp png;
    png_infop info;
} png_out;

/* Creates `path` and writes the signature and IHDR of a w x h greyscale PNG of `bits`. */
static void png_start(png_out *o, const char *path, long w, long h, int bits)
{
    o->f = fopen(path, "wb");
    ck_assert_msg(o->f != NULL, "cannot create %s", path);
    o->png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    o->info = o->png ? png_create_info_struct(o->png) : NULL;
    ck_assert(o->png && o->info);
    ck_assert_int_eq(setjmp(png_jmpbuf(o->png)), 0);
    png_init_io(o->png, o->f);
    png_set_IHDR(o->png, o->info, (png_uint_32)w, (png_uint_32)h, bits, PNG_COLOR_TYPE_GRAY,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(o->png, o->info);
}

/* Frees libpng's structs, closes the file and returns its size. */
static long long png_finish(png_out *o)
{
    png_destroy_write_struct(&o->png, &o->info);
    long long n = ftell(o->f);
    ck_assert_int_eq(fclose(o->f), 0);
    return n;
}

long long tt_write_png_zeros(const char *path, long w, long h, int bits)
{
    png_out po;
    png_start(&po, path, w, h, bits);
    /* The image data: h rows of a filter byte (0, None) and w zero samples, all zeros,
     * as one zlib stream (RFC 1950) in one IDAT chunk; libpng writes the chunks. */
    bomb_out o = {0};
    static const unsigned char zhead[2] = {0x78, 0xda};
    out_put(&o, zhead, sizeof zhead);
    unsigned long crc, adler;
    unsigned long long rowbytes = 1 + (unsigned long long)w * (unsigned long long)(bits / 8);
    zero_stream(&o, NULL, 0, rowbytes * (unsigned long long)h, &crc, &adler);
    unsigned char ztail[4] = {(unsigned char)(adler >> 24), (unsigned char)(adler >> 16),
                              (unsigned char)(adler >> 8), (unsigned char)adler};
    out_put(&o, ztail, sizeof ztail);
    png_write_chunk(po.png, (png_const_bytep) "IDAT", o.p, o.n);
    png_write_chunk(po.png, (png_const_bytep) "IEND", NULL, 0);
    free(o.p);
    return png_finish(&po);
}

long long tt_write_png_ztxt(const char *path, long w, long h, int nchunks)
{
    /* Keyword "Comment", its NUL, compression method 0 (zlib), then the stream. */
    const size_t text = 7900000;
    unsigned char *zeros = calloc(1, text);
    uLongf clen = compressBound(text);
    unsigned char *chunk = malloc(9 + clen);
    ck_assert(zeros && chunk);
    memcpy(chunk, "Comment\0\0", 9);
    ck_assert_int_eq(compress2(chunk + 9, &clen, zeros, text, 9), Z_OK);
    free(zeros);
    png_out po;
    png_start(&po, path, w, h, 8);
    for (int i = 0; i < nchunks; i++)
        png_write_chunk(po.png, (png_const_bytep) "zTXt", chunk, 9 + clen);
    unsigned char *row = calloc(1, (size_t)w);
    ck_assert_ptr_nonnull(row);
    for (long r = 0; r < h; r++)
        png_write_row(po.png, row);
    png_write_end(po.png, po.info);
    free(row);
    free(chunk);
    return png_finish(&po);
}

double tt_maxrss_mb(void)
{
    struct rusage u;
    ck_assert_int_eq(getrusage(RUSAGE_SELF, &u), 0);
    return (double)u.ru_maxrss / 1024.0;   /* Linux: kilobytes */
}

tt_cost tt_cost_start(void)
{
    tt_cost c = {tt_maxrss_mb(), tt_now_s()};
    return c;
}

void tt_cost_check(const tt_cost *c, double max_mb, double max_s, const char *what)
{
    double grown = tt_maxrss_mb() - c->rss_mb, dt = tt_now_s() - c->t;
    ck_assert_msg(grown < max_mb, "%s: the peak RSS grew by %.0f MB (bound %.0f)", what, grown,
                  max_mb);
    ck_assert_msg(dt < max_s * tt_time_scale(), "%s took %.2f s (bound %.2f s)", what, dt,
                  max_s * tt_time_scale());
}
