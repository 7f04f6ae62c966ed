/* rtasr_controls: spear.h's realtime speech-recognition controls,
 * sp_rtasr_get_autoflush_alloc, sp_rtasr_send_event_json, sp_rtasr_flush and
 * sp_rtasr_clear (the C twin of guest/rust/samples/rtasr_controls.rs, same
 * output).
 *
 * Connects an rtasr fd (the websocket transport, autoflush "manual": only
 * the guest commits; the autoflush the host then reports is printed as
 * `autoflush: JSON`) and waits for `session.updated`, then, waiting after
 * each step for the server's answer:
 *   1. send-event: a `conversation.item.create` event, passed on as it is;
 *   2. 100 ms of tone, flush: the server commits it and transcribes it;
 *   3. 100 ms of tone, clear: the server drops it (`cleared`), and a flush
 *      right after has nothing to transcribe (only `committed`);
 *   4. 100 ms of tone, flush: transcribed as the next utterance.
 * Every call's result is printed (`flush: 0`), every event read as
 * `event: TYPE`, `delta: TEXT` or `transcript: TEXT`; then `status: JSON`.
 * Exit 0, or 1 when a call fails, the connection ends (`rtasr err`,
 * `rtasr hup`) or nothing comes for 10 s (`timeout`).
 *
 * `spearpy run --rtasr-url ws://HOST/v1/realtime?intent=transcription`
 * names the server (tests/test_audio_rtasr_controls.py runs it against
 * spearpy.testing.ScriptedAsrServer). */
#define SPEAR_IMPLEMENTATION
#include "../spear.h"

#define WATCH (SP_EPOLLIN | SP_EPOLLERR | SP_EPOLLHUP)
#define WAIT_MS 10000
#define TONE_BYTES 4800 /* 100 ms of pcm16 LE mono at 24 kHz */

static const char AUTOFLUSH[] = "{\"strategy\":\"manual\",\"flush_on_close\":false}";
static const char ITEM[] =
    "{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\","
    "\"content\":[{\"type\":\"input_text\",\"text\":\"spear rtasr controls\"}]}}";
static const char DELTA[] = "conversation.item.input_audio_transcription.delta";
static const char COMPLETED[] = "conversation.item.input_audio_transcription.completed";

static int32_t epfd, asr_fd;
static uint8_t tone[TONE_BYTES];

/* Prints a call's result and says whether it failed. */
static int failed(const char *what, int32_t rc) {
    printf("%s: %d\n", what, rc);
    return rc < 0;
}

/* Prints one event; 1 when its type is `kind`. */
static int print_event(const char *event, const char *kind) {
    sp_buf type = SP_BUF_INIT, text = SP_BUF_INIT;
    int found = 0;
    if (!sp_json_get_string(event, "type", &type)) {
        printf("event_bytes: %u\n", (unsigned)strlen(event));
    } else {
        if (strcmp(type.data, DELTA) == 0 && sp_json_get_string(event, "delta", &text))
            printf("delta: %s\n", text.data);
        else if (strcmp(type.data, COMPLETED) == 0 && sp_json_get_string(event, "transcript", &text))
            printf("transcript: %s\n", text.data);
        else
            printf("event: %s\n", type.data);
        found = strcmp(type.data, kind) == 0;
    }
    sp_buf_free(&type);
    sp_buf_free(&text);
    return found;
}

/* Prints the autoflush the host reports; 1 when it could not be read. */
static int print_autoflush(void) {
    uint32_t len = 0;
    uint8_t *json = sp_rtasr_get_autoflush_alloc(asr_fd, &len);
    if (!json) {
        printf("autoflush: failed\n");
        return 1;
    }
    printf("autoflush: %s\n", (char *)json);
    free(json);
    return 0;
}

/* Reads and prints events until one of type `kind`; 0 then, else 1 (said why). */
static int until(const char *kind) {
    for (;;) {
        sp_epoll_event ready[4];
        uint32_t ready_len = sizeof ready;
        int32_t n = sp_ep_wait(epfd, SP_PTR(ready), SP_PTR(&ready_len), WAIT_MS);
        if (n < 0) {
            printf("ep_wait: %d\n", n);
            return 1;
        }
        if (n == 0) {
            printf("timeout waiting for %s\n", kind);
            return 1;
        }
        if (!(ready[0].events & SPEAR_EPOLLIN)) {
            printf("rtasr %s\n", ready[0].events & SPEAR_EPOLLERR ? "err" : "hup");
            return 1;
        }
        uint32_t len = 0;
        uint8_t *event = sp_rtasr_read_alloc(asr_fd, &len);
        if (!event) continue; /* SP_EAGAIN */
        int found = print_event((const char *)event, kind);
        free(event);
        if (found) return 0;
    }
}

static int steps(void) {
    if (failed("set transport", sp_rtasr_set_param_string(asr_fd, "transport", "websocket")) ||
        failed("set autoflush", sp_rtasr_set_autoflush_json(asr_fd, AUTOFLUSH, strlen(AUTOFLUSH))) ||
        print_autoflush() ||
        failed("connect", sp_rtasr_connect(asr_fd)) || until("session.updated"))
        return 1;

    if (failed("send_event", sp_rtasr_send_event_json(asr_fd, ITEM, strlen(ITEM))) ||
        failed("write", sp_rtasr_write(asr_fd, SP_PTR(tone), TONE_BYTES)) ||
        failed("flush", sp_rtasr_flush(asr_fd)) || until(COMPLETED))
        return 1;

    if (failed("write", sp_rtasr_write(asr_fd, SP_PTR(tone), TONE_BYTES)) ||
        failed("clear", sp_rtasr_clear(asr_fd)) || until("input_audio_buffer.cleared") ||
        failed("flush", sp_rtasr_flush(asr_fd)) || until("input_audio_buffer.committed"))
        return 1;

    return failed("write", sp_rtasr_write(asr_fd, SP_PTR(tone), TONE_BYTES)) ||
           failed("flush", sp_rtasr_flush(asr_fd)) || until(COMPLETED);
}

int main(void) {
    epfd = sp_ep_create();
    if (epfd < 0) {
        printf("ep_create: %d\n", epfd);
        return 1;
    }
    asr_fd = sp_rtasr_create();
    if (asr_fd < 0) {
        printf("rtasr_create: %d\n", asr_fd);
        return 1;
    }
    int32_t rc = sp_ep_ctl(epfd, SPEAR_EP_CTL_ADD, asr_fd, WATCH);
    if (rc != 0) {
        printf("ep_ctl add: %d\n", rc);
        return 1;
    }
    printf("rtasr_controls started\n");
    for (size_t i = 0; i < TONE_BYTES; i += 2) { /* a steady level of 3000 */
        tone[i] = 3000 & 0xff;
        tone[i + 1] = 3000 >> 8;
    }
    int bad = steps();
    uint32_t len = 0;
    uint8_t *status = sp_rtasr_get_status_alloc(asr_fd, &len);
    if (status) {
        printf("status: %s\n", (char *)status);
        free(status);
    } else {
        printf("status: failed\n");
    }
    bad |= sp_rtasr_close(asr_fd) != 0;
    sp_ep_close(epfd);
    return bad;
}
