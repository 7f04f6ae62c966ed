/* tool_sum with the SDK: the same conversation as tool_sum.c (the upstream
 * transcripts must match), but the tool is a plain handler wrapped by
 * SP_TOOL and the host gets its buffers from the exported allocator. */
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

int main(void) {
    int32_t fd = sp_cchat_create();
    if (fd < 0) { printf("cchat_create: %s\n", sp_errno_name(fd)); return 1; }
    int32_t rc = sp_write_msg(fd, "system", "You are a calculator. Use the sum tool for arithmetic.");
    rc = rc ? rc : sp_write_msg(fd, "user", "What is 7 + 35?");
    rc = rc ? rc : sp_register_tool(fd, sum_tool, SCHEMA);
    if (rc) { printf("setup: %s\n", sp_errno_name(rc)); return 1; }

    int32_t rfd = sp_send(fd, SP_AUTO_TOOL_CALL);
    if (rfd < 0) { printf("cchat_send: %s\n", sp_errno_name(rfd)); return 1; }
    sp_buf body = SP_BUF_INIT, answer = SP_BUF_INIT;
    int32_t n = sp_recv(rfd, &body, NULL);
    if (n < 0) { printf("cchat_recv: %s\n", sp_errno_name(n)); return 1; }
    if (sp_json_find(body.data, "error")) { printf("error body: %s\n", body.data); return 2; }
    if (!sp_json_get_string(body.data, "content", &answer)) { printf("no content\n"); return 3; }
    printf("answer: %s\n", answer.data);
    sp_cchat_close(fd);
    return strstr(answer.data, "42") ? 0 : 3;
}
