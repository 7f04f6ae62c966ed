//! mic_rtasr: SPEAR's mic_rtasr sample with the spear_guest crate (the Rust
//! twin of guest/c/samples/c_mic_rtasr.c, same output).
//!
//! Opens a microphone (24 kHz mono pcm16, 20 ms frames, the `device` source
//! with no fallback to the stub) and a realtime speech-recognition fd (the
//! websocket transport, server VAD after 600 ms of silence, flush on close),
//! then one epoll loop: every mic frame goes to `Rtasr::write`, every rtasr
//! event is printed: a transcription event's `delta`, else its
//! `transcript`, else its `text` on a line of its own, any other event as
//! `event_type=TYPE`. Ends with exit 0 at the first HUP or ERR of either fd
//! (`mic hup`, `rtasr err`, ...), exit 1 when a set-up call fails.
//!
//! On a headless machine `spearpy run --mic-file SPEECH.wav` makes the
//! `device` source read that file (its end is the mic's HUP), and
//! `--rtasr-url ws://...` names the realtime transcription server.
//! With `--status` it also prints `autoflush: JSON` after connecting and
//! `status: JSON` (rtasr get-status) at the end.

use spear_guest::epoll::{EPOLLERR, EPOLLHUP, EPOLLIN};
use spear_guest::{json, Epoll, Errno, Event, Mic, Rtasr};

const WATCH: i32 = EPOLLIN | EPOLLERR | EPOLLHUP;
const MIC_PARAMS: &str = r#"{"sample_rate_hz":24000,"channels":1,"format":"pcm16","frame_ms":20,"source":"device","fallback":{"to_stub":false}}"#;
const AUTOFLUSH: &str = r#"{"strategy":"server_vad","vad":{"silence_ms":600},"flush_on_close":true}"#;

fn print_event(event: &str, warned_stub: &mut bool) {
    let v = match json::parse(event) {
        Ok(v) => v,
        Err(_) => return println!("event_bytes={}", event.len()),
    };
    let kind = match v.get("type").as_str() {
        Some(t) => t,
        None => return println!("event_bytes={}", event.len()),
    };
    // Only the stub transport's events start with "transcription." (a real
    // server's are conversation.item.input_audio_transcription.*).
    if !*warned_stub && kind.starts_with("transcription.") {
        *warned_stub = true;
        println!("warning: rtasr appears to be using stub transport (text is fake 'a's)");
        println!("hint: set the realtime transcription URL (--rtasr-url) and its key");
    }
    let text = ["delta", "transcript", "text"].iter().find_map(|k| v.get(k).as_str());
    match text {
        Some(t) if kind.contains("transcription") => println!("{}", t),
        _ => println!("event_type={}", kind),
    }
}

fn failed(what: &'static str) -> impl Fn(Errno) -> String {
    move |e| format!("{} failed: {}", what, e.code())
}

fn set_up(mic: &Mic, asr: &Rtasr) -> Result<(), String> {
    if let Err(e) = mic.set_params(MIC_PARAMS) {
        let status = mic.status().map(|s| format!("\nmic_status: {}", s)).unwrap_or_default();
        return Err(format!("mic_ctl failed: {}{}", e.code(), status));
    }
    asr.set_param("transport", "websocket").map_err(failed("rtasr set transport"))?;
    asr.set_param("backend", "openai-realtime-asr").map_err(failed("rtasr set backend"))?;
    asr.set_param("model", "gpt-4o-mini-transcribe").map_err(failed("rtasr set model"))?;
    asr.set_autoflush(AUTOFLUSH).map_err(failed("rtasr set autoflush"))?;
    asr.connect().map_err(failed("rtasr connect"))
}

fn main() {
    let show_status = std::env::args().nth(1).as_deref() == Some("--status");
    let ep = Epoll::new().unwrap_or_else(|e| {
        println!("ep_create failed: {}", e.code());
        std::process::exit(1)
    });
    let mic = Mic::new().unwrap_or_else(|e| {
        println!("mic_create failed: {}", e.code());
        std::process::exit(1)
    });
    let asr = Rtasr::new().unwrap_or_else(|e| {
        println!("rtasr_create failed: {}", e.code());
        std::process::exit(1)
    });
    let added = ep.add(mic.fd(), WATCH).map_err(failed("ep_ctl add mic_fd"));
    let added = added.and_then(|_| ep.add(asr.fd(), WATCH).map_err(failed("ep_ctl add asr_fd")));
    if let Err(msg) = added.and_then(|_| set_up(&mic, &asr)) {
        println!("{}", msg);
        std::process::exit(1); // mic, asr and ep close as the process ends
    }

    println!("mic_rtasr started");
    if show_status {
        match asr.autoflush() {
            Ok(json) => println!("autoflush: {}", json),
            Err(e) => println!("autoflush: failed {}", e.code()),
        }
    }
    let mut ready = [Event::default(); 64];
    let mut pcm: Vec<u8> = Vec::new();
    let mut event: Vec<u8> = Vec::new();
    let mut warned_stub = false;
    'run: loop {
        let n = match ep.wait(&mut ready, 2000) {
            Ok(n) => n,
            Err(e) => {
                println!("ep_wait failed: {}", e.code());
                break;
            }
        };
        for ev in &ready[..n] {
            let name = if ev.fd == mic.fd() { "mic" } else if ev.fd == asr.fd() { "rtasr" } else { "" };
            if ev.events & EPOLLHUP != 0 || ev.events & EPOLLERR != 0 {
                if !name.is_empty() {
                    println!("{} {}", name, if ev.events & EPOLLHUP != 0 { "hup" } else { "err" });
                }
                break 'run;
            }
            if !ev.readable() {
                continue;
            }
            if ev.fd == mic.fd() {
                if mic.read_frame_into(&mut pcm, 65536).is_err() {
                    continue;
                }
                match asr.write(&pcm) {
                    Ok(_) | Err(Errno::Again) => {} // a full send queue drops the frame, as SPEAR's does
                    Err(e) => println!("rtasr_write failed: {}", e.code()),
                }
            } else if ev.fd == asr.fd() {
                if asr.read_event_into(&mut event, 65536).is_err() {
                    continue;
                }
                print_event(&String::from_utf8_lossy(&event), &mut warned_stub);
            }
        }
    }
    if show_status {
        match asr.status() {
            Ok(json) => println!("status: {}", json),
            Err(e) => println!("status: failed {}", e.code()),
        }
    }
    let _ = asr.close();
    let _ = mic.close();
    let _ = ep.close();
}
