//! {{name}}: a spearpy guest with one tool, `{{tool}}`.
//!
//! main() opens a chat session, registers the tool and sends with
//! AUTO_TOOL_CALL: the host runs the whole loop (the model asks for the tool,
//! the host calls it here, hands the result back) and returns the final
//! answer. The SDK is the spear-guest crate in vendor/; docs/guest-sdk.md in
//! the spearpy repository documents it.

use spear_guest::{json, tool, Reply, Session};

/// What the model is told about the tool (an OpenAI function schema).
const SCHEMA: &str = r#"{"type":"function","function":{"name":"{{tool}}","description":"Count the words in a text.","parameters":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}}"#;

/// The tool: the JSON arguments the model chose in, a JSON result (or an
/// error the model is told about) out. Replace the body with what {{tool}}
/// should do.
fn {{tool}}(args: &str) -> Result<String, String> {
    let v = json::parse(args)?;
    let text = v.get("text").as_str().ok_or("text must be a string")?;
    let words = text.split_whitespace().count();
    Ok(format!("{{\"words\":{}}}", words))
}
// The raw-ABI function the host calls: extern "C" fn {{tool}}_tool(i32, i32, i32, i32) -> i32.
tool!(fn {{tool}}_tool => {{tool}});

fn main() {
    let question = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "How many words are in 'the quick brown fox'?".to_string());
    let s = Session::new().expect("cchat_create");
    s.user(&question).expect("write_msg");
    s.register_tool({{tool}}_tool, SCHEMA).expect("register_tool");
    let body = s.send_auto().and_then(|r| r.text()).expect("send");
    let reply = Reply::parse(&body).expect("a JSON body");
    // A failed send still answers: a body with "error" (no model, upstream down...).
    match reply.error() {
        Some(code) => {
            println!("error: {} ({})", code, body);
            std::process::exit(2)
        }
        None => println!("answer: {}", reply.content().unwrap_or("")),
    }
} // the session is closed when `s` drops
