/* abi_edges: the small rules of the ABI a host must get right.
 * fds start at 1000 and are never reused, closing twice is fine, closing an
 * unknown fd is EBADF, a response fd is readable through epoll, the audio
 * imports open fds (mic and rtasr; ENOSYS before issue 20), and a user stream
 * cannot open in a run no client can reach (ENOTCONN, as SPEAR).
 * Exit status = the number of rules the host broke. */
#define SPEAR_IMPLEMENTATION
#include "../spear.h"

static int broken;

static void expect(const char *what, long long got, long long want) {
    int ok = got == want;
    broken += !ok;
    printf("%-34s %lld%s\n", what, got, ok ? "" : "  <-- MISMATCH");
}

int main(void) {
    int32_t a = sp_cchat_create(), b = sp_cchat_create();
    expect("first fd >= 1000", a >= 1000, 1);
    expect("second fd > first", b > a, 1);
    expect("close", sp_cchat_close(b), 0);
    expect("close again", sp_cchat_close(b), 0);
    int32_t c = sp_cchat_create();
    expect("fd after close is new", c > b, 1);
    expect("close unknown fd", sp_cchat_close(999), SP_EBADF);
    expect("write to closed fd", sp_write_msg(b, "user", "hi"), SP_EBADF);
    expect("bad role", sp_write_msg(a, "robot", "hi"), SP_EINVAL);
    expect("unknown ctl cmd", sp_cchat_ctl(a, 77, 0, 0), SP_EINVAL);
    expect("param 'messages' is the host's", sp_set_param_raw(a, "messages", "[]"), SP_EINVAL);
    expect("param of the wrong type", sp_set_param_str(a, "max_iterations", "many"), SP_EINVAL);
    expect("mcp.enabled beyond the task", sp_set_param_bool(a, "mcp.enabled", 1), SP_EACCES);
    expect("invalid JSON param", sp_set_param_json(a, "{nope", 5), SP_EIO);
    expect("tool with a bad name", sp_cchat_write_fn(a, 1, SP_PTR("{\"name\":\"no spaces\"}"), 20),
           SP_EINVAL);

    expect("write user message", sp_write_msg(a, "user", "ping"), 0);
    int32_t rfd = sp_send(a, 0);
    expect("send returns an fd", rfd >= 1000, 1);
    int32_t ep = sp_epoll_create();
    expect("epoll_create", ep >= 1000, 1);
    expect("epoll_ctl ADD", sp_epoll_ctl(ep, SP_EPOLL_CTL_ADD, rfd, SP_EPOLLIN), 0);
    sp_epoll_event ev[4];
    uint32_t len = sizeof ev;
    int32_t n = sp_epoll_wait(ep, SP_PTR(ev), SP_PTR(&len), 0);
    expect("epoll_wait ready count", n, 1);
    expect("ready fd", n > 0 ? ev[0].fd : -1, rfd);
    expect("EPOLLIN set", n > 0 ? (ev[0].events & SP_EPOLLIN) != 0 : 0, 1);
    expect("epoll_close", sp_epoll_close(ep), 0);

    int32_t asr = sp_rtasr_create(), mic = sp_mic_create();
    expect("rtasr_create", asr >= 1000, 1);
    expect("mic_create", mic >= 1000, 1);
    expect("rtasr_close", sp_rtasr_close(asr), 0);
    expect("mic_close", sp_mic_close(mic), 0);
    expect("user_stream_open, no client", sp_user_stream_open(1, 1), SP_ENOTCONN);
    printf("broken rules: %d\n", broken);
    return broken;
}
