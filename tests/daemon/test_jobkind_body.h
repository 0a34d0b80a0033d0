/* For the job types the tests define: their typed request is the checked body itself (a
 * reference to it), so that they keep reading it as JSON. */
#ifndef TESSERA_TESTS_DAEMON_TEST_JOBKIND_BODY_H
#define TESSERA_TESTS_DAEMON_TEST_JOBKIND_BODY_H

#include <jansson.h>
#include "daemon/jobs/jobkind.h"

/* parse(): check(body) (may be NULL), then *req = a reference to body. */
static inline int tt_body_request(const json_t *body, const job_env *env, void **req,
                                  job_problem *pb,
                                  int (*check)(const json_t *, const job_env *, job_problem *))
{
    if (check && check(body, env, pb) != 0)
        return -1;
    *req = json_incref((json_t *)body);
    return 0;
}

/* req_free() for such a request. */
static inline void tt_body_request_free(void *req)
{
    json_decref(req);
}

#endif
