/* c_mic_rtasr: SPEAR's mic_rtasr sample, written against spear.h.
 *
 * Opens a microphone (24 kHz mono pcm16, 20 ms frames, the `device` source
 * with no fallback to the stub) and a realtime speech-recognition fd (the
 * websocket transport, server VAD after 600 ms of silence, flush on close),
 * then one epoll loop: every mic frame goes to rtasr_write, every rtasr event
 * is printed: a transcription event's `delta`, else its `transcript`, else
 * its `text` on a line of its own, any other event as `event_type=TYPE`.
 * Ends with exit 0 at the first HUP or ERR of either fd (`mic hup`,
 * `rtasr err`, ...), exit 1 when a set-up call fails.
 *
 * On a headless machine `spearpy run --mic-file SPEECH.wav` makes the
 * `device` source read that file (its end is the mic's HUP), and
 * `--rtasr-url ws://...` names the realtime transcription server. */
#define SPEAR_IMPLEMENTATION
#include "../spear.h"

#ifndef SP_RTASR_BACKEND
#define SP_RTASR_BACKEND "openai-realtime-asr"
#endif
#ifndef SP_RTASR_MODEL
#define SP_RTASR_MODEL "gpt-4o-mini-transcribe"
#endif

#define WATCH (SP_EPOLLIN | SP_EPOLLERR | SP_EPOLLHUP)

/* The string value of "key" in `json` (up to the next quote, no unescaping,
 * as SPEAR's sample reads it) into out; 0 when it is not there. */
static int string_field(const char *json, const char *key, char *out, size_t cap) {
    char pattern[128];
    int n = snprintf(pattern, sizeof pattern, "\"%s\":\"", key);
    if (n <= 0 || (size_t)n >= sizeof pattern || cap == 0) return 0;
    const char *start = strstr(json, pattern);
    if (!start) return 0;
    start += n;
    const char *end = strchr(start, '"');
    if (!end) return 0;
    size_t len = (size_t)(end - start);
    if (len >= cap) len = cap - 1;
    memcpy(out, start, len);
    out[len] = 0;
    return 1;
}

static void print_event(const char *event, uint32_t len) {
    static int warned_stub = 0;
    static char text[65536];
    char type[128];
    if (len == 0 || event[0] != '{' || !string_field(event, "type", type, sizeof type)) {
        printf("event_bytes=%u\n", len);
        return;
    }
    /* SPEAR's sample compares 13 bytes (no dot), which also matches a real
     * server's transcription_session.* events; only the stub's have the dot. */
    if (!warned_stub && strncmp(type, "transcription.", 14) == 0) {
        warned_stub = 1;
        printf("warning: rtasr appears to be using stub transport (text is fake 'a's)\n");
        printf("hint: set the realtime transcription URL (--rtasr-url) and its key\n");
    }
    if (!strstr(type, "transcription")) {
        printf("event_type=%s\n", type);
        return;
    }
    if (string_field(event, "delta", text, sizeof text) ||
        string_field(event, "transcript", text, sizeof text) ||
        string_field(event, "text", text, sizeof text))
        printf("%s\n", text);
    else
        printf("event_type=%s\n", type);
}

static int give_up(int32_t epfd, int32_t mic_fd, int32_t asr_fd) {
    if (asr_fd > 0) sp_rtasr_close(asr_fd);
    if (mic_fd > 0) sp_mic_close(mic_fd);
    sp_ep_close(epfd);
    return 1;
}

static int fail(const char *what, int32_t rc, int32_t epfd, int32_t mic_fd, int32_t asr_fd) {
    printf("%s failed: %d\n", what, rc);
    return give_up(epfd, mic_fd, asr_fd);
}

int main(void) {
    int32_t epfd = sp_ep_create();
    if (epfd < 0) {
        printf("ep_create failed: %d\n", epfd);
        return 1;
    }
    int32_t mic_fd = sp_mic_create();
    if (mic_fd < 0) return fail("mic_create", mic_fd, epfd, 0, 0);
    int32_t asr_fd = sp_rtasr_create();
    if (asr_fd < 0) return fail("rtasr_create", asr_fd, epfd, mic_fd, 0);

    int32_t rc = sp_ep_ctl(epfd, SPEAR_EP_CTL_ADD, mic_fd, WATCH);
    if (rc != 0) return fail("ep_ctl add mic_fd", rc, epfd, mic_fd, asr_fd);
    rc = sp_ep_ctl(epfd, SPEAR_EP_CTL_ADD, asr_fd, WATCH);
    if (rc != 0) return fail("ep_ctl add asr_fd", rc, epfd, mic_fd, asr_fd);

    const char *mic_cfg = "{\"sample_rate_hz\":24000,\"channels\":1,\"format\":\"pcm16\","
                          "\"frame_ms\":20,\"source\":\"device\",\"fallback\":{\"to_stub\":false}}";
    rc = sp_mic_set_param_json(mic_fd, mic_cfg, (uint32_t)strlen(mic_cfg));
    if (rc != 0) {
        uint32_t status_len = 0;
        uint8_t *status = sp_mic_get_status_alloc(mic_fd, &status_len);
        printf("mic_ctl failed: %d\n", rc);
        if (status) {
            printf("mic_status: %s\n", (char *)status);
            free(status);
        }
        return give_up(epfd, mic_fd, asr_fd);
    }

    if ((rc = sp_rtasr_set_param_string(asr_fd, "transport", "websocket")) != 0)
        return fail("rtasr set transport", rc, epfd, mic_fd, asr_fd);
    if ((rc = sp_rtasr_set_param_string(asr_fd, "backend", SP_RTASR_BACKEND)) != 0)
        return fail("rtasr set backend", rc, epfd, mic_fd, asr_fd);
    if ((rc = sp_rtasr_set_param_string(asr_fd, "model", SP_RTASR_MODEL)) != 0)
        return fail("rtasr set model", rc, epfd, mic_fd, asr_fd);
    const char *autoflush =
        "{\"strategy\":\"server_vad\",\"vad\":{\"silence_ms\":600},\"flush_on_close\":true}";
    if ((rc = sp_rtasr_set_autoflush_json(asr_fd, autoflush, (uint32_t)strlen(autoflush))) != 0)
        return fail("rtasr set autoflush", rc, epfd, mic_fd, asr_fd);
    if ((rc = sp_rtasr_connect(asr_fd)) != 0)
        return fail("rtasr connect", rc, epfd, mic_fd, asr_fd);

    printf("mic_rtasr started\n");
    sp_epoll_event ready[64];
    for (;;) {
        uint32_t ready_len = sizeof ready;
        int32_t n = sp_ep_wait(epfd, SP_PTR(ready), SP_PTR(&ready_len), 2000);
        if (n < 0) {
            printf("ep_wait failed: %d\n", n);
            break;
        }
        for (int i = 0; i < n; i++) {
            int32_t fd = ready[i].fd, ev = ready[i].events;
            const char *name = fd == mic_fd ? "mic" : fd == asr_fd ? "rtasr" : NULL;
            if (ev & SPEAR_EPOLLHUP) {
                if (name) printf("%s hup\n", name);
                goto out;
            }
            if (ev & SPEAR_EPOLLERR) {
                if (name) printf("%s err\n", name);
                goto out;
            }
            if (!(ev & SPEAR_EPOLLIN)) continue;
            uint32_t len = 0;
            if (fd == mic_fd) {
                uint8_t *pcm = sp_mic_read_alloc(mic_fd, &len);
                if (!pcm) continue;
                int32_t wrote = sp_rtasr_write(asr_fd, SP_PTR(pcm), (int32_t)len);
                free(pcm);
                if (wrote < 0 && wrote != SP_EAGAIN) printf("rtasr_write failed: %d\n", wrote);
            } else if (fd == asr_fd) {
                uint8_t *event = sp_rtasr_read_alloc(asr_fd, &len);
                if (!event) continue;
                print_event((const char *)event, len);
                free(event);
            }
        }
    }
out:
    sp_rtasr_close(asr_fd);
    sp_mic_close(mic_fd);
    sp_ep_close(epfd);
    return 0;
}
