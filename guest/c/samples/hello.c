/* hello: logging, clocks and randomness; never talks to a model.
 * Exit 0 when the host's clocks agree and random_i64 varies, 1 otherwise. */
#include "../spear.h"

int main(int argc, char **argv) {
    int bad = 0;
    int32_t rc = sp_log_str(SP_LOG_INFO, "hello from the C guest");
    printf("log: %d\n", rc);
    bad |= rc != 0;

    int64_t ms = sp_time_now_ms(), s = sp_wall_time_s();
    long long skew = (long long)(ms / 1000 - s);
    /* Both clocks are wall clocks read microseconds apart. */
    int clocks_ok = ms > 1600000000000LL && skew >= -2 && skew <= 2;
    printf("clocks: %s\n", clocks_ok ? "ok" : "BAD");
    bad |= !clocks_ok;

    int64_t r1 = sp_random_i64(), r2 = sp_random_i64();
    printf("random: %s\n", r1 != r2 ? "ok" : "BAD");
    bad |= r1 == r2;

    sp_sleep_ms(1);
    for (int i = 1; i < argc; i++) printf("arg: %s\n", argv[i]);
    printf("hello from C: %s\n", bad ? "FAILED" : "ok");
    return bad;
}
