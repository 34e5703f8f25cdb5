/* libFuzzer: what a registry sends back, parsed (src/image/regparse.c):
 * WWW-Authenticate challenges, token answers, error bodies, and the redirect and token-realm rules
 * for credentials.
 *
 * Input: one selector byte (which parser), then its bytes. For the URL
 * rules the bytes are two URLs separated by a newline. Besides memory
 * errors, the target traps when a parser breaks its contract: a value
 * not NUL-terminated or with bytes it promised to strip, a status out of
 * range, credentials allowed to another host or over a downgrade. */
#include <string.h>

#include "image/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            __builtin_trap();
}

static void urls(const char *s)
{
    const char *nl = strchr(s, '\n');
    if (!nl)
        return;
    char from[2048], to[2048];
    size_t n = (size_t)(nl - s);
    if (n >= sizeof(from) || strlen(nl + 1) >= sizeof(to))
        return;
    memcpy(from, s, n);
    from[n] = '\0';
    strcpy(to, nl + 1);
    struct reg_url a, b;
    int ra = reg_url_split(from, &a), rb = reg_url_split(to, &b);
    if (ra == 0 && (!a.host[0] || a.port == 0 || a.port > 65535 || strlen(a.host) >= 256))
        __builtin_trap();
    for (int insecure = 0; insecure < 2; insecure++) {
        bool same = false;
        struct err err = {0};
        int r = reg_redirect_check(from, to, insecure, &same, &err);
        if (r == 0 && (ra < 0 || rb < 0))
            __builtin_trap(); /* an unusable URL was followed */
        if (r == 0 && a.https && !b.https && !insecure)
            __builtin_trap(); /* a downgrade was followed */
        if (r == 0 && same && (a.https != b.https || a.port != b.port || strcmp(a.host, b.host)))
            __builtin_trap(); /* credentials would go to another origin */
        if (r < 0 && err.code != EPROTO)
            __builtin_trap();
        bool creds = reg_realm_gets_credentials(from, to, insecure);
        if (creds && (ra < 0 || rb < 0 || (a.https && !b.https && !insecure)))
            __builtin_trap();
        if (creds && strcmp(a.host, b.host) != 0) {
            /* another host: only a sibling in the registry's parent domain */
            const char *parent = strchr(a.host, '.');
            size_t pl = parent ? strlen(parent) : 0, bl = strlen(b.host);
            if (!parent || !strchr(parent + 1, '.') ||
                !(strcmp(b.host, parent + 1) == 0 ||
                  (bl > pl && strcmp(b.host + bl - pl, parent) == 0)))
                __builtin_trap();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    unsigned sel = data[0] % 4;
    data++;
    size--;
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    switch (sel) {
    case 0: {
        struct reg_challenge c;
        reg_challenge_parse(s, &c);
        if (strnlen(c.realm, sizeof(c.realm)) == sizeof(c.realm) ||
            strnlen(c.service, sizeof(c.service)) == sizeof(c.service) ||
            strnlen(c.scope, sizeof(c.scope)) == sizeof(c.scope) || (c.basic && c.bearer))
            __builtin_trap();
        break;
    }
    case 1: {
        char *tok = NULL;
        struct err err = {0};
        if (reg_token_parse(data, size, &tok, &err) == 0) {
            if (!tok || !*tok || strchr(tok, ' '))
                __builtin_trap();
            printable(tok);
            free(tok);
        }
        break;
    }
    case 2: {
        char out[300];
        memset(out, 'x', sizeof(out));
        reg_error_message(data, size, out, sizeof(out));
        if (!memchr(out, '\0', sizeof(out)))
            __builtin_trap();
        printable(out);
        break;
    }
    case 3:
        urls(s);
        break;
    }
    free(s);
    return 0;
}
