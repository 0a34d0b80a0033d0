/* The "mosaic" and "reproject" job types: many celestial images reprojected,
 * background-matched and coadded into one new dataset, or one image reprojected
 * (engine/mosaic/mosaic.h does the work). */
#ifndef TESSERA_DAEMON_JOBS_JOB_MOSAIC_H
#define TESSERA_DAEMON_JOBS_JOB_MOSAIC_H

#include "daemon/jobs/jobkind.h"

/* Body: {"type": "mosaic",
 *        "inputs": [dataset names, or FITS paths under a data root (2-D images with a
 *                   celestial WCS)],
 *        "target": {"header": "FITS header text, one card a line, with NAXIS1/NAXIS2"}
 *                | {"auto": {"frame": "icrs|fk5|fk4|galactic|ecliptic", "projection": "TAN"}}
 *                  (optional; default {"auto": {}}: the first input's frame, TAN),
 *        "method": "nearest|bilinear|bicubic|lanczos3|exact" (default bilinear),
 *        "combine": "mean|sum|median|min|max|first|last" (default mean),
 *        "match_background": false | true (planes) | "level" (offsets only) (default false),
 *        "output": {"name": "new dataset name"}}
 * Unknown fields, wrong types and bad values are 400 naming the field; unknown inputs
 * 404, paths outside the data roots 403, inputs that are not 2-D celestial images or a
 * target without a celestial WCS 422, an output larger than 2^31 pixels 413, a taken
 * output name 409.  Stages and blocks as mos_plan gives them; the product (HDU 0 the
 * coadd, HDU 1 COVERAGE) is registered as dataset output.name. */
extern const job_kind job_kind_mosaic;

/* The "reproject" job type: one image onto a target WCS, as a job (progress, cancel,
 * restart) whose product is registered as a dataset.
 * Body: {"type": "reproject",
 *        "input": a dataset name or a FITS path under a data root (a 2-D celestial image),
 *        "target": as for a mosaic, but required,
 *        "method": as for a mosaic (default bilinear),
 *        "output": {"name": "new dataset name"}}
 * It is a mosaic of that one input with combine "first" and no background matching, so
 * HDU 0 holds the reprojected values themselves as float32 (those POST /api/v1/cutout
 * gives for that header and method, to 1 float32 ulp: crops shift the WCS) and HDU 1
 * COVERAGE the footprint.  Problems as for a
 * mosaic, the input named "input". */
extern const job_kind job_kind_reproject;

#endif
