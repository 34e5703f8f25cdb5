/* enter: the exec helper program, kinglet-enter (main.c; built static
 * against musl and embedded in this binary). src/oci/exec.c clones it into
 * a container's cgroup and executes it from a sealed memfd; it joins the
 * container's namespaces and starts the command there, so that no copy of
 * kinglet ever enters a container. The recipe it reads and the messages it
 * sends are in enter/proto.h. */
#pragma once

#include "enter/proto.h"

/* The embedded program (blob.S). */
extern const unsigned char enter_program[];
extern const unsigned char enter_program_end[];
