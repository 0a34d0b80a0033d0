/* The observer of a solar WCS in its header: read from every form the FITS solar
 * conventions give it in, and written back for a cutout (solar.h). */
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "engine/fits/fitscard.h"
#include "engine/sky/solar.h"

#define DEG2RAD (M_PI / 180.0)
#define RAD2DEG (180.0 / M_PI)

/* The three values of keywords k[0..2], all present and finite. */
static int read3(const char *cards, int n, const char *const k[3], double v[3])
{
    for (int i = 0; i < 3; i++)
        if (!fitscard_value_real(cards, n, k[i], &v[i]))
            return 0;
    return 1;
}

/* A position (metres) as the observer: Stonyhurst longitude, latitude, distance. */
static void set_observer(solar_obs *o, const double p[3])
{
    o->known = 1;
    o->lon = atan2(p[1], p[0]) * RAD2DEG;
    o->lat = atan2(p[2], hypot(p[0], p[1])) * RAD2DEG;
    o->dist = sqrt(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]);
}

static void cross3(const double *a, const double *b, double *c)
{
    c[0] = a[1] * b[2] - a[2] * b[1];
    c[1] = a[2] * b[0] - a[0] * b[2];
    c[2] = a[0] * b[1] - a[1] * b[0];
}

static void unit3(double *a)
{
    double n = sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]);
    for (int k = 0; k < 3; k++)
        a[k] /= n;
}

/* The heliocentric Cartesian frames of the observer keywords, as sunpy 4.1 defines them
 * (sunpy.coordinates.frames; Thompson 2006 sec. 2.2 and Hapgood 1992, Planet. Space Sci.
 * 40, 711, for the ecliptic frames), all centred on the Sun. */
enum { CART_HCI, CART_HAE, CART_HEE };

/* The axes of frame `kind` at jd (UTC) as the rows of a, in ICRS.
 *   HCI (heliocentric inertial, HCIX/Y/Z_OBS): Z the Sun's rotation axis (the IAU pole,
 *     RA 286.13, Dec 63.87), X the ascending node of the solar equator on the mean
 *     ecliptic of J2000 (the ecliptic pole K crossed with the solar pole: X = K x Z).
 *   HAE (heliocentric Aries ecliptic, HAEX/Y/Z_OBS; astropy's HeliocentricMeanEcliptic
 *     with its default equinox J2000, the frame sunpy's AIAMap reads them in): the mean
 *     ecliptic and equinox of J2000 (Hapgood 1992 sec. 3: HAE at the J2000 epoch).
 *   HEE (heliocentric Earth ecliptic, HEEX/Y/Z_OBS): X towards the Earth, Z the part
 *     of the pole of the mean ecliptic of date perpendicular to X (Hapgood 1992 sec. 4;
 *     sunpy's _rotation_matrix_hme_to_hee). */
static void cart_axes(int kind, double jd, double a[3][3])
{
    double ecl[3][3];
    if (kind == CART_HAE) {
        sky_icrs_to_ecliptic(0.0, a);
        return;
    }
    if (kind == CART_HCI) {
        sky_icrs_to_ecliptic(0.0, ecl);
        double ra = 286.13 * DEG2RAD, de = 63.87 * DEG2RAD;
        double z[3] = { cos(de) * cos(ra), cos(de) * sin(ra), sin(de) };
        cross3(ecl[2], z, a[0]);
        unit3(a[0]);
        memcpy(a[2], z, sizeof z);
    } else {
        sky_icrs_to_ecliptic(solar_tt(jd) - 2451545.0, ecl);
        solar_earth(jd, a[0]);
        unit3(a[0]);
        double kx = ecl[2][0] * a[0][0] + ecl[2][1] * a[0][1] + ecl[2][2] * a[0][2];
        for (int k = 0; k < 3; k++)
            a[2][k] = ecl[2][k] - kx * a[0][k];
        unit3(a[2]);
    }
    cross3(a[2], a[0], a[1]);
}

/* The Stonyhurst position (metres) at jd of the point v (metres) of frame `kind`. */
static void cart_to_hgs(int kind, double jd, const double v[3], double p[3])
{
    double a[3][3], m[3][3], q[3];
    cart_axes(kind, jd, a);
    for (int k = 0; k < 3; k++)
        q[k] = a[0][k] * v[0] + a[1][k] * v[1] + a[2][k] * v[2];
    solar_hgs_axes(jd, m);
    for (int k = 0; k < 3; k++)
        p[k] = m[k][0] * q[0] + m[k][1] * q[1] + m[k][2] * q[2];
}

/* The Cartesian form an instrument's sunpy 4.1 map source reads before the generic ones
 * (CART_HAE, CART_HCI), or -1: sunpy.map.sources.AIAMap (INSTRUME beginning "AIA")
 * takes HAEX/Y/Z_OBS first, EUIMap (INSTRUME beginning "EUI", OBSRVTRY containing
 * "Solar Orbiter", any case) HCIX/Y/Z_OBS; EUVIMap and the others the generic order. */
static int instrument_first(const char *cards, int nkeys)
{
    char ins[72] = "", obs[72] = "";
    (void)fitscard_value_string(cards, nkeys, "INSTRUME", ins, sizeof ins);
    (void)fitscard_value_string(cards, nkeys, "OBSRVTRY", obs, sizeof obs);
    if (strncmp(ins, "AIA", 3) == 0)
        return CART_HAE;
    for (char *c = obs; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    if (strncmp(ins, "EUI", 3) == 0 && strstr(obs, "solar orbiter"))
        return CART_HCI;
    return -1;
}

/* The observer and the Sun of a solar WCS as sunpy reads them (sunpy.map.GenericMap's
 * observer_coordinate and rsun_meters; Thompson 2006 sec. 2 and Table 2 for the
 * keywords): RSUN_REF (metres; else SOLAR_RSUN_IAU); the date DATE-OBS, else DATE-AVG
 * (sunpy 4.1's GenericMap.date and its WCS frames take DATE-OBS first); the observer
 * from the first of these that the header gives in full:
 *   1. HGLN_OBS, HGLT_OBS, DSUN_OBS: Stonyhurst (degrees, metres; GenericMap's first);
 *   2. CRLN_OBS, CRLT_OBS, DSUN_OBS: Carrington, with a date (GenericMap's second): the
 *      Stonyhurst longitude is CRLN_OBS less the observer's Carrington offset
 *      (solar_carrington_offset: sunpy's L0 with the light travel time, an observer at
 *      DSUN_OBS; the Carrington frame with observer "self" that GenericMap builds);
 *   3. HEEQ_X/Y/Z: Stonyhurst Cartesian (metres; Thompson sec. 2.1);
 *   4. HCIX_OBS, HCIY_OBS, HCIZ_OBS: heliocentric inertial, with a date (sunpy's EUIMap
 *      reads these before 1 and 2);
 *   5. HAEX_OBS, HAEY_OBS, HAEZ_OBS: heliocentric Aries ecliptic, with a date (sunpy's
 *      AIAMap reads these before 1 and 2);
 *   6. HEEX_OBS, HEEY_OBS, HEEZ_OBS: heliocentric Earth ecliptic, with a date (no sunpy
 *      4.1 map source reads them; its HeliocentricEarthEcliptic frame defines them).
 * The generic order is GenericMap's: the spherical forms, which state the Stonyhurst or
 * Carrington coordinates directly, first; the Cartesian ones, which also need the Earth's
 * position at the date, after.  An instrument whose sunpy map source reads a Cartesian
 * form first (instrument_first: AIA's HAE, EUI's HCI) has it read first here too: its
 * keywords agree with its HGLN_OBS set only to its ephemeris' precision (0.013 degree on
 * the AIA file of tests/data/solar), and sunpy's maps of the file are the reference.
 * The Carrington offset (Carrington minus Stonyhurst longitude) of an observer with a
 * date is sunpy's (solar_carrington_offset at the observer's distance: L0 with the light
 * travel time, the HeliographicCarrington frame of sunpy 4.1 with that observer), not the
 * header's CRLN_OBS; without a date or an observer, CRLN_OBS minus the Stonyhurst
 * longitude when the header gives both. */
void solar_read_header(const char *cards, int nkeys, solar_obs *o)
{
    memset(o, 0, sizeof *o);
    double v[3], p[3], lon = 0.0, crln;
    o->rsun = fitscard_value_real(cards, nkeys, "RSUN_REF", &v[0]) && v[0] > 0.0
                  ? v[0] : SOLAR_RSUN_IAU;
    if (!fitscard_value_string(cards, nkeys, "DATE-OBS", o->date, sizeof o->date))
        (void)fitscard_value_string(cards, nkeys, "DATE-AVG", o->date, sizeof o->date);
    if (o->date[0] && solar_parse_date(o->date, &o->jd) != 0)
        o->jd = 0.0;
    static const char *const hgs[3] = { "HGLN_OBS", "HGLT_OBS", "DSUN_OBS" };
    static const char *const hgc[3] = { "CRLN_OBS", "CRLT_OBS", "DSUN_OBS" };
    static const char *const heeq[3] = { "HEEQ_X", "HEEQ_Y", "HEEQ_Z" };
    static const char *const cart[3][3] = { { "HCIX_OBS", "HCIY_OBS", "HCIZ_OBS" },
                                            { "HAEX_OBS", "HAEY_OBS", "HAEZ_OBS" },
                                            { "HEEX_OBS", "HEEY_OBS", "HEEZ_OBS" } };
    int has_lon = fitscard_value_real(cards, nkeys, "HGLN_OBS", &lon);
    int first = instrument_first(cards, nkeys);
    if (first >= 0 && o->jd > 0.0 && read3(cards, nkeys, cart[first], v) &&
        (v[0] != 0.0 || v[1] != 0.0 || v[2] != 0.0)) {
        cart_to_hgs(first, o->jd, v, p);
        set_observer(o, p);
    } else if (read3(cards, nkeys, hgs, v) && v[2] > 0.0 && fabs(v[1]) <= 90.0) {
        o->known = 1;
        o->lon = v[0];
        o->lat = v[1];
        o->dist = v[2];
    } else if (o->jd > 0.0 && read3(cards, nkeys, hgc, v) && v[2] > 0.0 &&
               fabs(v[1]) <= 90.0) {
        o->known = 1;
        o->lon = v[0] - solar_carrington_offset(o->jd, v[2]);
        o->lon -= 360.0 * floor((o->lon + 180.0) / 360.0);
        o->lat = v[1];
        o->dist = v[2];
    } else if (read3(cards, nkeys, heeq, v) && (v[0] != 0.0 || v[1] != 0.0 || v[2] != 0.0)) {
        set_observer(o, v);
    } else if (o->jd > 0.0) {
        for (int k = 0; k < 3 && !o->known; k++)
            if (read3(cards, nkeys, cart[k], v) && (v[0] != 0.0 || v[1] != 0.0 || v[2] != 0.0)) {
                cart_to_hgs(k, o->jd, v, p);
                set_observer(o, p);
            }
    }
    if (o->known && o->jd > 0.0) {
        o->has_carr = 1;
        o->carr_off = solar_carrington_offset(o->jd, o->dist);
        return;
    }
    if (o->known && !has_lon) {
        lon = o->lon;
        has_lon = 1;
    }
    if (has_lon && fitscard_value_real(cards, nkeys, "CRLN_OBS", &crln)) {
        o->has_carr = 1;
        o->carr_off = crln - lon;
    }
}

void solar_write_header(fitscard_list *b, const solar_obs *sol)
{
    fitscard_list_real(b, "RSUN_REF", sol->rsun, FITSCARD_EXACT, NULL);
    if (sol->known) {
        fitscard_list_real(b, "HGLN_OBS", sol->lon, FITSCARD_EXACT, NULL);
        fitscard_list_real(b, "HGLT_OBS", sol->lat, FITSCARD_EXACT, NULL);
        fitscard_list_real(b, "DSUN_OBS", sol->dist, FITSCARD_EXACT, NULL);
        if (sol->has_carr) {
            fitscard_list_real(b, "CRLN_OBS", sol->lon + sol->carr_off, FITSCARD_EXACT, NULL);
            fitscard_list_real(b, "CRLT_OBS", sol->lat, FITSCARD_EXACT, NULL);
        }
    }
    if (sol->date[0])
        fitscard_list_string(b, "DATE-OBS", sol->date, 0, NULL);
}

void solar_pair_observers(solar_obs *of, solar_obs *ot)
{
    if (of->jd > 0.0 && ot->jd > 0.0 && of->jd != ot->jd)
        return;
    if (!of->has_carr && ot->has_carr) {
        of->has_carr = 1;
        of->carr_off = ot->carr_off;
    } else if (!ot->has_carr && of->has_carr) {
        ot->has_carr = 1;
        ot->carr_off = of->carr_off;
    }
}

const char *solar_pair_gap(sky_frame fa, const solar_obs *a, int sa, sky_frame fb,
                           const solar_obs *b, int sb)
{
    solar_obs oa = *a, ob = *b;
    solar_pair_observers(&oa, &ob);
    if (fa == fb && fa == SKY_FRAME_HELIOPROJECTIVE &&
        ((!oa.known && !ob.known) || (oa.known && ob.known && oa.lon == ob.lon &&
                                      oa.lat == ob.lat && oa.dist == ob.dist)))
        return NULL;
    if (fa == SKY_FRAME_STONYHURST && fb == SKY_FRAME_STONYHURST)
        return NULL;
    if ((fa == SKY_FRAME_HELIOPROJECTIVE && !oa.known) ||
        (fb == SKY_FRAME_HELIOPROJECTIVE && !ob.known))
        return "a helioprojective WCS needs its observer (HGLN_OBS, HGLT_OBS and DSUN_OBS; "
               "or CRLN_OBS, CRLT_OBS and DSUN_OBS with DATE-OBS; or HEEQ_X/Y/Z; or "
               "HCIX/Y/Z_OBS, HAEX/Y/Z_OBS or HEEX/Y/Z_OBS with DATE-OBS)";
    if ((fa == SKY_FRAME_CARRINGTON || fb == SKY_FRAME_CARRINGTON) && !oa.has_carr)
        return "a Carrington WCS needs the observer's Carrington offset (its observer with "
               "DATE-OBS, or CRLN_OBS with HGLN_OBS) on one side, or on its own side when "
               "the dates differ";
    if ((sa == SOLAR_SCREEN || sb == SOLAR_SCREEN) && !(sa == SOLAR_SCREEN ? oa : ob).known)
        return "the spherical screen needs the observer of the image reprojected";
    return NULL;
}
