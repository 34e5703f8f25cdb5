/* net/nl: netlink over libmnl (rtnetlink, and nfnetlink for conntrack).
 *
 * Requests are built into a batch without any I/O (so tests can inspect the
 * bytes), sent in one datagram, and every request carries NLM_F_ACK: the
 * kernel answers each with an NLMSG_ERROR (error 0 = ack), after any reply
 * message. The socket asks for extended acks (NETLINK_EXT_ACK) and capped
 * acks (NETLINK_CAP_ACK), so a failure comes back with the kernel's own
 * explanation ("Unknown device type", "Invalid prefix for given prefix
 * length", ...) which lands in the error message. */
#include <assert.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <string.h>
#include <sys/socket.h>

#include "net/internal.h"

#ifndef NETLINK_EXT_ACK
#define NETLINK_EXT_ACK 11
#endif
#ifndef NETLINK_CAP_ACK
#define NETLINK_CAP_ACK 10
#endif

struct nl {
    struct mnl_socket *sock;
    uint32_t portid;
    uint32_t seq;
};

/* ---- batches ------------------------------------------------------------ */

void nl_batch_init(struct nl_batch *b)
{
    b->len = 0;
    b->nmsgs = 0;
}

struct nlmsghdr *nl_batch_begin(struct nl_batch *b, uint16_t type, uint16_t flags)
{
    if (b->nmsgs >= NL_BATCH_MSGS || sizeof(b->buf) - b->len < NL_BATCH_MSG_MAX)
        return NULL;
    memset(b->buf + b->len, 0, NL_BATCH_MSG_MAX);
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(b->buf + b->len);
    nlh->nlmsg_type = type;
    nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    return nlh;
}

void nl_batch_end(struct nl_batch *b, struct nlmsghdr *nlh)
{
    b->len += MNL_ALIGN(nlh->nlmsg_len);
    b->nmsgs++;
}

const struct nlmsghdr *nl_batch_msg(const struct nl_batch *b, unsigned i)
{
    const uint8_t *p = b->buf;
    size_t left = b->len;
    for (unsigned k = 0; k < b->nmsgs; k++) {
        const struct nlmsghdr *nlh = (const struct nlmsghdr *)p;
        if (!mnl_nlmsg_ok(nlh, (int)left))
            return NULL;
        if (k == i)
            return nlh;
        p += MNL_ALIGN(nlh->nlmsg_len);
        left -= MNL_ALIGN(nlh->nlmsg_len);
    }
    return NULL;
}

/* ---- replies ------------------------------------------------------------ */

static void record_error(struct nl_reply_state *st, int code, uint32_t seq)
{
    unsigned i = seq - st->seq_first;
    if (st->res && i < NL_BATCH_MSGS)
        st->res->errors[i] = code;
    if (st->first_error)
        return;
    st->first_error = code;
    st->first_error_index = i;
}

/* Extended ack TLVs after the nlmsgerr of an error message. */
static void parse_ext_ack(const struct nlmsghdr *nlh, const struct nlmsgerr *e, char *out,
                          size_t outsize)
{
    if (!(nlh->nlmsg_flags & NLM_F_ACK_TLVS))
        return;
    size_t off = sizeof(*e);
    if (!(nlh->nlmsg_flags & NLM_F_CAPPED)) {
        /* The whole original request is echoed: skip its payload. */
        size_t olen = e->msg.nlmsg_len;
        if (olen < sizeof(struct nlmsghdr) || olen > nlh->nlmsg_len)
            return;
        off += MNL_ALIGN(olen) - sizeof(struct nlmsghdr);
    }
    size_t payload = mnl_nlmsg_get_payload_len(nlh);
    if (off > payload)
        return;
    const uint8_t *p = (const uint8_t *)mnl_nlmsg_get_payload(nlh) + off;
    size_t left = payload - off;
    while (left >= sizeof(struct nlattr)) {
        const struct nlattr *a = (const struct nlattr *)p;
        if (a->nla_len < sizeof(struct nlattr) || a->nla_len > left)
            return;
        if ((a->nla_type & NLA_TYPE_MASK) == NLMSGERR_ATTR_MSG) {
            const char *s = (const char *)(a + 1);
            size_t slen = a->nla_len - sizeof(*a);
            size_t n = strnlen(s, slen);
            if (n == slen) /* not NUL-terminated: ignore */
                return;
            if (n >= outsize)
                n = outsize - 1;
            memcpy(out, s, n);
            out[n] = '\0';
            return;
        }
        size_t step = MNL_ALIGN(a->nla_len);
        if (step > left)
            return;
        p += step;
        left -= step;
    }
}

/* Not mnl_nlmsg_ok/mnl_nlmsg_next: they compare (int)nlmsg_len, so a
 * length above INT_MAX passes as negative and the next step jumps gigabytes
 * (found by tests/fuzz/fuzz_nl_reply). */
static bool msg_ok(const struct nlmsghdr *nlh, size_t left)
{
    return left >= sizeof(*nlh) && nlh->nlmsg_len >= sizeof(*nlh) && nlh->nlmsg_len <= left;
}

static const struct nlmsghdr *msg_next(const struct nlmsghdr *nlh, size_t *left)
{
    size_t step = MNL_ALIGN((size_t)nlh->nlmsg_len);
    if (step >= *left) {
        *left = 0;
        return nlh;
    }
    *left -= step;
    return (const struct nlmsghdr *)((const uint8_t *)nlh + step);
}

int nl_reply_parse(const void *buf, size_t len, struct nl_reply_state *st, nl_msg_cb cb, void *data)
{
    const struct nlmsghdr *nlh = buf;
    size_t left = len;
    if (left > 0 && !msg_ok(nlh, left))
        return -EBADMSG;
    for (; msg_ok(nlh, left); nlh = msg_next(nlh, &left)) {
        bool ours = (nlh->nlmsg_pid == 0 || nlh->nlmsg_pid == st->portid) &&
                    nlh->nlmsg_seq >= st->seq_first && nlh->nlmsg_seq <= st->seq_last;
        if (!ours)
            continue;
        switch (nlh->nlmsg_type) {
        case NLMSG_NOOP:
            break;
        case NLMSG_DONE:
            st->done = true;
            break;
        case NLMSG_OVERRUN:
            return -EBADMSG;
        case NLMSG_ERROR: {
            if (mnl_nlmsg_get_payload_len(nlh) < sizeof(struct nlmsgerr))
                return -EBADMSG;
            const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);
            if (e->error > 0 || e->error < -4095)
                return -EBADMSG;
            st->acked++;
            if (e->error < 0) {
                unsigned i = nlh->nlmsg_seq - st->seq_first;
                if (!st->first_error)
                    parse_ext_ack(nlh, e, st->ext_msg, sizeof(st->ext_msg));
                if (st->res && i < NL_BATCH_MSGS)
                    parse_ext_ack(nlh, e, st->res->ext_msg[i], sizeof(st->res->ext_msg[i]));
                record_error(st, e->error, nlh->nlmsg_seq);
            }
            break;
        }
        default:
            if (cb) {
                int r = cb(nlh, data);
                if (r < 0)
                    return r;
            }
            break;
        }
    }
    return 0;
}

/* ---- I/O ---------------------------------------------------------------- */

struct open_args {
    int bus;
    struct nl **ret;
};

static int open_here(int bus, struct nl **ret, struct err *err)
{
    _cleanup_free_ struct nl *nl = calloc(1, sizeof(*nl));
    if (!nl)
        return err_set(err, ENOMEM, "netlink");
    nl->sock = mnl_socket_open2(bus, SOCK_CLOEXEC);
    if (!nl->sock)
        return err_set(err, errno, "open netlink socket");
    int one = 1;
    /* Extended acks exist since 4.12; without them errors have no text. */
    (void)mnl_socket_setsockopt(nl->sock, NETLINK_EXT_ACK, &one, sizeof(one));
    (void)mnl_socket_setsockopt(nl->sock, NETLINK_CAP_ACK, &one, sizeof(one));
    if (mnl_socket_bind(nl->sock, 0, MNL_SOCKET_AUTOPID) < 0) {
        int e = errno;
        mnl_socket_close(nl->sock);
        return err_set(err, e, "bind netlink socket");
    }
    nl->portid = mnl_socket_get_portid(nl->sock);
    nl->seq = 0; /* the port id already tells our replies apart */
    *ret = TAKE_PTR(nl);
    return 0;
}

static int open_cb(void *data, struct err *err)
{
    struct open_args *a = data;
    return open_here(a->bus, a->ret, err);
}

int nl_open_bus(int bus, int netns_fd, struct nl **ret, struct err *err)
{
    if (netns_fd < 0)
        return open_here(bus, ret, err);
    /* A socket belongs to the namespace it was created in. */
    struct open_args a = {bus, ret};
    return net_netns_run(netns_fd, open_cb, &a, err);
}

int nl_open(int netns_fd, struct nl **ret, struct err *err)
{
    return nl_open_bus(NETLINK_ROUTE, netns_fd, ret, err);
}

void nl_close(struct nl *nl)
{
    if (!nl)
        return;
    mnl_socket_close(nl->sock);
    free(nl);
}

int nl_transact(struct nl *nl, struct nl_batch *b, nl_msg_cb cb, void *data, struct nl_result *res,
                struct err *err)
{
    if (b->nmsgs == 0)
        return 0;
    /* Sequence numbers of a batch never wrap (the range check needs
     * first <= last). */
    if (nl->seq > UINT32_MAX - 2 * NL_BATCH_MSGS)
        nl->seq = 0;
    struct nl_reply_state st = {.portid = nl->portid, .seq_first = nl->seq + 1, .res = res};
    if (res)
        memset(res, 0, sizeof(*res));
    uint8_t *p = b->buf;
    for (unsigned i = 0; i < b->nmsgs; i++) {
        struct nlmsghdr *nlh = (struct nlmsghdr *)p;
        nlh->nlmsg_seq = ++nl->seq;
        p += MNL_ALIGN(nlh->nlmsg_len);
    }
    st.seq_last = nl->seq;
    if (mnl_socket_sendto(nl->sock, b->buf, b->len) < 0)
        return err_set(err, errno, "netlink send");
    _cleanup_free_ uint8_t *rbuf = malloc(NL_RECV_SIZE);
    if (!rbuf)
        return err_set(err, ENOMEM, "netlink");
    while (st.acked < b->nmsgs) {
        ssize_t n = mnl_socket_recvfrom(nl->sock, rbuf, NL_RECV_SIZE);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return err_set(err, errno, "netlink receive");
        }
        int r = nl_reply_parse(rbuf, (size_t)n, &st, cb, data);
        if (r == -EBADMSG)
            return err_set(err, EBADMSG, "malformed netlink reply");
        if (r < 0)
            return err_set(err, -r, "netlink reply");
    }
    if (!res && st.first_error) {
        if (st.ext_msg[0])
            return err_set(err, -st.first_error, "%s", st.ext_msg);
        return err_set(err, -st.first_error, "netlink request");
    }
    return 0;
}

int nl_send_batch(struct nl *nl, void *buf, size_t len, unsigned *ret_index, struct err *err)
{
    *ret_index = 0;
    if (len == 0)
        return 0;
    /* Number the messages; the sequence numbers of a batch never wrap. */
    uint32_t n = 0;
    for (size_t off = 0; off < len; n++) {
        struct nlmsghdr *nlh = (struct nlmsghdr *)((uint8_t *)buf + off);
        assert(msg_ok(nlh, len - off));
        off += MNL_ALIGN(nlh->nlmsg_len);
    }
    if (nl->seq > UINT32_MAX - n)
        nl->seq = 0;
    struct nl_reply_state st = {.portid = nl->portid, .seq_first = nl->seq + 1};
    for (size_t off = 0; off < len;) {
        struct nlmsghdr *nlh = (struct nlmsghdr *)((uint8_t *)buf + off);
        nlh->nlmsg_seq = ++nl->seq;
        off += MNL_ALIGN(nlh->nlmsg_len);
    }
    st.seq_last = nl->seq;
    if (mnl_socket_sendto(nl->sock, buf, len) < 0)
        return err_set(err, errno, "netlink send");
    /* The kernel runs the batch inside sendmsg(): every answer is queued
     * by now, and reading until the socket is empty collects them all. */
    _cleanup_free_ uint8_t *rbuf = malloc(NL_RECV_SIZE);
    if (!rbuf)
        return err_set(err, ENOMEM, "netlink");
    for (;;) {
        ssize_t r = recv(mnl_socket_get_fd(nl->sock), rbuf, NL_RECV_SIZE, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                break;
            /* ENOBUFS: answers were lost, which only many errors cause. */
            return err_set(err, errno, "netlink receive");
        }
        int pr = nl_reply_parse(rbuf, (size_t)r, &st, NULL, NULL);
        if (pr < 0)
            return err_set(err, -pr, "malformed netlink reply");
    }
    if (st.first_error) {
        *ret_index = st.first_error_index;
        if (st.ext_msg[0])
            return err_set(err, -st.first_error, "%s", st.ext_msg);
        return err_set(err, -st.first_error, "refused by the kernel");
    }
    if (!st.acked)
        return err_set(err, EIO, "netlink batch: no answer from the kernel");
    return 0;
}

int nl_dump(struct nl *nl, struct nl_batch *b, nl_msg_cb cb, void *data, struct err *err)
{
    assert(b->nmsgs == 1);
    if (nl->seq > UINT32_MAX - 2 * NL_BATCH_MSGS)
        nl->seq = 0;
    struct nlmsghdr *nlh = (struct nlmsghdr *)b->buf;
    nlh->nlmsg_seq = ++nl->seq;
    struct nl_reply_state st = {.portid = nl->portid, .seq_first = nl->seq, .seq_last = nl->seq};
    if (mnl_socket_sendto(nl->sock, b->buf, b->len) < 0)
        return err_set(err, errno, "netlink send");
    _cleanup_free_ uint8_t *rbuf = malloc(NL_RECV_SIZE);
    if (!rbuf)
        return err_set(err, ENOMEM, "netlink");
    while (!st.done && !st.acked) {
        ssize_t n = mnl_socket_recvfrom(nl->sock, rbuf, NL_RECV_SIZE);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return err_set(err, errno, "netlink receive");
        }
        int r = nl_reply_parse(rbuf, (size_t)n, &st, cb, data);
        if (r < 0)
            return err_set(err, -r, "netlink dump");
    }
    if (st.first_error) {
        if (st.ext_msg[0])
            return err_set(err, -st.first_error, "%s", st.ext_msg);
        return err_set(err, -st.first_error, "netlink dump");
    }
    return 0;
}

int nl_result_err(const struct nl_result *res, unsigned i, struct err *err, const char *what)
{
    assert(i < NL_BATCH_MSGS);
    if (res->errors[i] == 0)
        return 0;
    if (res->ext_msg[i][0])
        return err_set(err, -res->errors[i], "%s: %s", what, res->ext_msg[i]);
    return err_set(err, -res->errors[i], "%s", what);
}
