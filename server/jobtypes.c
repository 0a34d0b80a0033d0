/* The built-in job types, registered with the job runner. */
#include "server/jobtypes.h"
#include "server/jobs.h"

void jobtypes_register_all(void)
{
}
