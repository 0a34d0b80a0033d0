/* Solar frames inside the engine: the observer read from and written to a header, the
 * pairing of two solar WCSs, and the ephemeris those need (solar.c, solarhead.c). */
#ifndef TESSERA_ENGINE_SKY_SOLAR_H
#define TESSERA_ENGINE_SKY_SOLAR_H

#include "engine/fits/fitscard.h"
#include "engine/sky/skywcs.h"

/* The observer and the Sun of a solar WCS from its nkeys cards (see solarhead.c for the
 * keywords and their order).  Always fills *o (o->known 0 when no observer is given). */
void solar_read_header(const char *cards, int nkeys, solar_obs *o);

/* Appends RSUN_REF, the observer (HGLN_OBS, HGLT_OBS, DSUN_OBS, and CRLN_OBS, CRLT_OBS
 * when the Carrington offset is known) and DATE-OBS of `sol` to `b`. */
void solar_write_header(fitscard_list *b, const solar_obs *sol);

/* The Carrington offsets of a pair (of the image read, ot of the grid written), in
 * place: a side without one takes the other's when both are at one time (the offset
 * changes by about 13 degrees a day). */
void solar_pair_observers(solar_obs *of, solar_obs *ot);

/* What converting between the solar frames fa (observer oa, surface sa) and fb lacks,
 * as a sentence, or NULL when nothing is missing. */
const char *solar_pair_gap(sky_frame fa, const solar_obs *oa, int sa, sky_frame fb,
                           const solar_obs *ob, int sb);

/* The Julian date (TT) of a Julian date (UTC), with the leap seconds from 1972 on. */
double solar_tt(double jd_utc);

/* The Sun-Earth vector (metres, ICRS axes) at a Julian date (UTC), from the ephemeris
 * solar_hgs_motion uses (Meeus' truncated VSOP87D, about 0.1 arcsec from sunpy's). */
void solar_earth(double jd_utc, double e[3]);

/* The Stonyhurst axes at a Julian date (UTC) as the rows of m, in ICRS: m p turns an
 * ICRS-oriented heliocentric vector p into Stonyhurst Cartesian coordinates. */
void solar_hgs_axes(double jd_utc, double m[3][3]);

/* The Carrington longitude minus the Stonyhurst longitude (degrees, [0, 360)) for an
 * observer at `dist` metres from the Sun at a Julian date (UTC): sunpy 4.1's L0 with its
 * light-travel corrections (solar.c). */
double solar_carrington_offset(double jd_utc, double dist);

#endif
