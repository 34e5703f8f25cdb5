/* The progress display of `kinglet image pull` on a terminal, for both back
 * ends: one line per layer of the pulls under way (and one for a pull that
 * waits for another caller's), redrawn in place (the cursor goes up over
 * the lines drawn last). Steps may come from any thread (the direct back
 * end's job threads); a pull's result is printed below its lines, under
 * the same lock, so that a redraw never runs over it. */
#include <pthread.h>
#include <string.h>

#include "image/internal.h"

#define ROWS_MAX 256

struct row {
    char ref[256], digest[80], phase[16];
    uint64_t bytes, total, start_ns;
};

struct image_cli_display {
    pthread_mutex_t mu;
    bool on;
    struct row rows[ROWS_MAX];
    size_t n, drawn;
};

struct image_cli_display *image_cli_display_new(void)
{
    struct image_cli_display *s = calloc(1, sizeof(*s));
    if (s)
        pthread_mutex_init(&s->mu, NULL);
    return s;
}

void image_cli_display_free(struct image_cli_display *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void image_cli_display_on(struct image_cli_display *s, bool on)
{
    pthread_mutex_lock(&s->mu);
    s->on = on;
    pthread_mutex_unlock(&s->mu);
}

static void draw(struct image_cli_display *s)
{
    if (s->drawn)
        printf("\033[%zuA", s->drawn);
    uint64_t now = now_mono_ns();
    for (size_t i = 0; i < s->n; i++) {
        struct row *r = &s->rows[i];
        if (!r->digest[0]) {
            printf("\r\033[K%-12s  %-11s  another pull of `%s` is under way\n", "image", r->phase,
                   r->ref);
            continue;
        }
        char got[16], total[16], rate[16] = "";
        image_size_human(r->bytes, got);
        image_size_human(r->total, total);
        double secs = (double)(now - r->start_ns) / 1e9;
        if (strcmp(r->phase, "downloading") == 0 && secs > 0.05) {
            image_size_human((uint64_t)((double)r->bytes / secs), rate);
            strcat(rate, "/s");
        }
        const char *hex = strchr(r->digest, ':');
        printf("\r\033[K%.12s  %-11s  %10s / %-10s  %s\n", hex ? hex + 1 : r->digest, r->phase, got,
               total, rate);
    }
    s->drawn = s->n;
    fflush(stdout);
}

void image_cli_display_step(void *data, const struct image_progress *p)
{
    struct image_cli_display *s = data;
    const char *digest = p->digest ? p->digest : "";
    pthread_mutex_lock(&s->mu);
    if (!s->on) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    struct row *r = NULL;
    for (size_t i = 0; i < s->n && !r; i++)
        if (strcmp(s->rows[i].digest, digest) == 0 && strcmp(s->rows[i].ref, p->ref) == 0)
            r = &s->rows[i];
    if (!r && s->n < ROWS_MAX) {
        r = &s->rows[s->n++];
        *r = (struct row){.start_ns = now_mono_ns()};
        snprintf(r->ref, sizeof(r->ref), "%s", p->ref);
        snprintf(r->digest, sizeof(r->digest), "%s", digest);
    }
    if (r) {
        snprintf(r->phase, sizeof(r->phase), "%s", p->phase);
        r->bytes = p->bytes;
        r->total = p->total;
        draw(s);
    }
    pthread_mutex_unlock(&s->mu);
}

void image_cli_display_pulled(struct image_cli_display *s, const char *ref,
                              image_cli_pulled_fn done, void *data, int r, const struct err *err,
                              const char *image_id)
{
    pthread_mutex_lock(&s->mu);
    if (s->on) {
        /* ref's lines stay as drawn last, the result goes below them */
        size_t k = 0;
        for (size_t i = 0; i < s->n; i++)
            if (strcmp(s->rows[i].ref, ref) != 0)
                s->rows[k++] = s->rows[i];
        s->n = k;
        s->drawn = 0;
    }
    done(data, ref, r, err, image_id);
    pthread_mutex_unlock(&s->mu);
}
