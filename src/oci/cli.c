#include "base/base.h"
#include "oci/oci.h"

int oci_cli_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "kinglet oci: not built yet\n");
    return 2;
}
