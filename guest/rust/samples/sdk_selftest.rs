//! sdk_selftest: unit checks of the spear_guest crate, run inside wasm with
//! no model: the JSON reader and quoting, Errno, Reply, the tool!
//! buffer protocol driven by hand the way the host drives it, SSF frames,
//! MCP tool names and the epoll record layout.
//! Exit status = the number of failed checks.

use std::cell::Cell;

use spear_guest::{json, mcp, ssf, tool, Errno, Event, Frame, Param, Reply};

thread_local!(static RUNS: Cell<u32> = Cell::new(0));

fn repeat(args: &str) -> Result<String, String> {
    RUNS.with(|r| r.set(r.get() + 1));
    let n = json::parse(args)?.get("n").as_i64().ok_or("n must be an integer")?;
    if n < 0 {
        return Err("n must not be negative".to_string());
    }
    Ok("ab".repeat(n as usize))
}
tool!(fn repeat_tool => repeat);

/// Calls the tool the way the host does: args + NUL, capacity in, length out.
fn call(args: &str, out: &mut [u8], cap: u32) -> (i32, u32) {
    let with_nul = format!("{}\0", args);
    let mut len = cap;
    let p = |x: *const u8| x as usize as i32;
    let rc = repeat_tool(p(with_nul.as_ptr()), args.len() as i32, p(out.as_mut_ptr()), p(&mut len as *mut u32 as *const u8));
    (rc, len)
}

fn runs() -> u32 {
    RUNS.with(|r| r.get())
}

fn main() {
    let mut failed = 0;
    let mut check = |what: &str, ok: bool| {
        failed += !ok as i32;
        println!("{:<52} {}", what, if ok { "ok" } else { "FAILED" });
    };

    let doc = r#" {"a": [1, -2.5e3, true, null], "s": "caf\u00e9 \ud83d\ude00\t\"q\"", "big": 9007199254740993} "#;
    let v = json::parse(doc);
    check("parse a document with whitespace", v.is_ok());
    let v = v.unwrap_or(json::Value::Null);
    check("numbers, bools and null in arrays",
        v.get("a").at(0).as_i64() == Some(1) && v.get("a").at(1).as_f64() == Some(-2500.0)
            && v.get("a").at(2).as_bool() == Some(true) && v.get("a").at(3).is_null());
    check("strings unescape \\u, surrogate pairs, \\t, \\\"", v.get("s").as_str() == Some("café 😀\t\"q\""));
    check("integers keep every digit", v.get("big").as_i64() == Some(9_007_199_254_740_993));
    check("missing keys and indexes are null", v.get("nope").is_null() && v.get("a").at(9).is_null());
    check("trailing garbage is refused", json::parse("{} x").is_err());
    check("unterminated input is refused", json::parse("{\"a\":").is_err() && json::parse("\"abc").is_err());
    check("deep nesting is refused, not a stack overflow", json::parse(&"[".repeat(100_000)).is_err());
    let tricky = "a\"b\\c\n\u{1}é";
    check("quote round-trips", json::parse(&json::quote(tricky)).ok().and_then(|v| v.as_str().map(String::from)) == Some(tricky.to_string()));
    check("quote escapes controls as \\u00XX", json::quote("\u{1}") == "\"\\u0001\"");

    check("Errno maps known codes both ways", Errno::from_code(-24) == Errno::MFile && Errno::MFile.code() == -24);
    check("Errno keeps unknown codes", Errno::from_code(-99) == Errno::Other(-99) && Errno::Other(-99).code() == -99);
    check("check() passes non-negative results", spear_guest::check(7) == Ok(7) && spear_guest::check(-9) == Err(Errno::BadFd));

    let reply = Reply::parse(r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"sum","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"_spear":{"iterations":1}}"#);
    let reply = reply.unwrap_or(Reply { value: json::Value::Null });
    let calls = reply.tool_calls();
    check("Reply::tool_calls", calls.len() == 1 && calls[0].id == "c1" && calls[0].name == "sum" && calls[0].arguments == "{\"a\":1}");
    check("Reply content/finish_reason/_spear", reply.content().is_none() && reply.finish_reason() == Some("tool_calls") && reply.spear().get("iterations").as_i64() == Some(1));
    check("Reply::error reads error.code", Reply::parse(r#"{"error":{"code":"tool_call_limit","message":"m"}}"#).ok().and_then(|r| r.error()) == Some("tool_call_limit".to_string()));

    let mut out = vec![0u8; 400];
    let (rc, len) = call(r#"{"n":3}"#, &mut out, 64);
    check("tool: small output fits", rc == 0 && &out[..len as usize] == b"ababab");
    let (rc, len) = call(r#"{"n":100}"#, &mut out, 16);
    check("tool: -28 with the needed length", rc == -28 && len == 200);
    let before = runs();
    let (rc, len) = call(r#"{"n":100}"#, &mut out, 400);
    check("tool: retry gets the kept output, no second run", rc == 0 && len == 200 && runs() == before);
    call(r#"{"n":50}"#, &mut out, 16);
    let before = runs();
    let (rc, len) = call(r#"{"n":60}"#, &mut out, 400);
    check("tool: different args after -28 run the handler again", rc == 0 && len == 120 && runs() == before + 1);
    let (rc, len) = call(r#"{"n":-1}"#, &mut out, 400);
    check("tool: Err(msg) fails with the message in the buffer", rc == spear_guest::tool::TOOL_FAILED && &out[..len as usize] == b"n must not be negative");
    check("function index of a tool is a table slot", repeat_tool as spear_guest::RawTool as usize > 0);

    check("Errno knows the stream and audio codes", Errno::from_code(-32) == Errno::Pipe && Errno::from_code(-107) == Errno::NotConn
        && Errno::from_code(-104) == Errno::ConnReset && Errno::DQuot.code() == -122 && Errno::NotConn.name() == "ENOTCONN");

    // SSF v1, against bytes written out by hand (what spearpy.streams.ssf.build(7, 258, b"hi", b"{}") gives).
    let mut want = b"SPST\x01\x00\x20\x00\x02\x00\x00\x00\x07\x00\x00\x00\x02\x01\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00".to_vec();
    want.extend_from_slice(b"{}hi");
    let built = Frame::data(7, 258, b"{}", b"hi").to_bytes();
    check("ssf: a DATA frame encodes byte for byte", built == want);
    let parsed = Frame::parse(&built);
    check("ssf: parse gives the fields back", parsed == Ok(Frame { msg_type: ssf::SSF_DATA, flags: 0, stream_id: 7, seq: 258, meta: b"{}", data: b"hi" }));
    check("ssf: meta_str", parsed.ok().and_then(|f| f.meta_str()) == Some("{}"));
    let mut ext = built[..32].to_vec();
    ext[6] = 36; // header_len 36: four extension bytes, skipped
    ext.extend_from_slice(b"XXXX{}hi");
    check("ssf: header extension bytes are skipped", Frame::parse(&ext).map(|f| (f.meta, f.data)) == Ok((&b"{}"[..], &b"hi"[..])));
    let mut bad_magic = built.clone();
    bad_magic[0] = b'X';
    let mut bad_version = built.clone();
    bad_version[4] = 2;
    let mut short_header = built.clone();
    short_header[6] = 31;
    check("ssf: bad magic, version, header_len are EINVAL",
        Frame::parse(&bad_magic) == Err(Errno::Inval) && Frame::parse(&bad_version) == Err(Errno::Inval) && Frame::parse(&short_header) == Err(Errno::Inval));
    check("ssf: lengths that do not add up are EINVAL",
        Frame::parse(&built[..built.len() - 1]) == Err(Errno::Inval) && Frame::parse(&[built.clone(), b"!".to_vec()].concat()) == Err(Errno::Inval)
            && Frame::parse(&built[..20]) == Err(Errno::Inval));
    let mut huge = built.clone();
    huge[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
    check("ssf: a meta_len near 4 GiB is EINVAL, not a panic", Frame::parse(&huge) == Err(Errno::Inval));
    let mut reused = vec![1, 2, 3];
    Frame::data(1, 1, b"", b"").encode_into(&mut reused);
    check("ssf: encode_into replaces the buffer", reused.len() == 32 && Frame::parse(&reused).map(|f| f.data.is_empty() && f.meta.is_empty()) == Ok(true));

    check("mcp: tool_name is SPEAR's", mcp::tool_name("time", "get_current_time") == "mcp__dGltZQ__Z2V0X2N1cnJlbnRfdGltZQ"
        && mcp::tool_name("fs", "read_file") == "mcp__ZnM__cmVhZF9maWxl");
    check("mcp: split_tool_name round-trips odd ids", ["a", "ab", "abc", "x?", "é ü/", "srv??"].iter()
        .all(|id| mcp::split_tool_name(&mcp::tool_name(id, "t_1")) == Some((id.to_string(), "t_1".to_string()))));
    check("mcp: other names are None", mcp::split_tool_name("sum").is_none() && mcp::split_tool_name("mcp__ZnM").is_none()
        && mcp::split_tool_name("mcp____cmVhZF9maWxl").is_none() && mcp::split_tool_name("mcp__ZnN__cmVhZF9maWxl").is_none()
        && mcp::split_tool_name("mcp__Z!__eA").is_none());
    check("Param from a string slice is a JSON array", Param::from(&["a\"b", "c"][..]) == Param::Raw("[\"a\\\"b\",\"c\"]".to_string())
        && Param::from(Vec::<String>::new()) == Param::Raw("[]".to_string()));
    check("epoll Event is the host's 8-byte record", std::mem::size_of::<Event>() == 8
        && Event { fd: 1, events: 0x10 }.hangup() && !Event { fd: 1, events: 0x1 }.hangup());

    println!("failed: {}", failed);
    std::process::exit(failed);
}
