/* user_stream_echo: SPEAR's user_stream_echo sample, written against spear.h.
 *
 * Waits for streams on a control fd, opens each as bidirectional and writes
 * every frame it reads back unchanged (same stream, same seq). A full
 * outbound queue (-EAGAIN) keeps the frame and stops reading that stream
 * until EPOLLOUT, so a client that does not read is held back instead of
 * frames being dropped. Exits 0 when the client session ends.
 *
 * Unlike SPEAR's sample it watches EPOLLOUT only while a frame waits: a
 * level-triggered EPOLLOUT on an idle stream would wake it forever.
 * Status lines go to stderr; with --summary the last one goes to stdout. */
#define SPEAR_IMPLEMENTATION
#include "../spear.h"

#define MAX_STREAMS 16
#define READ_EVENTS (SP_EPOLLIN | SP_EPOLLERR | SP_EPOLLHUP)
#define WRITE_EVENTS (SP_EPOLLOUT | SP_EPOLLERR | SP_EPOLLHUP)

typedef struct {
    uint32_t stream_id;
    int32_t fd;   /* 0: free slot */
    sp_buf pending; /* a frame the outbound queue refused, to write on EPOLLOUT */
    int has_pending;
} slot_t;

static slot_t slots[MAX_STREAMS];
static int32_t epfd;
static long echoed;

static slot_t *slot_of(int32_t fd) {
    for (int i = 0; i < MAX_STREAMS; i++)
        if (slots[i].fd == fd) return &slots[i];
    return NULL;
}

static void slot_close(slot_t *s) {
    sp_user_stream_close(s->fd);
    sp_buf_free(&s->pending);
    memset(s, 0, sizeof *s);
}

static void open_stream(uint32_t stream_id) {
    slot_t *free_slot = NULL;
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (slots[i].fd && slots[i].stream_id == stream_id) return;
        if (!slots[i].fd && !free_slot) free_slot = &slots[i];
    }
    if (!free_slot) { fprintf(stderr, "too many streams, ignoring stream %u\n", stream_id); return; }
    int32_t fd = sp_user_stream_open((int32_t)stream_id, SP_STREAM_BIDI);
    if (fd < 0) { fprintf(stderr, "user_stream_open(%u): %d\n", stream_id, fd); return; }
    free_slot->stream_id = stream_id;
    free_slot->fd = fd;
    sp_epoll_ctl(epfd, SP_EPOLL_CTL_ADD, fd, READ_EVENTS);
    fprintf(stderr, "stream connected: stream_id=%u fd=%d\n", stream_id, fd);
}

/* Writes `frame`; on -EAGAIN keeps it and waits for EPOLLOUT instead of EPOLLIN. */
static int echo(slot_t *s, const char *frame, size_t len) {
    int32_t rc = sp_user_stream_write(s->fd, SP_PTR(frame), (int32_t)len);
    if (rc == 0) { echoed++; return 1; }
    if (rc == SP_EAGAIN) {
        if (frame != s->pending.data) {
            sp_buf_clear(&s->pending);
            if (sp_buf_append(&s->pending, frame, len)) return 0;
        }
        s->has_pending = 1;
        sp_epoll_ctl(epfd, SP_EPOLL_CTL_MOD, s->fd, WRITE_EVENTS);
        return 0;
    }
    fprintf(stderr, "user_stream_write(stream %u): %d\n", s->stream_id, rc);
    return 0;
}

static void on_writable(slot_t *s) {
    if (!s->has_pending || !echo(s, s->pending.data, s->pending.len)) return;
    s->has_pending = 0;
    sp_epoll_ctl(epfd, SP_EPOLL_CTL_MOD, s->fd, READ_EVENTS);
}

/* One frame per EPOLLIN, as SPEAR's sample does: epoll is level-triggered, so
 * the next wait reports the stream again while frames remain, and a lone
 * frame costs no extra read that would only answer -EAGAIN. */
static void on_readable(slot_t *s, sp_buf *frame) {
    if (s->has_pending) return;
    int32_t rc = sp_stream_read(s->fd, frame);
    if (rc < 0) {
        if (rc != SP_EAGAIN && rc != SP_EPIPE)
            fprintf(stderr, "user_stream_read(stream %u): %d\n", s->stream_id, rc);
        return;
    }
    echo(s, frame->data, frame->len);
}

/* Reads every queued control event; 1 once the session has closed. */
static int on_control(int32_t ctl) {
    sp_user_stream_ctl_event_t evt;
    int32_t rc;
    while ((rc = sp_user_stream_ctl_read_event(ctl, &evt)) == 8) {
        if (evt.kind == SP_SESSION_CLOSED) return 1;
        if (evt.kind == SP_STREAM_CONNECTED) open_stream(evt.stream_id);
    }
    if (rc != SP_EAGAIN) fprintf(stderr, "user_stream_ctl_read: %d\n", rc);
    return rc != SP_EAGAIN;
}

int main(int argc, char **argv) {
    int summary = argc > 1 && strcmp(argv[1], "--summary") == 0;
    epfd = sp_epoll_create();
    int32_t ctl = sp_user_stream_ctl_open();
    if (epfd < 0 || ctl < 0) {
        printf("user_stream_ctl_open failed: %d (%s)\n", ctl, ctl == SP_ENOTCONN
               ? "no client can reach this run: spearpy run --stream-stdio, or serve it"
               : sp_errno_name(ctl));
        return 1;
    }
    sp_epoll_ctl(epfd, SP_EPOLL_CTL_ADD, ctl, SP_EPOLLIN);
    fprintf(stderr, "user_stream_echo started (waiting for user streams)\n");

    sp_buf frame = SP_BUF_INIT;
    sp_epoll_event ready[MAX_STREAMS + 1];
    int closed = 0;
    while (!closed) {
        uint32_t len = sizeof ready;
        int32_t n = sp_epoll_wait(epfd, SP_PTR(ready), SP_PTR(&len), -1);
        if (n < 0) { fprintf(stderr, "epoll_wait: %d\n", n); return 1; }
        if (n == 0) break; /* nothing can change any more: no client will come */
        for (int i = 0; i < n; i++) {
            if (ready[i].fd == ctl) { closed |= on_control(ctl); continue; }
            slot_t *s = slot_of(ready[i].fd);
            if (!s) continue;
            if (ready[i].events & (SP_EPOLLHUP | SP_EPOLLERR)) {
                /* The client is gone: nothing read now could be echoed to it. */
                fprintf(stderr, "stream %u hung up\n", s->stream_id);
                slot_close(s);
                continue;
            }
            if (ready[i].events & SP_EPOLLOUT) on_writable(s);
            if (ready[i].events & SP_EPOLLIN) on_readable(s, &frame);
        }
    }
    for (int i = 0; i < MAX_STREAMS; i++)
        if (slots[i].fd) slot_close(&slots[i]);
    sp_user_stream_close(ctl);
    sp_epoll_close(epfd);
    fprintf(summary ? stdout : stderr, "session closed: %ld frames echoed\n", echoed);
    return 0;
}
