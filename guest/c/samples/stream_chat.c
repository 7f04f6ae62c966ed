/* stream_chat: an agent a user talks to over a user stream.
 *
 * Each DATA frame a client sends is one question. The guest puts it into one
 * chat session (the conversation lasts as long as the client session), runs
 * the tool loop (AUTO_TOOL_CALL) with an `add` tool, and streams the answer
 * back word by word as DATA frames on the same stream; the last frame ends
 * with a newline and has meta {"final":true}. While an answer is still going
 * out (the client reads slowly) the guest reads no new question, so the
 * client is held back rather than answers piling up. Exits 0 when the
 * client session ends. With --summary the last status line goes to stdout. */
#define SPEAR_IMPLEMENTATION
#include "../spear.h"

#define MAX_STREAMS 4
#define READ_EVENTS (SP_EPOLLIN | SP_EPOLLERR | SP_EPOLLHUP)
#define WRITE_EVENTS (SP_EPOLLOUT | SP_EPOLLERR | SP_EPOLLHUP)

static const char ADD_SCHEMA[] =
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"description\":\"Add two integers.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
    "\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}}}";

static int add(const char *args, size_t len, sp_buf *out) {
    (void)len;
    long long a, b;
    if (!sp_json_get_int(args, "a", &a) || !sp_json_get_int(args, "b", &b)) return 1;
    return sp_buf_printf(out, "%lld", a + b);
}
SP_TOOL(add_tool, add)

typedef struct {
    uint32_t stream_id;
    int32_t fd;      /* 0: free slot */
    uint64_t seq;    /* of the frames this guest writes */
    sp_buf out;      /* frames waiting for room in the outbound queue, back to back */
    size_t out_at;   /* where the first unwritten one starts */
} slot_t;

static slot_t slots[MAX_STREAMS];
static int32_t epfd, chat = -1;
static long answered;

static slot_t *slot_of(int32_t fd) {
    for (int i = 0; i < MAX_STREAMS; i++)
        if (slots[i].fd == fd) return &slots[i];
    return NULL;
}

static void open_stream(uint32_t stream_id) {
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (slots[i].fd) continue;
        int32_t fd = sp_user_stream_open((int32_t)stream_id, SP_STREAM_BIDI);
        if (fd < 0) { fprintf(stderr, "user_stream_open: %d\n", fd); return; }
        slots[i].stream_id = stream_id;
        slots[i].fd = fd;
        sp_epoll_ctl(epfd, SP_EPOLL_CTL_ADD, fd, READ_EVENTS);
        return;
    }
    fprintf(stderr, "too many streams, ignoring stream %u\n", stream_id);
}

/* The model's answer to `question`, through the tool loop, into `answer`. */
static void ask(const char *question, sp_buf *answer) {
    sp_buf body = SP_BUF_INIT;
    sp_buf_clear(answer);
    if (chat < 0) {
        chat = sp_cchat_create();
        if (chat < 0 || sp_write_msg(chat, "system", "You add numbers with the add tool.") ||
            sp_register_tool(chat, add_tool, ADD_SCHEMA)) {
            sp_buf_printf(answer, "error: cannot start a chat session (%d)", chat);
            chat = -1;
            return;
        }
    }
    int32_t rc = sp_write_msg(chat, "user", question);
    int32_t rfd = rc ? rc : sp_send(chat, SP_AUTO_TOOL_CALL);
    if (rfd < 0 || sp_recv(rfd, &body, NULL) < 0) {
        sp_buf_printf(answer, "error: the send failed (%d)", rfd);
    } else if (sp_json_find(body.data, "error") && !sp_json_find(body.data, "choices")) {
        sp_buf code = SP_BUF_INIT;
        sp_json_get_string(body.data, "code", &code);
        sp_buf_printf(answer, "error: %s", code.data ? code.data : "unknown");
        sp_buf_free(&code);
    } else if (!sp_json_get_string(body.data, "content", answer)) {
        sp_buf_puts(answer, "(no answer)");
    }
    if (rfd >= 0) sp_cchat_close(rfd);
    sp_buf_free(&body);
}

/* Writes queued frames until done (1) or the queue is full (0: wait for EPOLLOUT). */
static int flush(slot_t *s) {
    while (s->out_at < s->out.len) {
        sp_ssf_frame f;
        const char *at = s->out.data + s->out_at;
        uint32_t meta_len, data_len;
        memcpy(&meta_len, at + 24, 4);
        memcpy(&data_len, at + 28, 4);
        size_t len = SP_SSF_HEADER_LEN + meta_len + data_len;
        if (sp_ssf_parse(at, len, &f)) return 1; /* cannot happen: we built it */
        int32_t rc = sp_user_stream_write(s->fd, SP_PTR(at), (int32_t)len);
        if (rc == SP_EAGAIN) {
            sp_epoll_ctl(epfd, SP_EPOLL_CTL_MOD, s->fd, WRITE_EVENTS);
            return 0;
        }
        if (rc != 0) fprintf(stderr, "user_stream_write: %d\n", rc);
        s->out_at += len;
    }
    sp_buf_clear(&s->out);
    s->out_at = 0;
    sp_epoll_ctl(epfd, SP_EPOLL_CTL_MOD, s->fd, READ_EVENTS);
    return 1;
}

/* Queues `answer` as one DATA frame per word, then starts writing them. */
static void stream_answer(slot_t *s, const char *answer) {
    sp_buf frame = SP_BUF_INIT;
    const char *p = answer;
    while (*p == ' ') p++;
    do {
        const char *end = strchr(p, ' ');
        size_t n = end ? (size_t)(end - p) + 1 : strlen(p);
        int last = !end || !end[1];
        sp_buf word = SP_BUF_INIT;
        sp_buf_append(&word, p, last && end ? n - 1 : n);
        if (last) sp_buf_puts(&word, "\n");
        const char *meta = last ? "{\"final\":true}" : "";
        sp_ssf_build(&frame, s->stream_id, ++s->seq, SP_SSF_DATA, meta, (uint32_t)strlen(meta),
                     word.data, (uint32_t)word.len);
        sp_buf_append(&s->out, frame.data, frame.len);
        sp_buf_free(&word);
        p = end ? end + 1 : p + n;
    } while (*p);
    sp_buf_free(&frame);
    flush(s);
}

static void on_readable(slot_t *s, sp_buf *raw) {
    sp_buf question = SP_BUF_INIT, answer = SP_BUF_INIT;
    while (s->out_at == s->out.len) { /* no answer still going out */
        sp_ssf_frame f;
        int32_t rc = sp_stream_read(s->fd, raw);
        if (rc < 0) break;
        if (sp_ssf_parse(raw->data, raw->len, &f) || f.msg_type != SP_SSF_DATA) continue;
        size_t n = f.data_len;
        while (n && (f.data[n - 1] == '\n' || f.data[n - 1] == '\r' || f.data[n - 1] == ' ')) n--;
        if (!n) continue;
        sp_buf_clear(&question);
        sp_buf_append(&question, f.data, n);
        ask(question.data, &answer);
        fprintf(stderr, "Q: %s\nA: %s\n", question.data, answer.data);
        answered++;
        stream_answer(s, answer.data);
    }
    sp_buf_free(&question);
    sp_buf_free(&answer);
}

int main(int argc, char **argv) {
    int summary = argc > 1 && strcmp(argv[1], "--summary") == 0;
    epfd = sp_epoll_create();
    int32_t ctl = sp_user_stream_ctl_open();
    if (epfd < 0 || ctl < 0) {
        printf("user_stream_ctl_open failed: %d\n", ctl);
        return 1;
    }
    sp_epoll_ctl(epfd, SP_EPOLL_CTL_ADD, ctl, SP_EPOLLIN);
    fprintf(stderr, "stream_chat: waiting for questions\n");
    sp_buf raw = SP_BUF_INIT;
    sp_epoll_event ready[MAX_STREAMS + 1];
    for (int closed = 0; !closed;) {
        uint32_t len = sizeof ready;
        int32_t n = sp_epoll_wait(epfd, SP_PTR(ready), SP_PTR(&len), -1);
        if (n <= 0) break; /* an error, or nothing can change any more */
        for (int i = 0; i < n; i++) {
            if (ready[i].fd == ctl) {
                sp_user_stream_ctl_event_t evt;
                while (sp_user_stream_ctl_read_event(ctl, &evt) == 8) {
                    if (evt.kind == SP_SESSION_CLOSED) closed = 1;
                    else if (evt.kind == SP_STREAM_CONNECTED) open_stream(evt.stream_id);
                }
                continue;
            }
            slot_t *s = slot_of(ready[i].fd);
            if (!s) continue;
            if (ready[i].events & (SP_EPOLLHUP | SP_EPOLLERR)) {
                sp_user_stream_close(s->fd);
                sp_buf_free(&s->out);
                memset(s, 0, sizeof *s);
                continue;
            }
            if (ready[i].events & SP_EPOLLOUT && !flush(s)) continue;
            if (ready[i].events & SP_EPOLLIN) on_readable(s, &raw);
        }
    }
    if (chat >= 0) sp_cchat_close(chat);
    fprintf(summary ? stdout : stderr, "session closed: %ld questions answered\n", answered);
    return 0;
}
