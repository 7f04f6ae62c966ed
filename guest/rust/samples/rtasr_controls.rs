//! rtasr_controls: the realtime speech-recognition controls of the
//! spear_guest crate, `Rtasr::autoflush`, `send_event`, `flush` and `clear`
//! (the Rust twin of guest/c/samples/rtasr_controls.c, same output).
//!
//! Connects an rtasr fd (the websocket transport, autoflush "manual": only
//! the guest commits; the autoflush the host then reports is printed as
//! `autoflush: JSON`) and waits for `session.updated`, then, waiting after
//! each step for the server's answer:
//!   1. send_event: a `conversation.item.create` event, passed on as it is;
//!   2. 100 ms of tone, flush: the server commits it and transcribes it;
//!   3. 100 ms of tone, clear: the server drops it (`cleared`), and a flush
//!      right after has nothing to transcribe (only `committed`);
//!   4. 100 ms of tone, flush: transcribed as the next utterance.
//! Every call's result is printed (`flush: 0`), every event read as
//! `event: TYPE`, `delta: TEXT` or `transcript: TEXT`; then `status: JSON`.
//! Exit 0, or 1 when a call fails, the connection ends (`rtasr err`,
//! `rtasr hup`) or nothing comes for 10 s (`timeout`).
//!
//! `spearpy run --rtasr-url ws://HOST/v1/realtime?intent=transcription`
//! names the server (tests/test_audio_rtasr_controls.py runs it against
//! spearpy.testing.ScriptedAsrServer).

use spear_guest::epoll::{EPOLLERR, EPOLLHUP, EPOLLIN};
use spear_guest::{json, Epoll, Errno, Event, Rtasr};

const WATCH: i32 = EPOLLIN | EPOLLERR | EPOLLHUP;
const AUTOFLUSH: &str = r#"{"strategy":"manual","flush_on_close":false}"#;
const ITEM: &str = r#"{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"spear rtasr controls"}]}}"#;
const DELTA: &str = "conversation.item.input_audio_transcription.delta";
const COMPLETED: &str = "conversation.item.input_audio_transcription.completed";
const WAIT_MS: i32 = 10_000;

struct Run {
    ep: Epoll,
    asr: Rtasr,
    event: Vec<u8>,
}

/// Prints a call's result (0, the bytes queued, or the errno) and stops at
/// an error.
fn report<T: Into<i64>>(what: &str, rc: Result<T, Errno>) -> Result<(), String> {
    match rc {
        Ok(v) => {
            println!("{}: {}", what, v.into());
            Ok(())
        }
        Err(e) => Err(format!("{}: {}", what, e.code())),
    }
}

fn unit(rc: Result<(), Errno>) -> Result<i32, Errno> {
    rc.map(|_| 0)
}

fn bytes(rc: Result<usize, Errno>) -> Result<i64, Errno> {
    rc.map(|n| n as i64)
}

fn print_event(event: &str) -> String {
    let v = match json::parse(event) {
        Ok(v) => v,
        Err(_) => {
            println!("event_bytes: {}", event.len());
            return String::new();
        }
    };
    let kind = v.get("type").as_str().unwrap_or("").to_string();
    match (kind.as_str(), v.get("delta").as_str(), v.get("transcript").as_str()) {
        (DELTA, Some(text), _) => println!("delta: {}", text),
        (COMPLETED, _, Some(text)) => println!("transcript: {}", text),
        _ => println!("event: {}", kind),
    }
    kind
}

impl Run {
    /// Reads and prints events until one of type `kind`.
    fn until(&mut self, kind: &str) -> Result<(), String> {
        let mut ready = [Event::default(); 4];
        loop {
            let n = self.ep.wait(&mut ready, WAIT_MS).map_err(|e| format!("ep_wait: {}", e.code()))?;
            if n == 0 {
                return Err(format!("timeout waiting for {}", kind));
            }
            let ev = ready[0];
            if ev.events & EPOLLIN == 0 {
                return Err(format!("rtasr {}", if ev.events & EPOLLERR != 0 { "err" } else { "hup" }));
            }
            match self.asr.read_event_into(&mut self.event, 4096) {
                Ok(_) => {}
                Err(Errno::Again) => continue,
                Err(e) => return Err(format!("rtasr_read: {}", e.code())),
            }
            if print_event(&String::from_utf8_lossy(&self.event)) == kind {
                return Ok(());
            }
        }
    }

    fn steps(&mut self, tone: &[u8]) -> Result<(), String> {
        let asr = &self.asr;
        report("set transport", unit(asr.set_param("transport", "websocket")))?;
        report("set autoflush", unit(asr.set_autoflush(AUTOFLUSH)))?;
        println!("autoflush: {}", asr.autoflush().map_err(|_| "autoflush: failed")?);
        report("connect", unit(asr.connect()))?;
        self.until("session.updated")?;

        report("send_event", unit(self.asr.send_event(ITEM)))?;
        report("write", bytes(self.asr.write(tone)))?;
        report("flush", unit(self.asr.flush()))?;
        self.until(COMPLETED)?;

        report("write", bytes(self.asr.write(tone)))?;
        report("clear", unit(self.asr.clear()))?;
        self.until("input_audio_buffer.cleared")?;
        report("flush", unit(self.asr.flush()))?;
        self.until("input_audio_buffer.committed")?;

        report("write", bytes(self.asr.write(tone)))?;
        report("flush", unit(self.asr.flush()))?;
        self.until(COMPLETED)
    }
}

fn main() {
    let ep = Epoll::new().unwrap_or_else(|e| {
        println!("ep_create: {}", e.code());
        std::process::exit(1)
    });
    let asr = Rtasr::new().unwrap_or_else(|e| {
        println!("rtasr_create: {}", e.code());
        std::process::exit(1)
    });
    if let Err(e) = ep.add(asr.fd(), WATCH) {
        println!("ep_ctl add: {}", e.code());
        std::process::exit(1);
    }
    println!("rtasr_controls started");
    // 100 ms of a steady non-silent level: pcm16 LE mono at 24 kHz.
    let tone: Vec<u8> = std::iter::repeat(3000i16.to_le_bytes()).take(2400).flatten().collect();
    let mut run = Run { ep, asr, event: Vec::new() };
    let result = run.steps(&tone);
    if let Err(msg) = &result {
        println!("{}", msg);
    }
    match run.asr.status() {
        Ok(json) => println!("status: {}", json),
        Err(_) => println!("status: failed"),
    }
    let Run { ep, asr, .. } = run;
    let closed = asr.close();
    let _ = ep.close();
    if result.is_err() || closed.is_err() {
        std::process::exit(1);
    }
}
