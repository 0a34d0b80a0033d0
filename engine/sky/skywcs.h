/* Celestial WCS: FITS headers parsed by wcslib, celestial frames and their conversions. */
#ifndef TESSERA_ENGINE_SKY_SKYWCS_H
#define TESSERA_ENGINE_SKY_SKYWCS_H

#include <stddef.h>

/* Celestial reference frames, named as in docs/DESIGN.md, "Celestial frames" (icrs, fk5, fk4,
 * galactic, ecliptic). */
typedef enum {
    SKY_FRAME_NONE = 0,  /* not celestial (or unknown) */
    SKY_FRAME_ICRS,
    SKY_FRAME_FK5,       /* mean equator and equinox; equinox in Julian years */
    SKY_FRAME_FK4,       /* equinox in Besselian years */
    SKY_FRAME_GALACTIC,
    SKY_FRAME_ECLIPTIC,  /* mean ecliptic and equinox (Julian years, J2000 by default): astropy's
                            BarycentricMeanEcliptic, a rotation of ICRS (IAU 2006, SOFA ecm06) */
    /* Solar frames (Thompson 2006, A&A 449, 791; sunpy.coordinates' names): they never mix
     * with the sky frames above (see skywcs_check_pair). */
    SKY_FRAME_HELIOPROJECTIVE, /* HPLN/HPLT: angles seen by an observer, Thompson sec. 3 */
    SKY_FRAME_STONYHURST,      /* HGLN/HGLT: heliographic Stonyhurst, Thompson sec. 2.1 */
    SKY_FRAME_CARRINGTON       /* CRLN/CRLT: heliographic Carrington, Thompson sec. 2.2 */
} sky_frame;

/* 1 for the solar frames (helioprojective, stonyhurst, carrington). */
int sky_frame_is_solar(sky_frame f);

/* The observer and the Sun of a solar WCS, from its header (see skywcs_parse). */
typedef struct solar_obs {
    int known;          /* 1 when the observer's position (lon, lat, dist) is known */
    double lon, lat;    /* the observer's Stonyhurst longitude and latitude, degrees */
    double dist;        /* the observer's distance from the Sun's centre, metres */
    double rsun;        /* the solar radius: RSUN_REF, else the IAU 695700 km (metres) */
    int has_carr;       /* 1 when carr_off is known */
    double carr_off;    /* Carrington minus Stonyhurst longitude at the observer (degrees):
                         * sunpy 4.1's (solar_carrington_offset(jd, dist)) when the observer
                         * and the date are known, else the header's CRLN_OBS - HGLN_OBS */
    char date[72];      /* DATE-OBS, else DATE-AVG, as written; "" when absent */
    double jd;          /* that date as a Julian date (UTC), 0 when absent or unreadable */
} solar_obs;

/* The default solar radius, IAU 2015 Resolution B3 (nominal R_sun), as sunpy's
 * sunpy.sun.constants.radius: 695700 km. */
#define SOLAR_RSUN_IAU 695700000.0

/* How helioprojective directions become points in space (sunpy 4.1's conventions):
 * SOLAR_SPHERE, the nearest intersection of the line of sight with the sphere of radius
 * rsun (lines of sight that miss the Sun are NaN: off-disk pixels blank); SOLAR_SCREEN,
 * the far intersection with the sphere centred on the observer of the WCS marked with
 * skywcs_set_solar_surface (the image being reprojected) through the Sun's centre
 * (sunpy.coordinates.SphericalScreen(observer) with its default radius). */
enum { SOLAR_SPHERE = 0, SOLAR_SCREEN = 1 };

/* A parsed WCS (one struct wcsprm, wcsset already done) and its celestial frame.
 * Not safe to use from several threads at once: give each thread its own copy. */
typedef struct skywcs skywcs;

/* Parses `nkeys` 80-character cards (concatenated, as fitsimg_info.header) with wcslib's
 * wcspih at full relaxation (WCSHDR_all) and applies wcsfix the way astropy.wcs.WCS does,
 * so that results match astropy.  The frame follows the FITS rules: RADESYS when present;
 * otherwise EQUINOX < 1984 means FK4, EQUINOX >= 1984 FK5, neither ICRS; GLON/GLAT is
 * galactic, ELON/ELAT ecliptic (other RADESYS values, and other axis types, give
 * SKY_FRAME_NONE).
 *
 * The WCS validity rule, the one every path applies (datasets, cutout and mosaic
 * targets, mosaic inputs, the command line) since each parses through here:
 *  - every numeric WCS card (NAXISn, CRPIXn, CRVALn, CDELTn, CROTAn, CDi_j, PCi_j, PVi_m,
 *    LONPOLE, LATPOLE, EQUINOX, alternates' included, the numbers of a DSS plate
 *    solution) holds a finite number in FITS form (a D exponent is allowed), and is a
 *    value card ('= ' in columns 9-10); wcslib would drop the card and use its default
 *    instead.  A DSS plate solution is complete (CNPIX1 ... AMDY3);
 *  - the linear transformation (CDi_j, or PCi_j times CDELTi) is finite and not singular:
 *    no row all zero, and |det| of the matrix with its rows scaled to unit length at
 *    least 1e-10.  An axis no CDi_j card names gets 1 on the diagonal (wcsfix's cdfix, as
 *    astropy), an all-zero CD given in cards does not;
 *  - the projection is one wcslib knows and the celestial axes pair (one longitude, one
 *    latitude, one system, one projection), as wcsset requires; the CTYPE at fault is
 *    named;
 *  - what wcslib derives (CRVAL, CRPIX, CDELT, PC, PV, the inverse matrix) is finite.
 * Bytes outside printable ASCII are read as '?'.
 * The reason names the card ("CDELT1 must be a finite number, got 'NaN'", "CD1_j are all
 * 0: the linear transformation is singular", "CTYPE1 = 'RA---QQQ': 'QQQ' is not a
 * projection wcslib knows"); callers put it after "... has no usable WCS: ".
 *
 * Returns 0 and *out, or TESS_ENOWCS (the header has no WCS keyword at all: `err` says
 * so), TESS_EINVAL (the rule broken, or another wcslib error: `err` gives the reason),
 * TESS_ENOMEM. */
int skywcs_parse(const char *cards, int nkeys, skywcs **out, char *err, size_t errlen);

/* A deep copy (for another thread), or NULL on allocation failure. */
skywcs *skywcs_copy(const skywcs *w);

/* The two celestial axes alone, as a 2-D WCS (longitude first), or NULL when the WCS
 * has no celestial pair (or on allocation failure). */
skywcs *skywcs_celestial(const skywcs *w);

/* skywcs_celestial(w) as it would be had the header that `w` was parsed from (the full
 * WCS of skywcs_parse, not a celestial copy) held CRPIX1 = crpix[0] and CRPIX2 =
 * crpix[1] (1-based FITS reference pixel of pixel axes 1 and 2, whichever world axes they
 * carry; a NaN keeps the parsed value of that axis): the same numbers bit for bit as
 * parsing the edited cards, without the parse (a mosaic band's WCS is its input's with
 * the pixel origin moved).  The caller computes the values as the edited cards hold them
 * (a CRPIX written with 15 significant digits reads back rounded).  NULL when the WCS
 * has no celestial pair, carries a distortion (wcspih ties SIP, TPV and DSS offsets to
 * the header as written: parse the edited cards instead), a value is infinite, wcslib
 * refuses, or memory runs out.  The caller skywcs_frees the result. */
skywcs *skywcs_celestial_crpix(const skywcs *w, const double crpix[2]);

void skywcs_free(skywcs *w);

/* The celestial-image rule, the one place it is decided: an image of `naxis` axes
 * naxes[] (NAXIS1 first) with header `cards` is "a 2-D image with celestial axes" when it
 * has at least 2 axes, every axis past the second has length 1, and its WCS
 * (skywcs_parse) has a celestial pair (skywcs_celestial).  The answer, for callers that
 * word their own refusal: */
typedef enum {
    SKYWCS_IMAGE_OK,            /* *cel is the celestial 2-D WCS (skywcs_free it) */
    SKYWCS_IMAGE_NOT_IMAGE,     /* fewer than 2 axes */
    SKYWCS_IMAGE_NOT_2D,        /* axis `axis` (0-based, >= 2) is longer than 1 */
    SKYWCS_IMAGE_BAD_WCS,       /* skywcs_parse failed with `rc`, `err` says why */
    SKYWCS_IMAGE_NO_CELESTIAL   /* a WCS without a celestial pair (or no memory for it) */
} skywcs_image_why;

typedef struct skywcs_image_check {
    skywcs_image_why why;
    int rc;                     /* BAD_WCS: skywcs_parse's code */
    int naxis;                  /* the image's number of axes */
    int axis;                   /* NOT_2D: the first axis past the second longer than 1 */
    long axis_len;              /* NOT_2D: its length */
    char err[256];              /* BAD_WCS: skywcs_parse's reason */
} skywcs_image_check;

/* Applies the rule; returns the celestial 2-D WCS (caller frees) or NULL with *chk
 * saying which part failed. */
skywcs *skywcs_celestial_image(const char *cards, int nkeys, int naxis, const long *naxes,
                               skywcs_image_check *chk);

int skywcs_naxis(const skywcs *w);
int skywcs_has_celestial(const skywcs *w);   /* 1 when a longitude/latitude pair exists */
/* The observer and Sun of a WCS in a solar frame (NULL for sky frames). */
const solar_obs *skywcs_solar(const skywcs *w);
/* Marks `w` (the image being reprojected) for SOLAR_SCREEN or SOLAR_SPHERE (the
 * default); copies keep the mark. */
void skywcs_set_solar_surface(skywcs *w, int surface);
sky_frame skywcs_frame(const skywcs *w, double *equinox);  /* equinox may be NULL */

/* A summary for the datasets API.  Axis i (0-based) is FITS axis i+1; crpix 1-based as
 * in FITS; angles in degrees.  `has_cd` says whether the header gave a CD matrix (then
 * `cd` holds it, row-major naxis x naxis) or CDELT (then `cdelt`). */
#define SKYWCS_MAXDIM 4
typedef struct skywcs_summary {
    int naxis;
    char ctype[SKYWCS_MAXDIM][72];
    char cunit[SKYWCS_MAXDIM][72];
    double crval[SKYWCS_MAXDIM];
    double crpix[SKYWCS_MAXDIM];
    double cdelt[SKYWCS_MAXDIM];
    int has_cd;
    double cd[SKYWCS_MAXDIM * SKYWCS_MAXDIM];
    sky_frame frame;
    double equinox;     /* 0 when not applicable */
} skywcs_summary;
void skywcs_describe(const skywcs *w, skywcs_summary *s);

/* The third axis of a WCS (a cube's spectral or other z axis): world coordinate 3 at the
 * n pixels (x, y, k), k = 0..n-1 (0-based pixels, centres on integers; axes beyond the
 * third at their first pixel), into world[0..n) in the axis's unit (NaN where the
 * transform fails), and its CTYPE3 and CUNIT3 as wcslib holds them after the fixes of
 * skywcs_parse (cut to 70 characters; trailing blanks trimmed from ctype).  Returns 0,
 * TESS_EINVAL (fewer than 3 axes, or no CTYPE3: ctype and cunit then ""), TESS_ENOMEM. */
int skywcs_zaxis(skywcs *w, double x, double y, long n, double *world, char *ctype,
                 size_t ctypelen, char *cunit, size_t cunitlen);

/* The vacuum wavelength (m) of value v of a spectral axis of type `ctype` (its first four
 * letters; FITS WCS Paper III: FREQ Hz, WAVE m, WAVN 1/m, ENER J; the velocities
 * VOPT/VELO m/s and ZOPT with the rest wavelength c / rest_hz, VRAD m/s with the rest
 * frequency), NaN when the axis is not one of these, v is out of its domain, or the axis
 * needs a rest value it lacks (rest_hz <= 0).  skywcs_spectral_needs_rest: 1 for the
 * velocity axes. */
double skywcs_spectral_wavelength(const char *ctype, double v, double rest_hz);
int skywcs_spectral_needs_rest(const char *ctype);

/* Pixel <-> world for a 2-D celestial WCS (see skywcs_celestial).  Pixels are 0-based
 * (x = column, y = row, pixel centres at integers); world coordinates are (lon, lat) in
 * degrees in the WCS's own frame, longitude in [0, 360) (as astropy's Longitude).  Points
 * with no valid transform (off the projection) or non-finite input become NaN.  Returns
 * 0, or TESS_EINVAL when the WCS is not 2-D celestial, or TESS_ENOMEM. */
int skywcs_pix2sky(skywcs *w, size_t n, const double *x, const double *y, double *lon, double *lat);
int skywcs_sky2pix(skywcs *w, size_t n, const double *lon, const double *lat, double *x, double *y);

/* Converts n positions in place from one frame to another (degrees).  ICRS<->FK5 J2000
 * by the frame-bias matrix of USNO Circular 179 (as astropy), FK5 J2000 <-> galactic by
 * astropy's J2000 north galactic pole (192.8594812065348, 27.12825118085622) and
 * longitude of the NCP 122.9319185680026, FK5 equinox changes by IAU 2006 precession
 * (astropy's precession_matrix_Capitaine), FK4 (Besselian equinox, obstime = equinox)
 * through astropy's FK4NoETerms with E-terms and the Standish B1950->J2000 matrix;
 * the paths and intermediate frames are astropy's, so results agree with
 * SkyCoord.transform_to to ~1e-13 degree.  Longitudes come back in [0, 360).  Cannot
 * fail; identical frames, or SKY_FRAME_NONE on either side, are a no-op.  A solar frame
 * on either side (they need observers: skywcs_convert) leaves identical frames alone and
 * makes every other conversion NaN. */
void sky_convert(sky_frame from, double eq_from, sky_frame to, double eq_to,
                 size_t n, double *lon, double *lat);

/* The rotation from ICRS to the mean ecliptic and equinox `d_equinox` days (TT) from
 * J2000 (astropy's BarycentricMeanEcliptic and HeliocentricMeanEcliptic, ERFA eraEcm06:
 * R1(eps_A) times the IAU 2006 bias-precession matrix): ecliptic = m icrs. */
void sky_icrs_to_ecliptic(double d_equinox, double m[3][3]);

/* Converts n positions in place from the frame of `from` to the frame of `to` (degrees):
 * sky_convert between sky frames, solar_convert between solar frames (with the
 * observers and the surface model the two WCSs carry).  A sky and a solar frame do not
 * mix: the positions become NaN (skywcs_check_pair refuses such pairs first). */
void skywcs_convert(const skywcs *from, const skywcs *to, size_t n, double *lon, double *lat);

/* skywcs_convert, which for a pair of solar WCSs on the solar sphere (neither marked
 * SOLAR_SCREEN) also classes each point's round trip as solar_convert_trip does (cls,
 * with blon, blat the `from` positions on entry).  Returns 1, or 0 with every class 0
 * when the pair gives no classes (sky frames, a screen, no helioprojective side, solar
 * radii that differ, an identity). */
int skywcs_convert_trip(const skywcs *from, const skywcs *to, double mu_min, size_t n,
                        double *lon, double *lat, double *blon, double *blat,
                        unsigned char *cls);

/* Converts n positions between solar frames, in place (degrees).  Through
 * the heliographic Stonyhurst Cartesian frame of Thompson (2006): helioprojective
 * (observer `of`) -> heliocentric Cartesian (Thompson eq. 15 for the line of sight,
 * the distance from the surface model) -> Stonyhurst (Thompson eq. 11-12, the rotation
 * by the observer's B0 and longitude); Carrington longitude = Stonyhurst longitude +
 * carr_off; heliographic positions lie on the sphere of radius rsun (sunpy's rule for
 * heliographic coordinates without a distance); to helioprojective by Thompson eq. 16.
 * Identical frames with the same observer (helioprojective), the same carr_off
 * (Carrington), or both Stonyhurst, at one time are the identity, as in sunpy.  When
 * both observers have dates (jd) and they differ, the point found at `of`'s time is
 * carried to `ot`'s by solar_hgs_motion (fixed in inertial space, as sunpy 4.1 does
 * without differential rotation); a side without a date is taken at the other's.  `screen` is the
 * observer the screen is centred on (surface SOLAR_SCREEN; NULL means that of `of`).
 * Points that do not convert (off the disk under SOLAR_SPHERE, an unknown observer)
 * become NaN.  Longitudes come back in [0, 360). */
void solar_convert(sky_frame from, const solar_obs *of, sky_frame to, const solar_obs *ot,
                   int surface, const solar_obs *screen, size_t n, double *lon, double *lat);

/* The Julian date (UTC) of an ISO 8601 date as FITS writes DATE-OBS: "YYYY-MM-DD", or
 * with "Thh:mm:ss[.sss]" and an optional "Z".  0, or -1 when `s` is not such a date (a day
 * past its month's end included: ERFA's eraCal2jd). */
int solar_parse_date(const char *s, double *jd);

/* How the heliographic Stonyhurst frame moves between two times (Julian dates, UTC), as
 * sunpy 4.1 transforms HGS(t1) to HGS(t2) (through HCRS at t2: a point fixed in the
 * barycentric inertial frame): Stonyhurst Cartesian coordinates at jd2 (metres) are
 * r p + t for those p at jd1.  r turns about the solar rotation axis by minus the change
 * of the Earth's longitude in the solar equator frame (about 0.99 degree a day); t is the
 * Sun's barycentric displacement (about 13 m/s).  The Earth's heliocentric and the
 * Sun's barycentric positions from ERFA's eraEpv00 at the dates in TDB, as astropy's
 * get_body_barycentric (solar.c, epv_at), and the IAU solar rotation axis (RA 286.13,
 * Dec 63.87 degrees; Archinal et al. 2011).  Against sunpy 4.1 the rotation angle agrees
 * to 1.2e-10 degree over 14 minutes to 10 days (tests/engine/test_skywcs.c,
 * test_solar_motion). */
void solar_hgs_motion(double jd1, double jd2, double r[3][3], double t[3]);

/* The projections skywcs_plain_get recognises (WCS Paper II, Calabretta & Greisen 2002,
 * A&A 395, 1077: TAN sec. 5.1.3, CAR sec. 5.2.3, CEA sec. 5.2.2). */
enum { SKYWCS_PLAIN_TAN = 1, SKYWCS_PLAIN_CAR = 2, SKYWCS_PLAIN_CEA = 3 };

/* The pixel-to-world chain of a 2-D WCS whose longitude is FITS axis 1 and latitude
 * axis 2, with no distortions, one of the projections above at its default fiducial
 * point and r0 = 180/pi degrees (solar.c's fused map computes the chain from these):
 * intermediate world (x, y) in degrees = piximg (p - crpix) for 1-based pixels p; the
 * native unit vector from (x, y) by the projection; the celestial unit vector
 * (cos lat cos lon, cos lat sin lon, sin lat) = n2c times the native one (Paper II
 * eq. 2 as a rotation matrix, from wcslib's Euler angles). */
typedef struct skywcs_plain {
    int proj;               /* SKYWCS_PLAIN_* */
    double crpix[2];        /* 1-based */
    double piximg[2][2];    /* degrees per pixel: CDELT times PC (or CD), row-major */
    double imgpix[2][2];    /* its inverse */
    double lambda;          /* CEA: PV2_1, its lambda (0 < lambda <= 1) */
    double n2c[3][3];       /* native to celestial unit vectors (orthogonal) */
} skywcs_plain;

/* Fills *p and returns 1 when `w` is such a plain WCS, else returns 0. */
int skywcs_plain_get(const skywcs *w, skywcs_plain *p);

/* Checks that `in` and `out` can be reprojected one onto the other: both have a celestial
 * pair in a supported frame, both sky frames or both solar frames, and a solar pair has
 * what its conversion needs (the observer of a helioprojective side, the Carrington
 * offset of a Carrington side, unless the conversion is the identity).  Returns 0, or
 * TESS_EINVAL with `err` naming the side at fault ("input WCS has no celestial axes",
 * "output WCS has an unsupported celestial frame", "input WCS is in the solar frame
 * helioprojective, output WCS in the sky frame icrs: solar and sky frames do not mix").
 * Cannot fail otherwise. */
int skywcs_check_pair(const skywcs *in, const skywcs *out, char *err, size_t errlen);

const char *sky_frame_name(sky_frame f);          /* "icrs", "fk5", ... "none" */
const char *sky_frame_axes(sky_frame f);          /* the CTYPE prefixes: "HPLN/HPLT", ... */
int sky_frame_parse(const char *s, sky_frame *f); /* 0 or TESS_EINVAL */

/* PV2_0 .. PV2_29: the projection parameters a cutout header may carry (wcslib's ZPN
 * takes up to 30 coefficients). */
#define SKYWCS_CUTOUT_PVN 30

/* Builds the header of a hips2fits-style cutout: w x h pixels centred on (lon, lat) of
 * `frame` (icrs, galactic; also fk5 J2000, fk4 B1950, ecliptic J2000), `fov` degrees
 * along the larger side (square pixels of
 * fov/max(w,h)), projection code `proj` (three letters: TAN, SIN, CAR, AIT, ...),
 * rotated by `rotation` degrees (east of north, i.e. PC = [[cos, -sin], [sin, cos]] with
 * CDELT1 < 0), CRPIX at the image centre (w/2 + 0.5, h/2 + 0.5).  `pv` (NULL: none) holds
 * SKYWCS_CUTOUT_PVN values of PV2_0 .. PV2_29, NaN where not given: each other one is
 * written as its card.  Projections whose definition needs a parameter get a default
 * when PV2_1 is not given: the conics COE, COD, COO, COP take theta_a = 45 degrees
 * (their cone meets the sphere at native latitude 45, through the centre), BON takes
 * theta_1 = 45, ZPN takes PV2_1 = 1 (with the other coefficients 0, the zenithal
 * equidistant projection ARC).  *cards is malloc'd
 * (80-character cards, concatenated, NUL-terminated) and *nkeys set.  Returns 0 or
 * TESS_EINVAL (unknown projection, non-finite or out-of-range values: `err` names which)
 * / TESS_ENOMEM. */
int skywcs_cutout_header(double lon, double lat, double fov, long w, long h, const char *proj,
                         sky_frame frame, double rotation, const double *pv, char **cards,
                         int *nkeys, char *err, size_t errlen);

/* skywcs_cutout_header for every frame, the solar ones included: for those, `sol` (the
 * observer and Sun of the image the cutout is taken from; may be NULL) is written as
 * RSUN_REF, HGLN_OBS, HGLT_OBS, DSUN_OBS, CRLN_OBS, CRLT_OBS and DATE-OBS cards, and
 * lon, lat and fov are in degrees (CUNIT 'deg').  skywcs_cutout_header itself refuses
 * solar frames (TESS_EINVAL: they need their observer). */
int skywcs_cutout_header_solar(double lon, double lat, double fov, long w, long h,
                               const char *proj, sky_frame frame, const solar_obs *sol,
                               double rotation, const double *pv, char **cards, int *nkeys,
                               char *err, size_t errlen);

#endif
