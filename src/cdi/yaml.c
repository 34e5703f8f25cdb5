/* cdi/yaml: a YAML document -> JSON, through libyaml's event parser (pure).
 * What CDI spec writers emit: mappings, sequences, scalars. Aliases are
 * refused (a spec has no use for them, and they are how a small document
 * expands a thousandfold), so are more than one document and nesting past
 * YAML_DEPTH_MAX. A plain (unquoted) scalar is typed as YAML 1.1 does,
 * which is what the reference Go parser does: null, booleans, integers
 * (0644 and 0o644 octal, 0x hex), floats; anything quoted is a string. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "cdi/cdi.h"

#define YAML_DEPTH_MAX 64

static bool is_one_of(const char *s, const char *const *v)
{
    for (; *v; v++)
        if (!strcmp(s, *v))
            return true;
    return false;
}

/* A plain scalar's value. NULL: no memory. */
static json_t *plain_scalar(const char *s)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", "yes", "Yes",
                                        "YES",  "on",   "On",   "ON",  NULL};
    static const char *const falses[] = {"false", "False", "FALSE", "no",  "No",
                                         "NO",    "off",   "Off",   "OFF", NULL};
    if (is_one_of(s, nulls))
        return json_null();
    if (is_one_of(s, trues))
        return json_true();
    if (is_one_of(s, falses))
        return json_false();
    const char *p = s;
    bool neg = false;
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    int base = 10;
    const char *digits = p;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        base = 16, digits = p + 2;
    else if (p[0] == '0' && p[1] == 'o')
        base = 8, digits = p + 2;
    else if (p[0] == '0' && p[1])
        base = 8, digits = p + 1;
    if (*digits && digits[strspn(digits, base == 16  ? "0123456789abcdefABCDEF"
                                         : base == 8 ? "01234567"
                                                     : "0123456789")] == '\0') {
        errno = 0;
        char *end;
        unsigned long long v = strtoull(digits, &end, base);
        if (errno == 0 && !*end && v <= (unsigned long long)INT64_MAX)
            return json_integer(neg ? -(json_int_t)v : (json_int_t)v);
    }
    /* a float: digits with a '.' or an exponent, all of it */
    if (strpbrk(s, ".eE") && strpbrk(s, "0123456789")) {
        char *end;
        errno = 0;
        double d = strtod(s, &end);
        if (!*end && errno == 0 && !strpbrk(s, "xXnN"))
            return json_real(d);
    }
    return json_string(s);
}

struct frame {
    json_t *node; /* a mapping or a sequence */
    char *key;    /* a mapping's pending key */
};

/* Puts v (owned) into the innermost container, or makes it the document. */
static int put(struct frame *st, size_t depth, json_t **doc, json_t *v, struct err *err,
               const yaml_event_t *ev)
{
    if (!v)
        return err_set(err, ENOMEM, "YAML");
    if (depth == 0) {
        *doc = v;
        return 0;
    }
    struct frame *f = &st[depth - 1];
    if (json_is_array(f->node))
        return json_array_append_new(f->node, v) < 0 ? err_set(err, ENOMEM, "YAML") : 0;
    if (!f->key) {
        /* a key: only scalars */
        const char *k = json_string_value(v);
        char buf[32];
        if (!k && json_is_integer(v)) {
            snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
            k = buf;
        }
        if (!k) {
            json_decref(v);
            return err_set_msg(err, EINVAL, "line %zu: a mapping key must be a string",
                               ev->start_mark.line + 1);
        }
        f->key = strdup(k);
        json_decref(v);
        return f->key ? 0 : err_set(err, ENOMEM, "YAML");
    }
    if (json_object_get(f->node, f->key)) {
        int r = err_set_msg(err, EINVAL, "line %zu: key `%.64s` appears twice",
                            ev->start_mark.line + 1, f->key);
        json_decref(v);
        return r;
    }
    int r = json_object_set_new(f->node, f->key, v);
    free(f->key);
    f->key = NULL;
    return r < 0 ? err_set(err, ENOMEM, "YAML") : 0;
}

int cdi_yaml_to_json(const char *text, size_t len, json_t **ret, struct err *err)
{
    yaml_parser_t p;
    struct frame st[YAML_DEPTH_MAX];
    size_t depth = 0, docs = 0;
    json_t *doc = NULL;
    int r = 0;
    *ret = NULL;
    if (!yaml_parser_initialize(&p))
        return err_set(err, ENOMEM, "YAML parser");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    for (bool done = false; !done && r >= 0;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            r = p.error == YAML_MEMORY_ERROR
                    ? err_set(err, ENOMEM, "YAML")
                    : err_set_msg(err, EINVAL, "not YAML: line %zu: %.200s",
                                  p.problem_mark.line + 1, p.problem ? p.problem : "error");
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1)
                r = err_set_msg(err, EINVAL, "line %zu: more than one YAML document",
                                ev.start_mark.line + 1);
            break;
        case YAML_ALIAS_EVENT:
            r = err_set_msg(err, EINVAL, "line %zu: YAML aliases are not supported",
                            ev.start_mark.line + 1);
            break;
        case YAML_SCALAR_EVENT: {
            const char *s = (const char *)ev.data.scalar.value;
            if (strlen(s) != ev.data.scalar.length) {
                r = err_set_msg(err, EINVAL, "line %zu: a NUL byte in a scalar",
                                ev.start_mark.line + 1);
                break;
            }
            const char *tag = (const char *)ev.data.scalar.tag;
            bool str = !ev.data.scalar.plain_implicit || (tag && !strcmp(tag, YAML_STR_TAG));
            r = put(st, depth, &doc, str ? json_string(s) : plain_scalar(s), err, &ev);
            break;
        }
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT: {
            if (depth >= YAML_DEPTH_MAX) {
                r = err_set_msg(err, EINVAL, "line %zu: nested deeper than %d",
                                ev.start_mark.line + 1, YAML_DEPTH_MAX);
                break;
            }
            json_t *n = ev.type == YAML_SEQUENCE_START_EVENT ? json_array() : json_object();
            if (!n) {
                r = err_set(err, ENOMEM, "YAML");
                break;
            }
            /* a mapping as a key is refused by put */
            if (depth > 0 && json_is_object(st[depth - 1].node) && !st[depth - 1].key) {
                json_decref(n);
                r = err_set_msg(err, EINVAL, "line %zu: a mapping key must be a string",
                                ev.start_mark.line + 1);
                break;
            }
            json_incref(n);
            if ((r = put(st, depth, &doc, n, err, &ev)) < 0) {
                json_decref(n);
                break;
            }
            st[depth++] = (struct frame){.node = n};
            json_decref(n); /* the parent (or doc) holds it */
            break;
        }
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            depth--;
            free(st[depth].key);
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
    }
    while (depth > 0)
        free(st[--depth].key);
    yaml_parser_delete(&p);
    if (r < 0) {
        json_decref(doc);
        return r;
    }
    if (!doc)
        return err_set_msg(err, EINVAL, "an empty YAML document");
    *ret = doc;
    return 0;
}
