/* libFuzzer target: a DataLink ID written into XML (daemon/api/vo_xml.c).  Input: the ID's
 * bytes, as a client may send them percent-encoded.  The row DataLink writes for it (the
 * ID in a cell and in an attribute) must parse as well-formed XML (libxml2, no network),
 * and the cell must read back as voxml_clean gave it: valid UTF-8 of XML characters. */
#include "tests/fuzz/fuzz_common.h"
#include "daemon/api/vo_xml.h"

#include <libxml/parser.h>
#include <libxml/tree.h>

/* Whether s is UTF-8 of characters XML 1.0 allows (checked apart from voxml_clean). */
static int xml_utf8(const unsigned char *s)
{
    while (*s) {
        unsigned long c = *s;
        int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                  : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!len)
            return 0;
        if (len > 1)
            c &= 0x3F >> (len - 1);
        for (int i = 1; i < len; i++) {
            if ((s[i] & 0xC0) != 0x80)
                return 0;
            c = c << 6 | (s[i] & 0x3F);
        }
        if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000)
            || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF) || c == 0xFFFE || c == 0xFFFF
            || (c < 0x20 && c != '\t' && c != '\n' && c != '\r'))
            return 0;
        s += len;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *id = fz_cstr(data, size);
    char *clean = id ? voxml_clean(id) : NULL;
    voxml *x = clean ? voxml_new() : NULL;
    if (!x) {
        free(clean);
        free(id);
        return 0;
    }
    if (!xml_utf8((const unsigned char *)clean))
        __builtin_trap();
    voxml_start(x, "TABLEDATA");
    voxml_start(x, "TR");
    voxml_attr(x, "ID", id);
    voxml_element(x, "TD", id);
    voxml_end(x);
    voxml_end(x);
    size_t len = 0;
    char *doc = voxml_finish(x, &len);
    if (doc) {
        xmlDocPtr d = xmlReadMemory(doc, (int)len, "datalink.xml", NULL,
                                    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
        if (!d)
            __builtin_trap();
        xmlNodePtr td = xmlDocGetRootElement(d)->children;
        while (td && td->type != XML_ELEMENT_NODE)
            td = td->next;
        xmlChar *attr = td ? xmlGetProp(td, (const xmlChar *)"ID") : NULL;
        for (td = td ? td->children : NULL; td && td->type != XML_ELEMENT_NODE; td = td->next)
            ;
        xmlChar *text = td ? xmlNodeGetContent(td) : NULL;
        /* The writer may turn a carriage return or tab of an attribute into a reference
         * that reads back as itself; the text and the attribute are what clean gave. */
        if (!text || strcmp((const char *)text, clean) != 0 || !attr
            || strcmp((const char *)attr, clean) != 0)
            __builtin_trap();
        xmlFree(text);
        xmlFree(attr);
        xmlFreeDoc(d);
        free(doc);
    }
    free(clean);
    free(id);
    return 0;
}
