/* enter/recipe: the recipe's body read back (enter/proto.h), without I/O,
 * so that a unit test can feed it what kinglet builds and what it must
 * refuse. Built into kinglet-enter (musl) and into libkenter.a (for the
 * tests); plain C. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "enter/proto.h"

/* n NUL-terminated strings from *p (below end) as a NULL-terminated vector. */
static int strings(char **p, const char *end, uint32_t n, char ***ret)
{
    char **v = calloc((size_t)n + 1, sizeof(char *));
    if (!v)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        char *z = *p < end ? memchr(*p, '\0', (size_t)(end - *p)) : NULL;
        if (!z) {
            free(v);
            return -EPROTO;
        }
        v[i] = *p;
        *p = z + 1;
    }
    *ret = v;
    return 0;
}

void enter_parsed_clear(struct enter_parsed *r)
{
    free(r->args);
    free(r->env);
    r->args = r->env = NULL;
}

int enter_recipe_parse(const struct enter_recipe *h, char *body, struct enter_parsed *r)
{
    memset(r, 0, sizeof(*r));
    if (h->magic != ENTER_MAGIC || h->size > ENTER_BODY_MAX || h->n_filter > ENTER_FILTER_MAX ||
        h->n_gids > ENTER_LIST_MAX || h->n_rlimits > ENTER_LIST_MAX || h->n_args > ENTER_LIST_MAX ||
        h->n_env > ENTER_LIST_MAX || h->n_args == 0 || h->cap_last > 63 ||
        !(h->flags & ENTER_SECCOMP) != !h->n_filter)
        return -EPROTO;
    size_t fixed = (size_t)h->n_rlimits * sizeof(struct enter_rlimit) +
                   (size_t)h->n_filter * ENTER_FILTER_INSN + (size_t)h->n_gids * sizeof(uint32_t);
    if (fixed > h->size)
        return -EPROTO;
    /* The 8-byte items first (body is malloc'd), then the 4-byte ones. */
    char *p = body, *end = body + h->size;
    r->rlimits = (const struct enter_rlimit *)(void *)p;
    p += (size_t)h->n_rlimits * sizeof(struct enter_rlimit);
    r->filter = p;
    p += (size_t)h->n_filter * ENTER_FILTER_INSN;
    r->gids = (const uint32_t *)(void *)p;
    p += (size_t)h->n_gids * sizeof(uint32_t);
    char **cwd = NULL;
    int e = strings(&p, end, 1, &cwd);
    if (e < 0)
        return e;
    r->cwd = cwd[0];
    free(cwd);
    if (h->flags & ENTER_APPARMOR) {
        char **prof = NULL;
        if ((e = strings(&p, end, 1, &prof)) < 0)
            return e;
        r->apparmor = prof[0];
        free(prof);
        if (!r->apparmor[0])
            return -EPROTO;
    }
    if ((e = strings(&p, end, h->n_args, &r->args)) < 0 ||
        (e = strings(&p, end, h->n_env, &r->env)) < 0) {
        enter_parsed_clear(r);
        return e;
    }
    if (p != end || r->cwd[0] == '\0' || r->args[0][0] == '\0') {
        enter_parsed_clear(r);
        return -EPROTO; /* trailing bytes, or an empty cwd or program */
    }
    return 0;
}
