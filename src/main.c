#include <string.h>

#include "base/base.h"
#include "image/image.h"
#include "oci/oci.h"

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "oci") == 0)
        return oci_cli_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "image") == 0)
        return image_cli_main(argc - 1, argv + 1);
    log_error("daemon not built yet");
    return 1;
}
