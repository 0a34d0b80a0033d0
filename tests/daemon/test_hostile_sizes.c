/* Hostile sizes against tesserad in-process, on files generated into a temporary data
 * root: headers whose sizes overflow or lie about their file (the 5760-byte file that
 * declares 2^31 x 2^31 pixels), axes of length 0, non-ASCII cards, a huge but valid shape
 * for the HiPS coverage, more planes than an answer may hold.  A dataset with such a
 * header is refused at start with the reason (dataset, file, card); a job input or the
 * command line refuse the file the same way; a POSTed header with NAXISn = 0 is a 400
 * naming the card; a non-ASCII byte in a value or comment is served as '?' alike in the
 * JSON listing and in FITS products; what is served answers within its bounds. */
#include <check.h>
#include <fcntl.h>
#include <jansson.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/config.h"
#include "daemon/http.h"
#include "daemon/jobs/job_mosaic.h"
#include "daemon/jobs/jobs.h"
#include "tests/testutil.h"

extern char **environ;

static char datadir[128];
static tess_config cfg;
static tserver *srv;
static char base[64];

/* The WCS cards of a TAN image of n x n pixels of `cdelt` degrees at (10, 20), into
 * text (8 cards of 81 bytes) and the NULL-terminated `cards`. */
static void tan_cards(char text[8][81], const char **cards, long n, double cdelt)
{
    snprintf(text[0], 81, "CTYPE1  = 'RA---TAN'");
    snprintf(text[1], 81, "CTYPE2  = 'DEC--TAN'");
    snprintf(text[2], 81, "CRVAL1  = %20.1f", 10.0);
    snprintf(text[3], 81, "CRVAL2  = %20.1f", 20.0);
    snprintf(text[4], 81, "CRPIX1  = %20.1f", (double)n / 2);
    snprintf(text[5], 81, "CRPIX2  = %20.1f", (double)n / 2);
    snprintf(text[6], 81, "CDELT1  = %20.3G", -cdelt);
    snprintf(text[7], 81, "CDELT2  = %20.3G", cdelt);
    for (int i = 0; i < 8; i++)
        cards[i] = text[i];
    cards[8] = NULL;
}

/* Writes datadir/name (tt_write_fits_image): a TAN WCS when cdelt > 0, then the `extra`
 * cards (may be NULL), and data_bytes of zeros (sparse). */
static void write_image(const char *name, int bitpix, int naxis, const long long *axes,
                        double cdelt, const char *const *extra, long long data_bytes)
{
    char text[8][81], path[256];
    const char *cards[40];
    int n = 0;
    if (cdelt > 0) {
        tan_cards(text, cards, axes[0], cdelt);
        n = 8;
    }
    for (int i = 0; extra && extra[i] && n < 39; i++)
        cards[n++] = extra[i];
    cards[n] = NULL;
    snprintf(path, sizeof path, "%s/%s", datadir, name);
    tt_write_fits_image(path, bitpix, naxis, axes, cards, data_bytes);
}

/* Writes the small valid image ok.fits (8 x 8, BITPIX -32, TAN WCS). */
static void write_ok(void)
{
    write_image("ok.fits", -32, 2, (const long long[]){8, 8}, 1e-3, NULL, 8 * 8 * 4);
}

static void setup(void)
{
    tt_tmpdir_make(datadir, sizeof datadir, "hostsizes");
    srv = NULL;
    write_ok();
    jobs_register_kind(&job_kind_mosaic);   /* a second registration is refused, harmless */
}

static void stop_server(void)
{
    if (srv)
        tserver_stop(srv, 5);
    srv = NULL;
    config_release(&cfg);
}

static void teardown(void)
{
    stop_server();
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", datadir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Starts a server on datadir with the datasets of `datasets` (the JSON array's members),
 * jobs under datadir/jobs and limits.max_output_pixels `max_out` (0: the default).
 * Returns tserver_start's result, with err; on success base is set. */
static int start(const char *datasets, long long max_out, char *err, size_t errlen)
{
    char text[4096], limits[96] = "";
    if (max_out > 0)
        snprintf(limits, sizeof limits, ", \"limits\": {\"max_output_pixels\": %lld}", max_out);
    snprintf(text, sizeof text, "{\"listen\": \"127.0.0.1:0\", \"threads\": 2, \"data_roots\": "
             "[\"%s\"], \"jobs\": {\"dir\": \"%s/jobs\"}%s, \"datasets\": [%s]}", datadir,
             datadir, limits, datasets);
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text(text, &cfg, err, errlen) == 0, "%s", err);
    int rc = tserver_start(&cfg, &srv, err, errlen);
    if (rc) {
        srv = NULL;
        config_release(&cfg);
        return rc;
    }
    snprintf(base, sizeof base, "http://127.0.0.1:%d", tserver_port(srv));
    return 0;
}

static void assert_alive(void)
{
    tt_resp r = tt_fetch(base, "GET", "/healthz", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    tt_resp_free(&r);
}

/* ---- F1: sizes that overflow or pass the file ---------------------------------------- */

/* The shapes of the file and its kin.  A server that started with one used to
 * crash on the first slice (SIGSEGV in convert_run: the data size wrapped to 0, so the
 * 5760-byte file passed for one that holds the image); now none starts. */
static const struct {
    const char *name;
    int bitpix, naxis;
    long long axes[3];
    const char *why;
} hostile[] = {
    {"f1.fits", -32, 2, {2147483648LL, 2147483648LL}, "overflow"},
    {"b8.fits", 8, 2, {2147483647LL, 2147483647LL}, "shorter than its header says"},
    {"d64.fits", -64, 2, {3037000500LL, 3037000500LL}, "overflow"},
    {"cube61.fits", 16, 3, {2, 2, 1LL << 61}, "overflow"},
    {"cube40.fits", -32, 3, {8, 8, 1LL << 40}, "shorter than its header says"},
};

START_TEST(test_f1_refused_at_start)
{
    for (size_t k = 0; k < sizeof hostile / sizeof hostile[0]; k++) {
        write_image(hostile[k].name, hostile[k].bitpix, hostile[k].naxis, hostile[k].axes, 0,
                    NULL, 2880);
        char ds[256], err[512] = "";
        snprintf(ds, sizeof ds, "{\"name\": \"t\", \"path\": \"%s\"}", hostile[k].name);
        int rc = start(ds, 0, err, sizeof err);
        if (rc == 0) {
            /* What it served before: each of these must answer, not crash the server. */
            static const char *const paths[] = {
                "/api/v1/datasets/t/slice/xy/4_4/0_0_0.raw",
                "/api/v1/datasets/t/reduce?op=mean&axis=xy",
                "/api/v1/datasets/t/series?x=0&y=0&format=json"};
            for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
                tt_resp r = tt_fetch(base, "GET", paths[i], NULL, 0, NULL);
                tt_resp_free(&r);
            }
            assert_alive();
            stop_server();
            ck_abort_msg("%s: the server started", hostile[k].name);
        }
        ck_assert_msg(strstr(err, "dataset 't'") && strstr(err, hostile[k].name) &&
                      strstr(err, hostile[k].why), "%s: '%s'", hostile[k].name, err);
    }
}
END_TEST

/* A stack is refused at start naming the frame whose header lies, whichever it is. */
START_TEST(test_f1_stack_frame_refused)
{
    write_image("fr_0.fits", -32, 2, (const long long[]){8, 8}, 0, NULL, 256);
    write_image("fr_1.fits", -32, 2, (const long long[]){2147483648LL, 2147483648LL}, 0, NULL,
                2880);
    write_image("hx_0.fits", -32, 2, (const long long[]){2147483648LL, 2147483648LL}, 0, NULL,
                2880);
    write_image("hx_1.fits", -32, 2, (const long long[]){2147483648LL, 2147483648LL}, 0, NULL,
                2880);
    static const struct { const char *pattern, *frame; } c[] = {{"fr_*.fits", "fr_1.fits"},
                                                               {"hx_*.fits", "hx_0.fits"}};
    for (int k = 0; k < 2; k++) {
        char ds[256], err[512] = "";
        snprintf(ds, sizeof ds, "{\"name\": \"s\", \"frames\": \"%s\"}", c[k].pattern);
        int rc = start(ds, 0, err, sizeof err);
        if (rc == 0) {
            tt_resp r = tt_fetch(base, "GET", "/api/v1/datasets/s/slice/xy/4_4/0_0_1.raw", NULL,
                                 0, NULL);
            tt_resp_free(&r);
            r = tt_fetch(base, "GET", "/api/v1/datasets/s/reduce?op=sum&axis=z&format=raw",
                         NULL, 0, NULL);
            tt_resp_free(&r);
            stop_server();
            ck_abort_msg("%s: the server started", c[k].pattern);
        }
        ck_assert_msg(strstr(err, "dataset 's'") && strstr(err, c[k].frame) &&
                      strstr(err, "overflow"), "%s: '%s'", c[k].pattern, err);
    }
}
END_TEST

/* Runs the command line with `args` (NULL-terminated); returns its exit status and its
 * standard error in errtext. */
static int run_tessera(const char *const *args, char *errtext, size_t errlen)
{
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)TESSERA_BIN;
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    char errpath[256];
    snprintf(errpath, sizeof errpath, "%s/cli.stderr", datadir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, TESSERA_BIN, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    FILE *f = fopen(errpath, "r");
    size_t got = f ? fread(errtext, 1, errlen - 1, f) : 0;
    errtext[got] = '\0';
    if (f)
        fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The same file as a job input and on the command line: refused with the same reason,
 * before anything is allocated for it. */
START_TEST(test_f1_job_input_and_cli)
{
    write_image("f1.fits", -32, 2, (const long long[]){2147483648LL, 2147483648LL}, 1e-3, NULL,
                2880);
    char err[512] = "";
    ck_assert_msg(start("{\"name\": \"ok\", \"path\": \"ok.fits\"}", 0, err, sizeof err) == 0,
                  "%s", err);
    const char *body = "{\"type\": \"mosaic\", \"inputs\": [\"ok\", \"f1.fits\"], "
                       "\"output\": {\"name\": \"m1\"}}";
    tt_resp r = tt_fetch(base, "POST", "/api/v1/jobs", body, strlen(body),
                         "Content-Type: application/json");
    tt_assert_problem("mosaic of f1.fits", &r, 422, "inputs[1]");
    ck_assert_msg(strstr(r.body, "f1.fits") && strstr(r.body, "overflow"), "%s", r.body);
    tt_resp_free(&r);
    assert_alive();

    char in[256], target[256], out[256];
    snprintf(in, sizeof in, "%s/f1.fits", datadir);
    snprintf(target, sizeof target, "%s/ok.fits", datadir);
    snprintf(out, sizeof out, "%s/out.fits", datadir);
    const char *args[] = {"reproject", in, "--target", target, "-o", out, NULL};
    char text[1024];
    ck_assert_int_eq(run_tessera(args, text, sizeof text), 1);
    ck_assert_msg(strstr(text, "f1.fits") && strstr(text, "overflow"), "%s", text);
    ck_assert_int_eq(access(out, F_OK), -1);
}
END_TEST

/* ---- F5: axes of length 0 ------------------------------------------------------------ */

/* A POST cutout's target header as text, one card a line: TAN at (10, 20), NAXIS1 and
 * NAXIS2 the value texts n1 and n2; keywords padded to 8 columns ("NAXIS1  = 0"), or
 * `loose`, one blank before the '=' ("NAXIS1 = abc"). */
static void tan_text(char *out, size_t len, const char *n1, const char *n2, int loose)
{
    static const char *const cards[][2] = {
        {"NAXIS", "2"}, {"NAXIS1", NULL}, {"NAXIS2", NULL}, {"CTYPE1", "'RA---TAN'"},
        {"CTYPE2", "'DEC--TAN'"}, {"CRVAL1", "10"}, {"CRVAL2", "20"}, {"CRPIX1", "1"},
        {"CRPIX2", "8"}, {"CDELT1", "-0.001"}, {"CDELT2", "0.001"}};
    size_t n = 0;
    for (size_t i = 0; i < sizeof cards / sizeof cards[0]; i++) {
        int w = loose ? (int)strlen(cards[i][0]) + 1 : 8;
        n += (size_t)snprintf(out + n, len - n, "%-*s= %s\n", w, cards[i][0],
                              i == 1 ? n1 : i == 2 ? n2 : cards[i][1]);
        ck_assert_uint_lt(n, len);
    }
}

START_TEST(test_f5_zero_axis)
{
    write_image("zero.fits", -32, 2, (const long long[]){0, 10}, 0, NULL, 0);
    write_image("zero3.fits", -32, 3, (const long long[]){4, 4, 0}, 0, NULL, 0);
    static const struct { const char *file, *card; } c[] = {{"zero.fits", "NAXIS1 = 0"},
                                                           {"zero3.fits", "NAXIS3 = 0"}};
    for (int k = 0; k < 2; k++) {
        char ds[256], err[512] = "";
        snprintf(ds, sizeof ds, "{\"name\": \"z\", \"path\": \"%s\"}", c[k].file);
        ck_assert_int_ne(start(ds, 0, err, sizeof err), 0);
        ck_assert_msg(strstr(err, "dataset 'z'") && strstr(err, c[k].file) &&
                      strstr(err, c[k].card), "%s: '%s'", c[k].file, err);
    }
    /* A POSTed target header: 400 naming the card, for a cutout and for a job. */
    char err[512] = "";
    ck_assert_msg(start("{\"name\": \"ok\", \"path\": \"ok.fits\"}", 0, err, sizeof err) == 0,
                  "%s", err);
    char hdr[512], loose[512], big[512];
    tan_text(hdr, sizeof hdr, "0", "16", 0);
    tt_resp r = tt_fetch(base, "POST", "/api/v1/cutout?dataset=ok", hdr, strlen(hdr), NULL);
    tt_assert_problem("cutout NAXIS1 = 0", &r, 400, "body");
    ck_assert_msg(strstr(r.body, "NAXIS1 = 0"), "%s", r.body);
    tt_resp_free(&r);
    /* Loosely formatted, a value that is no number is named too. */
    tan_text(loose, sizeof loose, "abc", "16", 1);
    r = tt_fetch(base, "POST", "/api/v1/cutout?dataset=ok", loose, strlen(loose), NULL);
    tt_assert_problem("cutout NAXIS1 = abc", &r, 400, "body");
    ck_assert_msg(strstr(r.body, "NAXIS1 must be an integer between 1 and 65536 in a card "
                         "'NAXIS1  = value', got 'NAXIS1 = abc'"),
                  "%s", r.body);
    tt_resp_free(&r);
    /* A header too large for limits.max_output_pixels: 413 naming the cards the client
     * sent, NAXIS1 and NAXIS2 (not the query form's width), for the POST body and for
     * the `wcs` of the GET form. */
    tan_text(big, sizeof big, "65536", "65536", 0);
    r = tt_fetch(base, "POST", "/api/v1/cutout?dataset=ok", big, strlen(big), NULL);
    tt_assert_problem("cutout NAXIS1 = NAXIS2 = 65536", &r, 413, "body");
    ck_assert_msg(strstr(r.body, "NAXIS1 x NAXIS2 = 65536 x 65536 = 4294967296 output pixels "
                         "is more than limits.max_output_pixels = 16777216") &&
                  !strstr(r.body, "width"), "%s", r.body);
    tt_resp_free(&r);
    r = tt_fetch(base, "GET", "/api/v1/cutout?dataset=ok&wcs=%7B%22NAXIS1%22%3A65536%2C"
                 "%22NAXIS2%22%3A300%2C%22CTYPE1%22%3A%22RA---TAN%22%2C%22CTYPE2%22%3A"
                 "%22DEC--TAN%22%2C%22CRVAL1%22%3A10%2C%22CRVAL2%22%3A20%2C%22CRPIX1%22%3A1"
                 "%2C%22CRPIX2%22%3A8%2C%22CDELT1%22%3A-0.001%2C%22CDELT2%22%3A0.001%7D",
                 NULL, 0, NULL);
    tt_assert_problem("cutout wcs NAXIS1 = 65536, NAXIS2 = 300", &r, 413, "wcs");
    ck_assert_msg(strstr(r.body, "NAXIS1 x NAXIS2 = 65536 x 300 = 19660800 output pixels") &&
                  !strstr(r.body, "width"), "%s", r.body);
    tt_resp_free(&r);
    json_t *b = json_pack("{s:s, s:[s], s:{s:s}, s:{s:s}}", "type", "mosaic", "inputs", "ok",
                          "target", "header", hdr, "output", "name", "m2");
    char *body = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    r = tt_fetch(base, "POST", "/api/v1/jobs", body, strlen(body),
                 "Content-Type: application/json");
    free(body);
    tt_assert_problem("mosaic target NAXIS1 = 0", &r, 400, "target.header");
    ck_assert_msg(strstr(r.body, "NAXIS1 = 0"), "%s", r.body);
    tt_resp_free(&r);
    assert_alive();
}
END_TEST

/* ---- F8: non-ASCII bytes in cards ---------------------------------------------------- */

/* The `index`-th (0-based) string of the "header" array of a dataset description. */
static const char *header_card(json_t *doc, size_t index)
{
    json_t *h = json_object_get(doc, "header");
    ck_assert(json_is_array(h));
    return json_string_value(json_array_get(h, index));
}

START_TEST(test_f8_non_ascii_cards)
{
    static const char *const extra[] = {"COMMENT caf\xe9 au lait",
                                        "OBJECT  = 'M\xfcnchen '           / st\xe4" "dt", NULL};
    write_image("na.fits", -32, 2, (const long long[]){8, 8}, 1e-3, extra, 256);
    write_image("nf_0.fits", -32, 2, (const long long[]){8, 8}, 0, extra, 256);
    write_image("nf_1.fits", -32, 2, (const long long[]){8, 8}, 0, extra, 256);
    char err[512] = "";
    ck_assert_msg(start("{\"name\": \"na\", \"path\": \"na.fits\"}, "
                        "{\"name\": \"nf\", \"frames\": \"nf_*.fits\"}", 0, err, sizeof err) == 0,
                  "%s", err);
    /* The listing and the FITS products show the same cards, '?' for each such byte. */
    tt_resp r = tt_fetch(base, "GET", "/api/v1/datasets/na", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    json_t *doc = json_loads(r.body, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    ck_assert_str_eq(header_card(doc, 13), "COMMENT caf? au lait");
    ck_assert_str_eq(header_card(doc, 14), "OBJECT  = 'M?nchen '           / st?dt");
    json_decref(doc);
    tt_resp_free(&r);
    static const char *const fits[] = {"/api/v1/datasets/na/slice/xy/4_4/2_2_0.fits",
                                       "/api/v1/datasets/nf/slice/xy/4_4/0_0_1.fits"};
    for (int k = 0; k < 2; k++) {
        r = tt_fetch(base, "GET", fits[k], NULL, 0, NULL);
        ck_assert_msg(r.status == 200, "%s: %ld %s", fits[k], r.status,
                      r.content_type[0] == 'a' ? r.body : "");
        ck_assert_msg(memmem(r.body, r.len, "COMMENT caf? au lait    ", 24) &&
                      memmem(r.body, r.len, "OBJECT  = 'M?nchen '           / st?dt", 38),
                      "%s: the cards differ from the listing", fits[k]);
        tt_resp_free(&r);
    }
    stop_server();

    /* In a keyword no FITS product could carry the card: refused at start, named. */
    static const char *const key[] = {"K\xe9Y     =                    1", NULL};
    write_image("nakey.fits", -32, 2, (const long long[]){8, 8}, 0, key, 256);
    ck_assert_int_ne(start("{\"name\": \"k\", \"path\": \"nakey.fits\"}", 0, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "dataset 'k'") && strstr(err, "nakey.fits") &&
                  strstr(err, "card 6: keyword 'K\\xE9Y'"), "%s", err);
}
END_TEST

/* ---- F3 and other loops over header-derived counts ----------------------------------- */

/* A huge but valid shape: 10^5 x 10^5 pixels of 1e-4 degrees (a sparse 10 GB file), whose
 * survey order (11) has some 10^5 tiles to test: the coverage used to take minutes (a
 * core for 30+ minutes at 2^31 x 2^31); now a coarser MOC within about a second. */
START_TEST(test_f3_moc_bounded)
{
    write_image("huge.fits", 8, 2, (const long long[]){100000, 100000}, 1e-4, NULL,
                100000LL * 100000);
    char err[512] = "";
    ck_assert_msg(start("{\"name\": \"huge\", \"path\": \"huge.fits\"}", 0, err, sizeof err) == 0,
                  "%s", err);
    double t0 = tt_now_s();
    tt_resp r = tt_fetch(base, "GET", "/hips/huge/Moc.fits", NULL, 0, NULL);
    double dt = tt_now_s() - t0;
    ck_assert_msg(r.status == 200, "Moc.fits: %ld %s", r.status, r.body ? r.body : "");
    ck_assert_msg(dt < 3.0 * tt_time_scale(), "Moc.fits took %.2f s", dt);
    ck_assert_str_eq(r.content_type, "application/fits");
    char *mo = memmem(r.body, r.len, "MOCORDER= ", 10);
    ck_assert_ptr_nonnull(mo);
    long order = strtol(mo + 10, NULL, 10);
    ck_assert_msg(order >= 3 && order < 11, "MOCORDER %ld", order);
    tt_resp_free(&r);
    assert_alive();
}
END_TEST

/* A cube of more planes than limits.max_output_pixels: a series or a reduction along xy
 * (one value a plane) is a 413 before any plane is read. */
START_TEST(test_plane_count_bounded)
{
    write_image("deep.fits", -32, 3, (const long long[]){2, 2, 64}, 0, NULL, 2 * 2 * 64 * 4);
    char err[512] = "";
    ck_assert_msg(start("{\"name\": \"deep\", \"path\": \"deep.fits\"}", 16, err, sizeof err) == 0,
                  "%s", err);
    static const char *const paths[] = {"/api/v1/datasets/deep/series?x=0&y=0",
                                        "/api/v1/datasets/deep/reduce?op=mean&axis=xy"};
    for (int k = 0; k < 2; k++) {
        tt_resp r = tt_fetch(base, "GET", paths[k], NULL, 0, NULL);
        tt_assert_problem(paths[k], &r, 413, k ? "axis" : NULL);
        ck_assert_msg(strstr(r.body, "limits.max_output_pixels"), "%s", r.body);
        tt_resp_free(&r);
    }
    /* The image itself is within the limit: slices are served. */
    tt_resp r = tt_fetch(base, "GET", "/api/v1/datasets/deep/slice/xz/2_8/0_0_0.raw", NULL, 0,
                         NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, 2 * 8 * 4);
    tt_resp_free(&r);
}
END_TEST

/* One case each, so that each test has its own server and data root. */
static void add_case(Suite *s, const char *name, const TTest *t)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 90);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, t);
    suite_add_tcase(s, tc);
}

int main(void)
{
    Suite *s = suite_create("hostile_sizes");
    add_case(s, "f1", test_f1_refused_at_start);
    add_case(s, "f1stack", test_f1_stack_frame_refused);
    add_case(s, "f1jobs", test_f1_job_input_and_cli);
    add_case(s, "f5", test_f5_zero_axis);
    add_case(s, "f8", test_f8_non_ascii_cards);
    add_case(s, "f3", test_f3_moc_bounded);
    add_case(s, "planes", test_plane_count_bounded);
    return tt_run_suite(s);
}
