/* Solar frames: helioprojective, heliographic Stonyhurst and Carrington, and the
 * conversions between them through points in space (Thompson 2006, A&A 449, 791). */
#include <math.h>
#include <stddef.h>

#include "engine/sky/skywcs.h"

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

/* Whether converting `from` to `to` is the identity (sunpy's self-transforms at one
 * obstime: helioprojective with the same observer, Stonyhurst, Carrington with the same
 * Carrington offset). */
static int identity(sky_frame from, const solar_obs *of, sky_frame to, const solar_obs *ot)
{
    if (from != to)
        return 0;
    if (from == SKY_FRAME_HELIOPROJECTIVE)
        return same_observer(of, ot);
    if (from == SKY_FRAME_CARRINGTON)
        return of->has_carr == ot->has_carr && (!of->has_carr || of->carr_off == ot->carr_off);
    return 1;
}

void solar_convert(sky_frame from, const solar_obs *of, sky_frame to, const solar_obs *ot,
                   int surface, const solar_obs *screen, size_t n, double *lon, double *lat)
{
    if (identity(from, of, to, ot)) {
        for (size_t i = 0; i < n; i++)
            lon[i] = wrap360(lon[i]);
        return;
    }
    int ok = sky_frame_is_solar(from) && sky_frame_is_solar(to) &&
             (from != SKY_FRAME_HELIOPROJECTIVE || of->known) &&
             (to != SKY_FRAME_HELIOPROJECTIVE || ot->known) &&
             (from != SKY_FRAME_CARRINGTON || of->has_carr) &&
             (to != SKY_FRAME_CARRINGTON || ot->has_carr);
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
        for (int k = 0; k < 3; k++) {
            c[k] = sa.o[k];
            w[k] = fa.o[k] - c[k];
        }
        rs2 = dot3(c, c);
    }
    double r2 = of->rsun * of->rsun;
    for (size_t i = 0; i < n; i++) {
        double p[3];
        if (!isfinite(lon[i]) || !isfinite(lat[i])) {
            lon[i] = lat[i] = NAN;
            continue;
        }
        if (from == SKY_FRAME_HELIOPROJECTIVE) {
            /* The line of sight (Thompson eq. 15 with unit distance) in Stonyhurst axes. */
            double tx = lon[i] * DEG2RAD, ty = lat[i] * DEG2RAD;
            double hx = cos(ty) * sin(tx), hy = sin(ty), hz = -cos(ty) * cos(tx);
            double u[3];
            for (int k = 0; k < 3; k++)
                u[k] = hx * fa.ex[k] + hy * fa.ey[k] + hz * fa.ez[k];
            double d;
            if (surface == SOLAR_SCREEN) {
                /* |w + d u| = |c| with w = o - c; the far root. */
                double b = dot3(w, u), disc = b * b - dot3(w, w) + rs2;
                d = disc >= 0.0 ? -b + sqrt(disc) : NAN;
            } else {
                /* |o + d u| = rsun; the near root (the visible surface). */
                double b = dot3(fa.o, u), disc = b * b - of->dist * of->dist + r2;
                d = disc >= 0.0 ? -b - sqrt(disc) : NAN;
            }
            if (!(d >= 0.0)) {
                lon[i] = lat[i] = NAN;
                continue;
            }
            for (int k = 0; k < 3; k++)
                p[k] = fa.o[k] + d * u[k];
        } else {
            double l = lon[i] - (from == SKY_FRAME_CARRINGTON ? of->carr_off : 0.0);
            double cb = cos(lat[i] * DEG2RAD);
            p[0] = of->rsun * cb * cos(l * DEG2RAD);
            p[1] = of->rsun * cb * sin(l * DEG2RAD);
            p[2] = of->rsun * sin(lat[i] * DEG2RAD);
        }
        if (to == SKY_FRAME_HELIOPROJECTIVE) {
            /* Thompson eq. 16: theta_x = arg(D - z, x), theta_y = arcsin(y / d). */
            double v[3] = { p[0] - ta.o[0], p[1] - ta.o[1], p[2] - ta.o[2] };
            double x = dot3(v, ta.ex), y = dot3(v, ta.ey), mz = -dot3(v, ta.ez);
            double dn = sqrt(dot3(v, v));
            lon[i] = wrap360(atan2(x, mz) * RAD2DEG);
            lat[i] = asin(y / dn) * RAD2DEG;
        } else {
            double l = atan2(p[1], p[0]) * RAD2DEG;
            if (to == SKY_FRAME_CARRINGTON)
                l += ot->carr_off;
            lon[i] = wrap360(l);
            lat[i] = atan2(p[2], hypot(p[0], p[1])) * RAD2DEG;
        }
    }
}
