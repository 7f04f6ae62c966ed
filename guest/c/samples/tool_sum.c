/* tool_sum (raw ABI): registers `sum` and lets the host run the tool loop.
 *
 * Deliberately written against the bare `spear` imports, no SDK header and
 * no allocator export: the host must use the tool arena this guest declares
 * through tool_arena_ptr / tool_arena_len, exactly as a SPEAR guest does.
 * Exit 0 when the final answer contains 42, 1 on a hostcall error,
 * 2 on an error body, 3 on a wrong answer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMPORT(name) __attribute__((import_module("spear"), import_name(name)))
IMPORT("cchat_create") int32_t cchat_create(void);
IMPORT("cchat_write_msg") int32_t cchat_write_msg(int32_t, int32_t, int32_t, int32_t, int32_t);
IMPORT("cchat_write_fn") int32_t cchat_write_fn(int32_t, int32_t, int32_t, int32_t);
IMPORT("cchat_ctl") int32_t cchat_ctl(int32_t, int32_t, int32_t, int32_t);
IMPORT("cchat_send") int32_t cchat_send(int32_t, int32_t);
IMPORT("cchat_recv") int32_t cchat_recv(int32_t, int32_t, int32_t);
IMPORT("cchat_close") int32_t cchat_close(int32_t);

#define P(x) ((int32_t)(intptr_t)(x))
#define ENOSPC_RC (-28)
#define CTL_SET_PARAM 1
#define AUTO_TOOL_CALL 2

static const char SCHEMA[] =
    "{\"type\":\"function\",\"function\":{\"name\":\"sum\",\"description\":\"Add two integers.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
    "\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}}}";

static _Alignas(8) char arena[8192];

/* The value after "key": in a flat JSON object; 0 if absent. */
static long long arg(const char *json, const char *key) {
    char pat[16];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(json, pat);
    if (!p) return 0;
    p = strchr(p + strlen(pat), ':');
    return p ? strtoll(p + 1, NULL, 10) : 0;
}

int32_t sum_tool(int32_t args_ptr, int32_t args_len, int32_t out_ptr, int32_t out_len_ptr) {
    const char *args = (const char *)(intptr_t)args_ptr; /* NUL-terminated by the host */
    (void)args_len;
    long long a = arg(args, "a"), b = arg(args, "b");
    char out[64];
    int n = snprintf(out, sizeof out, "{\"sum\":%lld}", a + b);
    uint32_t cap = *(uint32_t *)(intptr_t)out_len_ptr;
    *(uint32_t *)(intptr_t)out_len_ptr = (uint32_t)n;
    if ((uint32_t)n > cap) return ENOSPC_RC;
    memcpy((void *)(intptr_t)out_ptr, out, (size_t)n);
    printf("tool sum(a=%lld, b=%lld) -> %lld\n", a, b, a + b);
    return 0;
}

static int32_t set_int(int32_t fd, const char *key, long long v) {
    char json[96];
    uint32_t len = (uint32_t)snprintf(json, sizeof json, "{\"key\":\"%s\",\"value\":%lld}", key, v);
    return cchat_ctl(fd, CTL_SET_PARAM, P(json), P(&len));
}

static int32_t msg(int32_t fd, const char *role, const char *text) {
    return cchat_write_msg(fd, P(role), (int32_t)strlen(role), P(text), (int32_t)strlen(text));
}

int main(void) {
    int32_t fd = cchat_create();
    if (fd < 0) { printf("cchat_create failed: %d\n", fd); return 1; }
    int32_t rc = msg(fd, "system", "You are a calculator. Use the sum tool for arithmetic.");
    rc = rc ? rc : msg(fd, "user", "What is 7 + 35?");
    rc = rc ? rc : set_int(fd, "tool_arena_ptr", P(arena));
    rc = rc ? rc : set_int(fd, "tool_arena_len", (long long)sizeof arena);
    rc = rc ? rc : cchat_write_fn(fd, P(&sum_tool), P(SCHEMA), (int32_t)strlen(SCHEMA));
    if (rc) { printf("setup failed: %d\n", rc); return 1; }

    int32_t rfd = cchat_send(fd, AUTO_TOOL_CALL);
    if (rfd < 0) { printf("cchat_send failed: %d\n", rfd); return 1; }

    uint32_t cap = 256, len = cap;
    char *body = malloc(cap + 1);
    while ((rc = cchat_recv(rfd, P(body), P(&len))) == ENOSPC_RC) {
        cap = len;
        body = realloc(body, cap + 1);
        len = cap;
    }
    if (rc < 0) { printf("cchat_recv failed: %d\n", rc); return 1; }
    body[len] = 0;
    if (strstr(body, "\"error\":")) { printf("error body: %s\n", body); return 2; }

    /* Print choices[0].message.content, undoing \" and \\ escapes. */
    const char *p = strstr(body, "\"content\":\"");
    if (!p) { printf("no content in: %s\n", body); return 3; }
    char answer[256];
    size_t k = 0;
    for (p += 11; *p && *p != '"' && k + 1 < sizeof answer; p++) {
        if (*p == '\\' && p[1]) p++;
        answer[k++] = *p;
    }
    answer[k] = 0;
    printf("answer: %s\n", answer);
    cchat_close(fd);
    return strstr(answer, "42") ? 0 : 3;
}
