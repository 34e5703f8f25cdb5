#include "base/base.h"
#include "image/image.h"

int image_cli_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "kinglet image: not built yet\n");
    return 2;
}
