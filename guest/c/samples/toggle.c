/* toggle: a plain send first, to look at the tool call the model wants;
 * a second plain send is refused (the call is still pending); then an auto
 * send on the same session lets the host run the pending call and finish. */
#define SPEAR_IMPLEMENTATION
#include "../spear.h"

static const char SCHEMA[] =
    "{\"type\":\"function\",\"function\":{\"name\":\"sum\",\"description\":\"Add two integers.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
    "\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}}}";

static int sum(const char *args, size_t len, sp_buf *out) {
    (void)len;
    long long a, b;
    if (!sp_json_get_int(args, "a", &a) || !sp_json_get_int(args, "b", &b)) return 1;
    printf("tool sum(a=%lld, b=%lld) -> %lld\n", a, b, a + b);
    return sp_buf_printf(out, "{\"sum\":%lld}", a + b);
}
SP_TOOL(sum_tool, sum)

static int send_recv(int32_t fd, int32_t flags, sp_buf *body) {
    int32_t rfd = sp_send(fd, flags);
    if (rfd < 0) { printf("cchat_send: %s\n", sp_errno_name(rfd)); return 0; }
    int32_t n = sp_recv(rfd, body, NULL);
    if (n < 0) { printf("cchat_recv: %s\n", sp_errno_name(n)); return 0; }
    return 1;
}

int main(void) {
    int32_t fd = sp_cchat_create();
    int32_t rc = fd < 0 ? fd : sp_write_msg(fd, "system", "You are a calculator. Use the sum tool for arithmetic.");
    rc = rc ? rc : sp_write_msg(fd, "user", "What is 7 + 35?");
    rc = rc ? rc : sp_register_tool(fd, sum_tool, SCHEMA);
    if (rc) { printf("setup: %s\n", sp_errno_name(rc)); return 1; }

    sp_buf body = SP_BUF_INIT, s = SP_BUF_INIT;
    if (!send_recv(fd, 0, &body)) return 1;
    if (!strstr(body.data, "\"tool_calls\":[") || !sp_json_get_string(body.data, "name", &s)) {
        printf("plain send: expected tool_calls, got %s\n", body.data);
        return 3;
    }
    printf("plain send: model asks for %s", s.data);
    sp_json_get_string(body.data, "arguments", &s);
    printf(" with %s (not run)\n", s.data);

    if (!send_recv(fd, 0, &body)) return 1;
    int refused = strstr(body.data, "pending_tool_calls") != NULL;
    printf("second plain send: %s\n", refused ? "pending_tool_calls" : body.data);

    if (!send_recv(fd, SP_AUTO_TOOL_CALL, &body)) return 1;
    if (sp_json_find(body.data, "error") || !sp_json_get_string(body.data, "content", &s)) {
        printf("auto send: %s\n", body.data);
        return 2;
    }
    printf("auto send: answer: %s\n", s.data);
    return refused && strstr(s.data, "42") ? 0 : 3;
}
