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

/* solar_convert on the solar sphere (SOLAR_SPHERE) of n points, which also tells, in
 * cls[i], what converting point i back (`to` to `from`, as a round trip does) would
 * give: 1 when every helioprojective side's observer sees the point at a view cosine
 * (surface normal against the line of sight) of at least mu_min: it comes back to its
 * own position, up to rounding; 2 when the observers are at one time and that of a
 * helioprojective `to` sees the point hidden, at a view cosine of at most -mu_min: the
 * line of sight ends on the nearer side, and (blon[i], blat[i]) is given that point's
 * `from` position; 0 when only converting back tells (near the limb, off the disk).
 * blon, blat (the `from` positions on entry) are left alone for classes 0 and 1.
 * Returns 1, or 0 with every class 0 when the pair gives none (no helioprojective side,
 * solar radii that differ, an identity, a pair that does not convert). */
int solar_convert_trip(sky_frame from, const solar_obs *of, sky_frame to, const solar_obs *ot,
                       double mu_min, size_t n, double *lon, double *lat, double *blon,
                       double *blat, unsigned char *cls);

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
