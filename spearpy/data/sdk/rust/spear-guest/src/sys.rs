//! The raw `spear` imports, exactly as spear-abi.md declares them.
//!
//! Every pointer and length is an `i32` offset into linear memory; results
//! are `>= 0` on success or a negative errno. Prefer the safe wrappers
//! ([`crate::Session`], [`crate::Epoll`], [`crate::stream`], [`crate::audio`]);
//! these are here for code that needs the bare ABI.

#[link(wasm_import_module = "spear")]
extern "C" {
    pub fn log(level: i32, ptr: i32, len: i32) -> i32;
    pub fn time_now_ms() -> i64;
    pub fn wall_time_s() -> i64;
    pub fn random_i64() -> i64;
    pub fn sleep_ms(ms: i32);

    pub fn cchat_create() -> i32;
    pub fn cchat_write_msg(fd: i32, role_ptr: i32, role_len: i32, content_ptr: i32, content_len: i32) -> i32;
    pub fn cchat_write_fn(fd: i32, fn_offset: i32, json_ptr: i32, json_len: i32) -> i32;
    pub fn cchat_ctl(fd: i32, cmd: i32, arg_ptr: i32, arg_len_ptr: i32) -> i32;
    pub fn cchat_send(fd: i32, flags: i32) -> i32;
    pub fn cchat_recv(fd: i32, out_ptr: i32, out_len_ptr: i32) -> i32;
    pub fn cchat_close(fd: i32) -> i32;

    pub fn spear_fd_ctl(fd: i32, cmd: i32, arg_ptr: i32, arg_len_ptr: i32) -> i32;
    pub fn spear_epoll_create() -> i32;
    pub fn spear_epoll_ctl(epfd: i32, op: i32, fd: i32, events: i32) -> i32;
    pub fn spear_epoll_wait(epfd: i32, out_ptr: i32, out_len_ptr: i32, timeout_ms: i32) -> i32;
    pub fn spear_epoll_close(epfd: i32) -> i32;

    pub fn user_stream_open(stream_id: i32, direction: i32) -> i32;
    pub fn user_stream_ctl_open() -> i32;
    pub fn user_stream_ctl_read(fd: i32, out_ptr: i32, out_len_ptr: i32) -> i32;
    pub fn user_stream_read(fd: i32, out_ptr: i32, out_len_ptr: i32) -> i32;
    pub fn user_stream_write(fd: i32, buf_ptr: i32, len: i32) -> i32;
    pub fn user_stream_close(fd: i32) -> i32;

    pub fn mic_create() -> i32;
    pub fn mic_ctl(fd: i32, cmd: i32, arg_ptr: i32, arg_len_ptr: i32) -> i32;
    pub fn mic_read(fd: i32, out_ptr: i32, out_len_ptr: i32) -> i32;
    pub fn mic_close(fd: i32) -> i32;

    pub fn rtasr_create() -> i32;
    pub fn rtasr_ctl(fd: i32, cmd: i32, arg_ptr: i32, arg_len_ptr: i32) -> i32;
    pub fn rtasr_write(fd: i32, buf_ptr: i32, len: i32) -> i32;
    pub fn rtasr_read(fd: i32, out_ptr: i32, out_len_ptr: i32) -> i32;
    pub fn rtasr_close(fd: i32) -> i32;
}

/// `cchat_send` flag bit 0: collect usage for GET_METRICS.
pub const SEND_METRICS: i32 = 1 << 0;
/// `cchat_send` flag bit 1: the host runs the tool-call loop.
pub const AUTO_TOOL_CALL: i32 = 1 << 1;

pub const CTL_SET_PARAM: i32 = 1;
pub const CTL_GET_METRICS: i32 = 2;

pub const FD_CTL_SET_FLAGS: i32 = 1;
pub const FD_CTL_GET_FLAGS: i32 = 2;
pub const FD_CTL_GET_KIND: i32 = 3;
pub const FD_CTL_GET_STATUS: i32 = 4;
pub const FD_CTL_GET_METRICS: i32 = 5;

pub const EPOLL_CTL_ADD: i32 = 1;
pub const EPOLL_CTL_MOD: i32 = 2;
pub const EPOLL_CTL_DEL: i32 = 3;
pub const EPOLLIN: i32 = 0x1;
pub const EPOLLOUT: i32 = 0x4;
pub const EPOLLERR: i32 = 0x8;
pub const EPOLLHUP: i32 = 0x10;

pub const MAX_LOG_LEN: usize = 16384;

/// `user_stream_open` directions: client to guest, guest to client, both.
pub const STREAM_IN: i32 = 1;
pub const STREAM_OUT: i32 = 2;
pub const STREAM_BIDI: i32 = 3;
/// `user_stream_ctl_read` event kinds (the event is `{u32 stream_id, u32 kind}` LE).
pub const STREAM_CONNECTED: u32 = 1;
pub const SESSION_CLOSED: u32 = 2;
pub const STREAM_CTL_EVENT_LEN: usize = 8;

/// SSF v1: the fixed header's length and the `msg_type` values.
pub const SSF_HEADER_LEN: usize = 32;
pub const SSF_OPEN: u16 = 1;
pub const SSF_DATA: u16 = 2;
pub const SSF_COMMIT: u16 = 3;
pub const SSF_CLOSE: u16 = 4;
pub const SSF_ACK: u16 = 5;
pub const SSF_ERROR: u16 = 6;
pub const SSF_PING: u16 = 7;
pub const SSF_PONG: u16 = 8;

/// `mic_ctl` commands.
pub const MIC_CTL_SET_PARAM: i32 = 1;
pub const MIC_CTL_GET_STATUS: i32 = 2;

/// `rtasr_ctl` commands.
pub const RTASR_CTL_SET_PARAM: i32 = 1;
pub const RTASR_CTL_CONNECT: i32 = 2;
pub const RTASR_CTL_GET_STATUS: i32 = 3;
pub const RTASR_CTL_SEND_EVENT: i32 = 4;
pub const RTASR_CTL_FLUSH: i32 = 5;
pub const RTASR_CTL_CLEAR: i32 = 6;
pub const RTASR_CTL_SET_AUTOFLUSH: i32 = 7;
pub const RTASR_CTL_GET_AUTOFLUSH: i32 = 8;

/// A guest address as the ABI wants it.
pub fn ptr<T: ?Sized>(p: *const T) -> i32 {
    p as *const u8 as usize as i32
}
