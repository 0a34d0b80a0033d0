/* The observer of a solar WCS in its header: read, and written back for a cutout
 * (solar.h). */
#include <math.h>
#include <string.h>

#include "engine/fits/fitscard.h"
#include "engine/sky/solar.h"

#define RAD2DEG (180.0 / M_PI)

/* The observer and the Sun of a solar WCS as sunpy reads them (sunpy.map.GenericMap's
 * observer_coordinate and rsun_meters; Thompson 2006 sec. 2 and Table 2 for the
 * keywords): RSUN_REF (metres; else SOLAR_RSUN_IAU); the observer from HGLN_OBS,
 * HGLT_OBS and DSUN_OBS, else from HEEQ_X/Y/Z (Stonyhurst Cartesian, metres; Thompson
 * sec. 2.1); the Carrington offset CRLN_OBS minus the observer's Stonyhurst longitude
 * when both are known; the date DATE-OBS, else DATE-AVG (sunpy 4.1's
 * GenericMap.date and its WCS frames take DATE-OBS first).  An observer given only in
 * Carrington (CRLN_OBS) or HCI coordinates stays unknown: its Stonyhurst longitude
 * needs an ephemeris of the Earth. */
void solar_read_header(const char *cards, int nkeys, solar_obs *o)
{
    memset(o, 0, sizeof *o);
    double v, x, y, z;
    o->rsun = fitscard_value_real(cards, nkeys, "RSUN_REF", &v) && v > 0.0 ? v
                                                                          : SOLAR_RSUN_IAU;
    double lon, lat, d, crln;
    int has_lon = fitscard_value_real(cards, nkeys, "HGLN_OBS", &lon);
    if (has_lon && fitscard_value_real(cards, nkeys, "HGLT_OBS", &lat) &&
        fitscard_value_real(cards, nkeys, "DSUN_OBS", &d) && d > 0.0 &&
        lat >= -90.0 && lat <= 90.0) {
        o->known = 1;
        o->lon = lon;
        o->lat = lat;
        o->dist = d;
    } else if (fitscard_value_real(cards, nkeys, "HEEQ_X", &x) &&
               fitscard_value_real(cards, nkeys, "HEEQ_Y", &y) &&
               fitscard_value_real(cards, nkeys, "HEEQ_Z", &z) &&
               (x != 0.0 || y != 0.0 || z != 0.0)) {
        o->known = 1;
        o->lon = atan2(y, x) * RAD2DEG;
        o->lat = atan2(z, hypot(x, y)) * RAD2DEG;
        o->dist = sqrt(x * x + y * y + z * z);
        lon = o->lon;
        has_lon = 1;
    }
    if (has_lon && fitscard_value_real(cards, nkeys, "CRLN_OBS", &crln)) {
        o->has_carr = 1;
        o->carr_off = crln - lon;
    }
    if (!fitscard_value_string(cards, nkeys, "DATE-OBS", o->date, sizeof o->date))
        (void)fitscard_value_string(cards, nkeys, "DATE-AVG", o->date, sizeof o->date);
    if (o->date[0] && solar_parse_date(o->date, &o->jd) != 0)
        o->jd = 0.0;
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
        return "a helioprojective WCS needs its observer (HGLN_OBS, HGLT_OBS and DSUN_OBS, "
               "or HEEQ_X/Y/Z)";
    if ((fa == SKY_FRAME_CARRINGTON || fb == SKY_FRAME_CARRINGTON) && !oa.has_carr)
        return "a Carrington WCS needs the observer's Carrington and Stonyhurst longitudes "
               "(CRLN_OBS and HGLN_OBS) on one side, or on its own side when the dates differ";
    if ((sa == SOLAR_SCREEN || sb == SOLAR_SCREEN) && !(sa == SOLAR_SCREEN ? oa : ob).known)
        return "the spherical screen needs the observer of the image reprojected";
    return NULL;
}
