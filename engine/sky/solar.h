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

/* The Julian date (TT) of a Julian date (UTC): TAI - UTC from ERFA's eraDat (leap seconds
 * from 1972 on, the drifting offsets of 1960-1971; 10 s before 1960), as astropy. */
double solar_tt(double jd_utc);

/* The Sun-Earth vector (metres, ICRS axes) at a Julian date (UTC), from the ephemeris
 * solar_hgs_motion uses: ERFA's eraEpv00 at the date in TDB, astropy 5.2's builtin
 * ephemeris and so sunpy 4.1's (the same numbers up to rounding). */
void solar_earth(double jd_utc, double e[3]);

/* The Stonyhurst axes at a Julian date (UTC) as the rows of m, in ICRS: m p turns an
 * ICRS-oriented heliocentric vector p into Stonyhurst Cartesian coordinates. */
void solar_hgs_axes(double jd_utc, double m[3][3]);

/* The Carrington longitude minus the Stonyhurst longitude (degrees, [0, 360)) for an
 * observer at `dist` metres from the Sun at a Julian date (UTC): sunpy 4.1's L0 with its
 * light-travel corrections (solar.c). */
double solar_carrington_offset(double jd_utc, double dist);

/* The fused map of coordmap.c between two solar WCSs that are plain (skywcs_plain_get:
 * TAN, CAR or CEA, no distortions) and that solar_convert_trip classes: the whole chain
 * pixel -> native vector -> point in space -> native vector -> pixel as rotation matrices
 * and the projections' algebra (WCS Paper II; Thompson 2006 eq. 11-16 as solar_convert),
 * without wcslib's per-point spherical trigonometry: at most two sines and cosines per
 * point (CAR; one for CEA, none for TAN) on the way in, kept per row and column of an
 * unrotated map, and two arctangents on the way out of CAR (one for CEA, none for
 * TAN).  The same formulas as the general path, up to
 * rounding: 1e-11 pixel for most points, up to 4e-8 near the limb and a pole where the
 * conversion is ill-conditioned (tests/engine/test_skywcs.c, test_solar_fastmap and
 * test_solar_trip, hold it to 1e-7 with the same NaN).  NULL when the pair is
 * not such (then the general path is used), when wcslib's transform of a few pixels of
 * either WCS disagrees with the plain chain by more than 1e-9 pixel, or without memory.
 * It keeps the sines of the columns it met (a CAR or CEA `from` side): one thread at a
 * time, as the rp_coordmap that holds it. */
typedef struct solar_fastmap solar_fastmap;
solar_fastmap *solar_fastmap_new(skywcs *from, skywcs *to, double mu_min);
void solar_fastmap_free(solar_fastmap *m);

/* For k 0-based pixels (px, py) of `from`: what coordmap.c's map_solar with the round
 * trip gives, for the points it can decide.  cls[i] = 1: (qx[i], qy[i]) is the `to`
 * pixel, or NaN (off the disk, off either projection, or a hidden point whose round
 * trip misses by more than a pixel; `strict` as coordmap's rule); cls[i] = 0: the
 * point is near the limb (view cosine within mu_min of 0) or otherwise needs the whole
 * round trip, which the caller does (qx, qy NaN). */
void solar_fastmap_points(solar_fastmap *m, size_t k, const double *px,
                          const double *py, int strict, double *qx, double *qy,
                          unsigned char *cls);

#endif
