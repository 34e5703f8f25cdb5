/* cdi/registry: the spec directories read, and device nodes completed from
 * the host. Blocking: called from a create's worker. The directories are
 * read for every container that asks for a CDI device, so a spec a driver
 * rewrites between two containers is what the second one gets; nothing
 * is cached, and no watcher is needed. */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "cdi/cdi.h"

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && !strcmp(s + n - m, suffix);
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The kind of a file that did not parse, if its text shows it plainly
 * (JSON or YAML): only to tie the file's error to the requests of that
 * kind. */
static char *kind_of(const char *text, size_t len, bool yaml)
{
    json_t *j = NULL;
    if (yaml) {
        struct err e = {0};
        if (cdi_yaml_to_json(text, len, &j, &e) < 0)
            return NULL;
    } else if (!(j = json_loadb(text, len, 0, NULL))) {
        return NULL;
    }
    const char *k = json_string_value(json_object_get(j, "kind"));
    char *r = k ? strdup(k) : NULL;
    json_decref(j);
    return r;
}

/* *left: the bytes the load may still read (CDI_LOAD_MAX_BYTES in all),
 * so that a directory full of large files costs a create a bounded read;
 * -E2BIG past it. */
static int load_file(int dfd, const char *dir, const char *name, int dir_index, size_t *left,
                     struct cdi_file *f)
{
    *f = (struct cdi_file){.dir = dir_index};
    if (asprintf(&f->path, "%s/%s", dir, name) < 0) {
        f->path = NULL;
        return -ENOMEM;
    }
    bool yaml = !has_suffix(name, ".json");
    /* symlinks followed (drivers install specs as links); O_NONBLOCK: a
     * FIFO named *.json does not hang the worker */
    _cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    struct err e = {0};
    int r = 0;
    if (fd < 0 || fstat(fd, &st) < 0)
        r = err_set(&e, errno, "open");
    else if (!S_ISREG(st.st_mode))
        return 1; /* not a file: skipped */
    else if (st.st_size <= CDI_SPEC_MAX_BYTES && (uint64_t)st.st_size > *left)
        return -E2BIG;
    else if ((r = read_fd_all(fd, CDI_SPEC_MAX_BYTES, &text, &len)) < 0)
        r = err_set(&e, -r, "read");
    else if (len > *left)
        return -E2BIG; /* grew since fstat */
    if (r == 0) {
        *left -= len;
        if ((r = cdi_spec_parse(text, len, yaml, &f->spec, &e)) == -ENOMEM)
            return -ENOMEM;
    }
    if (r < 0) {
        if (!(f->error = strdup(err_str(&e))))
            return -ENOMEM;
        if (text)
            f->kind = kind_of(text, len, yaml);
    }
    return 0;
}

static int load_dir(const char *dir, int dir_index, size_t *left, struct cdi_registry *reg,
                    struct err *err)
{
    _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT || errno == ENOTDIR
                   ? 0
                   : err_set(err, errno, "CDI spec directory `%s`", dir);
    int dup_fd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        return err_set(err, errno, "CDI spec directory `%s`", dir);
    }
    char **names = NULL;
    size_t n = 0;
    int r = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.' ||
            !(has_suffix(de->d_name, ".json") || has_suffix(de->d_name, ".yaml") ||
              has_suffix(de->d_name, ".yml")))
            continue;
        if (n >= CDI_FILES_MAX) {
            r = err_set_msg(err, E2BIG, "CDI spec directory `%s`: more than %d spec files", dir,
                            CDI_FILES_MAX);
            goto out;
        }
        char **nv = realloc(names, (n + 1) * sizeof(*names));
        if (!nv || !(nv[n] = strdup(de->d_name))) {
            if (nv)
                names = nv;
            r = err_set(err, ENOMEM, "CDI");
            goto out;
        }
        names = nv;
        n++;
    }
    /* a stable order: the reference's, by name */
    if (n)
        qsort(names, n, sizeof(*names), name_cmp);
    for (size_t i = 0; i < n; i++) {
        struct cdi_file *nf = realloc(reg->files, (reg->n + 1) * sizeof(*nf));
        if (!nf) {
            r = err_set(err, ENOMEM, "CDI");
            goto out;
        }
        reg->files = nf;
        int lr = load_file(dfd, dir, names[i], dir_index, left, &reg->files[reg->n]);
        if (lr == 0) {
            reg->n++;
        } else {
            struct cdi_file *f = &reg->files[reg->n];
            free(f->path);
            free(f->error);
            free(f->kind);
            json_decref(f->spec);
            if (lr == -E2BIG) {
                r = err_set_msg(err, E2BIG,
                                "CDI spec directories: more than %u MiB of spec files to read "
                                "(at `%s/%s`)",
                                CDI_LOAD_MAX_BYTES >> 20, dir, names[i]);
                goto out;
            }
            if (lr < 0) {
                r = err_set(err, -lr, "CDI spec `%s/%s`", dir, names[i]);
                goto out;
            }
        }
    }
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(d);
    return r;
}

int cdi_registry_load(const char *const *dirs, size_t n_dirs, struct cdi_registry *ret,
                      struct err *err)
{
    *ret = (struct cdi_registry){0};
    size_t left = CDI_LOAD_MAX_BYTES;
    for (size_t i = 0; i < n_dirs; i++) {
        int r = load_dir(dirs[i], (int)i, &left, ret, err);
        if (r < 0) {
            cdi_registry_clear(ret);
            return r;
        }
    }
    return 0;
}

void cdi_registry_clear(struct cdi_registry *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->files[i].path);
        free(r->files[i].error);
        free(r->files[i].kind);
        json_decref(r->files[i].spec);
    }
    free(r->files);
    *r = (struct cdi_registry){0};
}

static int fill_node(json_t *dn, struct err *err)
{
    const char *path = json_string_value(json_object_get(dn, "path"));
    const char *host = json_string_value(json_object_get(dn, "hostPath"));
    if (!host || !*host) {
        host = path;
        if (json_object_set_new(dn, "hostPath", json_string(path)) < 0)
            return err_set(err, ENOMEM, "CDI");
    }
    const char *type = json_string_value(json_object_get(dn, "type"));
    json_int_t major = json_integer_value(json_object_get(dn, "major"));
    if (type && *type && (major != 0 || !strcmp(type, "p")))
        return 0;
    struct stat st;
    if (stat(host, &st) < 0)
        return err_set(err, errno, "CDI host device `%s`", host);
    const char *htype = S_ISCHR(st.st_mode)    ? "c"
                        : S_ISBLK(st.st_mode)  ? "b"
                        : S_ISFIFO(st.st_mode) ? "p"
                                               : NULL;
    if (!htype)
        return err_set_msg(err, ENODEV, "CDI host device `%s` is not a device node", host);
    if (type && *type && strcmp(type, htype) && !(!strcmp(type, "u") && !strcmp(htype, "c")))
        return err_set_msg(err, EINVAL,
                           "CDI device `%s`: type `%s`, but the host node `%s` is `%s`", path, type,
                           host, htype);
    if (!type || !*type)
        json_object_set_new(dn, "type", json_string(htype));
    if (strcmp(htype, "p") && major == 0) {
        json_object_set_new(dn, "major", json_integer(major(st.st_rdev)));
        if (!json_integer_value(json_object_get(dn, "minor")))
            json_object_set_new(dn, "minor", json_integer(minor(st.st_rdev)));
    }
    if (!json_object_get(dn, "fileMode") || json_is_null(json_object_get(dn, "fileMode")))
        json_object_set_new(dn, "fileMode", json_integer(st.st_mode & 0777));
    return 0;
}

int cdi_edits_fill(json_t *edits, struct err *err)
{
    size_t i, k;
    json_t *e, *dn;
    json_array_foreach(edits, i, e)
    {
        json_array_foreach(json_object_get(e, "deviceNodes"), k, dn)
        {
            int r = fill_node(dn, err);
            if (r < 0)
                return r;
        }
    }
    return 0;
}
