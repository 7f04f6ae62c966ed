/* hostile: floods the host log. Argument: how many lines (default 100000).
 * Exit 0 when every call answered 0 (or a refusal: EAGAIN, EACCES) and the
 * length limit is enforced, 1 otherwise. */
#include "../spear.h"

static char big[SP_MAX_LOG_LEN + 1];

int main(int argc, char **argv) {
    long lines = argc > 1 ? strtol(argv[1], NULL, 10) : 100000;
    long ok = 0, refused = 0, other = 0;
    char line[128];
    for (long i = 0; i < lines; i++) {
        int n = snprintf(line, sizeof line, "flood line %ld: the quick brown fox jumps over the lazy dog", i);
        int32_t rc = sp_log((int32_t)(i % 5), SP_PTR(line), n);
        if (rc == 0) ok++;
        else if (rc == SP_EAGAIN || rc == SP_EACCES) refused++;
        else other++;
    }
    memset(big, 'z', sizeof big);
    int32_t max_rc = sp_log(SP_LOG_INFO, SP_PTR(big), SP_MAX_LOG_LEN);
    int32_t over_rc = sp_log(SP_LOG_INFO, SP_PTR(big), SP_MAX_LOG_LEN + 1);
    printf("flood: %ld lines, %ld ok, %ld refused, %ld other\n", lines, ok, refused, other);
    printf("16384-byte line: %s, 16385-byte line: %s\n", sp_errno_name(max_rc), sp_errno_name(over_rc));
    int good = other == 0 && (max_rc == 0 || max_rc == SP_EAGAIN) && over_rc == SP_EINVAL;
    return good ? 0 : 1;
}
