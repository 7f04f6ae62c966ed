/* multi_tool: an agent with three tools over several rounds, including a
 * round where the model asks for two tools at once. Exit 0 when all four
 * calls ran and the final answer carries both results. */
#define SPEAR_IMPLEMENTATION
#include "../spear.h"

static int calls;

static int add(const char *args, size_t len, sp_buf *out) {
    (void)len;
    long long a, b;
    if (!sp_json_get_int(args, "a", &a) || !sp_json_get_int(args, "b", &b)) return 1;
    printf("tool add(%lld, %lld)\n", a, b);
    calls++;
    return sp_buf_printf(out, "{\"sum\":%lld}", a + b);
}
static int mul(const char *args, size_t len, sp_buf *out) {
    (void)len;
    long long a, b;
    if (!sp_json_get_int(args, "a", &a) || !sp_json_get_int(args, "b", &b)) return 1;
    printf("tool mul(%lld, %lld)\n", a, b);
    calls++;
    return sp_buf_printf(out, "{\"product\":%lld}", a * b);
}
static int upper(const char *args, size_t len, sp_buf *out) {
    (void)len;
    sp_buf text = SP_BUF_INIT;
    if (!sp_json_get_string(args, "text", &text)) return 1;
    for (size_t i = 0; i < text.len; i++)
        if (text.data[i] >= 'a' && text.data[i] <= 'z') text.data[i] -= 32;
    printf("tool upper(%s)\n", text.data);
    calls++;
    int rc = sp_buf_puts(out, "{\"text\":");
    rc = rc ? rc : sp_buf_json_string(out, text.data, text.len);
    rc = rc ? rc : sp_buf_puts(out, "}");
    sp_buf_free(&text);
    return rc;
}
SP_TOOL(add_tool, add)
SP_TOOL(mul_tool, mul)
SP_TOOL(upper_tool, upper)

#define INT_PARAMS "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}," \
                   "\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}"

int main(void) {
    int32_t fd = sp_cchat_create();
    if (fd < 0) { printf("cchat_create: %s\n", sp_errno_name(fd)); return 1; }
    int32_t rc = sp_write_msg(fd, "system", "Use the tools for every step.");
    rc = rc ? rc : sp_write_msg(fd, "user", "Compute (2 + 3) * 4, then shout the word done.");
    /* The bare schema form: the host wraps it in {"type":"function",...}. */
    rc = rc ? rc : sp_register_tool(fd, add_tool,
                                    "{\"name\":\"add\",\"description\":\"a + b\"," INT_PARAMS "}");
    rc = rc ? rc : sp_register_tool(fd, mul_tool,
                                    "{\"name\":\"mul\",\"description\":\"a * b\"," INT_PARAMS "}");
    rc = rc ? rc : sp_register_tool(fd, upper_tool,
        "{\"type\":\"function\",\"function\":{\"name\":\"upper\",\"description\":\"Upper-case text.\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}},"
        "\"required\":[\"text\"]}}}");
    rc = rc ? rc : sp_set_param_int(fd, "max_iterations", 6);
    if (rc) { printf("setup: %s\n", sp_errno_name(rc)); return 1; }

    /* A second registration of the same name must be refused. */
    int32_t dup = sp_register_tool(fd, add_tool, "{\"name\":\"add\"," INT_PARAMS "}");
    printf("duplicate add: %s\n", sp_errno_name(dup));

    int32_t rfd = sp_send(fd, SP_AUTO_TOOL_CALL | SP_SEND_METRICS);
    if (rfd < 0) { printf("cchat_send: %s\n", sp_errno_name(rfd)); return 1; }
    sp_buf body = SP_BUF_INIT, answer = SP_BUF_INIT, metrics = SP_BUF_INIT;
    if (sp_recv(rfd, &body, NULL) < 0) return 1;
    if (sp_json_find(body.data, "error")) { printf("error body: %s\n", body.data); return 2; }
    if (!sp_json_get_string(body.data, "content", &answer)) return 3;
    printf("answer: %s\n", answer.data);
    long long iters = -1, tool_calls = -1;
    if (sp_get_metrics(rfd, &metrics) >= 0) {
        sp_json_get_int(metrics.data, "iterations", &iters);
        sp_json_get_int(metrics.data, "tool_calls", &tool_calls);
    }
    printf("tools run: %d, metrics: iterations=%lld tool_calls=%lld\n", calls, iters, tool_calls);
    int ok = calls == 4 && tool_calls == 4 && dup == SP_EEXIST && strstr(answer.data, "20") &&
             strstr(answer.data, "DONE");
    return ok ? 0 : 3;
}
