/* getaddrinfo and freeaddrinfo through c-ares, for the static binary only.
 *
 * glibc's getaddrinfo goes through NSS: in a static binary it may dlopen
 * the host's libnss_*.so modules (systemd, mdns, ldap... whatever
 * /etc/nsswitch.conf names), built against another libc than the one
 * linked in, or find none at all on a node that has no /usr/lib. Linked
 * before libc.a, these two definitions replace glibc's (its getaddrinfo.o
 * defines nothing else, so it is never pulled in): every resolution in the
 * binary, libcurl's threaded resolver included, reads /etc/hosts and
 * /etc/resolv.conf through c-ares and asks the name servers itself. The
 * default build keeps glibc's (this file is not built there), with
 * whatever NSS modules the system has.
 *
 * Blocking, like getaddrinfo: callers run it off the event loop (libcurl
 * in its resolver thread, inside the pull helper process). Numeric hosts
 * and ports are parsed here without c-ares; service names are not looked
 * up (no /etc/services through NSS either): EAI_SERVICE. */
#include <ares.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* One allocation per answer: the addrinfo, its address and its name. */
struct node {
    struct addrinfo ai;
    struct sockaddr_storage addr;
};

void freeaddrinfo(struct addrinfo *ai)
{
    while (ai) {
        struct addrinfo *next = ai->ai_next;
        free(ai->ai_canonname);
        free(ai); /* the struct node that holds it */
        ai = next;
    }
}

static int append(struct addrinfo ***tail, const struct sockaddr *sa, socklen_t len, int socktype,
                  int protocol)
{
    struct node *n = calloc(1, sizeof(*n));
    if (!n)
        return EAI_MEMORY;
    memcpy(&n->addr, sa, len);
    n->ai.ai_family = sa->sa_family;
    n->ai.ai_socktype = socktype;
    n->ai.ai_protocol = protocol;
    n->ai.ai_addrlen = len;
    n->ai.ai_addr = (struct sockaddr *)&n->addr;
    **tail = &n->ai;
    *tail = &n->ai.ai_next;
    return 0;
}

/* The socket types an answer is repeated for, as glibc does when the
 * hints name none. */
static int add_addr(struct addrinfo ***tail, const struct sockaddr *sa, socklen_t len,
                    const struct addrinfo *hints)
{
    static const int types[][2] = {{SOCK_STREAM, IPPROTO_TCP}, {SOCK_DGRAM, IPPROTO_UDP}};
    for (size_t i = 0; i < 2; i++) {
        if (hints->ai_socktype && hints->ai_socktype != types[i][0])
            continue;
        if (hints->ai_protocol && hints->ai_protocol != types[i][1])
            continue;
        int r = append(tail, sa, len, types[i][0], types[i][1]);
        if (r)
            return r;
    }
    if (hints->ai_socktype && hints->ai_socktype != SOCK_STREAM && hints->ai_socktype != SOCK_DGRAM)
        return append(tail, sa, len, hints->ai_socktype, hints->ai_protocol);
    return 0;
}

static int parse_port(const char *service, int flags, unsigned *ret)
{
    if (!service) {
        *ret = 0;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long p = strtoul(service, &end, 10);
    if (!*service || *end || errno || p > 65535)
        return EAI_SERVICE; /* no service names: they would go through NSS */
    *ret = (unsigned)p;
    return 0;
}

/* A literal address (IPv6 with an optional numeric scope). */
static int numeric(const char *node, unsigned port, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    if (inet_pton(AF_INET, node, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons(port);
        *len = sizeof(*in);
        return 1;
    }
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    char buf[INET6_ADDRSTRLEN + 16];
    const char *pct = strchr(node, '%');
    size_t n = pct ? (size_t)(pct - node) : strlen(node);
    if (n >= sizeof(buf))
        return 0;
    memcpy(buf, node, n);
    buf[n] = '\0';
    if (inet_pton(AF_INET6, buf, &in6->sin6_addr) != 1)
        return 0;
    if (pct) {
        char *end;
        unsigned long scope = strtoul(pct + 1, &end, 10);
        if (!pct[1] || *end)
            return 0; /* interface names would need if_nametoindex: numeric only */
        in6->sin6_scope_id = (uint32_t)scope;
    }
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    *len = sizeof(*in6);
    return 1;
}

static int ares_to_eai(int status)
{
    switch (status) {
    case ARES_ENOTFOUND:
    case ARES_ENONAME:
        return EAI_NONAME;
    case ARES_ENODATA:
        return EAI_NODATA;
    case ARES_ENOMEM:
        return EAI_MEMORY;
    case ARES_EBADFAMILY:
        return EAI_FAMILY;
    case ARES_ETIMEOUT:
    case ARES_ECONNREFUSED:
    case ARES_ESERVFAIL:
        return EAI_AGAIN;
    default:
        return EAI_FAIL;
    }
}

struct query {
    int status;
    struct ares_addrinfo *res;
};

static void done(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
    struct query *q = arg;
    q->status = status;
    q->res = res;
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_status;
static void init(void) { init_status = ares_library_init(ARES_LIB_INIT_ALL); }

/* Runs the query to its end on a channel of its own (a fresh read of
 * /etc/resolv.conf and /etc/hosts, as glibc does on change). */
static int lookup(const char *node, const struct addrinfo *hints, struct ares_addrinfo **ret)
{
    pthread_once(&init_once, init);
    if (init_status != ARES_SUCCESS)
        return EAI_FAIL;
    ares_channel ch;
    struct ares_options opts = {.flags = ARES_FLAG_NOCHECKRESP};
    int s = ares_init_options(&ch, &opts, ARES_OPT_FLAGS);
    if (s != ARES_SUCCESS)
        return s == ARES_ENOMEM ? EAI_MEMORY : EAI_FAIL;
    struct ares_addrinfo_hints ah = {
        .ai_family = hints->ai_family,
        .ai_socktype = hints->ai_socktype,
        .ai_protocol = hints->ai_protocol,
        .ai_flags = (hints->ai_flags & AI_CANONNAME) ? ARES_AI_CANONNAME : 0,
    };
    struct query q = {.status = -1};
    ares_getaddrinfo(ch, node, NULL, &ah, done, &q);
    while (q.status == -1) {
        ares_socket_t socks[ARES_GETSOCK_MAXNUM];
        int bits = ares_getsock(ch, socks, ARES_GETSOCK_MAXNUM);
        struct pollfd pfd[ARES_GETSOCK_MAXNUM];
        nfds_t n = 0;
        for (int i = 0; i < ARES_GETSOCK_MAXNUM; i++) {
            short ev = (short)((ARES_GETSOCK_READABLE(bits, i) ? POLLIN : 0) |
                               (ARES_GETSOCK_WRITABLE(bits, i) ? POLLOUT : 0));
            if (ev)
                pfd[n++] = (struct pollfd){.fd = socks[i], .events = ev};
        }
        struct timeval tv, *tvp = ares_timeout(ch, NULL, &tv);
        int ms = tvp ? (int)(tvp->tv_sec * 1000 + (tvp->tv_usec + 999) / 1000) : 1000;
        int pr = poll(pfd, n, ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            break; /* ares_destroy ends the query */
        if (pr == 0) {
            ares_process_fd(ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD); /* timeouts, retries */
            continue;
        }
        for (nfds_t i = 0; i < n; i++) {
            if (!pfd[i].revents)
                continue;
            ares_process_fd(
                ch, (pfd[i].revents & (POLLIN | POLLERR | POLLHUP)) ? pfd[i].fd : ARES_SOCKET_BAD,
                (pfd[i].revents & POLLOUT) ? pfd[i].fd : ARES_SOCKET_BAD);
        }
    }
    ares_destroy(ch); /* runs the callback with ARES_EDESTRUCTION if still pending */
    if (q.status != ARES_SUCCESS) {
        if (q.res)
            ares_freeaddrinfo(q.res);
        return ares_to_eai(q.status);
    }
    *ret = q.res;
    return 0;
}

int getaddrinfo(const char *restrict node, const char *restrict service,
                const struct addrinfo *restrict hints_, struct addrinfo **restrict ret)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC};
    if (hints_)
        hints = *hints_;
    if (!node && !service)
        return EAI_NONAME;
    if (hints.ai_family != AF_UNSPEC && hints.ai_family != AF_INET && hints.ai_family != AF_INET6)
        return EAI_FAMILY;
    unsigned port;
    int r = parse_port(service, hints.ai_flags, &port);
    if (r)
        return r;

    struct addrinfo *head = NULL, **tail = &head;
    struct sockaddr_storage ss;
    socklen_t len;
    if (!node) {
        /* the wildcard (AI_PASSIVE) or loopback address */
        bool passive = hints.ai_flags & AI_PASSIVE;
        if (hints.ai_family != AF_INET) {
            struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
            in6.sin6_addr = passive ? in6addr_any : in6addr_loopback;
            r = add_addr(&tail, (struct sockaddr *)&in6, sizeof(in6), &hints);
        }
        if (!r && hints.ai_family != AF_INET6) {
            struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(port)};
            in.sin_addr.s_addr = htonl(passive ? INADDR_ANY : INADDR_LOOPBACK);
            r = add_addr(&tail, (struct sockaddr *)&in, sizeof(in), &hints);
        }
    } else if (numeric(node, port, &ss, &len)) {
        if (hints.ai_family != AF_UNSPEC && hints.ai_family != ss.ss_family)
            return EAI_ADDRFAMILY;
        r = add_addr(&tail, (struct sockaddr *)&ss, len, &hints);
    } else if (hints.ai_flags & AI_NUMERICHOST) {
        return EAI_NONAME;
    } else {
        struct ares_addrinfo *res = NULL;
        r = lookup(node, &hints, &res);
        if (r)
            return r;
        for (struct ares_addrinfo_node *n = res->nodes; n && !r; n = n->ai_next) {
            if (n->ai_family == AF_INET) {
                struct sockaddr_in in = *(struct sockaddr_in *)n->ai_addr;
                in.sin_port = htons(port);
                r = add_addr(&tail, (struct sockaddr *)&in, sizeof(in), &hints);
            } else if (n->ai_family == AF_INET6) {
                struct sockaddr_in6 in6 = *(struct sockaddr_in6 *)n->ai_addr;
                in6.sin6_port = htons(port);
                r = add_addr(&tail, (struct sockaddr *)&in6, sizeof(in6), &hints);
            }
        }
        if (!r && head && (hints.ai_flags & AI_CANONNAME)) {
            const char *cn = res->cnames && res->cnames->name ? res->cnames->name
                             : res->name                      ? res->name
                                                              : node;
            if (!(head->ai_canonname = strdup(cn)))
                r = EAI_MEMORY;
        }
        ares_freeaddrinfo(res);
        if (!r && !head)
            r = EAI_NODATA;
    }
    if (r) {
        freeaddrinfo(head);
        return r;
    }
    if (!head)
        return EAI_SOCKTYPE;
    if (!node && (hints.ai_flags & AI_CANONNAME))
        return freeaddrinfo(head), EAI_BADFLAGS;
    if (node && (hints.ai_flags & AI_CANONNAME) && !head->ai_canonname &&
        !(head->ai_canonname = strdup(node))) {
        freeaddrinfo(head);
        return EAI_MEMORY;
    }
    *ret = head;
    return 0;
}
