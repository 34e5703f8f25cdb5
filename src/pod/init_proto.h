/* pod/init_proto: what the pod init program (init_main.c) and kinglet
 * (init.c, sandbox.c) agree on. */
#pragma once

/* The pipe the program reports on: one struct pod_init_report, code 0
 * once it is set up, or the errno and step that failed (it then exits).
 * EOF without a report: it died. */
#define POD_INIT_REPORT_FD 3

struct pod_init_report {
    int code;
    char step[60];
};
