/* hostile: opens sessions until the host says EMFILE, then checks that a
 * closed slot can be used again. Exit 0 when capped, 1 otherwise. */
#include "../spear.h"

int main(void) {
    int32_t first = -1, last = -1, fd = 0;
    long count = 0;
    for (; count < 200000; count++) {
        fd = sp_cchat_create();
        if (fd < 0) break;
        if (first < 0) first = fd;
        last = fd;
    }
    if (fd != SP_EMFILE) {
        printf("no EMFILE after %ld sessions (last rc %d)\n", count, fd);
        return 1;
    }
    printf("EMFILE after %ld sessions\n", count);
    printf("close first: %d\n", sp_cchat_close(first));
    int32_t again = sp_cchat_create();
    printf("create after close: %s\n", again > last ? "new fd" : sp_errno_name(again));
    return again > last ? 0 : 1;
}
