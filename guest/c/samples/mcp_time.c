/* mcp_time: a guest using a tool from an MCP server, as SPEAR's mcp_fs does.
 * It narrows the run's MCP servers to "time" and its tools to get_*, asks the
 * model for the time, and lets the host run the loop (AUTO_TOOL_CALL): the
 * model's call goes to the MCP server, its result back to the model. Prints
 * the answer. Exit 0 ok, 1 a hostcall failed, 2 the body was an error, 3 the
 * run's task does not allow MCP (run with --mcp-dir DIR --mcp time). */
#define SPEAR_IMPLEMENTATION
#include "../spear.h"

int main(void) {
    static const char *const servers[] = {"time"};
    static const char *const allow[] = {"get_*"};
    int32_t fd = sp_cchat_create();
    if (fd < 0) { printf("cchat_create: %s\n", sp_errno_name(fd)); return 1; }
    int32_t rc = sp_mcp_enable(fd, 1);
    rc = rc ? rc : sp_mcp_select(fd, servers, 1, allow, 1, NULL, 0);
    if (rc == SP_EACCES) { printf("mcp: not allowed by the run's task\n"); return 3; }
    if (rc) { printf("mcp params: %s\n", sp_errno_name(rc)); return 1; }
    if (sp_write_msg(fd, "user", "What time is it in UTC?")) return 1;
    int32_t rfd = sp_send(fd, SP_AUTO_TOOL_CALL);
    if (rfd < 0) { printf("cchat_send: %s\n", sp_errno_name(rfd)); return 1; }
    sp_buf body = SP_BUF_INIT;
    unsigned grows = 0;
    if (sp_recv(rfd, &body, &grows) < 0) return 1;
    sp_buf text = SP_BUF_INIT;
    if (sp_json_find(body.data, "error") || !sp_json_get_string(body.data, "content", &text)) {
        printf("error body: %s\n", body.data);
        return 2;
    }
    long long calls = -1;
    sp_json_get_int(body.data, "tool_calls", &calls);
    printf("answer: %s\n", text.data);
    printf("tool calls: %lld\n", calls);
    return 0;
}
