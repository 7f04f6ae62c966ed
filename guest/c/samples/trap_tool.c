/* hostile: a tool that traps (wasm `unreachable`). The trap must fail that
 * call only: the model gets tool_exec_failed, calls a healthy tool next, and
 * the send completes in the same instance. Exit 0 when it does. */
#define SPEAR_IMPLEMENTATION
#include "../spear.h"

static int boom(const char *args, size_t len, sp_buf *out) {
    (void)args; (void)len; (void)out;
    __builtin_trap();
}
static int echo(const char *args, size_t len, sp_buf *out) {
    return sp_buf_append(out, args, len);
}
SP_TOOL(boom_tool, boom)
SP_TOOL(echo_tool, echo)

int main(void) {
    int32_t fd = sp_cchat_create();
    int32_t rc = fd < 0 ? fd : sp_write_msg(fd, "user", "Try boom, then echo.");
    rc = rc ? rc : sp_register_tool(fd, boom_tool, "{\"name\":\"boom\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}");
    rc = rc ? rc : sp_register_tool(fd, echo_tool,
        "{\"name\":\"echo\",\"parameters\":{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}}}}");
    if (rc) { printf("setup: %s\n", sp_errno_name(rc)); return 1; }
    int32_t rfd = sp_send(fd, SP_AUTO_TOOL_CALL);
    if (rfd < 0) { printf("cchat_send: %s\n", sp_errno_name(rfd)); return 1; }
    sp_buf body = SP_BUF_INIT, answer = SP_BUF_INIT;
    if (sp_recv(rfd, &body, NULL) < 0) return 1;
    if (sp_json_find(body.data, "error")) { printf("error body: %s\n", body.data); return 2; }
    if (!sp_json_get_string(body.data, "content", &answer)) return 3;
    printf("answer: %s\n", answer.data);
    return strstr(answer.data, "still alive") ? 0 : 3;
}
