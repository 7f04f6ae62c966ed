/* {{name}}: a spearpy guest with one tool, `{{tool}}`.
 *
 * main() opens a chat session, registers the tool and sends with
 * SP_AUTO_TOOL_CALL: the host then runs the whole loop (the model asks for
 * the tool, the host calls it here, hands the result back to the model) and
 * returns the final answer. spear.h is the SDK; docs/guest-sdk.md in the
 * spearpy repository documents it.
 */
#define SPEAR_IMPLEMENTATION /* once per module: exports spear_alloc/spear_free */
#include "spear.h"

/* The tool. It gets the JSON arguments the model chose and writes its JSON
 * result into `out`; 0 means success, anything else fails the call (the model
 * is told). Replace the body with what {{tool}} should do. */
static int {{tool}}(const char *args, size_t len, sp_buf *out) {
    (void)len;
    sp_buf text = SP_BUF_INIT;
    if (!sp_json_get_string(args, "text", &text)) return 1;
    int words = 0, in_word = 0;
    for (size_t i = 0; i < text.len; i++) {
        int space = text.data[i] == ' ' || text.data[i] == '\n' || text.data[i] == '\t';
        words += !space && !in_word;
        in_word = !space;
    }
    sp_buf_free(&text);
    return sp_buf_printf(out, "{\"words\":%d}", words);
}
/* The raw-ABI function the host calls: int32_t {{tool}}_tool(i32, i32, i32, i32). */
SP_TOOL({{tool}}_tool, {{tool}})

/* What the model is told about the tool (an OpenAI function schema). */
static const char SCHEMA[] =
    "{\"type\":\"function\",\"function\":{\"name\":\"{{tool}}\","
    "\"description\":\"Count the words in a text.\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"text\":{\"type\":\"string\"}},\"required\":[\"text\"]}}}";

int main(int argc, char **argv) {
    const char *question = argc > 1 ? argv[1]
                                    : "How many words are in 'the quick brown fox'?";
    int32_t fd = sp_cchat_create();
    if (fd < 0) { printf("cchat_create: %s\n", sp_errno_name(fd)); return 1; }
    sp_write_msg(fd, "user", question);
    int32_t rc = sp_register_tool(fd, {{tool}}_tool, SCHEMA);
    if (rc) { printf("register: %s\n", sp_errno_name(rc)); return 1; }

    int32_t resp = sp_send(fd, SP_AUTO_TOOL_CALL);
    sp_buf body = SP_BUF_INIT, answer = SP_BUF_INIT;
    if (resp < 0) { printf("send: %s\n", sp_errno_name(resp)); return 1; }
    if (sp_recv(resp, &body, NULL) < 0) { printf("recv failed\n"); return 1; }
    /* A failed send still answers: a body with "error" (no model, upstream down...). */
    if (sp_json_find(body.data, "error")) { printf("error: %s\n", body.data); return 2; }
    sp_json_get_string(body.data, "content", &answer);
    printf("answer: %s\n", answer.data ? answer.data : "");
    sp_cchat_close(fd);
    return 0;
}
