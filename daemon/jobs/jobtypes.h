/* The job types tesserad offers (daemon/jobs/jobtypes.c lists them). */
#ifndef TESSERA_DAEMON_JOBS_JOBTYPES_H
#define TESSERA_DAEMON_JOBS_JOBTYPES_H

/* Registers every built-in job type with jobs_register_kind.  Idempotent. */
void jobtypes_register_all(void);

#endif
