//! User streams (SPEAR's `user_stream_*`): a client (a WebSocket on
//! `spearpy serve`, `spearpy run --stream-stdio`, an embedder) sends SSF
//! frames on numbered streams. The guest learns of each stream on a
//! [`Control`] fd, opens it as a [`Stream`], and reads and writes whole
//! frames. All of them work with [`crate::Epoll`]; `Err(Errno::Again)` is
//! "nothing queued" on a read and backpressure on a write: wait for
//! EPOLLIN / EPOLLOUT.

use crate::errno::{check, Errno};
use crate::outbuf::read_into;
use crate::ssf::Frame;
use crate::sys;

/// Which way frames go on a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to guest.
    In = 1,
    /// Guest to client.
    Out = 2,
    Bidi = 3,
}

/// One control event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtlEvent {
    /// A client sent its first frame on this stream id: open it.
    StreamConnected(u32),
    /// The client session ended (its streams report EPOLLHUP).
    SessionClosed,
    /// A kind this crate does not know.
    Other { stream_id: u32, kind: u32 },
}

/// The control fd (`user_stream_ctl_open`); closed on drop.
#[derive(Debug)]
pub struct Control {
    fd: i32,
}

impl Control {
    /// `Err(NotConn)` when no client can ever reach this run (not
    /// `--stream-stdio`, not served, no `streams=`).
    pub fn open() -> Result<Control, Errno> {
        check(unsafe { sys::user_stream_ctl_open() }).map(|fd| Control { fd })
    }

    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// The next queued event; `Err(Again)` when there is none.
    pub fn read_event(&self) -> Result<CtlEvent, Errno> {
        let mut raw = [0u8; sys::STREAM_CTL_EVENT_LEN];
        let mut len = raw.len() as u32;
        let rc = unsafe { sys::user_stream_ctl_read(self.fd, sys::ptr(raw.as_mut_ptr()), sys::ptr(&mut len)) };
        check(rc)?;
        if len as usize != raw.len() {
            return Err(Errno::Io);
        }
        let stream_id = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
        let kind = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
        Ok(match kind {
            sys::STREAM_CONNECTED => CtlEvent::StreamConnected(stream_id),
            sys::SESSION_CLOSED => CtlEvent::SessionClosed,
            _ => CtlEvent::Other { stream_id, kind },
        })
    }

    pub fn close(self) -> Result<(), Errno> {
        let rc = unsafe { sys::user_stream_close(self.fd) };
        std::mem::forget(self);
        check(rc).map(|_| ())
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        unsafe { sys::user_stream_close(self.fd) };
    }
}

/// One user stream (`user_stream_open`); closed on drop.
#[derive(Debug)]
pub struct Stream {
    fd: i32,
    id: u32,
}

impl Stream {
    /// Opens `stream_id`. A stream is writable once the client has sent on
    /// it (before that a write is `Err(NotConn)`).
    pub fn open(stream_id: u32, direction: Direction) -> Result<Stream, Errno> {
        let rc = unsafe { sys::user_stream_open(stream_id as i32, direction as i32) };
        check(rc).map(|fd| Stream { fd, id: stream_id })
    }

    pub fn fd(&self) -> i32 {
        self.fd
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// One whole frame, exactly as the client sent it; `Err(Again)` when
    /// none is queued, `Err(Pipe)` when the stream is closed and drained.
    pub fn read_frame(&self) -> Result<Vec<u8>, Errno> {
        let mut buf = Vec::new();
        self.read_frame_into(&mut buf, 4096).map(|_| buf)
    }

    /// Like [`Stream::read_frame`], into `buf` (its contents replaced),
    /// trying its capacity (at least `min_capacity`) first and growing it on
    /// ENOSPC: reusing one buffer costs no allocation per frame. Returns the
    /// frame's length.
    pub fn read_frame_into(&self, buf: &mut Vec<u8>, min_capacity: usize) -> Result<usize, Errno> {
        let fd = self.fd;
        read_into(buf, min_capacity, |p, l| unsafe { sys::user_stream_read(fd, p, l) }).map(|(n, _)| n)
    }

    /// Writes one whole SSF frame (bytes already encoded, e.g. one read from
    /// a stream). `Err(Again)` when the outbound queue is full: keep the
    /// frame and retry on EPOLLOUT.
    pub fn write_frame(&self, frame: &[u8]) -> Result<(), Errno> {
        check(unsafe { sys::user_stream_write(self.fd, sys::ptr(frame.as_ptr()), frame.len() as i32) }).map(|_| ())
    }

    /// Encodes a DATA frame on this stream and writes it.
    pub fn send(&self, seq: u64, meta: &[u8], data: &[u8]) -> Result<(), Errno> {
        self.write_frame(&Frame::data(self.id, seq, meta, data).to_bytes())
    }

    pub fn close(self) -> Result<(), Errno> {
        let rc = unsafe { sys::user_stream_close(self.fd) };
        std::mem::forget(self);
        check(rc).map(|_| ())
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        unsafe { sys::user_stream_close(self.fd) };
    }
}
