/* hostile: hands every hostcall pointers outside linear memory, buffers that
 * straddle its end, and negative lengths; prints each errno. Afterwards the
 * response must still be readable: a failed recv consumes nothing.
 * Exit status = the number of calls that did not answer as spear-abi.md says. */
#define SPEAR_IMPLEMENTATION
#include "../spear.h"

static int mismatches;
static char ok_buf[SP_MAX_LOG_LEN + 64] = "user";

static void expect(const char *what, int32_t got, int32_t want) {
    int ok = got == want;
    mismatches += !ok;
    printf("%-40s %-7s%s\n", what, sp_errno_name(got), ok ? "" : "  <-- MISMATCH");
}

int main(void) {
    const int32_t BAD = (int32_t)0xFFFFFFF0u; /* far past any memory, negative as i32 */
    const int32_t END = (int32_t)(__builtin_wasm_memory_size(0) * 65536); /* first byte past it */
    const int32_t OK = SP_PTR(ok_buf);
    uint32_t cap = 100;
    const int32_t CAP = SP_PTR(&cap);

    expect("log: ptr outside memory", sp_log(2, BAD, 10), SP_EFAULT);
    expect("log: buffer straddles the end", sp_log(2, END - 4, 64), SP_EFAULT);
    expect("log: negative length", sp_log(2, OK, -1), SP_EINVAL);
    expect("log: length over 16384", sp_log(2, OK, SP_MAX_LOG_LEN + 1), SP_EINVAL);

    int32_t fd = sp_cchat_create();
    expect("write_msg: role outside memory", sp_cchat_write_msg(fd, BAD, 4, OK, 2), SP_EFAULT);
    expect("write_msg: content straddles the end", sp_cchat_write_msg(fd, OK, 4, END - 4, 64), SP_EFAULT);
    expect("write_msg: negative length", sp_cchat_write_msg(fd, OK, 4, OK, -1), SP_EFAULT);
    expect("write_fn: schema outside memory", sp_cchat_write_fn(fd, 1, BAD, 10), SP_EFAULT);
    cap = 10;
    expect("ctl: arg outside memory", sp_cchat_ctl(fd, SP_CTL_SET_PARAM, BAD, CAP), SP_EFAULT);
    expect("ctl: len ptr outside memory", sp_cchat_ctl(fd, SP_CTL_SET_PARAM, OK, BAD), SP_EFAULT);
    expect("ctl: len ptr straddles the end", sp_cchat_ctl(fd, SP_CTL_SET_PARAM, OK, END - 2), SP_EFAULT);

    expect("write a real message", sp_write_msg(fd, "user", "ping"), 0);
    int32_t rfd = sp_send(fd, SP_SEND_METRICS);
    printf("send: %s\n", rfd >= 0 ? "fd" : sp_errno_name(rfd));
    /* Capacities are large enough for the body: the host has to write, so
     * it cannot answer ENOSPC without looking at the pointer. */
    cap = 1 << 20;
    expect("recv: out outside memory", sp_cchat_recv(rfd, BAD, CAP), SP_EFAULT);
    expect("recv: len ptr outside memory", sp_cchat_recv(rfd, OK, BAD), SP_EFAULT);
    cap = 1 << 20;
    expect("recv: out straddles the end", sp_cchat_recv(rfd, END - 4, CAP), SP_EFAULT);
    cap = 1 << 20;
    expect("metrics: out outside memory", sp_cchat_ctl(rfd, SP_CTL_GET_METRICS, BAD, CAP), SP_EFAULT);
    cap = 1 << 20;
    expect("fd_ctl metrics: out outside memory", sp_fd_ctl(rfd, SP_FD_CTL_GET_METRICS, BAD, CAP), SP_EFAULT);

    int32_t ep = sp_epoll_create();
    sp_epoll_ctl(ep, SP_EPOLL_CTL_ADD, rfd, SP_EPOLLIN);
    cap = 64;
    expect("epoll_wait: out outside memory", sp_epoll_wait(ep, BAD, CAP, 0), SP_EFAULT);
    expect("epoll_wait: len ptr outside memory", sp_epoll_wait(ep, OK, BAD, 0), SP_EFAULT);

    sp_buf body = SP_BUF_INIT;
    int32_t n = sp_recv(rfd, &body, NULL);
    printf("recv after the abuse: %s\n", n > 0 ? "body intact" : sp_errno_name(n));
    mismatches += n <= 0;
    printf("mismatches: %d\n", mismatches);
    return mismatches;
}
