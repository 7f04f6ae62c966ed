//! big_output: a tool returning 200 KiB, past the host's first buffer. The
//! crate answers ENOSPC with the size it needs, keeps the output, and the
//! host calls again with a bigger buffer. Session 1 keeps the default
//! max_tool_output_bytes (64 KiB) and must see output_too_large; session 2
//! raises it to 256 KiB and must get the whole dump through.

use std::cell::Cell;

use spear_guest::{Errno, Reply, Session};

const DUMP_BYTES: usize = 200 * 1024;

thread_local! {
    static HANDLER_RUNS: Cell<u32> = Cell::new(0);
    static HOST_CALLS: Cell<u32> = Cell::new(0);
}

fn dump(_args: &str) -> Result<String, String> {
    HANDLER_RUNS.with(|c| c.set(c.get() + 1));
    Ok(format!("{{\"data\":\"{}\",\"end\":\"END_OF_DUMP\"}}", "x".repeat(DUMP_BYTES)))
}

// Written out instead of tool! to count how often the host calls.
extern "C" fn dump_tool(args: i32, args_len: i32, out: i32, out_len_ptr: i32) -> i32 {
    HOST_CALLS.with(|c| c.set(c.get() + 1));
    unsafe { spear_guest::tool::dispatch(dump, args, args_len, out, out_len_ptr) }
}

const SCHEMA: &str = r#"{"name":"dump","description":"Return a large document.","parameters":{"type":"object","properties":{}}}"#;

fn run(max_output: Option<i64>) -> Result<String, String> {
    let e = |e: Errno| e.to_string();
    let s = Session::new().map_err(e)?;
    s.user("Fetch the document.").map_err(e)?;
    s.register_tool(dump_tool, SCHEMA).map_err(e)?;
    if let Some(n) = max_output {
        s.set_param("max_tool_output_bytes", n).map_err(e)?;
    }
    let reply = Reply::parse(&s.send_auto().and_then(|r| r.text()).map_err(e)?)?;
    match reply.error() {
        Some(code) => Err(format!("error body: {}", code)),
        None => Ok(reply.content().unwrap_or("").to_string()),
    }
}

fn main() {
    let result = run(None).and_then(|limited| {
        let calls_before = HOST_CALLS.with(|c| c.get());
        run(Some(256 * 1024)).map(|raised| (limited, calls_before, raised))
    });
    let (limited, calls_before, raised) = match result {
        Ok(r) => r,
        Err(msg) => {
            println!("{}", msg);
            std::process::exit(2);
        }
    };
    let limited_ok = limited.contains("output_too_large");
    println!("default limit: {}", if limited_ok { "output_too_large" } else { &limited });
    println!("raised limit: {}", raised);
    let (runs, calls) = (HANDLER_RUNS.with(|c| c.get()), HOST_CALLS.with(|c| c.get()));
    println!("handler runs: {}, host calls: {} then {}", runs, calls_before, calls - calls_before);
    let ok = limited_ok && raised.contains("received the dump") && runs == 1 && calls >= 2;
    std::process::exit(if ok { 0 } else { 3 });
}
