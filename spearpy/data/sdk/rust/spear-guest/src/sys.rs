//! The raw `spear` imports, exactly as spear-abi.md declares them.
//!
//! Every pointer and length is an `i32` offset into linear memory; results
//! are `>= 0` on success or a negative errno. Prefer the safe wrappers in
//! [`crate::Session`]; these are here for code that needs the bare ABI.

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

/// A guest address as the ABI wants it.
pub fn ptr<T: ?Sized>(p: *const T) -> i32 {
    p as *const u8 as usize as i32
}
