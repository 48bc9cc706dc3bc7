//! Chat templates. Jinja is not interpreted: the template text in `tokenizer.chat_template` is
//! recognised by its markers (as llama.cpp's built-in templates are) and applied by hand.

/// A recognised chat format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChatFormat {
    /// `<|im_start|>role\ncontent<|im_end|>\n` (SmolLM2, Qwen, many others).
    ChatMl,
    /// `<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>` (Llama 3).
    Llama3,
}

impl ChatFormat {
    /// Recognises a template; `None` when it matches no known format.
    pub fn detect(template: &str) -> Option<ChatFormat> {
        if template.contains("<|start_header_id|>") && template.contains("<|eot_id|>") {
            Some(ChatFormat::Llama3)
        } else if template.contains("<|im_start|>") {
            Some(ChatFormat::ChatMl)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ChatFormat::ChatMl => "chatml",
            ChatFormat::Llama3 => "llama3",
        }
    }

    /// The prompt text for an optional system message and one user message, with the
    /// assistant's turn opened. BOS is not included (the tokenizer adds it if the model wants).
    pub fn render(self, system: Option<&str>, user: &str) -> String {
        let mut s = String::new();
        match self {
            ChatFormat::ChatMl => {
                if let Some(sys) = system {
                    s.push_str(&format!("<|im_start|>system\n{sys}<|im_end|>\n"));
                }
                s.push_str(&format!(
                    "<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
                ));
            }
            ChatFormat::Llama3 => {
                if let Some(sys) = system {
                    s.push_str(&format!(
                        "<|start_header_id|>system<|end_header_id|>\n\n{}<|eot_id|>",
                        sys.trim()
                    ));
                }
                s.push_str(&format!(
                    "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>\
                     <|start_header_id|>assistant<|end_header_id|>\n\n",
                    user.trim()
                ));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_and_renders_chatml() {
        let t = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";
        let f = ChatFormat::detect(t).unwrap();
        assert_eq!(f, ChatFormat::ChatMl);
        assert_eq!(
            f.render(None, "Hi"),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn detects_and_renders_llama3() {
        let t = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}";
        let f = ChatFormat::detect(t).unwrap();
        assert_eq!(f, ChatFormat::Llama3);
        assert_eq!(
            f.render(Some("Be brief."), " Hi "),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        assert_eq!(ChatFormat::detect("{{ messages }}"), None);
    }
}
