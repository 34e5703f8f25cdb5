/* oci: see the module's files for the design. */
#pragma once

/* `kinglet oci ...` command line; returns the process exit status. */
int oci_cli_main(int argc, char **argv);
