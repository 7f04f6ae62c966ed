/* c_mic_read: opens a microphone fd with the set-param JSON given as argv[1],
 * reads PCM frames on EPOLLIN until EPOLLHUP (the source's end), EPOLLERR,
 * or argv[2] frames (0: no limit), and prints what it got:
 *
 *   frames N bytes B frame_min X frame_max Y fnv HEX
 *   end: hup | max | err | read <rc>
 *   status: <get-status JSON>
 *
 * argv[3] is the epoll timeout in ms (default -1: wait forever, so a run
 * can only end it by cancel or deadline). The read buffer starts at 16
 * bytes and grows on -ENOSPC (-28), so the ENOSPC protocol is exercised on
 * the first frame. The hostcalls are declared raw, as SPEAR's ABI has them.
 * Exit: 0 at HUP or the frame limit, 1 set-param failed, 2 EPOLLERR, 3 a
 * read failed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMPORT(name) __attribute__((import_module("spear"), import_name(name)))

IMPORT("mic_create") int32_t mic_create(void);
IMPORT("mic_ctl") int32_t mic_ctl(int32_t fd, int32_t cmd, int32_t arg_ptr, int32_t arg_len_ptr);
IMPORT("mic_read") int32_t mic_read(int32_t fd, int32_t out_ptr, int32_t out_len_ptr);
IMPORT("mic_close") int32_t mic_close(int32_t fd);
IMPORT("spear_epoll_create") int32_t ep_create(void);
IMPORT("spear_epoll_ctl") int32_t ep_ctl(int32_t epfd, int32_t op, int32_t fd, int32_t events);
IMPORT("spear_epoll_wait") int32_t ep_wait(int32_t epfd, int32_t out_ptr, int32_t out_len_ptr,
                                           int32_t timeout_ms);
IMPORT("spear_epoll_close") int32_t ep_close(int32_t epfd);

#define PTR(p) ((int32_t)(uintptr_t)(p))
#define EPOLLIN 0x1
#define EPOLLERR 0x8
#define EPOLLHUP 0x10
#define ENOSPC_RC (-28)
#define EAGAIN_RC (-11)

static void print_status(int32_t fd) {
    static char status[4096];
    uint32_t len = sizeof status - 1;
    int32_t rc = mic_ctl(fd, 2, PTR(status), PTR(&len));
    if (rc < 0) {
        printf("status: failed %d\n", rc);
        return;
    }
    status[len] = 0;
    printf("status: %s\n", status);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: c_mic_read PARAMS_JSON [MAX_FRAMES] [TIMEOUT_MS]\n");
        return 64;
    }
    long max_frames = argc > 2 ? atol(argv[2]) : 0;
    int32_t timeout = argc > 3 ? (int32_t)atol(argv[3]) : -1;

    int32_t mic = mic_create();
    int32_t ep = ep_create();
    if (mic < 0 || ep < 0) {
        printf("create failed: mic %d epoll %d\n", mic, ep);
        return 1;
    }
    ep_ctl(ep, 1, mic, EPOLLIN | EPOLLERR | EPOLLHUP);
    uint32_t params_len = (uint32_t)strlen(argv[1]);
    int32_t rc = mic_ctl(mic, 1, PTR(argv[1]), PTR(&params_len));
    printf("set_param: %d\n", rc);
    if (rc != 0) {
        print_status(mic);
        return 1;
    }

    uint32_t cap = 16;
    uint8_t *buf = malloc(cap);
    long frames = 0, bytes = 0, frame_min = -1, frame_max = 0;
    uint32_t fnv = 2166136261u;
    const char *end = "max";
    int code = 0;
    int32_t read_rc = 0;
    while (!max_frames || frames < max_frames) {
        int32_t ready[2 * 4];
        uint32_t ready_len = sizeof ready;
        int32_t n = ep_wait(ep, PTR(ready), PTR(&ready_len), timeout);
        if (n <= 0) {
            end = n == 0 ? "timeout" : "epoll";
            code = 4;
            break;
        }
        int32_t events = ready[1];
        if (events & EPOLLIN) {
            uint32_t len = cap;
            read_rc = mic_read(mic, PTR(buf), PTR(&len));
            if (read_rc == ENOSPC_RC) {
                cap = len;
                buf = realloc(buf, cap);
                len = cap;
                read_rc = mic_read(mic, PTR(buf), PTR(&len));
            }
            if (read_rc == EAGAIN_RC) continue;
            if (read_rc < 0) {
                end = "read";
                code = 3;
                break;
            }
            frames++;
            bytes += read_rc;
            if (frame_min < 0 || read_rc < frame_min) frame_min = read_rc;
            if (read_rc > frame_max) frame_max = read_rc;
            for (int32_t i = 0; i < read_rc; i++) fnv = (fnv ^ buf[i]) * 16777619u;
            continue;
        }
        if (events & EPOLLERR) {
            end = "err";
            code = 2;
            break;
        }
        if (events & EPOLLHUP) {
            end = "hup";
            break;
        }
    }
    printf("frames %ld bytes %ld frame_min %ld frame_max %ld fnv %08x\n", frames, bytes,
           frame_min < 0 ? 0 : frame_min, frame_max, fnv);
    if (code == 3) printf("end: read %d\n", read_rc);
    else printf("end: %s\n", end);
    print_status(mic);
    printf("close: %d\n", mic_close(mic));
    ep_close(ep);
    free(buf);
    return code;
}
