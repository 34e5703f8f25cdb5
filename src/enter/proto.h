/* enter/proto: the recipe kinglet hands to kinglet-enter (main.c), and the
 * messages that come back. Included by both (the program is built against
 * musl, kinglet against glibc): plain C, fixed-size integers, no library
 * types.
 *
 * The channel is a SOCK_SEQPACKET socket, inherited by the program as the
 * fd named by argv[1] (the only fd it gets besides stdio and the preserved
 * ones):
 *  1. kinglet → enter: struct enter_recipe, with the container init's
 *     pidfd and, for a terminal, the console socket attached (SCM_RIGHTS);
 *  2. kinglet → enter: the body, `size` bytes in packets of at most
 *     ENTER_PACKET_MAX: rlimits, the seccomp program (struct sock_filter),
 *     gids (uint32_t), then the strings (cwd, with ENTER_APPARMOR the
 *     AppArmor profile, args, env), each NUL-terminated;
 *  3. enter → kinglet: ENTER_MSG_PID with the command's pid (the command is
 *     kinglet's child: CLONE_PARENT), then the program exits;
 *  4. the command → kinglet: ENTER_MSG_ERROR {errno, message} if a step
 *     before execve fails (the message holds no strerror text), then it
 *     exits 255; EOF once every end is closed (execve closes the command's).
 * An error of the program itself (before the command exists) is also an
 * ENTER_MSG_ERROR. */
#pragma once

#include <stdint.h>

#define ENTER_MAGIC      0x6b656e31u /* "ken1" */
#define ENTER_PACKET_MAX 65536
#define ENTER_BODY_MAX   (64u << 20)
#define ENTER_FILTER_MAX 65536 /* BPF instructions */
#define ENTER_LIST_MAX   65536 /* args, env, gids, rlimits */

/* flags */
#define ENTER_TERMINAL  0x01 /* a pty; its master goes over the console socket */
#define ENTER_HAS_CAPS  0x02 /* caps[] apply (otherwise capabilities are untouched) */
#define ENTER_NNP       0x04 /* process.noNewPrivileges */
#define ENTER_HAS_OOM   0x08
#define ENTER_HAS_UMASK 0x10
#define ENTER_SECCOMP   0x20 /* a filter is in the body */
#define ENTER_APPARMOR  0x40 /* a profile name follows cwd in the body */

/* caps[]: the order of src/oci's enum oci_cap_set (checked there) */
#define ENTER_CAP_BOUNDING    0
#define ENTER_CAP_EFFECTIVE   1
#define ENTER_CAP_INHERITABLE 2
#define ENTER_CAP_PERMITTED   3
#define ENTER_CAP_AMBIENT     4
#define ENTER_CAP_SETS        5

struct enter_recipe {
    uint32_t magic;
    uint32_t size;   /* of the body */
    int32_t nsflags; /* setns() flags for the pidfd */
    uint32_t flags;
    uint32_t uid, gid;
    uint32_t n_gids, n_rlimits, n_filter, n_args, n_env;
    uint32_t umask;
    int32_t oom_score_adj;
    uint32_t seccomp_flags; /* SECCOMP_FILTER_FLAG_* */
    uint32_t cap_last;      /* the highest capability the kernel knows */
    uint32_t preserve_fds;  /* fds 3 .. 3+preserve_fds-1 cross execve */
    uint32_t cons_height, cons_width;
    uint64_t caps[ENTER_CAP_SETS];
};

struct enter_rlimit {
    int32_t resource;
    uint32_t pad;
    uint64_t soft, hard;
};

/* Messages back: the head of struct oci_sync_msg (type, value, text). */
#define ENTER_MSG_ERROR 4 /* OCI_SYNC_ERROR */
#define ENTER_MSG_PID   6 /* OCI_SYNC_PID */
#define ENTER_TEXT_MAX  512
struct enter_msg {
    int32_t type;
    int32_t value;
    char text[ENTER_TEXT_MAX];
};

/* The body read back (recipe.c): pointers into it, which must stay. */
#define ENTER_FILTER_INSN 8 /* sizeof(struct sock_filter) */
struct enter_parsed {
    const struct enter_rlimit *rlimits;
    const void *filter; /* n_filter struct sock_filter */
    const uint32_t *gids;
    const char *cwd;
    const char *apparmor; /* NULL without ENTER_APPARMOR */
    char **args, **env;   /* NULL-terminated, malloc'd vectors */
};
/* Reads body (h->size bytes, malloc'd) as h describes it: -EPROTO for
 * counts out of bounds, arrays or strings that run past the end, bytes
 * left over, no args, an empty cwd, args[0] or profile; -ENOMEM. */
int enter_recipe_parse(const struct enter_recipe *h, char *body, struct enter_parsed *ret);
void enter_parsed_clear(struct enter_parsed *r);
