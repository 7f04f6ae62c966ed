/* hostile: tools that lie about their output. Each lie must fail only its
 * own call; the model sees an error tool message and the send finishes.
 *   liar_len:    returns 0 but claims more bytes than the buffer holds
 *   liar_grow:   answers -28 asking for 2 GiB (past any output limit)
 *   liar_shrink: answers -28 while asking for no more than it was given
 *   liar_utf8:   returns bytes that are not UTF-8
 * Exit 0 when the send completes with the scripted final answer. */
#define SPEAR_IMPLEMENTATION
#include "../spear.h"

static uint32_t cap_of(int32_t out_len_ptr) { return *(uint32_t *)(intptr_t)out_len_ptr; }
static void set_len(int32_t out_len_ptr, uint32_t n) { *(uint32_t *)(intptr_t)out_len_ptr = n; }

int32_t liar_len(int32_t a, int32_t al, int32_t out, int32_t out_len_ptr) {
    (void)a; (void)al; (void)out;
    set_len(out_len_ptr, cap_of(out_len_ptr) + 1000);
    return 0;
}
int32_t liar_grow(int32_t a, int32_t al, int32_t out, int32_t out_len_ptr) {
    (void)a; (void)al; (void)out;
    set_len(out_len_ptr, 0x80000000u);
    return SP_ENOSPC;
}
int32_t liar_shrink(int32_t a, int32_t al, int32_t out, int32_t out_len_ptr) {
    (void)a; (void)al; (void)out;
    set_len(out_len_ptr, cap_of(out_len_ptr) / 2);
    return SP_ENOSPC;
}
int32_t liar_utf8(int32_t a, int32_t al, int32_t out, int32_t out_len_ptr) {
    (void)a; (void)al;
    if (cap_of(out_len_ptr) < 4) { set_len(out_len_ptr, 4); return SP_ENOSPC; }
    memcpy((void *)(intptr_t)out, "\xff\xfe\xc3\x28", 4);
    set_len(out_len_ptr, 4);
    return 0;
}

static int32_t reg(int32_t fd, sp_raw_tool fn, const char *name) {
    sp_buf s = SP_BUF_INIT;
    sp_buf_printf(&s, "{\"name\":\"%s\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}", name);
    int32_t rc = sp_register_tool(fd, fn, s.data);
    sp_buf_free(&s);
    return rc;
}

int main(void) {
    int32_t fd = sp_cchat_create();
    int32_t rc = fd < 0 ? fd : sp_write_msg(fd, "user", "Call every liar once.");
    rc = rc ? rc : reg(fd, liar_len, "liar_len");
    rc = rc ? rc : reg(fd, liar_grow, "liar_grow");
    rc = rc ? rc : reg(fd, liar_shrink, "liar_shrink");
    rc = rc ? rc : reg(fd, liar_utf8, "liar_utf8");
    if (rc) { printf("setup: %s\n", sp_errno_name(rc)); return 1; }
    int32_t rfd = sp_send(fd, SP_AUTO_TOOL_CALL);
    if (rfd < 0) { printf("cchat_send: %s\n", sp_errno_name(rfd)); return 1; }
    sp_buf body = SP_BUF_INIT, answer = SP_BUF_INIT;
    if (sp_recv(rfd, &body, NULL) < 0) return 1;
    if (sp_json_find(body.data, "error")) { printf("error body: %s\n", body.data); return 2; }
    if (!sp_json_get_string(body.data, "content", &answer)) return 3;
    printf("answer: %s\n", answer.data);
    return strstr(answer.data, "survived all four lies") ? 0 : 3;
}
