/* image: see the module's files for the design. */
#pragma once

/* `kinglet image ...` command line; returns the process exit status. */
int image_cli_main(int argc, char **argv);
