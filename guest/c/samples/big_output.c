/* big_output: a tool whose 200 KiB answer exceeds the host's first buffer.
 * The tool answers -28 with the size it needs and the host calls again with
 * a bigger buffer. Session 1 keeps the default max_tool_output_bytes
 * (64 KiB) and must see output_too_large; session 2 raises it to 256 KiB and
 * must get the whole dump through. */
#define SPEAR_IMPLEMENTATION
#include "../spear.h"

#define DUMP_BYTES (200 * 1024)

static int handler_runs, raw_calls;
static sp_tool_state dump_state;

static int dump(const char *args, size_t len, sp_buf *out) {
    (void)args; (void)len;
    handler_runs++;
    if (sp_buf_puts(out, "{\"data\":\"") || sp_buf_reserve(out, DUMP_BYTES)) return 1;
    memset(out->data + out->len, 'x', DUMP_BYTES);
    out->len += DUMP_BYTES;
    return sp_buf_puts(out, "\",\"end\":\"END_OF_DUMP\"}");
}

/* Written by hand instead of SP_TOOL to count how often the host calls. */
int32_t dump_tool(int32_t args, int32_t args_len, int32_t out, int32_t out_len_ptr) {
    raw_calls++;
    return sp_tool_dispatch(dump, &dump_state, args, args_len, out, out_len_ptr);
}

static const char SCHEMA[] =
    "{\"name\":\"dump\",\"description\":\"Return a large document.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{}}}";

/* Runs one auto send; returns the final assistant text in `answer`. */
static int run(int64_t max_output, sp_buf *answer) {
    int32_t fd = sp_cchat_create();
    int32_t rc = fd < 0 ? fd : sp_write_msg(fd, "user", "Fetch the document.");
    rc = rc ? rc : sp_register_tool(fd, dump_tool, SCHEMA);
    if (!rc && max_output > 0) rc = sp_set_param_int(fd, "max_tool_output_bytes", max_output);
    int32_t rfd = rc ? rc : sp_send(fd, SP_AUTO_TOOL_CALL);
    if (rfd < 0) { printf("setup: %s\n", sp_errno_name(rfd)); return 1; }
    sp_buf body = SP_BUF_INIT;
    rc = sp_recv(rfd, &body, NULL);
    if (rc < 0) { printf("cchat_recv: %s\n", sp_errno_name(rc)); return 1; }
    if (sp_json_find(body.data, "error")) { printf("error body: %s\n", body.data); return 2; }
    if (!sp_json_get_string(body.data, "content", answer)) return 3;
    sp_cchat_close(fd);
    sp_buf_free(&body);
    return 0;
}

int main(void) {
    sp_buf limited = SP_BUF_INIT, raised = SP_BUF_INIT;
    int rc = run(0, &limited);
    if (rc) return rc;
    int limited_ok = strstr(limited.data, "output_too_large") != NULL;
    printf("default limit: %s\n", limited_ok ? "output_too_large" : limited.data);
    int calls_before = raw_calls;

    rc = run(256 * 1024, &raised);
    if (rc) return rc;
    printf("raised limit: %s\n", raised.data);
    /* The SDK keeps the computed output across the host's retries. */
    printf("handler runs: %d, host calls: %d then %d\n", handler_runs, calls_before,
           raw_calls - calls_before);
    int ok = limited_ok && strstr(raised.data, "received the dump") && handler_runs == 1 &&
             raw_calls - calls_before >= 1 && raw_calls >= 2;
    return ok ? 0 : 3;
}
