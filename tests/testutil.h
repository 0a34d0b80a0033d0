/* Helpers shared by the Check test programs: running a suite, FITS and header files,
 * scratch directories, and libcurl requests to the in-process server. */
#ifndef TESSERA_TESTS_TESTUTIL_H
#define TESSERA_TESTS_TESTUTIL_H

#include <check.h>
#include <stddef.h>

#include "engine/sky/skywcs.h"

/* ---- testutil.c ----------------------------------------------------------------------- */

/* Runs every test of `s` (CK_NORMAL output), frees the runner and the suite, and returns
 * the program's exit status: 0 when all passed, 1 otherwise. */
int tt_run_suite(Suite *s);

/* Reads a text header (one card a line, blank lines skipped, each cut to 80 characters)
 * into concatenated 80-character cards, NUL-terminated; *nkeys = the number of cards.
 * Fails the test when the file cannot be opened.  The caller frees the result. */
char *tt_read_hdr_file(const char *path, int *nkeys);

/* Builds cards as tt_read_hdr_file does from a NULL-terminated list of card texts. */
char *tt_make_cards(const char *const *lines, int *nkeys);

/* Reads the first two axes of HDU `hdu` (1-based) of `path` as astropy.io.fits delivers
 * them: BITPIX 8/16/-32 as float32 with BSCALE/BZERO applied in float32 arithmetic
 * (*f32 = 1, a float array), others as float64 (*f32 = 0, a double array); blank pixels
 * are NaN.  When `cards` is not NULL, the header goes there as cfitsio's fits_hdr2str
 * gives it (free with fits_free_memory or free) and its count into *nkeys.  Fails the
 * test on any cfitsio error.  The caller frees the pixels. */
void *tt_read_image(const char *path, int hdu, long *nx, long *ny, char **cards, int *nkeys,
                    int *f32);

/* Reads plane z (0-based) of the primary image of `path` as doubles (cfitsio's own
 * scaling, blanks as NaN), row 0 = FITS row 1; *nx, *ny = NAXIS1, NAXIS2.  Fails the test
 * on any cfitsio error.  The caller frees the result. */
double *tt_fits_plane(const char *path, long z, long *nx, long *ny);

/* As tt_fits_plane for plane 0 of HDU `hdu` (1-based) of an in-memory FITS file. */
double *tt_fits_mem_read(const char *data, size_t len, int hdu, long *nx, long *ny);

/* Writes a FITS file of one HDU at `path` as a hostile test wants it: the NULL-terminated
 * card texts as they are (each blank-padded or cut to 80 bytes, any byte kept), END, the
 * block filled with blanks, then a data unit of `data_bytes` bytes rounded up to whole
 * 2880-byte blocks: zeros, made with ftruncate (sparse where the file system allows, so
 * that a header may declare gigabytes).  Nothing checks the cards against the data: the
 * file may lie.  Fails the test when it cannot write. */
void tt_write_fits_cards(const char *path, const char *const *cards, long long data_bytes);

/* tt_write_fits_cards of a primary header SIMPLE = T, BITPIX, NAXIS = naxis (0..9), the
 * NAXISn of `axes` (any values, the hostile ones too), then the `extra` card texts
 * (NULL-terminated; NULL for none, at most 64). */
void tt_write_fits_image(const char *path, int bitpix, int naxis, const long long *axes,
                         const char *const *extra, long long data_bytes);

/* Creates a fresh directory /tmp/tessera-<tag>-XXXXXX and writes its path into dir
 * (size len).  Fails the test when it cannot. */
void tt_tmpdir_make(char *dir, size_t len, const char *tag);

/* Unlinks the n files `names` of `dir`, then removes `dir`.  Returns rmdir's result
 * (0, or -1 when something else was left in it). */
int tt_tmpdir_remove(const char *dir, const char *const *names, int n);

/* Entries of `dir` other than "." and "..", or -1 when it cannot be opened. */
int tt_count_entries(const char *dir);

/* Mounts a tmpfs of `size` bytes (mount(8)'s syntax: "256k", "2m") on the directory
 * `dir`, for a real ENOSPC.  The mount lives in a mount namespace of this process's own
 * (unshare, then / made private), so it goes away with the process even when an
 * assertion ends the test early.  Needs CAP_SYS_ADMIN (root outside a restricted
 * container).  Returns NULL, or the step that was refused with errno set. */
const char *tt_mount_tmpfs(const char *dir, const char *size);

/* Seconds on CLOCK_MONOTONIC, for bounds on how long something took. */
double tt_now_s(void);

/* Whether the program runs under valgrind: RUNNING_ON_VALGRIND when built with
 * <valgrind/valgrind.h> (configure checks for it), or TESSERA_VALGRIND=1 in the
 * environment (scripts/sanitize.sh and make check-valgrind set it). */
int tt_under_valgrind(void);

/* The factor for wall-clock bounds on the product's speed (a bound of 10 s is checked as
 * 10 * tt_time_scale()): TESSERA_TIME_SCALE when set (a number from 1 to 1000), else
 * TT_VALGRIND_TIME_SCALE under valgrind (memcheck runs code 20 to 50 times slower), else 1,
 * so that bounds are unchanged in a normal run. */
#define TT_VALGRIND_TIME_SCALE 30.0
double tt_time_scale(void);

/* ---- testutil_wcs.c (needs libtreproject) --------------------------------------------- */

/* skywcs_parse of the cards; fails the test with the parser's message on error. */
skywcs *tt_parse_wcs(const char *cards, int nkeys);

/* ---- testutil_http.c (needs libcurl and jansson) -------------------------------------- */

/* A response: status, body (malloc'd, NUL-terminated; NULL when empty) and the headers
 * the tests look at (empty strings when absent). */
typedef struct tt_resp {
    long status;
    char *body;
    size_t len;
    size_t cap;               /* bytes allocated for body (tt_fetch's own bookkeeping) */
    char content_type[128];
    char etag[64];
    char x_cache[16];
    char retry_after[16];
    char location[512];
    char acao[64];            /* Access-Control-Allow-Origin */
    char disposition[128];    /* Content-Disposition */
    char allow[64];           /* Allow (of a 405) */
    char accept_ranges[16];   /* Accept-Ranges */
    char content_range[80];   /* Content-Range (of a 206 or 416) */
    char last_modified[40];   /* Last-Modified */
    char link[512];           /* Link */
    char connection[32];      /* Connection (tt_raw_read only) */
    char content_encoding[32];/* Content-Encoding */
    char vary[64];            /* Vary */
} tt_resp;

/* Performs one request on base + path (base is "http://host:port").  `method` is GET,
 * POST or any other verb; `body` (len bytes, text/plain) is POSTed when not NULL;
 * `extra_header` ("Name: value") is added when not NULL.  Fails the test when the
 * transfer fails; any HTTP status is returned.  Release with tt_resp_free. */
tt_resp tt_fetch(const char *base, const char *method, const char *path, const char *body,
                 size_t len, const char *extra_header);

/* Points the body and header callbacks of the easy handle `curl` (a CURL *) at r and
 * sets a 60 s timeout (times tt_time_scale), for tests that configure the rest of the
 * transfer themselves. */
void tt_curl_capture(void *curl, tt_resp *r);

/* Frees the body (len back to 0); the struct may be reused. */
void tt_resp_free(tt_resp *r);

/* Asserts a problem+json reply (RFC 9457) with `status`, a title, a non-empty detail (and
 * a description equal to it) and,
 * when `parameter` is not NULL, that parameter.  `path` (may be NULL) names the request
 * in the failure messages. */
void tt_assert_problem(const char *path, const tt_resp *r, long status, const char *parameter);

/* Forks a child that calls start(arg), which starts a server and returns its port, then
 * serves until it is killed (it gets SIGKILL when the calling process dies, so it never
 * outlives a failed test).  In the caller: base = "http://127.0.0.1:PORT" (len bytes);
 * returns the child's pid. */
int tt_fork_server(int (*start)(void *arg), void *arg, char *base, size_t len);

/* Asserts a PNG signature and IHDR chunk, and reads the width and height from it. */
void tt_png_size(const tt_resp *r, long *w, long *h);

/* A raw HTTP/1.1 client, for requests no library would send (no client-side path
 * normalisation, broken framing) and for connections held open on purpose. */

/* A TCP socket connected to 127.0.0.1:port, with receive and send timeouts of
 * `timeout_s` (times tt_time_scale).  `src` (an IPv4 literal such as "127.0.0.2", or
 * NULL for the kernel's choice) is the local address it is bound to first, so that
 * tests can be several clients.  Fails the test when it cannot connect. */
int tt_raw_connect(int port, const char *src, double timeout_s);

/* Sends all n bytes; returns 0, or -1 when the server closed or stalled the connection
 * (it may answer and close before reading a huge body). */
int tt_send_all(int fd, const char *p, size_t n);

/* Reads one response: status line, headers (Content-Type, Retry-After, Connection into
 * r), Content-Length bytes of body (or up to EOF).  Interim 1xx responses before it are
 * skipped, as RFC 9110 section 15.2 asks of clients.  status 0 when nothing complete
 * arrived before the receive timeout or EOF.  Release with tt_resp_free. */
tt_resp tt_raw_read(int fd);

/* Waits until the server closes `fd` (recv returns 0 or an error other than a timeout;
 * data that comes first is read and dropped); returns the seconds waited, or -1 when it
 * was still open after `limit` seconds. */
double tt_wait_closed(int fd, double limit);

/* ---- testutil_bomb.c (needs zlib and libpng) ------------------------------------------ */

/* Decompression bombs, small on disk however large they decode: the deflate stream is
 * one block of 1 MiB of zeros compressed once (about 1 KB) and repeated, so writing one
 * costs milliseconds.  Each fails the test on error and returns the file's size. */

/* A gzip file (RFC 1952) of `prefix` (plen bytes) followed by nzero zero bytes. */
long long tt_write_gzip_zeros(const char *path, const void *prefix, size_t plen,
                              unsigned long long nzero);

/* A gzip'ed FITS file: a primary header of an nx x ny image of `bitpix` (no other card)
 * and its data unit of zeros (a 20000 x 20000 BITPIX -32 image: 1.6 GB in 1.6 MB). */
long long tt_write_gzip_fits(const char *path, long nx, long ny, int bitpix);

/* A valid greyscale PNG of w x h zero samples of `bits` 8 or 16 (its IHDR and chunks by
 * libpng; 30000 x 30000 at 8 bits: 900 MB of samples in 890 KB). */
long long tt_write_png_zeros(const char *path, long w, long h, int bits);

/* A valid 8-bit greyscale PNG of w x h zeros whose header is followed by `nchunks` zTXt
 * chunks of 7.7 KB, each inflating to 7.9 MB of text: just under libpng's 8 MB bound
 * on one chunk, so that a reader which does not skip them inflates every one (500 of
 * them: 3.9 MB on disk, half a minute of inflating). */
long long tt_write_png_ztxt(const char *path, long w, long h, int nchunks);

/* The peak resident set of this process so far (getrusage ru_maxrss), in MiB. */
double tt_maxrss_mb(void);

/* What some work cost: tt_cost_start takes the peak RSS and the clock; tt_cost_check
 * asserts that since then the peak RSS grew by less than max_mb MiB and less than max_s
 * seconds (times tt_time_scale) passed, `what` naming the work in the message. */
typedef struct tt_cost {
    double rss_mb, t;
} tt_cost;
tt_cost tt_cost_start(void);
void tt_cost_check(const tt_cost *c, double max_mb, double max_s, const char *what);

#endif
