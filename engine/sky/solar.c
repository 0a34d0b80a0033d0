/* Solar frames: helioprojective, heliographic Stonyhurst and Carrington, and the
 * conversions between them through points in space (Thompson 2006, A&A 449, 791). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <erfa.h>

#include "engine/sky/solar.h"

#define DEG2RAD (M_PI / 180.0)
#define RAD2DEG (180.0 / M_PI)

int sky_frame_is_solar(sky_frame f)
{
    return f == SKY_FRAME_HELIOPROJECTIVE || f == SKY_FRAME_STONYHURST ||
           f == SKY_FRAME_CARRINGTON;
}

/* The heliocentric Cartesian axes of an observer, in Stonyhurst Cartesian coordinates
 * (X towards Stonyhurst longitude 0 on the equator, Z the solar north pole): Thompson
 * (2006) eq. 11 written as x = e_x . P, y = e_y . P, z = e_z . P, with e_z towards the
 * observer, e_y the projection of solar north, e_x = e_y x e_z (west). */
typedef struct hcc_axes {
    double ex[3], ey[3], ez[3];
    double o[3];        /* the observer's position (metres) */
} hcc_axes;

static void observer_axes(const solar_obs *ob, hcc_axes *a)
{
    double l = ob->lon * DEG2RAD, b = ob->lat * DEG2RAD;
    double cl = cos(l), sl = sin(l), cb = cos(b), sb = sin(b);
    a->ex[0] = -sl;
    a->ex[1] = cl;
    a->ex[2] = 0.0;
    a->ey[0] = -sb * cl;
    a->ey[1] = -sb * sl;
    a->ey[2] = cb;
    a->ez[0] = cb * cl;
    a->ez[1] = cb * sl;
    a->ez[2] = sb;
    for (int k = 0; k < 3; k++)
        a->o[k] = ob->dist * a->ez[k];
}

static double dot3(const double *a, const double *b)
{
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

/* Longitude in [0, 360). */
static double wrap360(double a)
{
    if (a >= 0.0 && a < 360.0)
        return a;   /* what fmod gives, without its cost */
    a = fmod(a, 360.0);
    if (a < 0.0)
        a += 360.0;
    return a >= 360.0 ? 0.0 : a;
}

static int same_observer(const solar_obs *a, const solar_obs *b)
{
    if (!a->known && !b->known)
        return 1;
    return a->known && b->known && a->lon == b->lon && a->lat == b->lat && a->dist == b->dist;
}

/* Whether the Stonyhurst frames of `a` and `b` differ: both dates known and unequal
 * (sunpy's obstimes; a side without a date is taken at the other's time). */
static int solar_moves(const solar_obs *a, const solar_obs *b)
{
    return a->jd > 0.0 && b->jd > 0.0 && a->jd != b->jd;
}

/* p <- r p + t. */
static void move3(const double r[3][3], const double *t, double *p)
{
    double q[3];
    for (int k = 0; k < 3; k++)
        q[k] = r[k][0] * p[0] + r[k][1] * p[1] + r[k][2] * p[2] + t[k];
    p[0] = q[0];
    p[1] = q[1];
    p[2] = q[2];
}

/* Whether converting `from` to `to` is the identity (sunpy's self-transforms at one
 * obstime: helioprojective with the same observer, Stonyhurst, Carrington with the same
 * Carrington offset). */
static int identity(sky_frame from, const solar_obs *of, sky_frame to, const solar_obs *ot)
{
    if (from != to || solar_moves(of, ot))
        return 0;
    if (from == SKY_FRAME_HELIOPROJECTIVE)
        return same_observer(of, ot);
    if (from == SKY_FRAME_CARRINGTON)
        return of->has_carr == ot->has_carr && (!of->has_carr || of->carr_off == ot->carr_off);
    return 1;
}

/* The point in space (Stonyhurst Cartesian, metres, at `of`'s time) of the position
 * (lon, lat) in degrees of frame `from` (observer `of`): on the line of sight of a
 * helioprojective direction (Thompson eq. 15 with unit distance) where it meets the
 * surface model (`fa` the observer's axes; for SOLAR_SCREEN, w = o - c and rs2 = |c|^2
 * of the screen centred on c), or on the sphere of radius rsun for a heliographic one.
 * Returns 1, or 0 when there is no such point (not finite, off the disk). */
static int space_point(sky_frame from, const solar_obs *of, int surface, const hcc_axes *fa,
                       const double *w, double rs2, double lon, double lat, double p[3])
{
    if (!isfinite(lon) || !isfinite(lat))
        return 0;
    if (from == SKY_FRAME_HELIOPROJECTIVE) {
        double tx = lon * DEG2RAD, ty = lat * DEG2RAD;
        double hx = cos(ty) * sin(tx), hy = sin(ty), hz = -cos(ty) * cos(tx);
        double u[3];
        for (int k = 0; k < 3; k++)
            u[k] = hx * fa->ex[k] + hy * fa->ey[k] + hz * fa->ez[k];
        double d;
        if (surface == SOLAR_SCREEN) {
            /* |w + d u| = |c| with w = o - c; the far root. */
            double b = dot3(w, u), disc = b * b - dot3(w, w) + rs2;
            d = disc >= 0.0 ? -b + sqrt(disc) : NAN;
        } else {
            /* |o + d u| = rsun; the near root (the visible surface). */
            double b = dot3(fa->o, u), disc = b * b - of->dist * of->dist + of->rsun * of->rsun;
            d = disc >= 0.0 ? -b - sqrt(disc) : NAN;
        }
        if (!(d >= 0.0))
            return 0;
        for (int k = 0; k < 3; k++)
            p[k] = fa->o[k] + d * u[k];
    } else {
        double l = lon - (from == SKY_FRAME_CARRINGTON ? of->carr_off : 0.0);
        double cb = cos(lat * DEG2RAD);
        p[0] = of->rsun * cb * cos(l * DEG2RAD);
        p[1] = of->rsun * cb * sin(l * DEG2RAD);
        p[2] = of->rsun * sin(lat * DEG2RAD);
    }
    return 1;
}

/* Whether both frames are solar and have what converting between them needs (the
 * observer of a helioprojective side, the Carrington offset of a Carrington side). */
static int convertible(sky_frame from, const solar_obs *of, sky_frame to, const solar_obs *ot)
{
    return sky_frame_is_solar(from) && sky_frame_is_solar(to) &&
           (from != SKY_FRAME_HELIOPROJECTIVE || of->known) &&
           (to != SKY_FRAME_HELIOPROJECTIVE || ot->known) &&
           (from != SKY_FRAME_CARRINGTON || of->has_carr) &&
           (to != SKY_FRAME_CARRINGTON || ot->has_carr);
}

/* The cosine of the angle between the outward normal at p (on the sphere) and the
 * direction from p to the observer at o: positive where the observer sees p. */
static double view_cosine(const double *p, const double *o)
{
    double v[3] = { o[0] - p[0], o[1] - p[1], o[2] - p[2] };
    return dot3(v, p) / sqrt(dot3(v, v) * dot3(p, p));
}

/* The position (degrees) in frame f (observer o, its axes a when helioprojective) of the
 * point p in space (Stonyhurst Cartesian, metres): Thompson eq. 16 for helioprojective,
 * the direction from the Sun's centre for heliographic (Carrington: plus o's offset). */
static void frame_angles(sky_frame f, const solar_obs *o, const hcc_axes *a, const double *p,
                         double *lon, double *lat)
{
    if (f == SKY_FRAME_HELIOPROJECTIVE) {
        /* Thompson eq. 16: theta_x = arg(D - z, x), theta_y = arcsin(y / d). */
        double v[3] = { p[0] - a->o[0], p[1] - a->o[1], p[2] - a->o[2] };
        double x = dot3(v, a->ex), y = dot3(v, a->ey), mz = -dot3(v, a->ez);
        double dn = sqrt(dot3(v, v));
        *lon = wrap360(atan2(x, mz) * RAD2DEG);
        *lat = asin(y / dn) * RAD2DEG;
    } else {
        double l = atan2(p[1], p[0]) * RAD2DEG;
        if (f == SKY_FRAME_CARRINGTON)
            l += o->carr_off;
        *lon = wrap360(l);
        *lat = atan2(p[2], hypot(p[0], p[1])) * RAD2DEG;
    }
}

/* What the round trip of point p (at `of`'s time, before the motion; pm after it) would
 * give, for solar_convert_trip: 1 when every helioprojective side's observer sees it at
 * a view cosine of at least mu_min (the trip brings it back to itself); 2 when, at one
 * time, the observer of a helioprojective `to` sees it hidden at a view cosine of at
 * most -mu_min, the trip then ending on the nearer intersection of the same line of
 * sight, whose `from` position goes to (*blon, *blat); 0 otherwise. */
static unsigned char trip_class(sky_frame from, const solar_obs *of, const hcc_axes *fa,
                                sky_frame to, const hcc_axes *ta, int moving, double mu_min,
                                const double *p, const double *pm, double *blon, double *blat)
{
    int hpf = from == SKY_FRAME_HELIOPROJECTIVE, hpt = to == SKY_FRAME_HELIOPROJECTIVE;
    double muf = hpf ? view_cosine(p, fa->o) : 1.0, mut = hpt ? view_cosine(pm, ta->o) : 1.0;
    if (muf >= mu_min && mut >= mu_min)
        return 1;
    if (moving || !hpt || !(mut <= -mu_min))
        return 0;
    /* The line o + d u through p meets the sphere where d^2 + 2 d (o.u) + |o|^2 - r^2 = 0:
     * the two roots add up to -2 o.u. */
    double u[3] = { p[0] - ta->o[0], p[1] - ta->o[1], p[2] - ta->o[2] };
    double dp = sqrt(dot3(u, u));
    for (int k = 0; k < 3; k++)
        u[k] /= dp;
    double dn = -2.0 * dot3(ta->o, u) - dp, q[3];
    for (int k = 0; k < 3; k++)
        q[k] = ta->o[k] + dn * u[k];
    frame_angles(from, of, fa, q, blon, blat);
    return 2;
}

/* solar_convert, and with `cls` set (surface SOLAR_SPHERE) the class of each point's
 * round trip (trip_class; blon, blat in and out). */
static void convert(sky_frame from, const solar_obs *of, sky_frame to, const solar_obs *ot,
                    int surface, const solar_obs *screen, size_t n, double *lon, double *lat,
                    double mu_min, double *blon, double *blat, unsigned char *cls)
{
    if (cls)
        for (size_t i = 0; i < n; i++)
            cls[i] = 0;
    if (identity(from, of, to, ot)) {
        for (size_t i = 0; i < n; i++)
            lon[i] = wrap360(lon[i]);
        return;
    }
    int ok = convertible(from, of, to, ot);
    if (surface == SOLAR_SCREEN && !screen)
        screen = of;
    if (surface == SOLAR_SCREEN && from == SKY_FRAME_HELIOPROJECTIVE && !screen->known)
        ok = 0;
    if (!ok) {
        for (size_t i = 0; i < n; i++)
            lon[i] = lat[i] = NAN;
        return;
    }
    hcc_axes fa, ta;
    if (from == SKY_FRAME_HELIOPROJECTIVE)
        observer_axes(of, &fa);
    if (to == SKY_FRAME_HELIOPROJECTIVE)
        observer_axes(ot, &ta);
    /* The screen: centre c, radius |c| (through the Sun's centre). */
    double c[3] = { 0.0, 0.0, 0.0 }, w[3] = { 0.0, 0.0, 0.0 }, rs2 = 0.0;
    if (surface == SOLAR_SCREEN && from == SKY_FRAME_HELIOPROJECTIVE) {
        hcc_axes sa;
        observer_axes(screen, &sa);
        if (solar_moves(screen, of)) {
            /* The screen's centre, given at its observer's time, at that of `of`. */
            double sr[3][3], st[3];
            solar_hgs_motion(screen->jd, of->jd, sr, st);
            move3(sr, st, sa.o);
        }
        for (int k = 0; k < 3; k++) {
            c[k] = sa.o[k];
            w[k] = fa.o[k] - c[k];
        }
        rs2 = dot3(c, c);
    }
    /* Between two times: Stonyhurst coordinates at `of`'s date to those at `ot`'s. */
    int moving = solar_moves(of, ot);
    double mr[3][3], mt[3];
    if (moving)
        solar_hgs_motion(of->jd, ot->jd, mr, mt);
    for (size_t i = 0; i < n; i++) {
        double p[3];
        if (!space_point(from, of, surface, &fa, w, rs2, lon[i], lat[i], p)) {
            lon[i] = lat[i] = NAN;
            continue;
        }
        double p0[3] = { p[0], p[1], p[2] };
        if (moving)
            move3(mr, mt, p);
        frame_angles(to, ot, &ta, p, &lon[i], &lat[i]);
        if (cls)
            cls[i] = trip_class(from, of, &fa, to, &ta, moving, mu_min, p0, p, &blon[i],
                                &blat[i]);
    }
}

void solar_convert(sky_frame from, const solar_obs *of, sky_frame to, const solar_obs *ot,
                   int surface, const solar_obs *screen, size_t n, double *lon, double *lat)
{
    convert(from, of, to, ot, surface, screen, n, lon, lat, 0.0, NULL, NULL, NULL);
}

int solar_convert_trip(sky_frame from, const solar_obs *of, sky_frame to, const solar_obs *ot,
                       double mu_min, size_t n, double *lon, double *lat, double *blon,
                       double *blat, unsigned char *cls)
{
    /* The way back meets the sphere of `ot`'s radius: the classes need the same sphere
     * on both sides. */
    int on = (from == SKY_FRAME_HELIOPROJECTIVE || to == SKY_FRAME_HELIOPROJECTIVE) &&
             of->rsun == ot->rsun && !identity(from, of, to, ot) &&
             convertible(from, of, to, ot);
    convert(from, of, to, ot, SOLAR_SPHERE, NULL, n, lon, lat, mu_min, blon, blat,
            on ? cls : NULL);
    if (!on)
        for (size_t i = 0; i < n; i++)
            cls[i] = 0;
    return on;
}

/* ---- the motion of the Stonyhurst frame between two times ---------------------------- */

int solar_parse_date(const char *s, double *jd)
{
    int y, mo, d, h = 0, mi = 0, n = 0;
    double sec = 0.0;
    if (!s || sscanf(s, "%4d-%2d-%2d%n", &y, &mo, &d, &n) != 3 || n != 10)
        return -1;
    s += n;
    if (*s == 'T' || *s == ' ') {
        int m = 0;
        if (sscanf(s + 1, "%2d:%2d:%lf%n", &h, &mi, &sec, &m) != 3)
            return -1;
        s += 1 + m;
    }
    if (*s == 'Z')
        s++;
    if (*s || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 ||
        !(sec >= 0.0 && sec < 61.0))
        return -1;
    double djm0, djm;
    if (eraCal2jd(y, mo, d, &djm0, &djm) != 0)
        return -1;   /* ERFA's Gregorian calendar: also a day past the month's end */
    *jd = djm0 + djm + (h + (mi + sec / 60.0) / 60.0) / 24.0;
    return 0;
}

#define SOLAR_AU 149597870700.0

/* The Earth's heliocentric position and the Sun's barycentric one (au, ICRS axes) at a
 * Julian date (UTC), as astropy 5.2's get_body_barycentric with its builtin ephemeris
 * (what sunpy 4.1 uses): ERFA's eraEpv00 (the Earth's series of SOFA iauEpv00, fitted to
 * DE405; a few km for 1900-2100) at the date in TDB, eraEpv00's barycentric Earth less
 * its heliocentric one for the Sun.  TDB = TT + eraDtdb at the geocentre, as astropy's
 * Time without a location. */
static void epv_at(double jd_utc, double earth[3], double sun[3])
{
    double tt = solar_tt(jd_utc), frac = jd_utc - floor(jd_utc);
    double tdb_tt = eraDtdb(tt, 0.0, frac, 0.0, 0.0, 0.0);
    double pvh[2][3], pvb[2][3];
    (void)eraEpv00(jd_utc, (tt - jd_utc) + tdb_tt / 86400.0, pvh, pvb);
    for (int k = 0; k < 3; k++) {
        earth[k] = pvh[0][k];
        if (sun)
            sun[k] = pvb[0][k] - pvh[0][k];
    }
}

/* The rotation from ICRS to the Stonyhurst frame at a Julian date (UTC) (rows: the
 * Stonyhurst axes in ICRS) and the Sun's barycentric position (metres, ICRS), as sunpy
 * 4.1's _affine_params_hcrs_to_hgs: the Z axis the solar rotation axis of the IAU (RA
 * 286.13, Dec 63.87 degrees: Archinal et al. 2011, Celest. Mech. Dyn. Astr. 109, 101,
 * Table 1, the values sunpy.sun.constants alpha_0 and delta_0 hold), the X axis the
 * projection of the Sun-Earth vector on the solar equator (Thompson 2006 sec. 2.1), the
 * Earth and the Sun of epv_at. */
static void hgs_basis(double jd_utc, double m[3][3], double *sun)
{
    double earth[3];
    epv_at(jd_utc, earth, sun);
    double ra = 286.13 * DEG2RAD, de = 63.87 * DEG2RAD;
    double z[3] = { cos(de) * cos(ra), cos(de) * sin(ra), sin(de) };
    double ez = dot3(earth, z), x[3];
    for (int k = 0; k < 3; k++)
        x[k] = earth[k] - ez * z[k];
    double nx = sqrt(dot3(x, x));
    for (int k = 0; k < 3; k++)
        x[k] /= nx;
    double y[3] = { z[1] * x[2] - z[2] * x[1], z[2] * x[0] - z[0] * x[2],
                    z[0] * x[1] - z[1] * x[0] };
    for (int k = 0; k < 3; k++) {
        m[0][k] = x[k];
        m[1][k] = y[k];
        m[2][k] = z[k];
    }
    if (sun)
        for (int k = 0; k < 3; k++)
            sun[k] *= SOLAR_AU;
}

void solar_hgs_motion(double jd1, double jd2, double r[3][3], double t[3])
{
    double m1[3][3], m2[3][3], s1[3], s2[3];
    hgs_basis(jd1, m1, s1);
    hgs_basis(jd2, m2, s2);
    /* p2 = M2 (M1^T p1 - (S2 - S1)): the point stays where it is in the barycentric
     * inertial frame (sunpy 4.1's HGS(t1) -> HCRS(t2) -> HGS(t2)). */
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++)
            r[i][j] = m2[i][0] * m1[j][0] + m2[i][1] * m1[j][1] + m2[i][2] * m1[j][2];
        t[i] = -(m2[i][0] * (s2[0] - s1[0]) + m2[i][1] * (s2[1] - s1[1]) +
                 m2[i][2] * (s2[2] - s1[2]));
    }
}

/* ---- the Earth, the Stonyhurst axes and the Carrington longitude of a date ----------- */

/* TT = UTC + (TAI - UTC) + 32.184 s, TAI - UTC from ERFA's eraDat (the leap seconds of
 * IERS Bulletin C from 1972, the drifting offsets of 1960-1971) on the calendar date of
 * jd_utc, as astropy's Time.tt.  Before 1960, where UTC is not defined, the 1972 step
 * (10 s). */
double solar_tt(double jd_utc)
{
    int y, mo, d;
    double fd, dat;
    if (eraJd2cal(jd_utc, 0.0, &y, &mo, &d, &fd) != 0 || eraDat(y, mo, d, fd, &dat) < 0)
        dat = 10.0;
    return jd_utc + (dat + 32.184) / 86400.0;
}

void solar_earth(double jd_utc, double e[3])
{
    epv_at(jd_utc, e, NULL);
    for (int k = 0; k < 3; k++)
        e[k] *= SOLAR_AU;
}

void solar_hgs_axes(double jd_utc, double m[3][3])
{
    hgs_basis(jd_utc, m, NULL);
}

/* sunpy 4.1's sunpy.coordinates.sun.L0 (light_travel_time_correction and nearest_point
 * on, aberration_correction off) and its HGS -> HGC rotation
 * (transformations._rotation_matrix_hgs_to_hgc), after the IAU rotation elements of the
 * Sun (Archinal et al. 2011; Seidelmann et al. 2007): the prime meridian is W_0 = 84.176
 * degrees east of the ascending node of the solar equator on the ICRF equator (the node
 * at RA alpha_0 + 90 degrees) at J2000.0 TT and turns at the sidereal rate 14.1844 degrees
 * a day.  L0 is the longitude of the Earth, measured in the solar equator from the node,
 * less the meridian's at the time the light now reaching the Earth left the Sun's nearest
 * point (antedated by (|E| - R_sun) / c, R_sun the IAU 695700 km; Urban & Kaplan 2007).
 * An observer at distance d sees the Sun as it was (d - |E|) / c later than the Earth
 * does: the offset grows by that time at the sidereal rate. */
double solar_carrington_offset(double jd_utc, double dist)
{
    const double c = 299792458.0, rate = 14.1844, w0 = 84.176;
    double e[3];
    solar_earth(jd_utc, e);
    double ra = 286.13 * DEG2RAD, de = 63.87 * DEG2RAD;
    double p[3] = { cos(de) * cos(ra), cos(de) * sin(ra), sin(de) };
    double n[3] = { cos(ra + M_PI / 2.0), sin(ra + M_PI / 2.0), 0.0 };
    double nxe[3] = { n[1] * e[2] - n[2] * e[1], n[2] * e[0] - n[0] * e[2],
                      n[0] * e[1] - n[1] * e[0] };
    double lon_earth = atan2(dot3(p, nxe), dot3(n, e)) * RAD2DEG;
    double de_sun = sqrt(dot3(e, e));
    double ante = solar_tt(jd_utc) - (de_sun - SOLAR_RSUN_IAU) / c / 86400.0;
    double meridian = w0 + (ante - 2451545.0) * rate;
    double dlon = (dist - de_sun) / c / 86400.0 * rate;
    return wrap360(lon_earth - meridian + dlon);
}

/* ---- the fused map between plain solar WCSs ------------------------------------------ */

/* One side of the fused map: its projection (skywcs_plain) and the rotation between its
 * native unit vectors and Stonyhurst Cartesian space.  For a heliographic side, n2s
 * takes a native unit vector to the point of the unit sphere at that position (the
 * Carrington longitude less the offset); for a helioprojective one, to the direction of
 * the line of sight, Thompson eq. 15 as space_point writes it: the frame's unit vector
 * (cos Ty cos Tx, cos Ty sin Tx, sin Ty) becomes sin Tx cos Ty e_x + sin Ty e_y -
 * cos Tx cos Ty e_z.  s2n, its transpose, takes a space vector (heliographic: the point;
 * helioprojective: the point less the observer's position) to a native vector of the
 * same direction (frame_angles' angles as a vector). */
typedef struct fm_side {
    skywcs_plain pp;
    int hp;                 /* helioprojective */
    hcc_axes ax;            /* helioprojective: the observer's axes and position */
    double n2s[3][3], s2n[3][3];
} fm_side;

struct solar_fastmap {
    fm_side f, t;
    double rsun, dist2;     /* the solar radius; |o|^2 of the `from` observer */
    int moving;
    double mr[3][3], mt[3]; /* solar_hgs_motion from `from`'s time to `to`'s */
    double mu_min;
    struct fm_col *cols;    /* FM_COLS, for a `from` side of CAR or CEA (else NULL) */
};

static void mat3_apply(const double m[3][3], const double *v, double *out)
{
    for (int k = 0; k < 3; k++)
        out[k] = m[k][0] * v[0] + m[k][1] * v[1] + m[k][2] * v[2];
}

static void fm_side_init(fm_side *s, sky_frame f, const solar_obs *o, const skywcs_plain *pp)
{
    double fr[3][3];   /* the frame's unit vector -> space (see fm_side) */
    s->pp = *pp;
    s->hp = f == SKY_FRAME_HELIOPROJECTIVE;
    if (s->hp) {
        observer_axes(o, &s->ax);
        for (int k = 0; k < 3; k++) {
            fr[k][0] = -s->ax.ez[k];
            fr[k][1] = s->ax.ex[k];
            fr[k][2] = s->ax.ey[k];
        }
    } else {
        /* Stonyhurst longitude = Carrington longitude - carr_off: a turn about z. */
        double a = f == SKY_FRAME_CARRINGTON ? -o->carr_off * DEG2RAD : 0.0;
        double c = cos(a), sn = sin(a);
        double r[3][3] = { { c, -sn, 0.0 }, { sn, c, 0.0 }, { 0.0, 0.0, 1.0 } };
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                fr[i][j] = r[i][j];
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            s->n2s[i][j] = fr[i][0] * pp->n2c[0][j] + fr[i][1] * pp->n2c[1][j] +
                           fr[i][2] * pp->n2c[2][j];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            s->s2n[i][j] = s->n2s[j][i];
}

/* The native unit vector of 0-based pixel (px, py) of a plain WCS: Paper II's
 * deprojections, with wcslib's bounds (native longitude within 180 and latitude within
 * 90 degrees, 1e-13 of slack, for CAR and CEA).  TAN (sec. 5.1.3): R = sqrt(x^2 + y^2),
 * phi = arg(-y, x), theta = atan(r0 / R), so the vector is (-y, x, r0) / |(-y, x, r0)|.
 * CAR (sec. 5.2.3): phi = x, theta = y.  CEA (sec. 5.2.2): phi = x,
 * sin theta = lambda y / r0.  r0 = 180/pi, x and y in degrees.  Returns 0 off the
 * projection. */
typedef struct fm_row {
    double py, st, ct;      /* the last row's pixel and its sin, cos theta (NaN: none) */
} fm_row;

/* The sin and cos of the native longitude of the columns met (when it depends on the
 * column alone, piximg[0][1] = 0): FM_COLS slots, px's integer part modulo FM_COLS. */
#define FM_COLS 4096
typedef struct fm_col {
    double px, sp, cp;      /* px NaN: empty */
} fm_col;

static int fm_native(const skywcs_plain *pp, double px, double py, double n[3], fm_row *row,
                     fm_col *cols)
{
    double dx = px + 1.0 - pp->crpix[0], dy = py + 1.0 - pp->crpix[1];
    double x = pp->piximg[0][0] * dx + pp->piximg[0][1] * dy;
    double y = pp->piximg[1][0] * dx + pp->piximg[1][1] * dy;
    if (!isfinite(x) || !isfinite(y))
        return 0;
    if (pp->proj == SKYWCS_PLAIN_TAN) {
        double r = sqrt(x * x + y * y + RAD2DEG * RAD2DEG);
        n[0] = -y / r;
        n[1] = x / r;
        n[2] = RAD2DEG / r;
        return 1;
    }
    const double tol = 1e-13;
    if (fabs(x) > 180.0 + tol)
        return 0;
    x = fmin(fmax(x, -180.0), 180.0);
    double st, ct;
    if (row && py == row->py) {
        /* theta depends on the row alone (piximg[1][0] = 0): that of the last point. */
        st = row->st;
        ct = row->ct;
    } else if (pp->proj == SKYWCS_PLAIN_CAR) {
        if (fabs(y) > 90.0 + tol)
            return 0;
        y = fmin(fmax(y, -90.0), 90.0) * DEG2RAD;
        st = sin(y);
        ct = cos(y);
    } else {
        st = pp->lambda * y * DEG2RAD;
        if (fabs(st) > 1.0 + tol)
            return 0;
        st = fmin(fmax(st, -1.0), 1.0);
        ct = sqrt(1.0 - st * st);
    }
    if (row) {
        row->py = py;
        row->st = st;
        row->ct = ct;
    }
    double sp, cp;
    fm_col *c = cols && fabs(px) < 1e15 ? &cols[(size_t)(long long)floor(px) & (FM_COLS - 1)]
                                        : NULL;
    if (c && c->px == px) {
        sp = c->sp;
        cp = c->cp;
    } else {
        sp = sin(x * DEG2RAD);
        cp = cos(x * DEG2RAD);
        if (c) {
            c->px = px;
            c->sp = sp;
            c->cp = cp;
        }
    }
    n[0] = ct * cp;
    n[1] = ct * sp;
    n[2] = st;
    return 1;
}

/* The 0-based pixel of a native vector n (any length > 0) of a plain WCS: Paper II's
 * projections, TAN x = r0 n_y / n_z, y = -r0 n_x / n_z (theta > 0 only, as wcslib);
 * CAR x = phi, y = theta; CEA x = phi, y = r0 sin(theta) / lambda; phi = arg(n_x, n_y)
 * in [-180, 180].  Returns 0 off the projection. */
static int fm_pixel(const skywcs_plain *pp, const double *n, double *px, double *py)
{
    double x, y;
    if (pp->proj == SKYWCS_PLAIN_TAN) {
        if (!(n[2] > 0.0))
            return 0;
        x = RAD2DEG * n[1] / n[2];
        y = -RAD2DEG * n[0] / n[2];
    } else {
        x = atan2(n[1], n[0]) * RAD2DEG;
        if (pp->proj == SKYWCS_PLAIN_CAR)
            y = atan2(n[2], hypot(n[0], n[1])) * RAD2DEG;
        else
            y = RAD2DEG * n[2] / (sqrt(dot3(n, n)) * pp->lambda);
    }
    *px = pp->imgpix[0][0] * x + pp->imgpix[0][1] * y + pp->crpix[0] - 1.0;
    *py = pp->imgpix[1][0] * x + pp->imgpix[1][1] * y + pp->crpix[1] - 1.0;
    return isfinite(*px) && isfinite(*py);
}

/* The largest difference between fm_native / fm_pixel and wcslib on a few pixels of `w`
 * (in pixels, through the celestial unit vector), or +inf when one side fails where
 * the other does not: the guard that the plain chain reads wcslib's parameters right. */
static double fm_check(skywcs *w, const skywcs_plain *pp)
{
    double px[5], py[5], lon[5], lat[5], worst = 0.0;
    for (int i = 0; i < 5; i++) {
        px[i] = pp->crpix[0] - 1.0 + (i % 2 ? 3.25 : -1.5) * (i > 0);
        py[i] = pp->crpix[1] - 1.0 + (i / 2 % 2 ? 2.75 : -0.5) * (i > 0);
    }
    if (skywcs_pix2sky(w, 5, px, py, lon, lat) != 0)
        return INFINITY;
    for (int i = 0; i < 5; i++) {
        double n[3], c[3], s[3], x, y;
        if (!isfinite(lon[i]) || !fm_native(pp, px[i], py[i], n, NULL, NULL))
            return INFINITY;
        mat3_apply(pp->n2c, n, c);
        double cl = cos(lat[i] * DEG2RAD);
        s[0] = cl * cos(lon[i] * DEG2RAD);
        s[1] = cl * sin(lon[i] * DEG2RAD);
        s[2] = sin(lat[i] * DEG2RAD);
        double d = sqrt((c[0] - s[0]) * (c[0] - s[0]) + (c[1] - s[1]) * (c[1] - s[1]) +
                        (c[2] - s[2]) * (c[2] - s[2])) * RAD2DEG;
        double scale = fmin(hypot(pp->piximg[0][0], pp->piximg[1][0]),
                            hypot(pp->piximg[0][1], pp->piximg[1][1]));
        /* Back: the celestial vector to native (n2c is orthogonal) to the pixel. */
        for (int k = 0; k < 3; k++)
            n[k] = pp->n2c[0][k] * s[0] + pp->n2c[1][k] * s[1] + pp->n2c[2][k] * s[2];
        if (!fm_pixel(pp, n, &x, &y))
            return INFINITY;
        worst = fmax(worst, fmax(d / scale, fmax(fabs(x - px[i]), fabs(y - py[i]))));
    }
    return worst;
}

solar_fastmap *solar_fastmap_new(skywcs *from, skywcs *to, double mu_min)
{
    skywcs_plain pf, pt;
    const solar_obs *sf = skywcs_solar(from), *st = skywcs_solar(to);
    if (!sf || !st || !skywcs_plain_get(from, &pf) || !skywcs_plain_get(to, &pt))
        return NULL;
    sky_frame ff = skywcs_frame(from, NULL), ft = skywcs_frame(to, NULL);
    solar_obs of = *sf, ot = *st;
    solar_pair_observers(&of, &ot);
    /* The pairs solar_convert_trip classes. */
    if (!(ff == SKY_FRAME_HELIOPROJECTIVE || ft == SKY_FRAME_HELIOPROJECTIVE) ||
        of.rsun != ot.rsun || identity(ff, &of, ft, &ot) || !convertible(ff, &of, ft, &ot))
        return NULL;
    /* 1e-9 pixel: far below the acceptance of the round trip and the kernels' needs. */
    if (!(fm_check(from, &pf) <= 1e-9) || !(fm_check(to, &pt) <= 1e-9))
        return NULL;
    solar_fastmap *m = malloc(sizeof *m);
    if (!m)
        return NULL;
    m->cols = NULL;
    if (pf.proj != SKYWCS_PLAIN_TAN && pf.piximg[0][1] == 0.0) {
        m->cols = malloc(sizeof(fm_col) * FM_COLS);
        if (!m->cols) {
            free(m);
            return NULL;
        }
        for (size_t i = 0; i < FM_COLS; i++)
            m->cols[i].px = NAN;
    }
    fm_side_init(&m->f, ff, &of, &pf);
    fm_side_init(&m->t, ft, &ot, &pt);
    m->rsun = of.rsun;
    m->dist2 = of.dist * of.dist;
    m->moving = solar_moves(&of, &ot);
    if (m->moving)
        solar_hgs_motion(of.jd, ot.jd, m->mr, m->mt);
    m->mu_min = mu_min;
    return m;
}

void solar_fastmap_free(solar_fastmap *m)
{
    if (m)
        free(m->cols);
    free(m);
}

/* Whether a round trip that misses by (dx, dy) pixels drops its point (coordmap.c's
 * rule: strict drops NaN too). */
static int fm_misses(double dx, double dy, int strict)
{
    return strict ? !(dx <= 1.0 && dy <= 1.0) : (dx > 1.0 || dy > 1.0);
}

void solar_fastmap_points(solar_fastmap *m, size_t k, const double *px,
                          const double *py, int strict, double *qx, double *qy,
                          unsigned char *cls)
{
    const fm_side *F = &m->f, *T = &m->t;
    double mu = m->mu_min, r2 = m->rsun * m->rsun;
    fm_row row = { NAN, 0.0, 0.0 };
    fm_row *rowp = F->pp.proj != SKYWCS_PLAIN_TAN && F->pp.piximg[1][0] == 0.0 ? &row : NULL;
    /* A hidden point whose trip ends farther than `reach` (radians of heliographic arc)
     * from it misses by more than a pixel: in CAR, pixel offsets (dx, dy) within 1 are
     * native offsets within |piximg| (dx, dy), |dphi| + |dtheta| <= reach, and the arc
     * between two points is at most |dtheta| + |dphi| (along a meridian, then a
     * parallel), at least their chord over the radius. */
    double reach = F->pp.proj == SKYWCS_PLAIN_CAR
                       ? (fabs(F->pp.piximg[0][0]) + fabs(F->pp.piximg[0][1]) +
                          fabs(F->pp.piximg[1][0]) + fabs(F->pp.piximg[1][1])) * DEG2RAD
                       : INFINITY;
    for (size_t i = 0; i < k; i++) {
        double n[3], u[3], p[3], p0[3], v[3], nt[3];
        qx[i] = qy[i] = NAN;
        cls[i] = 1;
        if (!fm_native(&F->pp, px[i], py[i], n, rowp, m->cols))
            continue;
        mat3_apply(F->n2s, n, u);
        if (F->hp) {
            /* |o + d u| = rsun, the near root (space_point). */
            double b = dot3(F->ax.o, u), disc = b * b - m->dist2 + r2;
            double d = disc >= 0.0 ? -b - sqrt(disc) : NAN;
            if (!(d >= 0.0))
                continue;
            for (int c = 0; c < 3; c++)
                p[c] = F->ax.o[c] + d * u[c];
        } else {
            for (int c = 0; c < 3; c++)
                p[c] = m->rsun * u[c];
        }
        p0[0] = p[0];
        p0[1] = p[1];
        p0[2] = p[2];
        if (m->moving)
            move3(m->mr, m->mt, p);
        for (int c = 0; c < 3; c++)
            v[c] = T->hp ? p[c] - T->ax.o[c] : p[c];
        mat3_apply(T->s2n, v, nt);
        /* trip_class, on the same view cosines. */
        double muf = F->hp ? view_cosine(p0, F->ax.o) : 1.0;
        double mut = T->hp ? view_cosine(p, T->ax.o) : 1.0;
        if (!(muf >= mu && mut >= mu)) {
            if (m->moving || !T->hp || !(mut <= -mu)) {
                cls[i] = 0;
                continue;
            }
            /* Hidden from `to`'s observer: the trip ends on the near side of the line of
             * sight, at q; the point stays when q's `from` pixel is within one of it. */
            double dp = sqrt(dot3(v, v)), w[3], q[3], nf[3], xr = NAN, yr = NAN;
            for (int c = 0; c < 3; c++)
                w[c] = v[c] / dp;
            double dn = -2.0 * dot3(T->ax.o, w) - dp;
            if (fabs(dp - dn) > reach * m->rsun)
                continue;
            for (int c = 0; c < 3; c++) {
                q[c] = T->ax.o[c] + dn * w[c];
                q[c] -= F->hp ? F->ax.o[c] : 0.0;
            }
            mat3_apply(F->s2n, q, nf);
            if (!fm_pixel(&F->pp, nf, &xr, &yr))
                xr = yr = NAN;
            if (fm_misses(fabs(xr - px[i]), fabs(yr - py[i]), strict))
                continue;
        }
        if (!fm_pixel(&T->pp, nt, &qx[i], &qy[i]))
            qx[i] = qy[i] = NAN;
    }
}
