/* XML documents of the IVOA endpoints, written with libxml2's xmlTextWriter into memory. */
#ifndef TESSERA_DAEMON_API_VO_XML_H
#define TESSERA_DAEMON_API_VO_XML_H

#include <stddef.h>

/* One document being written.  Every call below after a failure (out of memory) does
 * nothing; voxml_finish then says so.  Names may carry a prefix ("uws:job"); text and
 * attribute values may be any bytes: they are written as voxml_clean makes them, then
 * escaped by the writer, so the document is well-formed XML whatever a client sent. */
typedef struct voxml voxml;

/* A copy of the NUL-terminated `text` that XML 1.0 can carry: every byte that does not
 * begin a shortest-form UTF-8 sequence of an XML Char (a C0 control other than tab,
 * newline and carriage return, a cut or overlong sequence, a surrogate, U+FFFE, U+FFFF)
 * is replaced by U+FFFD.  Returns a malloc'd string, or NULL (no memory). */
char *voxml_clean(const char *text);

/* A new document (the XML declaration written, UTF-8, indented), or NULL (no memory). */
voxml *voxml_new(void);

/* A new document with the VOTABLE 1.4 root element open (the VOTable 1.3 namespace, as
 * VOTable 1.4 keeps it), or NULL (no memory). */
voxml *voxml_votable_new(void);

/* The start of a DAL query's answer (DALI 1.1, section 4.4; DataLink, SIA): the document
 * of voxml_votable_new with its RESOURCE type="results" open, holding first, each when not
 * NULL, <INFO name="QUERY_STATUS" value=status/> and <INFO name="standardID"
 * value=standard_id/>.  NULL when out of memory. */
voxml *voxml_results_new(const char *status, const char *standard_id);

/* A VOTable INFO: <INFO name= value=/>. */
void voxml_info(voxml *x, const char *name, const char *value);

/* A VOTable PARAM of a character string: <PARAM name= datatype="char" arraysize="*"
 * value=/>. */
void voxml_char_param(voxml *x, const char *name, const char *value);

void voxml_start(voxml *x, const char *name);          /* <name ... */
void voxml_end(voxml *x);                              /* closes the innermost element */
void voxml_attr(voxml *x, const char *name, const char *value);  /* NULL value: none */
void voxml_attrf(voxml *x, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void voxml_text(voxml *x, const char *text);
/* <name>text</name>; with text NULL an empty element. */
void voxml_element(voxml *x, const char *name, const char *text);
void voxml_elementf(voxml *x, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Closes every open element and gives the document: a malloc'd NUL-terminated string
 * (*len its length), or NULL when a call failed.  Frees x in both cases. */
char *voxml_finish(voxml *x, size_t *len);

#endif
