//! Audio in (SPEAR's `mic_*` and `rtasr_*`). A [`Mic`] hands out PCM frames,
//! one per read; an [`Rtasr`] takes PCM and hands out the realtime
//! transcription server's events, one per read. Both work with
//! [`crate::Epoll`] (IN: something to read; HUP: the source or server ended;
//! ERR: it failed, the status's `last_error` says why). `Err(Errno::Again)`
//! is "nothing queued" on a read and backpressure on an rtasr write;
//! `Err(Errno::DQuot)` is spearpy's audio budget spent. docs/audio.md has
//! the params.

use crate::errno::{check, Errno};
use crate::json::quote;
use crate::outbuf::{ctl_json, read_into, read_text};
use crate::session::Param;
use crate::sys;

/// A microphone (`mic_create`); closed on drop.
#[derive(Debug)]
pub struct Mic {
    fd: i32,
}

impl Mic {
    pub fn new() -> Result<Mic, Errno> {
        check(unsafe { sys::mic_create() }).map(|fd| Mic { fd })
    }

    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// Set-param (cmd 1): one JSON object of params, e.g.
    /// `{"source":"stub","sample_rate_hz":16000,"frame_ms":20}`.
    pub fn set_params(&self, json: &str) -> Result<(), Errno> {
        let fd = self.fd;
        ctl_json(json, |p, l| unsafe { sys::mic_ctl(fd, sys::MIC_CTL_SET_PARAM, p, l) })
    }

    /// Get-status (cmd 2): the status JSON.
    pub fn status(&self) -> Result<String, Errno> {
        let fd = self.fd;
        read_text(1024, |p, l| unsafe { sys::mic_ctl(fd, sys::MIC_CTL_GET_STATUS, p, l) }).map(|(s, _)| s)
    }

    /// One PCM frame; `Err(Again)` when none is queued.
    pub fn read_frame(&self) -> Result<Vec<u8>, Errno> {
        let mut buf = Vec::new();
        self.read_frame_into(&mut buf, 4096).map(|_| buf)
    }

    /// Like [`Mic::read_frame`], into `buf` (contents replaced), trying its
    /// capacity (at least `min_capacity`) first and growing it on ENOSPC
    /// (the frame is kept meanwhile). Returns the frame's length.
    pub fn read_frame_into(&self, buf: &mut Vec<u8>, min_capacity: usize) -> Result<usize, Errno> {
        let fd = self.fd;
        read_into(buf, min_capacity, |p, l| unsafe { sys::mic_read(fd, p, l) }).map(|(n, _)| n)
    }

    pub fn close(self) -> Result<(), Errno> {
        let rc = unsafe { sys::mic_close(self.fd) };
        std::mem::forget(self);
        check(rc).map(|_| ())
    }
}

impl Drop for Mic {
    fn drop(&mut self) {
        unsafe { sys::mic_close(self.fd) };
    }
}

/// A realtime speech-recognition connection (`rtasr_create`); closed on drop.
#[derive(Debug)]
pub struct Rtasr {
    fd: i32,
}

impl Rtasr {
    pub fn new() -> Result<Rtasr, Errno> {
        check(unsafe { sys::rtasr_create() }).map(|fd| Rtasr { fd })
    }

    pub fn fd(&self) -> i32 {
        self.fd
    }

    fn ctl_arg(&self, cmd: i32, json: &str) -> Result<(), Errno> {
        let fd = self.fd;
        ctl_json(json, |p, l| unsafe { sys::rtasr_ctl(fd, cmd, p, l) })
    }

    fn ctl_bare(&self, cmd: i32) -> Result<(), Errno> {
        let mut len = 0u32;
        check(unsafe { sys::rtasr_ctl(self.fd, cmd, 0, sys::ptr(&mut len)) }).map(|_| ())
    }

    fn ctl_read(&self, cmd: i32) -> Result<String, Errno> {
        let fd = self.fd;
        read_text(1024, |p, l| unsafe { sys::rtasr_ctl(fd, cmd, p, l) }).map(|(s, _)| s)
    }

    /// Set-param (cmd 1): `{"key": key, "value": value}`.
    pub fn set_param(&self, key: &str, value: impl Into<Param>) -> Result<(), Errno> {
        let json = format!("{{\"key\":{},\"value\":{}}}", quote(key), value.into().to_json());
        self.set_param_json(&json)
    }

    pub fn set_param_json(&self, json: &str) -> Result<(), Errno> {
        self.ctl_arg(sys::RTASR_CTL_SET_PARAM, json)
    }

    /// Connect (cmd 2): starts the transport in the background.
    pub fn connect(&self) -> Result<(), Errno> {
        self.ctl_bare(sys::RTASR_CTL_CONNECT)
    }

    /// Get-status (cmd 3): the status JSON.
    pub fn status(&self) -> Result<String, Errno> {
        self.ctl_read(sys::RTASR_CTL_GET_STATUS)
    }

    /// Send-event (cmd 4): any JSON event, sent to the server as it is.
    pub fn send_event(&self, json: &str) -> Result<(), Errno> {
        self.ctl_arg(sys::RTASR_CTL_SEND_EVENT, json)
    }

    /// Flush (cmd 5): commits the audio buffer.
    pub fn flush(&self) -> Result<(), Errno> {
        self.ctl_bare(sys::RTASR_CTL_FLUSH)
    }

    /// Clear (cmd 6): drops the uncommitted audio.
    pub fn clear(&self) -> Result<(), Errno> {
        self.ctl_bare(sys::RTASR_CTL_CLEAR)
    }

    /// Set-autoflush (cmd 7), e.g. `{"strategy":"server_vad"}`.
    pub fn set_autoflush(&self, json: &str) -> Result<(), Errno> {
        self.ctl_arg(sys::RTASR_CTL_SET_AUTOFLUSH, json)
    }

    /// Get-autoflush (cmd 8): the autoflush JSON.
    pub fn autoflush(&self) -> Result<String, Errno> {
        self.ctl_read(sys::RTASR_CTL_GET_AUTOFLUSH)
    }

    /// Queues PCM16; the bytes queued, or `Err(Again)` when the send queue
    /// is full (retry on EPOLLOUT).
    pub fn write(&self, pcm: &[u8]) -> Result<usize, Errno> {
        check(unsafe { sys::rtasr_write(self.fd, sys::ptr(pcm.as_ptr()), pcm.len() as i32) }).map(|n| n as usize)
    }

    /// One server event as text (JSON from a well-behaved server; bytes
    /// that are not UTF-8 are replaced, see [`Rtasr::read_event_into`]);
    /// `Err(Again)` when none is queued.
    pub fn read_event(&self) -> Result<String, Errno> {
        let mut buf = Vec::new();
        self.read_event_into(&mut buf, 4096)?;
        Ok(match String::from_utf8(buf) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// One server event's bytes, exactly as the server sent them, into `buf`
    /// (contents replaced, grown on ENOSPC). Returns the length.
    pub fn read_event_into(&self, buf: &mut Vec<u8>, min_capacity: usize) -> Result<usize, Errno> {
        let fd = self.fd;
        read_into(buf, min_capacity, |p, l| unsafe { sys::rtasr_read(fd, p, l) }).map(|(n, _)| n)
    }

    pub fn close(self) -> Result<(), Errno> {
        let rc = unsafe { sys::rtasr_close(self.fd) };
        std::mem::forget(self);
        check(rc).map(|_| ())
    }
}

impl Drop for Rtasr {
    fn drop(&mut self) {
        unsafe { sys::rtasr_close(self.fd) };
    }
}
