/* sdk_selftest: unit checks of spear.h itself, run inside wasm with no
 * model: JSON quoting and reading, sp_buf growth, and the SP_TOOL buffer
 * protocol driven by hand the way the host drives it.
 * Exit status = the number of failed checks. */
#define SPEAR_IMPLEMENTATION
#include "../spear.h"

static int failed;

static void check(const char *what, int ok) {
    failed += !ok;
    printf("%-52s %s\n", what, ok ? "ok" : "FAILED");
}

static int runs;
static int repeat(const char *args, size_t len, sp_buf *out) {
    long long n = 0;
    runs++;
    (void)len;
    if (!sp_json_get_int(args, "n", &n) || n < 0) return 7;
    for (long long i = 0; i < n; i++) sp_buf_puts(out, "ab");
    return 0;
}
SP_TOOL(repeat_tool, repeat)

/* Calls the tool the way the host does: args + NUL, capacity in, length out. */
static int32_t call(const char *args, char *out, uint32_t *len) {
    return repeat_tool(SP_PTR(args), (int32_t)strlen(args), SP_PTR(out), SP_PTR(len));
}

int main(void) {
    sp_buf b = SP_BUF_INIT, s = SP_BUF_INIT;
    const char *raw = "a\"b\\c\n\x01\xc3\xa9";
    sp_buf_json_string(&b, raw, strlen(raw));
    check("json_string escapes quotes, backslash, controls", strcmp(b.data, "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\"") == 0);

    const char *doc = "{\"x\" : 12, \"name\":\"caf\\u00e9 \\ud83d\\ude00\\t\\\"q\\\"\",\"neg\":-5}";
    long long x = 0, neg = 0;
    check("get_int tolerates spaces around ':'", sp_json_get_int(doc, "x", &x) && x == 12);
    check("get_int reads negatives", sp_json_get_int(doc, "neg", &neg) && neg == -5);
    check("get_int of a missing key", !sp_json_get_int(doc, "nope", &x));
    check("get_string unescapes \\u, surrogates, \\t, \\\"",
          sp_json_get_string(doc, "name", &s) && strcmp(s.data, "caf\xc3\xa9 \xf0\x9f\x98\x80\t\"q\"") == 0);
    const char *nested = "{\"a\":\"\\\"b\\\":1\",\"c\":{\"b\":2}}"; /* {"a":"\"b\":1","c":{"b":2}} */
    long long bv = 0;
    check("text inside a string value is not a key", sp_json_get_int(nested, "b", &bv) && bv == 2);

    sp_buf_clear(&b);
    for (int i = 0; i < 1000; i++) sp_buf_printf(&b, "%d,", i);
    check("sp_buf grows and stays NUL-terminated", b.len == strlen(b.data) && b.len == 3890);

    char out[64];
    uint32_t len = sizeof out;
    int32_t rc = call("{\"n\":3}", out, &len);
    check("tool: small output fits", rc == 0 && len == 6 && memcmp(out, "ababab", 6) == 0);

    char *big = malloc(400);
    len = 16;
    rc = call("{\"n\":100}", big, &len);
    check("tool: -28 with the needed length", rc == SP_ENOSPC && len == 200);
    len = 400;
    int runs_before = runs;
    rc = call("{\"n\":100}", big, &len);
    check("tool: retry gets the kept output, no second run", rc == 0 && len == 200 && runs == runs_before);

    len = 16;
    call("{\"n\":50}", big, &len);
    len = 400;
    runs_before = runs;
    rc = call("{\"n\":60}", big, &len);
    check("tool: different args after -28 run the handler again", rc == 0 && len == 120 && runs == runs_before + 1);

    len = sizeof out;
    check("tool: handler failure passes its code through", call("{\"n\":-1}", out, &len) == 7);
    check("errno names", strcmp(sp_errno_name(SP_EMFILE), "EMFILE") == 0 && strcmp(sp_errno_name(-99), "E?") == 0);
    check("function index of a tool is a table slot", SP_FN_INDEX(repeat_tool) > 0);

    printf("failed: %d\n", failed);
    return failed;
}
