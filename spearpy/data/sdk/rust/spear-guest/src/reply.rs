//! Reading response bodies: the chat completion JSON plus `_spear`.

use crate::json::{self, Value};

/// One call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model sent them (a JSON string).
    pub arguments: String,
}

/// A parsed response body.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub value: Value,
}

impl Reply {
    pub fn parse(body: &str) -> Result<Reply, String> {
        json::parse(body).map(|value| Reply { value })
    }

    fn message(&self) -> &Value {
        self.value.get("choices").at(0).get("message")
    }

    /// `choices[0].message.content`, if it is a string.
    pub fn content(&self) -> Option<&str> {
        self.message().get("content").as_str()
    }

    pub fn finish_reason(&self) -> Option<&str> {
        self.value.get("choices").at(0).get("finish_reason").as_str()
    }

    /// The tool calls of `choices[0].message` (arguments kept as text).
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        let text = |v: &Value| v.as_str().unwrap_or("").to_string();
        self.message()
            .get("tool_calls")
            .as_array()
            .iter()
            .map(|c| ToolCall {
                id: text(c.get("id")),
                name: text(c.get("function").get("name")),
                arguments: match c.get("function").get("arguments") {
                    Value::Str(s) => s.clone(),
                    _ => String::new(),
                },
            })
            .collect()
    }

    /// `error.code` (or `error.message`) when the body is an error.
    pub fn error(&self) -> Option<String> {
        let e = self.value.get("error");
        if e.is_null() {
            return None;
        }
        let code = e.get("code").as_str().or_else(|| e.get("message").as_str());
        Some(code.unwrap_or("error").to_string())
    }

    /// The host's `_spear` object (backend, model, iterations, usage...).
    pub fn spear(&self) -> &Value {
        self.value.get("_spear")
    }
}
