/* The built-in job types, registered with the job runner. */
#include "daemon/jobs/jobtypes.h"
#include "daemon/jobs/job_mosaic.h"
#include "daemon/jobs/job_stack.h"
#include "daemon/jobs/jobs.h"

void jobtypes_register_all(void)
{
    static const job_kind *const kinds[] = {
        &job_kind_mosaic,   &job_kind_reproject, &job_kind_rechunk,
        &job_kind_power_spectrum, &job_kind_recenter, &job_kind_reduce,
        &job_kind_ingest,
    };
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        jobs_register_kind(kinds[i]);
}
