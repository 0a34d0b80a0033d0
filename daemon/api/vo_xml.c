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

void voxml_attr(voxml *x, const char *name, const char *value)
{
    if (!x->failed && value)
        check(x, xmlTextWriterWriteAttribute(x->w, (const xmlChar *)name,
                                             (const xmlChar *)value));
}

/* Formats into v (len bytes); 0, or -1 with x failed when it does not fit. */
static int vformat(voxml *x, char *v, size_t len, const char *fmt, va_list ap)
{
    int n = vsnprintf(v, len, fmt, ap);
    if (n < 0 || (size_t)n >= len) {
        x->failed = 1;
        return -1;
    }
    return 0;
}

void voxml_attrf(voxml *x, const char *name, const char *fmt, ...)
{
    char v[512];
    va_list ap;
    va_start(ap, fmt);
    int rc = vformat(x, v, sizeof(v), fmt, ap);
    va_end(ap);
    if (rc == 0)
        voxml_attr(x, name, v);
}

void voxml_text(voxml *x, const char *text)
{
    if (!x->failed && text)
        check(x, xmlTextWriterWriteString(x->w, (const xmlChar *)text));
}

void voxml_element(voxml *x, const char *name, const char *text)
{
    voxml_start(x, name);
    voxml_text(x, text);
    voxml_end(x);
}

void voxml_elementf(voxml *x, const char *name, const char *fmt, ...)
{
    char v[512];
    va_list ap;
    va_start(ap, fmt);
    int rc = vformat(x, v, sizeof(v), fmt, ap);
    va_end(ap);
    if (rc == 0)
        voxml_element(x, name, v);
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
