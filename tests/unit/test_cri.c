/* CRI layer logic: the errno → status map and pod CIDR validation. */
#include "harness.h"

#include "cri/internal.h"

static void status_map(void **state)
{
    assert_int_equal(cri_status_from_errno(0), GRPC_STATUS_OK);
    assert_int_equal(cri_status_from_errno(ENOENT), GRPC_STATUS_NOT_FOUND);
    assert_int_equal(cri_status_from_errno(-ENOENT), GRPC_STATUS_NOT_FOUND);
    assert_int_equal(cri_status_from_errno(EINVAL), GRPC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cri_status_from_errno(EEXIST), GRPC_STATUS_ALREADY_EXISTS);
    assert_int_equal(cri_status_from_errno(EFBIG), GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_int_equal(cri_status_from_errno(EPERM), GRPC_STATUS_PERMISSION_DENIED);
    assert_int_equal(cri_status_from_errno(ENOSPC), GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_int_equal(cri_status_from_errno(ETIMEDOUT), GRPC_STATUS_DEADLINE_EXCEEDED);
    assert_int_equal(cri_status_from_errno(ENOSYS), GRPC_STATUS_UNIMPLEMENTED);
    assert_int_equal(cri_status_from_errno(EIO), GRPC_STATUS_INTERNAL);
}

static void pod_cidr(void **state)
{
    const char *good[] = {"",         "10.88.0.0/16", "10.88.0.0/16,fd00::/64",
                          "fd00::/8", "0.0.0.0/0",    "192.168.1.0/32",
                          "::/128"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        if (!cri_pod_cidr_valid(good[i]))
            fail_msg("`%s` should be valid", good[i]);
    const char *bad[] = {"10.0.0.0",
                         "10.0.0.0/33",
                         "fd00::/129",
                         "10.0.0.0/-1",
                         "x/8",
                         "10.0.0.0/8,",
                         ",10.0.0.0/8",
                         "10.0.0.0/8,,fd00::/8",
                         "10.0.0.0/8x",
                         "10.0.0.0/",
                         "1.1.1.1/8,2.2.2.2/8,3.3.3.3/8",
                         "10.0.0.0/0008"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (cri_pod_cidr_valid(bad[i]))
            fail_msg("`%s` should be invalid", bad[i]);
    char longs[400];
    memset(longs, 'a', sizeof(longs) - 1);
    longs[sizeof(longs) - 1] = '\0';
    assert_false(cri_pod_cidr_valid(longs));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(status_map),
    cmocka_unit_test(pod_cidr),
};
UNIT_MAIN(tests)
