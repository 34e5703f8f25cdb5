/* Image references, parsed and normalised like distribution/reference (the
 * grammar containerd and kubelet use):
 *
 *   reference := name [ ":" tag ] [ "@" digest ]
 *   name      := [ domain "/" ] path-component ( "/" path-component )*
 *   domain    := host [ ":" port ]          (host: DNS labels or [IPv6])
 *   component := [a-z0-9]+ ( separator [a-z0-9]+ )*, separator := [_.] | "__" | "-"+
 *   tag       := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
 *   digest    := "sha256:" 64 lowercase hex
 *
 * The first component is a domain when it contains '.' or ':', is
 * "localhost", or has an upper-case letter. No domain means docker.io, and a
 * single-component docker.io path gets "library/". Pure: no I/O. */
#include <ctype.h>
#include <string.h>

#include "image/image.h"

#define NAME_MAX_LEN 255

bool image_digest_valid(const char *s)
{
    if (!s || strncmp(s, "sha256:", 7) != 0)
        return false;
    s += 7;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return s[64] == '\0';
}

static bool is_alnum_lower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

static bool path_component_valid(const char *s, size_t len)
{
    if (len == 0 || !is_alnum_lower(s[0]) || !is_alnum_lower(s[len - 1]))
        return false;
    for (size_t i = 0; i < len;) {
        if (is_alnum_lower(s[i])) {
            i++;
            continue;
        }
        /* a separator: "_", "__", "." or "-"+, followed by an alnum */
        size_t j = i;
        if (s[i] == '.') {
            j++;
        } else if (s[i] == '_') {
            j++;
            if (j < len && s[j] == '_')
                j++;
        } else if (s[i] == '-') {
            while (j < len && s[j] == '-')
                j++;
        } else {
            return false;
        }
        if (j >= len || !is_alnum_lower(s[j]))
            return false;
        i = j;
    }
    return true;
}

static bool domain_label_valid(const char *s, size_t len)
{
    if (len == 0 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[len - 1]))
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-')
            return false;
    return true;
}

static bool domain_valid(const char *s, size_t len)
{
    size_t hostlen = len;
    const char *colon = NULL;
    if (len > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (!close || close == s + 1)
            return false;
        for (const char *p = s + 1; p < close; p++)
            if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.')
                return false;
        hostlen = (size_t)(close - s) + 1;
        if (hostlen < len) {
            if (s[hostlen] != ':')
                return false;
            colon = s + hostlen;
        }
    } else {
        colon = memchr(s, ':', len);
        if (colon)
            hostlen = (size_t)(colon - s);
        for (size_t i = 0, start = 0; i <= hostlen; i++) {
            if (i == hostlen || s[i] == '.') {
                if (!domain_label_valid(s + start, i - start))
                    return false;
                start = i + 1;
            }
        }
    }
    if (colon) {
        size_t plen = len - (size_t)(colon - s) - 1;
        if (plen == 0 || plen > 5)
            return false;
        for (size_t i = 0; i < plen; i++)
            if (!isdigit((unsigned char)colon[1 + i]))
                return false;
    }
    return true;
}

static bool tag_valid(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len > 128)
        return false;
    if (!isalnum((unsigned char)s[0]) && s[0] != '_')
        return false;
    for (size_t i = 1; i < len; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
            return false;
    return true;
}

void image_ref_clear(struct image_ref *ref)
{
    if (!ref)
        return;
    free(ref->domain);
    free(ref->path);
    free(ref->tag);
    free(ref->digest);
    *ref = (struct image_ref){0};
}

static int fail(struct err *err, const char *s, const char *why)
{
    return err_set(err, EINVAL, "invalid image reference `%.200s`: %s", s, why);
}

int image_ref_parse(const char *s, struct image_ref *ret, struct err *err)
{
    struct image_ref r = {0};
    if (!s || !*s)
        return err_set(err, EINVAL, "invalid image reference: empty");
    size_t total = strnlen(s, IMAGE_REF_MAX + 1);
    if (total > IMAGE_REF_MAX)
        return err_set(err, EINVAL, "invalid image reference: longer than %d bytes", IMAGE_REF_MAX);

    _cleanup_free_ char *copy = strdup(s);
    if (!copy)
        return err_set(err, ENOMEM, "parse image reference");

    /* digest */
    char *at = strchr(copy, '@');
    if (at) {
        *at = '\0';
        if (!image_digest_valid(at + 1)) {
            if (strncmp(at + 1, "sha256:", 7) != 0)
                return fail(err, s, "unsupported digest algorithm (only sha256)");
            return fail(err, s, "digest is not 64 lowercase hex digits");
        }
    }
    /* tag: a ':' after the last '/' */
    char *slash = strrchr(copy, '/');
    char *colon = strrchr(slash ? slash : copy, ':');
    if (colon) {
        *colon = '\0';
        if (!tag_valid(colon + 1))
            return fail(err, s, "invalid tag");
    }
    char *name = copy;
    if (!*name)
        return fail(err, s, "missing repository name");
    if (strlen(name) > NAME_MAX_LEN)
        return fail(err, s, "repository name longer than 255 bytes");

    /* domain */
    const char *domain = "docker.io";
    char *path = name;
    char *first_slash = strchr(name, '/');
    if (first_slash) {
        size_t flen = (size_t)(first_slash - name);
        bool has_upper = false;
        for (size_t i = 0; i < flen; i++)
            if (isupper((unsigned char)name[i]))
                has_upper = true;
        if (memchr(name, '.', flen) || memchr(name, ':', flen) || memchr(name, '[', flen) ||
            (flen == 9 && memcmp(name, "localhost", 9) == 0) || has_upper) {
            if (!domain_valid(name, flen))
                return fail(err, s, "invalid registry host");
            *first_slash = '\0';
            domain = name;
            path = first_slash + 1;
        }
    }
    if (strcmp(domain, "index.docker.io") == 0)
        domain = "docker.io";

    /* path components */
    for (const char *p = path;;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        for (size_t i = 0; i < len; i++)
            if (isupper((unsigned char)p[i]))
                return fail(err, s, "repository name must be lowercase");
        if (!path_component_valid(p, len))
            return fail(err, s, "invalid repository name");
        if (!e)
            break;
        p = e + 1;
    }

    r.domain = strdup(domain);
    if (strcmp(domain, "docker.io") == 0 && !strchr(path, '/')) {
        if (asprintf(&r.path, "library/%s", path) < 0)
            r.path = NULL;
    } else {
        r.path = strdup(path);
    }
    if (colon)
        r.tag = strdup(colon + 1);
    else if (!at)
        r.tag = strdup("latest");
    if (at)
        r.digest = strdup(at + 1);
    if (!r.domain || !r.path || ((colon || !at) && !r.tag) || (at && !r.digest)) {
        image_ref_clear(&r);
        return err_set(err, ENOMEM, "parse image reference");
    }
    /* the limit applies to the normalised name, as in distribution */
    if (strlen(r.domain) + 1 + strlen(r.path) > NAME_MAX_LEN) {
        image_ref_clear(&r);
        return fail(err, s, "repository name longer than 255 bytes");
    }
    *ret = r;
    return 0;
}

char *image_ref_name(const struct image_ref *ref)
{
    char *s;
    if (asprintf(&s, "%s/%s", ref->domain, ref->path) < 0)
        return NULL;
    return s;
}

char *image_ref_string(const struct image_ref *ref)
{
    char *s;
    if (asprintf(&s, "%s/%s%s%s%s%s", ref->domain, ref->path, ref->tag ? ":" : "",
                 ref->tag ? ref->tag : "", ref->digest ? "@" : "",
                 ref->digest ? ref->digest : "") < 0)
        return NULL;
    return s;
}
