/*
 * spear.h - C guest SDK for the `spear` hostcall ABI (spearpy, SPEAR).
 *
 * Single header. Everything is `static inline` except the two allocator
 * exports (`spear_alloc`, `spear_free`), which must exist once per module:
 * define SPEAR_IMPLEMENTATION in exactly one .c file before including this
 * header to get them.
 *
 * Build:  clang --target=wasm32-wasi --sysroot=/usr -O2 \
 *           -Wl,--export-table -o agent.wasm agent.c
 * `--export-table` exports `__indirect_function_table`; the host finds tools
 * there by the index that `SP_FN_INDEX(fn)` yields.
 *
 * The raw imports keep SPEAR's `sp_*` names and i32 signatures so code
 * written against SPEAR's header compiles unchanged. The contract is
 * spear-abi.md in the spearpy repository.
 */
#ifndef SPEAR_GUEST_H
#define SPEAR_GUEST_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPEAR_IMPORT(name) __attribute__((import_module("spear"), import_name(name)))

/* Guest pointers are i32 offsets into linear memory. */
#define SP_PTR(p) ((int32_t)(intptr_t)(p))
/* A function pointer in wasm32 is its index in the funcref table. */
#define SP_FN_INDEX(fn) ((int32_t)(intptr_t)(fn))

/* ---- errno (hostcalls return them negated) ----------------------------- */
#define SP_OK 0
#define SP_EIO (-5)
#define SP_EBADF (-9)
#define SP_EAGAIN (-11)
#define SP_ENOMEM (-12) /* guest side only: malloc failed in a helper */
#define SP_EACCES (-13)
#define SP_EFAULT (-14)
#define SP_EEXIST (-17)
#define SP_EINVAL (-22)
#define SP_EMFILE (-24)
#define SP_ENOSPC (-28)
#define SP_ENOSYS (-38)
#define SP_ETIMEDOUT (-110)

/* SPEAR's spelling (positive numbers) for code written against its header. */
enum {
    SPEAR_CCHAT_OK = 0,
    SPEAR_EIO = 5, SPEAR_EBADF = 9, SPEAR_EAGAIN = 11, SPEAR_ENOMEM = 12,
    SPEAR_EFAULT = 14, SPEAR_EINVAL = 22, SPEAR_ENOSPC = 28, SPEAR_ETIMEDOUT = 110,
    SPEAR_CCHAT_ERR_INVALID_FD = -9,
    SPEAR_CCHAT_ERR_INVALID_PTR = -14,
    SPEAR_CCHAT_ERR_BUFFER_TOO_SMALL = -28,
    SPEAR_CCHAT_ERR_INVALID_CMD = -22,
    SPEAR_CCHAT_ERR_INTERNAL = -5,
};

/* ---- commands and flags ------------------------------------------------ */
#define SP_CTL_SET_PARAM 1
#define SP_CTL_GET_METRICS 2
#define SP_SEND_METRICS (1 << 0)
#define SP_AUTO_TOOL_CALL (1 << 1)

#define SP_FD_CTL_SET_FLAGS 1
#define SP_FD_CTL_GET_FLAGS 2
#define SP_FD_CTL_GET_KIND 3
#define SP_FD_CTL_GET_STATUS 4
#define SP_FD_CTL_GET_METRICS 5

#define SP_EPOLL_CTL_ADD 1
#define SP_EPOLL_CTL_MOD 2
#define SP_EPOLL_CTL_DEL 3
#define SP_EPOLLIN 0x1
#define SP_EPOLLOUT 0x4
#define SP_EPOLLERR 0x8
#define SP_EPOLLHUP 0x10

enum { SP_LOG_TRACE = 0, SP_LOG_DEBUG = 1, SP_LOG_INFO = 2, SP_LOG_WARN = 3, SP_LOG_ERROR = 4 };
#define SP_MAX_LOG_LEN 16384

enum {
    SPEAR_CCHAT_CTL_SET_PARAM = SP_CTL_SET_PARAM,
    SPEAR_CCHAT_CTL_GET_METRICS = SP_CTL_GET_METRICS,
    SPEAR_CCHAT_SEND_FLAG_ENABLE_METRICS = SP_SEND_METRICS,
    SPEAR_CCHAT_SEND_FLAG_AUTO_TOOL_CALL = SP_AUTO_TOOL_CALL,
};
#ifndef AUTO_TOOL_CALL
#define AUTO_TOOL_CALL SP_AUTO_TOOL_CALL
#endif

/* One record written by sp_epoll_wait. */
typedef struct sp_epoll_event { int32_t fd; int32_t events; } sp_epoll_event;

/* ---- raw imports (module "spear") -------------------------------------- */
SPEAR_IMPORT("log") int32_t sp_log(int32_t level, int32_t ptr, int32_t len);
SPEAR_IMPORT("time_now_ms") int64_t sp_time_now_ms(void);
SPEAR_IMPORT("wall_time_s") int64_t sp_wall_time_s(void);
SPEAR_IMPORT("random_i64") int64_t sp_random_i64(void);
SPEAR_IMPORT("sleep_ms") void sp_sleep_ms(int32_t ms);

SPEAR_IMPORT("cchat_create") int32_t sp_cchat_create(void);
SPEAR_IMPORT("cchat_write_msg")
int32_t sp_cchat_write_msg(int32_t fd, int32_t role_ptr, int32_t role_len, int32_t content_ptr,
                           int32_t content_len);
SPEAR_IMPORT("cchat_write_fn")
int32_t sp_cchat_write_fn(int32_t fd, int32_t fn_offset, int32_t json_ptr, int32_t json_len);
SPEAR_IMPORT("cchat_ctl")
int32_t sp_cchat_ctl(int32_t fd, int32_t cmd, int32_t arg_ptr, int32_t arg_len_ptr);
SPEAR_IMPORT("cchat_send") int32_t sp_cchat_send(int32_t fd, int32_t flags);
SPEAR_IMPORT("cchat_recv") int32_t sp_cchat_recv(int32_t fd, int32_t out_ptr, int32_t out_len_ptr);
SPEAR_IMPORT("cchat_close") int32_t sp_cchat_close(int32_t fd);

SPEAR_IMPORT("spear_fd_ctl")
int32_t sp_fd_ctl(int32_t fd, int32_t cmd, int32_t arg_ptr, int32_t arg_len_ptr);
SPEAR_IMPORT("spear_epoll_create") int32_t sp_epoll_create(void);
SPEAR_IMPORT("spear_epoll_ctl") int32_t sp_epoll_ctl(int32_t epfd, int32_t op, int32_t fd, int32_t events);
SPEAR_IMPORT("spear_epoll_wait")
int32_t sp_epoll_wait(int32_t epfd, int32_t out_ptr, int32_t out_len_ptr, int32_t timeout_ms);
SPEAR_IMPORT("spear_epoll_close") int32_t sp_epoll_close(int32_t epfd);

/* Audio (spearpy links it and answers SP_ENOSYS) and user streams (below). */
SPEAR_IMPORT("rtasr_create") int32_t sp_rtasr_create(void);
SPEAR_IMPORT("rtasr_ctl") int32_t sp_rtasr_ctl(int32_t fd, int32_t cmd, int32_t arg_ptr, int32_t arg_len_ptr);
SPEAR_IMPORT("rtasr_write") int32_t sp_rtasr_write(int32_t fd, int32_t ptr, int32_t len);
SPEAR_IMPORT("rtasr_read") int32_t sp_rtasr_read(int32_t fd, int32_t out_ptr, int32_t out_len_ptr);
SPEAR_IMPORT("rtasr_close") int32_t sp_rtasr_close(int32_t fd);
SPEAR_IMPORT("mic_create") int32_t sp_mic_create(void);
SPEAR_IMPORT("mic_ctl") int32_t sp_mic_ctl(int32_t fd, int32_t cmd, int32_t arg_ptr, int32_t arg_len_ptr);
SPEAR_IMPORT("mic_read") int32_t sp_mic_read(int32_t fd, int32_t out_ptr, int32_t out_len_ptr);
SPEAR_IMPORT("mic_close") int32_t sp_mic_close(int32_t fd);
SPEAR_IMPORT("user_stream_open") int32_t sp_user_stream_open(int32_t stream_id, int32_t direction);
SPEAR_IMPORT("user_stream_read") int32_t sp_user_stream_read(int32_t fd, int32_t out_ptr, int32_t out_len_ptr);
SPEAR_IMPORT("user_stream_write") int32_t sp_user_stream_write(int32_t fd, int32_t ptr, int32_t len);
SPEAR_IMPORT("user_stream_close") int32_t sp_user_stream_close(int32_t fd);

/* A tool as the host calls it: tool(args_ptr, args_len, out_ptr, out_len_ptr). */
typedef int32_t (*sp_raw_tool)(int32_t, int32_t, int32_t, int32_t);

static inline const char *sp_errno_name(int32_t rc) {
    switch (rc) {
    case SP_OK: return "OK";
    case SP_EIO: return "EIO";
    case SP_EBADF: return "EBADF";
    case SP_EAGAIN: return "EAGAIN";
    case SP_ENOMEM: return "ENOMEM";
    case SP_EACCES: return "EACCES";
    case SP_EFAULT: return "EFAULT";
    case SP_EEXIST: return "EEXIST";
    case SP_EINVAL: return "EINVAL";
    case SP_EMFILE: return "EMFILE";
    case SP_ENOSPC: return "ENOSPC";
    case SP_ENOSYS: return "ENOSYS";
    case SP_ETIMEDOUT: return "ETIMEDOUT";
    default: return rc >= 0 ? "OK" : "E?";
    }
}

/* ---- sp_buf: a growable, always NUL-terminated byte buffer --------------- */
typedef struct sp_buf { char *data; size_t len; size_t cap; } sp_buf;
#define SP_BUF_INIT {NULL, 0, 0}

/* Makes room for `extra` more bytes plus the NUL. 0 or SP_ENOMEM. */
static inline int32_t sp_buf_reserve(sp_buf *b, size_t extra) {
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 16;
    while (cap < need) cap *= 2;
    char *p = (char *)realloc(b->data, cap);
    if (!p) return SP_ENOMEM;
    b->data = p;
    b->cap = cap;
    b->data[b->len] = 0;
    return 0;
}
static inline void sp_buf_clear(sp_buf *b) { b->len = 0; if (b->data) b->data[0] = 0; }
static inline void sp_buf_free(sp_buf *b) { free(b->data); b->data = NULL; b->len = b->cap = 0; }
static inline int32_t sp_buf_append(sp_buf *b, const void *p, size_t n) {
    if (sp_buf_reserve(b, n)) return SP_ENOMEM;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}
static inline int32_t sp_buf_puts(sp_buf *b, const char *s) { return sp_buf_append(b, s, strlen(s)); }
static inline int32_t sp_buf_printf(sp_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || sp_buf_reserve(b, (size_t)n)) return SP_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}
/* Appends `s` as a quoted JSON string; bytes >= 0x80 pass through (UTF-8). */
static inline int32_t sp_buf_json_string(sp_buf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    if (sp_buf_append(b, "\"", 1)) return SP_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[7] = {'\\', 0, 0, 0, 0, 0, 0};
        size_t k = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            if (c >= 0x20) { if (sp_buf_append(b, &s[i], 1)) return SP_ENOMEM; continue; }
            esc[1] = 'u'; esc[2] = '0'; esc[3] = '0'; esc[4] = hex[c >> 4]; esc[5] = hex[c & 15];
            k = 6;
        }
        if (sp_buf_append(b, esc, k)) return SP_ENOMEM;
    }
    return sp_buf_append(b, "\"", 1);
}

/* ---- logging ------------------------------------------------------------ */
static inline int32_t sp_log_str(int32_t level, const char *msg) {
    size_t n = strlen(msg);
    return sp_log(level, SP_PTR(msg), (int32_t)(n > SP_MAX_LOG_LEN ? SP_MAX_LOG_LEN : n));
}
static inline int32_t sp_logf(int32_t level, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return SP_EINVAL;
    /* Long lines are cut, not dropped: a log line is for humans. */
    return sp_log(level, SP_PTR(line), n < (int)sizeof line ? n : (int)sizeof line - 1);
}

/* ---- sessions ----------------------------------------------------------- */
static inline int32_t sp_write_msg_n(int32_t fd, const char *role, const char *content, size_t len) {
    return sp_cchat_write_msg(fd, SP_PTR(role), (int32_t)strlen(role), SP_PTR(content), (int32_t)len);
}
static inline int32_t sp_write_msg(int32_t fd, const char *role, const char *content) {
    return sp_write_msg_n(fd, role, content, strlen(content));
}
/* Answers a pending tool call yourself (after a plain send). */
static inline int32_t sp_write_tool_result(int32_t fd, const char *call_id, const char *content) {
    sp_buf b = SP_BUF_INIT;
    int32_t rc = sp_buf_puts(&b, "{\"tool_call_id\":");
    rc = rc ? rc : sp_buf_json_string(&b, call_id, strlen(call_id));
    rc = rc ? rc : sp_buf_puts(&b, ",\"content\":");
    rc = rc ? rc : sp_buf_json_string(&b, content, strlen(content));
    rc = rc ? rc : sp_buf_puts(&b, "}");
    rc = rc ? rc : sp_write_msg_n(fd, "tool", b.data, b.len);
    sp_buf_free(&b);
    return rc;
}
static inline int32_t sp_register_tool(int32_t fd, sp_raw_tool fn, const char *schema_json) {
    return sp_cchat_write_fn(fd, SP_FN_INDEX(fn), SP_PTR(schema_json), (int32_t)strlen(schema_json));
}

static inline int32_t sp_set_param_json(int32_t fd, const char *json, size_t len) {
    uint32_t n = (uint32_t)len;
    return sp_cchat_ctl(fd, SP_CTL_SET_PARAM, SP_PTR(json), SP_PTR(&n));
}
/* `raw_value` is already JSON (a number, true, an object...). */
static inline int32_t sp_set_param_raw(int32_t fd, const char *key, const char *raw_value) {
    sp_buf b = SP_BUF_INIT;
    int32_t rc = sp_buf_puts(&b, "{\"key\":");
    rc = rc ? rc : sp_buf_json_string(&b, key, strlen(key));
    rc = rc ? rc : sp_buf_printf(&b, ",\"value\":%s}", raw_value);
    rc = rc ? rc : sp_set_param_json(fd, b.data, b.len);
    sp_buf_free(&b);
    return rc;
}
static inline int32_t sp_set_param_str(int32_t fd, const char *key, const char *value) {
    sp_buf v = SP_BUF_INIT;
    int32_t rc = sp_buf_json_string(&v, value, strlen(value));
    rc = rc ? rc : sp_set_param_raw(fd, key, v.data);
    sp_buf_free(&v);
    return rc;
}
static inline int32_t sp_set_param_int(int32_t fd, const char *key, int64_t value) {
    char num[24];
    snprintf(num, sizeof num, "%lld", (long long)value);
    return sp_set_param_raw(fd, key, num);
}
static inline int32_t sp_set_param_bool(int32_t fd, const char *key, int value) {
    return sp_set_param_raw(fd, key, value ? "true" : "false");
}
/* A param whose value is an array of strings (MCP's server_ids, allowlists). */
static inline int32_t sp_set_param_strs(int32_t fd, const char *key, const char *const *items,
                                        size_t count) {
    sp_buf v = SP_BUF_INIT;
    int32_t rc = sp_buf_puts(&v, "[");
    for (size_t i = 0; i < count && !rc; i++) {
        rc = i ? sp_buf_puts(&v, ",") : 0;
        rc = rc ? rc : sp_buf_json_string(&v, items[i], strlen(items[i]));
    }
    rc = rc ? rc : sp_buf_puts(&v, "]");
    rc = rc ? rc : sp_set_param_raw(fd, key, v.data);
    sp_buf_free(&v);
    return rc;
}
/* SPEAR's MCP session layer: a session may only narrow what the run allows
 * (-13 EACCES past it). `servers`/`allow`/`deny` may be NULL (not set). */
static inline int32_t sp_mcp_enable(int32_t fd, int on) {
    return sp_set_param_bool(fd, "mcp.enabled", on);
}
static inline int32_t sp_mcp_select(int32_t fd, const char *const *servers, size_t n_servers,
                                    const char *const *allow, size_t n_allow,
                                    const char *const *deny, size_t n_deny) {
    int32_t rc = servers ? sp_set_param_strs(fd, "mcp.server_ids", servers, n_servers) : 0;
    rc = rc ? rc : allow ? sp_set_param_strs(fd, "mcp.tool_allowlist", allow, n_allow) : 0;
    rc = rc ? rc : deny ? sp_set_param_strs(fd, "mcp.tool_denylist", deny, n_deny) : 0;
    return rc;
}
/* Lets the host put tool args/output in `arena` instead of calling spear_alloc. */
static inline int32_t sp_set_tool_arena(int32_t fd, void *arena, size_t len) {
    int32_t rc = sp_set_param_int(fd, "tool_arena_ptr", SP_PTR(arena));
    return rc ? rc : sp_set_param_int(fd, "tool_arena_len", (int64_t)len);
}

static inline int32_t sp_send(int32_t fd, int32_t flags) { return sp_cchat_send(fd, flags); }

/* Reads a payload into `out` (replacing its contents), growing it on
 * SP_ENOSPC. The first attempt uses out's current capacity, so a caller can
 * start small. `grows` (may be NULL) counts the SP_ENOSPC round trips.
 * Returns the byte count or a negative errno. */
static inline int32_t sp__read_grow(int32_t which, int32_t fd, sp_buf *out, unsigned *grows) {
    if (out->cap < 2 && sp_buf_reserve(out, 4096)) return SP_ENOMEM;
    sp_buf_clear(out);
    for (int attempt = 0; attempt < 8; attempt++) {
        uint32_t cap = (uint32_t)(out->cap - 1), len = cap;
        int32_t rc = which == SP_CTL_GET_METRICS
                         ? sp_cchat_ctl(fd, SP_CTL_GET_METRICS, SP_PTR(out->data), SP_PTR(&len))
                         : sp_cchat_recv(fd, SP_PTR(out->data), SP_PTR(&len));
        if (rc >= 0) {
            if (len > cap) return SP_EIO; /* a host that overran us: never trust it */
            out->len = len;
            out->data[len] = 0;
            return rc;
        }
        if (rc != SP_ENOSPC) return rc;
        if (len <= cap) return SP_EIO; /* -28 without asking for more would loop */
        if (grows) (*grows)++;
        if (sp_buf_reserve(out, len)) return SP_ENOMEM;
    }
    return SP_EIO;
}
static inline int32_t sp_recv(int32_t resp_fd, sp_buf *out, unsigned *grows) {
    return sp__read_grow(0, resp_fd, out, grows);
}
static inline int32_t sp_get_metrics(int32_t resp_fd, sp_buf *out) {
    return sp__read_grow(SP_CTL_GET_METRICS, resp_fd, out, NULL);
}

/* ---- tiny JSON readers --------------------------------------------------
 * Enough for flat tool arguments and for the compact bodies the host
 * returns: they find the FIRST `"key":` at any depth. String contents are
 * skipped as whole tokens, so text inside a value never passes for a key.
 * Use a real parser for anything where depth matters. */
static inline const char *sp__skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}
static inline const char *sp_json_find(const char *json, const char *key) {
    size_t klen = strlen(key);
    const char *p = json;
    while (*p) {
        if (*p != '"') { p++; continue; }
        const char *start = ++p;
        while (*p && *p != '"') p += (*p == '\\' && p[1]) ? 2 : 1;
        if (!*p) return NULL;
        size_t n = (size_t)(p - start);
        const char *q = sp__skip_ws(p + 1);
        p++;
        if (*q == ':' && n == klen && memcmp(start, key, klen) == 0) return sp__skip_ws(q + 1);
    }
    return NULL;
}
static inline int sp_json_get_int(const char *json, const char *key, long long *out) {
    const char *v = sp_json_find(json, key);
    char *end = NULL;
    if (!v) return 0;
    long long x = strtoll(v, &end, 10);
    if (end == v) return 0;
    *out = x;
    return 1;
}
static inline void sp__utf8(sp_buf *b, unsigned cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 63)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | ((cp >> 6) & 63));
        u[2] = (char)(0x80 | (cp & 63)); n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | ((cp >> 12) & 63));
        u[2] = (char)(0x80 | ((cp >> 6) & 63)); u[3] = (char)(0x80 | (cp & 63)); n = 4;
    }
    sp_buf_append(b, u, n);
}
static inline unsigned sp__hex4(const char *p) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v = v * 16 + (unsigned)(c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                               : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 0);
        if (!c) return 0xFFFD;
    }
    return v;
}
/* Unescapes the string value of `key` into `out` (cleared first). 1 if found. */
static inline int sp_json_get_string(const char *json, const char *key, sp_buf *out) {
    const char *p = sp_json_find(json, key);
    if (!p || *p != '"') return 0;
    if (sp_buf_reserve(out, 0)) return 0;
    sp_buf_clear(out);
    for (p++; *p && *p != '"'; p++) {
        if (*p != '\\') { sp_buf_append(out, p, 1); continue; }
        p++;
        switch (*p) {
        case 'n': sp_buf_append(out, "\n", 1); break;
        case 'r': sp_buf_append(out, "\r", 1); break;
        case 't': sp_buf_append(out, "\t", 1); break;
        case 'b': sp_buf_append(out, "\b", 1); break;
        case 'f': sp_buf_append(out, "\f", 1); break;
        case 'u': {
            unsigned cp = sp__hex4(p + 1);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[1] == '\\' && p[2] == 'u') {
                unsigned lo = sp__hex4(p + 3);
                if (lo >= 0xDC00 && lo < 0xE000) { cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00); p += 6; }
            }
            sp__utf8(out, cp);
            break;
        }
        case 0: return 0;
        default: sp_buf_append(out, p, 1); /* \" \\ \/ */
        }
    }
    return *p == '"';
}

/* ---- tools from plain C handlers -----------------------------------------
 * A handler writes its JSON result into `out` and returns 0, or returns
 * nonzero on failure. SP_TOOL(name, handler) defines the raw-ABI function
 * `name` to pass to sp_register_tool. When the host's buffer is too small
 * the tool answers SP_ENOSPC with the needed length and keeps the output,
 * so the handler runs once per call even when the host has to retry. */
typedef int (*sp_tool_handler)(const char *args, size_t args_len, sp_buf *out);
typedef struct sp_tool_state { sp_buf pending; sp_buf pending_args; int has_pending; } sp_tool_state;

static inline int32_t sp_tool_dispatch(sp_tool_handler handler, sp_tool_state *st, int32_t args_ptr,
                                       int32_t args_len, int32_t out_ptr, int32_t out_len_ptr) {
    const char *args = (const char *)(intptr_t)args_ptr;
    size_t alen = args_len > 0 ? (size_t)args_len : 0;
    uint32_t cap;
    memcpy(&cap, (const void *)(intptr_t)out_len_ptr, sizeof cap);
    int same = st->has_pending && st->pending_args.len == alen &&
               memcmp(st->pending_args.data, args, alen) == 0;
    if (!same) {
        st->has_pending = 0;
        sp_buf_clear(&st->pending);
        sp_buf_clear(&st->pending_args);
        /* The host NUL-terminates args, but a copy costs little and lets
         * handlers rely on it whoever calls them. */
        if (sp_buf_append(&st->pending_args, args, alen)) return SP_ENOMEM;
        int rc = handler(st->pending_args.data, alen, &st->pending);
        if (rc != 0) return rc == SP_ENOSPC ? -1 : rc;
        if (sp_buf_reserve(&st->pending, 0)) return SP_ENOMEM;
        st->has_pending = 1;
    }
    uint32_t need = (uint32_t)st->pending.len;
    memcpy((void *)(intptr_t)out_len_ptr, &need, sizeof need);
    if (need > cap) return SP_ENOSPC;
    memcpy((void *)(intptr_t)out_ptr, st->pending.data, need);
    st->has_pending = 0;
    return 0;
}

#define SP_TOOL(name, handler)                                                            \
    static sp_tool_state name##__sp_state;                                                \
    int32_t name(int32_t args_ptr, int32_t args_len, int32_t out_ptr, int32_t out_len_ptr) { \
        return sp_tool_dispatch(handler, &name##__sp_state, args_ptr, args_len, out_ptr,  \
                                out_len_ptr);                                             \
    }

/* ---- user streams (SPEAR's user_stream_* and SSF v1 frames) --------------
 * A client (a WebSocket on `spearpy serve`, `spearpy run --stream-stdio`, an
 * embedder) sends SSF frames on numbered streams. The guest learns of each
 * stream on a control fd (8-byte events: u32 stream_id, u32 kind), opens it,
 * and reads and writes whole frames; all of them are pollable with
 * sp_epoll_*. -EAGAIN is backpressure: wait for EPOLLIN / EPOLLOUT. */
SPEAR_IMPORT("user_stream_ctl_open") int32_t sp_user_stream_ctl_open(void);
SPEAR_IMPORT("user_stream_ctl_read")
int32_t sp_user_stream_ctl_read(int32_t fd, int32_t out_ptr, int32_t out_len_ptr);

#define SP_EPIPE (-32)       /* the client session ended */
#define SP_ECONNRESET (-104)
#define SP_ENOTCONN (-107)   /* no client yet (write), or none can reach this run (open) */
#define SP_STREAM_IN 1       /* user_stream_open directions */
#define SP_STREAM_OUT 2
#define SP_STREAM_BIDI 3
#define SP_STREAM_CONNECTED 1 /* control event kinds */
#define SP_SESSION_CLOSED 2

/* SPEAR's spellings, so code written against its header compiles unchanged. */
enum { SPEAR_EPERM = 1, SPEAR_ENOENT = 2, SPEAR_EPIPE = 32, SPEAR_ECONNRESET = 104,
       SPEAR_ENOTCONN = 107 };
enum { SPEAR_USER_STREAM_DIR_INBOUND = 1, SPEAR_USER_STREAM_DIR_OUTBOUND = 2,
       SPEAR_USER_STREAM_DIR_BIDIRECTIONAL = 3 };
enum { SPEAR_USER_STREAM_CTL_EVENT_STREAM_CONNECTED = 1,
       SPEAR_USER_STREAM_CTL_EVENT_SESSION_CLOSED = 2 };
enum { SPEAR_EPOLL_CTL_ADD = 1, SPEAR_EPOLL_CTL_MOD = 2, SPEAR_EPOLL_CTL_DEL = 3 };
#define SPEAR_EP_CTL_ADD SPEAR_EPOLL_CTL_ADD
#define SPEAR_EP_CTL_MOD SPEAR_EPOLL_CTL_MOD
#define SPEAR_EP_CTL_DEL SPEAR_EPOLL_CTL_DEL
enum { SPEAR_EPOLLIN = 0x001, SPEAR_EPOLLOUT = 0x004, SPEAR_EPOLLERR = 0x008,
       SPEAR_EPOLLHUP = 0x010 };
static inline int32_t sp_ep_create(void) { return sp_epoll_create(); }
static inline int32_t sp_ep_ctl(int32_t epfd, int32_t op, int32_t fd, int32_t events) {
    return sp_epoll_ctl(epfd, op, fd, events);
}
static inline int32_t sp_ep_wait(int32_t epfd, int32_t out_ptr, int32_t out_len_ptr, int32_t timeout_ms) {
    return sp_epoll_wait(epfd, out_ptr, out_len_ptr, timeout_ms);
}
static inline int32_t sp_ep_close(int32_t epfd) { return sp_epoll_close(epfd); }

typedef struct { uint32_t stream_id; uint32_t kind; } sp_user_stream_ctl_event_t;
/* One control event: 8 (its size), SP_EAGAIN when none is queued, or an errno. */
static inline int32_t sp_user_stream_ctl_read_event(int32_t fd, sp_user_stream_ctl_event_t *out) {
    uint32_t len = (uint32_t)sizeof *out;
    return sp_user_stream_ctl_read(fd, SP_PTR(out), SP_PTR(&len));
}

/* SSF v1: a 32-byte little-endian header (magic "SPST", version 1,
 * header_len, msg_type, flags, stream_id, seq, meta_len, data_len), then
 * meta (JSON, may be empty) and data. wasm32 is little-endian: memcpy. */
#define SP_SSF_HEADER_LEN 32
enum { SP_SSF_OPEN = 1, SP_SSF_DATA = 2, SP_SSF_COMMIT = 3, SP_SSF_CLOSE = 4, SP_SSF_ACK = 5,
       SP_SSF_ERROR = 6, SP_SSF_PING = 7, SP_SSF_PONG = 8 };
typedef struct sp_ssf_frame {
    uint16_t msg_type, flags;
    uint32_t stream_id;
    uint64_t seq;
    const uint8_t *meta, *data; /* point into the parsed buffer */
    uint32_t meta_len, data_len;
} sp_ssf_frame;

/* Splits a frame: 0, or SP_EINVAL if `buf` is not one whole SSF v1 frame. */
static inline int32_t sp_ssf_parse(const void *buf, size_t len, sp_ssf_frame *out) {
    const uint8_t *p = (const uint8_t *)buf;
    uint16_t version, header_len;
    if (len < SP_SSF_HEADER_LEN || memcmp(p, "SPST", 4) != 0) return SP_EINVAL;
    memcpy(&version, p + 4, 2);
    memcpy(&header_len, p + 6, 2);
    if (version != 1 || header_len < SP_SSF_HEADER_LEN || header_len > len) return SP_EINVAL;
    memcpy(&out->msg_type, p + 8, 2);
    memcpy(&out->flags, p + 10, 2);
    memcpy(&out->stream_id, p + 12, 4);
    memcpy(&out->seq, p + 16, 8);
    memcpy(&out->meta_len, p + 24, 4);
    memcpy(&out->data_len, p + 28, 4);
    if ((uint64_t)out->meta_len + out->data_len != len - header_len) return SP_EINVAL;
    out->meta = p + header_len;
    out->data = out->meta + out->meta_len;
    return 0;
}

/* Builds one frame in `out` (replacing its contents): 0 or SP_ENOMEM. */
static inline int32_t sp_ssf_build(sp_buf *out, uint32_t stream_id, uint64_t seq, uint16_t msg_type,
                                   const void *meta, uint32_t meta_len, const void *data,
                                   uint32_t data_len) {
    uint8_t h[SP_SSF_HEADER_LEN];
    uint16_t version = 1, header_len = SP_SSF_HEADER_LEN, flags = 0;
    memcpy(h, "SPST", 4);
    memcpy(h + 4, &version, 2);
    memcpy(h + 6, &header_len, 2);
    memcpy(h + 8, &msg_type, 2);
    memcpy(h + 10, &flags, 2);
    memcpy(h + 12, &stream_id, 4);
    memcpy(h + 16, &seq, 8);
    memcpy(h + 24, &meta_len, 4);
    memcpy(h + 28, &data_len, 4);
    sp_buf_clear(out);
    if (sp_buf_append(out, h, sizeof h)) return SP_ENOMEM;
    if (meta_len && sp_buf_append(out, meta, meta_len)) return SP_ENOMEM;
    if (data_len && sp_buf_append(out, data, data_len)) return SP_ENOMEM;
    return 0;
}

/* Reads one whole frame into `out` (replacing its contents), growing it on
 * SP_ENOSPC: the byte count, SP_EAGAIN when none is queued, SP_EPIPE when
 * the stream is closed and drained, or another negative errno. */
static inline int32_t sp_stream_read(int32_t fd, sp_buf *out) {
    if (out->cap < 2 && sp_buf_reserve(out, 4096)) return SP_ENOMEM;
    sp_buf_clear(out);
    for (int attempt = 0; attempt < 8; attempt++) {
        uint32_t cap = (uint32_t)(out->cap - 1), len = cap;
        int32_t rc = sp_user_stream_read(fd, SP_PTR(out->data), SP_PTR(&len));
        if (rc >= 0) {
            if (len > cap) return SP_EIO;
            out->len = len;
            out->data[len] = 0;
            return rc;
        }
        if (rc != SP_ENOSPC) return rc;
        if (len <= cap) return SP_EIO;
        if (sp_buf_reserve(out, len)) return SP_ENOMEM;
    }
    return SP_EIO;
}
/* SPEAR's helper: one frame in a malloc'd buffer (free it), NULL on any error. */
static inline uint8_t *sp_user_stream_read_alloc(int32_t fd, uint32_t *out_len) {
    sp_buf b = SP_BUF_INIT;
    if (sp_stream_read(fd, &b) < 0) { sp_buf_free(&b); return NULL; }
    *out_len = (uint32_t)b.len;
    return (uint8_t *)b.data;
}

/* ---- audio in (SPEAR's mic_* and rtasr_*) -------------------------------
 * A mic fd hands out PCM frames (one per mic_read); an rtasr fd takes PCM
 * (rtasr_write returns the bytes queued, SP_EAGAIN when its send queue is
 * full) and hands out one JSON event of the realtime transcription server
 * per rtasr_read. Both are pollable with sp_epoll_*. docs/audio.md has the
 * params. Note: errno.h's EAGAIN is WASI's (6), not the ABI's: compare
 * hostcall results with SP_EAGAIN. */
enum { SPEAR_MIC_CTL_SET_PARAM = 1, SPEAR_MIC_CTL_GET_STATUS = 2 };
enum { SPEAR_RTA_CTL_SET_PARAM = 1, SPEAR_RTA_CTL_CONNECT = 2, SPEAR_RTA_CTL_GET_STATUS = 3,
       SPEAR_RTA_CTL_SEND_EVENT = 4, SPEAR_RTA_CTL_FLUSH = 5, SPEAR_RTA_CTL_CLEAR = 6,
       SPEAR_RTA_CTL_SET_AUTOFLUSH = 7, SPEAR_RTA_CTL_GET_AUTOFLUSH = 8 };

/* One mic frame, rtasr event, status or autoflush in a malloc'd buffer (free
 * it), NUL-terminated past *out_len; NULL on any error, SP_EAGAIN included. */
enum { SP__AUDIO_MIC_READ, SP__AUDIO_MIC_STATUS, SP__AUDIO_RTASR_READ, SP__AUDIO_RTASR_STATUS,
       SP__AUDIO_RTASR_AUTOFLUSH };
static inline uint8_t *sp__audio_read_alloc(int32_t which, int32_t fd, uint32_t *out_len) {
    uint32_t cap = which == SP__AUDIO_MIC_READ || which == SP__AUDIO_RTASR_READ ? 65536 : 8192;
    uint8_t *buf = (uint8_t *)malloc(cap + 1);
    for (int attempt = 0; buf && attempt < 4; attempt++) {
        uint32_t len = cap;
        int32_t rc;
        switch (which) {
        case SP__AUDIO_MIC_READ: rc = sp_mic_read(fd, SP_PTR(buf), SP_PTR(&len)); break;
        case SP__AUDIO_MIC_STATUS:
            rc = sp_mic_ctl(fd, SPEAR_MIC_CTL_GET_STATUS, SP_PTR(buf), SP_PTR(&len)); break;
        case SP__AUDIO_RTASR_READ: rc = sp_rtasr_read(fd, SP_PTR(buf), SP_PTR(&len)); break;
        case SP__AUDIO_RTASR_AUTOFLUSH:
            rc = sp_rtasr_ctl(fd, SPEAR_RTA_CTL_GET_AUTOFLUSH, SP_PTR(buf), SP_PTR(&len)); break;
        default: rc = sp_rtasr_ctl(fd, SPEAR_RTA_CTL_GET_STATUS, SP_PTR(buf), SP_PTR(&len));
        }
        if (rc >= 0 && len <= cap) {
            buf[len] = 0;
            *out_len = len;
            return buf;
        }
        if (rc != SP_ENOSPC || len <= cap) break; /* -28 without asking for more would loop */
        cap = len;
        uint8_t *grown = (uint8_t *)realloc(buf, cap + 1);
        if (!grown) break;
        buf = grown;
    }
    free(buf);
    return NULL;
}

static inline int32_t sp_mic_set_param_json(int32_t fd, const char *json, uint32_t json_len) {
    uint32_t len = json_len;
    return sp_mic_ctl(fd, SPEAR_MIC_CTL_SET_PARAM, SP_PTR(json), SP_PTR(&len));
}
static inline uint8_t *sp_mic_get_status_alloc(int32_t fd, uint32_t *out_len) {
    return sp__audio_read_alloc(SP__AUDIO_MIC_STATUS, fd, out_len);
}
static inline uint8_t *sp_mic_read_alloc(int32_t fd, uint32_t *out_len) {
    return sp__audio_read_alloc(SP__AUDIO_MIC_READ, fd, out_len);
}

static inline int32_t sp_rtasr_set_param_json(int32_t fd, const char *json, uint32_t json_len) {
    uint32_t len = json_len;
    return sp_rtasr_ctl(fd, SPEAR_RTA_CTL_SET_PARAM, SP_PTR(json), SP_PTR(&len));
}
/* {"key": key, "value": ...}: a JSON string (JSON-escaped) or a number. */
static inline int32_t sp__rtasr_set_param(int32_t fd, const char *key, const char *str,
                                          uint32_t num) {
    sp_buf b = SP_BUF_INIT;
    int32_t rc = SP_ENOMEM;
    if (!sp_buf_puts(&b, "{\"key\":") && !sp_buf_json_string(&b, key, strlen(key)) &&
        !sp_buf_puts(&b, ",\"value\":") &&
        !(str ? sp_buf_json_string(&b, str, strlen(str)) : sp_buf_printf(&b, "%u", num)) &&
        !sp_buf_puts(&b, "}"))
        rc = sp_rtasr_set_param_json(fd, b.data, (uint32_t)b.len);
    sp_buf_free(&b);
    return rc;
}
static inline int32_t sp_rtasr_set_param_string(int32_t fd, const char *key, const char *value) {
    return sp__rtasr_set_param(fd, key, value ? value : "", 0);
}
static inline int32_t sp_rtasr_set_param_u32(int32_t fd, const char *key, uint32_t value) {
    return sp__rtasr_set_param(fd, key, NULL, value);
}
static inline int32_t sp__rtasr_cmd(int32_t fd, int32_t cmd) {
    uint32_t len = 0;
    return sp_rtasr_ctl(fd, cmd, 0, SP_PTR(&len));
}
static inline int32_t sp_rtasr_connect(int32_t fd) { return sp__rtasr_cmd(fd, SPEAR_RTA_CTL_CONNECT); }
static inline int32_t sp_rtasr_flush(int32_t fd) { return sp__rtasr_cmd(fd, SPEAR_RTA_CTL_FLUSH); }
static inline int32_t sp_rtasr_clear(int32_t fd) { return sp__rtasr_cmd(fd, SPEAR_RTA_CTL_CLEAR); }
static inline int32_t sp_rtasr_set_autoflush_json(int32_t fd, const char *json, uint32_t json_len) {
    uint32_t len = json_len;
    return sp_rtasr_ctl(fd, SPEAR_RTA_CTL_SET_AUTOFLUSH, SP_PTR(json), SP_PTR(&len));
}
static inline int32_t sp_rtasr_send_event_json(int32_t fd, const char *json, uint32_t json_len) {
    uint32_t len = json_len;
    return sp_rtasr_ctl(fd, SPEAR_RTA_CTL_SEND_EVENT, SP_PTR(json), SP_PTR(&len));
}
static inline uint8_t *sp_rtasr_read_alloc(int32_t fd, uint32_t *out_len) {
    return sp__audio_read_alloc(SP__AUDIO_RTASR_READ, fd, out_len);
}
static inline uint8_t *sp_rtasr_get_status_alloc(int32_t fd, uint32_t *out_len) {
    return sp__audio_read_alloc(SP__AUDIO_RTASR_STATUS, fd, out_len);
}
static inline uint8_t *sp_rtasr_get_autoflush_alloc(int32_t fd, uint32_t *out_len) {
    return sp__audio_read_alloc(SP__AUDIO_RTASR_AUTOFLUSH, fd, out_len);
}

/* ---- allocator exports (the host's fallback when no arena is set) ------- */
#ifdef SPEAR_IMPLEMENTATION
__attribute__((export_name("spear_alloc"))) int32_t spear_alloc(int32_t size) {
    if (size < 0) return 0;
    return SP_PTR(malloc(size ? (size_t)size : 1));
}
__attribute__((export_name("spear_free"))) void spear_free(int32_t ptr, int32_t size) {
    (void)size;
    free((void *)(intptr_t)ptr);
}
#endif

#endif /* SPEAR_GUEST_H */
