/* Byte ranges of replies (RFC 9110, section 14): the Range and If-Range request headers. */
#include "daemon/ranges.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Optional whitespace (RFC 9110, section 5.6.3). */
static const char *skip_ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* A run of decimal digits into *v; returns the character after it, or NULL when there is
 * none or it overflows. */
static const char *digits(const char *p, unsigned long long *v)
{
    if (!isdigit((unsigned char)*p))
        return NULL;
    unsigned long long n = 0;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (n > (ULLONG_MAX - d) / 10)
            return NULL;
        n = n * 10 + d;
    }
    *v = n;
    return p;
}

ranges_answer ranges_parse(const char *range, unsigned long long len,
                           unsigned long long *first, unsigned long long *last)
{
    if (!range)
        return RANGES_WHOLE;
    const char *p = skip_ows(range);
    /* The range unit is case-insensitive (section 14.1). */
    if (strncasecmp(p, "bytes", 5) != 0)
        return RANGES_WHOLE;
    p = skip_ows(p + 5);
    if (*p++ != '=')
        return RANGES_WHOLE;
    p = skip_ows(p);
    unsigned long long a = 0, b = 0;
    int suffix = 0, open_end = 0;
    if (*p == '-') {
        suffix = 1;
        if (!(p = digits(p + 1, &b)))
            return RANGES_WHOLE;
    } else {
        if (!(p = digits(p, &a)) || *p++ != '-')
            return RANGES_WHOLE;
        if (isdigit((unsigned char)*p)) {
            if (!(p = digits(p, &b)) || b < a)
                return RANGES_WHOLE;
        } else {
            open_end = 1;
        }
    }
    p = skip_ows(p);
    if (*p != '\0')
        return RANGES_WHOLE;        /* a second range, or junk: the whole body */
    if (suffix) {
        if (b == 0 || len == 0)
            return RANGES_UNSATISFIABLE;
        *first = b >= len ? 0 : len - b;
        *last = len - 1;
        return RANGES_PART;
    }
    if (a >= len)
        return RANGES_UNSATISFIABLE;
    *first = a;
    *last = open_end || b >= len ? len - 1 : b;
    return RANGES_PART;
}

/* An IMF-fixdate into seconds since 1970 (UTC); -1 when it is not one. */
static time_t parse_http_date(const char *s)
{
    static const char *const months[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    char wday[4], mon[4], zone[4];
    int day, year, hh, mm, ss, used = 0;
    if (sscanf(s, "%3s, %2d %3s %4d %2d:%2d:%2d %3s%n", wday, &day, mon, &year, &hh, &mm,
               &ss, zone, &used) != 8 || strcmp(zone, "GMT") != 0)
        return (time_t)-1;
    const char *rest = s + used;
    while (*rest == ' ' || *rest == '\t')
        rest++;
    if (*rest != '\0')
        return (time_t)-1;
    int m = -1;
    for (int i = 0; i < 12; i++)
        if (strcmp(mon, months[i]) == 0)
            m = i;
    if (m < 0 || day < 1 || day > 31 || hh > 23 || mm > 59 || ss > 60)
        return (time_t)-1;
    struct tm tm = {0};
    tm.tm_year = year - 1900;
    tm.tm_mon = m;
    tm.tm_mday = day;
    tm.tm_hour = hh;
    tm.tm_min = mm;
    tm.tm_sec = ss;
    return timegm(&tm);
}

int ranges_if_range_ok(const char *if_range, const char *etag, time_t last_modified)
{
    if (!if_range)
        return 1;
    const char *p = skip_ows(if_range);
    if (*p == '"') {
        /* Strong comparison: both tags strong and the same characters (section 8.8.3.2). */
        size_t n = strlen(p);
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        return etag && etag[0] == '"' && strlen(etag) == n && memcmp(p, etag, n) == 0;
    }
    if (p[0] == 'W' && p[1] == '/')
        return 0;                   /* a weak tag never matches (section 13.1.5) */
    if (last_modified == (time_t)-1)
        return 0;
    time_t t = parse_http_date(p);
    return t != (time_t)-1 && t == last_modified;
}

void ranges_http_date(time_t t, char out[30])
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 30, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}
