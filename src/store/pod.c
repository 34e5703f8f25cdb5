/* store/pod: pod records as JSON files. The opaque config is base64 in the
 * record; everything read back is checked against hard limits, since a
 * record file is input that may have been damaged. */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "store/store.h"

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

bool store_id_valid(const char *id)
{
    size_t n = 0;
    for (; id[n]; n++)
        if (!((id[n] >= '0' && id[n] <= '9') || (id[n] >= 'a' && id[n] <= 'f')))
            return false;
    return n == STORE_ID_LEN;
}

int store_id_new(char ret[STORE_ID_LEN + 1])
{
    uint8_t raw[STORE_ID_LEN / 2];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(ret + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

static char *b64_encode(const uint8_t *in, size_t len)
{
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = b64chars[(v >> 18) & 63];
        out[o++] = b64chars[(v >> 12) & 63];
        out[o++] = i + 1 < len ? b64chars[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? b64chars[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

static int b64_value(char c)
{
    const char *p = c ? strchr(b64chars, c) : NULL;
    return p ? (int)(p - b64chars) : -1;
}

static int b64_decode(const char *in, uint8_t **ret, size_t *ret_len)
{
    size_t len = strlen(in);
    if (len % 4)
        return -EINVAL;
    _cleanup_free_ uint8_t *out = malloc(len / 4 * 3 + 1);
    if (!out)
        return -ENOMEM;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++) {
            /* padding only in the last two places */
            v[k] = in[i + k] == '=' && k >= 2 ? 0 : b64_value(in[i + k]);
            if (v[k] < 0)
                return -EINVAL;
        }
        bool pad2 = in[i + 2] == '=', pad3 = in[i + 3] == '=';
        if ((pad2 && !pad3) || ((pad2 || pad3) && i + 4 != len))
            return -EINVAL;
        uint32_t x =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(x >> 16);
        if (!pad2)
            out[o++] = (uint8_t)(x >> 8);
        if (!pad3)
            out[o++] = (uint8_t)x;
    }
    *ret = TAKE_PTR(out);
    *ret_len = o;
    return 0;
}

int store_pod_to_json(const struct store_pod *p, char **ret, size_t *ret_len, struct err *err)
{
    _cleanup_free_ char *cfg = b64_encode(p->config, p->config_len);
    json_t *ips = json_array();
    for (size_t i = 0; ips && i < p->nips; i++)
        json_array_append_new(ips, json_string(p->ips[i]));
    json_t *o = json_pack("{s:i,s:s,s:s,s:I,s:s,s:s,s:o,s:i,s:I,s:s?}", "version", 1, "id", p->id,
                          "state", p->state == STORE_POD_READY ? "ready" : "notready", "created",
                          (json_int_t)p->created_ns, "runtimeHandler",
                          p->runtime_handler ? p->runtime_handler : "", "config", cfg ? cfg : "",
                          "ips", ips, "initPid", (int)p->init_pid, "initStart",
                          (json_int_t)p->init_start, "cgroup", p->cgroup_path);
    if (!o || !cfg)
        return json_decref(o), err_set(err, ENOMEM, "pod record `%s`", p->id);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text)
        return err_set(err, ENOMEM, "pod record `%s`", p->id);
    *ret_len = strlen(text);
    *ret = text;
    return 0;
}

void store_pod_clear(struct store_pod *p)
{
    free(p->runtime_handler);
    free(p->config);
    free(p->cgroup_path);
    *p = (struct store_pod){0};
}

static int field_err(struct err *err, const char *field)
{
    return err_set(err, EINVAL, "pod record: field `%s` missing or invalid", field);
}

int store_pod_from_json(const char *text, size_t len, struct store_pod *ret, struct err *err)
{
    if (len > STORE_RECORD_MAX)
        return err_set(err, EINVAL, "pod record: larger than %d bytes", STORE_RECORD_MAX);
    json_error_t jerr;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return err_set(err, EINVAL, "pod record: not a JSON object: %s", jerr.text);
    }
    struct store_pod p = {0};
    int r = 0;
    const char *id = json_string_value(json_object_get(o, "id"));
    const char *state = json_string_value(json_object_get(o, "state"));
    const char *handler = json_string_value(json_object_get(o, "runtimeHandler"));
    const char *cfg = json_string_value(json_object_get(o, "config"));
    json_t *ips = json_object_get(o, "ips");
    json_t *created = json_object_get(o, "created");
    json_t *pid = json_object_get(o, "initPid");
    json_t *start = json_object_get(o, "initStart");
    json_t *cg = json_object_get(o, "cgroup");
    if (json_integer_value(json_object_get(o, "version")) != 1) {
        r = field_err(err, "version");
    } else if (!id || !store_id_valid(id)) {
        r = field_err(err, "id");
    } else if (!state || (strcmp(state, "ready") && strcmp(state, "notready"))) {
        r = field_err(err, "state");
    } else if (!handler || strlen(handler) > 256) {
        r = field_err(err, "runtimeHandler");
    } else if (!cfg || strlen(cfg) > STORE_CONFIG_MAX / 3 * 4 + 4) {
        r = field_err(err, "config");
    } else if (!json_is_array(ips) || json_array_size(ips) > 2) {
        r = field_err(err, "ips");
    } else if (!json_is_integer(created) || json_integer_value(created) < 0) {
        r = field_err(err, "created");
    } else if (!json_is_integer(pid) || json_integer_value(pid) < 0 ||
               json_integer_value(pid) > (1 << 22)) {
        r = field_err(err, "initPid");
    } else if (!json_is_integer(start) || json_integer_value(start) < 0) {
        r = field_err(err, "initStart");
    } else if (cg && !json_is_null(cg) &&
               (!json_is_string(cg) || json_string_value(cg)[0] != '/' ||
                strlen(json_string_value(cg)) > 4096 || strstr(json_string_value(cg), ".."))) {
        r = field_err(err, "cgroup");
    }
    if (r < 0) {
        json_decref(o);
        return r;
    }
    snprintf(p.id, sizeof(p.id), "%s", id);
    p.state = strcmp(state, "ready") == 0 ? STORE_POD_READY : STORE_POD_NOTREADY;
    p.created_ns = (uint64_t)json_integer_value(created);
    p.init_pid = (pid_t)json_integer_value(pid);
    p.init_start = (uint64_t)json_integer_value(start);
    for (size_t i = 0; i < json_array_size(ips); i++) {
        const char *ip = json_string_value(json_array_get(ips, i));
        uint8_t buf[16];
        if (!ip || (inet_pton(AF_INET, ip, buf) != 1 && inet_pton(AF_INET6, ip, buf) != 1)) {
            r = field_err(err, "ips");
            break;
        }
        snprintf(p.ips[p.nips++], INET6_ADDRSTRLEN, "%s", ip);
    }
    if (r == 0) {
        p.runtime_handler = strdup(handler);
        p.cgroup_path = json_is_string(cg) ? strdup(json_string_value(cg)) : NULL;
        int b = b64_decode(cfg, &p.config, &p.config_len);
        if (b == -EINVAL)
            r = field_err(err, "config");
        else if (b < 0 || !p.runtime_handler || (json_is_string(cg) && !p.cgroup_path))
            r = err_set(err, ENOMEM, "pod record");
    }
    json_decref(o);
    if (r < 0) {
        store_pod_clear(&p);
        return r;
    }
    *ret = p;
    return 0;
}

int store_pod_write(const char *dir, const char *id, const char *json, size_t len, struct err *err)
{
    if (!store_id_valid(id))
        return err_set(err, EINVAL, "pod id `%.80s`", id);
    int r = mkdir_p(dir, 0700);
    if (r < 0)
        return err_set(err, -r, "create `%s`", dir);
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s.json", dir, id);
    r = write_file_atomic(AT_FDCWD, path, json, len, 0600);
    if (r < 0)
        return err_set(err, -r, "write `%s`", path);
    return 0;
}

int store_pod_delete(const char *dir, const char *id, struct err *err)
{
    if (!store_id_valid(id))
        return err_set(err, EINVAL, "pod id `%.80s`", id);
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s.json", dir, id);
    if (unlink(path) < 0) {
        if (errno == ENOENT)
            return 0;
        return err_set(err, errno, "remove `%s`", path);
    }
    _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0)
        fsync(dfd);
    return 0;
}

void store_pods_free(struct store_pod *pods, size_t n)
{
    for (size_t i = 0; pods && i < n; i++)
        store_pod_clear(&pods[i]);
    free(pods);
}

int store_pod_load_all(const char *dir, struct store_pod **ret, size_t *ret_n, size_t *ret_bad,
                       struct err *err)
{
    *ret = NULL;
    *ret_n = 0;
    *ret_bad = 0;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : err_set(err, errno, "open `%s`", dir);
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return err_set(err, errno, "open `%s`", dir);
    }
    struct store_pod *pods = NULL;
    size_t n = 0;
    int r = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len != STORE_ID_LEN + 5 || strcmp(de->d_name + STORE_ID_LEN, ".json") != 0)
            continue; /* temporaries of interrupted writes, strangers */
        if (n >= STORE_PODS_MAX) {
            (*ret_bad)++;
            continue;
        }
        _cleanup_free_ char *text = NULL;
        size_t tlen = 0;
        struct store_pod p;
        struct err e = {0};
        if (read_file_at(dirfd(d), de->d_name, STORE_RECORD_MAX, &text, &tlen) < 0 ||
            store_pod_from_json(text, tlen, &p, &e) < 0 ||
            strncmp(p.id, de->d_name, STORE_ID_LEN) != 0) {
            if (!e.code && text)
                store_pod_clear(&p);
            (*ret_bad)++;
            continue;
        }
        struct store_pod *np = realloc(pods, (n + 1) * sizeof(*pods));
        if (!np) {
            store_pod_clear(&p);
            r = err_set(err, ENOMEM, "load pod records");
            break;
        }
        pods = np;
        pods[n++] = p;
    }
    closedir(d);
    if (r < 0) {
        store_pods_free(pods, n);
        return r;
    }
    *ret = pods;
    *ret_n = n;
    return 0;
}
