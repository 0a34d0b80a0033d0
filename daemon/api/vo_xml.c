/* XML documents of the IVOA endpoints, written with libxml2's xmlTextWriter into memory. */
#include "daemon/api/vo_xml.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/xmlwriter.h>

struct voxml {
    xmlBufferPtr buf;
    xmlTextWriterPtr w;
    int failed;
};

voxml *voxml_new(void)
{
    voxml *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->buf = xmlBufferCreate();
    x->w = x->buf ? xmlNewTextWriterMemory(x->buf, 0) : NULL;
    if (!x->w || xmlTextWriterSetIndent(x->w, 1) < 0
        || xmlTextWriterStartDocument(x->w, NULL, "UTF-8", NULL) < 0) {
        if (x->w)
            xmlFreeTextWriter(x->w);
        if (x->buf)
            xmlBufferFree(x->buf);
        free(x);
        return NULL;
    }
    return x;
}

static void check(voxml *x, int rc)
{
    if (rc < 0)
        x->failed = 1;
}

void voxml_start(voxml *x, const char *name)
{
    if (!x->failed)
        check(x, xmlTextWriterStartElement(x->w, (const xmlChar *)name));
}

void voxml_end(voxml *x)
{
    if (!x->failed)
        check(x, xmlTextWriterEndElement(x->w));
}

/* The length of the UTF-8 sequence at s (n bytes left) if it encodes an XML 1.0 Char
 * (tab, newline, carriage return, U+0020-U+D7FF, U+E000-U+FFFD, U+10000-U+10FFFF) in
 * its shortest form, else 0. */
static size_t xml_char_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return c >= 0x20 || c == '\t' || c == '\n' || c == '\r';
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    unsigned long cp = c & (0x3F >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    static const unsigned long least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE
        || cp == 0xFFFF)
        return 0;
    return len;
}

char *voxml_clean(const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t n = strlen(text), bad = 0;
    for (size_t i = 0; i < n;) {
        size_t k = xml_char_len(s + i, n - i);
        bad += k == 0;
        i += k ? k : 1;
    }
    char *out = malloc(n + 2 * bad + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n;) {
        size_t k = xml_char_len(s + i, n - i);
        if (k) {
            memcpy(o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);      /* U+FFFD REPLACEMENT CHARACTER */
            o += 3;
            i++;
        }
    }
    *o = '\0';
    return out;
}

/* Writes `value` as voxml_clean makes it: the attribute `name`, or text (name NULL). */
static void write_clean(voxml *x, const char *name, const char *value)
{
    if (x->failed || !value)
        return;
    char *clean = voxml_clean(value);
    if (!clean) {
        x->failed = 1;
        return;
    }
    const xmlChar *v = (const xmlChar *)clean;
    check(x, name ? xmlTextWriterWriteAttribute(x->w, (const xmlChar *)name, v)
                  : xmlTextWriterWriteString(x->w, v));
    free(clean);
}

void voxml_attr(voxml *x, const char *name, const char *value)
{
    write_clean(x, name, value);
}

/* Writes the formatted text as attribute `name`, or (element) as an element `name`
 * holding it; x fails when it is over 511 bytes. */
static void write_formatted(voxml *x, const char *name, int element, const char *fmt,
                            va_list ap)
{
    char v[512];
    int n = vsnprintf(v, sizeof(v), fmt, ap);
    if (n < 0 || (size_t)n >= sizeof(v)) {
        x->failed = 1;
        return;
    }
    if (element)
        voxml_element(x, name, v);
    else
        voxml_attr(x, name, v);
}

void voxml_attrf(voxml *x, const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    write_formatted(x, name, 0, fmt, ap);
    va_end(ap);
}

void voxml_text(voxml *x, const char *text)
{
    write_clean(x, NULL, text);
}

void voxml_element(voxml *x, const char *name, const char *text)
{
    voxml_start(x, name);
    voxml_text(x, text);
    voxml_end(x);
}

void voxml_elementf(voxml *x, const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    write_formatted(x, name, 1, fmt, ap);
    va_end(ap);
}

char *voxml_finish(voxml *x, size_t *len)
{
    char *text = NULL;
    *len = 0;
    if (!x->failed && xmlTextWriterEndDocument(x->w) >= 0) {
        xmlFreeTextWriter(x->w);
        x->w = NULL;
        size_t n = (size_t)xmlBufferLength(x->buf);
        text = malloc(n + 1);
        if (text) {
            memcpy(text, xmlBufferContent(x->buf), n);
            text[n] = '\0';
            *len = n;
        }
    }
    if (x->w)
        xmlFreeTextWriter(x->w);
    xmlBufferFree(x->buf);
    free(x);
    return text;
}

voxml *voxml_votable_new(void)
{
    voxml *x = voxml_new();
    if (!x)
        return NULL;
    voxml_start(x, "VOTABLE");
    voxml_attr(x, "version", "1.4");
    voxml_attr(x, "xmlns", "http://www.ivoa.net/xml/VOTable/v1.3");
    voxml_attr(x, "xmlns:xsi", "http://www.w3.org/2001/XMLSchema-instance");
    return x;
}

voxml *voxml_results_new(const char *status, const char *standard_id)
{
    voxml *x = voxml_votable_new();
    if (!x)
        return NULL;
    voxml_start(x, "RESOURCE");
    voxml_attr(x, "type", "results");
    if (status)
        voxml_info(x, "QUERY_STATUS", status);
    if (standard_id)
        voxml_info(x, "standardID", standard_id);
    return x;
}

void voxml_info(voxml *x, const char *name, const char *value)
{
    voxml_start(x, "INFO");
    voxml_attr(x, "name", name);
    voxml_attr(x, "value", value);
    voxml_end(x);
}

void voxml_char_param(voxml *x, const char *name, const char *value)
{
    voxml_start(x, "PARAM");
    voxml_attr(x, "name", name);
    voxml_attr(x, "datatype", "char");
    voxml_attr(x, "arraysize", "*");
    voxml_attr(x, "value", value);
    voxml_end(x);
}
