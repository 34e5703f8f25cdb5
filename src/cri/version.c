/* Version: what kubelet checks first. */
#include "cri/internal.h"

void cri_version(struct cri_call *call)
{
    Runtime__V1__VersionResponse resp = RUNTIME__V1__VERSION_RESPONSE__INIT;
    resp.version = "0.1.0"; /* the kubelet runtime API version */
    resp.runtime_name = "kinglet";
    resp.runtime_version = PACKAGE_VERSION;
    resp.runtime_api_version = "v1";
    cri_reply(call, &resp.base);
}
