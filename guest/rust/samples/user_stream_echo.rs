//! user_stream_echo: SPEAR's user_stream_echo sample with the spear_guest
//! crate (the Rust twin of guest/c/samples/user_stream_echo.c).
//!
//! Waits for streams on a control fd, opens each as bidirectional and writes
//! every frame it reads back unchanged (same stream, same seq). A full
//! outbound queue (`Err(Again)`) keeps the frame and stops reading that
//! stream until EPOLLOUT, so a client that does not read is held back
//! instead of frames being dropped. Exits 0 when the client session ends.
//! It watches EPOLLOUT only while a frame waits: a level-triggered EPOLLOUT
//! on an idle stream would wake it forever.
//! Status lines go to stderr; with --summary the last one goes to stdout.

use std::collections::BTreeMap;

use spear_guest::epoll::{EPOLLERR, EPOLLHUP, EPOLLIN, EPOLLOUT};
use spear_guest::{Control, CtlEvent, Direction, Epoll, Errno, Event, Stream};

const MAX_STREAMS: usize = 16;
const READ_EVENTS: i32 = EPOLLIN | EPOLLERR | EPOLLHUP;
const WRITE_EVENTS: i32 = EPOLLOUT | EPOLLERR | EPOLLHUP;

struct Slot {
    stream: Stream,
    /// A frame the outbound queue refused, to write on EPOLLOUT.
    pending: Option<Vec<u8>>,
}

struct Echo {
    ep: Epoll,
    slots: BTreeMap<i32, Slot>,
    echoed: u64,
    /// One read buffer for every frame (grown on ENOSPC, then reused).
    frame: Vec<u8>,
}

impl Echo {
    fn open_stream(&mut self, stream_id: u32) {
        if self.slots.values().any(|s| s.stream.id() == stream_id) {
            return;
        }
        if self.slots.len() >= MAX_STREAMS {
            eprintln!("too many streams, ignoring stream {}", stream_id);
            return;
        }
        match Stream::open(stream_id, Direction::Bidi) {
            Ok(stream) => {
                let fd = stream.fd();
                let _ = self.ep.add(fd, READ_EVENTS);
                eprintln!("stream connected: stream_id={} fd={}", stream_id, fd);
                self.slots.insert(fd, Slot { stream, pending: None });
            }
            Err(e) => eprintln!("user_stream_open({}): {}", stream_id, e.code()),
        }
    }

    /// Writes `frame`. On EAGAIN the caller keeps the
    /// frame and waits for EPOLLOUT; any other error drops it.
    fn write(echoed: &mut u64, slot: &Slot, frame: &[u8]) -> Result<(), Errno> {
        match slot.stream.write_frame(frame) {
            Ok(()) => {
                *echoed += 1;
                Ok(())
            }
            Err(Errno::Again) => Err(Errno::Again),
            Err(e) => {
                eprintln!("user_stream_write(stream {}): {}", slot.stream.id(), e.code());
                Err(e)
            }
        }
    }

    fn on_writable(&mut self, fd: i32) {
        let slot = match self.slots.get_mut(&fd) {
            Some(s) => s,
            None => return,
        };
        let frame = match slot.pending.take() {
            Some(f) => f,
            None => return,
        };
        match Echo::write(&mut self.echoed, slot, &frame) {
            Err(Errno::Again) => slot.pending = Some(frame), // still full: wait again
            _ => {
                let _ = self.ep.modify(fd, READ_EVENTS);
            }
        }
    }

    /// One frame per EPOLLIN, as SPEAR's sample does: epoll is
    /// level-triggered, so the next wait reports the stream again while
    /// frames remain, and a lone frame costs no extra read.
    fn on_readable(&mut self, fd: i32) {
        let slot = match self.slots.get_mut(&fd) {
            Some(s) if s.pending.is_none() => s,
            _ => return,
        };
        match slot.stream.read_frame_into(&mut self.frame, 4096) {
            Ok(_) => {
                if Echo::write(&mut self.echoed, slot, &self.frame) == Err(Errno::Again) {
                    slot.pending = Some(self.frame.clone());
                    let _ = self.ep.modify(fd, WRITE_EVENTS);
                }
            }
            Err(Errno::Again) | Err(Errno::Pipe) => {}
            Err(e) => eprintln!("user_stream_read(stream {}): {}", slot.stream.id(), e.code()),
        }
    }

    /// Reads every queued control event; true once the session has closed.
    fn on_control(&mut self, ctl: &Control) -> bool {
        loop {
            match ctl.read_event() {
                Ok(CtlEvent::SessionClosed) => return true,
                Ok(CtlEvent::StreamConnected(id)) => self.open_stream(id),
                Ok(CtlEvent::Other { .. }) => {}
                Err(Errno::Again) => return false,
                Err(e) => {
                    eprintln!("user_stream_ctl_read: {}", e.code());
                    return true;
                }
            }
        }
    }
}

fn main() {
    let summary = std::env::args().nth(1).as_deref() == Some("--summary");
    let ctl = match Control::open() {
        Ok(c) => c,
        Err(e) => {
            let why = if e == Errno::NotConn {
                "no client can reach this run: spearpy run --stream-stdio, or serve it".to_string()
            } else {
                e.name().to_string()
            };
            println!("user_stream_ctl_open failed: {} ({})", e.code(), why);
            std::process::exit(1);
        }
    };
    let ep = match Epoll::new() {
        Ok(ep) => ep,
        Err(e) => {
            println!("epoll_create failed: {}", e);
            std::process::exit(1);
        }
    };
    let _ = ep.add(ctl.fd(), EPOLLIN);
    eprintln!("user_stream_echo started (waiting for user streams)");

    let mut echo = Echo { ep, slots: BTreeMap::new(), echoed: 0, frame: Vec::new() };
    let mut ready = [Event::default(); MAX_STREAMS + 1];
    let mut closed = false;
    while !closed {
        let n = match echo.ep.wait(&mut ready, -1) {
            Ok(0) => break, // nothing can change any more: no client will come
            Ok(n) => n,
            Err(e) => {
                eprintln!("epoll_wait: {}", e.code());
                std::process::exit(1);
            }
        };
        for ev in &ready[..n] {
            if ev.fd == ctl.fd() {
                closed |= echo.on_control(&ctl);
                continue;
            }
            if !echo.slots.contains_key(&ev.fd) {
                continue;
            }
            if ev.hangup() {
                // The client is gone: nothing read now could be echoed to it.
                if let Some(slot) = echo.slots.remove(&ev.fd) {
                    eprintln!("stream {} hung up", slot.stream.id());
                } // dropping the slot closes its stream
                continue;
            }
            if ev.writable() {
                echo.on_writable(ev.fd);
            }
            if ev.readable() {
                echo.on_readable(ev.fd);
            }
        }
    }
    let echoed = echo.echoed;
    drop(echo); // closes every stream and the epoll fd
    drop(ctl);
    let line = format!("session closed: {} frames echoed", echoed);
    if summary {
        println!("{}", line);
    } else {
        eprintln!("{}", line);
    }
}
