/* libFuzzer target: JSON job bodies, as jobs_submit (daemon/jobs/jobs.c) checks them before a
 * job is queued: jansson parse (duplicates refused), an object with a string "type", the
 * registered kind of that type, and its parse against the demo catalog and a collection
 * "demo" of the demo folder's images (a mosaic's {"collection": ..., "region": ...}); a
 * body that parses is parsed again as stored (req_json, accepted).  Nothing is queued or
 * run. */
#include "tests/fuzz/fuzz_common.h"
#include "daemon/catalog.h"
#include "daemon/collection/collection.h"
#include "daemon/config.h"
#include "daemon/jobs/job_mosaic.h"
#include "daemon/jobs/job_stack.h"
#include "daemon/jobs/jobs.h"
#include "daemon/jobs/jobtypes.h"

#include <jansson.h>
#include <stdio.h>

static tess_config g_cfg;
static catalog *g_cat;
static colset *g_set;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char err[512];
    if (config_init(&g_cfg) || config_load_demo(&g_cfg, NULL, err, sizeof err) ||
        catalog_open(&g_cfg, &g_cat, err, sizeof err)) {
        fprintf(stderr, "fuzz_jobs: cannot open the demo catalog: %s\n", err);
        abort();
    }
    json_t *d = json_pack("{s:s, s:s, s:s}", "name", "demo", "kind", "collection", "images",
                          "*.fits");
    if (!d || colconfig_parse(d, "fuzz", &g_cfg, err, sizeof err) ||
        colset_open(&g_cfg, &g_set, err, sizeof err)) {
        fprintf(stderr, "fuzz_jobs: cannot open the demo collection: %s\n", err);
        abort();
    }
    json_decref(d);
    jobtypes_register_all();
    /* The kinds built so far (a duplicate of jobtypes_register_all is refused, harmless). */
    jobs_register_kind(&job_kind_mosaic);
    jobs_register_kind(&job_kind_rechunk);
    jobs_register_kind(&job_kind_power_spectrum);
    jobs_register_kind(&job_kind_recenter);
    jobs_register_kind(&job_kind_reduce);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    json_error_t jerr;
    json_t *b = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
    if (!b)
        return 0;
    json_t *t = json_object_get(b, "type");
    if (json_is_object(b) && json_is_string(t)) {
        const job_kind *k = jobs_find_kind(json_string_value(t));
        if (k) {
            job_env env = {&g_cfg, g_cat, 2, g_set, NULL};
            job_problem pb;
            memset(&pb, 0, sizeof pb);
            void *req = NULL;
            int bad = jobkind_parse(k, b, &env, 0, &req, &pb);
            json_t *stored = !bad && k->req_json ? k->req_json(req) : NULL;
            k->req_free(req);
            if (stored) {
                req = NULL;
                if (jobkind_parse(k, stored, &env, 1, &req, &pb) == 0)
                    k->req_free(req);
                json_decref(stored);
            }
            if (bad) {
                if (pb.status < 400 || pb.status > 599 ||
                    strnlen(pb.detail, sizeof pb.detail) == sizeof pb.detail)
                    __builtin_trap();
            } else {
                /* An accepted body is stored as its compact dump. */
                char *canon = json_dumps(b, JSON_COMPACT | JSON_PRESERVE_ORDER);
                free(canon);
            }
        }
    }
    json_decref(b);
    return 0;
}
