//! hostile: a tool that panics (on wasm a panic aborts: the call traps).
//! The trap must fail that call only; the model calls a healthy tool next
//! and the send completes in the same instance. Exit 0 when it does.

use spear_guest::{tool, Errno, Reply, Session};

fn boom(_args: &str) -> Result<String, String> {
    panic!("this tool always panics");
}
fn echo(args: &str) -> Result<String, String> {
    Ok(args.to_string())
}
tool!(fn boom_tool => boom);
tool!(fn echo_tool => echo);

fn run() -> Result<i32, String> {
    let e = |e: Errno| e.to_string();
    let s = Session::new().map_err(e)?;
    s.user("Try boom, then echo.").map_err(e)?;
    s.register_tool(boom_tool, r#"{"name":"boom","parameters":{"type":"object","properties":{}}}"#).map_err(e)?;
    s.register_tool(
        echo_tool,
        r#"{"name":"echo","parameters":{"type":"object","properties":{"text":{"type":"string"}}}}"#,
    )
    .map_err(e)?;
    let reply = Reply::parse(&s.send_auto().and_then(|r| r.text()).map_err(e)?)?;
    if let Some(code) = reply.error() {
        println!("error body: {}", code);
        return Ok(2);
    }
    let answer = reply.content().unwrap_or("");
    println!("answer: {}", answer);
    Ok(if answer.contains("still alive") { 0 } else { 3 })
}

fn main() {
    let code = run().unwrap_or_else(|e| {
        println!("{}", e);
        1
    });
    std::process::exit(code);
}
