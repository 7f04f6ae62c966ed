//! chat: one plain send, the body read starting from a 16-byte buffer so
//! the ENOSPC grow-and-retry path runs. Prints the assistant text.
//! Exit 0 ok, 1 a hostcall failed, 2 the body was an error.

use spear_guest::{Reply, Session};

fn run() -> Result<i32, String> {
    let s = Session::new().map_err(|e| format!("cchat_create: {}", e))?;
    s.system("You are a friendly assistant. Answer in one sentence.").map_err(|e| e.to_string())?;
    s.user("Say hello to the wasm guest.").map_err(|e| e.to_string())?;
    let resp = s.send_plain().map_err(|e| format!("cchat_send: {}", e))?;
    let (body, grows) = resp.text_with_capacity(16).map_err(|e| format!("cchat_recv: {}", e))?;
    println!("recv: {} bytes, grew {}", body.len(), if grows > 0 { "yes" } else { "NO" });
    if grows == 0 {
        return Ok(1);
    }
    let reply = Reply::parse(&body)?;
    if let Some(code) = reply.error() {
        println!("error body: {}", code);
        return Ok(2);
    }
    println!("assistant: {}", reply.content().unwrap_or(""));
    let metrics = spear_guest::json::parse(&resp.metrics().map_err(|e| e.to_string())?)?;
    match metrics.get("total_tokens").as_i64() {
        Some(n) => println!("metrics: total_tokens={}", n),
        None => return Ok(1),
    }
    Ok(0)
}

fn main() {
    let code = run().unwrap_or_else(|e| {
        println!("{}", e);
        1
    });
    std::process::exit(code);
}
