/* chat: one plain send, the reply read through a deliberately tiny buffer
 * so the -28 (ENOSPC) grow-and-retry path runs. Prints the assistant text.
 * Exit 0 ok, 1 a hostcall failed, 2 the body was an error. */
#include "../spear.h"

int main(void) {
    int32_t fd = sp_cchat_create();
    if (fd < 0) { printf("cchat_create: %s\n", sp_errno_name(fd)); return 1; }
    if (sp_write_msg(fd, "system", "You are a friendly assistant. Answer in one sentence.") ||
        sp_write_msg(fd, "user", "Say hello to the wasm guest.")) {
        printf("cchat_write_msg failed\n");
        return 1;
    }
    int32_t rfd = sp_send(fd, SP_SEND_METRICS);
    if (rfd < 0) { printf("cchat_send: %s\n", sp_errno_name(rfd)); return 1; }

    sp_buf body = SP_BUF_INIT;
    sp_buf_reserve(&body, 7); /* 16 bytes: no chat completion fits */
    unsigned grows = 0;
    int32_t n = sp_recv(rfd, &body, &grows);
    if (n < 0) { printf("cchat_recv: %s\n", sp_errno_name(n)); return 1; }
    printf("recv: %d bytes, grew %s\n", n, grows > 0 ? "yes" : "NO");
    if (grows == 0) return 1;

    sp_buf text = SP_BUF_INIT;
    if (sp_json_find(body.data, "error") || !sp_json_get_string(body.data, "content", &text)) {
        printf("error body: %s\n", body.data);
        return 2;
    }
    printf("assistant: %s\n", text.data);

    sp_buf metrics = SP_BUF_INIT;
    int32_t m = sp_get_metrics(rfd, &metrics);
    long long total = -1;
    if (m < 0 || !sp_json_get_int(metrics.data, "total_tokens", &total)) {
        printf("metrics: missing (%s)\n", m < 0 ? sp_errno_name(m) : metrics.data);
        return 1;
    }
    printf("metrics: total_tokens=%lld\n", total);
    printf("close: %d\n", sp_cchat_close(fd));
    return 0;
}
