//! Readiness for every fd kind (chat responses, user streams, control fds,
//! microphones, rtasr): `spear_epoll_*`, level-triggered.

use crate::errno::{check, Errno};
use crate::sys;

pub use crate::sys::{EPOLLERR, EPOLLHUP, EPOLLIN, EPOLLOUT};

/// One ready fd as `spear_epoll_wait` writes it: `{fd: i32, events: i32}` LE.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Event {
    pub fd: i32,
    pub events: i32,
}

impl Event {
    pub fn readable(&self) -> bool {
        self.events & EPOLLIN != 0
    }
    pub fn writable(&self) -> bool {
        self.events & EPOLLOUT != 0
    }
    /// EPOLLHUP or EPOLLERR: the other end is gone (or failed).
    pub fn hangup(&self) -> bool {
        self.events & (EPOLLHUP | EPOLLERR) != 0
    }
}

/// An epoll fd; closed on drop.
#[derive(Debug)]
pub struct Epoll {
    fd: i32,
}

impl Epoll {
    pub fn new() -> Result<Epoll, Errno> {
        check(unsafe { sys::spear_epoll_create() }).map(|fd| Epoll { fd })
    }

    pub fn fd(&self) -> i32 {
        self.fd
    }

    fn ctl(&self, op: i32, fd: i32, events: i32) -> Result<(), Errno> {
        check(unsafe { sys::spear_epoll_ctl(self.fd, op, fd, events) }).map(|_| ())
    }

    /// Watches `fd` for `events` (`EPOLLIN | EPOLLOUT | ...`).
    pub fn add(&self, fd: i32, events: i32) -> Result<(), Errno> {
        self.ctl(sys::EPOLL_CTL_ADD, fd, events)
    }

    pub fn modify(&self, fd: i32, events: i32) -> Result<(), Errno> {
        self.ctl(sys::EPOLL_CTL_MOD, fd, events)
    }

    pub fn delete(&self, fd: i32) -> Result<(), Errno> {
        self.ctl(sys::EPOLL_CTL_DEL, fd, 0)
    }

    /// Waits up to `timeout_ms` (-1: no limit; the run's deadline and cancel
    /// still apply) and fills `ready` from the start: the count, 0 on
    /// timeout. An infinite wait also returns 0 when nothing watched can
    /// become ready any more (a stream no client can reach).
    pub fn wait(&self, ready: &mut [Event], timeout_ms: i32) -> Result<usize, Errno> {
        let mut len = std::mem::size_of_val(ready) as u32;
        let rc = unsafe { sys::spear_epoll_wait(self.fd, sys::ptr(ready.as_mut_ptr()), sys::ptr(&mut len), timeout_ms) };
        check(rc).map(|n| (n as usize).min(ready.len()))
    }

    /// Closes now and reports the result; drop does the same silently.
    pub fn close(self) -> Result<(), Errno> {
        let rc = unsafe { sys::spear_epoll_close(self.fd) };
        std::mem::forget(self);
        check(rc).map(|_| ())
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        unsafe { sys::spear_epoll_close(self.fd) };
    }
}
