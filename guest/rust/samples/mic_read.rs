//! mic_read: the Rust twin of guest/c/samples/c_mic_read.c, with the
//! spear_guest crate. Opens a microphone with the set-param JSON given as
//! argv[1], reads PCM frames on EPOLLIN until EPOLLHUP (the source's end),
//! EPOLLERR, or argv[2] frames (0: no limit), and prints what it got:
//!
//!   frames N bytes B frame_min X frame_max Y fnv HEX
//!   end: hup | max | err | timeout | epoll | read <rc>
//!   status: <get-status JSON>
//!
//! argv[3] is the epoll timeout in ms (default -1: wait forever, so a run
//! can only end it by cancel or deadline). The read buffer starts at 16
//! bytes and grows on ENOSPC, so that path runs on the first frame.
//! Exit: 0 at HUP or the frame limit, 1 set-param failed, 2 EPOLLERR, 3 a
//! read failed, 4 the wait timed out or failed.

use spear_guest::epoll::{EPOLLERR, EPOLLHUP, EPOLLIN};
use spear_guest::{Epoll, Errno, Event, Mic};

fn code(r: Result<(), Errno>) -> i32 {
    r.err().map(Errno::code).unwrap_or(0)
}

fn print_status(mic: &Mic) {
    match mic.status() {
        Ok(s) => println!("status: {}", s),
        Err(e) => println!("status: failed {}", e.code()),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 {
        eprintln!("usage: rust_mic_read PARAMS_JSON [MAX_FRAMES] [TIMEOUT_MS]");
        std::process::exit(64);
    }
    let max_frames: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(0);
    let timeout: i32 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(-1);

    let (mic, ep) = match (Mic::new(), Epoll::new()) {
        (Ok(mic), Ok(ep)) => (mic, ep),
        (mic, ep) => {
            let rc = |e: Option<Errno>| e.map(Errno::code).unwrap_or(0);
            println!("create failed: mic {} epoll {}", rc(mic.err()), rc(ep.err()));
            std::process::exit(1);
        }
    };
    let _ = ep.add(mic.fd(), EPOLLIN | EPOLLERR | EPOLLHUP);
    let rc = code(mic.set_params(&args[1]));
    println!("set_param: {}", rc);
    if rc != 0 {
        print_status(&mic);
        std::process::exit(1);
    }

    let mut buf: Vec<u8> = Vec::with_capacity(16);
    let (mut frames, mut bytes, mut frame_min, mut frame_max) = (0u64, 0usize, usize::MAX, 0usize);
    let mut fnv: u32 = 2_166_136_261;
    let mut end = "max".to_string();
    let mut exit = 0;
    while max_frames == 0 || frames < max_frames {
        let mut ready = [Event::default(); 4];
        let n = ep.wait(&mut ready, timeout);
        let ev = match n {
            Ok(n) if n > 0 => ready[0],
            other => {
                end = if other == Ok(0) { "timeout" } else { "epoll" }.to_string();
                exit = 4;
                break;
            }
        };
        if ev.readable() {
            match mic.read_frame_into(&mut buf, 16) {
                Ok(n) => {
                    frames += 1;
                    bytes += n;
                    frame_min = frame_min.min(n);
                    frame_max = frame_max.max(n);
                    for b in &buf {
                        fnv = (fnv ^ *b as u32).wrapping_mul(16_777_619);
                    }
                }
                Err(Errno::Again) => {}
                Err(e) => {
                    end = format!("read {}", e.code());
                    exit = 3;
                    break;
                }
            }
            continue;
        }
        if ev.events & EPOLLERR != 0 {
            end = "err".to_string();
            exit = 2;
            break;
        }
        if ev.events & EPOLLHUP != 0 {
            end = "hup".to_string();
            break;
        }
    }
    println!(
        "frames {} bytes {} frame_min {} frame_max {} fnv {:08x}",
        frames,
        bytes,
        if frames == 0 { 0 } else { frame_min },
        frame_max,
        fnv
    );
    println!("end: {}", end);
    print_status(&mic);
    println!("close: {}", code(mic.close()));
    std::process::exit(exit);
}
